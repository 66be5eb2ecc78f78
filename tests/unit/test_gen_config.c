/* test_gen_config.c — gp_gen_config defaults (transformers' GenerationConfig), generation_config.json applied on
 * top (precedence, list fields, max_length semantics), and errors naming the file and the field. */
#include "test.h"

#include "sample/sample.h"

#include <stdlib.h>

TEST(gen_config_defaults_are_transformers) {
    gp_gen_config g = gp_gen_config_default();
    CHECK_EQ_INT(g.max_new_tokens, 20);
    CHECK_EQ_INT(g.do_sample, 0);
    CHECK(g.temperature == 1.0 && g.top_p == 1.0 && g.typical_p == 1.0 && g.repetition_penalty == 1.0);
    CHECK_EQ_INT(g.top_k, 50);
    CHECK(g.min_p == 0.0 && g.epsilon_cutoff == 0.0 && g.eta_cutoff == 0.0);
    CHECK_EQ_INT(g.no_repeat_ngram_size, 0);
    CHECK_EQ_INT(g.forced_bos_token_id, -1);
    CHECK_EQ_INT(g.forced_eos_token_id, -1);
    CHECK_EQ_INT(g.n_eos, 0);
    CHECK(g.frequency_penalty == 0.0 && g.presence_penalty == 0.0 && g.penalty_window == 0);
    CHECK_STATUS(gp_gen_config_validate(&g, 100), GP_OK);
    CHECK_STR(gp_finish_reason_str(GP_FINISH_STOP_STRING), "stop_string");
    CHECK_STR(gp_finish_reason_str(GP_FINISH_LENGTH), "length");
}

TEST(gen_config_json_overrides_defaults) {
    gp_gen_config g = gp_gen_config_default();
    const char *js = "{\"do_sample\": true, \"temperature\": 0.6, \"top_k\": 20, \"top_p\": 0.95, \"min_p\": 0,"
                     " \"eos_token_id\": [151645, 151643], \"repetition_penalty\": 1.1, \"max_new_tokens\": null,"
                     " \"bad_words_ids\": [[4], [7, 11]], \"suppress_tokens\": [1, 2],"
                     " \"sequence_bias\": [[[5], 2.0], [[3, 5], -1.5]], \"stop_strings\": \"\\n\\n\","
                     " \"pad_token_id\": 0, \"transformers_version\": \"5.17.0\"}";
    CHECK_STATUS(gp_gen_config_apply_json_text(&g, js, "x/generation_config.json"), GP_OK);
    CHECK_EQ_INT(g.do_sample, 1);
    CHECK(g.temperature == 0.6 && g.top_p == 0.95 && g.repetition_penalty == 1.1);
    CHECK_EQ_INT(g.top_k, 20);
    CHECK_EQ_INT(g.max_new_tokens, 20); /* null: unchanged */
    CHECK_EQ_INT(g.n_eos, 2);
    CHECK_EQ_INT(g.eos_ids[1], 151643);
    REQUIRE(g.n_bad_words_ids == 2 && g.bad_words_ids[1].n == 2);
    CHECK_EQ_INT(g.bad_words_ids[1].ids[1], 11);
    CHECK_EQ_INT(g.n_suppress_tokens, 2);
    REQUIRE(g.n_sequence_bias == 2);
    CHECK(g.sequence_bias[1].bias == -1.5);
    REQUIRE(g.n_stop_strings == 1);
    CHECK_STR(g.stop_strings[0], "\n\n");
    /* a second file layers on top; earlier arrays stay valid until free_owned */
    CHECK_STATUS(gp_gen_config_apply_json_text(&g, "{\"eos_token_id\": 2, \"max_length\": 100}", "y.json"), GP_OK);
    CHECK_EQ_INT(g.n_eos, 1);
    CHECK_EQ_INT(g.eos_ids[0], 2);
    CHECK_EQ_INT(g.max_length, 100);
    CHECK_EQ_INT(g.max_new_tokens, 0); /* the model's max_length replaces the default of 20 new tokens */
    CHECK_EQ_INT(g.bad_words_ids[0].ids[0], 4);
    gp_gen_config_free_owned(&g);
    CHECK(g._owned == NULL && g.bad_words_ids == NULL && g.n_stop_strings == 0);
}

TEST(gen_config_json_errors_name_file_and_field) {
    static const struct {
        const char *json, *field;
        gp_status want;
    } cases[] = {
        {"{\"top_k\": \"x\"}", "'top_k'", GP_ERR_FORMAT},
        {"{\"top_k\": 1.5}", "'top_k'", GP_ERR_FORMAT},
        {"{\"temperature\": [1]}", "'temperature'", GP_ERR_FORMAT},
        {"{\"do_sample\": 1}", "'do_sample'", GP_ERR_FORMAT},
        {"{\"eos_token_id\": [1, -2]}", "'eos_token_id[1]'", GP_ERR_FORMAT},
        {"{\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", "'eos_token_id'", GP_ERR_FORMAT},
        {"{\"bad_words_ids\": [[1], []]}", "'bad_words_ids[1]'", GP_ERR_FORMAT},
        {"{\"bad_words_ids\": [1, 2]}", "'bad_words_ids[0]'", GP_ERR_FORMAT},
        {"{\"sequence_bias\": [[[1], \"a\"]]}", "'sequence_bias[0]'", GP_ERR_FORMAT},
        {"{\"stop_strings\": [\"\"]}", "'stop_strings[0]'", GP_ERR_FORMAT},
        {"{\"top_p\": 2.0}", "'top_p'", GP_ERR_FORMAT},
        {"{\"do_sample\": true, \"temperature\": 0.0}", "'temperature'", GP_ERR_FORMAT},
        {"{\"forced_eos_token_id\": [1, 2]}", "'forced_eos_token_id'", GP_ERR_UNSUPPORTED},
        {"[1, 2]", "top level", GP_ERR_FORMAT},
        {"{\"top_k\": ", "not valid JSON", GP_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_gen_config g = gp_gen_config_default();
        gp_gen_config before = g;
        gp_status s = gp_gen_config_apply_json_text(&g, cases[i].json, "m/generation_config.json");
        if (s != cases[i].want || !strstr(gp_errmsg(), "m/generation_config.json") ||
            !strstr(gp_errmsg(), cases[i].field)) {
            printf("    %s -> %d \"%s\" (want %d naming %s)\n", cases[i].json, (int)s, gp_errmsg(), (int)cases[i].want,
                   cases[i].field);
            gp_test_failed = 1;
        }
        CHECK(!memcmp(&g, &before, sizeof g)); /* a failure leaves the config as it was */
    }
}

TEST(gen_config_json_file_and_fixture_models) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("{\"eos_token_id\": 7, \"no_repeat_ngram_size\": 3}", f);
    fclose(f);
    gp_gen_config g = gp_gen_config_default();
    CHECK_STATUS(gp_gen_config_apply_json(&g, path), GP_OK);
    CHECK_EQ_INT(g.eos_ids[0], 7);
    CHECK_EQ_INT(g.no_repeat_ngram_size, 3);
    snprintf(path, sizeof path, "%s/missing.json", dir);
    CHECK(gp_gen_config_apply_json(&g, path) != GP_OK);
    free(dir);
    /* every fixture model's generation_config.json parses */
    static const char *const models[] = {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3",
                                         "tiny-gemma2", "tiny-gemma3", "shakespeare-llama"};
    for (int i = 0; i < 7; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s/generation_config.json", models[i]);
        char *p = gp_test_fixture(rel);
        if (!p) return;
        gp_gen_config m = gp_gen_config_default();
        CHECK_STATUS(gp_gen_config_apply_json(&m, p), GP_OK);
        CHECK_EQ_INT(m.n_eos, 1);
        gp_gen_config_free_owned(&m);
        free(p);
    }
}

/* Beam-search fields: defaults as transformers, parsed from generation_config.json (early_stopping true / false /
 * "never"), bad values refused naming the field. */
TEST(gen_config_beam_fields) {
    gp_gen_config g = gp_gen_config_default();
    CHECK_EQ_INT(g.num_beams, 1);
    CHECK_EQ_INT(g.num_return_sequences, 1);
    CHECK(g.length_penalty == 1.0);
    CHECK_EQ_INT(g.early_stopping, GP_EARLY_STOPPING_FALSE);
    CHECK_STATUS(gp_gen_config_apply_json_text(&g, "{\"num_beams\": 4, \"num_return_sequences\": 2, "
                                               "\"length_penalty\": 0.5, \"early_stopping\": \"never\"}", "b.json"),
                 GP_OK);
    CHECK_EQ_INT(g.num_beams, 4);
    CHECK_EQ_INT(g.num_return_sequences, 2);
    CHECK(g.length_penalty == 0.5);
    CHECK_EQ_INT(g.early_stopping, GP_EARLY_STOPPING_NEVER);
    CHECK_STATUS(gp_gen_config_apply_json_text(&g, "{\"early_stopping\": true}", "b.json"), GP_OK);
    CHECK_EQ_INT(g.early_stopping, GP_EARLY_STOPPING_TRUE);
    const char *bad[] = {"{\"early_stopping\": \"sometimes\"}", "{\"num_beams\": 0}", "{\"num_beams\": 2.5}",
                         "{\"num_return_sequences\": -1}"};
    const char *field[] = {"early_stopping", "num_beams", "num_beams", "num_return_sequences"};
    for (int i = 0; i < 4; i++) {
        gp_gen_config h = gp_gen_config_default();
        CHECK_STATUS(gp_gen_config_apply_json_text(&h, bad[i], "b.json"), GP_ERR_FORMAT);
        if (!strstr(gp_errmsg(), field[i]) || !strstr(gp_errmsg(), "b.json")) {
            NOTE("%s: message '%s' does not name b.json and %s", bad[i], gp_errmsg(), field[i]);
            gp_test_failed = 1;
        }
    }
    gp_gen_config h = gp_gen_config_default();
    h.num_beams = 2;
    h.num_return_sequences = 3;
    CHECK_STATUS(gp_gen_config_validate(&h, 0), GP_OK); /* ranges only; combinations are checked by gp_generate */
    h.early_stopping = 7;
    CHECK_STATUS(gp_gen_config_validate(&h, 0), GP_ERR_INVALID_ARG);
    gp_gen_config_free_owned(&g);
}
