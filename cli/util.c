/* util.c — helpers shared by the CLI's commands: error printing, id lists, prompt files, JSON string output, the
 * default model folder. */
#include "cli.h"

#include <cJSON.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_fail(const char *what) {
    fprintf(stderr, "genparity: %s: %s\n", what, gp_errmsg());
    return 1;
}

int cli_parse_ids(const char *s, int32_t **ids, int32_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    for (const char *p = s; *p;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, ", ");
        char buf[24];
        int64_t x;
        if (len == 0 || len >= sizeof buf) goto bad;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (cli_to_i64(buf, &x) || x < 0 || x > INT32_MAX) goto bad;
        if (k == cap) {
            int32_t *w = realloc(v, (cap *= 2) * sizeof *v);
            if (!w) goto bad;
            v = w;
        }
        v[k++] = (int32_t)x;
        p += len;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) goto bad;
    }
    *ids = v;
    *n = (int32_t)k;
    return 0;
bad:
    free(v);
    return -1;
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
