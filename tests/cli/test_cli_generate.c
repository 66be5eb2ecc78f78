/* test_cli_generate.c — the `genparity generate` contract other tools rely on: --format json fields, greedy tokens
 * equal to transformers' for every fixture model, EOS from generation_config.json (else config.json), --ignore-eos,
 * and clear errors with exit codes for bad invocations. */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <limits.h>

TEST(cli_generate_json_matches_transformers_greedy) {
    for (int mi = 0; mi < GP_N_FIXTURE_MODELS; mi++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s", GP_FIXTURE_MODELS[mi]);
        char *dir = gp_test_fixture(rel);
        if (!dir) return;
        snprintf(rel, sizeof rel, "models/%s/reference.json", GP_FIXTURE_MODELS[mi]);
        char *rj = gp_test_fixture(rel);
        cJSON *ref = rj ? fx_read_json(rj) : NULL;
        const cJSON *p0 = ref ? cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0) : NULL;
        if (p0) {
            int32_t *ids, *want;
            int n = fx_int_array(cJSON_GetObjectItem(p0, "ids"), &ids);
            int nw = fx_int_array(cJSON_GetObjectItem(p0, "greedy_48"), &want);
            char idbuf[4096], cmd[8192];
            fx_join_ids(ids, n, idbuf, sizeof idbuf);
            snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json",
                     fx_bin(), dir, idbuf);
            char *out;
            int rc = fx_run(cmd, 0, &out);
            CHECK_EQ_INT(rc, 0);
            cJSON *j = out ? cJSON_Parse(out) : NULL;
            if (!j) {
                NOTE("%s: output is not one JSON object: %s", GP_FIXTURE_MODELS[mi], out ? out : "(none)");
                gp_test_failed = 1;
            } else {
                const char *fields[] = {"prompt_ids", "tokens", "text", "finish_reason", "prompt_tokens_per_s",
                                        "generation_tokens_per_s", "peak_memory_bytes"};
                for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
                    if (!cJSON_GetObjectItem(j, fields[f])) {
                        NOTE("%s: field '%s' missing", GP_FIXTURE_MODELS[mi], fields[f]);
                        gp_test_failed = 1;
                    }
                int32_t *got, *pids;
                int ng = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &got);
                int np = fx_int_array(cJSON_GetObjectItem(j, "prompt_ids"), &pids);
                CHECK(fx_first_diff(pids, np, ids, n) < 0);
                int d = fx_first_diff(got, ng, want, nw);
                if (d >= 0) {
                    NOTE("%s: tokens differ from greedy_48 at %d", GP_FIXTURE_MODELS[mi], d);
                    gp_test_failed = 1;
                }
                const cJSON *fr = cJSON_GetObjectItem(j, "finish_reason");
                CHECK(cJSON_IsString(fr) && !strcmp(fr->valuestring, nw == 48 ? "length" : "stop"));
                const cJSON *pm = cJSON_GetObjectItem(j, "peak_memory_bytes");
                CHECK(cJSON_IsNumber(pm) && pm->valuedouble > 0);
                free(got);
                free(pids);
                cJSON_Delete(j);
            }
            free(out);
            free(ids);
            free(want);
        }
        cJSON_Delete(ref);
        free(rj);
        free(dir);
    }
}

/* Copies a fixture model's files into a temp folder, rewriting one file's text with `from` -> `to` (NULL: as is)
 * and dropping generation_config.json when drop_gen. */
static char *copy_model(const char *name, const char *file, const char *from, const char *to, int drop_gen) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *rsrc = gp_test_fixture(rel);
    if (!rsrc) return NULL;
    char *src = realpath(rsrc, NULL);
    free(rsrc);
    if (!src) return NULL;
    char *dir = gp_test_tmpdir();
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                           "tokenizer_config.json"};
    for (int i = 0; i < 5; i++) {
        if (drop_gen && !strcmp(files[i], "generation_config.json")) continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        if (file && !strcmp(file, files[i])) {
            char *text;
            if (gp_read_file(a, 1 << 20, &text, NULL) != GP_OK) continue;
            char *at = strstr(text, from);
            FILE *f = fopen(b, "w");
            if (at && f) {
                fwrite(text, 1, (size_t)(at - text), f);
                fputs(to, f);
                fputs(at + strlen(from), f);
            }
            if (f) fclose(f);
            if (!at) NOTE("'%s' not found in %s", from, a);
            free(text);
        } else if (symlink(a, b) != 0) {
            NOTE("symlink %s failed", b);
        }
    }
    free(src);
    return dir;
}

/* The first greedy token of tiny-qwen3's prompt 0 becomes the EOS id: generation must stop right after it. */
static void check_eos_stop(int via_config_json) {
    char *rj = gp_test_fixture("models/tiny-qwen3/reference.json");
    if (!rj) return;
    cJSON *ref = fx_read_json(rj);
    free(rj);
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "prompts"), 0);
    int32_t *ids, *want;
    int n = fx_int_array(cJSON_GetObjectItem(p0, "ids"), &ids);
    fx_int_array(cJSON_GetObjectItem(p0, "greedy_48"), &want);
    char eos[64];
    snprintf(eos, sizeof eos, "\"eos_token_id\": %d", want[2]);
    char *dir = via_config_json ? copy_model("tiny-qwen3", "config.json", "\"eos_token_id\": 151645", eos, 1)
                                : copy_model("tiny-qwen3", "generation_config.json", "\"eos_token_id\": 151645", eos, 0);
    if (dir) {
        char idbuf[1024], cmd[4096], *out;
        fx_join_ids(ids, n, idbuf, sizeof idbuf);
        snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompt-ids %s --max-tokens 48 --temp 0 --format json",
                 fx_bin(), dir, idbuf);
        CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
        cJSON *j = out ? cJSON_Parse(out) : NULL;
        REQUIRE(j);
        int32_t *got;
        int ng = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &got);
        CHECK_EQ_INT(ng, 3);
        CHECK(fx_first_diff(got, ng, want, 3) < 0);
        CHECK_STR(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "stop");
        free(got);
        cJSON_Delete(j);
        free(out);
        strcat(cmd, " --ignore-eos");
        CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
        j = out ? cJSON_Parse(out) : NULL;
        REQUIRE(j);
        ng = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &got);
        CHECK_EQ_INT(ng, 48);
        CHECK_STR(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
        free(got);
        cJSON_Delete(j);
        free(out);
        free(dir);
    }
    free(ids);
    free(want);
    cJSON_Delete(ref);
}

TEST(cli_generate_stops_at_generation_config_eos) { check_eos_stop(0); }
TEST(cli_generate_stops_at_config_json_eos_without_generation_config) { check_eos_stop(1); }

TEST(cli_generate_bad_invocations) {
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd, "%s generate --model /nonexistent/model --prompt-ids 1,2", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 1);
    CHECK(out && strstr(out, "/nonexistent/model") && strstr(out, "config.json"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate --prompt-ids 1,x,3", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    CHECK(out && strstr(out, "--prompt-ids"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate --max-tokens -4 --prompt-ids 1", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd, "%s generate --bogus 1", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    CHECK(out && strstr(out, "--bogus"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s nosuchcommand", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    free(out);
    char *dir = gp_test_fixture("models/tiny-qwen3");
    if (dir) {
        snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompt-ids 1,999999999 --format json", fx_bin(), dir);
        CHECK_EQ_INT(fx_run(cmd, 1, &out), 1);
        CHECK(out && strstr(out, "999999999") && strstr(out, "vocabulary"));
        free(out);
        free(dir);
    }
}
