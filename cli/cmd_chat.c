/* cmd_chat.c — `genparity chat-template`: renders a conversation through a model's chat template and prints it
 * exactly (no newline added), as transformers' apply_chat_template(tokenize=False) would. */
#include "cli.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_parse_iso8601(const char *s, int64_t *out) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int y, mo, d, h = 0, mi = 0, sec = 0, k = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &k) != 3) return -1;
    const char *p = s + k;
    if (*p == 'T' || *p == ' ') {
        int k2 = 0;
        if (sscanf(p + 1, "%2d:%2d:%2d%n", &h, &mi, &sec, &k2) < 2) return -1;
        if (k2 == 0) { /* "HH:MM" only */
            if (sscanf(p + 1, "%2d:%2d%n", &h, &mi, &k2) != 2) return -1;
        }
        p += 1 + k2;
    }
    if (*p == 'Z') p++;
    if (*p) return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    *out = (int64_t)timegm(&tm);
    return 0;
}

char *cli_read_text(const char *path) {
    char *text;
    if (gp_read_file(path, 64u << 20, &text, NULL) != GP_OK) return NULL;
    return text;
}

static void chat_template_help(FILE *f) {
    fprintf(f,
            "usage: genparity chat-template (--model DIR | --template FILE) --messages FILE.json [options]\n"
            "\n"
            "Renders a conversation through the chat template and prints the text exactly (no newline added).\n"
            "  --model DIR              chat_template.jinja or tokenizer_config.json's chat_template of DIR\n"
            "  --template FILE          a Jinja template file (special tokens from --config, if given)\n"
            "  --config FILE            tokenizer_config.json for the special tokens (with --template)\n"
            "  --messages FILE.json     JSON array of messages\n"
            "  --tools FILE.json        JSON array of tool schemas (the template sees tools = none without it)\n"
            "  --add-generation-prompt  end with the assistant header\n"
            "  --kwargs JSON            extra template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --now ISO-8601           fixes the clock behind strftime_now (e.g. 2025-01-31T12:00:00Z)\n"
            "  --name NAME              which named template (tokenizer_config.json lists), default as transformers\n"
            "A template's raise_exception(\"...\") exits 1 with that message on stderr.\n");
}

/* Shared by chat-template and generate --messages: loads the template of --model/--template. */
int cli_load_template(const char *model, const char *tfile, const char *config, gp_chat_template **t) {
    if (tfile) {
        char *text = cli_read_text(tfile);
        if (!text) return cli_fail(tfile);
        gp_status st = gp_chat_template_from_string(text, strlen(text), config, tfile, t);
        free(text);
        return st == GP_OK ? 0 : cli_fail("chat template");
    }
    return gp_chat_template_load(model, t) == GP_OK ? 0 : cli_fail("chat template");
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *config = NULL, *msgs = NULL, *tools = NULL;
    gp_chat_opts o = gp_chat_opts_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            chat_template_help(stdout);
            return 0;
        } else if (!strcmp(a, "--add-generation-prompt")) o.add_generation_prompt = 1;
        else if (has && !strcmp(a, "--model")) model = argv[++i];
        else if (has && !strcmp(a, "--template")) tfile = argv[++i];
        else if (has && !strcmp(a, "--config")) config = argv[++i];
        else if (has && !strcmp(a, "--messages")) msgs = argv[++i];
        else if (has && !strcmp(a, "--tools")) tools = argv[++i];
        else if (has && !strcmp(a, "--kwargs")) o.kwargs_json = argv[++i];
        else if (has && !strcmp(a, "--name")) o.template_name = argv[++i];
        else if (has && !strcmp(a, "--now")) {
            if (cli_parse_iso8601(argv[++i], &o.now)) {
                fprintf(stderr, "genparity: --now: '%s' is not an ISO-8601 date (YYYY-MM-DD[THH:MM[:SS]][Z])\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "genparity: chat-template: unknown option or missing value '%s'\n", a);
            chat_template_help(stderr);
            return 2;
        }
    }
    if ((!model) == (!tfile) || !msgs) {
        fprintf(stderr, "genparity: chat-template: needs --messages and one of --model / --template\n");
        return 2;
    }
    gp_chat_template *t = NULL;
    char *mj = NULL, *tj = NULL, *out = NULL;
    size_t n = 0;
    int rc = 1;
    if (cli_load_template(model, tfile, config, &t)) goto done;
    if (!(mj = cli_read_text(msgs))) {
        cli_fail(msgs);
        goto done;
    }
    if (tools && !(tj = cli_read_text(tools))) {
        cli_fail(tools);
        goto done;
    }
    o.messages_json = mj;
    o.tools_json = tj;
    gp_status st = gp_chat_template_render(t, &o, &out, &n);
    if (st == GP_ERR_TEMPLATE) {
        fprintf(stderr, "%s\n", gp_errmsg());
        goto done;
    }
    if (st != GP_OK) {
        cli_fail("chat-template");
        goto done;
    }
    fwrite(out, 1, n, stdout);
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    gp_free(out);
    free(mj);
    free(tj);
    gp_chat_template_free(t);
    return rc;
}
