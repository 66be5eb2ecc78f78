/* test_cuda_select.c — choosing the device, in every build: gp_backends() names what is built in; a context asked
 * for GP_DEVICE_CUDA without the CUDA backend, or without a usable GPU/driver, fails with GP_ERR_UNSUPPORTED and a
 * message saying why (never a crash); an unknown device is GP_ERR_INVALID_ARG; with a GPU, a synthetic float32
 * model's logits on CUDA match the CPU backend within 1e-4.  gp_device_copy_bandwidth: bad arguments and the CPU
 * refused by name, no CUDA said so, a GPU's copy bandwidth positive.  The CLI: --version lists the backends, --device
 * takes cpu|cuda (anything else is exit 2) and an unusable cuda is exit 1 with the library's reason. */
#include "fixtures.h"
#include "synth.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static gp_model *synth(void) {
    char *dir = gp_test_tmpdir();
    if (!dir || synth_model(dir, synth_llama_config(NULL, NULL), NULL, NULL)) {
        printf("    could not write the synthetic model\n");
        gp_test_failed = 1;
        free(dir);
        return NULL;
    }
    gp_model *m = NULL;
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    CHECK_STATUS(gp_model_load(dir, &mp, &m), GP_OK);
    free(dir);
    return m;
}

TEST(cuda_select_copy_bandwidth) {
    double bw = -1;
    CHECK_STATUS(gp_device_copy_bandwidth(GP_DEVICE_CUDA, 64, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_device_copy_bandwidth(GP_DEVICE_CPU, 64, &bw), GP_ERR_UNSUPPORTED);
    CHECK(strstr(gp_errmsg(), "gp_device_copy_bandwidth: device 0") != NULL);
    CHECK(bw == 0);
    CHECK_STATUS(gp_device_copy_bandwidth(GP_DEVICE_CUDA, 0, &bw), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_device_copy_bandwidth(GP_DEVICE_CUDA, 1u << 20, &bw), GP_ERR_INVALID_ARG);
    const gp_status s = gp_device_copy_bandwidth(GP_DEVICE_CUDA, 256, &bw);
    NOTE("cuda copy bandwidth (256 MiB): %s, %.1f GB/s%s%s", gp_status_str(s), bw / 1e9, s ? ": " : "",
         s ? gp_errmsg() : "");
    if (s) {
        CHECK_EQ_INT(s, GP_ERR_UNSUPPORTED);
        CHECK(strstr(gp_errmsg(), "gp_device_copy_bandwidth: ") != NULL);
        CHECK(bw == 0);
    } else CHECK(bw > 1e9); /* any GPU copies faster than 1 GB/s */
}

TEST(cuda_select_device_error_or_cpu_parity) {
    gp_model *m = synth();
    if (!m) return;
    gp_ctx_params p = gp_ctx_default_params();
    gp_ctx *c = NULL;
    p.device = 7;
    CHECK_STATUS(gp_ctx_init(m, &p, &c), GP_ERR_INVALID_ARG);
    p.device = GP_DEVICE_CUDA;
    gp_status s = gp_ctx_init(m, &p, &c);
    const int built = strstr(gp_backends(), "cuda") != NULL;
    NOTE("backends: %s; GP_DEVICE_CUDA -> %s: %s", gp_backends(), gp_status_str(s), s ? gp_errmsg() : "ok");
    if (!built) {
        CHECK_EQ_INT(s, GP_ERR_UNSUPPORTED);
        CHECK(strstr(gp_errmsg(), "make cuda") != NULL);
    } else if (s != GP_OK) { /* built with CUDA, no usable device here */
        CHECK_EQ_INT(s, GP_ERR_UNSUPPORTED);
        CHECK(strstr(gp_errmsg(), "device cuda") != NULL);
    } else {
        gp_ctx *cpu = NULL;
        gp_ctx_params pc = gp_ctx_default_params();
        CHECK_STATUS(gp_ctx_init(m, &pc, &cpu), GP_OK);
        const int32_t ids[] = {1, 5, 9, 33, 2, 60, 7}, V = gp_model_n_vocab(m);
        float *a = malloc((size_t)7 * V * sizeof(float)), *b = malloc((size_t)7 * V * sizeof(float));
        gp_eval_opts o = {.all_logits = 1};
        CHECK_STATUS(gp_ctx_eval(c, ids, 7, &o, a), GP_OK);
        CHECK_STATUS(gp_ctx_eval(cpu, ids, 7, &o, b), GP_OK);
        double d = fx_max_abs_diff(a, b, (size_t)7 * V);
        NOTE("synthetic f32 model, 7 positions: cuda vs cpu logits max|Δ| = %.3g (tol 1e-4)", d);
        CHECK(d <= 1e-4);
        free(a);
        free(b);
        gp_ctx_free(cpu);
    }
    gp_ctx_free(c);
    gp_model_free(m);
}

TEST(cuda_select_cli_device_flag) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s --version", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
    CHECK(out && strstr(out, "backends: cpu") != NULL);
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate --device tpu --prompt-ids 1,2 --max-tokens 2", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    CHECK(out && strstr(out, "--device must be cpu or cuda") != NULL);
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate --device cuda --prompt-ids 1,2 --max-tokens 2 --temp 0", fx_bin());
    int rc = fx_run(cmd, 1, &out);
    if (strstr(gp_backends(), "cuda") == NULL) {
        CHECK_EQ_INT(rc, 1);
        CHECK(out && strstr(out, "make cuda") != NULL);
    } else CHECK(rc == 0 || (rc == 1 && out && strstr(out, "device cuda") != NULL));
    NOTE("generate --device cuda: exit %d: %.200s", rc, out ? out : "");
    free(out);
}
