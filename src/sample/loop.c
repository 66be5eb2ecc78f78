/* loop.c — the generation loop, independent of the model: prefill, then per step processors -> choice -> stopping
 * criteria (EOS set, length, stop strings across token boundaries, time) -> streaming callback -> one-token decode.
 * gp_generate (generate.c) runs it on a gp_ctx; tests run it on a fake engine.  Also frees results. */
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

/* Text accumulated from the detokenizer, with what was already streamed. */
typedef struct {
    char *buf;
    size_t len, cap;
    size_t emitted; /* bytes already given to the callback */
    size_t checked; /* bytes already searched for stop strings */
} gen_text;

static gp_status text_append(gen_text *t, const char *s) {
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

typedef struct {
    int32_t *ids; /* prompt + generated */
    size_t ids_cap;
    float *logprobs;
    size_t lp_cap;
    gp_top_logprob *top;
    size_t top_cap;
    float *logits, *scores, *lp;
    gp_sample_ws ws;
    gen_text text;
} gen_state;

static void state_free(gen_state *st) {
    free(st->ids);
    free(st->logprobs);
    free(st->top);
    free(st->logits);
    free(st->scores);
    free(st->lp);
    free(st->text.buf);
    gp_sample_ws_free(&st->ws);
}

gp_status gp_gen_run(const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                     gp_token_cb on_token, void *user_data, gp_gen_result *result) {
    if (!result) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: result is NULL");
    memset(result, 0, sizeof *result);
    result->stop_index = -1;
    if (!e || !cfg || !prompt || n_prompt <= 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate: %s", !cfg ? "cfg is NULL"
                                                                   : !e ? "no engine"
                                                                        : "the prompt is empty (at least one id)");
    const int32_t V = e->n_vocab;
    gp_status s = gp_gen_config_validate(cfg, V);
    if (s) return s;
    if (cfg->n_stop_strings > 0 && !e->detok_push)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'stop_strings' needs a tokenizer, the model has none");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return gp_set_error(GP_ERR_RANGE, "gp_generate: prompt[%d] = %d is outside the vocabulary (%d ids)", (int)i,
                                (int)prompt[i], (int)V);

    /* the cap on new tokens, as transformers' max_length = prompt + max_new_tokens (max_new_tokens wins) */
    int64_t limit = INT32_MAX - (int64_t)n_prompt;
    if (cfg->max_new_tokens > 0) limit = cfg->max_new_tokens;
    else if (cfg->max_length > 0) limit = cfg->max_length > n_prompt ? cfg->max_length - n_prompt : 1;
    const int32_t max_len = (cfg->max_new_tokens > 0 || cfg->max_length > 0) ? (int32_t)(n_prompt + limit) : 0;
    const int want_lp = cfg->logprobs > 0 || cfg->top_logprobs > 0;
    const int32_t n_top = cfg->top_logprobs > V ? V : cfg->top_logprobs;

    gen_state st;
    memset(&st, 0, sizeof st);
    const double t0 = gp_now();
    s = gp_sample_ws_init(&st.ws, V);
    if (!s) {
        st.logits = gp_malloc((size_t)V, sizeof(float));
        st.scores = gp_malloc((size_t)V, sizeof(float));
        st.lp = want_lp ? gp_malloc((size_t)V, sizeof(float)) : NULL;
        size_t first = (size_t)n_prompt + (size_t)(limit < 256 ? limit : 256);
        if (!st.logits || !st.scores || (want_lp && !st.lp) ||
            !grow((void **)&st.ids, &st.ids_cap, first, sizeof(int32_t)) || text_append(&st.text, ""))
            s = GP_ERR_NOMEM;
    }
    if (s) {
        state_free(&st);
        return s;
    }
    memcpy(st.ids, prompt, (size_t)n_prompt * sizeof(int32_t));

    /* prefill */
    e->reset(e->self);
    s = e->eval(e->self, prompt, n_prompt, st.logits);
    if (s) {
        state_free(&st);
        return s;
    }
    const double t1 = gp_now();
    result->n_prompt = n_prompt;
    result->prompt_seconds = t1 - t0;

    gp_rng rng;
    gp_rng_seed(&rng, cfg->seed);
    gp_finish_reason finish = GP_FINISH_NONE;
    gp_status ret = GP_OK;
    int32_t n_new = 0;
    int detok_flushed = 0;

    for (;;) {
        const int32_t n_ids = n_prompt + n_new;
        memcpy(st.scores, st.logits, (size_t)V * sizeof(float));
        s = gp_process_scores(cfg, st.scores, V, st.ids, n_ids, n_prompt, max_len, &st.ws);
        if (s) {
            ret = s;
            break;
        }
        const double u = gp_rng_uniform(&rng); /* one draw per step, whatever picks the id */
        int32_t tok;
        if (cfg->sampler) {
            tok = -1;
            s = cfg->sampler(st.scores, V, st.ids, n_ids, u, cfg->sampler_user_data, &tok);
            if (s) {
                ret = s;
                break;
            }
            if (tok < 0 || tok >= V) {
                ret = gp_set_error(GP_ERR_RANGE, "gen_config: field 'sampler' returned id %d outside the vocabulary",
                                   (int)tok);
                break;
            }
        } else if (cfg->do_sample) {
            tok = gp_sample_multinomial(st.scores, V, u, st.ws.f0);
            if (tok < 0) {
                char why[256];
                gp_scores_diagnose(st.scores, V, why, sizeof why);
                ret = gp_set_error(GP_ERR_STATE, "gp_generate: step %d: nothing to sample: %s", (int)n_new, why);
                break;
            }
        } else tok = gp_argmax_f32(st.scores, V);

        /* logprobs of the chosen id and the top alternatives */
        float tok_lp = NAN;
        gp_top_logprob *top = NULL;
        if (want_lp) {
            gp_log_softmax_f32(cfg->logprobs_raw ? st.logits : st.scores, V, st.lp);
            tok_lp = st.lp[tok];
            if (!grow((void **)&st.logprobs, &st.lp_cap, (size_t)n_new + 1, sizeof(float))) {
                ret = GP_ERR_NOMEM;
                break;
            }
            st.logprobs[n_new] = tok_lp;
            if (n_top > 0) {
                if (!grow((void **)&st.top, &st.top_cap, ((size_t)n_new + 1) * (size_t)n_top, sizeof *st.top)) {
                    ret = GP_ERR_NOMEM;
                    break;
                }
                top = st.top + (size_t)n_new * (size_t)n_top;
                gp_top_n(st.lp, V, n_top, top);
            }
        }
        if (!grow((void **)&st.ids, &st.ids_cap, (size_t)n_ids + 1, sizeof(int32_t))) {
            ret = GP_ERR_NOMEM;
            break;
        }
        st.ids[n_ids] = tok;
        n_new++;

        /* stopping criteria */
        const int stop_eos = is_eos(cfg, tok) && !cfg->ignore_eos;
        if (stop_eos) finish = GP_FINISH_STOP;
        else if (n_new >= limit) finish = GP_FINISH_LENGTH;
        else if (cfg->max_time > 0 && gp_now() - t0 > cfg->max_time) finish = GP_FINISH_TIME;

        /* text: the stopping EOS is left out; at the end the detokenizer gives back what it held */
        if (e->detok_push) {
            const char *piece = NULL;
            if (!stop_eos) {
                s = e->detok_push(e->self, tok, &piece);
                if (!s) s = text_append(&st.text, piece);
            }
            if (!s && finish != GP_FINISH_NONE) {
                piece = NULL;
                s = e->detok_flush(e->self, &piece);
                if (!s) s = text_append(&st.text, piece);
                detok_flushed = 1;
            }
            if (s) {
                ret = s;
                break;
            }
            if (cfg->n_stop_strings > 0) {
                int32_t which = -1;
                int64_t at = gp_stop_find(st.text.buf, st.text.len, st.text.checked, cfg->stop_strings,
                                          cfg->n_stop_strings, &which);
                st.text.checked = st.text.len;
                if (at >= 0) {
                    st.text.len = (size_t)at > st.text.emitted ? (size_t)at : st.text.emitted;
                    st.text.buf[st.text.len] = 0;
                    finish = GP_FINISH_STOP_STRING;
                    result->stop_index = which;
                }
            }
        }

        /* stream */
        if (on_token) {
            size_t end = st.text.len;
            if (finish == GP_FINISH_NONE && cfg->n_stop_strings > 0)
                end -= gp_stop_holdback(st.text.buf, st.text.len, cfg->stop_strings, cfg->n_stop_strings);
            if (end < st.text.emitted) end = st.text.emitted;
            gp_token_event ev = {0};
            ev.id = tok;
            ev.index = n_new - 1;
            ev.piece = st.text.buf + st.text.emitted;
            ev.piece_len = end - st.text.emitted;
            char saved = st.text.buf[end];
            st.text.buf[end] = 0; /* the piece is NUL-terminated during the call */
            ev.logprob = tok_lp;
            ev.top = top;
            ev.n_top = top ? n_top : 0;
            ev.finish = finish;
            int stop = on_token(&ev, user_data);
            st.text.buf[end] = saved;
            st.text.emitted = end;
            if (stop && finish == GP_FINISH_NONE) {
                finish = GP_FINISH_CANCELLED;
                ret = GP_ERR_CANCELLED;
                gp_set_error(GP_ERR_CANCELLED, "gp_generate: the token callback stopped generation after %d ids",
                             (int)n_new);
            }
        }
        if (finish != GP_FINISH_NONE) break;

        /* decode the chosen id */
        s = e->eval(e->self, &tok, 1, st.logits);
        if (s == GP_ERR_RANGE) { /* the context is full */
            finish = GP_FINISH_CONTEXT;
            gp_clear_error();
            break;
        }
        if (s) {
            ret = s;
            break;
        }
    }

    if (ret != GP_OK && ret != GP_ERR_CANCELLED) {
        state_free(&st);
        memset(result, 0, sizeof *result);
        result->stop_index = -1;
        return ret;
    }
    /* text still held by the detokenizer (context full, cancelled) */
    if (e->detok_push && !detok_flushed && finish != GP_FINISH_STOP_STRING) {
        const char *piece = NULL;
        if (e->detok_flush(e->self, &piece) == GP_OK && text_append(&st.text, piece) != GP_OK) {
            state_free(&st);
            memset(result, 0, sizeof *result);
            return GP_ERR_NOMEM;
        }
    }
    result->gen_seconds = gp_now() - t1;
    result->finish_reason = finish;
    result->n_tokens = n_new;
    result->tokens = gp_malloc((size_t)n_new, sizeof(int32_t));
    if (!result->tokens) {
        state_free(&st);
        memset(result, 0, sizeof *result);
        return GP_ERR_NOMEM;
    }
    memcpy(result->tokens, st.ids + n_prompt, (size_t)n_new * sizeof(int32_t));
    if (e->detok_push) {
        result->text = st.text.buf;
        result->text_len = st.text.len;
        st.text.buf = NULL;
    }
    if (want_lp) {
        result->logprobs = st.logprobs;
        st.logprobs = NULL;
        if (n_top > 0) {
            result->top_logprobs = st.top;
            result->n_top = n_top;
            st.top = NULL;
        }
    }
    state_free(&st);
    return ret;
}
