/* cmd_cache.c — `genparity cache build` (prefill a prompt and save its KV cache to a file) and `genparity cache
 * inspect` (print what a cache file holds). */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f, "usage: genparity cache build --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --turns FILE) -o FILE\n"
               "                             [context flags]\n"
               "         --turns FILE: one turn per line (JSON string lines may hold newlines); the cache holds the\n"
               "         turns joined in order, each followed by a newline, encoded as one prompt\n"
               "       genparity cache inspect FILE [--format text|json]\n\n");
    cli_ctx_flags_help(f);
}

static int build(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = NULL, *prompt_ids = NULL, *out = NULL, *turns = NULL;
    gp_ctx_params cp = gp_ctx_default_params();
    for (int i = 1; i < argc; i++) {
        int r = cli_ctx_flag(argc, argv, &i, &cp);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "genparity cache build: unknown flag or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
        else if (!strcmp(a, "--turns")) turns = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else {
            fprintf(stderr, "genparity cache build: unknown flag %s\n", a);
            return 2;
        }
        i++;
    }
    if (!out) return cli_missing("-o", "the cache file to write");
    if ((prompt != NULL) + (prompt_ids != NULL) + (turns != NULL) != 1) {
        if (!prompt && !prompt_ids && !turns) return cli_missing("--prompt", "or --prompt-ids or --turns");
        fprintf(stderr, "%s: give only one of --prompt, --prompt-ids, --turns\n", cli_prog);
        return 2;
    }
    char *joined = NULL;
    if (turns) {
        char **lines;
        int nl = cli_read_lines(turns, &lines);
        if (nl <= 0) {
            if (nl == 0) fprintf(stderr, "genparity cache build: %s holds no turns\n", turns);
            return nl < 0 ? cli_fail("reading --turns") : 2;
        }
        size_t total = 1;
        for (int i = 0; i < nl; i++) total += strlen(lines[i]) + 1;
        joined = malloc(total);
        size_t k = 0;
        for (int i = 0; i < nl; i++) {
            size_t l = strlen(lines[i]);
            memcpy(joined + k, lines[i], l);
            k += l;
            joined[k++] = '\n';
        }
        joined[k] = 0;
        cli_free_lines(lines, nl);
        prompt = joined;
    }
    int32_t *ids = NULL, n = 0;
    if (prompt_ids && (cli_parse_ids(prompt_ids, &ids, &n) || n == 0)) {
        fprintf(stderr, "genparity cache build: --prompt-ids expects comma-separated ids\n");
        free(ids);
        free(joined);
        return 2;
    }
    gp_model *m = NULL;
    if (gp_model_load(model_dir ? model_dir : cli_default_model(), NULL, &m) != GP_OK) {
        free(ids);
        free(joined);
        return cli_fail("loading the model");
    }
    int rc = 1;
    gp_ctx *c = NULL;
    if (prompt) {
        const gp_tokenizer *tok = gp_model_tokenizer(m);
        if (!tok) {
            fprintf(stderr, "genparity cache build: the model has no tokenizer.json; use --prompt-ids\n");
            goto done;
        }
        if (gp_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n) != GP_OK) {
            cli_fail("encoding the prompt");
            goto done;
        }
    }
    if (gp_ctx_init(m, &cp, &c) != GP_OK) {
        cli_fail("creating the context");
        goto done;
    }
    if (gp_ctx_eval(c, ids, n, NULL, NULL) != GP_OK) {
        cli_fail("running the prompt");
        goto done;
    }
    if (gp_ctx_cache_save(c, out) != GP_OK) {
        cli_fail("saving the cache");
        goto done;
    }
    fprintf(stderr, "genparity cache build: %d tokens, %llu bytes of KV cache -> %s\n", n,
            (unsigned long long)gp_ctx_kv_bytes(c), out);
    rc = 0;
done:
    gp_ctx_free(c);
    gp_free(ids);
    gp_model_free(m);
    free(joined);
    return rc;
}

static int inspect(int argc, char **argv) {
    const char *path = NULL, *format = "text";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
        else if (!path) path = argv[i];
        else {
            help(stderr);
            return 2;
        }
    }
    if (!path) {
        help(stderr);
        return 2;
    }
    gp_st_set *st;
    if (gp_st_open_file(path, &st) != GP_OK) return cli_fail("reading the cache file");
    const char *fmt = gp_st_metadata(st, "format");
    if (!fmt || strcmp(fmt, "genparity.kvcache")) {
        fprintf(stderr, "genparity cache inspect: %s: not a genparity cache file (metadata 'format')\n", path);
        gp_st_close(st);
        return 1;
    }
    static const char *keys[] = {"version",     "name",          "architecture", "model_fingerprint",
                                 "tokenizer_hash", "n_past",     "n_layers",     "kvd",
                                 "n_ctx",       "max_kv_size",   "keep",         "kv_bits",
                                 "kv_group_size", "quantized_kv_start", "steering_hooks", "logit_bias_vector", "lora"};
    const gp_tensor_view *ids = gp_st_find(st, "token_ids");
    uint64_t bytes = gp_st_total_bytes(st) - (ids ? ids->nbytes : 0);
    int json = !strcmp(format, "json");
    if (json) printf("{\"file\":"), cli_json_string(stdout, path, strlen(path));
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *v = gp_st_metadata(st, keys[k]);
        if (!v) continue;
        if (json) printf(",\"%s\":", keys[k]), cli_json_string(stdout, v, strlen(v));
        else printf("%-20s %s\n", keys[k], v);
    }
    if (json) {
        printf(",\"kv_cache_bytes\":%llu,\"token_ids\":[", (unsigned long long)bytes);
        for (uint64_t i = 0; ids && i < ids->n_elems; i++) printf("%s%d", i ? "," : "", ((const int32_t *)ids->data)[i]);
        printf("]}\n");
    } else {
        printf("%-20s %llu\n", "kv_cache_bytes", (unsigned long long)bytes);
        printf("%-20s", "token_ids");
        for (uint64_t i = 0; ids && i < ids->n_elems && i < 64; i++) printf(" %d", ((const int32_t *)ids->data)[i]);
        if (ids && ids->n_elems > 64) printf(" ... (%llu in all)", (unsigned long long)ids->n_elems);
        printf("\n");
    }
    gp_st_close(st);
    return 0;
}

int cmd_cache(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "build")) return build(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "inspect")) return inspect(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        help(stdout);
        return 0;
    }
    help(stderr);
    return 2;
}
