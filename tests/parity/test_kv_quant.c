/* test_kv_quant.c — regressions of issue 17 items 8 and 6 on every fixture model. Item 8: with a quantized KV cache (4
 * and 8 bits, and bfloat16 rows: kv_bits 16), the logits of every position are identical bit for bit for every prefill
 * chunk size and after prefix reuse, because the current chunk's keys/values are read through the same quantization as
 * cached rows.  Item 6: a cache saved after decoding (its rings grown by doubling past the held positions) loads, and
 * the loaded context continues with exactly the saving context's logits. */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static const char *const MODELS[] = {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2",
                                     "tiny-gemma3"};

/* A deterministic prompt of n ids below V. */
static void make_ids(int32_t *ids, int n, int32_t V) {
    uint32_t s = 7;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        ids[i] = (int32_t)((s >> 8) % (uint32_t)(V > 2 ? V - 1 : 1)) + 1;
    }
}

static gp_ctx_params qparams(int bits, int chunk) {
    gp_ctx_params p = fx_default_params();
    p.n_ctx = 128;
    p.kv_bits = bits;
    p.kv_group_size = 32;
    p.quantized_kv_start = 3;
    p.prefill_chunk = chunk;
    p.n_threads = 1;
    return p;
}

TEST(kv_quant_logits_identical_for_every_chunking_and_reuse) {
    enum { N = 23 };
    const int chunks[] = {1, 5, N};
    int checked = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
        gp_model *m = fx_load_model(MODELS[mi], 0);
        if (!m) return;
        const int32_t V = gp_model_n_vocab(m);
        int32_t ids[N];
        make_ids(ids, N, V);
        float *ref = malloc(sizeof(float) * (size_t)V * N), *got = malloc(sizeof(float) * (size_t)V * N);
        for (int bi = 0; bi < 3; bi++) {
            const int bits = (int[]){4, 8, 16}[bi];
            for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                gp_ctx_params p = qparams(bits, chunks[ci]);
                gp_ctx *c;
                REQUIRE(gp_ctx_init(m, &p, &c) == GP_OK);
                gp_eval_opts o = {0};
                o.all_logits = 1;
                CHECK_STATUS(gp_ctx_eval(c, ids, N, &o, ci ? got : ref), GP_OK);
                if (ci && memcmp(ref, got, sizeof(float) * (size_t)V * N)) {
                    double e = 0;
                    for (size_t i = 0; i < (size_t)V * N; i++) e = fmax(e, fabs(ref[i] - got[i]));
                    NOTE("%s kv_bits %d: prefill chunk %d differs from chunk %d (max |d| %.3g)", MODELS[mi], bits,
                         chunks[ci], chunks[0], e);
                    gp_test_failed = 1;
                }
                gp_ctx_free(c);
                checked++;
            }
            /* prefix reuse: the first 15 positions cached, the rest through gp_ctx_prefill */
            gp_ctx_params p = qparams(bits, 5);
            gp_ctx *c;
            REQUIRE(gp_ctx_init(m, &p, &c) == GP_OK);
            int32_t reused = 0;
            CHECK_STATUS(gp_ctx_eval(c, ids, 15, NULL, NULL), GP_OK);
            CHECK_STATUS(gp_ctx_prefill(c, ids, N, got, &reused), GP_OK);
            CHECK_EQ_INT(reused, 15);
            if (memcmp(ref + (size_t)V * (N - 1), got, sizeof(float) * (size_t)V)) {
                NOTE("%s kv_bits %d: last logits after prefix reuse differ from a fresh prefill", MODELS[mi], bits);
                gp_test_failed = 1;
            }
            gp_ctx_free(c);
            checked++;
        }
        free(ref);
        free(got);
        gp_model_free(m);
    }
    NOTE("%d (model, bits, chunking | reuse) runs compared bit for bit with prefill chunk 1 (want: all identical)",
         checked);
}

/* A context with params p evaluates a prompt of 9 ids, then 12 one at a time (its rings grow 9 -> 18 -> 36 slots,
 * 21 hold positions), and saves its cache to path; a context with params q loads it.  Returns 1 when the loaded
 * context holds the 21 positions and its logits of ids[21] are the saving context's, bit for bit. */
static int saved_cache_continues(gp_model *m, const gp_ctx_params *p, const gp_ctx_params *q, const int32_t *ids,
                                 const char *path) {
    const int32_t V = gp_model_n_vocab(m);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    gp_ctx *c = NULL, *d = NULL;
    int same = 0;
    if (a && b && gp_ctx_init(m, p, &c) == GP_OK && gp_ctx_init(m, q, &d) == GP_OK) {
        CHECK_STATUS(gp_ctx_eval(c, ids, 9, NULL, NULL), GP_OK);
        for (int i = 9; i < 21; i++) CHECK_STATUS(gp_ctx_eval(c, ids + i, 1, NULL, NULL), GP_OK);
        CHECK_STATUS(gp_ctx_cache_save(c, path), GP_OK);
        CHECK_STATUS(gp_ctx_cache_load(d, path), GP_OK);
        CHECK_EQ_INT(gp_ctx_n_past(d), 21);
        CHECK_STATUS(gp_ctx_eval(c, ids + 21, 1, NULL, a), GP_OK);
        CHECK_STATUS(gp_ctx_eval(d, ids + 21, 1, NULL, b), GP_OK);
        same = !memcmp(a, b, sizeof(float) * (size_t)V);
    } else
        gp_test_failed = 1;
    gp_ctx_free(c);
    gp_ctx_free(d);
    free(a);
    free(b);
    return same;
}

TEST(cache_file_saved_after_decoding_loads) {
    char *dir = gp_test_tmpdir();
    char *path = gp_path_join(dir, "decoded.safetensors");
    int checked = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
        gp_model *m = fx_load_model(MODELS[mi], 0);
        if (!m) break;
        int32_t ids[40];
        make_ids(ids, 40, gp_model_n_vocab(m));
        for (int bi = 0; bi < 3; bi++) {
            const int bits = (int[]){0, 4, 16}[bi];
            const gp_ctx_params p = qparams(bits, 8);
            if (!saved_cache_continues(m, &p, &p, ids, path)) {
                NOTE("%s kv_bits %d: the loaded cache continues differently", MODELS[mi], bits);
                gp_test_failed = 1;
            }
            checked++;
        }
        gp_model_free(m);
    }
    NOTE("%d (model, kv_bits 0|4|16) caches saved after decoding, loaded and continued (want: identical logits)",
         checked);
    remove(path);
    free(path);
    free(dir);
}

/* Cache files of float32 and bfloat16 rows are one format: in the bf16 mode (whose keys and values are bf16 values)
 * a cache saved with either kind of rows loads into a context with the other and continues with the saving
 * context's logits, bit for bit. */
TEST(cache_file_float32_and_bfloat16_rows_interchange) {
    char *dir = gp_test_tmpdir();
    char *path = gp_path_join(dir, "rows.safetensors");
    int checked = 0;
    for (size_t mi = 0; mi < sizeof MODELS / sizeof MODELS[0]; mi++) {
        gp_model *m = fx_load_model(MODELS[mi], 0);
        if (!m) break;
        int32_t ids[22];
        make_ids(ids, 22, gp_model_n_vocab(m));
        for (int dir_ = 0; dir_ < 2; dir_++) { /* 0: float32 rows saved, bfloat16 rows load; 1: the other way */
            gp_ctx_params p = qparams(dir_ ? 16 : 32, 8), q = qparams(dir_ ? 32 : 16, 8);
            p.compute = q.compute = GP_COMPUTE_BF16;
            if (!saved_cache_continues(m, &p, &q, ids, path)) {
                NOTE("%s: a cache of %s rows loaded into %s rows continues differently", MODELS[mi],
                     dir_ ? "bfloat16" : "float32", dir_ ? "float32" : "bfloat16");
                gp_test_failed = 1;
            }
            checked++;
        }
        gp_model_free(m);
    }
    NOTE("%d (model, float32 -> bfloat16 rows | back) cache files loaded and continued in the bf16 mode (want: "
         "identical logits)", checked);
    remove(path);
    free(path);
    free(dir);
}
