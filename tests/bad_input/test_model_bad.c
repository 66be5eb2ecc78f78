/* test_model_bad.c — bad config.json and bad checkpoints: each case returns a status and a message naming the
 * file and the field or tensor, never a crash, and leaves nothing loaded. */
#include "genparity.h"
#include "synth.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

/* Writes a synthetic model with config field replaced, loads it, and expects status `want` and a message that
 * contains `file` and `needle`. */
static void expect_load(const char *field, const char *value, const char *skip, const char *bad_shape, gp_status want,
                        const char *file, const char *needle) {
    char *dir = gp_test_tmpdir();
    REQUIRE(synth_model(dir, synth_llama_config(field, value), skip, bad_shape) == 0);
    gp_model *m = (gp_model *)1;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), want);
    CHECK(m == NULL);
    const char *msg = gp_errmsg();
    if (!strstr(msg, file) || !strstr(msg, needle)) {
        NOTE("message '%s' should name '%s' and '%s'", msg, file, needle);
        gp_test_failed = 1;
    }
    free(dir);
}

TEST(model_synthetic_loads_and_runs) {
    char *dir = gp_test_tmpdir();
    REQUIRE(synth_model(dir, synth_llama_config(NULL, NULL), NULL, NULL) == 0);
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    if (m) {
        gp_ctx *c = NULL;
        CHECK_STATUS(gp_ctx_init(m, NULL, &c), GP_OK);
        int32_t ids[3] = {1, 5, 63};
        float logits[64];
        CHECK_STATUS(gp_ctx_eval(c, ids, 3, NULL, logits), GP_OK);
        int32_t bad = 64;
        CHECK_STATUS(gp_ctx_eval(c, &bad, 1, NULL, logits), GP_ERR_RANGE);
        CHECK(strstr(gp_errmsg(), "64") != NULL);
        CHECK_EQ_INT(gp_ctx_n_past(c), 3); /* a refused call leaves the cache as it was */
        gp_ctx_free(c);
    }
    gp_model_free(m);
    free(dir);
}

TEST(model_bad_no_config) {
    char *dir = gp_test_tmpdir();
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "config.json") != NULL);
    free(dir);
}

TEST(model_bad_config_not_json) { expect_load("hidden_size", "16,,", NULL, NULL, GP_ERR_FORMAT, "config.json", "JSON"); }
TEST(model_bad_config_zero_heads) {
    expect_load("num_attention_heads", "0", NULL, NULL, GP_ERR_FORMAT, "config.json", "num_attention_heads");
}
TEST(model_bad_config_hidden_not_divisible) {
    expect_load("hidden_size", "18", NULL, NULL, GP_ERR_FORMAT, "config.json", "hidden_size");
}
TEST(model_bad_config_kv_heads_not_dividing) {
    expect_load("num_key_value_heads", "3", NULL, NULL, GP_ERR_FORMAT, "config.json", "num_key_value_heads");
}
TEST(model_bad_config_negative_size) {
    expect_load("intermediate_size", "-32", NULL, NULL, GP_ERR_FORMAT, "config.json", "intermediate_size");
}
TEST(model_bad_config_absurd_size) {
    expect_load("hidden_size", "1e12", NULL, NULL, GP_ERR_FORMAT, "config.json", "hidden_size");
}
TEST(model_bad_config_absurd_layers) {
    expect_load("num_hidden_layers", "100000000", NULL, NULL, GP_ERR_FORMAT, "config.json", "num_hidden_layers");
}
TEST(model_bad_config_fractional_size) {
    expect_load("vocab_size", "64.5", NULL, NULL, GP_ERR_FORMAT, "config.json", "vocab_size");
}
TEST(model_bad_config_size_is_string) {
    expect_load("vocab_size", "\"64\"", NULL, NULL, GP_ERR_FORMAT, "config.json", "vocab_size");
}
TEST(model_bad_config_missing_field) {
    expect_load("hidden_size", NULL, NULL, NULL, GP_ERR_MISSING, "config.json", "hidden_size");
}
TEST(model_bad_config_unsupported_arch) {
    expect_load("architectures", "[\"GPT2LMHeadModel\"]", NULL, NULL, GP_ERR_UNSUPPORTED, "config.json",
                "GPT2LMHeadModel");
}
TEST(model_bad_config_no_arch) {
    expect_load("architectures", "[]", NULL, NULL, GP_ERR_MISSING, "config.json", "architectures");
}
TEST(model_bad_config_rope_type) {
    expect_load("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4}", NULL, NULL, GP_ERR_UNSUPPORTED,
                "config.json", "rope_scaling.rope_type");
}
TEST(model_bad_config_layer_types_length) {
    expect_load("layer_types", "[\"full_attention\"]", NULL, NULL, GP_ERR_FORMAT, "config.json", "layer_types");
}
TEST(model_bad_config_eps) {
    expect_load("rms_norm_eps", "-1", NULL, NULL, GP_ERR_FORMAT, "config.json", "rms_norm_eps");
}
TEST(model_bad_missing_tensor) {
    expect_load(NULL, NULL, "model.layers.1.mlp.up_proj.weight", NULL, GP_ERR_MISSING, "model.layers.1.mlp.up_proj.weight",
                "missing");
}
TEST(model_bad_missing_lm_head_untied) {
    expect_load(NULL, NULL, "lm_head.weight", NULL, GP_ERR_MISSING, "lm_head.weight", "missing");
}
TEST(model_bad_tensor_shape) {
    expect_load(NULL, NULL, NULL, "model.layers.0.self_attn.k_proj.weight", GP_ERR_FORMAT, "model.safetensors",
                "model.layers.0.self_attn.k_proj.weight");
}

TEST(cache_file_ids_outside_vocabulary) { /* found by fuzz_cache_file: a file whose token ids the model cannot have */
    char *dir = gp_test_tmpdir(), path[600];
    REQUIRE(synth_model(dir, synth_llama_config(NULL, NULL), NULL, NULL) == 0);
    gp_model *m = NULL;
    gp_ctx *c = NULL;
    REQUIRE(gp_model_load(dir, NULL, &m) == GP_OK);
    REQUIRE(gp_ctx_init(m, NULL, &c) == GP_OK);
    int32_t ids[3] = {1, 5, 63};
    CHECK_STATUS(gp_ctx_eval(c, ids, 3, NULL, NULL), GP_OK);
    snprintf(path, sizeof path, "%s/c.safetensors", dir);
    CHECK_STATUS(gp_ctx_cache_save(c, path), GP_OK);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    uint64_t hn = 0;
    CHECK(fread(&hn, 8, 1, f) == 1 && hn < 1 << 20);
    char *h = calloc(hn + 1, 1);
    CHECK(fread(h, 1, hn, f) == hn);
    const char *t = strstr(h, "\"token_ids\"");
    const char *o = t ? strstr(t, "data_offsets") : NULL;
    long b = -1;
    if (o) sscanf(strchr(o, '[') + 1, "%ld", &b);
    CHECK(b >= 0);
    int32_t bad = 64; /* vocab_size of the synthetic model */
    if (b >= 0) fseek(f, (long)(8 + hn) + b, SEEK_SET), fwrite(&bad, 4, 1, f);
    fclose(f);
    free(h);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_cache_load(c, path), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "token_ids") != NULL && strstr(gp_errmsg(), "vocabulary") != NULL);
    CHECK_EQ_INT(gp_ctx_n_past(c), 0);
    gp_ctx_free(c);
    gp_model_free(m);
    free(dir);
}
