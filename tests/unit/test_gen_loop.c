/* test_gen_loop.c — the generation loop on a fake engine (scripted logits, a table detokenizer): every finish
 * reason, stop strings across token boundaries with streaming hold-back, min_new_tokens, logprobs and top-N, the
 * caller sampler, cancellation, a full context, and seeded determinism. */
#include "test.h"

#include "sample/sample.h"

#include <stdlib.h>

enum { FV = 8 };
static const char *const PIECES[FV] = {"", "Hel", "lo", " wor", "ld", "!", "\n", "x"}; /* id 0 = EOS (special) */

typedef struct {
    const int32_t *script; /* the id the fake model prefers at each generated position */
    int n_script;
    int n_prompt, n_past, n_ctx;
    int uniform;           /* 1: flat logits (for sampling) */
} fake;

static void f_reset(void *self) { ((fake *)self)->n_past = 0; }

static gp_status f_eval(void *self, const int32_t *ids, int32_t n, float *logits) {
    fake *f = self;
    if (f->n_ctx && f->n_past + n > f->n_ctx) return GP_ERR_RANGE;
    if (f->n_past == 0) f->n_prompt = n;
    f->n_past += n;
    int step = f->n_past - f->n_prompt;
    for (int i = 0; i < FV; i++) logits[i] = 0.0f;
    if (f->uniform) return GP_OK;
    logits[7] = 1.0f; /* second choice everywhere */
    logits[step < f->n_script ? f->script[step] : 7] = 5.0f;
    return GP_OK;
}

static gp_status f_push(void *self, int32_t id, const char **piece) {
    *piece = PIECES[id];
    return GP_OK;
}

static gp_status f_flush(void *self, const char **piece) {
    *piece = "";
    return GP_OK;
}

static const int32_t SCRIPT[] = {1, 2, 3, 4, 5, 0};
static const int32_t PROMPT[] = {6, 6};

static gp_gen_engine engine(fake *f, int text) {
    gp_gen_engine e = {0};
    e.self = f;
    e.n_vocab = FV;
    e.reset = f_reset;
    e.eval = f_eval;
    if (text) {
        e.detok_push = f_push;
        e.detok_flush = f_flush;
    }
    return e;
}

static gp_gen_config config(void) {
    gp_gen_config g = gp_gen_config_default();
    g.max_new_tokens = 50;
    g.eos_ids[0] = 0;
    g.n_eos = 1;
    return g;
}

/* collects streamed pieces */
typedef struct {
    char text[256];
    int n_events, cancel_after;
    float last_logprob;
    gp_finish_reason last_finish;
} sink;

static int on_tok(const gp_token_event *ev, void *ud) {
    sink *k = ud;
    strncat(k->text, ev->piece, ev->piece_len);
    CHECK(strlen(ev->piece) == ev->piece_len);
    k->n_events++;
    k->last_logprob = ev->logprob;
    k->last_finish = ev->finish;
    return k->cancel_after && k->n_events >= k->cancel_after;
}

TEST(loop_greedy_stops_at_eos_and_leaves_it_out_of_the_text) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    gp_gen_result r;
    sink k = {{0}, 0, 0, 0, 0};
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, on_tok, &k, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 6);
    CHECK_EQ_INT(r.tokens[5], 0);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_STOP);
    CHECK_STR(r.text, "Hello world!");
    CHECK_STR(k.text, "Hello world!");
    CHECK_EQ_INT(k.n_events, 6);
    CHECK_EQ_INT(k.last_finish, GP_FINISH_STOP);
    CHECK(isnan(k.last_logprob)); /* not requested */
    CHECK(r.logprobs == NULL && r.stop_index == -1);
    gp_gen_result_free(&r);
    /* ignore_eos: goes on to the length cap */
    g.ignore_eos = 1;
    g.max_new_tokens = 8;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 8);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_LENGTH);
    gp_gen_result_free(&r);
}

TEST(loop_length_and_min_new_tokens) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    g.max_new_tokens = 3;
    gp_gen_result r;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_LENGTH);
    CHECK_STR(r.text, "Hello wor");
    gp_gen_result_free(&r);
    /* EOS preferred at once; min_new_tokens = 2 masks it twice, so the second choice (7) comes first */
    static const int32_t eos_first[] = {0, 0, 0};
    fake f2 = {eos_first, 3, 0, 0, 0, 0};
    gp_gen_engine e2 = engine(&f2, 1);
    g = config();
    g.min_new_tokens = 2;
    CHECK_STATUS(gp_gen_run(&e2, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 3);
    CHECK_EQ_INT(r.tokens[0], 7);
    CHECK_EQ_INT(r.tokens[1], 7);
    CHECK_EQ_INT(r.tokens[2], 0);
    CHECK_STR(r.text, "xx");
    gp_gen_result_free(&r);
    /* max_length (prompt + new) applies when max_new_tokens is 0 */
    g = config();
    g.max_new_tokens = 0;
    g.max_length = 4;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 2);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_LENGTH);
    gp_gen_result_free(&r);
}

TEST(loop_stop_string_across_tokens_is_cut_and_never_streamed) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    const char *stops[] = {"zzz", "lo wo"}; /* "lo" + " wor" */
    g.stop_strings = stops;
    g.n_stop_strings = 2;
    gp_gen_result r;
    sink k = {{0}, 0, 0, 0, 0};
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, on_tok, &k, &r), GP_OK);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_STOP_STRING);
    CHECK_EQ_INT(r.stop_index, 1);
    CHECK_EQ_INT(r.n_tokens, 3);
    CHECK_STR(r.text, "Hel");
    CHECK_STR(k.text, "Hel"); /* "lo" was held back: it could start "lo wo" */
    CHECK_EQ_INT(k.last_finish, GP_FINISH_STOP_STRING);
    gp_gen_result_free(&r);
    /* a prefix that never completes is released: the stream equals the text */
    const char *stops2[] = {"!?"};
    g.stop_strings = stops2;
    g.n_stop_strings = 1;
    memset(&k, 0, sizeof k);
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, on_tok, &k, &r), GP_OK);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_STOP);
    CHECK_STR(r.text, "Hello world!");
    CHECK_STR(k.text, "Hello world!");
    gp_gen_result_free(&r);
    /* stop strings need text */
    gp_gen_engine bare = engine(&f, 0);
    CHECK_STATUS(gp_gen_run(&bare, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), "stop_strings") != NULL);
}

TEST(stop_find_and_holdback) {
    const char *stops[] = {"abc", "cd"};
    int32_t w = -1;
    CHECK_EQ_INT(gp_stop_find("xxabcd", 6, 0, stops, 2, &w), 2);
    CHECK_EQ_INT(w, 0);
    CHECK_EQ_INT(gp_stop_find("xxab", 4, 0, stops, 2, &w), -1);
    CHECK_EQ_INT(gp_stop_holdback("xxab", 4, stops, 2), 2);
    CHECK_EQ_INT(gp_stop_holdback("xxc", 3, stops, 2), 1);
    CHECK_EQ_INT(gp_stop_holdback("xxd", 3, stops, 2), 0);
}

TEST(loop_time_cancel_and_full_context) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    g.max_time = 1e-12;
    gp_gen_result r;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_TIME);
    CHECK_EQ_INT(r.n_tokens, 1);
    CHECK_STR(r.text, "Hel");
    gp_gen_result_free(&r);

    g = config();
    sink k = {{0}, 0, 2, 0, 0};
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, on_tok, &k, &r), GP_ERR_CANCELLED);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_CANCELLED);
    CHECK_EQ_INT(r.n_tokens, 2);
    CHECK_STR(r.text, "Hello");
    gp_gen_result_free(&r);

    fake small = {SCRIPT, 6, 0, 0, 4, 0}; /* 2 prompt + 2 decoded fit */
    gp_gen_engine es = engine(&small, 1);
    CHECK_STATUS(gp_gen_run(&es, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.finish_reason, GP_FINISH_CONTEXT);
    CHECK_EQ_INT(r.n_tokens, 3);
    gp_gen_result_free(&r);
}

TEST(loop_logprobs_and_top_n) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    g.top_logprobs = 3;
    gp_gen_result r;
    sink k = {{0}, 0, 0, 0, 0};
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, on_tok, &k, &r), GP_OK);
    REQUIRE(r.logprobs && r.top_logprobs);
    CHECK_EQ_INT(r.n_top, 3);
    /* logits: 5 for the chosen id, 1 for id 7, 0 for the other 6 */
    double want = 5.0 - log(exp(5.0) + exp(1.0) + 6.0);
    double err = 0;
    for (int i = 0; i < r.n_tokens; i++) {
        err = fmax(err, fabs(r.logprobs[i] - want));
        CHECK_EQ_INT(r.top_logprobs[i * 3].id, r.tokens[i]);
        CHECK(r.top_logprobs[i * 3].logprob == r.logprobs[i]);
        CHECK_EQ_INT(r.top_logprobs[i * 3 + 1].id, 7);
    }
    NOTE("logprob max error vs closed form %.3g (tol 1e-6)", err);
    CHECK(err < 1e-6);
    CHECK(k.last_logprob == r.logprobs[r.n_tokens - 1]);
    gp_gen_result_free(&r);
    /* raw logprobs differ from processed ones once a processor changes the scores */
    const gp_token_bias lb[] = {{7, 2.0}};
    g.logit_bias = lb;
    g.n_logit_bias = 1;
    g.logprobs_raw = 0;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    float processed = r.logprobs[0];
    gp_gen_result_free(&r);
    g.logprobs_raw = 1;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK(fabs(r.logprobs[0] - want) < 1e-6);
    CHECK(r.logprobs[0] != processed);
    gp_gen_result_free(&r);
}

static gp_status pick_last(const float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double u,
                           void *ud, int32_t *token) {
    double *us = ud;
    us[n_ids - 2] = u;
    *token = n_vocab - 1;
    return GP_OK;
}

TEST(loop_caller_sampler_and_seeded_sampling) {
    fake f = {SCRIPT, 6, 0, 0, 0, 1};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_config g = config();
    double us[4] = {-1, -1, -1, -1};
    g.sampler = pick_last;
    g.sampler_user_data = us;
    g.max_new_tokens = 4;
    gp_gen_result r;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(r.tokens[i], 7);
        CHECK(us[i] >= 0 && us[i] < 1);
    }
    gp_gen_result_free(&r);

    g = config();
    g.do_sample = 1;
    g.ignore_eos = 1;
    g.max_new_tokens = 24;
    g.seed = 99;
    gp_gen_result a, b, c;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &a), GP_OK);
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &b), GP_OK);
    g.seed = 100;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &c), GP_OK);
    CHECK(a.n_tokens == 24 && b.n_tokens == 24 && c.n_tokens == 24);
    CHECK(!memcmp(a.tokens, b.tokens, 24 * sizeof(int32_t)));
    CHECK(memcmp(a.tokens, c.tokens, 24 * sizeof(int32_t)) != 0);
    gp_gen_result_free(&a);
    gp_gen_result_free(&b);
    gp_gen_result_free(&c);
}

TEST(loop_rejects_bad_configs_naming_the_field) {
    fake f = {SCRIPT, 6, 0, 0, 0, 0};
    gp_gen_engine e = engine(&f, 1);
    gp_gen_result r;
    gp_gen_config g = config();
    g.do_sample = 1;
    g.temperature = 0.0;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), "'temperature'") != NULL);
    g = config();
    g.top_p = 1.5;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), "'top_p'") != NULL);
    g = config();
    const int32_t w[] = {99};
    const gp_token_seq bw[] = {{w, 1}};
    g.bad_words_ids = bw;
    g.n_bad_words_ids = 1;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), "'bad_words_ids[0][0]'") != NULL);
    g = config();
    g.n_suppress_tokens = 2;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), "suppress_tokens") != NULL);
    g = config();
    const int32_t bad_prompt[] = {1, 8};
    CHECK_STATUS(gp_gen_run(&e, bad_prompt, 2, &g, NULL, NULL, &r), GP_ERR_RANGE);
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 0, &g, NULL, NULL, &r), GP_ERR_INVALID_ARG);
    /* every id masked while sampling */
    g.do_sample = 1;
    const int32_t all[] = {0, 1, 2, 3, 4, 5, 6, 7};
    g.suppress_tokens = all;
    g.n_suppress_tokens = 8;
    CHECK_STATUS(gp_gen_run(&e, PROMPT, 2, &g, NULL, NULL, &r), GP_ERR_STATE);
    CHECK(r.tokens == NULL);
}
