/* pipeline.c — one decoding step's score processing in transformers' order (_get_logits_processor): the
 * processors, then genparity's non-transformers extras, then the caller's processors, then (sampling only) the
 * warpers temperature -> top-k -> top-p -> min-p -> typical -> epsilon -> eta, then LogitNormalization. */
#include "sample/sample.h"

gp_status gp_process_scores(const gp_gen_config *g, float *scores, int32_t n_vocab, const int32_t *ids,
                            int32_t n_ids, int32_t n_prompt, int32_t max_len, gp_sample_ws *ws) {
    const int32_t *eos = g->eos_ids;
    const int32_t n_eos = g->n_eos < 0 ? 0 : (g->n_eos > GP_MAX_EOS ? GP_MAX_EOS : g->n_eos);
    /* the penalty window (mlx-lm's repetition_context_size; 0 = everything) */
    int32_t w0 = 0;
    if (g->penalty_window > 0 && n_ids > g->penalty_window) w0 = n_ids - g->penalty_window;

    if (g->n_sequence_bias > 0) gp_proc_sequence_bias(scores, n_vocab, ids, n_ids, g->sequence_bias,
                                                      g->n_sequence_bias, ws);
    if (g->encoder_repetition_penalty != 1.0 && g->encoder_repetition_penalty > 0.0) /* over the prompt, 1/p */
        gp_proc_repetition_penalty(scores, n_vocab, ids, n_prompt, 1.0 / g->encoder_repetition_penalty, ws);
    if (g->repetition_penalty != 1.0 && g->repetition_penalty > 0.0)
        gp_proc_repetition_penalty(scores, n_vocab, ids + w0, n_ids - w0, g->repetition_penalty, ws);
    if (g->no_repeat_ngram_size > 0) gp_proc_no_repeat_ngram(scores, n_vocab, ids, n_ids, g->no_repeat_ngram_size);
    if (g->encoder_no_repeat_ngram_size > 0)
        gp_proc_encoder_no_repeat_ngram(scores, n_vocab, ids, n_ids, ids, n_prompt, g->encoder_no_repeat_ngram_size);
    if (g->n_bad_words_ids > 0)
        gp_proc_bad_words(scores, n_vocab, ids, n_ids, g->bad_words_ids, g->n_bad_words_ids, eos, n_eos);
    if (g->min_length > 0 && n_eos > 0) gp_proc_min_length(scores, n_vocab, n_ids, g->min_length, eos, n_eos);
    if (g->min_new_tokens > 0 && n_eos > 0)
        gp_proc_min_new_tokens(scores, n_vocab, n_ids, n_prompt, g->min_new_tokens, eos, n_eos);
    if (g->forced_bos_token_id >= 0) gp_proc_forced_bos(scores, n_vocab, n_ids, g->forced_bos_token_id);
    if (g->forced_eos_token_id >= 0) gp_proc_forced_eos(scores, n_vocab, n_ids, max_len, g->forced_eos_token_id);
    if (g->remove_invalid_values) gp_proc_remove_invalid(scores, n_vocab);
    if (g->exponential_decay_factor > 0.0 && n_eos > 0)
        gp_proc_exp_decay(scores, n_vocab, n_ids, n_prompt, g->exponential_decay_start, g->exponential_decay_factor, eos,
                          n_eos);
    if (g->n_suppress_tokens > 0) gp_proc_suppress_tokens(scores, n_vocab, g->suppress_tokens, g->n_suppress_tokens);
    if (g->n_begin_suppress_tokens > 0) {
        int32_t begin = (n_prompt > 1 || g->forced_bos_token_id < 0) ? n_prompt : n_prompt + 1;
        gp_proc_begin_suppress(scores, n_vocab, n_ids, begin, g->begin_suppress_tokens, g->n_begin_suppress_tokens);
    }

    /* not in transformers */
    if (g->frequency_penalty != 0.0 || g->presence_penalty != 0.0) {
        int32_t g0 = w0 > n_prompt ? w0 : n_prompt; /* generated tokens only (OpenAI), inside the window */
        if (g0 < n_ids)
            gp_proc_freq_presence(scores, n_vocab, ids + g0, n_ids - g0, g->frequency_penalty, g->presence_penalty,
                                  ws);
    }
    if (g->n_logit_bias > 0) gp_proc_logit_bias(scores, n_vocab, g->logit_bias, g->n_logit_bias);

    for (int32_t i = 0; i < g->n_logits_processors; i++) {
        const gp_logits_processor *p = &g->logits_processors[i];
        if (!p->fn) continue;
        gp_status s = p->fn(ids, n_ids, scores, n_vocab, p->user_data);
        if (s != GP_OK) return s;
    }

    if (g->do_sample) {
        if (g->temperature != 1.0) gp_warp_temperature(scores, n_vocab, g->temperature);
        if (g->top_k != 0) gp_warp_top_k(scores, n_vocab, g->top_k, ws);
        if (g->top_p < 1.0) gp_warp_top_p(scores, n_vocab, g->top_p, ws);
        if (g->min_p > 0.0) gp_warp_min_p(scores, n_vocab, g->min_p, ws);
        if (g->typical_p < 1.0) gp_warp_typical(scores, n_vocab, g->typical_p, ws);
        if (g->epsilon_cutoff > 0.0 && g->epsilon_cutoff < 1.0) gp_warp_epsilon(scores, n_vocab, g->epsilon_cutoff, ws);
        if (g->eta_cutoff > 0.0 && g->eta_cutoff < 1.0) gp_warp_eta(scores, n_vocab, g->eta_cutoff, ws);
    }
    if (g->renormalize_logits) gp_proc_renormalize(scores, n_vocab, ws);
    return GP_OK;
}
