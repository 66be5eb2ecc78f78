/* test_processors.c — hand-worked cases of the processors that the fixture exercises weakly (multi-token bad words
 * and sequence bias, n-gram bans, top-k ties, top-p keeping one, EOS masking, forced tokens) and of the pipeline's
 * order (caller processors before temperature; penalty window; OpenAI extras). */
#include "test.h"

#include "sample/sample.h"

enum { V = 16 };

static void fill(float *s, float v) {
    for (int i = 0; i < V; i++) s[i] = v;
}

static int n_masked(const float *s) {
    int n = 0;
    for (int i = 0; i < V; i++) n += s[i] == -INFINITY;
    return n;
}

TEST(proc_no_repeat_ngram_bans_the_completion) {
    float s[V];
    fill(s, 1.0f);
    const int32_t ids[] = {1, 2, 3, 4, 1, 2, 5, 1, 2};
    gp_proc_no_repeat_ngram(s, V, ids, 9, 3); /* prefix (1,2) was followed by 3 and 5 */
    CHECK(s[3] == -INFINITY && s[5] == -INFINITY);
    CHECK_EQ_INT(n_masked(s), 2);
    fill(s, 1.0f);
    gp_proc_no_repeat_ngram(s, V, ids, 9, 1); /* unigrams: every seen id */
    CHECK_EQ_INT(n_masked(s), 5);
    fill(s, 1.0f);
    gp_proc_no_repeat_ngram(s, V, ids, 2, 3); /* too short */
    CHECK_EQ_INT(n_masked(s), 0);
}

TEST(proc_bad_words_multi_token_and_eos) {
    float s[V];
    const int32_t w0[] = {7, 11}, w1[] = {2}, w2[] = {9};
    const gp_token_seq bw[] = {{w0, 2}, {w1, 1}, {w2, 1}};
    const int32_t eos[] = {2};
    const int32_t a[] = {3, 7}, b[] = {7, 3};
    fill(s, 0.0f);
    gp_proc_bad_words(s, V, a, 2, bw, 3, eos, 1);
    CHECK(s[11] == -INFINITY && s[9] == -INFINITY);
    CHECK(s[2] == 0.0f); /* [eos] is dropped from bad_words_ids, like transformers */
    fill(s, 0.0f);
    gp_proc_bad_words(s, V, b, 2, bw, 3, eos, 1);
    CHECK(s[11] == 0.0f && s[9] == -INFINITY);
}

TEST(proc_sequence_bias_prefix_and_duplicates) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    float s[V];
    fill(s, 1.0f);
    const int32_t q0[] = {4}, q1[] = {3, 4}, q2[] = {5, 4}, q3[] = {4};
    const gp_seq_bias sb[] = {{q0, 1, 1.0}, {q1, 2, 0.5}, {q2, 2, 8.0}, {q3, 1, -2.0}};
    const int32_t ids[] = {1, 3};
    gp_proc_sequence_bias(s, V, ids, 2, sb, 4, &ws);
    CHECK(s[4] == 1.0f + (-2.0f + 0.5f)); /* the last [4] entry wins; [3,4] matches; [5,4] does not */
    CHECK_EQ_INT(n_masked(s), 0);
    for (int i = 0; i < V; i++) CHECK(i == 4 || s[i] == 1.0f);
    for (int i = 0; i < V; i++) CHECK(ws.mask[i] == 0); /* scratch left clean */
    gp_sample_ws_free(&ws);
}

TEST(proc_repetition_penalty_once_per_token) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    float s[V];
    fill(s, 2.0f);
    s[3] = -2.0f;
    const int32_t ids[] = {3, 5, 5, 5, 3};
    gp_proc_repetition_penalty(s, V, ids, 5, 2.0, &ws);
    CHECK(s[3] == -4.0f && s[5] == 1.0f && s[6] == 2.0f);
    gp_sample_ws_free(&ws);
}

TEST(proc_eos_masking_and_forced_tokens) {
    float s[V];
    const int32_t eos[] = {2, 9};
    fill(s, 0.0f);
    gp_proc_min_new_tokens(s, V, 7, 5, 3, eos, 2); /* 2 new < 3 */
    CHECK(s[2] == -INFINITY && s[9] == -INFINITY && n_masked(s) == 2);
    fill(s, 0.0f);
    gp_proc_min_new_tokens(s, V, 8, 5, 3, eos, 2); /* 3 new: allowed */
    CHECK_EQ_INT(n_masked(s), 0);
    fill(s, 0.0f);
    gp_proc_forced_eos(s, V, 9, 10, 9);
    CHECK(s[9] == 0.0f && n_masked(s) == V - 1);
    fill(s, 1.0f);
    gp_proc_forced_eos(s, V, 8, 10, 9);
    CHECK_EQ_INT(n_masked(s), 0);
    fill(s, 1.0f);
    gp_proc_forced_bos(s, V, 1, 4);
    CHECK(s[4] == 0.0f && n_masked(s) == V - 1);
    const int32_t sup[] = {0, 15};
    fill(s, 1.0f);
    gp_proc_begin_suppress(s, V, 6, 6, sup, 2);
    CHECK(s[0] == -INFINITY && s[15] == -INFINITY);
    fill(s, 1.0f);
    gp_proc_begin_suppress(s, V, 7, 6, sup, 2);
    CHECK_EQ_INT(n_masked(s), 0);
}

TEST(warp_top_k_keeps_ties_and_top_p_keeps_one) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    float s[V];
    fill(s, 0.0f);
    s[1] = 3.0f, s[2] = 3.0f, s[3] = 3.0f, s[4] = 2.0f;
    gp_warp_top_k(s, V, 2, &ws);
    CHECK(s[1] == 3.0f && s[2] == 3.0f && s[3] == 3.0f && n_masked(s) == V - 3);
    fill(s, 0.0f);
    s[7] = 1.0f;
    gp_warp_top_p(s, V, 0.0, &ws);
    CHECK(s[7] == 1.0f && n_masked(s) == V - 1);
    fill(s, 0.0f);
    gp_warp_top_p(s, V, 0.5, &ws); /* uniform: cumsum <= 0.5 removed (8 of 16) */
    CHECK_EQ_INT(n_masked(s), 8);
    fill(s, 1.0f);
    s[0] = 5.0f;
    gp_warp_min_p(s, V, 1.0, &ws); /* only the top survives min_p = 1 */
    CHECK(s[0] == 5.0f && n_masked(s) == V - 1);
    CHECK_EQ_INT(gp_argmax_f32(s, V), 0);
    const float tie[4] = {1.0f, 4.0f, 4.0f, -INFINITY};
    CHECK_EQ_INT(gp_argmax_f32(tie, 4), 1); /* the first maximum */
    gp_sample_ws_free(&ws);
}

static gp_status double_ids(const int32_t *ids, int32_t n_ids, float *scores, int32_t n_vocab, void *ud) {
    int *calls = ud;
    (*calls)++;
    /* sees scores before temperature: id 1 was 2.0 and must still be 2.0 */
    if (scores[1] != 2.0f) return GP_ERR_STATE;
    scores[1] = 10.0f;
    return GP_OK;
}

TEST(pipeline_order_caller_processor_before_warpers) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    int calls = 0;
    gp_logits_processor lp = {double_ids, &calls};
    gp_gen_config g = gp_gen_config_default();
    g.do_sample = 1;
    g.temperature = 0.5;
    g.top_k = 0;
    g.logits_processors = &lp;
    g.n_logits_processors = 1;
    float s[V];
    fill(s, 0.0f);
    s[1] = 2.0f;
    CHECK_STATUS(gp_process_scores(&g, s, V, NULL, 0, 0, 0, &ws), GP_OK);
    CHECK_EQ_INT(calls, 1);
    CHECK(s[1] == 20.0f); /* 10 / 0.5 */
    /* greedy: no warpers */
    g.do_sample = 0;
    fill(s, 0.0f);
    s[1] = 2.0f;
    CHECK_STATUS(gp_process_scores(&g, s, V, NULL, 0, 0, 0, &ws), GP_OK);
    CHECK(s[1] == 10.0f);
    gp_sample_ws_free(&ws);
}

TEST(pipeline_penalty_window_and_openai_extras) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    gp_gen_config g = gp_gen_config_default();
    const int32_t ids[] = {3, 4, 5, 5, 6}; /* prompt 3 4, generated 5 5 6 */
    float s[V];
    g.repetition_penalty = 2.0;
    g.penalty_window = 2; /* only 5 6 */
    fill(s, 1.0f);
    CHECK_STATUS(gp_process_scores(&g, s, V, ids, 5, 2, 0, &ws), GP_OK);
    CHECK(s[3] == 1.0f && s[4] == 1.0f && s[5] == 0.5f && s[6] == 0.5f);
    g = gp_gen_config_default();
    g.frequency_penalty = 0.25;
    g.presence_penalty = 1.0;
    const gp_token_bias lb[] = {{9, -3.0}, {3, 0.5}};
    g.logit_bias = lb;
    g.n_logit_bias = 2;
    fill(s, 1.0f);
    CHECK_STATUS(gp_process_scores(&g, s, V, ids, 5, 2, 0, &ws), GP_OK);
    CHECK(s[3] == 1.5f);            /* prompt tokens are not penalised; logit_bias applies */
    CHECK(s[5] == 1.0f - 1.5f);     /* 2 x 0.25 + 1 */
    CHECK(s[6] == 1.0f - 1.25f);
    CHECK(s[9] == -2.0f);
    for (int i = 0; i < V; i++) CHECK(ws.counts[i] == 0 && ws.mask[i] == 0);
    gp_sample_ws_free(&ws);
}

TEST(pipeline_min_new_tokens_masks_all_eos) {
    gp_sample_ws ws;
    REQUIRE(gp_sample_ws_init(&ws, V) == GP_OK);
    gp_gen_config g = gp_gen_config_default();
    g.eos_ids[0] = 2;
    g.eos_ids[1] = 3;
    g.n_eos = 2;
    g.min_new_tokens = 2;
    const int32_t ids[] = {1, 5};
    float s[V];
    fill(s, 0.0f);
    CHECK_STATUS(gp_process_scores(&g, s, V, ids, 2, 1, 0, &ws), GP_OK);
    CHECK(s[2] == -INFINITY && s[3] == -INFINITY);
    gp_sample_ws_free(&ws);
}
