/* test_cuda_parity.c — the CUDA backend's float32 forward (GP_DEVICE_CUDA) on every fixture model, on a GPU:
 * last-position logits of every prompt within 1e-3 of transformers' float32 CPU reference, of the CPU backend and
 * of transformers' cuda_f32_sdpa mode (references/modes; not tiny-gemma2, whose sdpa run has no attention
 * soft-capping); prompt 0's logits at every position and hidden states within 1e-3; greedy_48 token for token;
 * and the same bits run to run, for prefill chunks of 1, 3 and 512 and into the context's own logits buffer; decode
 * steps replayed as CUDA graphs give the bits of the same steps launched kernel by kernel.
 * Skipped (with the reason) without a CUDA build or device; test_cuda_select.c checks that error. */
#include "fixtures.h"
#include "test.h"

#ifdef GP_CUDA
#include "model/ctx.h"

#include <stdlib.h>
#include <string.h>

#define TOL 1e-3

static int g_no_device; /* set once a CUDA context was refused: the remaining models are not tried */

/* A context on device dev with the given prefill chunk; NULL after a skip (no device) or failure. */
static gp_ctx *new_ctx(gp_model *m, int device, int chunk) {
    gp_ctx_params p = gp_ctx_default_params();
    p.device = device;
    p.n_ctx = 512;
    if (chunk) p.prefill_chunk = chunk;
    gp_ctx *c = NULL;
    gp_status s = gp_ctx_init(m, &p, &c);
    if (s == GP_ERR_UNSUPPORTED && device == GP_DEVICE_CUDA) {
        g_no_device = 1;
        printf("    skip: %s\n", gp_errmsg());
        gp_test_skipped = 1;
        return NULL;
    }
    CHECK_STATUS(s, GP_OK);
    return c;
}

/* Last-position logits [V] of ids on c (malloc'd), or NULL on failure. */
static float *last_logits(gp_ctx *c, const int32_t *ids, int n, int32_t V) {
    float *lg = malloc((size_t)V * sizeof(float));
    gp_ctx_reset(c);
    gp_status s = gp_ctx_eval(c, ids, n, NULL, lg);
    CHECK_STATUS(s, GP_OK);
    if (s) {
        free(lg);
        return NULL;
    }
    return lg;
}

static void check_diff(const char *what, const char *name, int pi, const float *a, const float *b, size_t n,
                       double *worst) {
    double d = fx_max_abs_diff(a, b, n);
    if (d > *worst) *worst = d;
    if (d > TOL) {
        NOTE("%s prompt %d: %s max|Δ| = %.3g > %.0e", name, pi, what, d, TOL);
        gp_test_failed = 1;
    }
}

/* Prompt 0: every position's logits and the hidden states against the reference. */
static void check_all_positions(gp_ctx *c, const char *name, gp_st_set *st, const int32_t *ids, int n, int32_t V,
                                int32_t E, int32_t L) {
    float *logits = malloc((size_t)n * V * sizeof(float)), *hidden = malloc((size_t)(L + 1) * n * E * sizeof(float));
    int32_t *layers = malloc((size_t)(L + 1) * sizeof *layers);
    for (int i = 0; i <= L; i++) layers[i] = i;
    gp_eval_opts o = {.all_logits = 1, .hidden_layers = layers, .n_hidden_layers = L + 1, .hidden_out = hidden};
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, ids, n, &o, logits), GP_OK);
    const gp_tensor_view *t = gp_st_find(st, "prompt0.logits");
    if (t && t->n_elems == (uint64_t)n * V) {
        double d = fx_max_abs_diff(logits, t->data, (size_t)n * V);
        NOTE("%s prompt 0 (cuda): logits at all %d positions max|Δ| = %.3g (tol %.0e)", name, n, d, TOL);
        CHECK(d <= TOL);
    }
    t = gp_st_find(st, "prompt0.hidden_states");
    CHECK(t && t->n_elems == (uint64_t)(L + 1) * n * E);
    if (t && t->n_elems == (uint64_t)(L + 1) * n * E) {
        double d = fx_max_abs_diff(hidden, t->data, (size_t)(L + 1) * n * E);
        NOTE("%s prompt 0 (cuda): hidden_states max|Δ| = %.3g (tol %.0e)", name, d, TOL);
        CHECK(d <= TOL);
    }
    free(logits);
    free(hidden);
    free(layers);
}

/* Prompt 0 again: twice on the same context and with prefill chunks 1 and 3 gives the same bits as ref. */
static void check_determinism(gp_model *m, gp_ctx *c, const int32_t *ids, int n, int32_t V, const float *ref,
                              const char *name) {
    float *again = last_logits(c, ids, n, V);
    CHECK(again && memcmp(again, ref, (size_t)V * 4) == 0);
    free(again);
    /* into the context's pinned buffer (read back directly, not staged) */
    float *own = gp_ctx_logits_buffer(c);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, ids, n, NULL, own), GP_OK);
    CHECK(own && memcmp(own, ref, (size_t)V * 4) == 0);
    const int chunks[] = {1, 3};
    for (int k = 0; k < 2; k++) {
        gp_ctx *cc = new_ctx(m, GP_DEVICE_CUDA, chunks[k]);
        if (!cc) continue;
        float *lg = last_logits(cc, ids, n, V);
        if (!lg || memcmp(lg, ref, (size_t)V * 4) != 0) {
            NOTE("%s: prefill chunk %d changes the last logits' bits (max|Δ| %.3g)", name, chunks[k],
                 lg ? fx_max_abs_diff(lg, ref, (size_t)V) : -1.0);
            gp_test_failed = 1;
        }
        free(lg);
        gp_ctx_free(cc);
    }
}

static void check_model(const char *name, gp_st_set *modes, const cJSON *modes_json) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    fx_refs rf;
    if (fx_refs_load(name, &rf)) {
        gp_model_free(m);
        return;
    }
    gp_ctx *cpu = new_ctx(m, GP_DEVICE_CPU, 0), *cu = new_ctx(m, GP_DEVICE_CUDA, 0);
    const int32_t V = gp_model_n_vocab(m), E = gp_model_n_embd(m), L = gp_model_n_layers(m);
    if (!cpu || !cu) {
        gp_ctx_free(cpu);
        gp_ctx_free(cu);
        fx_refs_free(&rf);
        gp_model_free(m);
        return;
    }
    const int sdpa_ok = strcmp(name, "tiny-gemma2") != 0;
    const cJSON *p, *mrows = cJSON_GetObjectItem(cJSON_GetObjectItem(modes_json, name), "cuda_f32_sdpa");
    double w_ref = 0, w_cpu = 0, w_sdpa = 0;
    int pi = 0, greedy_same = 0, sdpa_same = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(rf.json, "prompts")) {
        if (!cpu || !cu) break;
        int32_t *ids, *want, *sd = NULL;
        int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
        float *lc = last_logits(cu, ids, n, V), *lp = last_logits(cpu, ids, n, V);
        char key[96];
        snprintf(key, sizeof key, "prompt%d.last_logits", pi);
        const gp_tensor_view *t = gp_st_find(rf.st, key);
        snprintf(key, sizeof key, "%s.prompt%d.last_logits", name, pi);
        const gp_tensor_view *ts = modes ? gp_st_find(modes, key) : NULL;
        if (lc && lp && t && t->n_elems == (uint64_t)V) {
            check_diff("cuda vs transformers f32 CPU", name, pi, lc, t->data, (size_t)V, &w_ref);
            check_diff("cuda vs the CPU backend", name, pi, lc, lp, (size_t)V, &w_cpu);
            if (ts && ts->n_elems == (uint64_t)V && sdpa_ok)
                check_diff("cuda vs transformers cuda_f32_sdpa", name, pi, lc, ts->data, (size_t)V, &w_sdpa);
        } else CHECK(!"logits or reference missing");
        if (pi == 0 && lc) {
            check_all_positions(cu, name, rf.st, ids, n, V, E, L);
            check_determinism(m, cu, ids, n, V, lc, name);
        }
        int nw = fx_int_array(cJSON_GetObjectItem(p, "greedy_48"), &want);
        int ns = fx_int_array(cJSON_GetObjectItem(cJSON_GetArrayItem(mrows, pi), "greedy_48"), &sd);
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = 48;
        g.do_sample = 0;
        gp_gen_result r;
        CHECK_STATUS(gp_generate(cu, ids, n, &g, NULL, NULL, &r), GP_OK);
        int fd = fx_first_diff(r.tokens, r.n_tokens, want, nw);
        if (fd >= 0) {
            NOTE("%s prompt %d: cuda greedy differs from greedy_48 at token %d", name, pi, fd);
            gp_test_failed = 1;
        } else greedy_same++;
        if (ns > 0 && fx_first_diff(r.tokens, r.n_tokens, sd, ns) < 0) sdpa_same++;
        gp_gen_result_free(&r);
        free(ids); free(want); free(sd); free(lc); free(lp);
        pi++;
    }
    NOTE("%s: max|Δ| last logits: vs transformers f32 %.3g, vs CPU backend %.3g, vs cuda_f32_sdpa %s%.3g; greedy_48 "
         "equal %d/%d (cuda_f32_sdpa's greedy equal %d/%d)", name, w_ref, w_cpu, sdpa_ok ? "" : "(not compared) ",
         w_sdpa, greedy_same, pi, sdpa_same, pi);
    gp_ctx_free(cpu);
    gp_ctx_free(cu);
    fx_refs_free(&rf);
    gp_model_free(m);
}

TEST(cuda_parity_f32_every_fixture_model) {
    char *mp = gp_test_fixture("references/modes/cuda_f32_sdpa.safetensors");
    char *jp = gp_test_fixture("references/modes.json");
    if (!mp || !jp) return;
    gp_st_set *modes = NULL;
    CHECK_STATUS(gp_st_open_file(mp, &modes), GP_OK);
    cJSON *mj = fx_read_json(jp);
    REQUIRE(mj);
    for (int i = 0; i < GP_N_FIXTURE_MODELS && !g_no_device; i++)
        check_model(GP_FIXTURE_MODELS[i], modes, cJSON_GetObjectItem(mj, "models"));
    cJSON_Delete(mj);
    gp_st_close(modes);
    free(mp);
    free(jp);
}

/* A context on the GPU with decode graphs off, on or chosen by timing ("0", "1", NULL: GENPARITY_CUDA_GRAPH, read
 * when the context is created). */
static gp_ctx *graph_ctx(gp_model *m, const char *graphs, int32_t compute) {
    if (graphs) setenv("GENPARITY_CUDA_GRAPH", graphs, 1);
    gp_ctx_params p = gp_ctx_default_params();
    p.device = GP_DEVICE_CUDA;
    p.n_ctx = 256;
    p.compute = compute;
    gp_ctx *c = NULL;
    gp_status s = gp_ctx_init(m, &p, &c);
    unsetenv("GENPARITY_CUDA_GRAPH");
    if (s == GP_ERR_UNSUPPORTED) {
        printf("    skip: %s\n", gp_errmsg());
        gp_test_skipped = 1;
        return NULL;
    }
    CHECK_STATUS(s, GP_OK);
    return c;
}

/* A steering hook on the last layer that starts at forward step 30 (GP_STEER_WARMUP): one step then differs from
 * the last after its first launches, the head the graphs run while the host records the rest (cuda_rt.cu). */
static void late_hook(gp_ctx *c, gp_model *m) {
    const int32_t E = gp_model_n_embd(m);
    float *v = malloc((size_t)E * sizeof *v);
    if (!v) return;
    for (int32_t i = 0; i < E; i++) v[i] = (float)((i * 7919) % 13 - 6) / 16.0f;
    const gp_steer_hook h = {.layer = gp_model_n_layers(m) - 1, .vector = v, .alpha = 1.0f,
                             .schedule = GP_STEER_WARMUP, .steps = 30};
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
    free(v);
}

/* STEPS greedy decode steps after a 5-token prompt (past the attention splits at 64 and 128 keys and the sliding
 * windows), fed the same tokens: the logits of every step have the same bits without graphs, with them and with the
 * timed choice, and at least 3/4 of the steps (half with the late hook) were replayed as graphs with them on.  head:
 * $GP_CU_HEAD while the graphs run (launches in the head; NULL: the default), hook: late_hook on every context. */
#define STEPS 150
static void graph_case(const char *name, int32_t compute, const char *head, int hook) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    gp_ctx *c[3] = {graph_ctx(m, "0", compute), NULL, NULL};
    if (c[0]) c[1] = graph_ctx(m, "1", compute), c[2] = graph_ctx(m, NULL, compute);
    for (int g = 0; g < 3 && hook; g++)
        if (c[g]) late_hook(c[g], m);
    if (head) setenv("GP_CU_HEAD", head, 1);
    const int32_t V = gp_model_n_vocab(m);
    float *lg[3] = {malloc((size_t)V * 4), malloc((size_t)V * 4), malloc((size_t)V * 4)};
    int32_t ids[5] = {1, 2, 3, 4, 5}, first_diff = -1;
    int ok = c[1] && c[2];
    for (int g = 0; g < 3 && ok; g++) CHECK_STATUS(gp_ctx_eval(c[g], ids, 5, NULL, lg[g]), GP_OK);
    for (int t = 0; t < STEPS && ok; t++) {
        int32_t tok = 0;
        for (int32_t i = 1; i < V; i++) tok = lg[0][i] > lg[0][tok] ? i : tok;
        for (int g = 0; g < 3 && ok; g++) {
            const gp_status s = gp_ctx_eval(c[g], &tok, 1, NULL, lg[g]);
            CHECK_STATUS(s, GP_OK);
            ok = s == GP_OK;
        }
        if (ok && first_diff < 0 && (memcmp(lg[0], lg[1], (size_t)V * 4) || memcmp(lg[0], lg[2], (size_t)V * 4)))
            first_diff = t;
    }
    unsetenv("GP_CU_HEAD");
    if (c[1] && c[2]) {
        uint64_t on[3], off[3], au[3];
        gp_backend_cuda_graph_stats(c[1]->ws, on);
        gp_backend_cuda_graph_stats(c[0]->ws, off);
        gp_backend_cuda_graph_stats(c[2]->ws, au);
        NOTE("%s (%s, head %s%s): %d steps: graphs replayed %llu, built %llu, recorded steps launched one by one "
             "%llu (timed choice: replayed %llu); first step whose bits differ: %d (-1: none)", name,
             compute ? "bf16" : "f32", head ? head : "default", hook ? ", late hook" : "", STEPS,
             (unsigned long long)on[0], (unsigned long long)on[1], (unsigned long long)on[2],
             (unsigned long long)au[0], first_diff);
        CHECK(first_diff < 0);
        CHECK(on[0] >= (hook ? STEPS / 2 : STEPS * 3 / 4));
        CHECK(off[0] + off[1] + off[2] == 0);
    }
    for (int g = 0; g < 3; g++) free(lg[g]), gp_ctx_free(c[g]);
    gp_model_free(m);
}

TEST(cuda_decode_graphs_give_the_kernel_by_kernel_bits) {
    const char *models[] = {"tiny-llama3", "tiny-qwen3", "tiny-gemma3", "tiny-gemma2"};
    for (int i = 0; i < 4; i++)
        for (int32_t compute = 0; compute < 2; compute++) graph_case(models[i], compute, NULL, 0);
}

/* Three generations of KEPT_GEN steps from the same prompt on one context (reset between them), graphs on: the
 * decode attention changes shape at 64 and 128 keys, so the first generation records, launches one by one and
 * captures each shape; the later ones find every shape's graphs kept (cuda_rt.cu: no step launched one by one, no
 * graph captured again) and give the first one's bits at every step. */
#define KEPT_GEN 150
static void kept_case(const char *name, int32_t compute) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    gp_ctx *c = graph_ctx(m, "1", compute);
    const int32_t V = gp_model_n_vocab(m);
    float *lg = malloc((size_t)V * 4), *first = malloc((size_t)V * 4 * KEPT_GEN);
    int32_t ids[5] = {1, 2, 3, 4, 5}, differ = 0;
    uint64_t st[3][3] = {{0}};
    for (int gen = 0; gen < 3 && c && lg && first; gen++) {
        gp_ctx_reset(c);
        CHECK_STATUS(gp_ctx_eval(c, ids, 5, NULL, lg), GP_OK);
        for (int t = 0; t < KEPT_GEN; t++) {
            int32_t tok = (t * 7919 + 11) % V;
            CHECK_STATUS(gp_ctx_eval(c, &tok, 1, NULL, lg), GP_OK);
            if (gen == 0) memcpy(first + (size_t)t * V, lg, (size_t)V * 4);
            else differ += memcmp(first + (size_t)t * V, lg, (size_t)V * 4) != 0;
        }
        gp_backend_cuda_graph_stats(c->ws, st[gen]);
    }
    if (c) {
        NOTE("%s (%s): %d steps a generation; replayed / built / launched one by one after each: %llu %llu %llu, "
             "%llu %llu %llu, %llu %llu %llu; steps of later generations whose bits differ: %d", name,
             compute ? "bf16" : "f32", KEPT_GEN, (unsigned long long)st[0][0], (unsigned long long)st[0][1],
             (unsigned long long)st[0][2], (unsigned long long)st[1][0], (unsigned long long)st[1][1],
             (unsigned long long)st[1][2], (unsigned long long)st[2][0], (unsigned long long)st[2][1],
             (unsigned long long)st[2][2], differ);
        CHECK(st[0][1] >= 2);                                      /* the first generation captured the shapes */
        CHECK(st[2][1] == st[0][1] && st[2][2] == st[0][2]);      /* the later ones none again */
        CHECK(st[2][0] - st[0][0] == 2 * KEPT_GEN);               /* every later step replayed */
        CHECK_EQ_INT(differ, 0);
    }
    free(lg), free(first);
    gp_ctx_free(c);
    gp_model_free(m);
}

TEST(cuda_decode_graphs_kept_across_generations) {
    const char *models[] = {"tiny-llama3", "tiny-qwen3"};
    for (int i = 0; i < 2; i++)
        for (int32_t compute = 0; compute < 2; compute++) kept_case(models[i], compute);
}

/* The graphs' head launched while the host records the rest of a step: heads of 1, 3 and 7 launches (the default
 * needs 16 launches, more than the fixtures' models have), with a step that differs after its head. */
TEST(cuda_decode_graph_heads_give_the_kernel_by_kernel_bits) {
    const char *models[] = {"tiny-llama3", "tiny-gemma3"}, *heads[] = {"1", "3", "7"};
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 3; h++) graph_case(models[i], (int32_t)(h == 1), heads[h], 1);
}

#endif
