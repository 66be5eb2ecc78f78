/* processors.c — transformers' logits processors (applied in greedy and sampling modes), one function each, in
 * the order of transformers' _get_logits_processor, plus the workspace they share.  float32 scores; masked = -inf. */
#include "sample/sample.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

gp_status gp_sample_ws_init(gp_sample_ws *ws, int32_t n_vocab) {
    memset(ws, 0, sizeof *ws);
    if (n_vocab <= 0) return gp_set_error(GP_ERR_INVALID_ARG, "sampler: n_vocab %d must be > 0", (int)n_vocab);
    size_t n = (size_t)n_vocab;
    ws->n_vocab = n_vocab;
    ws->f0 = gp_malloc(n, sizeof(float));
    ws->f1 = gp_malloc(n, sizeof(float));
    ws->idx = gp_malloc(n, sizeof(int32_t));
    ws->idx2 = gp_malloc(n, sizeof(int32_t));
    ws->mask = gp_calloc(n, 1);
    ws->counts = gp_calloc(n, sizeof(int32_t));
    if (!ws->f0 || !ws->f1 || !ws->idx || !ws->idx2 || !ws->mask || !ws->counts) {
        gp_sample_ws_free(ws);
        return GP_ERR_NOMEM;
    }
    return GP_OK;
}

void gp_sample_ws_free(gp_sample_ws *ws) {
    if (!ws) return;
    free(ws->f0);
    free(ws->f1);
    free(ws->idx);
    free(ws->idx2);
    free(ws->mask);
    free(ws->counts);
    memset(ws, 0, sizeof *ws);
}

/* 1 if ids ends with seq [n] (n == 0: always). */
static int ends_with(const int32_t *ids, int32_t n_ids, const int32_t *seq, int32_t n) {
    if (n > n_ids) return 0;
    for (int32_t i = 0; i < n; i++)
        if (ids[n_ids - n + i] != seq[i]) return 0;
    return 1;
}

static int in_list(int32_t id, const int32_t *list, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (list[i] == id) return 1;
    return 0;
}

static int same_seq(const gp_seq_bias *a, const gp_seq_bias *b) {
    return a->n == b->n && a->ids && b->ids && !memcmp(a->ids, b->ids, (size_t)a->n * sizeof(int32_t));
}

/* scores [n_vocab] += bias [n_vocab] where bias is the float32 sum of the matching entries (transformers builds a
 * zero bias tensor, adds the length-1 biases, then each longer sequence whose prefix matches, then scores + bias).
 * Duplicate sequences: the last entry wins, as in the dict transformers builds. */
void gp_proc_sequence_bias(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids,
                           const gp_seq_bias *sb, int32_t n_sb, gp_sample_ws *ws) {
    float *bias = ws->f1;
    int32_t *touched = ws->idx;
    int32_t nt = 0;
    /* the bias vector is sparse: touched ids are marked in ws->mask */
    for (int pass = 0; pass < 2; pass++) { /* pass 0: length-1 entries, pass 1: longer ones */
        for (int32_t i = 0; i < n_sb; i++) {
            const gp_seq_bias *e = &sb[i];
            if (e->n <= 0 || !e->ids) continue;
            if ((pass == 0) != (e->n == 1)) continue;
            int32_t last = e->ids[e->n - 1];
            if (last < 0 || last >= n_vocab) continue;
            /* like the dict transformers builds: a sequence keeps the place of its first entry and the value of
             * its last one */
            int seen_before = 0;
            for (int32_t j = 0; j < i && !seen_before; j++) seen_before = same_seq(&sb[j], e);
            if (seen_before) continue;
            double value = e->bias;
            for (int32_t j = i + 1; j < n_sb; j++)
                if (same_seq(&sb[j], e)) value = sb[j].bias;
            if (pass == 1 && (e->n > n_ids || !ends_with(ids, n_ids, e->ids, e->n - 1))) continue;
            if (!ws->mask[last]) {
                ws->mask[last] = 1;
                bias[last] = 0.0f;
                touched[nt++] = last;
            }
            if (pass == 0) bias[last] = (float)value; /* length_1_bias[ids] = values (assignment) */
            else bias[last] = bias[last] + (float)value;
        }
    }
    for (int32_t i = 0; i < nt; i++) {
        int32_t t = touched[i];
        scores[t] = scores[t] + bias[t];
        ws->mask[t] = 0;
    }
}

void gp_proc_repetition_penalty(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double penalty,
                                gp_sample_ws *ws) {
    const float p = (float)penalty;
    for (int32_t i = 0; i < n_ids; i++) {
        int32_t t = ids[i];
        if (t < 0 || t >= n_vocab || ws->mask[t]) continue;
        ws->mask[t] = 1;
        float s = scores[t];
        scores[t] = s < 0.0f ? s * p : s / p;
    }
    for (int32_t i = 0; i < n_ids; i++)
        if (ids[i] >= 0 && ids[i] < n_vocab) ws->mask[ids[i]] = 0;
}

void gp_proc_no_repeat_ngram(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, int32_t ngram) {
    if (ngram <= 0 || n_ids < ngram) return;
    const int32_t *prefix = ids + n_ids - (ngram - 1); /* the last ngram-1 ids */
    /* every window ids[s .. s+ngram-1] whose first ngram-1 ids equal the prefix bans its last id */
    for (int32_t s = 0; s + ngram <= n_ids; s++) {
        if (ngram > 1 && memcmp(ids + s, prefix, (size_t)(ngram - 1) * sizeof(int32_t)) != 0) continue;
        int32_t t = ids[s + ngram - 1];
        if (t >= 0 && t < n_vocab) scores[t] = -INFINITY;
    }
}

void gp_proc_bad_words(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, const gp_token_seq *bw,
                       int32_t n_bw, const int32_t *eos, int32_t n_eos) {
    for (int32_t i = 0; i < n_bw; i++) {
        const gp_token_seq *w = &bw[i];
        if (w->n <= 0 || !w->ids) continue;
        if (w->n == 1 && in_list(w->ids[0], eos, n_eos)) continue; /* transformers drops [eos] entries */
        int32_t last = w->ids[w->n - 1];
        if (last < 0 || last >= n_vocab) continue;
        if (w->n > 1 && (w->n > n_ids || !ends_with(ids, n_ids, w->ids, w->n - 1))) continue;
        scores[last] = -INFINITY;
    }
}

static void mask_ids(float *scores, int32_t n_vocab, const int32_t *tok, int32_t n_tok) {
    for (int32_t i = 0; i < n_tok; i++)
        if (tok[i] >= 0 && tok[i] < n_vocab) scores[tok[i]] = -INFINITY;
}

void gp_proc_min_length(float *scores, int32_t n_vocab, int32_t n_ids, int32_t min_length, const int32_t *eos,
                        int32_t n_eos) {
    if (n_ids < min_length) mask_ids(scores, n_vocab, eos, n_eos);
}

void gp_proc_min_new_tokens(float *scores, int32_t n_vocab, int32_t n_ids, int32_t n_prompt, int32_t min_new_tokens,
                            const int32_t *eos, int32_t n_eos) {
    if (n_ids - n_prompt < min_new_tokens) mask_ids(scores, n_vocab, eos, n_eos);
}

static void force_one(float *scores, int32_t n_vocab, int32_t id) {
    for (int32_t i = 0; i < n_vocab; i++) scores[i] = -INFINITY;
    if (id >= 0 && id < n_vocab) scores[id] = 0.0f;
}

void gp_proc_forced_bos(float *scores, int32_t n_vocab, int32_t n_ids, int32_t bos) {
    if (n_ids == 1) force_one(scores, n_vocab, bos);
}

void gp_proc_forced_eos(float *scores, int32_t n_vocab, int32_t n_ids, int32_t max_length, int32_t eos) {
    if (max_length > 0 && n_ids == max_length - 1) force_one(scores, n_vocab, eos);
}

void gp_proc_suppress_tokens(float *scores, int32_t n_vocab, const int32_t *tok, int32_t n_tok) {
    mask_ids(scores, n_vocab, tok, n_tok);
}

void gp_proc_begin_suppress(float *scores, int32_t n_vocab, int32_t n_ids, int32_t begin_index, const int32_t *tok,
                            int32_t n_tok) {
    if (n_ids == begin_index) mask_ids(scores, n_vocab, tok, n_tok);
}

/* EncoderNoRepeatNGramLogitsProcessor on a decoder-only model (the prompt is the "encoder input"): -inf for every
 * token that would complete, after the last ngram-1 ids, an n-gram that occurs in the prompt. */
void gp_proc_encoder_no_repeat_ngram(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids,
                                     const int32_t *prompt, int32_t n_prompt, int32_t ngram) {
    if (ngram <= 0 || n_ids < ngram - 1 || n_prompt < ngram) return;
    const int32_t *prefix = ids + n_ids - (ngram - 1);
    for (int32_t s = 0; s + ngram <= n_prompt; s++) {
        if (ngram > 1 && memcmp(prompt + s, prefix, (size_t)(ngram - 1) * sizeof(int32_t)) != 0) continue;
        int32_t t = prompt[s + ngram - 1];
        if (t >= 0 && t < n_vocab) scores[t] = -INFINITY;
    }
}

void gp_proc_remove_invalid(float *scores, int32_t n_vocab) {
    for (int32_t i = 0; i < n_vocab; i++) {
        float s = scores[i];
        if (s != s) scores[i] = 0.0f;
        else if (s == INFINITY) scores[i] = FLT_MAX;
        else if (s == -INFINITY) scores[i] = -FLT_MAX;
    }
}

void gp_proc_exp_decay(float *scores, int32_t n_vocab, int32_t n_ids, int32_t n_prompt, int32_t start, double factor,
                       const int32_t *eos, int32_t n_eos) {
    const int64_t reg_start = (int64_t)start + n_prompt;
    if (start < 0 || factor <= 0.0 || n_ids <= reg_start) return;
    const float f = (float)(pow(factor, (double)(n_ids - reg_start)) - 1.0);
    float pen[GP_MAX_EOS];
    for (int32_t i = 0; i < n_eos; i++) /* every penalty from the scores before any is added */
        pen[i] = eos[i] >= 0 && eos[i] < n_vocab ? fabsf(scores[eos[i]]) * f : 0.0f;
    for (int32_t i = 0; i < n_eos; i++) {
        int dup = 0;
        for (int32_t j = 0; j < i; j++) dup |= eos[j] == eos[i];
        if (!dup && eos[i] >= 0 && eos[i] < n_vocab) scores[eos[i]] = scores[eos[i]] + pen[i];
    }
}

void gp_proc_renormalize(float *scores, int32_t n_vocab, gp_sample_ws *ws) {
    gp_log_softmax_f32(scores, n_vocab, ws->f1);
    memcpy(scores, ws->f1, (size_t)n_vocab * sizeof(float));
}
