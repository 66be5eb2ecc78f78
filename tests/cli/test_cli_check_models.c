/* test_cli_check_models.c — `genparity check-models`: JSON has one row per model in order with every field (load
 * time, prompt / generation tokens/s, peak memory, suspect-line rate, outputs per prompt), a model that fails to load
 * is a row with its error while the others still run (exit 1), Markdown and HTML reports carry the table and, for
 * HTML, inline SVG bar charts.  Structure only: no timing is asserted. */
#include "fixtures.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(cli_check_models_reports) {
    char *a = gp_test_fixture("models/tiny-llama"), *b = gp_test_fixture("models/shakespeare-llama");
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s check-models --model '%s' --model /nonexistent/model --model '%s' --prompt Hello "
             "--prompt 'ROMEO:' --max-tokens 6 --temp 0 --format json", fx_bin(), a, b);
    int rc = fx_run(cmd, 0, &out);
    CHECK_EQ_INT(rc, 1); /* one model failed */
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    REQUIRE(j);
    const cJSON *models = cJSON_GetObjectItem(j, "models");
    REQUIRE(cJSON_GetArraySize(models) == 3);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "prompts")), 2);
    for (int i = 0; i < 3; i++) {
        const cJSON *r = cJSON_GetArrayItem(models, i);
        const char *fields[] = {"model", "ok", "error", "load_seconds", "prompt_tokens_per_s", "generation_tokens_per_s",
                                "peak_memory_bytes", "suspect_line_rate", "lines", "outputs"};
        for (size_t f = 0; f < sizeof fields / sizeof *fields; f++)
            if (!cJSON_GetObjectItem(r, fields[f])) {
                NOTE("row %d: field %s missing", i, fields[f]);
                gp_test_failed = 1;
            }
        int ok = cJSON_IsTrue(cJSON_GetObjectItem(r, "ok"));
        CHECK_EQ_INT(ok, i != 1);
        if (ok) {
            const cJSON *outs = cJSON_GetObjectItem(r, "outputs");
            CHECK_EQ_INT(cJSON_GetArraySize(outs), 2);
            CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(outs, 0), "n_tokens")->valueint == 6);
            CHECK(cJSON_GetObjectItem(r, "peak_memory_bytes")->valuedouble > 0);
        } else {
            const cJSON *e = cJSON_GetObjectItem(r, "error");
            CHECK(cJSON_IsString(e) && strstr(e->valuestring, "/nonexistent/model"));
        }
    }
    cJSON_Delete(j);
    free(out);
    /* Markdown: the table header and one row per model; HTML: a page with two inline SVG charts */
    snprintf(cmd, sizeof cmd, "%s check-models --model '%s' --model /nonexistent/model --prompt Hello --max-tokens 3",
             fx_bin(), a);
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 1);
    CHECK(out && strstr(out, "| model | status |") && strstr(out, "failed:") && strstr(out, "| ok |"));
    free(out);
    char html[] = "/tmp/gp_check_XXXXXX";
    int fd = mkstemp(html);
    REQUIRE(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s check-models --model '%s' --prompt Hello --max-tokens 3 --format html -o %s",
             fx_bin(), a, html);
    CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
    free(out);
    char *page = NULL;
    snprintf(cmd, sizeof cmd, "cat %s", html);
    fx_run(cmd, 0, &page);
    CHECK(page && strstr(page, "<!DOCTYPE html>") && strstr(page, "<svg") && strstr(page, "generation tokens/s") &&
          strstr(page, "peak memory") && !strstr(page, "<script") && !strstr(page, "http://") == 0);
    free(page);
    remove(html);
    /* usage errors */
    snprintf(cmd, sizeof cmd, "%s check-models --prompt x", fx_bin());
    CHECK_EQ_INT(fx_run(cmd, 1, &out), 2);
    free(out);
    free(a);
    free(b);
}
