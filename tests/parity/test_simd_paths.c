/* test_simd_paths.c — parity and invariance under every kernel path the CPU has (scalar, AVX2, AVX-512, forced with
 * gp_cpu_force_simd): for tiny-qwen3 (bf16), tiny-qwen2 (f16) and tiny-gemma3, every prompt's last-position logits
 * within 1e-3 of transformers', and within each path the prefill + decode logits bit-identical across prefill
 * chunks {1, 7, 512} and 1/2 threads.  AVX2 and AVX-512 must also agree bit for bit (same operations). */
#include "fixtures.h"
#include "kernels/cpu/simd.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-3
#define STEPS 8

/* Prefill logits [n, V] then STEPS greedy decode steps [STEPS, V] into out. */
static int run(gp_model *m, const int32_t *ids, int n, int chunk, int threads, float *out) {
    gp_ctx_params p = gp_ctx_default_params();
    p.prefill_chunk = chunk;
    p.n_threads = threads;
    gp_ctx *c = NULL;
    if (gp_ctx_init(m, &p, &c) != GP_OK) return -1;
    const int32_t V = gp_model_n_vocab(m);
    gp_eval_opts o = {.all_logits = 1};
    int rc = gp_ctx_eval(c, ids, n, &o, out) == GP_OK ? 0 : -1;
    const float *last = out + (size_t)(n - 1) * V;
    for (int s = 0; s < STEPS && !rc; s++) {
        int32_t id = 0;
        for (int32_t i = 1; i < V; i++)
            if (last[i] > last[id]) id = i;
        float *dst = out + (size_t)(n + s) * V;
        rc = gp_ctx_eval(c, &id, 1, NULL, dst) == GP_OK ? 0 : -1;
        last = dst;
    }
    gp_ctx_free(c);
    return rc;
}

static void check_paths(const char *name) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    fx_refs rf;
    if (fx_refs_load(name, &rf)) {
        gp_model_free(m);
        return;
    }
    cJSON *ref = rf.json;
    gp_st_set *st = rf.st;
    const size_t V = (size_t)gp_model_n_vocab(m);
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    const char *paths[] = {"scalar", "avx2", "avx512"};
    float *avx2 = NULL; /* AVX2's outputs of every prompt, concatenated, to compare with AVX-512 */
    size_t avx2_len = 0;
    for (int pi = 0; pi < 3; pi++) {
        if (!gp_cpu_simd_supported(paths[pi])) {
            NOTE("%s: path %s not available on this CPU", name, paths[pi]);
            continue;
        }
        REQUIRE(gp_cpu_force_simd(paths[pi]) == 0);
        double worst = 0;
        int same = 1, k = 0;
        size_t off = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, prompts) {
            int32_t *ids;
            int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
            if (n <= 0) break;
            size_t len = (size_t)(n + STEPS) * V;
            float *a = malloc(len * sizeof(float)), *b = malloc(len * sizeof(float));
            REQUIRE(a && b && run(m, ids, n, 512, 1, a) == 0);
            char key[64];
            snprintf(key, sizeof key, "prompt%d.last_logits", k);
            const gp_tensor_view *t = gp_st_find(st, key);
            if (t && t->n_elems == V) {
                double d = fx_max_abs_diff(a + (size_t)(n - 1) * V, t->data, V);
                if (d > worst) worst = d;
            } else gp_test_failed = 1;
            const int variants[][2] = {{1, 2}, {7, 1}, {512, 2}};
            for (int v = 0; v < 3; v++) {
                REQUIRE(run(m, ids, n, variants[v][0], variants[v][1], b) == 0);
                if (memcmp(a, b, len * sizeof(float))) {
                    NOTE("%s [%s] prompt %d: chunk %d, %d threads differs from chunk 512, 1 thread (max|Δ| %.3g)", name,
                         paths[pi], k, variants[v][0], variants[v][1], fx_max_abs_diff(a, b, len));
                    same = 0;
                }
            }
            if (pi == 1) {
                float *g = realloc(avx2, (avx2_len + len) * sizeof(float));
                REQUIRE(g);
                avx2 = g;
                memcpy(avx2 + avx2_len, a, len * sizeof(float));
                avx2_len += len;
            } else if (pi == 2 && avx2) {
                if (off + len > avx2_len || memcmp(avx2 + off, a, len * sizeof(float))) {
                    NOTE("%s prompt %d: avx512 differs from avx2 (max|Δ| %.3g)", name, k,
                         off + len <= avx2_len ? fx_max_abs_diff(avx2 + off, a, len) : -1.0);
                    gp_test_failed = 1;
                }
            }
            off += len;
            free(a);
            free(b);
            free(ids);
            k++;
        }
        NOTE("%s [%s]: %d prompts, worst last_logits max|Δ| = %.3g (tol %.0e); chunks {1,7,512} x threads {1,2} %s",
             name, paths[pi], k, worst, TOL, same ? "bit-identical" : "DIFFER");
        CHECK(k > 0 && worst <= TOL && same);
    }
    free(avx2);
    gp_cpu_force_simd(NULL);
    fx_refs_free(&rf);
    gp_model_free(m);
}

TEST(simd_paths_tiny_qwen3) { check_paths("tiny-qwen3"); }
TEST(simd_paths_tiny_qwen2) { check_paths("tiny-qwen2"); }
TEST(simd_paths_tiny_gemma3) { check_paths("tiny-gemma3"); }
