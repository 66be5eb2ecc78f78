/* beam.c — beam search with transformers' semantics (generation/utils.py _beam_search, float32): per step each
 * beam's logits -> log_softmax -> the logits processors (on log-probabilities, each beam with its own ids) -> plus
 * the beam's running score; the top K = max(2, 1 + n_eos) * num_beams continuations over every beam; the best
 * num_beams that did not hit a stopping criterion keep running; those among the first num_beams that did are scored
 * sum / new_length^length_penalty and merged into the num_beams finished slots; early_stopping True / False / "never"
 * decides when the search ends.  Ties in every top-k go to the lower index.  The engine runs the beams' caches. */
#include "sample/sample.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NEG_BIG (-1.0e9f) /* transformers' -1e9 masks */

gp_status gp_beam_check(const gp_gen_config *g, int combos) {
    /* 0 (a zero-initialised config) means the default, 1 */
    if (g->num_beams < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'num_beams' = %d must be >= 1",
                                              (int)g->num_beams);
    if (g->num_return_sequences < 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'num_return_sequences' = %d must be >= 1",
                            (int)g->num_return_sequences);
    if (isnan(g->length_penalty) || isinf(g->length_penalty))
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'length_penalty' must be a finite number");
    if (g->early_stopping < GP_EARLY_STOPPING_FALSE || g->early_stopping > GP_EARLY_STOPPING_NEVER)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'early_stopping' = %d must be 0 (False), 1 (True) "
                            "or 2 (\"never\")", (int)g->early_stopping);
    if (g->num_beams <= 1 || !combos) return GP_OK;
    const char *no = NULL;
    if (g->num_return_sequences > g->num_beams)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'num_return_sequences' = %d must be <= num_beams "
                            "= %d (as transformers)", (int)g->num_return_sequences, (int)g->num_beams);
    if (g->do_sample) no = "do_sample (beam-search multinomial sampling)";
    else if (g->n_stop_strings > 0) no = "stop_strings";
    else if (g->logprobs || g->top_logprobs) no = "logprobs";
    else if (g->sampler) no = "sampler";
    if (no) return gp_set_error(GP_ERR_UNSUPPORTED, "gen_config: field 'num_beams' = %d: %s is not supported with "
                                "beam search", (int)g->num_beams, no);
    if (g->max_new_tokens <= 0 && g->max_length <= 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: field 'num_beams' = %d needs max_new_tokens or "
                            "max_length (beam search has a fixed length bound)", (int)g->num_beams);
    return GP_OK;
}

void gp_beam_out_free(gp_beam_out *o) {
    if (!o) return;
    free(o->tokens);
    free(o->off);
    free(o->len);
    free(o->score);
    free(o->finish);
    memset(o, 0, sizeof *o);
}

/* Keeps the k best (value, index) pairs in tv/ti [k], descending; called with ascending idx, so ties keep the lower
 * index first (torch.topk's order for distinct values). */
static void topk_push(float *tv, int64_t *ti, int32_t *cnt, int32_t k, float v, int64_t idx) {
    if (*cnt == k && !(v > tv[k - 1])) return;
    int32_t p = *cnt < k ? (*cnt)++ : k - 1;
    while (p > 0 && v > tv[p - 1]) {
        tv[p] = tv[p - 1];
        ti[p] = ti[p - 1];
        p--;
    }
    tv[p] = v;
    ti[p] = idx;
}

/* Indices of the k largest of v [n] (descending, ties: lower index first) into sel [k]. */
static void topk_small(const float *v, int32_t n, int32_t k, int32_t *sel, float *tv, int64_t *ti) {
    int32_t cnt = 0;
    for (int32_t i = 0; i < n; i++) topk_push(tv, ti, &cnt, k, v[i], i);
    for (int32_t i = 0; i < k; i++) sel[i] = i < cnt ? (int32_t)ti[i] : 0;
}

typedef struct beam_state {
    int32_t B, K, V, W, L; /* beams, candidates kept, vocabulary, ids row width (prompt + L), max new tokens */
    int32_t *run, *run2;   /* [B, W] prompt + generated ids of the running beams (and the next step's) */
    float *run_score, *run_score2; /* [B] */
    int32_t *fin, *fin2;   /* [B, L] generated ids of the finished slots */
    int32_t *fin_len, *fin_len2;
    float *fin_score, *fin_score2;
    uint8_t *fin_done, *fin_done2;
    gp_finish_reason *fin_why, *fin_why2;
    float *logits, *lp, *cv, *tv, *merged; /* [B, V], [V], [K], [K], [B + K] */
    int64_t *ti;           /* [B + K] */
    int32_t *c_beam, *c_tok, *sel, *parent, *next_tok; /* [K], [K], [B + K], [B], [B] */
    uint8_t *c_hit;        /* [K] */
    gp_finish_reason *c_why;
    gp_sample_ws ws;
} beam_state;

static void beam_state_free(beam_state *s) {
    void *p[] = {s->run, s->run2, s->run_score, s->run_score2, s->fin, s->fin2, s->fin_len, s->fin_len2, s->fin_score, s->fin_score2,
                 s->fin_done, s->fin_done2, s->fin_why, s->fin_why2, s->logits, s->lp, s->cv, s->tv, s->merged,
                 s->ti, s->c_beam, s->c_tok, s->sel, s->parent, s->next_tok, s->c_hit, s->c_why};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
    gp_sample_ws_free(&s->ws);
}

static gp_status beam_state_init(beam_state *s, int32_t B, int32_t K, int32_t V, int32_t n_prompt, int32_t L) {
    memset(s, 0, sizeof *s);
    s->B = B, s->K = K, s->V = V, s->L = L, s->W = n_prompt + L;
    size_t b = (size_t)B, k = (size_t)K, bw = b * (size_t)s->W, bl = b * (size_t)L;
    s->run = gp_malloc(bw, sizeof(int32_t));
    s->run2 = gp_malloc(bw, sizeof(int32_t));
    s->run_score = gp_malloc(b, sizeof(float));
    s->run_score2 = gp_malloc(b, sizeof(float));
    s->fin = gp_calloc(bl, sizeof(int32_t));
    s->fin2 = gp_calloc(bl, sizeof(int32_t));
    s->fin_len = gp_calloc(b, sizeof(int32_t));
    s->fin_len2 = gp_calloc(b, sizeof(int32_t));
    s->fin_score = gp_malloc(b, sizeof(float));
    s->fin_score2 = gp_malloc(b, sizeof(float));
    s->fin_done = gp_calloc(b, 1);
    s->fin_done2 = gp_calloc(b, 1);
    s->fin_why = gp_calloc(b, sizeof(gp_finish_reason));
    s->fin_why2 = gp_calloc(b, sizeof(gp_finish_reason));
    s->logits = gp_malloc(b * (size_t)V, sizeof(float));
    s->lp = gp_malloc((size_t)V, sizeof(float));
    s->cv = gp_malloc(k, sizeof(float));
    s->tv = gp_malloc(b + k, sizeof(float));
    s->merged = gp_malloc(b + k, sizeof(float));
    s->ti = gp_malloc(b + k, sizeof(int64_t));
    s->c_beam = gp_malloc(k, sizeof(int32_t));
    s->c_tok = gp_malloc(k, sizeof(int32_t));
    s->sel = gp_malloc(b + k, sizeof(int32_t));
    s->parent = gp_malloc(b, sizeof(int32_t));
    s->next_tok = gp_malloc(b, sizeof(int32_t));
    s->c_hit = gp_malloc(k, 1);
    s->c_why = gp_malloc(k, sizeof(gp_finish_reason));
    void *p[] = {s->run, s->run2, s->run_score, s->run_score2, s->fin, s->fin2, s->fin_len, s->fin_len2, s->fin_score, s->fin_score2,
                 s->fin_done, s->fin_done2, s->fin_why, s->fin_why2, s->logits, s->lp, s->cv, s->tv, s->merged,
                 s->ti, s->c_beam, s->c_tok, s->sel, s->parent, s->next_tok, s->c_hit, s->c_why};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (!p[i]) return GP_ERR_NOMEM;
    for (int32_t j = 0; j < B; j++) {
        s->run_score[j] = j == 0 ? 0.0f : NEG_BIG; /* only beam 0's continuations compete at the first step */
        s->fin_score[j] = NEG_BIG;
    }
    return gp_sample_ws_init(&s->ws, V);
}

static int is_eos_id(const gp_gen_config *g, int32_t id) {
    for (int32_t i = 0; i < g->n_eos && i < GP_MAX_EOS; i++)
        if (g->eos_ids[i] == id) return 1;
    return 0;
}

/* Step c of _get_top_k_continuations: log_softmax -> processors -> + running score, top K over every beam.  t =
 * tokens generated so far; at t = 0 every beam has beam 0's logits (transformers runs num_beams identical rows). */
static gp_status top_continuations(beam_state *s, const gp_gen_config *g, int32_t n_prompt, int32_t t,
                                   int32_t max_len) {
    const int32_t V = s->V;
    int32_t cnt = 0;
    for (int32_t b = 0; b < s->B; b++) {
        if (t > 0 || b == 0) {
            gp_log_softmax_f32(s->logits + (size_t)b * (size_t)V, V, s->lp);
            gp_status st = gp_process_scores(g, s->lp, V, s->run + (size_t)b * (size_t)s->W, n_prompt + t, n_prompt,
                                             max_len, &s->ws);
            if (st) return st;
        }
        const float add = s->run_score[b];
        for (int32_t v = 0; v < V; v++)
            topk_push(s->cv, s->ti, &cnt, s->K, s->lp[v] + add, (int64_t)b * V + v);
    }
    for (int32_t c = 0; c < s->K; c++) {
        s->c_beam[c] = c < cnt ? (int32_t)(s->ti[c] / V) : 0;
        s->c_tok[c] = c < cnt ? (int32_t)(s->ti[c] % V) : 0;
        if (c >= cnt) s->cv[c] = -INFINITY;
    }
    return GP_OK;
}

/* Steps e and f: the next running beams (parents + tokens) and the merged finished slots. */
static void select_beams(beam_state *s, const gp_gen_config *g, int32_t n_prompt, int32_t t, int heur_ok) {
    const int32_t B = s->B, K = s->K, W = s->W, L = s->L;
    /* e. running: the best B candidates that did not hit a stopping criterion */
    for (int32_t c = 0; c < K; c++) s->merged[c] = s->c_hit[c] ? s->cv[c] + NEG_BIG : s->cv[c];
    topk_small(s->merged, K, B, s->sel, s->tv, s->ti);
    float *ns = s->run_score2;
    for (int32_t j = 0; j < B; j++) {
        int32_t c = s->sel[j];
        s->parent[j] = s->c_beam[c];
        s->next_tok[j] = s->c_tok[c];
        ns[j] = s->merged[c];
        memcpy(s->run2 + (size_t)j * W, s->run + (size_t)s->c_beam[c] * W, (size_t)(n_prompt + t) * sizeof(int32_t));
        s->run2[(size_t)j * W + n_prompt + t] = s->c_tok[c];
    }
    /* f. finished: score = sum / length^lp, masked unless among the first B and just finished */
    const float denom = (float)pow((double)(t + 1), g->length_penalty);
    int all_done = 1;
    for (int32_t j = 0; j < B; j++) all_done &= s->fin_done[j];
    const int full = all_done && g->early_stopping == GP_EARLY_STOPPING_TRUE;
    for (int32_t j = 0; j < B; j++) s->merged[j] = s->fin_score[j];
    for (int32_t c = 0; c < K; c++) {
        float v = s->cv[c] / denom;
        if (full) v += NEG_BIG;
        if (!heur_ok) v += NEG_BIG;
        if (!(s->c_hit[c] && c < B)) v += NEG_BIG;
        s->merged[B + c] = v;
    }
    topk_small(s->merged, B + K, B, s->sel, s->tv, s->ti);
    for (int32_t j = 0; j < B; j++) {
        int32_t m = s->sel[j];
        s->fin_score2[j] = s->merged[m];
        if (m < B) {
            memcpy(s->fin2 + (size_t)j * L, s->fin + (size_t)m * L, (size_t)s->fin_len[m] * sizeof(int32_t));
            s->fin_len2[j] = s->fin_len[m];
            s->fin_done2[j] = s->fin_done[m];
            s->fin_why2[j] = s->fin_why[m];
        } else {
            int32_t c = m - B;
            memcpy(s->fin2 + (size_t)j * L, s->run + (size_t)s->c_beam[c] * W + n_prompt, (size_t)t * sizeof(int32_t));
            s->fin2[(size_t)j * L + t] = s->c_tok[c];
            s->fin_len2[j] = t + 1;
            s->fin_done2[j] = s->c_hit[c] && c < B;
            s->fin_why2[j] = s->c_why[c];
        }
    }
#define SWAP(a, b) do { void *tmp_ = (void *)(a); (a) = (b); (b) = tmp_; } while (0)
    SWAP(s->run_score, s->run_score2);
    SWAP(s->run, s->run2);
    SWAP(s->fin, s->fin2);
    SWAP(s->fin_len, s->fin_len2);
    SWAP(s->fin_score, s->fin_score2);
    SWAP(s->fin_done, s->fin_done2);
    SWAP(s->fin_why, s->fin_why2);
#undef SWAP
}

/* _check_early_stop_heuristic after cur_len += 1 (t = new tokens now): can the best running beam still beat the
 * worst finished one? */
static int heuristic_unsatisfied(const beam_state *s, const gp_gen_config *g, int32_t t) {
    int32_t best_len = (g->early_stopping == GP_EARLY_STOPPING_NEVER && g->length_penalty > 0.0) ? s->L : t;
    float best = s->run_score[0] / (float)pow((double)best_len, g->length_penalty);
    float worst = s->fin_score[0];
    for (int32_t j = 1; j < s->B; j++) worst = s->fin_score[j] < worst ? s->fin_score[j] : worst;
    for (int32_t j = 0; j < s->B; j++)
        if (best > (s->fin_done[j] ? worst : NEG_BIG)) return 1;
    return 0;
}

static gp_status beam_output(const beam_state *s, int32_t n_ret, gp_beam_out *out) {
    int32_t total = 0;
    for (int32_t j = 0; j < n_ret; j++) total += s->fin_len[j];
    out->n = n_ret;
    out->tokens = gp_malloc(total ? (size_t)total : 1, sizeof(int32_t));
    out->off = gp_malloc((size_t)n_ret, sizeof(int32_t));
    out->len = gp_malloc((size_t)n_ret, sizeof(int32_t));
    out->score = gp_malloc((size_t)n_ret, sizeof(float));
    out->finish = gp_malloc((size_t)n_ret, sizeof(gp_finish_reason));
    if (!out->tokens || !out->off || !out->len || !out->score || !out->finish) return GP_ERR_NOMEM;
    int32_t at = 0;
    for (int32_t j = 0; j < n_ret; j++) {
        out->off[j] = at;
        out->len[j] = s->fin_len[j];
        out->score[j] = s->fin_score[j];
        out->finish[j] = s->fin_why[j];
        memcpy(out->tokens + at, s->fin + (size_t)j * s->L, (size_t)s->fin_len[j] * sizeof(int32_t));
        at += s->fin_len[j];
    }
    return GP_OK;
}

gp_status gp_beam_run(const gp_beam_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_beam_out *out) {
    memset(out, 0, sizeof *out);
    gp_status st = gp_beam_check(cfg, 1);
    if (st) return st;
    const int32_t B = cfg->num_beams, V = e->n_vocab;
    int64_t lim = cfg->max_new_tokens > 0 ? cfg->max_new_tokens : (int64_t)cfg->max_length - n_prompt;
    if (lim < 1) lim = 1;
    if (lim > (1 << 24)) return gp_set_error(GP_ERR_RANGE, "gen_config: beam search over %lld new tokens is too long",
                                             (long long)lim);
    const int32_t L = (int32_t)lim, max_len = n_prompt + L;
    const int32_t n_eos = cfg->n_eos < 0 ? 0 : cfg->n_eos;
    const int32_t K = (1 + n_eos > 2 ? 1 + n_eos : 2) * B;
    if ((int64_t)K > (int64_t)B * V) return gp_set_error(GP_ERR_INVALID_ARG, "gen_config: num_beams = %d is too large "
                                                         "for a vocabulary of %d ids", (int)B, (int)V);
    beam_state s;
    const double t0 = gp_now();
    st = beam_state_init(&s, B, K, V, n_prompt, L);
    if (!st) {
        for (int32_t b = 0; b < B; b++) memcpy(s.run + (size_t)b * s.W, prompt, (size_t)n_prompt * sizeof(int32_t));
        st = e->prefill(e->self, prompt, n_prompt, s.logits);
    }
    const double t1 = gp_now();
    int heur = 1;
    for (int32_t t = 0; !st; t++) {
        if ((st = top_continuations(&s, cfg, n_prompt, t, max_len))) break;
        const int timed_out = cfg->max_time > 0 && gp_now() - t0 > cfg->max_time;
        int all_hit = 1;
        for (int32_t c = 0; c < K; c++) {
            int eos = !cfg->ignore_eos && is_eos_id(cfg, s.c_tok[c]);
            s.c_hit[c] = eos || t + 1 >= L || timed_out;
            s.c_why[c] = eos ? GP_FINISH_STOP : timed_out ? GP_FINISH_TIME : GP_FINISH_LENGTH;
            all_hit &= s.c_hit[c];
        }
        select_beams(&s, cfg, n_prompt, t, heur);
        heur = heur && heuristic_unsatisfied(&s, cfg, t + 1);
        int all_done = 1;
        for (int32_t j = 0; j < B; j++) all_done &= s.fin_done[j];
        if (!heur || (all_done && cfg->early_stopping == GP_EARLY_STOPPING_TRUE) || all_hit) break;
        if ((st = e->reorder(e->self, s.parent, B))) break;
        st = e->step(e->self, s.next_tok, B, s.logits);
        if (st == GP_ERR_RANGE)
            st = gp_set_error(GP_ERR_RANGE, "beam search: the context is full after %d new tokens (raise n_ctx or "
                              "lower max_new_tokens)", (int)(t + 1));
    }
    if (!st) st = beam_output(&s, cfg->num_return_sequences > 0 ? cfg->num_return_sequences : 1, out);
    beam_state_free(&s);
    if (st) {
        gp_beam_out_free(out);
        return st;
    }
    out->prompt_seconds = t1 - t0;
    out->gen_seconds = gp_now() - t1;
    return GP_OK;
}
