/* test_cli_batch.c — `genparity generate --prompts-file`: one JSON result per line in input order (prompts as id
 * arrays and as JSON strings, mixed lengths, batches of 2 so a batch boundary is crossed), each equal to the
 * single-prompt run; a malformed line is refused naming it. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

TEST(cli_generate_prompts_file_matches_single_runs) {
    char *dir = gp_test_fixture("models/shakespeare-llama");
    if (!dir) return;
    char path[] = "/tmp/gp_prompts_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const char *lines[] = {"[1, 4205, 16334, 20084, 28747, 13]", "\"JULIET:\\nO Romeo\"", "[1, 450]"};
    const char *single[] = {"--prompt-ids 1,4205,16334,20084,28747,13", "--prompt 'JULIET:\nO Romeo'",
                            "--prompt-ids 1,450"};
    FILE *f = fdopen(fd, "w");
    REQUIRE(f);
    fprintf(f, "%s\n\n%s\n%s\n", lines[0], lines[1], lines[2]);
    fclose(f);
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompts-file %s --batch-size 2 --max-tokens 12 --temp 0 "
             "--format json", fx_bin(), dir, path);
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
    REQUIRE(out);
    char *save = NULL;
    int k = 0;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
        cJSON *j = cJSON_Parse(line);
        CHECK(j && cJSON_GetObjectItem(j, "tokens") && cJSON_GetObjectItem(j, "finish_reason"));
        if (k < 3 && j) {
            char args[4096];
            snprintf(args, sizeof args, "generate --model '%s' %s --max-tokens 12 --temp 0 --format json", dir,
                     single[k]);
            cJSON *s = fx_run_json(args);
            int32_t *a = NULL, *b = NULL;
            int na = fx_int_array(cJSON_GetObjectItem(j, "tokens"), &a);
            int nb = s ? fx_int_array(cJSON_GetObjectItem(s, "tokens"), &b) : -1;
            if (fx_first_diff(a, na, b, nb) >= 0) {
                NOTE("prompt %d: batch tokens differ from the single run", k);
                gp_test_failed = 1;
            }
            const cJSON *ta = cJSON_GetObjectItem(j, "text"), *tb = s ? cJSON_GetObjectItem(s, "text") : NULL;
            CHECK(cJSON_IsString(ta) && cJSON_IsString(tb) && !strcmp(ta->valuestring, tb->valuestring));
            free(a);
            free(b);
            cJSON_Delete(s);
        }
        cJSON_Delete(j);
    }
    CHECK_EQ_INT(k, 3);
    free(out);
    /* a malformed line is named */
    f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "[1, 2]\nnot json\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s generate --model '%s' --prompts-file %s --max-tokens 2", fx_bin(), dir, path);
    int rc = fx_run(cmd, 1, &out);
    CHECK_EQ_INT(rc, 2);
    CHECK(out && strstr(out, "line 2"));
    free(out);
    remove(path);
    free(dir);
}
