/* fuzz_tokenizer.c — libFuzzer target: any bytes as tokenizer.json.  Loading fails with a message, or the tokenizer
 * encodes a fixed multilingual string and invalid UTF-8, every id is inside the vocabulary, and decode and the
 * streaming detokenizer of those ids succeed. */
#include "fuzz_common.h"

static const char TEXT[] = "Hello, world! caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8B 12345\n\t  x\xE3\x81 "
                           "<s></s><|endoftext|> \xC3";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fz_write("tokenizer.json", data, size);
    gp_tokenizer *t = NULL;
    if (gp_tokenizer_load(p, &t) != GP_OK) {
        FZ_CHECK(t == NULL && gp_errmsg()[0] != 0);
        return 0;
    }
    const int32_t V = gp_tokenizer_n_vocab(t);
    for (int add = 0; add < 2; add++) {
        int32_t *ids = NULL, n = 0;
        if (gp_tokenizer_encode(t, TEXT, sizeof TEXT - 1, add, &ids, &n) != GP_OK) continue;
        for (int32_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < V);
        char *text = NULL;
        size_t len;
        if (gp_tokenizer_decode(t, ids, n, add, &text, &len) == GP_OK) gp_free(text);
        gp_detok *d;
        if (gp_detok_init(t, add, &d) == GP_OK) {
            const char *piece;
            for (int32_t i = 0; i < n; i++)
                if (gp_detok_push(d, ids[i], &piece) != GP_OK) break;
            gp_detok_flush(d, &piece);
            gp_detok_free(d);
        }
        gp_free(ids);
    }
    gp_tokenizer_free(t);
    return 0;
}
