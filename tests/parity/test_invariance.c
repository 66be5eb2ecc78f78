/* test_invariance.c — results must not depend on the prefill chunk size or the thread count (bit for bit), the
 * KV cache must give the same logits as recomputing, sliding-window layers keep no more than their window, and a
 * sharded checkpoint loads to the same numbers as the single file. */
#include "fixtures.h"
#include "model/model.h"
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

/* Runs ids through a fresh context with the given chunk and threads, then 20 single-token decode steps feeding the
 * argmax back; writes the prefill's logits [n, V] and each decode step's logits [20, V]. */
#define DECODE_STEPS 20
static int run_variant(gp_model *m, const int32_t *ids, int n, int chunk, int threads, float *pre, float *dec) {
    gp_ctx_params p = gp_ctx_default_params();
    p.prefill_chunk = chunk;
    p.n_threads = threads;
    gp_ctx *c = NULL;
    if (gp_ctx_init(m, &p, &c) != GP_OK) return -1;
    gp_eval_opts o = {.all_logits = 1};
    int rc = gp_ctx_eval(c, ids, n, &o, pre) == GP_OK ? 0 : -1;
    const int32_t V = gp_model_n_vocab(m);
    const float *last = pre + (size_t)(n - 1) * V;
    for (int s = 0; s < DECODE_STEPS && !rc; s++) {
        int32_t id = 0;
        for (int32_t i = 1; i < V; i++)
            if (last[i] > last[id]) id = i;
        rc = gp_ctx_eval(c, &id, 1, NULL, dec + (size_t)s * V) == GP_OK ? 0 : -1;
        last = dec + (size_t)s * V;
    }
    gp_ctx_free(c);
    return rc;
}

static void check_invariance(const char *name) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s/reference.json", name);
    char *rj = gp_test_fixture(rel);
    cJSON *ref = rj ? fx_read_json(rj) : NULL;
    free(rj);
    if (!ref) {
        gp_model_free(m);
        return;
    }
    /* the longest prompt: for the Gemma fixtures it is longer than the 16-token sliding window */
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts"), *p;
    int32_t *ids = NULL;
    int n = 0;
    cJSON_ArrayForEach(p, prompts) {
        int32_t *v;
        int k = fx_int_array(cJSON_GetObjectItem(p, "ids"), &v);
        if (k > n) {
            free(ids);
            ids = v;
            n = k;
        } else free(v);
    }
    const size_t V = (size_t)gp_model_n_vocab(m);
    float *pre0 = malloc((size_t)n * V * sizeof(float)), *dec0 = malloc(DECODE_STEPS * V * sizeof(float));
    float *pre1 = malloc((size_t)n * V * sizeof(float)), *dec1 = malloc(DECODE_STEPS * V * sizeof(float));
    REQUIRE(run_variant(m, ids, n, 512, 1, pre0, dec0) == 0);
    const int variants[][2] = {{1, 1}, {3, 2}, {7, 2}, {16, 1}, {512, 2}};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        REQUIRE(run_variant(m, ids, n, variants[i][0], variants[i][1], pre1, dec1) == 0);
        int same = !memcmp(pre0, pre1, (size_t)n * V * sizeof(float)) &&
                   !memcmp(dec0, dec1, DECODE_STEPS * V * sizeof(float));
        if (!same) {
            NOTE("%s: chunk %d, %d threads differs from chunk 512, 1 thread: prefill max|Δ| %.3g, decode max|Δ| %.3g",
                 name, variants[i][0], variants[i][1], fx_max_abs_diff(pre0, pre1, (size_t)n * V),
                 fx_max_abs_diff(dec0, dec1, DECODE_STEPS * V));
            gp_test_failed = 1;
        }
    }
    if (!gp_test_failed)
        NOTE("%s: prompt of %d tokens + %d decode steps identical across chunk sizes {1,3,7,16,512} and 1/2 threads", name,
         n, DECODE_STEPS);

    /* sliding-window layers never hold more than the window */
    gp_ctx *c = NULL;
    REQUIRE(gp_ctx_init(m, NULL, &c) == GP_OK);
    float *lg = malloc(V * sizeof(float));
    CHECK_STATUS(gp_ctx_eval(c, ids, n, NULL, lg), GP_OK);
    for (int s = 0; s < DECODE_STEPS; s++) {
        int32_t id = s % 7 + 3;
        CHECK_STATUS(gp_ctx_eval(c, &id, 1, NULL, lg), GP_OK);
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        int32_t cap = gp_ctx_layer_cap(c, l), w = m->cfg.window[l];
        if (w > 0 && cap > w) {
            NOTE("%s: sliding layer %d holds %d slots > window %d", name, l, cap, w);
            gp_test_failed = 1;
        }
        if (w == 0 && cap < n + DECODE_STEPS) {
            NOTE("%s: full layer %d holds %d slots < %d positions", name, l, cap, n + DECODE_STEPS);
            gp_test_failed = 1;
        }
    }
    gp_ctx_free(c);
    free(lg);
    free(pre0);
    free(pre1);
    free(dec0);
    free(dec1);
    free(ids);
    cJSON_Delete(ref);
    gp_model_free(m);
}

TEST(invariance_tiny_llama) { check_invariance("tiny-llama"); }
TEST(invariance_tiny_llama3) { check_invariance("tiny-llama3"); }
TEST(invariance_tiny_qwen2) { check_invariance("tiny-qwen2"); }
TEST(invariance_tiny_qwen3) { check_invariance("tiny-qwen3"); }
TEST(invariance_tiny_gemma2) { check_invariance("tiny-gemma2"); }
TEST(invariance_tiny_gemma3) { check_invariance("tiny-gemma3"); }
TEST(invariance_shakespeare_llama) { check_invariance("shakespeare-llama"); }

/* A checkpoint split into two shards + model.safetensors.index.json gives the same logits as the single file. */
TEST(sharded_checkpoint_matches_single_file) {
    char *src = gp_test_fixture("models/tiny-gemma2");
    if (!src) return;
    char *dir = gp_test_tmpdir();
    char path[1024];
    /* copy config.json, then write the tensors into two shards */
    const char *files[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        char *text;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", src, files[i]);
        REQUIRE(gp_read_file(path, 1 << 20, &text, &len) == GP_OK);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fwrite(text, 1, len, f);
        fclose(f);
        free(text);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    gp_st_set *st;
    REQUIRE(gp_st_open_file(path, &st) == GP_OK);
    int32_t n = gp_st_count(st), half = n / 2;
    gp_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(path, "w");
    REQUIRE(idx);
    fprintf(idx, "{\"metadata\": {}, \"weight_map\": {");
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *t = gp_st_at(st, i);
        w[i].name = t->name;
        w[i].dtype = t->dtype;
        w[i].ndim = t->ndim;
        memcpy(w[i].shape, t->shape, sizeof t->shape);
        w[i].data = t->data;
        fprintf(idx, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", t->name, i < half ? 1 : 2);
    }
    fprintf(idx, "}}\n");
    fclose(idx);
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK_STATUS(gp_st_write(path, w, half, NULL, NULL, 0), GP_OK);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK_STATUS(gp_st_write(path, w + half, n - half, NULL, NULL, 0), GP_OK);
    free(w);
    gp_st_close(st);

    gp_model *a = NULL, *b = NULL;
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    CHECK_STATUS(gp_model_load(src, &mp, &a), GP_OK);
    CHECK_STATUS(gp_model_load(dir, &mp, &b), GP_OK);
    if (a && b) {
        int32_t ids[5] = {1, 450, 1701, 338, 29871};
        const size_t V = (size_t)gp_model_n_vocab(a);
        float *la = malloc(V * sizeof(float)), *lb = malloc(V * sizeof(float));
        gp_ctx *ca = NULL, *cb = NULL;
        CHECK_STATUS(gp_ctx_init(a, NULL, &ca), GP_OK);
        CHECK_STATUS(gp_ctx_init(b, NULL, &cb), GP_OK);
        CHECK_STATUS(gp_ctx_eval(ca, ids, 5, NULL, la), GP_OK);
        CHECK_STATUS(gp_ctx_eval(cb, ids, 5, NULL, lb), GP_OK);
        CHECK(!memcmp(la, lb, V * sizeof(float)));
        gp_ctx_free(ca);
        gp_ctx_free(cb);
        free(la);
        free(lb);
    }
    gp_model_free(a);
    gp_model_free(b);
    free(dir);
    free(src);
}
