/* test_cli_bench.c — the contracts of `genparity make-model` (a folder that loads and runs, refused bad flags) and
 * `genparity bench` (its JSON fields, one row per model, the depth flag, refused bad flags).  Nothing here is timed. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs a shell command; returns its exit code and its stdout in *out (caller frees). */
static int run(const char *cmd, char **out) {
    char full[8192];
    snprintf(full, sizeof full, "%s 2>/dev/null", cmd);
    FILE *p = popen(full, "r");
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    if (!p || !buf) {
        free(buf);
        *out = NULL;
        return -1;
    }
    while ((k = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The exit code of a shell command whose output is not read. */
static int exit_of(const char *cmd) {
    char *out;
    const int rc = run(cmd, &out);
    free(out);
    return rc;
}

static const char *bin(void) {
    const char *b = getenv("GENPARITY_BIN");
    return b && *b ? b : "build/genparity";
}

TEST(cli_make_model_writes_a_loadable_folder) {
    char *dir = gp_test_tmpdir(), cmd[2048];
    char path[1024];
    snprintf(path, sizeof path, "%s/stories", dir);
    snprintf(cmd, sizeof cmd, "%s make-model --shape stories110m --dtype f16 --layers 1 -o %s", bin(), path);
    CHECK_EQ_INT(exit_of(cmd), 0);
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(path, &mp, &m), GP_OK);
    if (m) {
        CHECK_EQ_INT(gp_model_n_embd(m), 768);
        CHECK_EQ_INT(gp_model_n_layers(m), 1);
        CHECK_EQ_INT(gp_model_n_vocab(m), 32000);
        gp_ctx_params cp = gp_ctx_default_params();
        cp.n_ctx = 16;
        gp_ctx *c = NULL;
        CHECK_STATUS(gp_ctx_init(m, &cp, &c), GP_OK);
        int32_t ids[3] = {1, 500, 9000};
        float *lg = malloc(32000 * sizeof(float));
        CHECK_STATUS(gp_ctx_eval(c, ids, 3, NULL, lg), GP_OK);
        int finite = 1;
        for (int i = 0; i < 32000; i++) finite &= lg[i] == lg[i] && lg[i] < 1e30f && lg[i] > -1e30f;
        CHECK(finite);
        free(lg);
        gp_ctx_free(c);
    }
    gp_model_free(m);
    /* bad invocations exit 2 */
    snprintf(cmd, sizeof cmd, "%s make-model --shape gpt5 -o %s/x", bin(), dir);
    CHECK_EQ_INT(exit_of(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s make-model --shape qwen3-0.6b --dtype int4 -o %s/x", bin(), dir);
    CHECK_EQ_INT(exit_of(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s make-model --shape qwen3-0.6b", bin());
    CHECK_EQ_INT(exit_of(cmd), 2);
    free(dir);
}

TEST(cli_bench_json_has_one_row_per_model) {
    char *a = gp_test_fixture("models/tiny-llama"), *b = gp_test_fixture("models/tiny-qwen2");
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "%s bench --model %s --model %s -p 8 -n 4 -r 2 --threads 2 --format json --bandwidth-mib 8",
             bin(), a, b);
    CHECK_EQ_INT(run(cmd, &out), 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL);
    if (j) {
        const cJSON *ms = cJSON_GetObjectItem(j, "models");
        CHECK_EQ_INT(cJSON_GetArraySize(ms), 2);
        CHECK(cJSON_IsNumber(cJSON_GetObjectItem(j, "read_bandwidth_gb_s")));
        CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "simd")));
        const char *keys[] = {"load_s", "pp_tokens_per_s", "pp_sd", "tg_tokens_per_s", "tg_sd", "bandwidth_utilization",
                              "peak_memory_bytes", "decode_bytes_per_token"};
        const cJSON *m;
        cJSON_ArrayForEach(m, ms) {
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) CHECK(cJSON_IsNumber(cJSON_GetObjectItem(m, keys[k])));
            CHECK(cJSON_GetObjectItem(m, "pp_tokens_per_s")->valuedouble > 0);
            CHECK(cJSON_GetObjectItem(m, "tg_tokens_per_s")->valuedouble > 0);
            CHECK(cJSON_GetObjectItem(m, "decode_bytes_per_token")->valuedouble > 0);
        }
        cJSON_Delete(j);
    } else if (out) NOTE("output: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench -p 8", bin());
    CHECK_EQ_INT(exit_of(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s bench --model %s -r 0", bin(), a);
    CHECK_EQ_INT(exit_of(cmd), 2);
    free(a);
    free(b);
}

/* -d D: the tests run on a cache holding D tokens (the JSON says d, the table's columns "@ dD"); a negative or
 * non-numeric depth is refused. */
TEST(cli_bench_depth) {
    char *a = gp_test_fixture("models/tiny-llama");
    if (!a) return;
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd, "%s bench --model %s -p 4 -n 3 -d 6 -r 1 --threads 2 --format json --bandwidth-mib 8",
             bin(), a);
    CHECK_EQ_INT(run(cmd, &out), 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j != NULL);
    if (j) {
        CHECK_EQ_INT(cJSON_GetObjectItem(j, "d")->valueint, 6);
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0);
        CHECK(m && cJSON_GetObjectItem(m, "pp_tokens_per_s")->valuedouble > 0);
        CHECK(m && cJSON_GetObjectItem(m, "tg_tokens_per_s")->valuedouble > 0);
        cJSON_Delete(j);
    } else if (out) NOTE("output: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench --model %s -p 4 -n 3 -d 6 -r 1 --threads 2 --bandwidth-mib 8", bin(), a);
    CHECK_EQ_INT(run(cmd, &out), 0);
    CHECK(out && strstr(out, "pp4 @ d6 t/s") && strstr(out, "tg3 @ d6 t/s"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s bench --model %s -d -1", bin(), a);
    CHECK_EQ_INT(exit_of(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s bench --model %s -d deep", bin(), a);
    CHECK_EQ_INT(exit_of(cmd), 2);
    free(a);
}
