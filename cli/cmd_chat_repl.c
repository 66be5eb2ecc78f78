/* cmd_chat_repl.c — `genparity chat`: an interactive conversation through the model's chat template.  Replies
 * stream as they are generated; the KV cache is kept across turns: when the template renders the conversation so far
 * as the text already in the cache, only the new turn's tokens are prefilled and the previous reply keeps its tokens
 * as generated (otherwise the longest common token prefix is reused, and a note says so).  Commands: /reset,
 * /save FILE (conversation JSON + FILE.kv cache), /load FILE, /quit.  Ctrl-C stops the current reply, not the program. */
#include "cli.h"

#include <cJSON.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

typedef struct chat_state {
    gp_model *m;
    const gp_tokenizer *tok;
    gp_chat_template *t;
    gp_ctx *c;
    gp_ctx_params cp;
    gp_gen_config g;
    const char *system, *kwargs;
    int stats;           /* --stats: after each reply, how many prompt tokens were prefilled vs. reused */
    cJSON *messages;
    char *cached_text;   /* the text the ids below stand for (prompt + reply as generated) */
    int32_t *ids, n_ids; /* every token of the conversation so far, the last reply's final token included */
    char *last_tail;     /* the last reply's generated text after its shown content (its end-of-turn token) */
} chat_state;

static void chat_reset(chat_state *s) {
    cJSON_Delete(s->messages);
    s->messages = cJSON_CreateArray();
    if (s->system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", s->system);
        cJSON_AddItemToArray(s->messages, m);
    }
    free(s->cached_text);
    free(s->ids);
    free(s->last_tail);
    s->cached_text = s->last_tail = NULL;
    s->ids = NULL;
    s->n_ids = 0;
    gp_ctx_reset(s->c);
}

static int on_piece(const gp_token_event *ev, void *ud) {
    const chat_state *s = ud;
    if (!gp_tokenizer_is_special(s->tok, ev->id)) fwrite(ev->piece, 1, ev->piece_len, stdout);
    fflush(stdout);
    return g_interrupt != 0;
}

static char *render_with_user(chat_state *s, const char *line, size_t *len) {
    cJSON *msgs = cJSON_Duplicate(s->messages, 1), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", line);
    cJSON_AddItemToArray(msgs, m);
    char *mj = cJSON_PrintUnformatted(msgs), *text = NULL;
    cJSON_Delete(msgs);
    gp_chat_opts o = gp_chat_opts_default();
    o.messages_json = mj;
    o.kwargs_json = s->kwargs;
    o.add_generation_prompt = 1;
    if (gp_chat_template_render(s->t, &o, &text, len) != GP_OK) text = NULL;
    free(mj);
    return text;
}

static const char *rfind(const char *hay, size_t n, const char *needle, size_t k) {
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(hay + i, needle, k) == 0) return hay + i;
    return NULL;
}

/* The text of the new turn that follows the last reply as it was generated: rendered with a sentinel user message,
 * the part from the end of the reply's content (as the template printed it) to the end, minus the end-of-turn text the
 * reply already generated.  NULL when the template hides the reply's content. */
static char *new_turn_text(chat_state *s, const char *line) {
    static const char SENT[] = "\x01genparity-user\x01";
    const cJSON *last = cJSON_GetArrayItem(s->messages, cJSON_GetArraySize(s->messages) - 1);
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(last, "content"));
    size_t len = 0, cl;
    char *a = content ? render_with_user(s, SENT, &len) : NULL;
    const char *sent = a ? strstr(a, SENT) : NULL;
    while (content && (*content == ' ' || *content == '\n')) content++;
    cl = content ? strlen(content) : 0;
    while (cl && (content[cl - 1] == ' ' || content[cl - 1] == '\n')) cl--;
    const char *at = sent && cl ? rfind(a, (size_t)(sent - a), content, cl) : NULL;
    if (!at) {
        gp_free(a);
        return NULL;
    }
    const char *seg = at + cl, *tail = s->last_tail; /* what the reply generated after its content */
    while (*tail == ' ' || *tail == '\n') tail++;
    if (*tail && !strncmp(seg, tail, strlen(tail))) seg += strlen(tail);
    size_t before = (size_t)(sent - seg), ll = strlen(line), after = strlen(sent + sizeof SENT - 1);
    char *out = malloc(before + ll + after + 1);
    if (out) {
        memcpy(out, seg, before);
        memcpy(out + before, line, ll);
        memcpy(out + before + ll, sent + sizeof SENT - 1, after + 1);
    }
    gp_free(a);
    return out;
}

/* The ids of the next prompt: every cached id + the new turn's tokens; when the template hides the last reply, the
 * whole rendering (gp_generate then reuses the longest common token prefix) with a note. */
static int next_prompt(chat_state *s, const char *line, const char *text, size_t len, int32_t **ids, int32_t *n) {
    char *turn = s->n_ids && s->last_tail ? new_turn_text(s, line) : NULL;
    int32_t *tail = NULL, nt = 0, keep = turn ? s->n_ids : 0;
    if (!turn && s->n_ids)
        fprintf(stderr, "[the template does not show the last reply as generated; reusing the common token prefix]\n");
    gp_status st = turn ? gp_tokenizer_encode(s->tok, turn, strlen(turn), 0, &tail, &nt)
                        : gp_tokenizer_encode(s->tok, text, len, 0, &tail, &nt);
    free(turn);
    if (st != GP_OK) return cli_fail("encoding the chat");
    *ids = malloc(((size_t)keep + (size_t)nt + 1) * sizeof **ids);
    if (!*ids) {
        gp_free(tail);
        return 1;
    }
    if (keep) memcpy(*ids, s->ids, (size_t)keep * sizeof **ids);
    if (nt) memcpy(*ids + keep, tail, (size_t)nt * sizeof **ids);
    *n = keep + nt;
    gp_free(tail);
    return 0;
}

/* Records the reply: history message, cached text and ids. */
static int remember(chat_state *s, const char *prompt_text, int32_t *ids, int32_t n, const gp_gen_result *r) {
    char *raw = NULL, *shown = NULL;
    size_t lr = 0, ls = 0;
    if (gp_tokenizer_decode(s->tok, r->tokens, r->n_tokens, 0, &raw, &lr) != GP_OK ||
        gp_tokenizer_decode(s->tok, r->tokens, r->n_tokens, 1, &shown, &ls) != GP_OK) {
        gp_free(raw);
        free(ids);
        return cli_fail("decoding the reply");
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", shown);
    cJSON_AddItemToArray(s->messages, m);
    free(s->cached_text);
    size_t lp = strlen(prompt_text);
    s->cached_text = malloc(lp + lr + 1);
    int32_t *all = realloc(ids, ((size_t)n + (size_t)r->n_tokens + 1) * sizeof *all);
    if (!s->cached_text || !all) {
        free(all ? all : ids);
        gp_free(raw), gp_free(shown);
        return 1;
    }
    memcpy(s->cached_text, prompt_text, lp);
    memcpy(s->cached_text + lp, raw, lr + 1);
    memcpy(all + n, r->tokens, (size_t)r->n_tokens * sizeof *all);
    free(s->last_tail);
    s->last_tail = strdup(lr >= ls && !memcmp(raw, shown, ls) ? raw + ls : "");
    free(s->ids);
    s->ids = all;
    s->n_ids = n + r->n_tokens;
    gp_free(raw), gp_free(shown);
    return 0;
}

static int turn(chat_state *s, const char *line) {
    size_t len = 0;
    char *text = render_with_user(s, line, &len);
    if (!text) {
        fprintf(stderr, "%s\n", gp_errmsg()); /* e.g. the template's raise_exception message */
        return 1;
    }
    int32_t *ids = NULL, n = 0;
    if (next_prompt(s, line, text, len, &ids, &n)) {
        gp_free(text);
        return 1;
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", line);
    cJSON_AddItemToArray(s->messages, m);
    gp_status st;
    gp_gen_result r = {0};
    g_interrupt = 0;
    int32_t cached = gp_ctx_n_past(s->c), same = 0, nc = 0;
    const int32_t *ct = gp_ctx_tokens(s->c, &nc);
    while (same < nc && same < n && ct[same] == ids[same]) same++;
    st = gp_generate(s->c, ids, n, &s->g, on_piece, s, &r);
    if (s->stats) fprintf(stderr, "[prompt %d tokens: %d reused from the cache (of %d cached), %d prefilled]\n", n, same, cached, n - same);
    int rc = 0;
    if (st == GP_OK || st == GP_ERR_CANCELLED) {
        printf(st == GP_ERR_CANCELLED ? " [stopped]\n" : "\n");
        rc = remember(s, text, ids, n, &r);
    } else {
        free(ids);
        rc = cli_fail("generating");
    }
    g_interrupt = 0;
    gp_gen_result_free(&r);
    gp_free(text);
    return rc;
}

static int chat_save(chat_state *s, const char *path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "messages", cJSON_Duplicate(s->messages, 1));
    cJSON_AddStringToObject(j, "text", s->cached_text ? s->cached_text : "");
    cJSON_AddStringToObject(j, "last_tail", s->last_tail ? s->last_tail : "");
    cJSON_AddItemToObject(j, "ids", cJSON_CreateIntArray(s->ids ? s->ids : (const int[]){0}, s->n_ids));
    char *txt = cJSON_Print(j);
    cJSON_Delete(j);
    FILE *f = fopen(path, "wb");
    int ok = f && txt && fputs(txt, f) >= 0;
    if (f && fclose(f)) ok = 0;
    free(txt);
    if (!ok) {
        fprintf(stderr, "genparity chat: cannot write %s\n", path);
        return 1;
    }
    char kv[4096];
    snprintf(kv, sizeof kv, "%s.kv", path);
    if (gp_ctx_n_past(s->c) > 0 && cli_save_cache(s->c, &s->cp, kv)) return 1;
    fprintf(stderr, "[saved %d messages to %s and the KV cache to %s]\n", cJSON_GetArraySize(s->messages), path, kv);
    return 0;
}

static int chat_load(chat_state *s, const char *path) {
    char *txt = cli_read_text(path);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    const cJSON *msgs = cJSON_GetObjectItem(j, "messages"), *text = cJSON_GetObjectItem(j, "text"), *ids = cJSON_GetObjectItem(j, "ids");
    if (!cJSON_IsArray(msgs) || !cJSON_IsString(text) || !cJSON_IsArray(ids)) {
        cJSON_Delete(j);
        fprintf(stderr, "genparity chat: %s is not a saved conversation ({messages, text, ids})\n", path);
        return 1;
    }
    chat_reset(s);
    cJSON_Delete(s->messages);
    s->messages = cJSON_Duplicate(msgs, 1);
    s->cached_text = strdup(text->valuestring);
    const char *lt = cJSON_GetStringValue(cJSON_GetObjectItem(j, "last_tail"));
    s->last_tail = strdup(lt ? lt : "");
    s->n_ids = cJSON_GetArraySize(ids);
    s->ids = malloc(((size_t)s->n_ids + 1) * sizeof *s->ids);
    for (int32_t i = 0; s->ids && i < s->n_ids; i++) s->ids[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
    cJSON_Delete(j);
    char kv[4096];
    snprintf(kv, sizeof kv, "%s.kv", path);
    if (access(kv, R_OK) == 0 && gp_ctx_cache_load(s->c, kv) != GP_OK) return cli_fail(kv);
    fprintf(stderr, "[loaded %d messages; %d positions cached]\n", cJSON_GetArraySize(s->messages), gp_ctx_n_past(s->c));
    return 0;
}

/* Handles a /command; returns 1 to quit, 0 otherwise. */
static int command(chat_state *s, char *line) {
    char *arg = strchr(line, ' ');
    if (arg) {
        *arg++ = 0;
        while (*arg == ' ') arg++;
    }
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/reset")) {
        chat_reset(s);
        fprintf(stderr, "[conversation and cache cleared]\n");
    } else if (!strcmp(line, "/save") && arg && *arg) {
        chat_save(s, arg);
    } else if (!strcmp(line, "/load") && arg && *arg) {
        chat_load(s, arg);
    } else {
        fprintf(stderr, "commands: /reset  /save FILE  /load FILE  /quit   (Ctrl-C stops a reply, Ctrl-D quits)\n");
    }
    return 0;
}

static void repl(chat_state *s) {
    char *line = NULL;
    size_t cap = 0;
    int tty = isatty(0);
    for (;;) {
        if (tty) fputs("> ", stdout), fflush(stdout);
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (errno == EINTR || g_interrupt) { /* Ctrl-C at the prompt */
                clearerr(stdin);
                g_interrupt = 0;
                fputs("\n(Ctrl-D or /quit to leave)\n", stderr);
                continue;
            }
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (line[0] == '/') {
            if (command(s, line)) break;
            continue;
        }
        turn(s, line);
    }
    free(line);
}

static void chat_help(FILE *f) {
    fprintf(f,
            "usage: genparity chat --model DIR [--system TEXT] [--kwargs JSON] [--max-tokens N] [sampling flags]\n"
            "\n"
            "Interactive conversation through the model's chat template; replies stream.  The KV cache is kept across\n"
            "turns (only the new turn is prefilled).  Type a message per line; /reset, /save FILE, /load FILE, /quit.\n"
            "Ctrl-C stops the current reply (the partial reply stays in the conversation); Ctrl-D quits.\n"
            "  --system TEXT      system message\n"
            "  --kwargs JSON      extra template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --max-tokens N     reply length cap (default 512)\n"
            "  --stats            after each reply, print how many prompt tokens were reused / prefilled (stderr)\n\n");
    cli_ctx_flags_help(f);
    fprintf(f, "\n");
    cli_gen_flags_help(f);
}

int cmd_chat(int argc, char **argv) {
    chat_state s = {0};
    const char *model = NULL;
    int32_t max_tokens = 512;
    s.cp = gp_ctx_default_params();
    gp_gen_config scratch = gp_gen_config_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return chat_help(stdout), 0;
        int gf = cli_gen_flag(argc, argv, &i, &scratch);
        if (gf == 0) gf = cli_ctx_flag(argc, argv, &i, &s.cp);
        if (gf < 0) return cli_gen_flags_free(), 2;
        if (gf > 0) continue;
        if (v && !strcmp(a, "--model")) model = v;
        else if (v && !strcmp(a, "--system")) s.system = v;
        else if (v && !strcmp(a, "--kwargs")) s.kwargs = v;
        else if (!strcmp(a, "--stats")) {
            s.stats = 1;
            continue;
        }
        else if (v && !strcmp(a, "--max-tokens")) {
            if (cli_i32("--max-tokens", v, 1, 1 << 30, &max_tokens)) return 2;
        } else {
            fprintf(stderr, "genparity chat: unknown flag or missing value: %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (!model) model = cli_default_model();
    int rc = 1;
    if (gp_model_load(model, NULL, &s.m) != GP_OK) return cli_fail("loading the model");
    if (!(s.tok = gp_model_tokenizer(s.m))) {
        fprintf(stderr, "genparity chat: %s has no tokenizer.json\n", model);
        goto done;
    }
    if (cli_load_template(model, NULL, NULL, &s.t) || gp_ctx_init(s.m, &s.cp, &s.c) != GP_OK) {
        if (s.t) cli_fail("creating the context");
        goto done;
    }
    s.g = gp_model_gen_config(s.m);
    s.g.max_new_tokens = max_tokens;
    for (int i = 1; i < argc; i++) /* the sampling flags, over the model's generation config */
        if (cli_gen_flag(argc, argv, &i, &s.g) == 0) i++;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);
    chat_reset(&s);
    repl(&s);
    rc = 0;
done:
    cli_gen_flags_free();
    cJSON_Delete(s.messages);
    free(s.cached_text);
    free(s.ids);
    free(s.last_tail);
    gp_ctx_free(s.c);
    gp_chat_template_free(s.t);
    gp_model_free(s.m);
    return rc;
}
