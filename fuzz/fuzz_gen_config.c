/* fuzz_gen_config.c — libFuzzer target: any bytes as generation_config.json beside the embedded model's config and
 * weights.  Loading fails with a message, or gives a config that gp_gen_config_validate checks without crashing. */
#include "fuzz_common.h"

#include <limits.h>

static char g_dir[PATH_MAX];

static void setup(void) {
    if (g_dir[0]) return;
    char root[PATH_MAX], src[PATH_MAX + 64], dst[PATH_MAX + 64];
    if (!getcwd(root, sizeof root)) abort();
    snprintf(g_dir, sizeof g_dir, "%s/gen", fz_dir());
    mkdir(g_dir, 0700);
    static const char *files[] = {"config.json", "model.safetensors"};
    for (int k = 0; k < 2; k++) {
        snprintf(src, sizeof src, "%s/" FZ_MODEL "/%s", root, files[k]);
        snprintf(dst, sizeof dst, "%s/%s", g_dir, files[k]);
        unlink(dst);
        if (symlink(src, dst) != 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/generation_config.json", g_dir);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    gp_model *m = NULL;
    if (gp_model_load(g_dir, &mp, &m) != GP_OK) {
        FZ_CHECK(m == NULL && gp_errmsg()[0] != 0);
        return 0;
    }
    gp_gen_config g = gp_model_gen_config(m);
    (void)gp_gen_config_validate(&g, gp_model_n_vocab(m)); /* ids outside the vocabulary: a message, no crash */
    int32_t eos[GP_MAX_EOS];
    FZ_CHECK(gp_model_eos_ids(m, eos, GP_MAX_EOS) >= 0);
    gp_model_free(m);
    return 0;
}
