/* sample.h — internal API of src/sample/: one function per transformers logits processor / warper (in the order of
 * transformers' _get_logits_processor), the non-transformers extras, float32 softmax helpers that follow torch's CPU
 * kernels, the seeded generator, the token pickers, stop strings, the generation loop over an abstract engine, and
 * generation_config.json parsing (declared in model/gen_config.h, below this layer). */
#ifndef GP_SAMPLE_H
#define GP_SAMPLE_H

#include "genparity.h"
#include "model/gen_config.h"

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------------------------- */
/* Scratch shared by the processors of one step: sized for n_vocab once, reused every step.                          */
/* ---------------------------------------------------------------------------------------------------------------- */
typedef struct gp_sample_ws {
    int32_t n_vocab;
    float *f0, *f1;     /* [n_vocab] float scratch */
    int32_t *idx;       /* [n_vocab] index scratch */
    int32_t *idx2;      /* [n_vocab] index scratch (merge sort) */
    uint8_t *mask;      /* [n_vocab] byte scratch, all zero between calls */
    int32_t *counts;    /* [n_vocab] occurrence counts, all zero between calls */
} gp_sample_ws;

gp_status gp_sample_ws_init(gp_sample_ws *ws, int32_t n_vocab);
void gp_sample_ws_free(gp_sample_ws *ws);

/* ---------------------------------------------------------------------------------------------------------------- */
/* float32 helpers with torch's CPU operation order                                                                 */
/* ---------------------------------------------------------------------------------------------------------------- */
/* probs [n] = softmax(x [n]): m = max x; e = expf(x - m); s = sum e; probs = e * (1/s)  (torch's _vec_softmax) */
void gp_softmax_f32(const float *x, int32_t n, float *probs);
/* out [n] = log_softmax(x [n]) = x - m - logf(sum expf(x - m))  (torch's _vec_log_softmax) */
void gp_log_softmax_f32(const float *x, int32_t n, float *out);
/* Index of the first maximum of x [n] (torch.argmax); -inf only -> 0; NaN is never chosen unless all are NaN. */
int32_t gp_argmax_f32(const float *x, int32_t n);
/* Stable merge sort of idx [n] by key[idx[i]] ascending (ties keep their order); tmp [n] scratch. */
void gp_sort_idx_asc(const float *key, int32_t *idx, int32_t *tmp, int32_t n);

/* ---------------------------------------------------------------------------------------------------------------- */
/* transformers' logits processors (all sampling modes), in their order.  scores [n_vocab] float32, in place;         */
/* ids [n_ids] = prompt + generated so far.                                                                           */
/* ---------------------------------------------------------------------------------------------------------------- */
/* SequenceBiasLogitsProcessor: bias[last] += b for each entry whose prefix ends ids (len-1 entries always), summed
 * in a float32 bias vector, then scores += bias. */
void gp_proc_sequence_bias(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids,
                           const gp_seq_bias *sb, int32_t n_sb, gp_sample_ws *ws);
/* RepetitionPenaltyLogitsProcessor: for each distinct id in ids: s < 0 ? s * p : s / p  (p rounded to float32). */
void gp_proc_repetition_penalty(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double penalty,
                                gp_sample_ws *ws);
/* NoRepeatNGramLogitsProcessor: -inf for every token that would repeat an n-gram of ids. */
void gp_proc_no_repeat_ngram(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, int32_t ngram);
/* NoBadWordsLogitsProcessor: -inf on the last id of each sequence whose prefix ends ids; single-id sequences equal
 * to an EOS id are dropped, like transformers. */
void gp_proc_bad_words(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, const gp_token_seq *bw,
                       int32_t n_bw, const int32_t *eos, int32_t n_eos);
/* MinLengthLogitsProcessor: EOS ids -> -inf while n_ids < min_length. */
void gp_proc_min_length(float *scores, int32_t n_vocab, int32_t n_ids, int32_t min_length, const int32_t *eos,
                        int32_t n_eos);
/* MinNewTokensLengthLogitsProcessor: EOS ids -> -inf while n_ids - n_prompt < min_new_tokens. */
void gp_proc_min_new_tokens(float *scores, int32_t n_vocab, int32_t n_ids, int32_t n_prompt, int32_t min_new_tokens,
                            const int32_t *eos, int32_t n_eos);
/* ForcedBOSTokenLogitsProcessor: when n_ids == 1 every score is -inf but bos's, which is 0. */
void gp_proc_forced_bos(float *scores, int32_t n_vocab, int32_t n_ids, int32_t bos);
/* ForcedEOSTokenLogitsProcessor: when n_ids == max_length - 1 every score is -inf but eos's, which is 0. */
void gp_proc_forced_eos(float *scores, int32_t n_vocab, int32_t n_ids, int32_t max_length, int32_t eos);
/* SuppressTokensLogitsProcessor: the listed ids -> -inf. */
void gp_proc_suppress_tokens(float *scores, int32_t n_vocab, const int32_t *tok, int32_t n_tok);
/* SuppressTokensAtBeginLogitsProcessor: the listed ids -> -inf when n_ids == begin_index. */
void gp_proc_begin_suppress(float *scores, int32_t n_vocab, int32_t n_ids, int32_t begin_index, const int32_t *tok,
                            int32_t n_tok);

/* EncoderNoRepeatNGramLogitsProcessor with the prompt as the encoder input: -inf for every token that would complete,
 * after the last ngram-1 ids, an n-gram of the prompt. */
void gp_proc_encoder_no_repeat_ngram(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids,
                                     const int32_t *prompt, int32_t n_prompt, int32_t ngram);
/* InfNanRemoveLogitsProcessor: NaN -> 0, +inf -> FLT_MAX, -inf -> -FLT_MAX. */
void gp_proc_remove_invalid(float *scores, int32_t n_vocab);
/* ExponentialDecayLengthPenalty: once n_ids > n_prompt + start, each EOS score s += |s| * (float)(factor^k - 1),
 * k = n_ids - n_prompt - start. */
void gp_proc_exp_decay(float *scores, int32_t n_vocab, int32_t n_ids, int32_t n_prompt, int32_t start, double factor,
                       const int32_t *eos, int32_t n_eos);
/* LogitNormalization: scores = log_softmax(scores). */
void gp_proc_renormalize(float *scores, int32_t n_vocab, gp_sample_ws *ws);

/* ---------------------------------------------------------------------------------------------------------------- */
/* Non-transformers extras (OpenAI / mlx-lm / llama.cpp knobs)                                                        */
/* ---------------------------------------------------------------------------------------------------------------- */
/* OpenAI frequency/presence penalties: s[t] -= freq * c[t] + pres * (c[t] > 0), c = counts over ids [n_ids]. */
void gp_proc_freq_presence(float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double freq,
                           double pres, gp_sample_ws *ws);
/* OpenAI logit_bias: s[id] += bias (float32). */
void gp_proc_logit_bias(float *scores, int32_t n_vocab, const gp_token_bias *lb, int32_t n_lb);

/* ---------------------------------------------------------------------------------------------------------------- */
/* transformers' warpers (sampling only), in their order; min_tokens_to_keep = 1 as in non-beam generate().          */
/* ---------------------------------------------------------------------------------------------------------------- */
/* TemperatureLogitsWarper: s / t (t rounded to float32). */
void gp_warp_temperature(float *scores, int32_t n_vocab, double t);
/* TopKLogitsWarper: s < (k-th largest s) -> -inf; ties at the threshold are kept. */
void gp_warp_top_k(float *scores, int32_t n_vocab, int32_t k, gp_sample_ws *ws);
/* TopPLogitsWarper: sort ascending, cumsum(softmax) (double accumulator, as torch's CPU cumsum), remove
 * cumsum <= (float)(1 - p), always keep the largest. */
void gp_warp_top_p(float *scores, int32_t n_vocab, double p, gp_sample_ws *ws);
/* MinPLogitsWarper: probs < (float)min_p * max(probs) -> -inf, the top token kept. */
void gp_warp_min_p(float *scores, int32_t n_vocab, double min_p, gp_sample_ws *ws);
/* TypicalLogitsWarper (mass = typical_p). */
void gp_warp_typical(float *scores, int32_t n_vocab, double mass, gp_sample_ws *ws);
/* EpsilonLogitsWarper: probs < eps and s < max(s) -> -inf. */
void gp_warp_epsilon(float *scores, int32_t n_vocab, double eps, gp_sample_ws *ws);
/* EtaLogitsWarper: probs < min(eps, sqrt(eps) * exp(-entropy)) and s < max(s) -> -inf. */
void gp_warp_eta(float *scores, int32_t n_vocab, double eps, gp_sample_ws *ws);

/* ---------------------------------------------------------------------------------------------------------------- */
/* The pipeline of one step                                                                                          */
/* ---------------------------------------------------------------------------------------------------------------- */
/* Applies, in transformers' order: sequence_bias, encoder_repetition_penalty, repetition_penalty, no_repeat_ngram,
 * encoder_no_repeat_ngram, bad_words, min_length, min_new_tokens, forced_bos, forced_eos (max_len = the step cap of
 * prompt + new tokens, 0 = none), remove_invalid_values, exponential_decay_length_penalty, suppress_tokens,
 * begin_suppress_tokens, then the extras (frequency/presence, logit_bias), the caller's processors, when do_sample
 * temperature, top-k, top-p, min-p, typical, epsilon, eta, and last renormalize_logits.  Returns a caller processor's
 * error. */
gp_status gp_process_scores(const gp_gen_config *g, float *scores, int32_t n_vocab, const int32_t *ids,
                            int32_t n_ids, int32_t n_prompt, int32_t max_len, gp_sample_ws *ws);

/* ---------------------------------------------------------------------------------------------------------------- */
/* Generator and pickers                                                                                             */
/* ---------------------------------------------------------------------------------------------------------------- */
/* xoshiro256** (Blackman & Vigna 2018); the 256-bit state comes from splitmix64 applied to the seed. */
typedef struct gp_rng {
    uint64_t s[4];
} gp_rng;

void gp_rng_seed(gp_rng *r, uint64_t seed);
uint64_t gp_rng_next(gp_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double gp_rng_uniform(gp_rng *r);

/* Multinomial draw from softmax(scores): probs (float32, as torch) accumulated in double; the first id whose
 * cumulative mass exceeds u * total.  Ids with probability 0 (-inf scores) are never drawn.  probs_ws [n]. */
int32_t gp_sample_multinomial(const float *scores, int32_t n, double u, float *probs_ws);

/* Fills top [k] with the k largest of logp [n] (descending; ties: lower id first). */
void gp_top_n(const float *logp, int32_t n, int32_t k, gp_top_logprob *top);
/* Writes why scores [n] leave nothing to sample (NaN / +inf entries, or all -inf) into buf [cap]. */
void gp_scores_diagnose(const float *scores, int32_t n, char *buf, size_t cap);

/* ---------------------------------------------------------------------------------------------------------------- */
/* Stop strings over the generated text                                                                              */
/* ---------------------------------------------------------------------------------------------------------------- */
/* Finds the earliest occurrence of any stop string in text [len] that ends at or after byte from; returns its start
 * (and *which) or -1.  Empty stop strings never match. */
int64_t gp_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int32_t n_stops,
                     int32_t *which);
/* Length of the longest suffix of text [len] that is a proper prefix of some stop string (text to hold back). */
size_t gp_stop_holdback(const char *text, size_t len, const char *const *stops, int32_t n_stops);

/* ---------------------------------------------------------------------------------------------------------------- */
/* The generation loop over an engine (gp_generate binds it to gp_ctx; tests bind it to a fake model)               */
/* ---------------------------------------------------------------------------------------------------------------- */
typedef struct gp_gen_engine {
    void *self;
    int32_t n_vocab;
    /* Empties the cache. */
    void (*reset)(void *self);
    /* Evaluates ids [n] after the cached ones and writes the last position's logits [n_vocab].  GP_ERR_RANGE on a
     * one-token decode step means the context is full. */
    gp_status (*eval)(void *self, const int32_t *ids, int32_t n, float *logits);
    /* The engine's own buffer for the logits [n_vocab] that eval writes fastest (a context's pinned memory), or
     * NULL: the loop allocates one per sequence. */
    float *logits_buf;
    /* Streaming detokenizer, set up with cfg->skip_special_tokens (NULL when there is no tokenizer: no text, stop
     * strings refused). */
    gp_status (*detok_push)(void *self, int32_t id, const char **piece);
    gp_status (*detok_flush)(void *self, const char **piece);
} gp_gen_engine;

gp_status gp_gen_run(const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                     gp_token_cb on_token, void *user_data, gp_gen_result *result);

/* Text accumulated from the detokenizer, with what was already streamed. */
typedef struct gp_gen_text {
    char *buf;
    size_t len, cap;
    size_t emitted; /* bytes already given to the callback */
    size_t checked; /* bytes already searched for stop strings */
} gp_gen_text;

/* One sequence of the loop as a state machine: begin (checks, prefill -> logits), then while next() gives an id,
 * the caller evaluates it into q->logits and reports the status with decoded(); end() fills the result.  gp_gen_run
 * is exactly that loop; gp_generate_batch runs several sequences' next/evaluate/decoded in lockstep. */
typedef struct gp_gen_seq {
    const gp_gen_engine *e;
    const gp_gen_config *cfg;
    gp_token_cb on_token;
    void *user_data;
    gp_gen_result *result;
    int32_t n_prompt, n_new, max_len, n_top;
    int64_t limit;
    int want_lp, detok_flushed;
    gp_rng rng;
    gp_finish_reason finish;
    gp_status ret;
    double t0, t1;
    int32_t *ids; /* prompt + generated */
    size_t ids_cap, lp_cap, top_cap;
    float *logprobs;
    gp_top_logprob *top;
    float *logits, *scores, *lp; /* [n_vocab]: logits is where the next evaluation writes */
    gp_sample_ws ws;
    gp_gen_text text;
} gp_gen_seq;

/* Checks, allocates, prefills (result zeroed first).  On error nothing is left to free. */
gp_status gp_gen_seq_begin(gp_gen_seq *q, const gp_gen_engine *e, const int32_t *prompt, int32_t n_prompt,
                           const gp_gen_config *cfg, gp_token_cb on_token, void *user_data, gp_gen_result *result);
/* Chooses the next id from q->logits, applies the stopping criteria and streams it; returns 1 with *tok to evaluate,
 * 0 when the sequence is finished (or failed). */
int gp_gen_seq_next(gp_gen_seq *q, int32_t *tok);
/* Reports the evaluation of that id (GP_ERR_RANGE: the context is full); returns 1 to go on. */
int gp_gen_seq_decoded(gp_gen_seq *q, gp_status s);
/* Fills the result and frees the state; returns GP_OK, GP_ERR_CANCELLED (result filled) or the error (result
 * empty). */
gp_status gp_gen_seq_end(gp_gen_seq *q);

/* The engine of one gp_ctx (generate.c): the prompt through gp_ctx_prefill (prefix reuse), then gp_ctx_eval; the
 * model's tokenizer through a streaming detokenizer. */
typedef struct gp_ctx_engine {
    gp_ctx *c;
    gp_detok *d;
    int prefill; /* the next eval is the prompt */
} gp_ctx_engine;
gp_status gp_ctx_engine_bind(gp_ctx_engine *ce, gp_gen_engine *e, gp_ctx *c, const gp_gen_config *cfg);
void gp_ctx_engine_unbind(gp_ctx_engine *ce);

/* ---------------------------------------------------------------------------------------------------------------- */
/* Beam search (transformers' _beam_search) over an engine of n parallel sequences ("beams")                         */
/* ---------------------------------------------------------------------------------------------------------------- */
typedef struct gp_beam_engine {
    void *self;
    int32_t n_vocab;
    /* Evaluates the prompt into beam 0 and writes its last position's logits [n_vocab]. */
    gp_status (*prefill)(void *self, const int32_t *ids, int32_t n, float *logits);
    /* Rebuilds the beams: new beam j (j < n) continues old beam parent[j] (after the prefill every parent is 0). */
    gp_status (*reorder)(void *self, const int32_t *parent, int32_t n);
    /* Appends tokens[j] to beam j (j < n) and writes the logits [n, n_vocab]; every beam at the same step. */
    gp_status (*step)(void *self, const int32_t *tokens, int32_t n, float *logits);
} gp_beam_engine;

/* Returned beams, best first: tokens of beam i are tokens[off[i] .. off[i] + len[i]). */
typedef struct gp_beam_out {
    int32_t n;
    int32_t *tokens, *off, *len;
    float *score;
    gp_finish_reason *finish;
    double prompt_seconds, gen_seconds;
} gp_beam_out;

/* Checks the beam fields' ranges and, when combos, what beam search does not combine with (sampling, stop strings,
 * logprobs, a caller sampler, no length bound). */
gp_status gp_beam_check(const gp_gen_config *cfg, int combos);
/* Runs beam search on e; fills *out (free with gp_beam_out_free). */
gp_status gp_beam_run(const gp_beam_engine *e, const int32_t *prompt, int32_t n_prompt, const gp_gen_config *cfg,
                      gp_beam_out *out);
void gp_beam_out_free(gp_beam_out *o);

#endif
