/* test_model_parity.c — the forward pass against transformers' own outputs for every fixture model:
 * every prompt's last-position logits (max|Δ| ≤ 1e-3), prompt 0's logits at every position where the reference
 * has them, prompt 0's hidden states (all n_layers+1, max|Δ| ≤ 1e-3), and greedy_48 token for token. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

#define LOGIT_TOL 1e-3
#define HIDDEN_TOL 1e-3

static void check_model(const char *name) {
    gp_model *m = fx_load_model(name, 0);
    if (!m) return;
    fx_refs rf;
    if (fx_refs_load(name, &rf)) {
        gp_model_free(m);
        return;
    }
    cJSON *ref = rf.json;
    gp_st_set *st = rf.st;
    gp_ctx *c = NULL;
    CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    const int32_t V = gp_model_n_vocab(m), E = gp_model_n_embd(m), L = gp_model_n_layers(m);
    const cJSON *prompts = cJSON_GetObjectItem(ref, "prompts");
    int pi = 0;
    const cJSON *p;
    double worst_last = 0;
    cJSON_ArrayForEach(p, prompts) {
        if (!c) break;
        int32_t *ids;
        int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
        REQUIRE(n > 0);
        float *logits = malloc((size_t)n * V * sizeof(float));
        float *hidden = malloc((size_t)(L + 1) * n * E * sizeof(float));
        int32_t *layers = malloc((size_t)(L + 1) * sizeof *layers);
        for (int i = 0; i <= L; i++) layers[i] = i;
        gp_eval_opts o = {.all_logits = 1, .hidden_layers = layers, .n_hidden_layers = L + 1, .hidden_out = hidden};
        gp_ctx_reset(c);
        CHECK_STATUS(gp_ctx_eval(c, ids, n, &o, logits), GP_OK);

        char key[64];
        snprintf(key, sizeof key, "prompt%d.last_logits", pi);
        const gp_tensor_view *t = gp_st_find(st, key);
        CHECK(t && t->n_elems == (uint64_t)V);
        if (t && t->n_elems == (uint64_t)V) {
            double d = fx_max_abs_diff(logits + (size_t)(n - 1) * V, t->data, (size_t)V);
            if (d > worst_last) worst_last = d;
            if (d > LOGIT_TOL) {
                NOTE("%s prompt %d: last_logits max|Δ| = %.3g > %.0e", name, pi, d, LOGIT_TOL);
                gp_test_failed = 1;
            }
        }
        if (pi == 0) {
            t = gp_st_find(st, "prompt0.logits");
            if (t) {
                CHECK(t->n_elems == (uint64_t)n * V);
                double d = fx_max_abs_diff(logits, t->data, (size_t)n * V);
                NOTE("%s prompt 0: logits at all %d positions max|Δ| = %.3g (tol %.0e)", name, n, d, LOGIT_TOL);
                CHECK(d <= LOGIT_TOL);
            }
            t = gp_st_find(st, "prompt0.hidden_states");
            CHECK(t && t->n_elems == (uint64_t)(L + 1) * n * E);
            if (t && t->n_elems == (uint64_t)(L + 1) * n * E) {
                double d = fx_max_abs_diff(hidden, t->data, (size_t)(L + 1) * n * E);
                NOTE("%s prompt 0: hidden_states [%d, %d, %d] max|Δ| = %.3g (tol %.0e)", name, L + 1, n, E, d,
                     HIDDEN_TOL);
                CHECK(d <= HIDDEN_TOL);
            }
        }
        /* greedy_48 through gp_generate with the model's EOS ids */
        int32_t *want;
        int nw = fx_int_array(cJSON_GetObjectItem(p, "greedy_48"), &want);
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = 48;
        g.do_sample = 0;
        gp_gen_result r;
        CHECK_STATUS(gp_generate(c, ids, n, &g, NULL, NULL, &r), GP_OK);
        int fd = fx_first_diff(r.tokens, r.n_tokens, want, nw);
        if (fd >= 0) {
            NOTE("%s prompt %d: greedy_48 differs at token %d", name, pi, fd);
            fx_print_ids("got ", r.tokens, r.n_tokens);
            fx_print_ids("want", want, nw);
            gp_test_failed = 1;
        }
        gp_gen_result_free(&r);
        free(want);
        free(logits);
        free(hidden);
        free(layers);
        free(ids);
        pi++;
    }
    if (c) NOTE("%s: %d prompts, worst last_logits max|Δ| = %.3g (tol %.0e)", name, pi, worst_last, LOGIT_TOL);
    CHECK(pi > 0);
    gp_ctx_free(c);
    fx_refs_free(&rf);
    gp_model_free(m);
}

TEST(parity_tiny_llama) { check_model("tiny-llama"); }
TEST(parity_tiny_llama3) { check_model("tiny-llama3"); }
TEST(parity_tiny_qwen2) { check_model("tiny-qwen2"); }
TEST(parity_tiny_qwen3) { check_model("tiny-qwen3"); }
TEST(parity_tiny_gemma2) { check_model("tiny-gemma2"); }
TEST(parity_tiny_gemma3) { check_model("tiny-gemma3"); }
TEST(parity_shakespeare_llama) { check_model("shakespeare-llama"); }
