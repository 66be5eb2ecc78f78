/* fuzz_cache_file.c — libFuzzer target: any bytes as a KV-cache file for the embedded model.  gp_ctx_cache_load
 * fails with a message and leaves the context as it was, or loads at most n_ctx positions after which a prefill of
 * one more token works. */
#include "fuzz_common.h"

static gp_model *g_m;
static gp_ctx *g_c;

int LLVMFuzzerInitialize(int *argc, char ***argv) { /* the model loads once, outside every unit's timeout */
    FZ_CHECK(gp_model_load(FZ_MODEL, NULL, &g_m) == GP_OK);
    gp_ctx_params p = gp_ctx_default_params();
    p.n_threads = 1;
    p.n_ctx = 256;
    FZ_CHECK(gp_ctx_init(g_m, &p, &g_c) == GP_OK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gp_ctx_reset(g_c);
    const char *path = fz_write("cache.safetensors", data, size);
    if (gp_ctx_cache_load(g_c, path) != GP_OK) {
        FZ_CHECK(gp_ctx_n_past(g_c) == 0 && gp_errmsg()[0] != 0);
        return 0;
    }
    int32_t n = gp_ctx_n_past(g_c), k;
    FZ_CHECK(n >= 0 && n <= 256);
    const int32_t *ids = gp_ctx_tokens(g_c, &k);
    FZ_CHECK(k == n && (n == 0 || ids != NULL));
    for (int32_t i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < gp_model_n_vocab(g_m));
    if (n < 256) {
        int32_t one = 13;
        FZ_CHECK(gp_ctx_eval(g_c, &one, 1, NULL, NULL) == GP_OK);
    }
    return 0;
}
