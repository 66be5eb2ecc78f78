/* loop.c — the generation loop, independent of the model: prefill, then per step processors -> choice -> stopping
 * criteria (EOS set, length, stop strings across token boundaries, time) -> streaming callback -> one-token decode.
 * One sequence is a state machine (gp_gen_seq: begin, next, decoded, end) so that gp_gen_run steps one and the batch
 * steps several together with exactly the same code.  gp_generate (generate.c) runs it on a gp_ctx; tests run it on
 * a fake engine.  Also frees results. */
#include "sample/sample.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void gp_gen_result_free(gp_gen_result *r) {
    if (!r) return;
    free(r->tokens);
    free(r->text);
    free(r->logprobs);
    free(r->top_logprobs);
    for (int32_t i = 0; r->sequences && i < r->n_sequences; i++) {
        free(r->sequences[i].tokens);
        free(r->sequences[i].text);
    }
    free(r->sequences);
    memset(r, 0, sizeof *r);
    r->stop_index = -1;
}

/* Grows *p (elements of size elem) to hold at least need elements; returns 0 on failure. */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2) return 0;
        c *= 2;
    }
    void *q = gp_realloc(*p, c, elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static gp_status text_append(gp_gen_text *t, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (!grow((void **)&t->buf, &t->cap, t->len + n + 1, 1)) return GP_ERR_NOMEM;
    if (n) memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return GP_OK;
}

static int is_eos(const gp_gen_config *g, int32_t id) {
    for (int32_t i = 0; i < g->n_eos && i < GP_MAX_EOS; i++)
        if (g->eos_ids[i] == id) return 1;
    return 0;
}

static void seq_free(gp_gen_seq *q) {
    free(q->ids);
    free(q->logprobs);
    free(q->top);
    if (!q->e || q->logits != q->e->logits_buf) free(q->logits);
    free(q->scores);
    free(q->lp);
    free(q->text.buf);
    gp_sample_ws_free(&q->ws);
    q->ids = NULL, q->logprobs = NULL, q->top = NULL, q->logits = q->scores = q->lp = NULL, q->text.buf = NULL;
}

/* Checks the arguments and the config against the engine's vocabulary. */
static gp_status seq_check(const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg) {
    if (!e || !cfg || !prompt || n_prompt <= 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: %s", !cfg ? "cfg is NULL"
                                                                   : !e ? "no engine"
                                                                        : "the prompt is empty (at least one id)");
    gp_status s = gp_gen_config_validate(cfg, e->n_vocab);
    if (s) return s;
    if (cfg->n_stop_strings > 0 && !e->detok_push)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'stop_strings' needs a tokenizer, the model has none");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return gp_set_error(GP_ERR_RANGE, "gp_generate: prompt[%d] = %d is outside the vocabulary (%d ids)", (int)i,
                                (int)prompt[i], (int)e->n_vocab);
    return GP_OK;
}

gp_status gp_gen_seq_begin(gp_gen_seq *q, const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt,
                           const gp_gen_config *cfg, gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    memset(q, 0, sizeof *q);
    if (!result) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: result is NULL");
    memset(result, 0, sizeof *result);
    result->stop_index = -1;
    gp_status s = seq_check(e, prompt, n_prompt, cfg);
    if (s) return s;
    const int32_t V = e->n_vocab;
    q->e = e, q->cfg = cfg, q->on_token = on_token, q->user_data = user_data, q->result = result;
    q->n_prompt = n_prompt;
    /* the cap on new tokens, as transformers' max_length = prompt + max_new_tokens (max_new_tokens wins) */
    q->limit = INT32_MAX - (int64_t)n_prompt;
    if (cfg->max_new_tokens > 0) q->limit = cfg->max_new_tokens;
    else if (cfg->max_length > 0) q->limit = cfg->max_length > n_prompt ? cfg->max_length - n_prompt : 1;
    q->max_len = (cfg->max_new_tokens > 0 || cfg->max_length > 0) ? (int32_t)(n_prompt + q->limit) : 0;
    q->want_lp = cfg->logprobs > 0 || cfg->top_logprobs > 0;
    q->n_top = cfg->top_logprobs > V ? V : cfg->top_logprobs;
    q->t0 = gp_now();
    s = gp_sample_ws_init(&q->ws, V);
    if (!s) {
        q->logits = e->logits_buf ? e->logits_buf : gp_malloc((size_t)V, sizeof(float));
        q->scores = gp_malloc((size_t)V, sizeof(float));
        q->lp = q->want_lp ? gp_malloc((size_t)V, sizeof(float)) : NULL;
        size_t first = (size_t)n_prompt + (size_t)(q->limit < 256 ? q->limit : 256);
        if (!q->logits || !q->scores || (q->want_lp && !q->lp) ||
            !grow((void **)&q->ids, &q->ids_cap, first, sizeof(int32_t)) || text_append(&q->text, ""))
            s = GP_ERR_NOMEM;
    }
    if (!s) {
        memcpy(q->ids, prompt, (size_t)n_prompt * sizeof(int32_t));
        e->reset(e->self); /* prefill */
        s = e->eval(e->self, prompt, n_prompt, q->logits);
    }
    if (s) {
        seq_free(q);
        return s;
    }
    q->t1 = gp_now();
    result->n_prompt = n_prompt;
    result->prompt_seconds = q->t1 - q->t0;
    gp_rng_seed(&q->rng, cfg->seed);
    return GP_OK;
}

/* Processors and the choice of one id from q->logits; returns GP_OK and *tok. */
static gp_status seq_choose(gp_gen_seq *q, int32_t *tok) {
    const gp_gen_config *cfg = q->cfg;
    const int32_t V = q->e->n_vocab, n_ids = q->n_prompt + q->n_new;
    memcpy(q->scores, q->logits, (size_t)V * sizeof(float));
    gp_status s = gp_process_scores(cfg, q->scores, V, q->ids, n_ids, q->n_prompt, q->max_len, &q->ws);
    if (s) return s;
    const double u = gp_rng_uniform(&q->rng); /* one draw per step, whatever picks the id */
    if (cfg->sampler) {
        *tok = -1;
        s = cfg->sampler(q->scores, V, q->ids, n_ids, u, cfg->sampler_user_data, tok);
        if (s) return s;
        if (*tok < 0 || *tok >= V)
            return gp_set_error(GP_ERR_RANGE, "gen_config: field 'sampler' returned id %d outside the vocabulary",
                                (int)*tok);
    } else if (cfg->do_sample) {
        *tok = gp_sample_multinomial(q->scores, V, u, q->ws.f0);
        if (*tok < 0) {
            char why[256];
            gp_scores_diagnose(q->scores, V, why, sizeof why);
            return gp_set_error(GP_ERR_STATE, "gp_generate: step %d: nothing to sample: %s", (int)q->n_new, why);
        }
    } else *tok = gp_argmax_f32(q->scores, V);
    return GP_OK;
}

/* Records the chosen id (and its logprobs); *lp / *top receive what the stream event carries. */
static gp_status seq_record(gp_gen_seq *q, int32_t tok, float *lp, gp_top_logprob **top) {
    const int32_t V = q->e->n_vocab, n_ids = q->n_prompt + q->n_new;
    *lp = NAN;
    *top = NULL;
    if (q->want_lp) {
        gp_log_softmax_f32(q->cfg->logprobs_raw ? q->logits : q->scores, V, q->lp);
        *lp = q->lp[tok];
        if (!grow((void **)&q->logprobs, &q->lp_cap, (size_t)q->n_new + 1, sizeof(float))) return GP_ERR_NOMEM;
        q->logprobs[q->n_new] = *lp;
        if (q->n_top > 0) {
            if (!grow((void **)&q->top, &q->top_cap, ((size_t)q->n_new + 1) * (size_t)q->n_top, sizeof *q->top))
                return GP_ERR_NOMEM;
            *top = q->top + (size_t)q->n_new * (size_t)q->n_top;
            gp_top_n(q->lp, V, q->n_top, *top);
        }
    }
    if (!grow((void **)&q->ids, &q->ids_cap, (size_t)n_ids + 1, sizeof(int32_t))) return GP_ERR_NOMEM;
    q->ids[n_ids] = tok;
    q->n_new++;
    return GP_OK;
}

/* Text of the new id (the stopping EOS left out; at the end the detokenizer gives back what it held) and stop
 * strings. */
static gp_status seq_text(gp_gen_seq *q, int32_t tok, int stop_eos) {
    const gp_gen_engine *e = q->e;
    const gp_gen_config *cfg = q->cfg;
    if (!e->detok_push) return GP_OK;
    const char *piece = NULL;
    gp_status s = GP_OK;
    if (!stop_eos) {
        s = e->detok_push(e->self, tok, &piece);
        if (!s) s = text_append(&q->text, piece);
    }
    if (!s && q->finish != GP_FINISH_NONE) {
        piece = NULL;
        s = e->detok_flush(e->self, &piece);
        if (!s) s = text_append(&q->text, piece);
        q->detok_flushed = 1;
    }
    if (s || cfg->n_stop_strings <= 0) return s;
    int32_t which = -1;
    int64_t at = gp_stop_find(q->text.buf, q->text.len, q->text.checked, cfg->stop_strings, cfg->n_stop_strings, &which);
    q->text.checked = q->text.len;
    if (at >= 0) {
        q->text.len = (size_t)at > q->text.emitted ? (size_t)at : q->text.emitted;
        q->text.buf[q->text.len] = 0;
        q->finish = GP_FINISH_STOP_STRING;
        q->result->stop_index = which;
    }
    return GP_OK;
}

/* The streaming callback for the new id; a non-zero return cancels. */
static void seq_stream(gp_gen_seq *q, int32_t tok, float lp, const gp_top_logprob *top) {
    const gp_gen_config *cfg = q->cfg;
    gp_gen_text *t = &q->text;
    size_t end = t->len;
    if (q->finish == GP_FINISH_NONE && cfg->n_stop_strings > 0)
        end -= gp_stop_holdback(t->buf, t->len, cfg->stop_strings, cfg->n_stop_strings);
    if (end < t->emitted) end = t->emitted;
    gp_token_event ev = {0};
    ev.id = tok;
    ev.index = q->n_new - 1;
    ev.piece = t->buf + t->emitted;
    ev.piece_len = end - t->emitted;
    char saved = t->buf[end];
    t->buf[end] = 0; /* the piece is NUL-terminated during the call */
    ev.logprob = lp;
    ev.top = top;
    ev.n_top = top ? q->n_top : 0;
    ev.finish = q->finish;
    int stop = q->on_token(&ev, q->user_data);
    t->buf[end] = saved;
    t->emitted = end;
    if (stop && q->finish == GP_FINISH_NONE) {
        q->finish = GP_FINISH_CANCELLED;
        q->ret = GP_ERR_CANCELLED;
        gp_set_error(GP_ERR_CANCELLED, "gp_generate: the token callback stopped generation after %d ids", (int)q->n_new);
    }
}

int gp_gen_seq_next(gp_gen_seq *q, int32_t *next) {
    if (q->finish != GP_FINISH_NONE || q->ret != GP_OK) return 0;
    int32_t tok;
    float lp;
    gp_top_logprob *top;
    gp_status s = seq_choose(q, &tok);
    if (!s) s = seq_record(q, tok, &lp, &top);
    if (s) {
        q->ret = s;
        return 0;
    }
    const gp_gen_config *cfg = q->cfg;
    const int stop_eos = is_eos(cfg, tok) && !cfg->ignore_eos;
    if (stop_eos) q->finish = GP_FINISH_STOP;
    else if (q->n_new >= q->limit) q->finish = GP_FINISH_LENGTH;
    else if (cfg->max_time > 0 && gp_now() - q->t0 > cfg->max_time) q->finish = GP_FINISH_TIME;
    if ((s = seq_text(q, tok, stop_eos))) {
        q->ret = s;
        return 0;
    }
    if (q->on_token) seq_stream(q, tok, lp, top);
    if (q->finish != GP_FINISH_NONE) return 0;
    *next = tok;
    return 1;
}

int gp_gen_seq_decoded(gp_gen_seq *q, gp_status s) {
    if (s == GP_ERR_RANGE) { /* the context is full */
        q->finish = GP_FINISH_CONTEXT;
        gp_clear_error();
        return 0;
    }
    if (s) {
        q->ret = s;
        return 0;
    }
    return 1;
}

gp_status gp_gen_seq_end(gp_gen_seq *q) {
    gp_gen_result *result = q->result;
    const gp_gen_engine *e = q->e;
    gp_status ret = q->ret;
    if (ret != GP_OK && ret != GP_ERR_CANCELLED) goto fail;
    /* text still held by the detokenizer (context full, cancelled) */
    if (e->detok_push && !q->detok_flushed && q->finish != GP_FINISH_STOP_STRING) {
        const char *piece = NULL;
        if (e->detok_flush(e->self, &piece) == GP_OK && text_append(&q->text, piece) != GP_OK) {
            ret = GP_ERR_NOMEM;
            goto fail;
        }
    }
    result->gen_seconds = gp_now() - q->t1;
    result->finish_reason = q->finish;
    result->n_tokens = q->n_new;
    result->tokens = gp_malloc((size_t)q->n_new, sizeof(int32_t));
    if (!result->tokens) {
        ret = GP_ERR_NOMEM;
        goto fail;
    }
    memcpy(result->tokens, q->ids + q->n_prompt, (size_t)q->n_new * sizeof(int32_t));
    if (e->detok_push) {
        result->text = q->text.buf;
        result->text_len = q->text.len;
        q->text.buf = NULL;
    }
    if (q->want_lp) {
        result->logprobs = q->logprobs;
        q->logprobs = NULL;
        if (q->n_top > 0) {
            result->top_logprobs = q->top;
            result->n_top = q->n_top;
            q->top = NULL;
        }
    }
    seq_free(q);
    return ret;
fail:
    seq_free(q);
    free(result->tokens);
    memset(result, 0, sizeof *result);
    result->stop_index = -1;
    return ret;
}

gp_status gp_gen_run(const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                     gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    gp_gen_seq q;
    gp_status s = gp_gen_seq_begin(&q, e, prompt, n_prompt, cfg, on_token, user_data, result);
    if (s) return s;
    int32_t tok;
    while (gp_gen_seq_next(&q, &tok))
        if (!gp_gen_seq_decoded(&q, e->eval(e->self, &tok, 1, q.logits))) break;
    return gp_gen_seq_end(&q);
}
