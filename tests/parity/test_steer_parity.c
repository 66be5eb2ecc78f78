/* test_steer_parity.c — steering against transformers with a PyTorch forward hook (fixtures' reference.json
 * "steering"): residual injection with constant and ramped coefficients (greedy_32 exact, last logits within
 * 1e-3), logit bias alpha·(W·v) (greedy_32 exact), and capture of a subset of hidden states. */
#include "fixtures.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOGIT_TOL 1e-3

static int greedy_with(gp_ctx *c, const int32_t *ids, int n, int max_new, gp_gen_result *r, gp_model *m) {
    gp_gen_config g = gp_model_gen_config(m);
    g.max_new_tokens = max_new;
    g.do_sample = 0;
    return gp_generate(c, ids, n, &g, NULL, NULL, r) == GP_OK ? 0 : -1;
}

static void check_tokens(const char *what, const gp_gen_result *r, const cJSON *want_arr) {
    int32_t *want;
    int nw = fx_int_array(want_arr, &want);
    int d = fx_first_diff(r->tokens, r->n_tokens, want, nw);
    if (d >= 0) {
        NOTE("%s: differs at token %d", what, d);
        fx_print_ids("got ", r->tokens, r->n_tokens);
        fx_print_ids("want", want, nw);
        gp_test_failed = 1;
    }
    free(want);
}

static void check_steering(const char *name) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    fx_refs rf;
    if (fx_refs_load(name, &rf)) {
        gp_model_free(m);
        return;
    }
    cJSON *ref = rf.json;
    gp_st_set *st = rf.st;
    const char *rs = rf.st_path;
    gp_ctx *c = NULL;
    float *vec = NULL;
    int32_t nv = 0;
    {
        char spec[1100];
        snprintf(spec, sizeof spec, "%s:steer.vector", rs);
        CHECK_STATUS(gp_steer_vector_load(spec, &vec, &nv), GP_OK);
        CHECK_EQ_INT(nv, gp_model_n_embd(m));
        CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    }
    if (!c || !vec) goto done;
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
    int32_t *ids;
    int n = fx_int_array(cJSON_GetObjectItem(p0, "ids"), &ids);
    const int32_t V = gp_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof(float));
    const cJSON *steer = cJSON_GetObjectItem(ref, "steering"), *row;
    int rows = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(steer, "residual_injection")) {
        int layer = cJSON_GetObjectItem(row, "layer")->valueint;
        double alpha = cJSON_GetObjectItem(row, "alpha")->valuedouble;
        int ramp = cJSON_GetObjectItem(row, "ramp_steps")->valueint;
        gp_steer_hook h = {.layer = layer, .vector = vec, .alpha = (float)alpha,
                           .schedule = ramp > 0 ? GP_STEER_RAMP : GP_STEER_CONSTANT, .steps = ramp};
        gp_ctx_steer_clear(c);
        CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
        char what[128];
        snprintf(what, sizeof what, "%s layer %d alpha %g ramp %d greedy_32", name, layer, alpha, ramp);
        gp_gen_result r;
        if (greedy_with(c, ids, n, 32, &r, m) == 0) {
            check_tokens(what, &r, cJSON_GetObjectItem(row, "greedy_32"));
            gp_gen_result_free(&r);
        } else gp_test_failed = 1;
        if (ramp == 0) { /* last logits of the steered prompt */
            for (int32_t i = 0; i < gp_st_count(st); i++) {
                const gp_tensor_view *t = gp_st_at(st, i);
                double a;
                if (sscanf(t->name, "steer.alpha%lf.last_logits", &a) != 1 || fabs(a - alpha) > 1e-6) continue;
                gp_ctx_reset(c);
                CHECK_STATUS(gp_ctx_eval(c, ids, n, NULL, logits), GP_OK);
                double d = fx_max_abs_diff(logits, t->data, (size_t)V);
                NOTE("%s: %s max|Δ| = %.3g (tol %.0e)", name, t->name, d, LOGIT_TOL);
                CHECK(d <= LOGIT_TOL);
            }
        }
        rows++;
    }
    gp_ctx_steer_clear(c);
    cJSON_ArrayForEach(row, cJSON_GetObjectItem(steer, "logit_bias")) {
        double alpha = cJSON_GetObjectItem(row, "alpha")->valuedouble;
        CHECK_STATUS(gp_ctx_logit_bias_vector(c, vec, (float)alpha), GP_OK);
        char what[128];
        snprintf(what, sizeof what, "%s logit bias alpha %g greedy_32", name, alpha);
        gp_gen_result r;
        if (greedy_with(c, ids, n, 32, &r, m) == 0) {
            check_tokens(what, &r, cJSON_GetObjectItem(row, "greedy_32"));
            gp_gen_result_free(&r);
        } else gp_test_failed = 1;
        rows++;
    }
    gp_ctx_steer_clear(c);
    NOTE("%s: %d steering rows checked", name, rows);
    CHECK(rows > 0);

    /* capturing only some hidden states gives the same values as capturing all of them */
    const int32_t L = gp_model_n_layers(m), E = gp_model_n_embd(m);
    float *all = malloc((size_t)(L + 1) * n * E * sizeof(float)), *some = malloc(2 * (size_t)n * E * sizeof(float));
    int32_t *every = malloc((size_t)(L + 1) * sizeof(int32_t));
    for (int i = 0; i <= L; i++) every[i] = i;
    int32_t pick[2] = {L, 1};
    gp_eval_opts oa = {.hidden_layers = every, .n_hidden_layers = L + 1, .hidden_out = all};
    gp_eval_opts os = {.hidden_layers = pick, .n_hidden_layers = 2, .hidden_out = some};
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, ids, n, &oa, NULL), GP_OK);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, ids, n, &os, NULL), GP_OK);
    CHECK(!memcmp(some, all + (size_t)L * n * E, (size_t)n * E * sizeof(float)));
    CHECK(!memcmp(some + (size_t)n * E, all + (size_t)1 * n * E, (size_t)n * E * sizeof(float)));
    free(all);
    free(some);
    free(every);
    free(logits);
    free(ids);
done:
    gp_free(vec);
    gp_ctx_free(c);
    fx_refs_free(&rf);
    gp_model_free(m);
}

TEST(steer_parity_tiny_llama) { check_steering("tiny-llama"); }
TEST(steer_parity_tiny_llama3) { check_steering("tiny-llama3"); }
TEST(steer_parity_tiny_qwen2) { check_steering("tiny-qwen2"); }
TEST(steer_parity_tiny_qwen3) { check_steering("tiny-qwen3"); }
TEST(steer_parity_tiny_gemma2) { check_steering("tiny-gemma2"); }
TEST(steer_parity_tiny_gemma3) { check_steering("tiny-gemma3"); }
TEST(steer_parity_shakespeare_llama) { check_steering("shakespeare-llama"); }
