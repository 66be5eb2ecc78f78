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
            "\n"
            "steering (repeatable: each --steer-vector starts a hook; the flags after it set its layer/alpha/ramp):\n"
            "  --steer-vector FILE[:TENSOR]  vector (.safetensors[:tensor], .npy or raw float32) added to a layer's output\n"
            "  --steer-layer L      0-based decoder layer whose output gets alpha * vector at every position\n"
            "  --steer-alpha A      coefficient (default 1)\n"
            "  --steer-ramp N       ramp the coefficient over N forward steps: alpha * min(1, (s+1)/N), s=0 the prefill\n"
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

static void print_ids(const int32_t *ids, int32_t n) {
    putchar('[');
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    putchar(']');
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
    int32_t layer, ramp;
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
                           .schedule = sf[k].ramp > 0 ? GP_STEER_RAMP : GP_STEER_CONSTANT, .steps = sf[k].ramp};
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

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = NULL, *prompt_ids = NULL, *format = "text", *prompt_cache = NULL;
    const char *lb_spec = NULL;
    double lb_alpha = 1.0;
    int32_t max_tokens = 64, ignore_eos = 0;
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
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--max-tokens")) bad = parse_int(a, v, 0, &max_tokens);
        else if (!strcmp(a, "--steer-vector")) {
            if (n_sf == MAX_STEER) {
                fprintf(stderr, "genparity generate: at most %d --steer-vector hooks\n", MAX_STEER);
                return 2;
            }
            sf[n_sf++] = (steer_flag){v, -1, 0, 1.0};
        } else if (!strcmp(a, "--steer-layer") || !strcmp(a, "--steer-alpha") || !strcmp(a, "--steer-ramp")) {
            if (!n_sf) {
                fprintf(stderr, "genparity generate: %s must follow a --steer-vector\n", a);
                return 2;
            }
            if (a[8] == 'l') bad = parse_int(a, v, 0, &sf[n_sf - 1].layer);
            else if (a[8] == 'r') bad = parse_int(a, v, 0, &sf[n_sf - 1].ramp);
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
        if (sf[k].layer < 0) {
            fprintf(stderr, "genparity generate: --steer-vector %s needs a --steer-layer\n", sf[k].spec);
            return 2;
        }
    int json = !strcmp(format, "json");
    if (!json && strcmp(format, "text")) {
        fprintf(stderr, "genparity generate: --format must be text or json\n");
        return 2;
    }
    if (!prompt == !prompt_ids) {
        fprintf(stderr, "genparity generate: give exactly one of --prompt or --prompt-ids\n");
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
    if (gp_model_load(model_dir, NULL, &m) != GP_OK) {
        gp_free(ids);
        return cli_fail("loading the model");
    }
    int rc = 1;
    gp_ctx *c = NULL;
    gp_gen_result r = {0};
    const gp_tokenizer *tok = gp_model_tokenizer(m);
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
    for (int i = 1; i < argc; i++) /* the sampling flags, over the model's generation config */
        if (cli_gen_flag(argc, argv, &i, &g) == 0 && strcmp(argv[i], "--ignore-eos") && strcmp(argv[i], "--help"))
            i++;

    int32_t cached_before = gp_ctx_n_past(c);
    stream_state st = {tok != NULL, !json};
    gp_status s = gp_generate(c, ids, n_ids, &g, on_token, &st, &r);
    if (s != GP_OK) {
        cli_fail("generating");
        goto done;
    }
    rc = 0;
    if (json) {
        const char *text = r.text;
        size_t tlen = r.text_len;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("{\"prompt_ids\":");
        print_ids(ids, n_ids);
        printf(",\"tokens\":");
        print_ids(r.tokens, r.n_tokens);
        printf(",\"text\":");
        cli_json_string(stdout, text ? text : "", text ? tlen : 0);
        if (r.logprobs) {
            printf(",\"logprobs\":[");
            for (int32_t k = 0; k < r.n_tokens; k++) {
                printf("%s{\"id\":%d,\"logprob\":%.9g", k ? "," : "", r.tokens[k], (double)r.logprobs[k]);
                if (r.top_logprobs) {
                    printf(",\"top\":[");
                    for (int32_t t = 0; t < r.n_top; t++) {
                        const gp_top_logprob *e = &r.top_logprobs[(size_t)k * (size_t)r.n_top + (size_t)t];
                        printf("%s{\"id\":%d,\"logprob\":%.9g}", t ? "," : "", e->id, (double)e->logprob);
                    }
                    putchar(']');
                }
                putchar('}');
            }
            putchar(']');
        }
        int gen_steps = r.n_tokens > 0 ? r.n_tokens - 1 : 0; /* the first token comes from the prefill */
        printf(",\"finish_reason\":\"%s\",\"prompt_tokens_per_s\":%.3f,\"generation_tokens_per_s\":%.3f,"
               "\"peak_memory_bytes\":%lld,\"kv_cache_bytes\":%llu,\"prompt_cache_tokens\":%d}\n",
               gp_finish_reason_str(r.finish_reason), r.prompt_seconds > 0 ? r.n_prompt / r.prompt_seconds : 0.0,
               r.gen_seconds > 0 ? gen_steps / r.gen_seconds : 0.0, (long long)ru.ru_maxrss * 1024LL,
               (unsigned long long)gp_ctx_kv_bytes(c), cached_before);
    } else {
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
