/* fuzz_encode.c — libFuzzer target: any bytes as text to encode with a fixture tokenizer (the first byte picks one
 * of llama2 / llama3 / qwen3 / the embedded model's).  Every id is inside the vocabulary, decode succeeds,
 * and for byte-level tokenizers decode(encode(valid UTF-8 text)) is the text. */
#include "fuzz_common.h"

#define N_TOK 4
static gp_tokenizer *g_tok[N_TOK];
static int g_loaded;

static void setup(void) {
    if (g_loaded) return;
    g_loaded = 1;
    static const char *rel[N_TOK] = {"tokenizers/llama2", "tokenizers/llama3", "tokenizers/qwen3", NULL};
    for (int k = 0; k < N_TOK; k++) {
        char dir[1024];
        if (rel[k]) snprintf(dir, sizeof dir, "%s/%s", fz_fixtures(), rel[k]);
        else snprintf(dir, sizeof dir, "%s", FZ_MODEL);
        if (gp_tokenizer_load_dir(dir, &g_tok[k]) != GP_OK) g_tok[k] = NULL;
    }
}

/* Loading the tokenizers (seconds under ASan) happens once, outside every unit's timeout. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    gp_tokenizer *t = g_tok[data[0] % N_TOK];
    if (!t) t = g_tok[N_TOK - 1];
    FZ_CHECK(t != NULL);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL, n = 0;
    FZ_CHECK(gp_tokenizer_encode(t, text, len, data[0] & 8, &ids, &n) == GP_OK);
    const int32_t V = gp_tokenizer_n_vocab(t);
    for (int32_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < V);
    char *back = NULL;
    size_t blen = 0;
    FZ_CHECK(gp_tokenizer_decode(t, ids, n, 1, &back, &blen) == GP_OK);
    int byte_level = t == g_tok[1] || t == g_tok[2];
    int has_special_text = memmem(text, len, "<|", 2) != NULL || memchr(text, 0, len) != NULL;
    if (byte_level && !(data[0] & 8) && !has_special_text) {
        /* valid UTF-8 input round-trips exactly through a byte-level BPE */
        char *again = NULL;
        int32_t *ids2 = NULL, n2 = 0;
        FZ_CHECK(gp_tokenizer_encode(t, back, blen, 0, &ids2, &n2) == GP_OK);
        FZ_CHECK(gp_tokenizer_decode(t, ids2, n2, 1, &again, NULL) == GP_OK);
        FZ_CHECK(strlen(again) == strlen(back) && !strcmp(again, back));
        gp_free(again);
        gp_free(ids2);
    }
    gp_free(back);
    gp_free(ids);
    return 0;
}
