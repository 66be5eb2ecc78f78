/* cmd_validate.c — `genparity validate`: the steering validation harness.  Runs every prompt unsteered (alpha 0)
 * and steered at each alpha with the same seed, and reports determinism (the same seed gives the same tokens twice),
 * divergence from the unsteered run, the rate of suspect lines (gp_text_suspect), and optionally the KL divergence
 * of the next-token distribution after each prompt against a reference logits file. */
#include "cli.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: genparity validate --model DIR --prompts FILE --steer-vector FILE[:TENSOR] --layer L\n"
            "                          [--alphas 0,2,4] [--seed S] [--max-tokens N] [--reference-logits FILE]\n"
            "                          [--max-suspect-rate R] [--min-divergence D] [--format text|json] [sampling flags]\n"
            "\n"
            "  FILE: one prompt per line (a line starting with '\"' is a JSON string).  alpha 0 (the base) always runs.\n"
            "  Each variant runs twice with the same seed (determinism).  divergence: %% of prompts whose tokens differ\n"
            "  from the base.  suspect rate: %% of non-empty generated lines flagged by gp_text_suspect (digit runs,\n"
            "  LaTeX-like markup, unbalanced braces, non-printable characters, degenerate repetition).\n"
            "  --reference-logits: safetensors with prompt{i}.last_logits [n_vocab]; reports mean KL(ref || variant)\n"
            "  of the next-token distribution after prompt i.\n"
            "  Exit code 1 when a steered variant's suspect rate is over --max-suspect-rate or its divergence under\n"
            "  --min-divergence (both in %%).  Sampling: the model's defaults with do_sample on; --temp 0 for greedy.\n");
}

typedef struct variant {
    double alpha;
    int deterministic;   /* every prompt gave identical tokens on both runs */
    int diverged;        /* prompts whose tokens differ from the base */
    int lines, suspect;  /* non-empty generated lines, flagged ones */
    int flag_counts[5];  /* per heuristic */
    double kl_sum;       /* KL(ref || variant) summed over prompts */
    int kl_n;
    int32_t **tokens;    /* [n_prompts] first run's tokens */
    int32_t *n_tokens;
    char **text;         /* [n_prompts] */
} variant;

int cmd_validate(int argc, char **argv) {
    const char *model_dir = NULL, *prompts_path = NULL, *vec_spec = NULL, *alphas_s = "0,2,4", *ref_path = NULL;
    const char *format = "text";
    int layer = -1;
    int32_t max_tokens = 48;
    double max_suspect = -1, min_div = -1;
    gp_gen_config scratch = gp_gen_config_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        int gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf < 0) return 2;
        if (gf) continue;
        if (!v) {
            fprintf(stderr, "genparity validate: unknown flag or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompts")) prompts_path = v;
        else if (!strcmp(a, "--steer-vector")) vec_spec = v;
        else if (!strcmp(a, "--alphas")) alphas_s = v;
        else if (!strcmp(a, "--reference-logits")) ref_path = v;
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--layer")) layer = atoi(v);
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(a, "--max-suspect-rate")) max_suspect = atof(v);
        else if (!strcmp(a, "--min-divergence")) min_div = atof(v);
        else {
            fprintf(stderr, "genparity validate: unknown flag %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (!prompts_path || !vec_spec || layer < 0 || max_tokens <= 0) {
        help(stderr);
        return 2;
    }
    /* alphas: 0 first, then the listed ones (0 not repeated) */
    double alphas[64];
    int na = 0;
    alphas[na++] = 0;
    for (const char *p = alphas_s; *p && na < 64;) {
        char *end;
        double x = strtod(p, &end);
        if (end == p) {
            fprintf(stderr, "genparity validate: --alphas expects comma-separated numbers\n");
            return 2;
        }
        if (x != 0) alphas[na++] = x;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "genparity validate: --alphas expects comma-separated numbers\n");
            return 2;
        }
    }
    int rc = 1;
    gp_model *m = NULL;
    gp_ctx *c = NULL;
    char **prompts = NULL;
    int np = 0;
    float *vec = NULL, *logits = NULL;
    int32_t nv = 0;
    gp_st_set *ref = NULL;
    variant *vs = calloc((size_t)na, sizeof *vs);
    if (gp_model_load(model_dir ? model_dir : cli_default_model(), NULL, &m) != GP_OK) {
        cli_fail("loading the model");
        goto done;
    }
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (!tok) {
        fprintf(stderr, "genparity validate: the model has no tokenizer.json\n");
        goto done;
    }
    if (layer >= gp_model_n_layers(m)) {
        fprintf(stderr, "genparity validate: --layer %d but the model has %d layers\n", layer, gp_model_n_layers(m));
        rc = 2;
        goto done;
    }
    if (gp_steer_vector_load(vec_spec, &vec, &nv) != GP_OK) {
        cli_fail("loading the steering vector");
        goto done;
    }
    if (nv != gp_model_n_embd(m)) {
        fprintf(stderr, "genparity validate: %s has %d values, the model's hidden size is %d\n", vec_spec, nv,
                gp_model_n_embd(m));
        goto done;
    }
    if ((np = cli_read_lines(prompts_path, &prompts)) <= 0) {
        fprintf(stderr, "genparity validate: no prompts in %s\n", prompts_path);
        np = 0;
        goto done;
    }
    if (ref_path && gp_st_open_file(ref_path, &ref) != GP_OK) {
        cli_fail("reading the reference logits");
        goto done;
    }
    if (gp_ctx_init(m, NULL, &c) != GP_OK) {
        cli_fail("creating the context");
        goto done;
    }
    const int32_t V = gp_model_n_vocab(m);
    logits = malloc((size_t)V * sizeof(float));
    gp_gen_config g = gp_model_gen_config(m);
    g.do_sample = 1;
    g.max_new_tokens = max_tokens;
    for (int i = 1; i < argc; i++) /* sampling flags over the model's config (--temp 0 turns sampling off) */
        if (cli_gen_flag(argc, argv, &i, &g) == 0 && strcmp(argv[i], "--help")) i++;
    for (int k = 0; k < na; k++) {
        variant *vr = &vs[k];
        vr->alpha = alphas[k];
        vr->deterministic = 1;
        vr->tokens = calloc((size_t)np, sizeof *vr->tokens);
        vr->n_tokens = calloc((size_t)np, sizeof *vr->n_tokens);
        vr->text = calloc((size_t)np, sizeof *vr->text);
        gp_ctx_steer_clear(c);
        gp_steer_hook h = {.layer = layer, .vector = vec, .alpha = (float)alphas[k]};
        if (alphas[k] != 0 && gp_ctx_steer_add(c, &h) != GP_OK) {
            cli_fail("adding the steering hook");
            goto done;
        }
        for (int p = 0; p < np; p++) {
            int32_t *ids, n;
            if (gp_tokenizer_encode(tok, prompts[p], strlen(prompts[p]), 1, &ids, &n) != GP_OK || n == 0) {
                cli_fail("encoding a prompt");
                gp_free(ids);
                goto done;
            }
            gp_gen_result r[2];
            for (int run = 0; run < 2; run++)
                if (gp_generate(c, ids, n, &g, NULL, NULL, &r[run]) != GP_OK) {
                    cli_fail("generating");
                    if (run) gp_gen_result_free(&r[0]);
                    gp_free(ids);
                    goto done;
                }
            if (r[0].n_tokens != r[1].n_tokens || memcmp(r[0].tokens, r[1].tokens, (size_t)r[0].n_tokens * 4))
                vr->deterministic = 0;
            vr->tokens[p] = malloc(((size_t)r[0].n_tokens + 1) * sizeof(int32_t));
            memcpy(vr->tokens[p], r[0].tokens, (size_t)r[0].n_tokens * sizeof(int32_t));
            vr->n_tokens[p] = r[0].n_tokens;
            vr->text[p] = strdup(r[0].text ? r[0].text : "");
            if (k > 0 && (vr->n_tokens[p] != vs[0].n_tokens[p] ||
                          memcmp(vr->tokens[p], vs[0].tokens[p], (size_t)vr->n_tokens[p] * 4)))
                vr->diverged++;
            char *save = NULL, *copy = strdup(vr->text[p]);
            for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                size_t len = strlen(line);
                int blank = 1;
                for (size_t j = 0; j < len && blank; j++) blank = line[j] == ' ' || line[j] == '\t' || line[j] == '\r';
                if (blank) continue;
                vr->lines++;
                uint32_t fl = gp_text_suspect(line, len);
                if (fl) vr->suspect++;
                for (int b = 0; b < 5; b++) vr->flag_counts[b] += (fl >> b) & 1;
            }
            free(copy);
            if (ref) {
                char key[64];
                snprintf(key, sizeof key, "prompt%d.last_logits", p);
                const gp_tensor_view *t = gp_st_find(ref, key);
                if (t && t->dtype == GP_DTYPE_F32 && t->n_elems == (uint64_t)V) {
                    gp_ctx_reset(c);
                    if (gp_ctx_eval(c, ids, n, NULL, logits) == GP_OK) {
                        vr->kl_sum += gp_logits_kl(t->data, logits, V);
                        vr->kl_n++;
                    }
                }
            }
            gp_gen_result_free(&r[0]);
            gp_gen_result_free(&r[1]);
            gp_free(ids);
        }
    }
    /* report */
    int json = !strcmp(format, "json"), fail = 0;
    static const char *flag_names[] = {"digit_run", "latex", "braces", "nonprint", "repetition"};
    if (json) printf("{\"prompts\":%d,\"layer\":%d,\"seed\":%llu,\"variants\":[", np, layer, (unsigned long long)g.seed);
    else {
        printf("steering validation: %d prompts, layer %d, seed %llu, %d new tokens, %s\n", np, layer,
               (unsigned long long)g.seed, max_tokens, g.do_sample ? "sampling" : "greedy");
        printf("| alpha | deterministic | divergence %% | suspect lines %% | lines | KL(ref||variant) |\n"
               "|---|---|---|---|---|---|\n");
    }
    for (int k = 0; k < na; k++) {
        const variant *vr = &vs[k];
        double div = 100.0 * vr->diverged / np, sus = vr->lines ? 100.0 * vr->suspect / vr->lines : 0;
        if (k > 0 && max_suspect >= 0 && sus > max_suspect) fail = 1;
        if (k > 0 && min_div >= 0 && div < min_div) fail = 1;
        if (!vr->deterministic) fail = 1;
        if (json) {
            printf("%s{\"alpha\":%g,\"deterministic\":%s,\"divergence_pct\":%.2f,\"suspect_line_pct\":%.2f,\"lines\":%d,"
                   "\"suspect_by_heuristic\":{",
                   k ? "," : "", vr->alpha, vr->deterministic ? "true" : "false", div, sus, vr->lines);
            for (int b = 0; b < 5; b++) printf("%s\"%s\":%d", b ? "," : "", flag_names[b], vr->flag_counts[b]);
            printf("}");
            if (vr->kl_n) printf(",\"kl_mean\":%.6g", vr->kl_sum / vr->kl_n);
            printf(",\"samples\":[");
            for (int p = 0; p < np; p++) {
                printf("%s", p ? "," : "");
                cli_json_string(stdout, vr->text[p], strlen(vr->text[p]));
            }
            printf("]}");
        } else {
            char kl[32] = "-";
            if (vr->kl_n) snprintf(kl, sizeof kl, "%.4g", vr->kl_sum / vr->kl_n);
            printf("| %g | %s | %.1f | %.1f | %d | %s |\n", vr->alpha, vr->deterministic ? "yes" : "NO", div, sus,
                   vr->lines, kl);
        }
    }
    if (json) printf("],\"pass\":%s}\n", fail ? "false" : "true");
    else if (fail) printf("FAIL: a threshold was not met (or a variant was not deterministic)\n");
    rc = fail ? 1 : 0;
done:
    if (vs)
        for (int k = 0; k < na; k++) {
            for (int p = 0; p < np; p++) {
                if (vs[k].tokens) free(vs[k].tokens[p]);
                if (vs[k].text) free(vs[k].text[p]);
            }
            free(vs[k].tokens);
            free(vs[k].n_tokens);
            free(vs[k].text);
        }
    free(vs);
    for (int p = 0; p < np; p++) free(prompts[p]);
    free(prompts);
    free(logits);
    gp_free(vec);
    gp_st_close(ref);
    gp_ctx_free(c);
    gp_model_free(m);
    cli_gen_flags_free();
    return rc;
}
