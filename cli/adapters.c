/* adapters.c — the CLI's --adapter DIR[:SCALE] flag (repeatable): parsed into a list, loaded after the model
 * (gp_adapter_load) and set on a context (gp_ctx_set_adapters).  Shared by generate, chat, bench and serve. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_adapter_flag(int argc, char **argv, int *i, cli_adapters *a) {
    if (strcmp(argv[*i], "--adapter")) return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    if (a->n == CLI_MAX_ADAPTERS) {
        fprintf(stderr, "%s: at most %d --adapter\n", cli_prog, CLI_MAX_ADAPTERS);
        return -1;
    }
    /* DIR:SCALE when the part after the last ':' is a number, else the whole value is the folder */
    const char *colon = strrchr(v, ':');
    double scale = 1.0;
    char *end = NULL;
    if (colon && colon[1]) scale = strtod(colon + 1, &end);
    size_t len = colon && colon[1] && end && !*end ? (size_t)(colon - v) : strlen(v);
    if (len == strlen(v)) scale = 1.0;
    if (len == 0 || len >= sizeof a->dir[0] || !(scale > -1e6 && scale < 1e6)) {
        fprintf(stderr, "%s: --adapter '%s': expected DIR or DIR:SCALE\n", cli_prog, v);
        return -1;
    }
    memcpy(a->dir[a->n], v, len);
    a->dir[a->n][len] = 0;
    a->scale[a->n++] = (float)scale;
    return 1;
}

int cli_adapters_load(const gp_model *m, cli_adapters *a) {
    for (int k = 0; k < a->n; k++)
        if (gp_adapter_load(m, a->dir[k], &a->loaded[k]) != GP_OK) {
            fprintf(stderr, "%s: --adapter %s: %s\n", cli_prog, a->dir[k], gp_errmsg());
            return -1;
        }
    return 0;
}

int cli_adapters_set(gp_ctx *c, const cli_adapters *a) {
    if (!a->n) return 0;
    if (gp_ctx_set_adapters(c, a->loaded, a->scale, a->n) != GP_OK) {
        fprintf(stderr, "%s: --adapter: %s\n", cli_prog, gp_errmsg());
        return -1;
    }
    return 0;
}

void cli_adapters_free(cli_adapters *a) {
    for (int k = 0; k < a->n; k++) gp_adapter_free(a->loaded[k]);
    memset(a->loaded, 0, sizeof a->loaded);
}
