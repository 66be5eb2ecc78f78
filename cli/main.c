/* main.c — entry point of the genparity tool: dispatches to a subcommand and holds shared CLI helpers. */
#include "cli.h"
#include "util/util.h"

#include <cJSON.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "genparity %s — text generation with transformers parity\n"
            "\n"
            "usage: genparity <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate     generate text from a prompt (genparity generate --help)\n"
            "  tokenize     text to ids\n"
            "  detokenize   ids to text\n"
            "  steer-vector build a steering vector from two prompt lists\n"
            "  cache        build / inspect KV cache files\n"
            "  validate     steering validation harness (determinism, divergence, suspect lines, KL)\n"
            "  bench        llama-bench-style speed test (genparity bench --help)\n"
            "  make-model   write a random-weight model folder of a real shape (genparity make-model --help)\n"
            "  version      print the version\n",
            gp_version());
}

int cli_fail(const char *what) {
    fprintf(stderr, "genparity: %s: %s\n", what, gp_errmsg());
    return 1;
}

int cli_parse_ids(const char *s, int32_t **ids, int32_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *w = realloc(v, cap * sizeof *v);
            if (!w) {
                free(v);
                return -1;
            }
            v = w;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) {
            free(v);
            return -1;
        }
    }
    *ids = v;
    *n = (int32_t)k;
    return 0;
}

int cli_read_lines(const char *path, char ***lines) {
    char *text;
    *lines = NULL;
    if (gp_read_file(path, 64u << 20, &text, NULL) != GP_OK) return -1;
    int n = 0, cap = 16;
    char **v = malloc((size_t)cap * sizeof *v);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); v && line; line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len) continue;
        char *p = NULL;
        if (line[0] == '"') {
            cJSON *j = cJSON_Parse(line);
            if (cJSON_IsString(j)) p = strdup(j->valuestring);
            cJSON_Delete(j);
            if (!p) {
                gp_set_error(GP_ERR_FORMAT, "%s: line %d starts with '\"' but is not a JSON string", path, n + 1);
                cli_free_lines(v, n);
                free(text);
                return -1;
            }
        } else p = strdup(line);
        if (n == cap) {
            char **w = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!w) break;
            v = w;
        }
        v[n++] = p;
    }
    free(text);
    *lines = v;
    return n;
}

void cli_free_lines(char **lines, int n) {
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

int cli_path_beside_exe(const char *rel, char *buf, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    if ((size_t)snprintf(buf, cap, "%s/%s", exe, rel) >= cap) return -1;
    return access(buf, R_OK) == 0 ? 0 : -1;
}

const char *cli_default_model(void) {
    const char *e = getenv("GENPARITY_MODEL");
    if (e && *e) return e;
    /* the embedded model lives at <repo>/models/shakespeare-llama; the binary at <repo>/build/genparity */
    static char buf[PATH_MAX + 64];
    if (cli_path_beside_exe("../models/shakespeare-llama", buf, sizeof buf) == 0) return buf;
    return "models/shakespeare-llama";
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "steer-vector")) return cmd_steer_vector(argc - 1, argv + 1);
    if (!strcmp(cmd, "cache")) return cmd_cache(argc - 1, argv + 1);
    if (!strcmp(cmd, "validate")) return cmd_validate(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "make-model")) return cmd_make_model(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("genparity %s (backends: %s)\n", gp_version(), gp_backends());
        return 0;
    }
    fprintf(stderr, "genparity: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
