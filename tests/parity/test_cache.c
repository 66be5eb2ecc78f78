/* test_cache.c — the KV cache system: prefix reuse and multi-turn equal fresh runs (every fixture model), cache
 * files round-trip and refuse what does not fit, rotating caches (identical when large enough, bounded memory,
 * chunk-invariant), quantized caches (KL divergence against float32 on every fixture model), forks are
 * copy-on-write, and the memory limit refuses a prefill instead of growing. */
#include "fixtures.h"
#include "model/ctx.h"
#include "test.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The longest prompt of a fixture model (caller frees), n in *n. */
static int32_t *longest_prompt(const char *name, int *n) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s/reference.json", name);
    char *rj = gp_test_fixture(rel);
    cJSON *ref = rj ? fx_read_json(rj) : NULL;
    free(rj);
    int32_t *best = NULL;
    *n = 0;
    const cJSON *p, *prompts = ref ? cJSON_GetObjectItem(ref, "prompts") : NULL;
    cJSON_ArrayForEach(p, prompts) {
        int32_t *v;
        int k = fx_int_array(cJSON_GetObjectItem(p, "ids"), &v);
        if (k > *n) {
            free(best);
            best = v;
            *n = k;
        } else free(v);
    }
    cJSON_Delete(ref);
    return best;
}

/* Greedy-extends ids[0..n) by `extra` tokens in a fresh context; returns the full sequence (caller frees). */
static int32_t *extend_greedy(gp_model *m, const int32_t *ids, int n, int extra) {
    const int32_t V = gp_model_n_vocab(m);
    int32_t *seq = malloc((size_t)(n + extra) * sizeof *seq);
    memcpy(seq, ids, (size_t)n * sizeof *seq);
    float *lg = malloc((size_t)V * sizeof(float));
    gp_ctx *c;
    if (gp_ctx_init(m, fx_params(), &c) != GP_OK) abort();
    gp_ctx_eval(c, ids, n, NULL, lg);
    for (int s = 0; s < extra; s++) {
        int32_t id = 0;
        for (int32_t i = 1; i < V; i++)
            if (lg[i] > lg[id]) id = i;
        seq[n + s] = id;
        gp_ctx_eval(c, &id, 1, NULL, lg);
    }
    gp_ctx_free(c);
    free(lg);
    return seq;
}

static void check_reuse(const char *name) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    int n;
    int32_t *p = longest_prompt(name, &n);
    REQUIRE(p && n > 4);
    const int32_t V = gp_model_n_vocab(m);
    /* turn 1: the prompt + 12 generated tokens; turn 2: all of that + 6 more "user" tokens */
    int32_t *seq = extend_greedy(m, p, n, 12);
    int total = n + 12;
    int32_t *turn2 = malloc((size_t)(total + 6) * sizeof *turn2);
    memcpy(turn2, seq, (size_t)total * sizeof *turn2);
    for (int i = 0; i < 6; i++) turn2[total + i] = p[i % n];
    float *fresh = malloc((size_t)V * sizeof(float)), *reused = malloc((size_t)V * sizeof(float));
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, turn2, total + 6, NULL, fresh), GP_OK);
    gp_ctx_reset(c);
    int32_t r;
    CHECK_STATUS(gp_ctx_prefill(c, seq, total - 1, reused, &r), GP_OK); /* turn 1 as a generate loop leaves it */
    CHECK_EQ_INT(r, 0);
    CHECK_STATUS(gp_ctx_prefill(c, turn2, total + 6, reused, &r), GP_OK);
    CHECK_EQ_INT(r, total - 1);
    CHECK(!memcmp(fresh, reused, (size_t)V * sizeof(float)));
    /* a prompt that shares only part of the cache: trimmed (or recomputed where a ring cannot trim) */
    int32_t *alt = malloc((size_t)(n + 3) * sizeof *alt);
    memcpy(alt, seq, (size_t)n * sizeof *alt);
    alt[n] = 5, alt[n + 1] = 6, alt[n + 2] = 7;
    CHECK_STATUS(gp_ctx_prefill(c, alt, n + 3, reused, &r), GP_OK);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, alt, n + 3, NULL, fresh), GP_OK);
    CHECK(!memcmp(fresh, reused, (size_t)V * sizeof(float)));
    NOTE("%s: multi-turn reuse kept %d positions; partial-prefix prompt reused %d; logits identical to fresh runs", name,
         total - 1, r);
    /* the same prompt twice reuses all but the last token */
    CHECK_STATUS(gp_ctx_prefill(c, alt, n + 3, reused, &r), GP_OK);
    CHECK_EQ_INT(r, n + 2);
    CHECK(!memcmp(fresh, reused, (size_t)V * sizeof(float)));
    gp_ctx_free(c);
    free(alt);
    free(turn2);
    free(seq);
    free(p);
    free(fresh);
    free(reused);
    gp_model_free(m);
}

TEST(cache_reuse_tiny_llama) { check_reuse("tiny-llama"); }
TEST(cache_reuse_tiny_llama3) { check_reuse("tiny-llama3"); }
TEST(cache_reuse_tiny_qwen2) { check_reuse("tiny-qwen2"); }
TEST(cache_reuse_tiny_qwen3) { check_reuse("tiny-qwen3"); }
TEST(cache_reuse_tiny_gemma2) { check_reuse("tiny-gemma2"); }
TEST(cache_reuse_tiny_gemma3) { check_reuse("tiny-gemma3"); }
TEST(cache_reuse_shakespeare_llama) { check_reuse("shakespeare-llama"); }

TEST(cache_file_round_trip_and_refusals) {
    gp_model *m = fx_load_model("tiny-gemma3", 0), *other = fx_load_model("tiny-gemma2", 0);
    if (!m || !other) {
        gp_model_free(m);
        gp_model_free(other);
        return;
    }
    int n;
    int32_t *p = longest_prompt("tiny-gemma3", &n);
    const int32_t V = gp_model_n_vocab(m);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    char *dir = gp_test_tmpdir();
    char *path = gp_path_join(dir, "prefix.safetensors");
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, p, n - 5, NULL, NULL), GP_OK);
    CHECK_STATUS(gp_ctx_cache_save(c, path), GP_OK);
    gp_ctx_free(c);
    /* load into a fresh context and finish the prompt == the whole prompt at once */
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_OK);
    int32_t nt;
    const int32_t *toks = gp_ctx_tokens(c, &nt);
    CHECK(nt == n - 5 && !memcmp(toks, p, (size_t)nt * sizeof *toks));
    int32_t r;
    CHECK_STATUS(gp_ctx_prefill(c, p, n, a, &r), GP_OK);
    CHECK_EQ_INT(r, n - 5);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, p, n, NULL, b), GP_OK);
    CHECK(!memcmp(a, b, (size_t)V * sizeof(float)));
    gp_ctx_free(c);
    /* another model: refused, naming the fingerprint; the context stays usable */
    REQUIRE(gp_ctx_init(other, fx_params(), &c) == GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_ERR_STATE);
    CHECK(strstr(gp_errmsg(), "model_fingerprint") && strstr(gp_errmsg(), path));
    CHECK_STATUS(gp_ctx_eval(c, p, 3, NULL, NULL), GP_OK);
    gp_ctx_free(c);
    /* a context with another cache kind, or too small an n_ctx */
    gp_ctx_params cp = fx_default_params();
    cp.kv_bits = 8;
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_ERR_STATE);
    CHECK(strstr(gp_errmsg(), "kv_bits") != NULL);
    gp_ctx_free(c);
    cp = fx_default_params();
    cp.n_ctx = 8;
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_ERR_RANGE);
    CHECK(strstr(gp_errmsg(), "n_ctx") != NULL);
    CHECK_EQ_INT(gp_ctx_n_past(c), 0);
    gp_ctx_free(c);
    /* truncated file */
    char *text;
    size_t len;
    REQUIRE(gp_read_file(path, 1u << 30, &text, &len) == GP_OK);
    char *trunc = gp_path_join(dir, "trunc.safetensors");
    FILE *f = fopen(trunc, "wb");
    fwrite(text, 1, len - 40, f);
    fclose(f);
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, p, 4, NULL, NULL), GP_OK);
    CHECK(gp_ctx_cache_load(c, trunc) != GP_OK);
    CHECK(strstr(gp_errmsg(), trunc) != NULL);
    CHECK_EQ_INT(gp_ctx_n_past(c), 4); /* unchanged */
    /* wrong version */
    char *ver = memmem(text, len, "\"version\":\"1\"", 13);
    REQUIRE(ver);
    ver[11] = '9';
    char *wv = gp_path_join(dir, "v9.safetensors");
    f = fopen(wv, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    CHECK_STATUS(gp_ctx_cache_load(c, wv), GP_ERR_UNSUPPORTED);
    CHECK(strstr(gp_errmsg(), "version") != NULL);
    /* not a cache file at all */
    char *mf = gp_test_fixture("models/tiny-gemma3/model.safetensors");
    if (mf) {
        CHECK_STATUS(gp_ctx_cache_load(c, mf), GP_ERR_FORMAT);
        free(mf);
    }
    CHECK_EQ_INT(gp_ctx_n_past(c), 4);
    gp_ctx_free(c);
    free(text);
    free(wv);
    free(trunc);
    free(path);
    free(dir);
    free(a);
    free(b);
    free(p);
    gp_model_free(m);
    gp_model_free(other);
}

/* Rotating cache: with max_kv_size >= the sequence nothing is evicted (identical logits); with a small one, memory
 * stays bounded and chunked/unchunked prefill agree bit for bit. */
TEST(cache_rotating) {
    const char *models[] = {"tiny-llama", "tiny-gemma2"};
    for (int mi = 0; mi < 2; mi++) {
        gp_model *m = fx_load_model(models[mi], 0);
        if (!m) return;
        int n;
        int32_t *p = longest_prompt(models[mi], &n);
        int32_t *seq = extend_greedy(m, p, n, 40);
        int total = n + 40;
        const int32_t V = gp_model_n_vocab(m);
        float *a = malloc((size_t)total * V * sizeof(float)), *b = malloc((size_t)total * V * sizeof(float));
        gp_eval_opts all = {.all_logits = 1};
        gp_ctx *c;
        REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
        CHECK_STATUS(gp_ctx_eval(c, seq, total, &all, a), GP_OK);
        gp_ctx_free(c);
        gp_ctx_params cp = fx_default_params();
        cp.max_kv_size = total;
        cp.keep = 4;
        cp.prefill_chunk = 7;
        REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
        CHECK_STATUS(gp_ctx_eval(c, seq, total, &all, b), GP_OK);
        CHECK(!memcmp(a, b, (size_t)total * V * sizeof(float)));
        gp_ctx_free(c);
        /* small ring: bounded, and one-token-at-a-time decoding equals a chunked prefill */
        cp.max_kv_size = 12;
        cp.keep = 3;
        cp.prefill_chunk = 512;
        REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
        CHECK_STATUS(gp_ctx_eval(c, seq, total, &all, a), GP_OK);
        for (int l = 0; l < gp_model_n_layers(m); l++) CHECK(gp_ctx_layer_cap(c, l) <= 12);
        uint64_t bytes = gp_ctx_kv_bytes(c);
        gp_ctx_free(c);
        cp.prefill_chunk = 1;
        REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
        for (int t = 0; t < total; t++) CHECK_STATUS(gp_ctx_eval(c, seq + t, 1, NULL, b + (size_t)t * V), GP_OK);
        CHECK(!memcmp(a, b, (size_t)total * V * sizeof(float)));
        CHECK(gp_ctx_kv_bytes(c) == bytes);
        /* the ring evicted: logits differ from the unbounded cache after position 12 */
        NOTE("%s: rotating 12/keep 3 over %d positions holds %llu bytes", models[mi], total, (unsigned long long)bytes);
        gp_ctx_free(c);
        free(a);
        free(b);
        free(seq);
        free(p);
        gp_model_free(m);
    }
}

/* Mean (and max) of KL(p_f32 || p_quant) of the next-token distributions at n positions. */
static double mean_kl(const float *ref, const float *q, int n, int32_t V, double *max_kl) {
    double sum = 0;
    *max_kl = 0;
    for (int t = 0; t < n; t++) {
        double kl = gp_logits_kl(ref + (size_t)t * V, q + (size_t)t * V, V);
        sum += kl;
        if (kl > *max_kl) *max_kl = kl;
    }
    return sum / n;
}

/* The prompt is prefilled (its keys go into the cache quantized from quantized_kv_start on), then 24 greedy tokens
 * are decoded one at a time; KL is measured at those 24 decode steps, where every key comes from the cache. */
#define KL_STEPS 24
static void decode_logits(gp_model *m, const gp_ctx_params *cp, const int32_t *p, int n, const int32_t *next,
                          float *out, uint64_t *bytes) {
    gp_ctx *c;
    const int32_t V = gp_model_n_vocab(m);
    if (gp_ctx_init(m, cp, &c) != GP_OK) abort();
    CHECK_STATUS(gp_ctx_eval(c, p, n, NULL, NULL), GP_OK);
    for (int t = 0; t < KL_STEPS; t++) CHECK_STATUS(gp_ctx_eval(c, next + t, 1, NULL, out + (size_t)t * V), GP_OK);
    *bytes = gp_ctx_kv_bytes(c);
    gp_ctx_free(c);
}

TEST(cache_quantized_kl_every_model) {
    for (int mi = 0; mi < GP_N_FIXTURE_MODELS; mi++) {
        const char *name = GP_FIXTURE_MODELS[mi];
        gp_model *m = fx_load_model(name, 0);
        if (!m) return;
        int n;
        int32_t *p = longest_prompt(name, &n);
        int32_t *seq = extend_greedy(m, p, n, KL_STEPS);
        const int32_t V = gp_model_n_vocab(m);
        float *ref = malloc((size_t)KL_STEPS * V * sizeof(float)), *q = malloc((size_t)KL_STEPS * V * sizeof(float));
        uint64_t f32_bytes, qb;
        gp_ctx_params cp = fx_default_params();
        decode_logits(m, &cp, seq, n, seq + n, ref, &f32_bytes);
        const int bits[] = {8, 4};
        double kl8 = 0;
        for (int bi = 0; bi < 2; bi++) {
            cp.kv_bits = bits[bi];
            cp.kv_group_size = 32;
            cp.quantized_kv_start = 4;
            decode_logits(m, &cp, seq, n, seq + n, q, &qb);
            double mx, kl = mean_kl(ref, q, KL_STEPS, V, &mx);
            NOTE("%-17s kv_bits %d group 32 start 4: cache %6llu B (f32 %6llu B), KL mean %.2e max %.2e", name,
                 bits[bi], (unsigned long long)qb, (unsigned long long)f32_bytes, kl, mx);
            CHECK(qb < f32_bytes);
            /* stated bounds: 8-bit is near-lossless; 4-bit is coarser (and never better than 8-bit) but bounded */
            if (bits[bi] == 8) {
                CHECK(kl < 1e-3);
                kl8 = kl;
            } else CHECK(kl < 0.25 && kl >= kl8);
        }
        /* quantized and rotating together: bounded memory, still runs */
        cp.kv_bits = 8;
        cp.max_kv_size = 16;
        cp.keep = 2;
        decode_logits(m, &cp, seq, n, seq + n, q, &qb);
        NOTE("%-17s kv_bits 8 + max_kv_size 16 keep 2: cache %6llu B", name, (unsigned long long)qb);
        CHECK(qb < f32_bytes);
        free(ref);
        free(q);
        free(seq);
        free(p);
        gp_model_free(m);
    }
}

TEST(cache_fork_is_copy_on_write_and_named) {
    gp_model *m = fx_load_model("tiny-qwen3", 0);
    if (!m) return;
    int n;
    int32_t *p = longest_prompt("tiny-qwen3", &n);
    const int32_t V = gp_model_n_vocab(m);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    CHECK_STR(gp_ctx_cache_name(c), "default");
    CHECK_STATUS(gp_ctx_eval(c, p, n - 2, NULL, NULL), GP_OK);
    uint64_t before = gp_ctx_kv_bytes(c);
    CHECK_STATUS(gp_ctx_cache_fork(c, "default", "branch"), GP_OK);
    CHECK_STATUS(gp_ctx_cache_fork(c, "default", "branch"), GP_ERR_STATE);
    CHECK_STATUS(gp_ctx_cache_select(c, "branch"), GP_OK);
    int32_t other[2] = {11, 12};
    CHECK_STATUS(gp_ctx_eval(c, other, 2, NULL, NULL), GP_OK); /* writes into the fork only */
    CHECK_EQ_INT(gp_ctx_n_past(c), n);
    CHECK_STATUS(gp_ctx_cache_select(c, "default"), GP_OK);
    CHECK_EQ_INT(gp_ctx_n_past(c), n - 2);
    CHECK_STATUS(gp_ctx_eval(c, p + n - 2, 2, NULL, a), GP_OK);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, p, n, NULL, b), GP_OK);
    CHECK(!memcmp(a, b, (size_t)V * sizeof(float)));
    CHECK(gp_ctx_kv_bytes(c) >= before);
    CHECK_STATUS(gp_ctx_cache_drop(c, "default"), GP_ERR_STATE);
    CHECK_STATUS(gp_ctx_cache_drop(c, "branch"), GP_OK);
    CHECK_STATUS(gp_ctx_cache_drop(c, "branch"), GP_ERR_MISSING);
    CHECK_STATUS(gp_ctx_trim(c, n - 3), GP_OK);
    CHECK_EQ_INT(gp_ctx_n_past(c), n - 3);
    CHECK_STATUS(gp_ctx_trim(c, n), GP_ERR_RANGE);
    gp_ctx_free(c);
    free(a);
    free(b);
    free(p);
    gp_model_free(m);
}

TEST(cache_memory_limit_refuses_prefill) {
    gp_model *m = fx_load_model("tiny-llama", 0);
    if (!m) return;
    gp_ctx_params cp = fx_default_params();
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    gp_mem_info mi;
    CHECK_STATUS(gp_ctx_memory(c, &mi), GP_OK);
    CHECK(mi.weight_bytes > 0 && mi.scratch_bytes > 0 && mi.peak_rss_bytes > 0);
    gp_ctx_free(c);
    cp.mem_limit_bytes = mi.scratch_bytes + 64 * 1024; /* room for a few hundred positions, not 1000 */
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    int32_t ids[1000];
    for (int i = 0; i < 1000; i++) ids[i] = 100 + i;
    CHECK_STATUS(gp_ctx_eval(c, ids, 1000, NULL, NULL), GP_ERR_NOMEM);
    CHECK(strstr(gp_errmsg(), "memory limit") != NULL);
    CHECK_EQ_INT(gp_ctx_n_past(c), 0);
    CHECK_STATUS(gp_ctx_eval(c, ids, 10, NULL, NULL), GP_OK);
    gp_ctx_free(c);
    gp_model_free(m);
}
