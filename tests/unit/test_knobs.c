/* test_knobs.c — every GenerationConfig field works or is refused: the appended processors (remove_invalid_values,
 * exponential_decay_length_penalty, renormalize_logits, encoder_repetition_penalty, encoder_no_repeat_ngram_size)
 * against hand-computed values in transformers' float32 arithmetic, their place in the pipeline, their
 * generation_config.json fields, and the decoding-changing fields genparity does not implement refused with a
 * message naming the file and the field (their "off" values accepted). */
#include "test.h"

#include "model/gen_config.h"
#include "sample/sample.h"

#include <float.h>
#include <stdlib.h>

TEST(knob_processors_by_hand) {
    float s[6] = {NAN, INFINITY, -INFINITY, 1.5f, -2.0f, 0.0f};
    gp_proc_remove_invalid(s, 6);
    CHECK(s[0] == 0.0f && s[1] == FLT_MAX && s[2] == -FLT_MAX && s[3] == 1.5f && s[4] == -2.0f);
    /* exponential decay (start 2, factor 1.5) over a 3-token prompt: at 6 ids k = 1: eos += |eos| * 0.5 */
    float d[4] = {-2.0f, 1.0f, 3.0f, 4.0f};
    const int32_t eos[2] = {0, 2};
    gp_proc_exp_decay(d, 4, 5, 3, 2, 1.5, eos, 2); /* 5 ids: not yet (5 > 5 is false) */
    CHECK(d[0] == -2.0f && d[2] == 3.0f);
    gp_proc_exp_decay(d, 4, 7, 3, 2, 1.5, eos, 2); /* k = 2: factor^2 - 1 = 1.25 */
    CHECK(d[0] == -2.0f + 2.0f * 1.25f && d[2] == 3.0f + 3.0f * 1.25f && d[1] == 1.0f && d[3] == 4.0f);
    NOTE("exp decay: eos scores -2 -> %g, 3 -> %g (tolerance: exact float32)", (double)d[0], (double)d[2]);
    /* renormalize = log_softmax */
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, 4) == GP_OK);
    float r[4] = {1.0f, 2.0f, 3.0f, 4.0f}, want[4];
    gp_log_softmax_f32(r, 4, want);
    gp_proc_renormalize(r, 4, &ws);
    CHECK(!memcmp(r, want, sizeof r));
    /* encoder no-repeat n-gram: prompt 5 6 7 5 6, generated ... 5 6 -> 7 banned (and nothing else) */
    const int32_t ids[] = {5, 6, 7, 5, 6, 9, 5, 6};
    float e[10] = {0};
    gp_proc_encoder_no_repeat_ngram(e, 10, ids, 8, ids, 5, 3);
    for (int i = 0; i < 10; i++) CHECK((i == 7) == !!isinf(e[i]));
    gp_sample_ws_free(&ws);
}

TEST(knob_pipeline_order_and_encoder_penalty) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, 8) == GP_OK);
    gp_gen_config g = gp_gen_config_default();
    g.encoder_repetition_penalty = 2.0; /* prompt ids get 1/2: a positive score doubles, a negative halves */
    const int32_t ids[] = {1, 2, 5};
    float s[8] = {0.5f, 1.0f, -1.0f, 0.25f, 0.0f, 3.0f, 1.0f, 1.0f};
    CHECK_STATUS(gp_process_scores(&g, s, 8, ids, 3, 2, 0, &ws), GP_OK);
    CHECK(s[1] == 2.0f && s[2] == -0.5f && s[5] == 3.0f && s[0] == 0.5f); /* only the 2 prompt ids */
    g = gp_gen_config_default();
    g.renormalize_logits = 1;
    g.do_sample = 1;
    g.temperature = 0.5;
    float t[8] = {0, 1, 2, 3, 4, 5, 6, 7}, w[8];
    for (int i = 0; i < 8; i++) w[i] = t[i] / 0.5f;
    float lw[8];
    gp_log_softmax_f32(w, 8, lw);
    g.top_k = 0;
    CHECK_STATUS(gp_process_scores(&g, t, 8, ids, 3, 3, 0, &ws), GP_OK);
    CHECK(!memcmp(t, lw, sizeof t)); /* renormalize runs after the warpers */
    gp_sample_ws_free(&ws);
}

TEST(knob_generation_config_fields_and_refusals) {
    gp_gen_config g = gp_gen_config_default();
    const char *js = "{\"renormalize_logits\": true, \"remove_invalid_values\": true, "
                     "\"exponential_decay_length_penalty\": [8, 1.25], \"encoder_repetition_penalty\": 1.5, "
                     "\"encoder_no_repeat_ngram_size\": 3, \"num_beam_groups\": 1, \"diversity_penalty\": 0.0, "
                     "\"guidance_scale\": null, \"penalty_alpha\": null, \"num_assistant_tokens\": 20, "
                     "\"output_scores\": false, \"use_cache\": true}";
    CHECK_STATUS(gp_gen_config_apply_json_text(&g, js, "k/generation_config.json"), GP_OK);
    CHECK(g.renormalize_logits == 1 && g.remove_invalid_values == 1 && g.exponential_decay_start == 8 &&
          g.exponential_decay_factor == 1.25 && g.encoder_repetition_penalty == 1.5 &&
          g.encoder_no_repeat_ngram_size == 3);
    gp_gen_config_free_owned(&g);
    static const char *const refused[][2] = {
        {"{\"guidance_scale\": 1.5}", "guidance_scale"},
        {"{\"watermarking_config\": {\"greenlist_ratio\": 0.25}}", "watermarking_config"},
        {"{\"constraints\": [1]}", "constraints"},
        {"{\"force_words_ids\": [[1, 2]]}", "force_words_ids"},
        {"{\"num_beam_groups\": 2}", "num_beam_groups"},
        {"{\"diversity_penalty\": 0.5}", "diversity_penalty"},
        {"{\"penalty_alpha\": 0.6}", "penalty_alpha"},
        {"{\"dola_layers\": \"high\"}", "dola_layers"},
        {"{\"top_h\": 0.4}", "top_h"},
        {"{\"prompt_lookup_num_tokens\": 10}", "prompt_lookup_num_tokens"},
        {"{\"assistant_early_exit\": 4}", "assistant_early_exit"},
        {"{\"token_healing\": true}", "token_healing"},
        {"{\"exponential_decay_length_penalty\": [1]}", "exponential_decay_length_penalty"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        gp_gen_config h = gp_gen_config_default();
        gp_status s = gp_gen_config_apply_json_text(&h, refused[i][0], "k/generation_config.json");
        if (s == GP_OK || !strstr(gp_errmsg(), refused[i][1]) || !strstr(gp_errmsg(), "k/generation_config.json")) {
            NOTE("%s: status %d, message '%s'", refused[i][0], (int)s, gp_errmsg());
            gp_test_failed = 1;
        }
    }
}
