/* test_lora_bad.c — adapters that must be refused (gp_adapter_load / gp_ctx_set_adapters): each a status and a
 * message naming the file and the field or tensor; never a partial application.  Adapters are written here for
 * tiny-llama (hidden 64, q_proj [64, 64], v_proj [32, 64], rank 4) in either layout. */
#include "genparity.h"
#include "io/safetensors.h"
#include "test.h"

#include "fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float ZEROS[64 * 8];

/* One tensor of a written adapter: name, rows, cols. */
typedef struct tdesc {
    const char *name;
    int64_t r, c;
} tdesc;

/* Writes dir/<file> with the tensors (zeros) and dir/adapter_config.json = config (NULL: none). */
static void write_adapter(const char *dir, const char *file, const tdesc *t, int n, const char *config) {
    gp_st_write_tensor w[8];
    for (int i = 0; i < n; i++) w[i] = (gp_st_write_tensor){t[i].name, GP_DTYPE_F32, 2, {t[i].r, t[i].c}, ZEROS};
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    REQUIRE(gp_st_write(path, w, n, NULL, NULL, 0) == GP_OK);
    if (!config) return;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(config, f);
    fclose(f);
}

static const tdesc PEFT_OK[] = {{"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", 4, 64},
                                {"base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight", 64, 4}};
static const tdesc MLX_OK[] = {{"model.layers.1.self_attn.v_proj.lora_a", 64, 4},
                               {"model.layers.1.self_attn.v_proj.lora_b", 4, 32}};
#define PEFT_CFG(extra) "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]" extra "}"
#define MLX_CFG(extra) "{\"fine_tune_type\": \"lora\", \"num_layers\": 2, \"lora_parameters\": {\"rank\": 4, \"scale\": 2.0}" extra "}"

/* Writes the adapter and expects gp_adapter_load to return want with a message containing needle. */
static void expect(int peft, const tdesc *t, int n, const char *config, gp_status want, const char *needle) {
    gp_model *m = fx_load_model("tiny-llama", 0);
    if (!m) return;
    char *dir = gp_test_tmpdir();
    write_adapter(dir, peft ? "adapter_model.safetensors" : "adapters.safetensors", t, n, config);
    gp_adapter *a = (gp_adapter *)1;
    CHECK_STATUS(gp_adapter_load(m, dir, &a), want);
    CHECK(a == NULL || want == GP_OK);
    if (want != GP_OK && !strstr(gp_errmsg(), needle)) {
        NOTE("message '%s' should contain '%s'", gp_errmsg(), needle);
        gp_test_failed = 1;
    }
    if (want == GP_OK) gp_adapter_free(a);
    gp_model_free(m);
    free(dir);
}

TEST(lora_written_adapters_load) {
    expect(1, PEFT_OK, 2, PEFT_CFG(""), GP_OK, "");
    expect(0, MLX_OK, 2, MLX_CFG(""), GP_OK, "");
}
TEST(lora_bad_no_config) { expect(1, PEFT_OK, 2, NULL, GP_ERR_MISSING, "adapter_config.json"); }
TEST(lora_bad_peft_dora) { expect(1, PEFT_OK, 2, PEFT_CFG(", \"use_dora\": true"), GP_ERR_UNSUPPORTED, "use_dora"); }
TEST(lora_bad_mlx_dora) {
    expect(0, MLX_OK, 2, "{\"fine_tune_type\": \"dora\"}", GP_ERR_UNSUPPORTED, "fine_tune_type");
}
TEST(lora_bad_bias) { expect(1, PEFT_OK, 2, PEFT_CFG(", \"bias\": \"all\""), GP_ERR_UNSUPPORTED, "'bias'"); }
TEST(lora_bad_modules_to_save) {
    expect(1, PEFT_OK, 2, PEFT_CFG(", \"modules_to_save\": [\"lm_head\"]"), GP_ERR_UNSUPPORTED, "modules_to_save");
}
TEST(lora_bad_rank_pattern) {
    expect(1, PEFT_OK, 2, PEFT_CFG(", \"rank_pattern\": {\"q_proj\": 8}"), GP_ERR_UNSUPPORTED, "rank_pattern");
}
TEST(lora_bad_rank_mismatch) { /* config says r = 8, tensors are rank 4 */
    expect(1, PEFT_OK, 2, "{\"r\": 8, \"lora_alpha\": 16}", GP_ERR_FORMAT, "lora_A.weight");
}
TEST(lora_bad_other_model_shape) { /* q_proj of a hidden-32 model */
    const tdesc t[] = {{"model.layers.1.self_attn.q_proj.lora_a", 32, 4}, {"model.layers.1.self_attn.q_proj.lora_b", 4, 64}};
    expect(0, t, 2, MLX_CFG(""), GP_ERR_FORMAT, "q_proj.lora_a");
}
TEST(lora_bad_layer_out_of_range) {
    const tdesc t[] = {{"model.layers.7.self_attn.q_proj.lora_a", 64, 4}, {"model.layers.7.self_attn.q_proj.lora_b", 4, 64}};
    expect(0, t, 2, MLX_CFG(""), GP_ERR_FORMAT, "layer 7");
}
TEST(lora_bad_unknown_module) {
    const tdesc t[] = {{"lm_head.lora_a", 64, 4}, {"lm_head.lora_b", 4, 64}};
    expect(0, t, 2, MLX_CFG(""), GP_ERR_UNSUPPORTED, "lm_head.lora_a");
}
TEST(lora_bad_missing_half) { expect(0, MLX_OK, 1, MLX_CFG(""), GP_ERR_MISSING, "v_proj.lora_a"); }
TEST(lora_bad_outside_targets) { /* target_modules names q_proj only; the file has v_proj */
    const tdesc t[] = {{"base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight", 4, 64},
                       {"base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight", 32, 4}};
    expect(1, t, 2, PEFT_CFG(""), GP_ERR_FORMAT, "v_proj.lora_A.weight");
}
TEST(lora_bad_layers_to_transform) {
    expect(1, PEFT_OK, 2, PEFT_CFG(", \"layers_to_transform\": [0]"), GP_ERR_FORMAT, "layers.1");
}
TEST(lora_bad_config_not_json) { expect(1, PEFT_OK, 2, "{\"r\": 4,,}", GP_ERR_FORMAT, "adapter_config.json"); }

TEST(lora_bad_adapter_of_other_model) { /* loaded for tiny-llama, set on a tiny-qwen3 context */
    gp_model *a_m = fx_load_model("tiny-llama", 0), *b_m = fx_load_model("tiny-qwen3", 0);
    if (!a_m || !b_m) {
        gp_model_free(a_m), gp_model_free(b_m);
        return;
    }
    char *dir = gp_test_fixture("models/tiny-llama/adapter-mlx");
    gp_adapter *a = NULL;
    if (dir) CHECK_STATUS(gp_adapter_load(a_m, dir, &a), GP_OK);
    gp_ctx *c = NULL;
    CHECK_STATUS(gp_ctx_init(b_m, NULL, &c), GP_OK);
    if (a && c) {
        CHECK_STATUS(gp_ctx_set_adapters(c, &a, NULL, 1), GP_ERR_INVALID_ARG);
        CHECK(strstr(gp_errmsg(), "another model") != NULL);
    }
    /* the tiny-qwen3 adapter on tiny-llama: its shapes do not fit */
    char *qdir = gp_test_fixture("models/tiny-qwen3/adapter-mlx");
    gp_adapter *q = (gp_adapter *)1;
    if (qdir) {
        CHECK(gp_adapter_load(a_m, qdir, &q) != GP_OK && q == NULL);
        CHECK(strstr(gp_errmsg(), "adapters.safetensors") != NULL);
    }
    gp_ctx_free(c);
    gp_adapter_free(a);
    gp_model_free(a_m), gp_model_free(b_m);
    free(dir), free(qdir);
}
