/* generate.c — gp_generate: binds the generation loop (loop.c) to a gp_ctx (the prompt through gp_ctx_prefill, which
 * reuses the cache's common prefix; then gp_ctx_eval with the last position's logits) and to the model's tokenizer through a streaming detokenizer; and the model's generation
 * config (transformers' defaults < generation_config.json). */
#include "model/ctx.h"
#include "model/model.h"
#include "sample/sample.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gp_gen_config gp_model_gen_config(const gp_model *m) {
    if (!m) return gp_gen_config_default();
    gp_gen_config g = m->gen; /* parsed once at load; the arrays stay owned by the model */
    g._owned = NULL;
    return g;
}

static void ce_reset(void *self) { ((gp_ctx_engine *)self)->prefill = 1; }

static gp_status ce_eval(void *self, const int32_t *ids, int32_t n, float *logits) {
    gp_ctx_engine *ce = self;
    if (ce->prefill) {
        ce->prefill = 0;
        return gp_ctx_prefill(ce->c, ids, n, logits, NULL);
    }
    return gp_ctx_eval(ce->c, ids, n, NULL, logits);
}

static gp_status ce_push(void *self, int32_t id, const char **piece) {
    return gp_detok_push(((gp_ctx_engine *)self)->d, id, piece);
}

static gp_status ce_flush(void *self, const char **piece) { return gp_detok_flush(((gp_ctx_engine *)self)->d, piece); }

gp_status gp_ctx_engine_bind(gp_ctx_engine *ce, gp_gen_engine *e, gp_ctx *c, const gp_gen_config *cfg) {
    const gp_model *m = gp_ctx_model(c);
    *ce = (gp_ctx_engine){c, NULL, 1};
    memset(e, 0, sizeof *e);
    e->self = ce;
    e->n_vocab = gp_model_n_vocab(m);
    e->reset = ce_reset;
    e->eval = ce_eval;
    e->logits_buf = gp_ctx_logits_buffer(c);
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (tok) {
        gp_status s = gp_detok_init(tok, cfg->skip_special_tokens, &ce->d);
        if (s) return s;
        e->detok_push = ce_push;
        e->detok_flush = ce_flush;
    }
    return GP_OK;
}

void gp_ctx_engine_unbind(gp_ctx_engine *ce) {
    gp_detok_free(ce->d);
    ce->d = NULL;
}

/* ---- beam search on one context: beam j lives in the named cache "gp.beam<gen>.<j>", forked (copy-on-write) from
 * its parent each step; beam 0 starts as the context's current cache, which keeps the prompt afterwards ---- */
typedef struct {
    gp_ctx *c;
    char orig[64];
    int gen;        /* generation of the live beam caches (0/1 alternate) */
    int32_t n_live; /* live beam caches (0 right after the prefill: beam 0 is the current cache) */
} beam_ctx;

static void beam_name(char *buf, int gen, int32_t j) { snprintf(buf, 64, "gp.beam%d.%d", gen, (int)j); }

static gp_status bc_prefill(void *self, const int32_t *ids, int32_t n, float *logits) {
    beam_ctx *b = self;
    return gp_ctx_prefill(b->c, ids, n, logits, NULL);
}

static void bc_drop_live(beam_ctx *b) {
    char name[64];
    gp_ctx_cache_select(b->c, b->orig);
    for (int32_t j = 0; j < b->n_live; j++) {
        beam_name(name, b->gen, j);
        gp_ctx_cache_drop(b->c, name);
    }
    b->n_live = 0;
}

static gp_status bc_reorder(void *self, const int32_t *parent, int32_t n) {
    beam_ctx *b = self;
    char src[64], dst[64];
    for (int32_t j = 0; j < n; j++) {
        if (b->n_live) beam_name(src, b->gen, parent[j]);
        else snprintf(src, sizeof src, "%s", b->orig);
        beam_name(dst, !b->gen, j);
        gp_status s = gp_ctx_cache_fork(b->c, src, dst);
        if (s) {
            for (int32_t i = 0; i < j; i++) { /* undo this generation's forks */
                beam_name(dst, !b->gen, i);
                gp_ctx_cache_drop(b->c, dst);
            }
            return s;
        }
    }
    bc_drop_live(b); /* a parent used once is now the only owner of its buffers: no copy on the next write */
    b->gen = !b->gen;
    b->n_live = n;
    return GP_OK;
}

static gp_status bc_step(void *self, const int32_t *tokens, int32_t n, float *logits) {
    beam_ctx *b = self;
    const int32_t V = gp_model_n_vocab(b->c->m), step = b->c->steer.step;
    char name[64];
    for (int32_t j = 0; j < n; j++) {
        beam_name(name, b->gen, j);
        gp_status s = gp_ctx_cache_select(b->c, name);
        b->c->steer.step = step; /* every beam at the same steering step, as one batched forward would be */
        if (!s) s = gp_ctx_eval(b->c, tokens + j, 1, NULL, logits + (size_t)j * (size_t)V);
        if (s) return s;
    }
    b->c->steer.step = step + 1;
    return GP_OK;
}

/* Decodes ids [n] (a final EOS left out when it stopped the sequence) into *text. */
static gp_status seq_text(const gp_tokenizer *tok, const gp_gen_config *cfg, const int32_t *ids, int32_t n,
                          gp_finish_reason why, char **text, size_t *len) {
    if (why == GP_FINISH_STOP && n > 0) n--;
    return gp_tokenizer_decode(tok, ids, n, cfg->skip_special_tokens, text, len);
}

/* Fills result from the beams and streams the best one through on_token. */
static gp_status beam_result(const gp_tokenizer *tok, const gp_gen_config *cfg, const gp_beam_out *o, int32_t n_prompt,
                             gp_token_cb on_token, void *user_data, gp_gen_result *r) {
    r->n_prompt = n_prompt;
    r->prompt_seconds = o->prompt_seconds;
    r->gen_seconds = o->gen_seconds;
    r->sequences = gp_calloc((size_t)o->n, sizeof *r->sequences);
    if (!r->sequences) return GP_ERR_NOMEM;
    r->n_sequences = o->n;
    for (int32_t i = 0; i < o->n; i++) {
        gp_gen_sequence *q = &r->sequences[i];
        q->n_tokens = o->len[i];
        q->score = o->score[i];
        q->finish_reason = o->finish[i];
        q->tokens = gp_malloc(o->len[i] ? (size_t)o->len[i] : 1, sizeof(int32_t));
        if (!q->tokens) return GP_ERR_NOMEM;
        memcpy(q->tokens, o->tokens + o->off[i], (size_t)o->len[i] * sizeof(int32_t));
        if (tok) {
            gp_status s = seq_text(tok, cfg, q->tokens, q->n_tokens, q->finish_reason, &q->text, &q->text_len);
            if (s) return s;
        }
    }
    const gp_gen_sequence *best = &r->sequences[0];
    r->n_tokens = best->n_tokens;
    r->finish_reason = best->finish_reason;
    r->tokens = gp_malloc(best->n_tokens ? (size_t)best->n_tokens : 1, sizeof(int32_t));
    if (!r->tokens) return GP_ERR_NOMEM;
    memcpy(r->tokens, best->tokens, (size_t)best->n_tokens * sizeof(int32_t));
    if (tok) {
        gp_status s = seq_text(tok, cfg, best->tokens, best->n_tokens, best->finish_reason, &r->text, &r->text_len);
        if (s) return s;
    }
    if (!on_token) return GP_OK;
    /* stream the best beam after the search (transformers cannot stream beam search at all) */
    gp_detok *d = NULL;
    if (tok) {
        gp_status ds = gp_detok_init(tok, cfg->skip_special_tokens, &d);
        if (ds) return ds;
    }
    gp_status ret = GP_OK;
    for (int32_t k = 0; k < best->n_tokens; k++) {
        const int last = k == best->n_tokens - 1;
        const char *piece = "", *tail = "";
        char *buf = NULL;
        if (d && !(last && best->finish_reason == GP_FINISH_STOP)) gp_detok_push(d, best->tokens[k], &piece);
        size_t plen = strlen(piece);
        if (d && last) {
            buf = malloc(plen + 1);
            if (buf) memcpy(buf, piece, plen + 1);
            gp_detok_flush(d, &tail);
            size_t tl = strlen(tail);
            char *nb = buf ? realloc(buf, plen + tl + 1) : NULL;
            if (nb) {
                memcpy(nb + plen, tail, tl + 1);
                buf = nb;
                piece = buf;
                plen += tl;
            }
        }
        gp_token_event ev = {0};
        ev.id = best->tokens[k];
        ev.index = k;
        ev.piece = piece;
        ev.piece_len = plen;
        ev.logprob = NAN;
        ev.finish = last ? best->finish_reason : GP_FINISH_NONE;
        int stop = on_token(&ev, user_data);
        free(buf);
        if (stop && !last) {
            r->finish_reason = GP_FINISH_CANCELLED;
            ret = gp_set_error(GP_ERR_CANCELLED, "gp_generate: the token callback stopped after %d ids", (int)(k + 1));
            break;
        }
    }
    gp_detok_free(d);
    return ret;
}

static gp_status generate_beams(gp_ctx *c, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                                gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    memset(result, 0, sizeof *result);
    result->stop_index = -1;
    if (!prompt || n_prompt <= 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: the prompt is empty (at least one id)");
    const gp_model *m = gp_ctx_model(c);
    const int32_t V = gp_model_n_vocab(m);
    gp_status s = gp_gen_config_validate(cfg, V);
    if (s) return s;
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return gp_set_error(GP_ERR_RANGE, "gp_generate: prompt[%d] = %d is outside the vocabulary (%d ids)", (int)i,
                                (int)prompt[i], (int)V);
    beam_ctx b = {c, {0}, 0, 0};
    snprintf(b.orig, sizeof b.orig, "%s", gp_ctx_cache_name(c));
    gp_beam_engine e = {&b, V, bc_prefill, bc_reorder, bc_step};
    gp_beam_out o;
    s = gp_beam_run(&e, prompt, n_prompt, cfg, &o);
    bc_drop_live(&b);
    if (s) return s;
    s = beam_result(gp_model_tokenizer(m), cfg, &o, n_prompt, on_token, user_data, result);
    gp_beam_out_free(&o);
    if (s && s != GP_ERR_CANCELLED) gp_gen_result_free(result);
    return s;
}

gp_status gp_generate(gp_ctx *c, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: context is NULL");
    if (!cfg) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: cfg is NULL");
    if (!result) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: result is NULL");
    gp_status bs = gp_beam_check(cfg, 1);
    if (bs) return bs;
    if (cfg->num_beams > 1) return generate_beams(c, prompt, n_prompt, cfg, on_token, user_data, result);
    if (cfg->num_return_sequences > 1)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gen_config: field 'num_return_sequences' = %d needs num_beams >= it "
                            "(several independent samples: gp_generate_batch)", (int)cfg->num_return_sequences);
    gp_ctx_engine ce;
    gp_gen_engine e;
    gp_status s = gp_ctx_engine_bind(&ce, &e, c, cfg);
    if (!s) s = gp_gen_run(&e, prompt, n_prompt, cfg, on_token, user_data, result);
    gp_ctx_engine_unbind(&ce);
    return s;
}
