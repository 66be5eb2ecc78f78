/* cmd_check_models.c — `genparity check-models`: the multi-model check.  Runs every --model (a folder or a hub name)
 * on the same prompts with the same settings and reports per model the load time, prompt and generation tokens/s,
 * peak memory (reset between models), each output, the suspect-line rate and failures (a model that fails is a row
 * with its error; the run goes on), as Markdown, a self-contained HTML page with inline SVG bar charts of speed and
 * memory, or JSON. */
#include "cli.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MODELS 64
#define MAX_PROMPTS 256

typedef struct model_row {
    const char *name;
    char error[512];      /* "" when the model ran */
    double load_s, prompt_tps, gen_tps;
    uint64_t peak_bytes;
    int lines, suspect;
    char **texts;         /* [n_prompts] */
    int32_t *n_tokens;    /* [n_prompts] */
    const char **finish;  /* [n_prompts] */
} model_row;

static void help(FILE *f) {
    fprintf(f,
            "usage: genparity check-models --model DIR|NAME [--model ...] (--prompt TEXT ... | --prompts FILE)\n"
            "                              [--max-tokens N] [--format md|html|json] [-o FILE] [sampling flags]\n"
            "\n"
            "Runs every model on the same prompts with the same settings; reports per model the load time, prompt\n"
            "and generation tokens/s, peak memory (reset between models), the outputs, the suspect-line rate\n"
            "(gp_text_suspect) and failures (a model that fails is a row with its error; the others still run).\n"
            "  --model DIR|NAME     a folder or a Hugging Face name org/name[@revision] (offline); repeatable\n"
            "  --prompt TEXT        a prompt; repeatable\n"
            "  --prompts FILE       one prompt per line (a line starting with '\"' is a JSON string)\n"
            "  --max-tokens N       new tokens per prompt (default 48)\n"
            "  --format md|html|json  Markdown table (default), a self-contained HTML page with bar charts, or JSON\n"
            "  -o FILE              write the report to FILE instead of stdout\n"
            "  --mlock              pin each model's weights (a refusal is that model's error)\n"
            "  --threads N          worker threads\n"
            "Exit code: 0 when every model ran, 1 when one failed, 2 on a usage error.\n\n");
    cli_gen_flags_help(f);
}

/* Runs one model over the prompts into *row. */
static void run_model(model_row *row, char **prompts, int n_prompts, int argc, char **argv, int32_t max_tokens,
                      int mlock, int32_t threads) {
    gp_mem_peak_reset();
    double t0 = gp_now();
    gp_model *m = NULL;
    gp_ctx *c = NULL;
    if (cli_model_load(row->name, &m) != GP_OK || (mlock && gp_model_mlock(m) != GP_OK)) {
        snprintf(row->error, sizeof row->error, "%s", gp_errmsg());
        gp_model_free(m);
        return;
    }
    row->load_s = gp_now() - t0;
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = threads;
    if (!tok) snprintf(row->error, sizeof row->error, "the model has no tokenizer.json");
    else if (gp_ctx_init(m, &cp, &c) != GP_OK) snprintf(row->error, sizeof row->error, "%s", gp_errmsg());
    double p_tok = 0, p_s = 0, g_tok = 0, g_s = 0;
    for (int i = 0; !row->error[0] && i < n_prompts; i++) {
        int32_t *ids = NULL, n = 0;
        gp_gen_config g = gp_model_gen_config(m);
        g.max_new_tokens = max_tokens;
        cli_apply_gen_flags(argc, argv, &g);
        gp_gen_result r = {0};
        gp_ctx_reset(c);
        if (gp_tokenizer_encode(tok, prompts[i], strlen(prompts[i]), 1, &ids, &n) != GP_OK || n == 0 ||
            gp_generate(c, ids, n, &g, NULL, NULL, &r) != GP_OK) {
            snprintf(row->error, sizeof row->error, "prompt %d: %s", i + 1, n ? gp_errmsg() : "encodes to no tokens");
        } else {
            p_tok += r.n_prompt, p_s += r.prompt_seconds;
            g_tok += r.n_tokens > 1 ? r.n_tokens - 1 : 0, g_s += r.gen_seconds;
            int lines = 0;
            row->suspect += cli_suspect_lines(r.text, r.text ? r.text_len : 0, &lines);
            row->lines += lines;
            row->texts[i] = r.text ? strdup(r.text) : strdup("");
            row->n_tokens[i] = r.n_tokens;
            row->finish[i] = gp_finish_reason_str(r.finish_reason);
        }
        gp_gen_result_free(&r);
        gp_free(ids);
    }
    row->prompt_tps = p_s > 0 ? p_tok / p_s : 0;
    row->gen_tps = g_s > 0 ? g_tok / g_s : 0;
    row->peak_bytes = gp_mem_peak_rss();
    gp_ctx_free(c);
    gp_model_free(m);
}

/* Markdown / HTML table cell text: newlines as spaces, '|' escaped (md) or HTML-escaped, cut at max bytes. */
static void put_cell(FILE *f, const char *s, int html, size_t max) {
    size_t n = 0;
    for (; s && *s && n < max; s++, n++) {
        char ch = *s == '\n' || *s == '\r' || *s == '\t' ? ' ' : *s;
        if (html && ch == '<') fputs("&lt;", f);
        else if (html && ch == '>') fputs("&gt;", f);
        else if (html && ch == '&') fputs("&amp;", f);
        else if (!html && ch == '|') fputs("\\|", f);
        else fputc(ch, f);
    }
    if (s && *s) fputs("…", f);
}

static double suspect_pct(const model_row *r) { return r->lines ? 100.0 * r->suspect / r->lines : 0.0; }

static void report_md(FILE *f, const model_row *rows, int n, char **prompts, int n_prompts, int32_t max_tokens) {
    fprintf(f, "# check-models: %d model(s), %d prompt(s), %d new tokens each\n\n", n, n_prompts, (int)max_tokens);
    fprintf(f, "| model | status | load s | prompt tok/s | generation tok/s | peak memory MB | suspect lines %% | "
               "first output |\n|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const model_row *r = &rows[i];
        fprintf(f, "| ");
        put_cell(f, r->name, 0, 200);
        if (r->error[0]) {
            fprintf(f, " | failed: ");
            put_cell(f, r->error, 0, 400);
            fprintf(f, " | - | - | - | - | - | - |\n");
            continue;
        }
        fprintf(f, " | ok | %.3f | %.1f | %.1f | %.1f | %.1f | ", r->load_s, r->prompt_tps, r->gen_tps,
                r->peak_bytes / 1e6, suspect_pct(r));
        put_cell(f, r->texts[0], 0, 80);
        fprintf(f, " |\n");
    }
    for (int p = 0; p < n_prompts; p++) {
        fprintf(f, "\n## Prompt %d: ", p + 1);
        put_cell(f, prompts[p], 0, 200);
        fprintf(f, "\n\n");
        for (int i = 0; i < n; i++)
            if (!rows[i].error[0] && rows[i].texts[p]) {
                fprintf(f, "- **");
                put_cell(f, rows[i].name, 0, 200);
                fprintf(f, "** (%d tokens, %s): ", rows[i].n_tokens[p], rows[i].finish[p]);
                put_cell(f, rows[i].texts[p], 0, 2000);
                fputc('\n', f);
            }
    }
}

/* One horizontal SVG bar chart of v[i] for the rows that ran. */
static void svg_bars(FILE *f, const model_row *rows, int n, const char *title, const char *unit, int mem) {
    double max = 0;
    for (int i = 0; i < n; i++) {
        double v = mem ? rows[i].peak_bytes / 1e6 : rows[i].gen_tps;
        if (!rows[i].error[0] && v > max) max = v;
    }
    int h = 30 + 24 * n;
    fprintf(f, "<figure><figcaption>%s</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" "
               "height=\"%d\" role=\"img\">\n", title, h);
    for (int i = 0; i < n; i++) {
        double v = rows[i].error[0] ? 0 : mem ? rows[i].peak_bytes / 1e6 : rows[i].gen_tps;
        double w = max > 0 ? 440.0 * v / max : 0;
        int y = 10 + 24 * i;
        fprintf(f, "<text x=\"0\" y=\"%d\" font-size=\"12\">", y + 14);
        put_cell(f, rows[i].name, 1, 32);
        fprintf(f, "</text><rect x=\"220\" y=\"%d\" width=\"%.1f\" height=\"18\" fill=\"%s\"/>", y, w,
                mem ? "#d9822b" : "#2b7bd9");
        if (rows[i].error[0]) fprintf(f, "<text x=\"224\" y=\"%d\" font-size=\"12\">failed</text>\n", y + 14);
        else fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\">%.1f %s</text>\n", 226 + w, y + 14, v, unit);
    }
    fprintf(f, "</svg></figure>\n");
}

static void report_html(FILE *f, const model_row *rows, int n, char **prompts, int n_prompts, int32_t max_tokens) {
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>genparity check-models</title><style>"
               "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
               "padding:4px 8px;vertical-align:top}.fail{color:#b00}</style></head><body>\n");
    fprintf(f, "<h1>check-models</h1><p>%d model(s), %d prompt(s), %d new tokens each.</p>\n", n, n_prompts,
            (int)max_tokens);
    svg_bars(f, rows, n, "generation tokens/s", "tok/s", 0);
    svg_bars(f, rows, n, "peak memory (MB)", "MB", 1);
    fprintf(f, "<table><tr><th>model</th><th>status</th><th>load s</th><th>prompt tok/s</th><th>generation tok/s</th>"
               "<th>peak memory MB</th><th>suspect lines %%</th></tr>\n");
    for (int i = 0; i < n; i++) {
        const model_row *r = &rows[i];
        fprintf(f, "<tr><td>");
        put_cell(f, r->name, 1, 200);
        if (r->error[0]) {
            fprintf(f, "</td><td class=\"fail\" colspan=\"6\">failed: ");
            put_cell(f, r->error, 1, 500);
            fprintf(f, "</td></tr>\n");
        } else
            fprintf(f, "</td><td>ok</td><td>%.3f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td></tr>\n",
                    r->load_s, r->prompt_tps, r->gen_tps, r->peak_bytes / 1e6, suspect_pct(r));
    }
    fprintf(f, "</table>\n");
    for (int p = 0; p < n_prompts; p++) {
        fprintf(f, "<h2>Prompt %d: ", p + 1);
        put_cell(f, prompts[p], 1, 200);
        fprintf(f, "</h2><table>\n");
        for (int i = 0; i < n; i++)
            if (!rows[i].error[0] && rows[i].texts[p]) {
                fprintf(f, "<tr><td>");
                put_cell(f, rows[i].name, 1, 200);
                fprintf(f, "</td><td><pre>");
                put_cell(f, rows[i].texts[p], 1, 4000);
                fprintf(f, "</pre></td></tr>\n");
            }
        fprintf(f, "</table>\n");
    }
    fprintf(f, "</body></html>\n");
}

static void report_json(FILE *f, const model_row *rows, int n, char **prompts, int n_prompts, int32_t max_tokens) {
    fprintf(f, "{\"max_new_tokens\":%d,\"prompts\":[", (int)max_tokens);
    for (int p = 0; p < n_prompts; p++) {
        if (p) fputc(',', f);
        cli_json_string(f, prompts[p], strlen(prompts[p]));
    }
    fprintf(f, "],\"models\":[");
    for (int i = 0; i < n; i++) {
        const model_row *r = &rows[i];
        fprintf(f, "%s{\"model\":", i ? "," : "");
        cli_json_string(f, r->name, strlen(r->name));
        fprintf(f, ",\"ok\":%s,\"error\":", r->error[0] ? "false" : "true");
        if (r->error[0]) cli_json_string(f, r->error, strlen(r->error));
        else fputs("null", f);
        fprintf(f, ",\"load_seconds\":%.6f,\"prompt_tokens_per_s\":%.3f,\"generation_tokens_per_s\":%.3f,"
                   "\"peak_memory_bytes\":%llu,\"lines\":%d,\"suspect_lines\":%d,\"suspect_line_rate\":%.4f,"
                   "\"outputs\":[", r->load_s, r->prompt_tps, r->gen_tps, (unsigned long long)r->peak_bytes,
                r->lines, r->suspect, r->lines ? (double)r->suspect / r->lines : 0.0);
        for (int p = 0; !r->error[0] && p < n_prompts; p++) {
            fprintf(f, "%s{\"text\":", p ? "," : "");
            cli_json_string(f, r->texts[p] ? r->texts[p] : "", r->texts[p] ? strlen(r->texts[p]) : 0);
            fprintf(f, ",\"n_tokens\":%d,\"finish_reason\":\"%s\"}", r->n_tokens[p], r->finish[p] ? r->finish[p] : "none");
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
}

int cmd_check_models(int argc, char **argv) {
    const char *models[MAX_MODELS], *format = "md", *out_path = NULL, *prompts_path = NULL;
    char *inline_prompts[MAX_PROMPTS];
    int n_models = 0, n_inline = 0, mlock = 0;
    int32_t max_tokens = 48, threads = 0;
    gp_gen_config scratch = gp_gen_config_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 0;
        if (!strcmp(a, "--mlock")) {
            mlock = 1;
            continue;
        }
        int gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf < 0) return cli_gen_flags_free(), 2;
        if (gf > 0) continue;
        if (!v) {
            fprintf(stderr, "genparity check-models: %s needs a value (or is unknown; see --help)\n", a);
            return cli_gen_flags_free(), 2;
        }
        char *end = NULL;
        long x = 0;
        if (!strcmp(a, "--max-tokens") || !strcmp(a, "--threads")) {
            x = strtol(v, &end, 10);
            if (*end || !*v || x < (a[2] == 'm' ? 1 : 0) || x > (1 << 24)) {
                fprintf(stderr, "genparity check-models: %s expects an integer >= %d, got '%s'\n", a,
                        a[2] == 'm' ? 1 : 0, v);
                return cli_gen_flags_free(), 2;
            }
        }
        if (!strcmp(a, "--model") && n_models < MAX_MODELS) models[n_models++] = v;
        else if (!strcmp(a, "--prompt") && n_inline < MAX_PROMPTS) inline_prompts[n_inline++] = (char *)v;
        else if (!strcmp(a, "--prompts")) prompts_path = v;
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "-o")) out_path = v;
        else if (!strcmp(a, "--max-tokens")) max_tokens = (int32_t)x;
        else if (!strcmp(a, "--threads")) threads = (int32_t)x;
        else {
            fprintf(stderr, "genparity check-models: unknown flag %s (see --help)\n", a);
            return cli_gen_flags_free(), 2;
        }
        i++;
    }
    int kind = !strcmp(format, "md") ? 0 : !strcmp(format, "html") ? 1 : !strcmp(format, "json") ? 2 : -1;
    const char *why = kind < 0 ? "--format must be md, html or json"
                      : !n_models ? "give at least one --model"
                      : !n_inline == !prompts_path ? "give --prompt (repeatable) or --prompts FILE" : NULL;
    if (why) {
        fprintf(stderr, "genparity check-models: %s\n", why);
        return cli_gen_flags_free(), 2;
    }
    char **prompts = inline_prompts;
    int n_prompts = n_inline;
    if (prompts_path && (n_prompts = cli_read_lines(prompts_path, &prompts)) <= 0) {
        if (n_prompts == 0) cli_free_lines(prompts, 0);
        fprintf(stderr, "genparity check-models: %s: %s\n", prompts_path, n_prompts < 0 ? gp_errmsg() : "no prompts");
        return cli_gen_flags_free(), 2;
    }
    model_row *rows = calloc((size_t)n_models, sizeof *rows);
    int rc = rows ? 0 : 1, failed = 0;
    for (int i = 0; rows && i < n_models; i++) {
        rows[i].name = models[i];
        rows[i].texts = calloc((size_t)n_prompts, sizeof(char *));
        rows[i].n_tokens = calloc((size_t)n_prompts, sizeof(int32_t));
        rows[i].finish = calloc((size_t)n_prompts, sizeof(char *));
        if (!rows[i].texts || !rows[i].n_tokens || !rows[i].finish) snprintf(rows[i].error, 64, "out of memory");
        else run_model(&rows[i], prompts, n_prompts, argc, argv, max_tokens, mlock, threads);
        failed |= rows[i].error[0] != 0;
    }
    FILE *f = out_path ? fopen(out_path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "genparity check-models: cannot write %s\n", out_path);
        rc = 1;
    } else if (rows) {
        if (kind == 0) report_md(f, rows, n_models, prompts, n_prompts, max_tokens);
        else if (kind == 1) report_html(f, rows, n_models, prompts, n_prompts, max_tokens);
        else report_json(f, rows, n_models, prompts, n_prompts, max_tokens);
        if (out_path) fclose(f);
    }
    for (int i = 0; rows && i < n_models; i++) {
        for (int p = 0; rows[i].texts && p < n_prompts; p++) free(rows[i].texts[p]);
        free(rows[i].texts);
        free(rows[i].n_tokens);
        free((void *)rows[i].finish);
    }
    free(rows);
    if (prompts != inline_prompts) cli_free_lines(prompts, n_prompts);
    cli_gen_flags_free();
    return rc ? rc : failed ? 1 : 0;
}
