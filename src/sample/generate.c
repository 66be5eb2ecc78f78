/* generate.c — gp_generate: binds the generation loop (loop.c) to a gp_ctx (the prompt through gp_ctx_prefill, which
 * reuses the cache's common prefix; then gp_ctx_eval with the last position's logits) and to the model's tokenizer through a streaming detokenizer; and the model's generation
 * config (transformers' defaults < generation_config.json). */
#include "model/model.h"
#include "sample/sample.h"
#include "util/util.h"

gp_gen_config gp_model_gen_config(const gp_model *m) {
    if (!m) return gp_gen_config_default();
    gp_gen_config g = m->gen; /* parsed once at load; the arrays stay owned by the model */
    g._owned = NULL;
    return g;
}

typedef struct {
    gp_ctx *c;
    gp_detok *d;
    int prefill; /* the next eval is the prompt: reuse the cache's common prefix (gp_ctx_prefill) */
} ctx_engine;

static void ce_reset(void *self) { ((ctx_engine *)self)->prefill = 1; }

static gp_status ce_eval(void *self, const int32_t *ids, int32_t n, float *logits) {
    ctx_engine *ce = self;
    if (ce->prefill) {
        ce->prefill = 0;
        return gp_ctx_prefill(ce->c, ids, n, logits, NULL);
    }
    return gp_ctx_eval(ce->c, ids, n, NULL, logits);
}

static gp_status ce_push(void *self, int32_t id, const char **piece) {
    return gp_detok_push(((ctx_engine *)self)->d, id, piece);
}

static gp_status ce_flush(void *self, const char **piece) { return gp_detok_flush(((ctx_engine *)self)->d, piece); }

gp_status gp_generate(gp_ctx *c, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: context is NULL");
    if (!cfg) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: cfg is NULL");
    if (!result) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: result is NULL");
    const gp_model *m = gp_ctx_model(c);
    ctx_engine ce = {c, NULL, 1};
    gp_gen_engine e = {0};
    e.self = &ce;
    e.n_vocab = gp_model_n_vocab(m);
    e.reset = ce_reset;
    e.eval = ce_eval;
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (tok) {
        gp_status s = gp_detok_init(tok, cfg->skip_special_tokens, &ce.d);
        if (s) return s;
        e.detok_push = ce_push;
        e.detok_flush = ce_flush;
    }
    gp_status s = gp_gen_run(&e, prompt, n_prompt, cfg, on_token, user_data, result);
    gp_detok_free(ce.d);
    return s;
}
