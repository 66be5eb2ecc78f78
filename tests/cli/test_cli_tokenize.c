/* test_cli_tokenize.c — runs "$GENPARITY_BIN tokenize / detokenize" on the fixture tokenizers and checks their
 * output against references/tokenizers.json: every row through --jsonl (with and without --add-special), and a
 * sample of rows through --text and detokenize --ids. */
#include "test.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static char *slurp_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* Runs cmd and returns its whole stdout (malloc'd) and exit status. */
static char *run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (len + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[len] = 0;
    *status = pclose(p);
    return out;
}

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

static const char *bin(void) {
    const char *b = getenv("GENPARITY_BIN");
    return b && *b ? b : "build/genparity";
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
    char *reftext = slurp_file(refp);
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
        snprintf(cmd, sizeof cmd, "%s tokenize --model %s %s --jsonl < %s/in.jsonl", bin(), qdir,
                 special ? "--add-special" : "", tmp);
        int status;
        char *out = run(cmd, &status);
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
        snprintf(cmd, sizeof cmd, "%s tokenize --model %s --add-special --text %s", bin(), qdir, qt);
        free(qt);
        int status;
        char *out = run(cmd, &status);
        cJSON *got = out ? cJSON_Parse(out) : NULL;
        CHECK(got && same_array(got, cJSON_GetObjectItemCaseSensitive(r, "ids_with_special")));
        cJSON_Delete(got);
        free(out);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids");
        size_t k = snprintf(cmd, sizeof cmd, "%s detokenize --model %s --ids '", bin(), qdir);
        for (const cJSON *x = ids->child; x && k < sizeof cmd - 32; x = x->next)
            k += (size_t)snprintf(cmd + k, sizeof cmd - k, "%s%d", x == ids->child ? "" : ",", x->valueint);
        snprintf(cmd + k, sizeof cmd - k, "'");
        if (!ids->child) continue; /* --ids '' decodes nothing; covered by the library tests */
        out = run(cmd, &status);
        CHECK_EQ_INT(status, 0);
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
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s tokenize --model /nonexistent-dir --text hi 2>&1", bin());
    char *out = run(cmd, &status);
    CHECK(status != 0);
    CHECK(out && strstr(out, "tokenizer.json"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s detokenize --tokenizer x.json --ids 1,x 2>&1", bin());
    out = run(cmd, &status);
    CHECK(status != 0);
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize --text hi 2>&1", bin());
    out = run(cmd, &status);
    CHECK(status != 0);
    CHECK(out && strstr(out, "usage"));
    free(out);
}
