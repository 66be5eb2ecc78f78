/* cmd_generate.c — `genparity generate`: load a model, run a prompt, print text (streamed) or one JSON object with
 * prompt_ids, tokens, text, finish_reason, prompt_tokens_per_s, generation_tokens_per_s, peak_memory_bytes. */
#include "cli.h"

#include <stdio.h>
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
            "  --threads N          worker threads (default: all CPUs)\n"
            "  --prefill-chunk N    prompt tokens per batched forward (default 512; results do not depend on it)\n"
            "  --n-ctx N            KV cache positions (default: max_position_embeddings)\n"
            "\n");
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

int cmd_generate(int argc, char **argv) {
    const char *model_dir = NULL, *prompt = NULL, *prompt_ids = NULL, *format = "text";
    int32_t max_tokens = 64, threads = 0, chunk = 0, n_ctx = 0, ignore_eos = 0;
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
        if (gf < 0) {
            cli_gen_flags_free();
            return 2;
        }
        if (gf > 0) continue;
        if (!v) {
            fprintf(stderr, "genparity generate: unknown flag or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) model_dir = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids = v;
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--max-tokens")) { if (parse_int(a, v, 0, &max_tokens)) return 2; }
        else if (!strcmp(a, "--threads")) { if (parse_int(a, v, 0, &threads)) return 2; }
        else if (!strcmp(a, "--prefill-chunk")) { if (parse_int(a, v, 1, &chunk)) return 2; }
        else if (!strcmp(a, "--n-ctx")) { if (parse_int(a, v, 1, &n_ctx)) return 2; }
        else {
            fprintf(stderr, "genparity generate: unknown flag %s (see --help)\n", a);
            return 2;
        }
        i++;
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
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (!prompt_ids) {
        if (!tok) {
            fprintf(stderr, "genparity generate: %s has no tokenizer.json; use --prompt-ids\n", model_dir);
            gp_model_free(m);
            return 1;
        }
        if (gp_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids) != GP_OK) {
            gp_model_free(m);
            return cli_fail("encoding the prompt");
        }
        if (n_ids == 0) {
            fprintf(stderr, "genparity generate: the prompt encodes to no tokens\n");
            gp_free(ids);
            gp_model_free(m);
            return 2;
        }
    }
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = threads;
    if (chunk) cp.prefill_chunk = chunk;
    cp.n_ctx = n_ctx;
    gp_ctx *c = NULL;
    if (gp_ctx_init(m, &cp, &c) != GP_OK) {
        free(ids);
        gp_model_free(m);
        return cli_fail("creating the context");
    }
    gp_gen_config g = gp_model_gen_config(m);
    g.max_new_tokens = max_tokens;
    g.ignore_eos = ignore_eos;
    for (int i = 1; i < argc; i++) /* the sampling flags, over the model's generation config */
        if (cli_gen_flag(argc, argv, &i, &g) == 0 && strcmp(argv[i], "--ignore-eos") && strcmp(argv[i], "--help"))
            i++;

    stream_state st = {tok != NULL, !json};
    gp_gen_result r;
    gp_status s = gp_generate(c, ids, n_ids, &g, on_token, &st, &r);
    int rc = 0;
    if (s != GP_OK) {
        rc = cli_fail("generating");
    } else if (json) {
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
               "\"peak_memory_bytes\":%lld}\n",
               gp_finish_reason_str(r.finish_reason), r.prompt_seconds > 0 ? r.n_prompt / r.prompt_seconds : 0.0,
               r.gen_seconds > 0 ? gen_steps / r.gen_seconds : 0.0, (long long)ru.ru_maxrss * 1024LL);
    } else {
        putchar('\n');
    }
    cli_gen_flags_free();
    gp_gen_result_free(&r);
    gp_ctx_free(c);
    gp_free(ids);
    gp_model_free(m);
    return rc;
}
