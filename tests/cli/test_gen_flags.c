/* test_gen_flags.c — the CLI's sampling flags: cli_gen_flag parsing each flag into a gp_gen_config (compiled in from
 * cli/gen_flags.c), and `genparity generate` reproducing rep1.3_ngram3_48 and bad_words_32 of a fixture model through
 * those flags with --format json. */
#include "test.h"

#include "../../cli/args.c"
#include "../../cli/gen_flags.c"

#include "fixtures.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

/* Runs the flags (NULL-terminated) through cli_gen_flag on g; returns the last result. */
static int run_flags(gp_gen_config *g, const char **flags) {
    int argc = 0;
    while (flags[argc]) argc++;
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        rc = cli_gen_flag(argc, (char **)flags, &i, g);
        if (rc <= 0) return rc;
    }
    return rc;
}

TEST(cli_gen_flags_parse_every_knob) {
    gp_gen_config g = gp_gen_config_default();
    const char *f[] = {"--top-k", "7", "--top-p", "0.9", "--min-p", "0.05", "--typical-p", "0.8", "--epsilon",
                       "0.001", "--eta", "0.002", "--repetition-penalty", "1.3", "--no-repeat-ngram", "3",
                       "--frequency-penalty", "0.5", "--presence-penalty", "-0.25", "--logit-bias",
                       "{\"13\": -100, \"7\": 2.5}", "--bad-words", "[[4],[7,11]]", "--stop", "\n\n", "--stop", "END",
                       "--min-new-tokens", "5", "--seed", "18446744073709551615", "--logprobs", "4",
                       "--penalty-window", "64", "--max-time", "2.5", "--temp", "0.7", NULL};
    CHECK_EQ_INT(run_flags(&g, f), 1);
    CHECK_EQ_INT(g.do_sample, 1);
    CHECK(g.temperature == 0.7 && g.top_p == 0.9 && g.min_p == 0.05 && g.typical_p == 0.8);
    CHECK(g.epsilon_cutoff == 0.001 && g.eta_cutoff == 0.002 && g.repetition_penalty == 1.3);
    CHECK(g.frequency_penalty == 0.5 && g.presence_penalty == -0.25 && g.max_time == 2.5);
    CHECK_EQ_INT(g.top_k, 7);
    CHECK_EQ_INT(g.no_repeat_ngram_size, 3);
    CHECK_EQ_INT(g.min_new_tokens, 5);
    CHECK_EQ_INT(g.penalty_window, 64);
    CHECK(g.seed == UINT64_MAX);
    CHECK(g.logprobs == 1 && g.top_logprobs == 4);
    REQUIRE(g.n_logit_bias == 2);
    CHECK(g.logit_bias[0].id == 13 && g.logit_bias[0].bias == -100.0 && g.logit_bias[1].id == 7);
    REQUIRE(g.n_bad_words_ids == 2 && g.bad_words_ids[1].n == 2);
    CHECK_EQ_INT(g.bad_words_ids[1].ids[1], 11);
    REQUIRE(g.n_stop_strings == 2);
    CHECK_STR(g.stop_strings[0], "\n\n");
    CHECK_STR(g.stop_strings[1], "END");
    CHECK_STATUS(gp_gen_config_validate(&g, 32000), GP_OK);
    cli_gen_flags_free();
}

TEST(cli_gen_flags_temp_zero_is_greedy_in_any_order) {
    gp_gen_config g = gp_gen_config_default();
    g.do_sample = 1; /* as a model's generation_config.json may say */
    const char *f[] = {"--top-k", "5", "--temp", "0", "--top-p", "0.5", NULL};
    CHECK_EQ_INT(run_flags(&g, f), 1);
    CHECK_EQ_INT(g.do_sample, 0);
    cli_gen_flags_free();
    g = gp_gen_config_default();
    const char *f2[] = {"--top-p", "0.5", NULL};
    CHECK_EQ_INT(run_flags(&g, f2), 1);
    CHECK_EQ_INT(g.do_sample, 1); /* a sampling flag turns sampling on */
    cli_gen_flags_free();
}

TEST(cli_gen_flags_reject_bad_values) {
    static const char *const bad[][2] = {
        {"--temp", "-1"},          {"--temp", "abc"},         {"--top-k", "-3"},       {"--top-p", "1.5"},
        {"--min-p", "x"},          {"--typical-p", "0"},      {"--epsilon", "1"},      {"--eta", "-0.1"},
        {"--repetition-penalty", "0"}, {"--no-repeat-ngram", "2.5"}, {"--logit-bias", "[1]"},
        {"--logit-bias", "{\"a\": 1}"}, {"--bad-words", "[[]]"}, {"--bad-words", "[4]"}, {"--bad-words", "[[-1]]"},
        {"--stop", ""},            {"--seed", "-1"},          {"--logprobs", "-2"},    {"--min-new-tokens", "x"},
        {"--max-time", "-1"},
    };
    fflush(stderr); /* the flags' error messages are expected: keep them out of the test log */
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 2);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        gp_gen_config g = gp_gen_config_default();
        const char *argv[] = {bad[k][0], bad[k][1], NULL};
        int i = 0;
        int rc = cli_gen_flag(2, (char **)argv, &i, &g);
        if (rc != -1) {
            printf("    %s '%s' -> %d, want -1\n", bad[k][0], bad[k][1], rc);
            gp_test_failed = 1;
        }
    }
    /* a missing value */
    gp_gen_config g = gp_gen_config_default();
    const char *argv[] = {"--top-k", NULL};
    int i = 0;
    CHECK_EQ_INT(cli_gen_flag(1, (char **)argv, &i, &g), -1);
    fflush(stderr);
    if (saved >= 0) dup2(saved, 2);
    if (saved >= 0) close(saved);
    if (devnull >= 0) close(devnull);
    /* not a sampling flag */
    const char *other[] = {"--model", "dir", NULL};
    i = 0;
    CHECK_EQ_INT(cli_gen_flag(2, (char **)other, &i, &g), 0);
    CHECK_EQ_INT(i, 0);
    cli_gen_flags_free();
}

static void ids_csv(const cJSON *arr, char *buf, size_t cap) {
    buf[0] = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, "%s%d", l ? "," : "", (int)e->valuedouble);
    }
}

TEST(cli_generate_flags_reproduce_transformers) {
    char *dir = gp_test_fixture("models/tiny-llama");
    if (!dir) return;
    char rp[512];
    snprintf(rp, sizeof rp, "%s/reference.json", dir);
    cJSON *ref = fx_read_json(rp);
    REQUIRE(ref);
    const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
    REQUIRE(p);
    char ids[2048], bw[512], args[4096];
    ids_csv(cJSON_GetObjectItem(p, "ids"), ids, sizeof ids);
    char *bwj = cJSON_PrintUnformatted(cJSON_GetObjectItem(p, "bad_words_ids"));
    REQUIRE(bwj);
    snprintf(bw, sizeof bw, "%s", bwj);
    free(bwj);
    static const struct {
        const char *key, *flags;
    } cases[] = {{"rep1.3_ngram3_48", "--max-tokens 48 --repetition-penalty 1.3 --no-repeat-ngram 3"},
                 {"bad_words_32", "--max-tokens 32 --bad-words"}};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --temp 0 --format json %s%s%s%s", dir, ids,
                 cases[k].flags, k == 1 ? " '" : "", k == 1 ? bw : "", k == 1 ? "'" : "");
        cJSON *out = fx_run_json(args);
        CHECK(out != NULL);
        if (!out) continue;
        int32_t *got = NULL, *want = NULL;
        int ng = fx_int_array(cJSON_GetObjectItem(out, "tokens"), &got);
        int nw = fx_int_array(cJSON_GetObjectItem(p, cases[k].key), &want);
        int fd = fx_first_diff(got, ng, want, nw);
        NOTE("CLI %s: %d tokens, first difference %d (-1 = identical)", cases[k].key, ng, fd);
        CHECK(fd < 0);
        free(got);
        free(want);
        cJSON_Delete(out);
    }
    /* --logprobs N: per-token entries in the JSON */
    snprintf(args, sizeof args, "generate --model '%s' --prompt-ids %s --temp 0 --format json --max-tokens 4 "
             "--logprobs 2", dir, ids);
    cJSON *out = fx_run_json(args);
    CHECK(out != NULL);
    if (out) {
        const cJSON *lp = cJSON_GetObjectItem(out, "logprobs");
        CHECK(cJSON_IsArray(lp) && cJSON_GetArraySize(lp) == 4);
        const cJSON *e0 = cJSON_GetArrayItem(lp, 0);
        CHECK(cJSON_IsNumber(cJSON_GetObjectItem(e0, "logprob")));
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "top")) == 2);
        cJSON_Delete(out);
    }
    cJSON_Delete(ref);
    free(dir);
}
