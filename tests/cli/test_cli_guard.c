/* test_cli_guard.c — generate's knobs from issue 16: --max-tokens 0 / negative are errors; --mlock pins the weights
 * (as root) and is refused naming RLIMIT_MEMLOCK for an unprivileged user with a zero limit; --steer-warmup N leaves
 * the first N steps unsteered (equal to the base for the prompt's first token, different afterwards);
 * --resample-on-suspect reports its fields; the rotating cache's keep defaults to mlx-lm's 4. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(cli_generate_max_tokens_zero_is_an_error) {
    char cmd[1024], *out = NULL;
    const char *bad[] = {"0", "-3"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s generate --prompt x --max-tokens %s", fx_bin(), bad[i]);
        CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
        CHECK(out && strstr(out, "--max-tokens"));
        free(out);
    }
}

TEST(cli_generate_mlock) {
    char cmd[2048], *out = NULL;
    if (geteuid() == 0) {
        snprintf(cmd, sizeof cmd, "generate --prompt-ids 1,450 --max-tokens 3 --temp 0 --mlock --format json");
        cJSON *j = fx_run_json(cmd);
        CHECK(j && cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) == 3);
        cJSON_Delete(j);
    }
    /* an unprivileged user with RLIMIT_MEMLOCK 0 */
    if (system("command -v prlimit >/dev/null && command -v setpriv >/dev/null") != 0 || geteuid() != 0) {
        NOTE("prlimit/setpriv or root unavailable: the refusal is not exercised");
        return;
    }
    char bin[1024];
    if (!realpath(fx_bin(), bin)) return;
    snprintf(cmd, sizeof cmd, "cd / && prlimit --memlock=0:0 setpriv --reuid=65534 --regid=65534 --clear-groups "
             "--inh-caps=-all '%s' generate --prompt-ids 1,450 --max-tokens 2 --mlock", bin);
    int rc = fx_run(cmd, 1, &out);
    if (out && strstr(out, "loading the model")) NOTE("the model is not readable by nobody: %s", out);
    else {
        CHECK_EQ_INT(rc, 1);
        CHECK(out && strstr(out, "RLIMIT_MEMLOCK") && strstr(out, "mlock"));
    }
    free(out);
}

static cJSON *gen(const char *extra) {
    char args[2048];
    snprintf(args, sizeof args, "generate --prompt-ids 1,4205,16334,20084,28747,13 --max-tokens 12 --temp 0 "
             "--format json %s", extra);
    return fx_run_json(args);
}

TEST(cli_generate_steer_warmup_and_resample) {
    char *dir = gp_test_fixture("models/shakespeare-llama");
    if (!dir) return;
    char vec[] = "/tmp/gp_vec_XXXXXX";
    int fd = mkstemp(vec);
    REQUIRE(fd >= 0);
    float v[144];
    for (int i = 0; i < 144; i++) v[i] = (i % 7) - 3.0f;
    CHECK(write(fd, v, sizeof v) == (ssize_t)sizeof v);
    close(fd);
    char extra[512];
    cJSON *base = gen("");
    snprintf(extra, sizeof extra, "--steer-vector %s --steer-layer 2 --steer-alpha 8 --steer-warmup 4", vec);
    cJSON *warm = gen(extra);
    snprintf(extra, sizeof extra, "--steer-vector %s --steer-layer 2 --steer-alpha 8", vec);
    cJSON *full = gen(extra);
    REQUIRE(base && warm && full);
    int32_t *b = NULL, *w = NULL, *f = NULL;
    int nb = fx_int_array(cJSON_GetObjectItem(base, "tokens"), &b);
    int nw = fx_int_array(cJSON_GetObjectItem(warm, "tokens"), &w);
    int nf = fx_int_array(cJSON_GetObjectItem(full, "tokens"), &f);
    /* steps 0..3 unsteered: the first 4 tokens (chosen from the prefill and 3 decodes) equal the base's */
    CHECK(nb == 12 && nw == 12 && nf == 12 && !memcmp(b, w, 4 * sizeof *b));
    CHECK(fx_first_diff(w, nw, b, nb) >= 0);           /* then steered */
    CHECK(fx_first_diff(f, nf, b, nb) >= 0);           /* the steered variant does not reproduce the base */
    NOTE("warmup 4 first differs from the base at token %d, constant steering at %d", fx_first_diff(w, nw, b, nb),
         fx_first_diff(f, nf, b, nb));
    free(b), free(w), free(f);
    cJSON_Delete(base), cJSON_Delete(warm), cJSON_Delete(full);
    cJSON *r = gen("--resample-on-suspect");
    CHECK(r && cJSON_IsBool(cJSON_GetObjectItem(r, "resampled")) && cJSON_GetObjectItem(r, "suspect_lines") &&
          cJSON_GetObjectItem(r, "lines"));
    cJSON_Delete(r);
    /* ramp and warmup on one hook: refused */
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s generate --prompt x --steer-vector %s --steer-layer 1 --steer-ramp 2 "
             "--steer-warmup 2", fx_bin(), vec);
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    free(out);
    remove(vec);
    free(dir);
}

TEST(ctx_rotating_keep_defaults_to_mlx_lm) {
    gp_ctx_params p = gp_ctx_default_params();
    CHECK_EQ_INT(p.keep, 4);
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s generate --help", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
    CHECK(out && strstr(out, "default 4, as mlx-lm") && strstr(out, "--steer-warmup") && strstr(out, "--mlock"));
    free(out);
}
