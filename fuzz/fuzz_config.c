/* fuzz_config.c — libFuzzer target: any bytes as config.json of a folder without weights.  gp_model_load must fail
 * with a message (never crash, never succeed without weights). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write("config.json", data, size);
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    gp_model *m = NULL;
    gp_status s = gp_model_load(fz_dir(), &mp, &m);
    FZ_CHECK(s != GP_OK && m == NULL);
    FZ_CHECK(gp_errmsg()[0] != 0);
    return 0;
}
