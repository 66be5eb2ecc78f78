/* gen_flags.c — the sampling / decoding flags shared by the genparity subcommands that generate: parsing one flag
 * into a gp_gen_config, the --help text, and releasing what the flags allocated (parsing and printing only). */
#include "cli.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the flags allocated (the config only borrows it), released by cli_gen_flags_free.  The CLI is one
 * single-threaded process, so this small registry is file-static. */
static void **g_allocs;
static int g_n_allocs, g_cap_allocs;
static int g_forced_greedy; /* --temp 0 seen: sampling flags do not turn sampling back on */

static void *keep(void *p) {
    if (!p) return NULL;
    if (g_n_allocs == g_cap_allocs) {
        int cap = g_cap_allocs ? 2 * g_cap_allocs : 16;
        void **q = realloc(g_allocs, (size_t)cap * sizeof *q);
        if (!q) {
            free(p);
            return NULL;
        }
        g_allocs = q;
        g_cap_allocs = cap;
    }
    g_allocs[g_n_allocs++] = p;
    return p;
}

void cli_gen_flags_free(void) {
    for (int i = 0; i < g_n_allocs; i++) free(g_allocs[i]);
    free(g_allocs);
    g_allocs = NULL;
    g_n_allocs = g_cap_allocs = 0;
    g_forced_greedy = 0;
}

void cli_gen_flags_help(FILE *f) {
    fprintf(f,
            "sampling (transformers' GenerationConfig names; defaults: the model's generation_config.json over\n"
            "transformers' own; sampling flags other than --temp 0 turn sampling on):\n"
            "  --temp T               temperature; 0 = greedy (do_sample=False)                  [1.0]\n"
            "  --top-k N              top_k; 0 = off                                            [50]\n"
            "  --top-p P              top_p                                                     [1.0]\n"
            "  --min-p P              min_p; 0 = off                                            [None]\n"
            "  --typical-p P          typical_p                                                 [1.0]\n"
            "  --epsilon E            epsilon_cutoff                                            [0.0]\n"
            "  --eta E                eta_cutoff                                                [0.0]\n"
            "  --repetition-penalty R repetition_penalty (prompt included)                      [1.0]\n"
            "  --no-repeat-ngram N    no_repeat_ngram_size                                      [0]\n"
            "  --bad-words JSON       bad_words_ids, e.g. '[[4],[7,11]]'                        [None]\n"
            "  --min-new-tokens N     min_new_tokens (EOS masked before)                        [0]\n"
            "  --stop TEXT            stop_strings; repeatable; cut from the text               [None]\n"
            "  --max-time S           max_time in seconds                                       [None]\n"
            "  --seed N               seed of genparity's generator (xoshiro256**)              [0]\n"
            "  --logprobs N           log-probability of each token and the N most likely       [off]\n"
            "not in transformers (OpenAI / mlx-lm knobs, applied after transformers' processors):\n"
            "  --frequency-penalty F  minus F x count of the token in the generated text        [0]\n"
            "  --presence-penalty F   minus F if the token occurs in the generated text         [0]\n"
            "  --logit-bias JSON      add a bias to token ids, e.g. '{\"13\": -100}'              [none]\n"
            "  --penalty-window N     penalties look at the last N tokens only (0 = all)        [0]\n");
}

static int bad_value(const char *flag, const char *want, const char *v) {
    fprintf(stderr, "%s: %s expects %s, got '%s'\n", cli_prog, flag, want, v ? v : "(nothing)");
    return -1;
}

static int parse_double(const char *v, double lo, double hi, int lo_open, int hi_open, double *out) {
    double x;
    if (cli_to_f64(v, &x)) return -1;
    if (lo_open ? !(x > lo) : !(x >= lo)) return -1;
    if (hi_open ? !(x < hi) : !(x <= hi)) return -1;
    *out = x;
    return 0;
}

static int parse_i32(const char *v, long lo, int32_t *out) {
    int64_t x;
    if (cli_to_i64(v, &x) || x < lo || x > INT32_MAX) return -1;
    *out = (int32_t)x;
    return 0;
}

static int json_id(const cJSON *e, int32_t *out) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble > INT32_MAX)
        return -1;
    *out = (int32_t)e->valuedouble;
    return 0;
}

/* '[[4],[7,11]]' -> g->bad_words_ids */
static int parse_bad_words(const char *v, gp_gen_config *g) {
    cJSON *root = cJSON_Parse(v);
    int ok = cJSON_IsArray(root) && cJSON_GetArraySize(root) > 0;
    int n = ok ? cJSON_GetArraySize(root) : 0;
    gp_token_seq *seqs = ok ? keep(calloc((size_t)n, sizeof *seqs)) : NULL;
    ok = ok && seqs;
    int i = 0;
    const cJSON *w;
    if (ok) cJSON_ArrayForEach(w, root) {
        int k = cJSON_IsArray(w) ? cJSON_GetArraySize(w) : 0;
        int32_t *ids = k > 0 ? keep(malloc((size_t)k * sizeof *ids)) : NULL;
        if (!ids) {
            ok = 0;
            break;
        }
        int j = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, w) {
            if (json_id(e, &ids[j++])) ok = 0;
        }
        seqs[i].ids = ids;
        seqs[i].n = k;
        i++;
    }
    cJSON_Delete(root);
    if (!ok) return -1;
    g->bad_words_ids = seqs;
    g->n_bad_words_ids = n;
    return 0;
}

/* '{"13": -100, "7": 2.5}' -> g->logit_bias */
static int parse_logit_bias(const char *v, gp_gen_config *g) {
    cJSON *root = cJSON_Parse(v);
    int ok = cJSON_IsObject(root);
    int n = ok ? cJSON_GetArraySize(root) : 0;
    gp_token_bias *lb = ok && n > 0 ? keep(calloc((size_t)n, sizeof *lb)) : NULL;
    ok = ok && (n == 0 || lb);
    int i = 0;
    const cJSON *e;
    if (ok) cJSON_ArrayForEach(e, root) {
        int32_t id;
        if (parse_i32(e->string, 0, &id) || !cJSON_IsNumber(e)) {
            ok = 0;
            break;
        }
        lb[i].id = id;
        lb[i].bias = e->valuedouble;
        i++;
    }
    cJSON_Delete(root);
    if (!ok) return -1;
    g->logit_bias = lb;
    g->n_logit_bias = n;
    return 0;
}

/* appends a stop string (argv outlives the config) */
static int add_stop(const char *v, gp_gen_config *g) {
    if (!v || !*v) return -1;
    int32_t n = g->n_stop_strings;
    const char **list = keep(malloc(((size_t)n + 1) * sizeof *list));
    if (!list) return -1;
    for (int32_t i = 0; i < n; i++) list[i] = g->stop_strings[i];
    list[n] = v;
    g->stop_strings = list;
    g->n_stop_strings = n + 1;
    return 0;
}

static void sampling_on(gp_gen_config *g) {
    if (!g_forced_greedy) g->do_sample = 1;
}

int cli_gen_flag(int argc, char **argv, int *i, gp_gen_config *g) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    double d;
    int32_t n;
    if (!strcmp(a, "--temp")) {
        if (parse_double(v, 0.0, INFINITY, 0, 1, &d)) return bad_value(a, "a number >= 0", v);
        if (d == 0.0) {
            g->do_sample = 0;
            g_forced_greedy = 1;
        } else {
            g->temperature = d;
            sampling_on(g);
        }
    } else if (!strcmp(a, "--top-k")) {
        if (parse_i32(v, 0, &n)) return bad_value(a, "an integer >= 0", v);
        g->top_k = n;
        sampling_on(g);
    } else if (!strcmp(a, "--top-p")) {
        if (parse_double(v, 0.0, 1.0, 0, 0, &d)) return bad_value(a, "a number in [0, 1]", v);
        g->top_p = d;
        sampling_on(g);
    } else if (!strcmp(a, "--min-p")) {
        if (parse_double(v, 0.0, 1.0, 0, 0, &d)) return bad_value(a, "a number in [0, 1]", v);
        g->min_p = d;
        sampling_on(g);
    } else if (!strcmp(a, "--typical-p")) {
        if (parse_double(v, 0.0, 1.0, 1, 0, &d)) return bad_value(a, "a number in (0, 1]", v);
        g->typical_p = d;
        sampling_on(g);
    } else if (!strcmp(a, "--epsilon")) {
        if (parse_double(v, 0.0, 1.0, 0, 1, &d)) return bad_value(a, "a number in [0, 1)", v);
        g->epsilon_cutoff = d;
        sampling_on(g);
    } else if (!strcmp(a, "--eta")) {
        if (parse_double(v, 0.0, 1.0, 0, 1, &d)) return bad_value(a, "a number in [0, 1)", v);
        g->eta_cutoff = d;
        sampling_on(g);
    } else if (!strcmp(a, "--repetition-penalty")) {
        if (parse_double(v, 0.0, INFINITY, 1, 1, &d)) return bad_value(a, "a number > 0", v);
        g->repetition_penalty = d;
    } else if (!strcmp(a, "--no-repeat-ngram")) {
        if (parse_i32(v, 0, &n)) return bad_value(a, "an integer >= 0", v);
        g->no_repeat_ngram_size = n;
    } else if (!strcmp(a, "--frequency-penalty")) {
        if (parse_double(v, -INFINITY, INFINITY, 1, 1, &d)) return bad_value(a, "a number", v);
        g->frequency_penalty = d;
    } else if (!strcmp(a, "--presence-penalty")) {
        if (parse_double(v, -INFINITY, INFINITY, 1, 1, &d)) return bad_value(a, "a number", v);
        g->presence_penalty = d;
    } else if (!strcmp(a, "--penalty-window")) {
        if (parse_i32(v, 0, &n)) return bad_value(a, "an integer >= 0", v);
        g->penalty_window = n;
    } else if (!strcmp(a, "--logit-bias")) {
        if (!v || parse_logit_bias(v, g)) return bad_value(a, "a JSON object of id -> bias like '{\"13\": -100}'", v);
    } else if (!strcmp(a, "--bad-words")) {
        if (!v || parse_bad_words(v, g)) return bad_value(a, "a JSON list of id lists like '[[4],[7,11]]'", v);
    } else if (!strcmp(a, "--stop")) {
        if (add_stop(v, g)) return bad_value(a, "a non-empty string", v);
    } else if (!strcmp(a, "--min-new-tokens")) {
        if (parse_i32(v, 0, &n)) return bad_value(a, "an integer >= 0", v);
        g->min_new_tokens = n;
    } else if (!strcmp(a, "--max-time")) {
        if (parse_double(v, 0.0, INFINITY, 0, 1, &d)) return bad_value(a, "a number of seconds >= 0", v);
        g->max_time = d;
    } else if (!strcmp(a, "--seed")) {
        uint64_t s;
        if (cli_to_u64(v, &s)) return bad_value(a, "a non-negative integer", v);
        g->seed = s;
    } else if (!strcmp(a, "--logprobs")) {
        if (parse_i32(v, 0, &n)) return bad_value(a, "an integer >= 0 (alternatives per token)", v);
        g->logprobs = 1;
        g->top_logprobs = n;
    } else {
        return 0;
    }
    *i += 1; /* the value */
    return 1;
}
