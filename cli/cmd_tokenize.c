/* cmd_tokenize.c — `genparity tokenize` (text -> JSON array of ids, or one array per JSON-string line of stdin
 * with --jsonl) and `genparity detokenize` (comma-separated ids -> text). */
#include "cli.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_tokenize(FILE *f) {
    fprintf(f, "usage: genparity tokenize (--model DIR | --tokenizer FILE) [--add-special] (--text S | --jsonl)\n"
               "  prints the JSON array of ids; with --jsonl each stdin line is a JSON string and each stdout line\n"
               "  the JSON array of its ids\n");
}

static void usage_detokenize(FILE *f) {
    fprintf(f, "usage: genparity detokenize (--model DIR | --tokenizer FILE) --ids 1,2,3 [--skip-special]\n");
}

static int load(const char *model, const char *file, gp_tokenizer **t) {
    gp_status s = file ? gp_tokenizer_load(file, t) : gp_tokenizer_load_dir(model, t);
    return s == GP_OK ? 0 : cli_fail("loading the tokenizer");
}

static void print_ids(const int32_t *ids, int32_t n) {
    putchar('[');
    for (int32_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    puts("]");
}

static int encode_print(const gp_tokenizer *t, const char *s, size_t len, int add_special) {
    int32_t *ids, n;
    if (gp_tokenizer_encode(t, s, len, add_special, &ids, &n) != GP_OK) return cli_fail("encoding");
    print_ids(ids, n);
    gp_free(ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    int add_special = 0, jsonl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--model") && has_val) model = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has_val) file = argv[++i];
        else if (!strcmp(a, "--text") && has_val) text = argv[++i];
        else if (!strcmp(a, "--add-special")) add_special = 1;
        else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_tokenize(stdout);
            return 0;
        } else {
            fprintf(stderr, "genparity tokenize: unknown flag or missing value '%s'\n", a);
            usage_tokenize(stderr);
            return 2;
        }
    }
    if (!model && !file) return cli_missing("--model", "or --tokenizer");
    if (!text && !jsonl) return cli_missing("--text", "or --jsonl");
    if (model && file) return fprintf(stderr, "%s: give only one of --model or --tokenizer\n", cli_prog), 2;
    if (text && jsonl) return fprintf(stderr, "%s: give only one of --text or --jsonl\n", cli_prog), 2;
    gp_tokenizer *t;
    if (load(model, file, &t)) return 1;
    int rc = 0;
    if (text) rc = encode_print(t, text, strlen(text), add_special);
    else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        long lineno = 0;
        while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
            lineno++;
            cJSON *j = cJSON_ParseWithLength(line, (size_t)n);
            if (!cJSON_IsString(j)) {
                fprintf(stderr, "genparity tokenize: stdin line %ld is not a JSON string\n", lineno);
                rc = 1;
            } else {
                /* cJSON strings stop at an escaped NUL; such text is encoded up to it */
                rc = encode_print(t, j->valuestring, strlen(j->valuestring), add_special);
                fflush(stdout);
            }
            cJSON_Delete(j);
        }
        free(line);
    }
    gp_tokenizer_free(t);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *ids_s = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--model") && has_val) model = argv[++i];
        else if (!strcmp(a, "--tokenizer") && has_val) file = argv[++i];
        else if (!strcmp(a, "--ids") && has_val) ids_s = argv[++i];
        else if (!strcmp(a, "--skip-special")) skip = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_detokenize(stdout);
            return 0;
        } else {
            fprintf(stderr, "genparity detokenize: unknown flag or missing value '%s'\n", a);
            usage_detokenize(stderr);
            return 2;
        }
    }
    if (!model && !file) return cli_missing("--model", "or --tokenizer");
    if (!ids_s) return cli_missing("--ids", NULL);
    if (model && file) return fprintf(stderr, "%s: give only one of --model or --tokenizer\n", cli_prog), 2;
    int32_t *ids, n;
    if (cli_parse_ids(ids_s, &ids, &n) != 0) {
        fprintf(stderr, "genparity detokenize: --ids must be a comma-separated list of non-negative integers\n");
        return 2;
    }
    gp_tokenizer *t;
    if (load(model, file, &t)) {
        free(ids);
        return 1;
    }
    char *text;
    size_t len;
    int rc = 0;
    if (gp_tokenizer_decode(t, ids, n, skip, &text, &len) != GP_OK) rc = cli_fail("decoding");
    else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
        gp_free(text);
    }
    free(ids);
    gp_tokenizer_free(t);
    return rc;
}
