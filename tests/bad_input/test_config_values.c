/* test_config_values.c — numbers that do not fit and values that must be refused in config.json and
 * generation_config.json (issue 17 items 9 and 12): each case is an error naming the file and the field, never
 * undefined behaviour (run under `make asan`); ids are checked against the vocabulary at load; context sizes near
 * INT32_MAX are refused at gp_ctx_init before any arithmetic; config.json that is a FIFO or a symlink loop gets a
 * message saying so (and never blocks). */
#include "genparity.h"
#include "synth.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Loads a synthetic model (config field replaced by value, optional generation_config.json text) and expects
 * status want with a message containing file and needle. */
static void expect(const char *field, const char *value, const char *gen_json, gp_status want, const char *file,
                   const char *needle) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir && synth_model(dir, synth_llama_config(field, value), NULL, NULL) == 0);
    if (gen_json) {
        char p[512];
        snprintf(p, sizeof p, "%s/generation_config.json", dir);
        FILE *f = fopen(p, "w");
        REQUIRE(f);
        fputs(gen_json, f);
        fclose(f);
    }
    gp_model *m = (gp_model *)1;
    gp_status s = gp_model_load(dir, NULL, &m);
    const char *msg = gp_errmsg();
    if (s != want || m != NULL || !strstr(msg, file) || !strstr(msg, needle)) {
        NOTE("%s = %s%s%s -> status %d, message '%s' (want %d naming '%s' and '%s')", field ? field : "-",
             value ? value : "-", gen_json ? ", generation_config.json " : "", gen_json ? gen_json : "", (int)s, msg,
             (int)want, file, needle);
        gp_test_failed = 1;
    }
    if (s == GP_OK) gp_model_free(m);
    free(dir);
}

#define CFG(field, value, needle) expect(field, value, NULL, GP_ERR_FORMAT, "config.json", needle)
#define GEN(json, needle) expect(NULL, NULL, json, GP_ERR_FORMAT, "generation_config.json", needle)

TEST(config_ids_that_do_not_fit) {
    CFG("eos_token_id", "1e20", "'eos_token_id'");
    CFG("eos_token_id", "[2, 4e9]", "'eos_token_id[1]'");
    CFG("eos_token_id", "-7", "'eos_token_id'");
    CFG("eos_token_id", "64", "'eos_token_id'"); /* vocab_size is 64 */
    CFG("eos_token_id", "[2, 1.5]", "'eos_token_id[1]'");
    CFG("eos_token_id", "\"2\"", "'eos_token_id'");
    CFG("bos_token_id", "1e300", "'bos_token_id'");
    CFG("bos_token_id", "-7", "'bos_token_id'");
    CFG("bos_token_id", "64", "'bos_token_id'");
    CFG("vocab_size", "1e300", "'vocab_size'");
    CFG("hidden_size", "-1e300", "'hidden_size'");
    CFG("max_position_embeddings", "9007199254740993", "'max_position_embeddings'");
    CFG("sliding_window", "1e19", "'sliding_window'");
}

TEST(generation_config_ids_that_do_not_fit) {
    GEN("{\"bos_token_id\": 1e300}", "'bos_token_id'");
    GEN("{\"bos_token_id\": -7}", "'bos_token_id'");
    GEN("{\"bos_token_id\": 64}", "'bos_token_id'");
    GEN("{\"eos_token_id\": 1e20}", "'eos_token_id'");
    GEN("{\"eos_token_id\": [2, 4e9]}", "'eos_token_id[1]'");
    GEN("{\"eos_token_id\": [2, 64]}", "'eos_token_id[1]'");
    GEN("{\"forced_bos_token_id\": 99}", "'forced_bos_token_id'");
    GEN("{\"suppress_tokens\": [1, 64]}", "'suppress_tokens[1]'");
    GEN("{\"bad_words_ids\": [[1], [2, 1e10]]}", "'bad_words_ids[1][1]'");
    GEN("{\"max_new_tokens\": 1e10}", "'max_new_tokens'");
    GEN("{\"top_k\": -1}", "'top_k'");
    GEN("{\"temperature\": 1e999}", "'temperature'");
}

TEST(generation_config_bos_is_the_models) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir && synth_model(dir, synth_llama_config("bos_token_id", "1"), NULL, NULL) == 0);
    char p[512];
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    FILE *f = fopen(p, "w");
    REQUIRE(f);
    fputs("{\"bos_token_id\": 5, \"eos_token_id\": [3, 4]}", f);
    fclose(f);
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    if (m) {
        CHECK_EQ_INT(gp_model_bos_id(m), 5);
        int32_t eos[8];
        CHECK_EQ_INT(gp_model_eos_ids(m, eos, 8), 2);
        CHECK_EQ_INT(eos[1], 4);
    }
    gp_model_free(m);
    free(dir);
}

TEST(config_values_that_must_be_refused) {
    CFG("rope_theta", "0", "'rope_theta'");
    CFG("rope_theta", "-10000", "'rope_theta'");
    CFG("rope_theta", "1e400", "'rope_theta'");
    CFG("rope_local_base_freq", "-1", "'rope_local_base_freq'");
    CFG("rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2, \"rope_theta\": -1}", "rope_scaling.rope_theta");
    CFG("rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 0}", "rope_parameters.rope_theta");
    CFG("query_pre_attn_scalar", "1e-320", "'query_pre_attn_scalar'");
    CFG("query_pre_attn_scalar", "1e-90", "'query_pre_attn_scalar'");
    CFG("query_pre_attn_scalar", "0", "'query_pre_attn_scalar'");
    CFG("query_pre_attn_scalar", "-16", "'query_pre_attn_scalar'");
    CFG("attn_logit_softcapping", "-50", "'attn_logit_softcapping'");
    CFG("final_logit_softcapping", "-30", "'final_logit_softcapping'");
    CFG("final_logit_softcapping", "1e39", "'final_logit_softcapping'");
    CFG("rms_norm_eps", "1e400", "'rms_norm_eps'");
    CFG("tie_word_embeddings", "1", "'tie_word_embeddings'");
}

TEST(config_duplicate_keys_are_refused) {
    /* cJSON keeps the first value, Python's json the last: a config that means two things is refused */
    CFG("x", "1, \"hidden_size\": 32", "'hidden_size' appears twice");
    CFG("rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2, \"factor\": 4}", "'factor' appears twice");
    GEN("{\"eos_token_id\": 2, \"do_sample\": true, \"eos_token_id\": 3}", "'eos_token_id' appears twice");
}

TEST(config_json_fifo_and_symlink_loop) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    REQUIRE(mkfifo(p, 0600) == 0);
    gp_model *m = (gp_model *)1;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_IO); /* returns at once: no blocking open */
    CHECK(m == NULL);
    NOTE("FIFO: %s", gp_errmsg());
    CHECK(strstr(gp_errmsg(), "config.json") && strstr(gp_errmsg(), "FIFO"));
    CHECK(!strstr(gp_errmsg(), "no config.json"));
    unlink(p);
    char q[512];
    snprintf(q, sizeof q, "%s/loop", dir);
    REQUIRE(symlink("loop", q) == 0);
    REQUIRE(symlink("loop", p) == 0);
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_IO);
    NOTE("symlink loop: %s", gp_errmsg());
    CHECK(strstr(gp_errmsg(), "config.json") && strstr(gp_errmsg(), "symbolic links"));
    unlink(p);
    REQUIRE(symlink("missing-target.json", p) == 0);
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_IO);
    NOTE("dangling link: %s", gp_errmsg());
    CHECK(strstr(gp_errmsg(), "does not exist"));
    unlink(p);
    REQUIRE(mkdir(p, 0700) == 0);
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_IO);
    CHECK(strstr(gp_errmsg(), "directory"));
    rmdir(p);
    free(dir);
}

TEST(ctx_sizes_near_int32_max_are_refused) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir && synth_model(dir, synth_llama_config(NULL, NULL), NULL, NULL) == 0);
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    REQUIRE(m);
    static const struct {
        const char *field;
        int32_t n_ctx, max_kv, chunk, keep, threads;
    } cases[] = {
        {"n_ctx", INT32_MAX, 0, 0, 0, 1},
        {"n_ctx", INT32_MAX - 1, 0, 0, 0, 1},
        {"max_kv_size", 0, INT32_MAX, 0, 0, 1},
        {"max_kv_size", 128, INT32_MAX - 7, 0, 0, 1},
        {"prefill_chunk", 128, 0, INT32_MAX, 0, 1},
        {"keep", 128, 64, 0, INT32_MAX, 1},
        {"n_threads", 128, 0, 0, 0, INT32_MAX},
        {"n_ctx", -1, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_ctx_params p = gp_ctx_default_params();
        p.n_ctx = cases[i].n_ctx;
        p.max_kv_size = cases[i].max_kv;
        p.prefill_chunk = cases[i].chunk;
        p.keep = cases[i].keep;
        p.n_threads = cases[i].threads;
        gp_ctx *c = (gp_ctx *)1;
        gp_status s = gp_ctx_init(m, &p, &c);
        if (s != GP_ERR_INVALID_ARG || c != NULL || !strstr(gp_errmsg(), cases[i].field)) {
            NOTE("case %zu: status %d, message '%s' (want INVALID_ARG naming %s)", i, (int)s, gp_errmsg(),
                 cases[i].field);
            gp_test_failed = 1;
        }
        if (s == GP_OK) gp_ctx_free(c);
    }
    gp_model_free(m);
    free(dir);
}
