/* fuzz_detok.c — libFuzzer target for the streaming detokenizer's promise: bytes become ids (2 bytes each, over
 * [0, n_vocab + 16) so padding ids occur) for a fixture tokenizer picked by the first byte, skip_special by its
 * low bit; the streamed pieces (with gp_detok_piece_len, pieces may hold NUL) concatenate to gp_tokenizer_decode. */
#include "fuzz_common.h"

#define N_TOK 5
static gp_tokenizer *g_tok[N_TOK];
static int g_loaded;

static void setup(void) {
    if (g_loaded) return;
    g_loaded = 1;
    static const char *rel[N_TOK] = {"tokenizers/llama2", "tokenizers/llama3", "tokenizers/gemma3",
                                     "tokenizers/mistral_nemo", NULL};
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
    if (size < 3) return 0;
    const gp_tokenizer *t = g_tok[(data[0] >> 1) % N_TOK];
    if (!t) t = g_tok[N_TOK - 1];
    FZ_CHECK(t != NULL);
    const int skip = data[0] & 1;
    const int32_t V = gp_tokenizer_n_vocab(t);
    int32_t n = (int32_t)((size - 1) / 2), ids[512];
    if (n > 512) n = 512;
    for (int32_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)data[1 + 2 * i] | (uint32_t)data[2 + 2 * i] << 8;
        /* small ids (bytes, specials) twice as likely as the rest of the vocabulary */
        ids[i] = (int32_t)(x & 1 ? (x >> 1) % 512 : (uint32_t)(((uint64_t)x * 2654435761u) % (uint32_t)(V + 16)));
    }
    char *want = NULL;
    size_t wlen = 0;
    FZ_CHECK(gp_tokenizer_decode(t, ids, n, skip, &want, &wlen) == GP_OK);
    gp_detok *d;
    FZ_CHECK(gp_detok_init(t, skip, &d) == GP_OK);
    size_t off = 0;
    for (int32_t i = 0; i <= n; i++) {
        const char *piece;
        FZ_CHECK((i < n ? gp_detok_push(d, ids[i], &piece) : gp_detok_flush(d, &piece)) == GP_OK);
        size_t k = gp_detok_piece_len(d);
        FZ_CHECK(off + k <= wlen && memcmp(want + off, piece, k) == 0);
        off += k;
    }
    FZ_CHECK(off == wlen);
    gp_detok_free(d);
    gp_free(want);
    return 0;
}
