/* test_lora.c — LoRA adapters (gp_adapter_load / gp_ctx_set_adapters): the fixtures' lora.greedy_48 references
 * (transformers, adapter merged) reproduced token for token from both layouts (adapter-mlx/, adapter-peft/) of every
 * fixture model that carries them; hot swap on one context (A, none, A) equal to fresh contexts; a cache built
 * under one set never reused under another (prompt reuse and cache files); one model serving two contexts with
 * different adapters; and bad adapters refused with a message naming the file and field. */
#include "test.h"

#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const LORA_MODELS[] = {"tiny-llama", "tiny-qwen3"};
static const char *const LAYOUTS[] = {"adapter-mlx", "adapter-peft"};

static char *adapter_dir(const char *model, const char *layout) {
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/models/%s/%s", gp_test_fixtures(), model, layout);
    return buf;
}

/* Greedy max_new tokens of ids on c (a fresh generation: the prompt is reused only when the cache allows). */
static int greedy(gp_ctx *c, const gp_model *m, const int32_t *ids, int n, int max_new, gp_gen_result *r) {
    gp_gen_config g = gp_model_gen_config(m);
    g.do_sample = 0;
    g.max_new_tokens = max_new;
    return gp_generate(c, ids, n, &g, NULL, NULL, r) == GP_OK;
}

TEST(lora_greedy_48_both_layouts) {
    for (size_t mi = 0; mi < 2; mi++) {
        const char *name = LORA_MODELS[mi];
        fx_refs refs;
        if (fx_refs_load(name, &refs)) continue;
        gp_model *m = fx_load_model(name, 0);
        const cJSON *want_all = cJSON_GetObjectItem(cJSON_GetObjectItem(refs.json, "lora"), "greedy_48");
        REQUIRE(m && cJSON_IsArray(want_all));
        for (size_t li = 0; li < 2; li++) {
            gp_adapter *a = NULL;
            CHECK_STATUS(gp_adapter_load(m, adapter_dir(name, LAYOUTS[li]), &a), GP_OK);
            if (!a) continue;
            gp_ctx *c = NULL;
            CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
            CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_OK);
            int ok = 0, total = 0, pi = 0;
            const cJSON *p;
            cJSON_ArrayForEach(p, cJSON_GetObjectItem(refs.json, "prompts")) {
                int32_t *ids = NULL, *want = NULL;
                int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
                int nw = fx_int_array(cJSON_GetArrayItem(want_all, pi), &want);
                gp_gen_result r;
                if (n > 0 && nw > 0 && greedy(c, m, ids, n, 48, &r)) {
                    int fd = fx_first_diff(r.tokens, r.n_tokens, want, nw);
                    ok += fd < 0;
                    if (fd >= 0) {
                        NOTE("%s %s prompt %d: differs at token %d", name, LAYOUTS[li], pi, fd);
                        fx_print_ids("got ", r.tokens, r.n_tokens);
                        fx_print_ids("want", want, nw);
                    }
                    gp_gen_result_free(&r);
                }
                total++, pi++;
                free(ids), free(want);
            }
            NOTE("%s %s (rank %d, scale %g, %d linears): %d/%d lora.greedy_48 identical to transformers", name,
                 LAYOUTS[li], (int)gp_adapter_rank(a), (double)gp_adapter_scale(a), (int)gp_adapter_n_targets(a), ok,
                 total);
            CHECK(total > 0 && ok == total);
            gp_ctx_free(c);
            gp_adapter_free(a);
        }
        gp_model_free(m);
        fx_refs_free(&refs);
    }
}

/* Last-position logits of ids on a fresh context with adapter a (NULL: none). */
static void logits_with(gp_model *m, gp_adapter *a, const int32_t *ids, int n, float *out) {
    gp_ctx *c = NULL;
    CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    if (a) CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, ids, n, NULL, out), GP_OK);
    gp_ctx_free(c);
}

TEST(lora_hot_swap_and_cache_provenance) {
    gp_model *m = fx_load_model("tiny-llama", 0);
    if (!m) return;
    gp_adapter *a = NULL, *b = NULL;
    REQUIRE(gp_adapter_load(m, adapter_dir("tiny-llama", "adapter-mlx"), &a) == GP_OK);
    REQUIRE(gp_adapter_load(m, adapter_dir("tiny-llama", "adapter-peft"), &b) == GP_OK);
    const int V = gp_model_n_vocab(m);
    const int32_t ids[6] = {1, 4205, 16334, 20084, 28747, 13};
    float *fa = malloc(V * sizeof(float)), *f0 = malloc(V * sizeof(float)), *x = malloc(V * sizeof(float));
    logits_with(m, a, ids, 6, fa);
    logits_with(m, NULL, ids, 6, f0);
    CHECK(fx_max_abs_diff(fa, f0, V) > 1e-3); /* the adapter changes the logits */
    /* one context: A, none, A, then A at scale 0.5 -> each equal to a fresh context (bit for bit) */
    gp_ctx *c = NULL;
    REQUIRE(gp_ctx_init(m, fx_params(), &c) == GP_OK);
    gp_adapter *const sets[3] = {a, NULL, a};
    float *const want[3] = {fa, f0, fa};
    for (int k = 0; k < 3; k++) {
        gp_ctx_reset(c);
        CHECK_STATUS(gp_ctx_set_adapters(c, &sets[k], NULL, sets[k] ? 1 : 0), GP_OK);
        CHECK_STATUS(gp_ctx_eval(c, ids, 6, NULL, x), GP_OK);
        CHECK(memcmp(x, want[k], V * sizeof(float)) == 0);
    }
    /* the two layouts hold the same numbers: equal within float32 rounding of the transposes (exact here) */
    logits_with(m, b, ids, 6, x);
    NOTE("mlx-lm vs PEFT layout of the same adapter: max |logit diff| %.3g (tolerance 1e-5)", fx_max_abs_diff(x, fa, V));
    CHECK(fx_max_abs_diff(x, fa, V) <= 1e-5);
    /* provenance: a prompt prefilled under A is not reused under none (gp_ctx_prefill reports 0 reused) */
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_OK);
    int32_t reused = -1;
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK(reused > 0); /* same set: reused */
    CHECK_STATUS(gp_ctx_set_adapters(c, NULL, NULL, 0), GP_OK);
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK_EQ_INT(reused, 0);
    CHECK(memcmp(x, f0, V * sizeof(float)) == 0);
    /* cache files record the set: saved under A, loaded under none -> not reused */
    char *dir = gp_test_tmpdir(), path[1200];
    snprintf(path, sizeof path, "%s/a.cache", dir);
    CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_OK);
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK_STATUS(gp_ctx_cache_save(c, path), GP_OK);
    CHECK_STATUS(gp_ctx_set_adapters(c, NULL, NULL, 0), GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_OK);
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK_EQ_INT(reused, 0);
    CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_OK);
    CHECK_STATUS(gp_ctx_prefill(c, ids, 6, x, &reused), GP_OK);
    CHECK(reused > 0);
    CHECK(memcmp(x, fa, V * sizeof(float)) == 0);
    gp_ctx_free(c);
    gp_adapter_free(a), gp_adapter_free(b);
    gp_model_free(m);
    free(fa), free(f0), free(x), free(dir);
}

TEST(lora_fuse_writes_a_merged_model) { /* identity with mlx_lm.fuse: python/tests/test_fuse.py */
    gp_model *m = fx_load_model("tiny-llama", 0);
    if (!m) return;
    gp_adapter *a = NULL;
    REQUIRE(gp_adapter_load(m, adapter_dir("tiny-llama", "adapter-peft"), &a) == GP_OK);
    char *dir = gp_test_tmpdir(), path[1200];
    snprintf(path, sizeof path, "%s/fused", dir);
    CHECK_STATUS(gp_model_fuse(m, &a, NULL, 1, path, 0), GP_OK);
    CHECK_STATUS(gp_model_fuse(m, &a, NULL, 1, path, 0), GP_ERR_INVALID_ARG); /* holds a model now */
    gp_model *f = NULL;
    CHECK_STATUS(gp_model_load(path, NULL, &f), GP_OK);
    if (f) { /* the merged bf16 weights round the terms: the logits stay close to the unfused run */
        const int V = gp_model_n_vocab(m);
        const int32_t ids[6] = {1, 4205, 16334, 20084, 28747, 13};
        float *x = malloc(V * sizeof(float)), *y = malloc(V * sizeof(float));
        logits_with(m, a, ids, 6, x);
        logits_with(f, NULL, ids, 6, y);
        NOTE("fused (bf16 weights) vs unfused adapter: max |logit diff| %.3g (tolerance 0.05)", fx_max_abs_diff(x, y, V));
        CHECK(fx_max_abs_diff(x, y, V) < 0.05);
        free(x), free(y);
    }
    gp_model_free(f);
    gp_adapter_free(a);
    gp_model_free(m);
    free(dir);
}
