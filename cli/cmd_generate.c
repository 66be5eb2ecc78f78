/* cmd_generate.c — `genparity generate`: load a model, run a prompt, print text (streamed) or one JSON object with
 * prompt_ids, tokens, text, finish_reason, prompt_tokens_per_s, generation_tokens_per_s, peak_memory_bytes. */
#include "cli.h"

#include <stdio.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: genparity generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
            "\n"
            "  --model DIR          Hugging Face model folder (default: the embedded models/shakespeare-llama)\n"
            "  --prompt TEXT        prompt text, encoded like transformers with add_special_tokens=True\n"
            "  --prompt-ids LIST    prompt as comma-separated token ids\n"
            "  --max-tokens N       new tokens to generate (default 64)\n"
            "  --ignore-eos         do not stop at the model's EOS ids\n"
            "  --format text|json   text streams as tokens arrive; json prints one object at the end\n"
            "  --prompt-cache FILE  start from a KV cache file (genparity cache build); the prompt must extend it\n"
            "  --prompts-file FILE  one prompt per line (JSON array of ids or JSON string), generated together\n"
            "  --batch-size N       prompts of --prompts-file decoded together (default 8)\n"
            "  --mlock              pin the weights in RAM (refused when RLIMIT_MEMLOCK does not allow it)\n"
            "  --resample-on-suspect  when a generated line looks pathological (gp_text_suspect), draw once more\n"
            "                       with the next seed and keep that (json: resampled, suspect_lines, lines)\n"
            "\n"
            "steering (repeatable: each --steer-vector starts a hook; the flags after it set its layer/alpha/ramp):\n"
            "  --steer-vector FILE[:TENSOR]  vector (.safetensors[:tensor], .npy or raw float32) added to a layer's output\n"
            "  --steer-layer L      0-based decoder layer whose output gets alpha * vector at every position\n"
            "  --steer-alpha A      coefficient (default 1)\n"
            "  --steer-ramp N       ramp the coefficient over N forward steps: alpha * min(1, (s+1)/N), s=0 the prefill\n"
            "  --steer-warmup N     leave the first N forward steps unsteered (s=0 the prefill), then alpha\n"
            "  --logit-bias-vector FILE[:TENSOR]  add alpha * (W_out @ vector) to the logits before the processors\n"
            "  --logit-bias-alpha A (default 1)\n"
            "\n");
    cli_ctx_flags_help(f);
    fprintf(f, "\n");
    cli_gen_flags_help(f);
}

typedef struct stream_state {
    int has_text; /* the model has a tokenizer: print text pieces, else ids */
    int text;     /* streaming text to stdout */
} stream_state;

static int on_token(const gp_token_event *ev, void *ud) {
    stream_state *st = ud;
    if (!st->text) return 0;
    if (st->has_text) fwrite(ev->piece, 1, ev->piece_len, stdout);
    else printf("%d ", ev->id);
    fflush(stdout);
    return 0;
}

static int parse_int(const char *flag, const char *v, int32_t lo, int32_t *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > 1 << 30) {
        fprintf(stderr, "genparity generate: %s expects an integer >= %d, got '%s'\n", flag, lo, v);
        return -1;
    }
    *out = (int32_t)x;
    return 0;
}

/* One --steer-vector hook as given on the command line; --steer-layer/--steer-alpha/--steer-ramp after it apply to it. */
typedef struct steer_flag {
    const char *spec;
    int32_t layer, ramp, warmup;
    double alpha;
} steer_flag;
#define MAX_STEER 16

static int parse_num(const char *flag, const char *v, double *out) {
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !isfinite(x) || fabs(x) > FLT_MAX) { /* alphas become float32: NaN, inf and 1e300 refused */
        fprintf(stderr, "genparity generate: %s expects a finite number, got '%s'\n", flag, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* Loads the steering vectors and installs the hooks and the logit-bias vector on c. Returns 0 or prints and -1. */
static int apply_steering(gp_ctx *c, const gp_model *m, const steer_flag *sf, int n_sf, const char *lb_spec,
                          double lb_alpha) {
    for (int k = 0; k < n_sf; k++) {
        float *vec;
        int32_t n;
        if (gp_steer_vector_load(sf[k].spec, &vec, &n) != GP_OK) return cli_fail("loading --steer-vector"), -1;
        if (n != gp_model_n_embd(m)) {
            fprintf(stderr, "genparity generate: %s has %d values; the model's hidden size is %d\n", sf[k].spec, n,
                    gp_model_n_embd(m));
            gp_free(vec);
            return -1;
        }
        gp_steer_hook h = {.layer = sf[k].layer, .vector = vec, .alpha = (float)sf[k].alpha,
                           .schedule = sf[k].warmup > 0 ? GP_STEER_WARMUP
                                       : sf[k].ramp > 0 ? GP_STEER_RAMP : GP_STEER_CONSTANT,
                           .steps = sf[k].warmup > 0 ? sf[k].warmup : sf[k].ramp};
        gp_status s = gp_ctx_steer_add(c, &h);
        gp_free(vec);
        if (s) return cli_fail("adding a steering hook"), -1;
    }
    if (lb_spec) {
        float *vec;
        int32_t n;
        if (gp_steer_vector_load(lb_spec, &vec, &n) != GP_OK) return cli_fail("loading --logit-bias-vector"), -1;
        gp_status s = n == gp_model_n_embd(m) ? gp_ctx_logit_bias_vector(c, vec, (float)lb_alpha)
                                              : gp_set_error(GP_ERR_INVALID_ARG, "%s: wrong length for the model's hidden size", lb_spec);
        gp_free(vec);
        if (s) return cli_fail("setting the logit-bias vector"), -1;
    }
    return 0;
}

/* Generates; with resample, a result with a suspect line is drawn once more with the next seed.  Fills *extra with
 * the JSON fields of the guardrail ("" without it).  Returns the library status. */
static gp_status generate_guarded(gp_ctx *c, const int32_t *ids, int32_t n_ids, gp_gen_config *g, int resample,
                                  stream_state *st, gp_gen_result *r, char *extra, size_t cap) {
    extra[0] = 0;
    gp_status s = gp_generate(c, ids, n_ids, g, on_token, st, r);
    if (s || !resample) return s;
    int lines = 0, bad = cli_suspect_lines(r->text, r->text ? r->text_len : 0, &lines), resampled = 0;
    if (bad > 0) {
        gp_gen_result_free(r);
        g->seed += 1;
        if ((s = gp_generate(c, ids, n_ids, g, on_token, st, r))) return s;
        bad = cli_suspect_lines(r->text, r->text ? r->text_len : 0, &lines);
        resampled = 1;
    }
    snprintf(extra, cap, ",\"resampled\":%s,\"suspect_lines\":%d,\"lines\":%d,\"seed\":%llu",
             resampled ? "true" : "false", bad, lines, (unsigned long long)g->seed);
    return GP_OK;
}

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = NULL, *prompt_ids = NULL, *format = "text", *prompt_cache = NULL;
    const char *lb_spec = NULL, *prompts_file = NULL;
    int32_t batch_size = 8;
    double lb_alpha = 1.0;
    int32_t max_tokens = 64, ignore_eos = 0, mlock = 0, resample = 0;
    steer_flag sf[MAX_STEER];
    int n_sf = 0;
    gp_ctx_params cp = gp_ctx_default_params();
    gp_gen_config scratch = gp_gen_config_default(); /* sampling flags are checked here, applied after loading */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            continue;
        }
        if (!strcmp(a, "--mlock") || !strcmp(a, "--resample-on-suspect")) {
            *(a[2] == 'm' ? &mlock : &resample) = 1;
            continue;
        }
        int gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf == 0) gf = cli_ctx_flag(argc, argv, &i, &cp);
        if (gf < 0) {
            cli_gen_flags_free();
            return 2;
        }
        if (gf > 0) continue;
        if (!v) {
            fprintf(stderr, "genparity generate: unknown flag or missing value: %s\n", a);
            return 2;
        }
        int bad = 0;
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
        else if (!strcmp(a, "--prompt-cache")) prompt_cache = v;
        else if (!strcmp(a, "--prompts-file")) prompts_file = v;
        else if (!strcmp(a, "--batch-size")) bad = parse_int(a, v, 1, &batch_size);
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--max-tokens")) bad = parse_int(a, v, 1, &max_tokens); /* 0 / negative: an error, as transformers */
        else if (!strcmp(a, "--steer-vector")) {
            if (n_sf == MAX_STEER) {
                fprintf(stderr, "genparity generate: at most %d --steer-vector hooks\n", MAX_STEER);
                return 2;
            }
            sf[n_sf++] = (steer_flag){v, -1, 0, 0, 1.0};
        } else if (!strcmp(a, "--steer-layer") || !strcmp(a, "--steer-alpha") || !strcmp(a, "--steer-ramp") ||
                   !strcmp(a, "--steer-warmup")) {
            if (!n_sf) {
                fprintf(stderr, "genparity generate: %s must follow a --steer-vector\n", a);
                return 2;
            }
            if (a[8] == 'l') bad = parse_int(a, v, 0, &sf[n_sf - 1].layer);
            else if (a[8] == 'r') bad = parse_int(a, v, 0, &sf[n_sf - 1].ramp);
            else if (a[8] == 'w') bad = parse_int(a, v, 1, &sf[n_sf - 1].warmup);
            else bad = parse_num(a, v, &sf[n_sf - 1].alpha);
        } else if (!strcmp(a, "--logit-bias-vector")) lb_spec = v;
        else if (!strcmp(a, "--logit-bias-alpha")) bad = parse_num(a, v, &lb_alpha);
        else {
            fprintf(stderr, "genparity generate: unknown flag %s (see --help)\n", a);
            return 2;
        }
        if (bad) return 2;
        i++;
    }
    for (int k = 0; k < n_sf; k++)
        if (sf[k].ramp > 0 && sf[k].warmup > 0) {
            fprintf(stderr, "genparity generate: --steer-vector %s: give --steer-ramp or --steer-warmup, not both\n",
                    sf[k].spec);
            return 2;
        }
    for (int k = 0; k < n_sf; k++)
        if (sf[k].layer < 0) {
            fprintf(stderr, "genparity generate: --steer-vector %s needs a --steer-layer\n", sf[k].spec);
            return 2;
        }
    int json = !strcmp(format, "json");
    if (!json && strcmp(format, "text")) {
        fprintf(stderr, "genparity generate: --format must be text or json\n");
        return 2;
    }
    if ((prompt != NULL) + (prompt_ids != NULL) + (prompts_file != NULL) != 1) {
        fprintf(stderr, "genparity generate: give exactly one of --prompt, --prompt-ids or --prompts-file\n");
        return 2;
    }
    if (prompts_file && (n_sf || lb_spec || prompt_cache)) {
        fprintf(stderr, "genparity generate: --prompts-file does not take steering flags or --prompt-cache\n");
        return 2;
    }
    if (!model_dir) model_dir = cli_default_model();

    int32_t *ids = NULL, n_ids = 0;
    if (prompt_ids && (cli_parse_ids(prompt_ids, &ids, &n_ids) || n_ids == 0)) {
        fprintf(stderr, "genparity generate: --prompt-ids expects comma-separated ids, got '%s'\n", prompt_ids);
        gp_free(ids);
        return 2;
    }
    gp_model *m = NULL;
    if (cli_model_load(model_dir, &m) != GP_OK) {
        gp_free(ids);
        return cli_fail("loading the model");
    }
    if (mlock && gp_model_mlock(m) != GP_OK) {
        gp_free(ids);
        gp_model_free(m);
        return cli_fail("--mlock");
    }
    int rc = 1;
    gp_ctx *c = NULL;
    gp_gen_result r = {0};
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (prompts_file) {
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = max_tokens;
        g.ignore_eos = ignore_eos;
        cli_apply_gen_flags(argc, argv, &g);
        rc = cli_generate_prompts_file(m, &cp, &g, prompts_file, json, batch_size);
        goto done;
    }
    if (!prompt_ids) {
        if (!tok) {
            fprintf(stderr, "genparity generate: %s has no tokenizer.json; use --prompt-ids\n", model_dir);
            goto done;
        }
        if (gp_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids) != GP_OK) {
            cli_fail("encoding the prompt");
            goto done;
        }
        if (n_ids == 0) {
            fprintf(stderr, "genparity generate: the prompt encodes to no tokens\n");
            rc = 2;
            goto done;
        }
    }
    if (gp_ctx_init(m, &cp, &c) != GP_OK) {
        cli_fail("creating the context");
        goto done;
    }
    if (apply_steering(c, m, sf, n_sf, lb_spec, lb_alpha)) goto done;
    if (prompt_cache) {
        if (gp_ctx_cache_load(c, prompt_cache) != GP_OK) {
            cli_fail("loading --prompt-cache");
            goto done;
        }
        int32_t nc;
        const int32_t *cached = gp_ctx_tokens(c, &nc);
        if (nc > n_ids || memcmp(cached, ids, (size_t)nc * sizeof *ids)) {
            fprintf(stderr, "genparity generate: the prompt (%d tokens) does not extend the %d tokens cached in %s\n",
                    n_ids, nc, prompt_cache);
            goto done;
        }
    }
    gp_gen_config g = gp_model_gen_config(m);
    g.max_new_tokens = max_tokens;
    g.ignore_eos = ignore_eos;
    cli_apply_gen_flags(argc, argv, &g);

    int32_t cached_before = gp_ctx_n_past(c);
    stream_state st = {tok != NULL, !json && !resample}; /* a resampled run prints at the end */
    char extra[160];
    gp_status s = generate_guarded(c, ids, n_ids, &g, resample, &st, &r, extra, sizeof extra);
    if (s != GP_OK) {
        cli_fail("generating");
        goto done;
    }
    rc = 0;
    if (json) {
        cli_print_result_json(&r, ids, n_ids, c, cached_before, extra);
    } else {
        if (resample && r.text) fwrite(r.text, 1, r.text_len, stdout);
        putchar('\n');
    }
done:
    cli_gen_flags_free();
    gp_gen_result_free(&r);
    gp_ctx_free(c);
    gp_free(ids);
    gp_model_free(m);
    return rc;
}
