/* cmd_validate.c — `genparity validate`: the steering validation harness.  Runs every prompt unsteered (alpha 0)
 * and steered at each alpha with the same seed, and reports determinism (the same seed gives the same tokens twice),
 * divergence from the unsteered run, the rate of suspect lines (gp_text_suspect), and optionally the KL divergence
 * of the next-token distribution after each prompt against a reference logits file. */
#include "cli.h"

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
            "  --min-divergence (both in %%), or reproduces the base exactly.  Sampling: the model's defaults with do_sample on; --temp 0 for greedy.\n");
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

/* Command-line options and what was loaded from them. */
typedef struct vopts {
    const char *model_dir, *prompts_path, *vec_spec, *ref_path, *format;
    int32_t layer, max_tokens;
    double max_suspect, min_div;
    double alphas[64];
    int na;
    gp_ctx_params cp; /* the context flags (--threads, --compute, ...) */
} vopts;

/* Everything run_all needs, owned here and released by vstate_free. */
typedef struct vstate {
    gp_model *m;
    gp_ctx *c;
    const gp_tokenizer *tok;
    char **prompts;
    int np;
    float *vec, *logits;
    gp_st_set *ref;
    variant *vs;
    int na;
    gp_gen_config g;
} vstate;

/* alphas: 0 first, then the listed ones (0 not repeated). */
static int parse_alphas(const char *s, vopts *o) {
    double list[63];
    int n = 0;
    if (cli_f64_list("--alphas", s, list, 63, &n)) return -1;
    o->na = 0;
    o->alphas[o->na++] = 0;
    for (int k = 0; k < n; k++)
        if (list[k] != 0) o->alphas[o->na++] = list[k];
    return 0;
}

/* Returns -1 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, vopts *o) {
    const char *alphas = "0,2,4";
    gp_gen_config scratch = gp_gen_config_default(); /* sampling flags are checked here, applied after loading */
    *o = (vopts){.format = "text", .layer = -1, .max_tokens = 48, .max_suspect = -1, .min_div = -1,
                 .cp = gp_ctx_default_params()};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 0;
        int gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf == 0) gf = cli_ctx_flag(argc, argv, &i, &o->cp);
        if (gf < 0) return 2;
        if (gf) continue;
        static const char *const known[] = {"--model", "--prompts", "--steer-vector", "--alphas", "--reference-logits",
                                            "--format", "--layer", "--max-tokens", "--max-suspect-rate",
                                            "--min-divergence"};
        int k = -1;
        for (int j = 0; j < (int)(sizeof known / sizeof known[0]); j++)
            if (!strcmp(a, known[j])) k = j;
        if (k < 0) return cli_unknown(a);
        if (!(v = cli_value(argc, argv, &i))) return 2;
        int bad = 0;
        switch (k) {
        case 0: o->model_dir = v; break;
        case 1: o->prompts_path = v; break;
        case 2: o->vec_spec = v; break;
        case 3: alphas = v; break;
        case 4: o->ref_path = v; break;
        case 5: o->format = v; break;
        case 6: bad = cli_i32(a, v, 0, INT32_MAX, &o->layer); break;
        case 7: bad = cli_i32(a, v, 1, 1 << 30, &o->max_tokens); break;
        case 8: bad = cli_f64(a, v, 0, 1e9, &o->max_suspect); break;
        case 9: bad = cli_f64(a, v, 0, 1e9, &o->min_div); break;
        }
        if (bad) return 2;
    }
    if (!o->prompts_path) return cli_missing("--prompts", "a file of prompts, one per line");
    if (!o->vec_spec) return cli_missing("--steer-vector", NULL);
    if (o->layer < 0) return cli_missing("--layer", NULL);
    if (strcmp(o->format, "text") && strcmp(o->format, "json")) {
        fprintf(stderr, "%s: --format must be text or json, got '%s'\n", cli_prog, o->format);
        return 2;
    }
    return parse_alphas(alphas, o) ? 2 : -1;
}

/* Loads the model, vector, prompts, reference and context.  Returns -1 to go on, else the exit code. */
static int load_all(const vopts *o, int argc, char **argv, vstate *st) {
    if (cli_model_load(o->model_dir ? o->model_dir : cli_default_model(), &st->m) != GP_OK)
        return cli_fail("loading the model");
    if (!(st->tok = gp_model_tokenizer(st->m))) {
        fprintf(stderr, "%s: the model has no tokenizer.json\n", cli_prog);
        return 1;
    }
    if (o->layer >= gp_model_n_layers(st->m)) {
        fprintf(stderr, "%s: --layer %d but the model has %d layers\n", cli_prog, o->layer, gp_model_n_layers(st->m));
        return 2;
    }
    int32_t nv = 0;
    if (gp_steer_vector_load(o->vec_spec, &st->vec, &nv) != GP_OK) return cli_fail("loading the steering vector");
    if (nv != gp_model_n_embd(st->m)) {
        fprintf(stderr, "%s: %s has %d values, the model's hidden size is %d\n", cli_prog, o->vec_spec, nv,
                gp_model_n_embd(st->m));
        return 1;
    }
    if ((st->np = cli_read_lines(o->prompts_path, &st->prompts)) <= 0) {
        fprintf(stderr, "%s: no prompts in %s\n", cli_prog, o->prompts_path);
        st->np = 0;
        return 1;
    }
    if (o->ref_path && gp_st_open_file(o->ref_path, &st->ref) != GP_OK) return cli_fail("reading the reference logits");
    if (gp_ctx_init(st->m, &o->cp, &st->c) != GP_OK) return cli_fail("creating the context");
    st->logits = malloc((size_t)gp_model_n_vocab(st->m) * sizeof(float));
    st->vs = calloc((size_t)o->na, sizeof *st->vs);
    if (!st->logits || !st->vs) return fprintf(stderr, "%s: out of memory\n", cli_prog), 1;
    st->na = o->na;
    st->g = gp_model_gen_config(st->m);
    st->g.do_sample = 1;
    st->g.max_new_tokens = o->max_tokens;
    for (int i = 1; i < argc; i++) /* sampling flags over the model's config (--temp 0 turns sampling off) */
        if (cli_gen_flag(argc, argv, &i, &st->g) == 0 && strcmp(argv[i], "--help")) i++;
    return -1;
}

/* Counts the non-blank lines of text and the suspect ones, per heuristic. */
static void count_suspect(variant *vr, const char *text) {
    char *save = NULL, *copy = strdup(text);
    for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
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
}

/* KL(reference || this variant) of the next-token distribution after prompt p. */
static void add_kl(vstate *st, variant *vr, int p, const int32_t *ids, int32_t n) {
    char key[64];
    const int32_t V = gp_model_n_vocab(st->m);
    snprintf(key, sizeof key, "prompt%d.last_logits", p);
    const gp_tensor_view *t = gp_st_find(st->ref, key);
    if (!t || t->dtype != GP_DTYPE_F32 || t->n_elems != (uint64_t)V) return;
    gp_ctx_reset(st->c);
    if (gp_ctx_eval(st->c, ids, n, NULL, st->logits) == GP_OK) {
        vr->kl_sum += gp_logits_kl(t->data, st->logits, V);
        vr->kl_n++;
    }
}

/* Runs prompt p twice for variant k (determinism), records tokens and text, divergence, suspect lines, KL. */
static int run_prompt(vstate *st, int k, int p) {
    variant *vr = &st->vs[k];
    int32_t *ids = NULL, n;
    if (gp_tokenizer_encode(st->tok, st->prompts[p], strlen(st->prompts[p]), 1, &ids, &n) != GP_OK || n == 0) {
        gp_free(ids);
        return cli_fail("encoding a prompt");
    }
    gp_gen_result r[2];
    for (int run = 0; run < 2; run++)
        if (gp_generate(st->c, ids, n, &st->g, NULL, NULL, &r[run]) != GP_OK) {
            if (run) gp_gen_result_free(&r[0]);
            gp_free(ids);
            return cli_fail("generating");
        }
    if (r[0].n_tokens != r[1].n_tokens || memcmp(r[0].tokens, r[1].tokens, (size_t)r[0].n_tokens * 4))
        vr->deterministic = 0;
    vr->tokens[p] = malloc(((size_t)r[0].n_tokens + 1) * sizeof(int32_t));
    if (vr->tokens[p]) memcpy(vr->tokens[p], r[0].tokens, (size_t)r[0].n_tokens * sizeof(int32_t));
    vr->n_tokens[p] = r[0].n_tokens;
    vr->text[p] = strdup(r[0].text ? r[0].text : "");
    if (k > 0 && (vr->n_tokens[p] != st->vs[0].n_tokens[p] ||
                  memcmp(vr->tokens[p], st->vs[0].tokens[p], (size_t)vr->n_tokens[p] * 4)))
        vr->diverged++;
    if (vr->text[p]) count_suspect(vr, vr->text[p]);
    if (st->ref) add_kl(st, vr, p, ids, n);
    gp_gen_result_free(&r[0]);
    gp_gen_result_free(&r[1]);
    gp_free(ids);
    return vr->tokens[p] && vr->text[p] ? 0 : (fprintf(stderr, "%s: out of memory\n", cli_prog), 1);
}

/* Every variant (alpha) over every prompt.  Returns 0 or the exit code. */
static int run_all(const vopts *o, vstate *st) {
    for (int k = 0; k < o->na; k++) {
        variant *vr = &st->vs[k];
        vr->alpha = o->alphas[k];
        vr->deterministic = 1;
        vr->tokens = calloc((size_t)st->np, sizeof *vr->tokens);
        vr->n_tokens = calloc((size_t)st->np, sizeof *vr->n_tokens);
        vr->text = calloc((size_t)st->np, sizeof *vr->text);
        if (!vr->tokens || !vr->n_tokens || !vr->text) return fprintf(stderr, "%s: out of memory\n", cli_prog), 1;
        gp_ctx_steer_clear(st->c);
        gp_steer_hook h = {.layer = o->layer, .vector = st->vec, .alpha = (float)o->alphas[k]};
        if (o->alphas[k] != 0 && gp_ctx_steer_add(st->c, &h) != GP_OK) return cli_fail("adding the steering hook");
        for (int p = 0; p < st->np; p++) {
            int rc = run_prompt(st, k, p);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Prints the table (or JSON) and returns 1 when a threshold was not met, a variant was not deterministic, or a
 * steered variant reproduced the base exactly. */
static int report(const vopts *o, const vstate *st) {
    int json = !strcmp(o->format, "json"), fail = 0, np = st->np;
    static const char *flag_names[] = {"digit_run", "latex", "braces", "nonprint", "repetition"};
    unsigned long long seed = (unsigned long long)st->g.seed;
    if (json) printf("{\"prompts\":%d,\"layer\":%d,\"seed\":%llu,\"variants\":[", np, o->layer, seed);
    else {
        printf("steering validation: %d prompts, layer %d, seed %llu, %d new tokens, %s\n", np, o->layer, seed,
               o->max_tokens, st->g.do_sample ? "sampling" : "greedy");
        printf("| alpha | deterministic | divergence %% | suspect lines %% | lines | KL(ref||variant) |\n"
               "|---|---|---|---|---|---|\n");
    }
    for (int k = 0; k < o->na; k++) {
        const variant *vr = &st->vs[k];
        double div = 100.0 * vr->diverged / np, sus = vr->lines ? 100.0 * vr->suspect / vr->lines : 0;
        if (k > 0 && o->max_suspect >= 0 && sus > o->max_suspect) fail = 1;
        if (k > 0 && o->min_div >= 0 && div < o->min_div) fail = 1;
        if (!vr->deterministic) fail = 1;
        /* a steered variant that reproduces the base exactly on every prompt: the steering did nothing */
        const int same_as_base = k > 0 && vr->alpha != 0 && vr->diverged == 0;
        if (same_as_base) fail = 1;
        if (!json) {
            char kl[32] = "-";
            if (vr->kl_n) snprintf(kl, sizeof kl, "%.4g", vr->kl_sum / vr->kl_n);
            printf("| %g | %s | %.1f%s | %.1f | %d | %s |\n", vr->alpha, vr->deterministic ? "yes" : "NO", div,
                   same_as_base ? " (= base!)" : "", sus, vr->lines, kl);
            continue;
        }
        printf("%s{\"alpha\":%g,\"deterministic\":%s,\"divergence_pct\":%.2f,\"suspect_line_pct\":%.2f,\"lines\":%d,"
               "\"suspect_by_heuristic\":{",
               k ? "," : "", vr->alpha, vr->deterministic ? "true" : "false", div, sus, vr->lines);
        for (int b = 0; b < 5; b++) printf("%s\"%s\":%d", b ? "," : "", flag_names[b], vr->flag_counts[b]);
        printf("},\"reproduces_base\":%s", same_as_base ? "true" : "false");
        if (vr->kl_n) printf(",\"kl_mean\":%.6g", vr->kl_sum / vr->kl_n);
        printf(",\"samples\":[");
        for (int p = 0; p < np; p++) {
            printf("%s", p ? "," : "");
            cli_json_string(stdout, vr->text[p], strlen(vr->text[p]));
        }
        printf("]}");
    }
    if (json) printf("],\"pass\":%s}\n", fail ? "false" : "true");
    else if (fail) printf("FAIL: a threshold was not met, a variant was not deterministic, or a steered variant "
                          "reproduced the base exactly\n");
    return fail ? 1 : 0;
}

static void vstate_free(vstate *st) {
    for (int k = 0; st->vs && k < st->na; k++) {
        for (int p = 0; p < st->np; p++) {
            if (st->vs[k].tokens) free(st->vs[k].tokens[p]);
            if (st->vs[k].text) free(st->vs[k].text[p]);
        }
        free(st->vs[k].tokens);
        free(st->vs[k].n_tokens);
        free(st->vs[k].text);
    }
    free(st->vs);
    cli_free_lines(st->prompts, st->np);
    free(st->logits);
    gp_free(st->vec);
    gp_st_close(st->ref);
    gp_ctx_free(st->c);
    gp_model_free(st->m);
}

int cmd_validate(int argc, char **argv) {
    vopts o;
    vstate st = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc < 0 && (rc = load_all(&o, argc, argv, &st)) < 0 && (rc = run_all(&o, &st)) == 0) rc = report(&o, &st);
    vstate_free(&st);
    cli_gen_flags_free();
    return rc;
}
