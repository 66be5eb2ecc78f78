/* gen_batch.c — `genparity generate --prompts-file FILE`: one prompt per line (a JSON array of ids or a JSON string of
 * text), generated together with gp_generate_batch in groups of --batch-size, printed in input order (text: each
 * result's text on its own line(s); json: one object per line with the fields of a single run); and the JSON object
 * of one result, shared with the single-prompt path. */
#include "cli.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static void print_ids(const int32_t *ids, int32_t n) {
    putchar('[');
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    putchar(']');
}

void cli_print_sequences_json(const gp_gen_result *r) {
    printf(",\"sequences\":[");
    for (int32_t k = 0; k < r->n_sequences; k++) {
        if (k) putchar(',');
        print_ids(r->sequences[k].tokens, r->sequences[k].n_tokens);
    }
    printf("],\"sequence_scores\":[");
    for (int32_t k = 0; k < r->n_sequences; k++) printf("%s%.9g", k ? "," : "", (double)r->sequences[k].score);
    printf("],\"sequence_texts\":[");
    for (int32_t k = 0; k < r->n_sequences; k++) {
        if (k) putchar(',');
        const gp_gen_sequence *q = &r->sequences[k];
        cli_json_string(stdout, q->text ? q->text : "", q->text ? q->text_len : 0);
    }
    putchar(']');
}

void cli_print_logprobs_json(const gp_gen_result *r) {
    printf(",\"logprobs\":[");
    for (int32_t k = 0; k < r->n_tokens; k++) {
        printf("%s{\"id\":%d,\"logprob\":%.9g", k ? "," : "", r->tokens[k], (double)r->logprobs[k]);
        if (r->top_logprobs) {
            printf(",\"top\":[");
            for (int32_t t = 0; t < r->n_top; t++) {
                const gp_top_logprob *e = &r->top_logprobs[(size_t)k * (size_t)r->n_top + (size_t)t];
                printf("%s{\"id\":%d,\"logprob\":%.9g}", t ? "," : "", e->id, (double)e->logprob);
            }
            putchar(']');
        }
        putchar('}');
    }
    putchar(']');
}

void cli_print_result_json(const gp_gen_result *r, const int32_t *ids, int32_t n_ids, const gp_ctx *c,
                           int32_t cached_before, const char *extra) {
    printf("{\"prompt_ids\":");
    print_ids(ids, n_ids);
    printf(",\"tokens\":");
    print_ids(r->tokens, r->n_tokens);
    printf(",\"text\":");
    cli_json_string(stdout, r->text ? r->text : "", r->text ? r->text_len : 0);
    if (r->n_sequences > 0) cli_print_sequences_json(r);
    if (r->logprobs) cli_print_logprobs_json(r);
    int gen_steps = r->n_tokens > 0 ? r->n_tokens - 1 : 0; /* the first token comes from the prefill */
    printf(",\"finish_reason\":\"%s\",\"prompt_tokens_per_s\":%.3f,\"generation_tokens_per_s\":%.3f,"
           "\"peak_memory_bytes\":%llu,\"kv_cache_bytes\":%llu,\"prompt_cache_tokens\":%d%s}\n",
           gp_finish_reason_str(r->finish_reason), r->prompt_seconds > 0 ? r->n_prompt / r->prompt_seconds : 0.0,
           r->gen_seconds > 0 ? gen_steps / r->gen_seconds : 0.0, (unsigned long long)gp_mem_peak_rss(),
           (unsigned long long)gp_ctx_kv_bytes(c), cached_before, extra ? extra : "");
}

/* One prompt of the file: ids, from an array or by encoding a string. */
typedef struct prompt_line {
    int32_t *ids;
    int32_t n;
} prompt_line;

/* Parses line `no` of path into *p.  Returns 0, or prints and returns 2. */
static int parse_line(const char *path, int no, const char *line, const gp_model *m, prompt_line *p) {
    cJSON *j = cJSON_Parse(line);
    int rc = 0;
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    if (cJSON_IsArray(j)) {
        int n = cJSON_GetArraySize(j), i = 0;
        p->ids = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        const cJSON *e;
        cJSON_ArrayForEach(e, j) {
            if (!p->ids || !cJSON_IsNumber(e) || e->valuedouble != (double)(int32_t)e->valuedouble || e->valuedouble < 0)
                rc = 2;
            else p->ids[i++] = (int32_t)e->valuedouble;
        }
        p->n = i;
        if (n == 0) rc = 2;
    } else if (cJSON_IsString(j) && tok) {
        if (gp_tokenizer_encode(tok, j->valuestring, strlen(j->valuestring), 1, &p->ids, &p->n) != GP_OK || !p->n)
            rc = 2;
    } else rc = 2;
    cJSON_Delete(j);
    if (rc)
        fprintf(stderr, "%s: %s line %d must be a non-empty JSON array of token ids or a JSON string of text%s\n",
                "genparity generate", path, no, tok ? "" : " (the model has no tokenizer: ids only)");
    return rc;
}

/* Reads every prompt of path.  Returns the count (>= 1) or -1 after printing. */
static int read_prompts(const char *path, const gp_model *m, prompt_line **out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open --prompts-file %s\n", "genparity generate", path);
        return -1;
    }
    prompt_line *v = NULL;
    int n = 0, cap = 0, no = 0, rc = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while (!rc && (len = getline(&line, &lcap, f)) >= 0) {
        no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
        if (!len) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            prompt_line *w = realloc(v, (size_t)cap * sizeof *v);
            if (!w) break;
            v = w;
        }
        v[n] = (prompt_line){NULL, 0};
        rc = parse_line(path, no, line, m, &v[n]);
        n++;
    }
    free(line);
    fclose(f);
    if (!rc && n == 0) {
        fprintf(stderr, "%s: --prompts-file %s has no prompts\n", "genparity generate", path);
        rc = 2;
    }
    if (rc) {
        for (int i = 0; i < n; i++) free(v[i].ids);
        free(v);
        return -1;
    }
    *out = v;
    return n;
}

int cli_generate_prompts_file(gp_model *m, const gp_ctx_params *cp, const gp_gen_config *g, const char *path,
                              int json, int32_t batch_size) {
    prompt_line *p = NULL;
    int n = read_prompts(path, m, &p);
    if (n < 0) return 2;
    if (batch_size < 1) batch_size = 8;
    int rc = 0;
    gp_ctx **cs = calloc((size_t)batch_size, sizeof *cs);
    gp_batch_seq *b = calloc((size_t)batch_size, sizeof *b);
    gp_gen_result *r = calloc((size_t)batch_size, sizeof *r);
    gp_status *st = calloc((size_t)batch_size, sizeof *st);
    for (int k = 0; cs && b && r && st && k < batch_size && k < n && !rc; k++)
        if (gp_ctx_init(m, cp, &cs[k]) != GP_OK) rc = cli_fail("creating the contexts");
    for (int at = 0; at < n && !rc && cs && b && r && st; at += batch_size) {
        int nb = n - at < batch_size ? n - at : batch_size;
        for (int k = 0; k < nb; k++) {
            gp_ctx_reset(cs[k]);
            b[k] = (gp_batch_seq){cs[k], p[at + k].ids, p[at + k].n, g, NULL, NULL};
        }
        gp_status s = gp_generate_batch(b, nb, r, st);
        if (s != GP_OK && s != GP_ERR_CANCELLED) rc = cli_fail("generating");
        for (int k = 0; k < nb; k++) {
            if (!rc) {
                if (json) cli_print_result_json(&r[k], p[at + k].ids, p[at + k].n, cs[k], 0, NULL);
                else printf("%s\n", r[k].text ? r[k].text : "");
            }
            gp_gen_result_free(&r[k]);
        }
        fflush(stdout);
    }
    if (!cs || !b || !r || !st) rc = cli_fail("allocating the batch");
    for (int k = 0; cs && k < batch_size; k++) gp_ctx_free(cs[k]);
    for (int i = 0; i < n; i++) gp_free(p[i].ids);
    free(p);
    free(cs);
    free(b);
    free(r);
    free(st);
    return rc;
}
