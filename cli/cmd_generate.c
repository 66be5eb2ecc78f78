/* cmd_generate.c — `genparity generate`: load a model, run a prompt, print text (streamed) or one JSON object with
 * prompt_ids, tokens, text, finish_reason, prompt_tokens_per_s, generation_tokens_per_s, peak_memory_bytes. */
#include "cli.h"
#include "util/util.h"

#include <stdio.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: genparity generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3 | --messages FILE.json) [options]\n"
            "\n"
            "  --model DIR|NAME     Hugging Face model folder, or org/name[@revision] from the HF cache (offline)\n"
            "                       (default: the embedded models/shakespeare-llama)\n"
            "  --prompt TEXT        prompt text, encoded like transformers with add_special_tokens=True\n"
            "  --prompt-ids LIST    prompt as comma-separated token ids\n"
            "  --max-tokens N       new tokens to generate, >= 1 (default 64)\n"
            "  --ignore-eos         do not stop at the model's EOS ids\n"
            "  --format text|json   text streams as tokens arrive; json prints one object at the end\n"
            "  --prompt-cache FILE  start from a KV cache file (genparity cache build); the prompt must extend it\n"
            "  --prompts-file FILE  one prompt per line (JSON array of ids or JSON string), generated together\n"
            "  --batch-size N       prompts of --prompts-file decoded together (default 8)\n"
            "  --mlock              pin the weights in RAM (refused when RLIMIT_MEMLOCK does not allow it)\n"
            "  --resample-on-suspect  when a generated line looks pathological (gp_text_suspect), draw once more\n"
            "                       with the next seed and keep that (json: resampled, suspect_lines, lines)\n"
            "\n"
            "  --adapter DIR[:SCALE]  LoRA adapter folder (mlx-lm or PEFT layout), its scale multiplied by SCALE;\n"
            "                       repeatable (terms add up); applied unfused, the model is not modified\n"
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
    cli_chat_flags_help(f);
    fprintf(f, "\n");
    cli_ctx_flags_help(f);
    fprintf(f, "\n");
    cli_gen_flags_help(f);
}

typedef struct stream_state {
    int has_text; /* the model has a tokenizer: print text pieces, else ids */
    int text;     /* streaming text to stdout */
    const gp_tokenizer *stop_special; /* --stop-on-special: stop after any special token */
    int stopped;
} stream_state;

static int on_token(const gp_token_event *ev, void *ud) {
    stream_state *st = ud;
    if (st->stop_special && gp_tokenizer_is_special(st->stop_special, ev->id)) st->stopped = 1;
    if (!st->text) return st->stopped;
    if (st->has_text) fwrite(ev->piece, 1, ev->piece_len, stdout);
    else printf("%d ", ev->id);
    fflush(stdout);
    return st->stopped;
}


/* One --steer-vector hook as given on the command line; --steer-layer/--steer-alpha/--steer-ramp after it apply to it. */
typedef struct steer_flag {
    const char *spec;
    int32_t layer, ramp, warmup;
    double alpha;
} steer_flag;
#define MAX_STEER 16

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

/* Command-line options. */
typedef struct gopts {
    const char *model_dir, *prompt, *prompt_ids, *format, *prompt_cache, *lb_spec, *prompts_file;
    double lb_alpha;
    int32_t max_tokens, ignore_eos, mlock, resample, batch_size;
    steer_flag sf[MAX_STEER];
    int n_sf;
    gp_ctx_params cp;
    cli_chat_opts co; /* --messages, --tools, --kwargs, --now, --continue, --save-cache, --stop-on-special */
    cli_adapters ad;  /* --adapter DIR[:SCALE] */
} gopts;

/* One flag that takes a value (argv[*i] = flag, value consumed).  Returns 0, or 2 after printing. */
static int parse_valued(gopts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    static const char *const known[] = {"--model", "--prompt", "--prompt-ids", "--prompt-cache", "--format",
                                        "--max-tokens", "--steer-vector", "--steer-layer", "--steer-alpha",
                                        "--steer-ramp", "--logit-bias-vector", "--logit-bias-alpha",
                                        "--steer-warmup", "--prompts-file", "--batch-size"};
    int k = -1;
    for (int j = 0; j < (int)(sizeof known / sizeof known[0]); j++)
        if (!strcmp(a, known[j])) k = j;
    if (k < 0) return cli_unknown(a);
    const char *v = cli_value(argc, argv, i);
    if (!v) return 2;
    if (((k >= 7 && k <= 9) || k == 12) && !o->n_sf) {
        fprintf(stderr, "%s: %s must follow a --steer-vector\n", cli_prog, a);
        return 2;
    }
    steer_flag *last = o->n_sf ? &o->sf[o->n_sf - 1] : NULL;
    int bad = 0;
    switch (k) {
    case 0: o->model_dir = v; break;
    case 1: o->prompt = v; break;
    case 2: o->prompt_ids = v; break;
    case 3: o->prompt_cache = v; break;
    case 4: o->format = v; break;
    case 5: bad = cli_i32(a, v, 1, 1 << 30, &o->max_tokens); break; /* 0 / negative: an error, as transformers */
    case 6:
        if (o->n_sf == MAX_STEER) {
            fprintf(stderr, "%s: at most %d --steer-vector hooks\n", cli_prog, MAX_STEER);
            return 2;
        }
        o->sf[o->n_sf++] = (steer_flag){v, -1, 0, 0, 1.0};
        break;
    case 7: bad = cli_i32(a, v, 0, INT32_MAX, &last->layer); break;
    case 8: bad = cli_f64(a, v, -1e30, 1e30, &last->alpha); break;
    case 9: bad = cli_i32(a, v, 0, INT32_MAX, &last->ramp); break;
    case 10: o->lb_spec = v; break;
    case 11: bad = cli_f64(a, v, -1e30, 1e30, &o->lb_alpha); break;
    case 12: bad = cli_i32(a, v, 1, INT32_MAX, &last->warmup); break;
    case 13: o->prompts_file = v; break;
    case 14: bad = cli_i32(a, v, 1, 4096, &o->batch_size); break;
    }
    return bad ? 2 : 0;
}

/* Returns -1 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, gopts *o) {
    gp_gen_config scratch = gp_gen_config_default(); /* sampling flags are checked here, applied after loading */
    *o = (gopts){.format = "text", .lb_alpha = 1.0, .max_tokens = 64, .batch_size = 8, .cp = gp_ctx_default_params()};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 0;
        if (!strcmp(a, "--ignore-eos") || !strcmp(a, "--mlock") || !strcmp(a, "--resample-on-suspect")) {
            *(a[2] == 'i' ? &o->ignore_eos : a[2] == 'm' ? &o->mlock : &o->resample) = 1;
            continue;
        }
        int gf = cli_adapter_flag(argc, argv, &i, &o->ad);
        if (gf == 0) gf = cli_chat_flag(argc, argv, &i, &o->co);
        if (gf == 0) gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf == 0) gf = cli_ctx_flag(argc, argv, &i, &o->cp);
        if (gf < 0) return 2;
        if (gf > 0) continue;
        int rc = parse_valued(o, argc, argv, &i);
        if (rc) return rc;
    }
    for (int k = 0; k < o->n_sf; k++) {
        if (o->sf[k].layer < 0) return cli_missing("--steer-layer", "each --steer-vector needs one");
        if (o->sf[k].ramp > 0 && o->sf[k].warmup > 0) {
            fprintf(stderr, "%s: --steer-vector %s: give --steer-ramp or --steer-warmup, not both\n", cli_prog,
                    o->sf[k].spec);
            return 2;
        }
    }
    if (strcmp(o->format, "json") && strcmp(o->format, "text")) {
        fprintf(stderr, "%s: --format must be text or json, got '%s'\n", cli_prog, o->format);
        return 2;
    }
    if (!o->prompt && !o->prompt_ids && !o->co.messages && !o->prompts_file)
        return cli_missing("--prompt", "or --prompt-ids or --messages or --prompts-file");
    if ((o->prompt != NULL) + (o->prompt_ids != NULL) + (o->co.messages != NULL) + (o->prompts_file != NULL) > 1) {
        fprintf(stderr, "%s: give only one of --prompt, --prompt-ids, --messages or --prompts-file\n", cli_prog);
        return 2;
    }
    if (o->prompts_file && (o->n_sf || o->lb_spec || o->prompt_cache)) {
        fprintf(stderr, "%s: --prompts-file does not take steering flags or --prompt-cache\n", cli_prog);
        return 2;
    }
    if (!o->model_dir) o->model_dir = cli_default_model();
    return -1;
}

/* The prompt's ids: --prompt-ids as given, else --prompt encoded.  Returns -1 to go on, else the exit code. */
static int prompt_tokens(const gopts *o, const gp_tokenizer *tok, int32_t **ids, int32_t *n_ids) {
    if (o->prompt_ids) return -1; /* parsed before loading */
    if (o->co.messages) return cli_chat_prompt(&o->co, o->model_dir, tok, ids, n_ids) ? 1 : -1;
    if (!tok) {
        fprintf(stderr, "%s: %s has no tokenizer.json; use --prompt-ids\n", cli_prog, o->model_dir);
        return 1;
    }
    if (gp_tokenizer_encode(tok, o->prompt, strlen(o->prompt), !o->co.cont, ids, n_ids) != GP_OK) /* appended: no BOS */
        return cli_fail("encoding the prompt");
    if (*n_ids == 0) {
        fprintf(stderr, "%s: the prompt encodes to no tokens\n", cli_prog);
        return 2;
    }
    return -1;
}

/* Starts c from --prompt-cache, which the prompt must extend (unless --continue appends it).  Returns -1 to go on,
 * else the exit code. */
static int load_prompt_cache(const gopts *o, gp_ctx *c, const int32_t *ids, int32_t n_ids) {
    if (!o->prompt_cache) return -1;
    if (gp_ctx_cache_load(c, o->prompt_cache) != GP_OK) return cli_fail("loading --prompt-cache");
    int32_t nc;
    const int32_t *cached = gp_ctx_tokens(c, &nc);
    if (!o->co.cont && (nc > n_ids || memcmp(cached, ids, (size_t)nc * sizeof *ids))) {
        fprintf(stderr, "%s: the prompt (%d tokens) does not extend the %d tokens cached in %s (give the whole text, "
                "or --continue to append it after them)\n", cli_prog, n_ids, nc, o->prompt_cache);
        return 1;
    }
    return -1;
}

static void print_ids(const int32_t *ids, int32_t n) {
    putchar('[');
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    putchar(']');
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

/* The one JSON object of --format json. */
static void print_json(const gp_gen_result *r, const int32_t *ids, int32_t n_ids, const gp_ctx *c,
                       int32_t cached_before, const gopts *o, int stopped_on_special, const char *extra) {
    printf("{\"prompt_ids\":");
    print_ids(ids, n_ids);
    printf(",\"tokens\":");
    print_ids(r->tokens, r->n_tokens);
    printf(",\"text\":");
    cli_json_string(stdout, r->text ? r->text : "", r->text ? r->text_len : 0);
    if (r->logprobs) cli_print_logprobs_json(r);
    if (r->n_sequences > 0) cli_print_sequences_json(r);
    if (o->co.messages) cli_print_reply_fields(stdout, r->text, r->text ? r->text_len : 0);
    int gen_steps = r->n_tokens > 0 ? r->n_tokens - 1 : 0; /* the first token comes from the prefill */
    printf(",\"finish_reason\":\"%s\",\"prompt_tokens_per_s\":%.3f,\"generation_tokens_per_s\":%.3f,"
           "\"peak_memory_bytes\":%llu,\"kv_cache_bytes\":%llu,\"prompt_cache_tokens\":%d%s}\n",
           stopped_on_special ? "stop" : gp_finish_reason_str(r->finish_reason), r->prompt_seconds > 0 ? r->n_prompt / r->prompt_seconds : 0.0,
           r->gen_seconds > 0 ? gen_steps / r->gen_seconds : 0.0, (unsigned long long)gp_mem_peak_rss(),
           (unsigned long long)gp_ctx_kv_bytes(c), cached_before, extra ? extra : "");
}

/* Loads the model, builds the context, generates and prints.  Returns the exit code. */
static int run(const gopts *o, int argc, char **argv, int32_t *ids, int32_t n_ids) {
    gp_model *m = NULL;
    gp_ctx *c = NULL;
    gp_gen_result r = {0};
    if (cli_model_load(o->model_dir, &m) != GP_OK) {
        gp_free(ids);
        return cli_fail("loading the model");
    }
    if (o->mlock && gp_model_mlock(m) != GP_OK) {
        gp_free(ids);
        gp_model_free(m);
        return cli_fail("--mlock");
    }
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (o->prompts_file) {
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = o->max_tokens;
        g.ignore_eos = o->ignore_eos;
        cli_apply_gen_flags(argc, argv, &g);
        int rc = cli_generate_prompts_file(m, &o->cp, &g, o->prompts_file, !strcmp(o->format, "json"), o->batch_size);
        gp_model_free(m);
        return rc;
    }
    cli_adapters ad = o->ad; /* the flags; loaded below */
    int rc = prompt_tokens(o, tok, &ids, &n_ids);
    if (rc < 0 && gp_ctx_init(m, &o->cp, &c) != GP_OK) rc = cli_fail("creating the context");
    if (rc < 0 && (cli_adapters_load(m, &ad) || cli_adapters_set(c, &ad))) rc = 1;
    if (rc < 0 && apply_steering(c, m, o->sf, o->n_sf, o->lb_spec, o->lb_alpha)) rc = 1;
    if (rc < 0) rc = load_prompt_cache(o, c, ids, n_ids);
    if (rc < 0) {
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = o->max_tokens;
        g.ignore_eos = o->ignore_eos;
        cli_apply_gen_flags(argc, argv, &g); /* the sampling flags, over the model's generation config */
        int32_t cached_before = gp_ctx_n_past(c);
        int json = !strcmp(o->format, "json");
        stream_state st = {tok != NULL, !json && !o->resample, o->co.stop_on_special ? tok : NULL, 0};
        char extra[160] = "";
        gp_status s = o->co.cont ? gp_generate_continue(c, ids, n_ids, &g, on_token, &st, &r, NULL)
                                 : generate_guarded(c, ids, n_ids, &g, o->resample, &st, &r, extra, sizeof extra);
        if (s == GP_ERR_CANCELLED && st.stopped) s = GP_OK; /* --stop-on-special */
        if (s != GP_OK) rc = cli_fail("generating");
        else if (o->co.save_cache && gp_ctx_cache_save(c, o->co.save_cache) != GP_OK) rc = cli_fail("--save-cache");
        else if (json) print_json(&r, ids, n_ids, c, cached_before, o, st.stopped, extra), rc = 0;
        else {
            if (o->resample && r.text) fwrite(r.text, 1, r.text_len, stdout); /* a resampled run prints at the end */
            putchar('\n'), rc = 0;
        }
    }
    gp_gen_result_free(&r);
    gp_ctx_free(c);
    cli_adapters_free(&ad);
    gp_free(ids);
    gp_model_free(m);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gopts o;
    int rc = parse_args(argc, argv, &o);
    int32_t *ids = NULL, n_ids = 0;
    if (rc < 0 && o.prompt_ids && (cli_parse_ids(o.prompt_ids, &ids, &n_ids) || n_ids == 0)) {
        fprintf(stderr, "%s: --prompt-ids expects comma-separated ids, got '%s'\n", cli_prog, o.prompt_ids);
        gp_free(ids);
        rc = 2;
    }
    if (rc < 0) rc = run(&o, argc, argv, ids, n_ids);
    cli_gen_flags_free();
    return rc;
}
