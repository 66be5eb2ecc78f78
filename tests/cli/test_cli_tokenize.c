/* test_cli_tokenize.c — runs "$GENPARITY_BIN tokenize / detokenize" on the fixture tokenizers and checks their
 * output against references/tokenizers.json: every row through --jsonl (with and without --add-special), and a
 * sample of rows through --text and detokenize --ids. */
#include "fixtures.h"
#include "test.h"
#include "util/util.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Shell-quotes s into a malloc'd string. */
static char *shq(const char *s) {
    size_t n = strlen(s);
    char *q = malloc(4 * n + 3), *o = q;
    *o++ = '\'';
    for (; *s; s++) {
        if (*s == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else *o++ = *s;
    }
    *o++ = '\'';
    *o = 0;
    return q;
}

static int same_array(const cJSON *a, const cJSON *b) {
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
    for (const cJSON *x = a->child, *y = b->child; x && y; x = x->next, y = y->next)
        if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y) || x->valueint != y->valueint) return 0;
    return 1;
}

static void check(const char *name) {
    char *refp = gp_test_fixture("references/tokenizers.json");
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s", name);
    char *dir = gp_test_fixture(rel);
    if (!refp || !dir) {
        free(refp);
        free(dir);
        return;
    }
    char *reftext = NULL;
    gp_read_file(refp, 64u << 20, &reftext, NULL);
    cJSON *refs = reftext ? cJSON_Parse(reftext) : NULL;
    free(reftext);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(refs, name);
    REQUIRE(cJSON_IsArray(rows));
    char *tmp = gp_test_tmpdir();
    char in_path[512];
    snprintf(in_path, sizeof in_path, "%s/in.jsonl", tmp);
    FILE *f = fopen(in_path, "w");
    REQUIRE(f);
    for (const cJSON *r = rows->child; r; r = r->next) {
        char *line = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(r, "text"));
        fprintf(f, "%s\n", line);
        free(line);
    }
    fclose(f);
    char *qdir = shq(dir);
    for (int special = 0; special < 2; special++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s tokenize --model %s %s --jsonl < %s/in.jsonl", fx_bin(), qdir,
                 special ? "--add-special" : "", tmp);
        char *out;
        int status = fx_run(cmd, 0, &out);
        CHECK_EQ_INT(status, 0);
        int row = 0, bad = 0;
        char *save = NULL;
        char *line = out ? strtok_r(out, "\n", &save) : NULL;
        for (const cJSON *r = rows->child; r; r = r->next, row++) {
            cJSON *got = line ? cJSON_Parse(line) : NULL;
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(r, special ? "ids_with_special" : "ids");
            if (!got || !same_array(got, want)) {
                if (!bad++)
                    printf("    %s row %d (\"%s\"): got %s\n", name, row,
                           cJSON_GetObjectItemCaseSensitive(r, "text")->valuestring, line ? line : "(no line)");
            }
            cJSON_Delete(got);
            line = strtok_r(NULL, "\n", &save);
        }
        if (bad) printf("    %s: %d rows differ (special=%d)\n", name, bad, special);
        CHECK_EQ_INT(bad, 0);
        CHECK(line == NULL);
        free(out);
    }
    /* a sample through --text and detokenize --ids */
    int row = 0;
    for (const cJSON *r = rows->child; r; r = r->next, row++) {
        if (row % 25) continue;
        const char *text = cJSON_GetObjectItemCaseSensitive(r, "text")->valuestring;
        char *qt = shq(text);
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "%s tokenize --model %s --add-special --text %s", fx_bin(), qdir, qt);
        free(qt);
        char *out;
        fx_run(cmd, 0, &out);
        cJSON *got = out ? cJSON_Parse(out) : NULL;
        CHECK(got && same_array(got, cJSON_GetObjectItemCaseSensitive(r, "ids_with_special")));
        cJSON_Delete(got);
        free(out);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids");
        size_t k = snprintf(cmd, sizeof cmd, "%s detokenize --model %s --ids '", fx_bin(), qdir);
        for (const cJSON *x = ids->child; x && k < sizeof cmd - 32; x = x->next)
            k += (size_t)snprintf(cmd + k, sizeof cmd - k, "%s%d", x == ids->child ? "" : ",", x->valueint);
        snprintf(cmd + k, sizeof cmd - k, "'");
        if (!ids->child) continue; /* --ids '' decodes nothing; covered by the library tests */
        CHECK_EQ_INT(fx_run(cmd, 0, &out), 0);
        const char *want = cJSON_GetObjectItemCaseSensitive(r, "decoded")->valuestring;
        size_t wl = strlen(want);
        if (!out || strncmp(out, want, wl) != 0 || strcmp(out + wl, "\n") != 0) {
            printf("    %s detokenize row %d: got \"%s\" want \"%s\\n\"\n", name, row, out ? out : "", want);
            gp_test_failed = 1;
        }
        free(out);
    }
    free(qdir);
    free(tmp);
    free(refp);
    free(dir);
    cJSON_Delete(refs);
}

TEST(cli_tokenize_llama2) { check("llama2"); }
TEST(cli_tokenize_llama3) { check("llama3"); }
TEST(cli_tokenize_qwen3) { check("qwen3"); }

TEST(cli_tokenize_errors) {
    int status;
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd, "%s tokenize --model /nonexistent-dir --text hi", fx_bin());
    status = fx_run(cmd, 1, &out);
    CHECK(status != 0);
    CHECK(out && strstr(out, "tokenizer.json"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s detokenize --tokenizer x.json --ids 1,x", fx_bin());
    status = fx_run(cmd, 1, &out);
    CHECK(status != 0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize --text hi", fx_bin());
    status = fx_run(cmd, 1, &out);
    CHECK(status == 2);
    CHECK(out && strstr(out, "--model")); /* the missing flag is named */
    free(out);
}
