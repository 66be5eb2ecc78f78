/* fuzz_ctx_ops.c — stateful libFuzzer target over the context's cache operations: the first byte picks the cache
 * kind (float32 / 8-bit / 4-bit quantized / bfloat16, unbounded / rotating) and the prefill chunk; then each byte is an
 * operation (prefill with prefix reuse, one-token eval, trim, select / fork / drop a named cache, reset) with its
 * operands.  Oracle: a final prefill of a sequence taken from the input gives logits bit-identical to a fresh
 * context's prefill of the same sequence (the invariance claim: results depend neither on chunking nor on reuse). */
#include "fuzz_common.h"

#define N_CTX 96
#define MAX_SEQ 24

static gp_model *g_m;
static float *g_a, *g_b;

typedef struct {
    const uint8_t *p;
    size_t n;
} rd;

static int rd_byte(rd *r) {
    if (!r->n) return -1;
    r->n--;
    return *r->p++;
}

/* up to max ids from the input (ids drawn over the embedded model's 32000) */
static int32_t rd_ids(rd *r, int32_t *ids, int32_t max) {
    int len = rd_byte(r);
    if (len < 0) return 0;
    int32_t n = 1 + len % max, k = 0;
    while (k < n) {
        int a = rd_byte(r), b = rd_byte(r);
        if (a < 0 || b < 0) break;
        ids[k++] = (int32_t)(((uint32_t)a | (uint32_t)b << 8) % 32000u);
    }
    return k;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) { /* the model loads once, outside every unit's timeout */
    FZ_CHECK(gp_model_load(FZ_MODEL, NULL, &g_m) == GP_OK);
    g_a = malloc((size_t)gp_model_n_vocab(g_m) * sizeof(float));
    g_b = malloc((size_t)gp_model_n_vocab(g_m) * sizeof(float));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd r = {data, size};
    int kind = rd_byte(&r);
    if (kind < 0) return 0;
    gp_ctx_params p = gp_ctx_default_params();
    p.n_threads = 1;
    p.n_ctx = N_CTX;
    static const int32_t bits[4] = {0, 8, 4, 16}, chunks[4] = {512, 1, 3, 7};
    p.kv_bits = bits[kind % 4];
    p.kv_group_size = 32;
    p.prefill_chunk = chunks[(kind / 4) % 4];
    if (kind & 0x40) p.max_kv_size = 48;
    gp_ctx *c;
    FZ_CHECK(gp_ctx_init(g_m, &p, &c) == GP_OK);
    static const char *names[3] = {"default", "a", "b"};
    int32_t ids[MAX_SEQ];
    for (int op; (op = rd_byte(&r)) >= 0 && r.n > 8;) {
        int32_t n;
        switch (op % 8) {
        case 0:
        case 1:
            if ((n = rd_ids(&r, ids, MAX_SEQ)) > 0) gp_ctx_prefill(c, ids, n, NULL, NULL);
            break;
        case 2:
            ids[0] = (int32_t)(op * 37 % 32000);
            gp_ctx_eval(c, ids, 1, NULL, NULL);
            break;
        case 3: gp_ctx_trim(c, (int32_t)(rd_byte(&r) & 0x7f) % (gp_ctx_n_past(c) + 1)); break;
        case 4: gp_ctx_cache_select(c, names[(op >> 3) % 3]); break;
        case 5: gp_ctx_cache_fork(c, gp_ctx_cache_name(c), names[(op >> 3) % 3]); break;
        case 6: gp_ctx_cache_drop(c, names[(op >> 3) % 3]); break;
        case 7: gp_ctx_reset(c); break;
        }
    }
    int32_t n = rd_ids(&r, ids, MAX_SEQ);
    if (n > 0 && gp_ctx_prefill(c, ids, n, g_a, NULL) == GP_OK) {
        gp_ctx *f;
        FZ_CHECK(gp_ctx_init(g_m, &p, &f) == GP_OK);
        FZ_CHECK(gp_ctx_prefill(f, ids, n, g_b, NULL) == GP_OK);
        FZ_CHECK(memcmp(g_a, g_b, (size_t)gp_model_n_vocab(g_m) * sizeof(float)) == 0);
        gp_ctx_free(f);
    }
    gp_ctx_free(c);
    return 0;
}
