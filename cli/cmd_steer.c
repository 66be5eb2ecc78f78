/* cmd_steer.c — `genparity steer-vector`: builds a steering vector from two prompt lists as the mean difference of a
 * decoder layer's output (hidden state) over the positive and the negative prompts, the way persona vectors are
 * made, and writes it to a safetensors file (tensor "steer.vector"). */
#include "cli.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void help(FILE *f) {
    fprintf(f, "usage: genparity steer-vector --model DIR --positive FILE --negative FILE --layer L -o OUT.safetensors\n"
               "                              [--position mean|last] [--normalize]\n"
               "\n"
               "  FILE: one prompt per line (a line starting with '\"' is read as a JSON string); empty lines skipped.\n"
               "  --layer L       0-based decoder layer whose output is averaged (hidden_states index L+1); the\n"
               "                  vector is meant for --steer-layer L\n"
               "  --position      mean over every prompt position (default) or the last position only\n"
               "  --normalize     scale the difference to unit L2 norm\n");
}

/* Adds the mean (or last) of layer output over each prompt into acc [E]; returns prompts used or -1. */
static int accumulate(gp_ctx *c, const gp_model *m, char **prompts, int n, int layer, int last_only, double *acc) {
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    const int32_t E = gp_model_n_embd(m);
    for (int i = 0; i < n; i++) {
        int32_t *ids, k;
        if (gp_tokenizer_encode(tok, prompts[i], strlen(prompts[i]), 1, &ids, &k) != GP_OK) return -1;
        if (k == 0) {
            gp_free(ids);
            continue;
        }
        float *h = malloc((size_t)k * E * sizeof(float));
        int32_t idx = layer + 1;
        gp_eval_opts o = {.hidden_layers = &idx, .n_hidden_layers = 1, .hidden_out = h};
        gp_ctx_reset(c);
        gp_status s = gp_ctx_eval(c, ids, k, &o, NULL);
        gp_free(ids);
        if (s != GP_OK) {
            free(h);
            return -1;
        }
        for (int32_t e = 0; e < E; e++) {
            double sum = 0;
            if (last_only) sum = h[(size_t)(k - 1) * E + e];
            else {
                for (int32_t t = 0; t < k; t++) sum += h[(size_t)t * E + e];
                sum /= k;
            }
            acc[e] += sum;
        }
        free(h);
    }
    return n;
}

int cmd_steer_vector(int argc, char **argv) {
    const char *model_dir = NULL, *pos_path = NULL, *neg_path = NULL, *out = NULL, *position = "mean";
    int32_t layer = -1;
    int normalize = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "--normalize")) {
            normalize = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s: unknown flag or missing value: %s\n", cli_prog, a);
            return 2;
        }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--positive")) pos_path = v;
        else if (!strcmp(a, "--negative")) neg_path = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--position")) position = v;
        else if (!strcmp(a, "--layer")) {
            if (cli_i32(a, v, 0, INT32_MAX, &layer)) return 2;
        } else {
            fprintf(stderr, "genparity steer-vector: unknown flag %s\n", a);
            return 2;
        }
        i++;
    }
    if (!pos_path) return cli_missing("--positive", NULL);
    if (!neg_path) return cli_missing("--negative", NULL);
    if (!out) return cli_missing("-o", "the output file");
    if (layer < 0) return cli_missing("--layer", NULL);
    if (strcmp(position, "mean") && strcmp(position, "last")) {
        fprintf(stderr, "%s: --position must be mean or last, got '%s'\n", cli_prog, position);
        return 2;
    }
    if (!model_dir) model_dir = cli_default_model();
    gp_model *m = NULL;
    if (gp_model_load(model_dir, NULL, &m) != GP_OK) return cli_fail("loading the model");
    int rc = 1;
    char **pos = NULL, **neg = NULL;
    int np = -1, nn = -1;
    gp_ctx *c = NULL;
    double *ap = NULL, *an = NULL;
    float *vec = NULL;
    const int32_t E = gp_model_n_embd(m);
    if (!gp_model_tokenizer(m)) {
        fprintf(stderr, "genparity steer-vector: %s has no tokenizer.json\n", model_dir);
        goto done;
    }
    if (layer >= gp_model_n_layers(m)) {
        fprintf(stderr, "genparity steer-vector: --layer %d but the model has %d layers\n", layer, gp_model_n_layers(m));
        rc = 2;
        goto done;
    }
    if ((np = cli_read_lines(pos_path, &pos)) < 0 || (nn = cli_read_lines(neg_path, &neg)) < 0) {
        cli_fail("reading prompts");
        goto done;
    }
    if (np == 0 || nn == 0) {
        fprintf(stderr, "genparity steer-vector: both prompt files need at least one prompt\n");
        goto done;
    }
    if (gp_ctx_init(m, NULL, &c) != GP_OK) {
        cli_fail("creating the context");
        goto done;
    }
    ap = calloc((size_t)E, sizeof *ap);
    an = calloc((size_t)E, sizeof *an);
    vec = malloc((size_t)E * sizeof *vec);
    int last = !strcmp(position, "last");
    if (accumulate(c, m, pos, np, layer, last, ap) < 0 || accumulate(c, m, neg, nn, layer, last, an) < 0) {
        cli_fail("running the prompts");
        goto done;
    }
    double norm = 0;
    for (int32_t e = 0; e < E; e++) {
        double d = ap[e] / np - an[e] / nn;
        vec[e] = (float)d;
        norm += d * d;
    }
    norm = sqrt(norm);
    if (normalize && norm > 0)
        for (int32_t e = 0; e < E; e++) vec[e] = (float)(vec[e] / norm);
    char sl[32], snp[32], snn[32], snorm[32];
    snprintf(sl, sizeof sl, "%d", layer);
    snprintf(snp, sizeof snp, "%d", np);
    snprintf(snn, sizeof snn, "%d", nn);
    snprintf(snorm, sizeof snorm, "%.9g", norm);
    const char *keys[] = {"genparity.kind", "layer", "model", "n_positive", "n_negative", "position", "normalized",
                          "raw_norm"};
    const char *vals[] = {"steer_vector", sl, model_dir, snp, snn, position, normalize ? "true" : "false", snorm};
    gp_st_write_tensor t = {.name = "steer.vector", .dtype = GP_DTYPE_F32, .ndim = 1, .shape = {E}, .data = vec};
    if (gp_st_write(out, &t, 1, keys, vals, 8) != GP_OK) {
        cli_fail("writing the vector");
        goto done;
    }
    fprintf(stderr, "genparity steer-vector: layer %d, %d positive / %d negative prompts, |v| = %.4g%s -> %s:steer.vector\n",
            layer, np, nn, norm, normalize ? " (normalised to 1)" : "", out);
    rc = 0;
done:
    for (int i = 0; i < np; i++) free(pos[i]);
    for (int i = 0; i < nn; i++) free(neg[i]);
    free(pos);
    free(neg);
    free(ap);
    free(an);
    free(vec);
    gp_ctx_free(c);
    gp_model_free(m);
    return rc;
}
