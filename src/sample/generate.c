/* generate.c — generation configs (transformers' defaults < generation_config.json < caller) and gp_generate, the
 * loop: prefill the prompt, then pick a token, check stopping, decode it, until EOS or max_new_tokens. */
#include "model/model.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

gp_gen_config gp_gen_config_default(void) {
    gp_gen_config g;
    memset(&g, 0, sizeof g);
    g.max_new_tokens = 20;
    g.temperature = 1.0f;
    g.top_k = 50;
    g.top_p = 1.0f;
    return g;
}

gp_gen_config gp_model_gen_config(const gp_model *m) {
    gp_gen_config g = gp_gen_config_default();
    g.n_eos = gp_model_eos_ids(m, g.eos_ids, GP_MAX_EOS);
    if (g.n_eos > GP_MAX_EOS) g.n_eos = GP_MAX_EOS;
    return g;
}

const char *gp_finish_reason_str(gp_finish_reason r) {
    switch (r) {
    case GP_FINISH_STOP: return "stop";
    case GP_FINISH_LENGTH: return "length";
    default: return "none";
    }
}

void gp_gen_result_free(gp_gen_result *r) {
    if (!r) return;
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* Index of the first maximum of x [n] (torch.argmax's choice). */
static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int is_eos(const gp_gen_config *g, int32_t id) {
    for (int i = 0; i < g->n_eos && i < GP_MAX_EOS; i++)
        if (g->eos_ids[i] == id) return 1;
    return 0;
}

gp_status gp_generate(gp_ctx *c, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_token_cb on_token, void *user_data, gp_gen_result *res) {
    if (!c || !prompt || n_prompt <= 0 || !cfg || !res)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: ctx, prompt (n_prompt > 0), cfg and result are required");
    memset(res, 0, sizeof *res);
    if (cfg->max_new_tokens < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: max_new_tokens must be >= 0");
    if (cfg->do_sample)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_generate: sampling is not implemented yet; use greedy (do_sample 0)");
    const int32_t V = gp_model_n_vocab(gp_ctx_model(c));
    float *logits = gp_malloc((size_t)V, sizeof(float));
    res->tokens = gp_malloc((size_t)cfg->max_new_tokens + 1, sizeof(int32_t));
    if (!logits || !res->tokens) {
        free(logits);
        gp_gen_result_free(res);
        return GP_ERR_NOMEM;
    }
    gp_ctx_reset(c);
    double t0 = gp_now();
    gp_status s = gp_ctx_eval(c, prompt, n_prompt, NULL, logits);
    res->n_prompt = n_prompt;
    res->prompt_seconds = gp_now() - t0;
    double t1 = gp_now();
    res->finish_reason = GP_FINISH_LENGTH;
    while (s == GP_OK && res->n_tokens < cfg->max_new_tokens) {
        int32_t id = argmax(logits, V);
        res->tokens[res->n_tokens++] = id;
        if (on_token && on_token(id, user_data)) {
            s = gp_set_error(GP_ERR_CANCELLED, "gp_generate: stopped by the token callback");
            break;
        }
        if (!cfg->ignore_eos && is_eos(cfg, id)) {
            res->finish_reason = GP_FINISH_STOP;
            break;
        }
        if (res->n_tokens == cfg->max_new_tokens) break;
        s = gp_ctx_eval(c, &id, 1, NULL, logits);
    }
    res->gen_seconds = gp_now() - t1;
    free(logits);
    return s;
}
