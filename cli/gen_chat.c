/* gen_chat.c — the chat flags of `genparity generate` (--messages/--tools/--kwargs/--now render the model's chat
 * template into the prompt; --continue appends to a --prompt-cache; --save-cache; --stop-on-special) and the reply
 * fields of its JSON output (content / reasoning_content / tool_calls through gp_chat_parse_reply). */
#include "cli.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_chat_flags_help(FILE *f) {
    fprintf(f,
            "chat (the prompt is the model's chat template applied to a conversation, as apply_chat_template):\n"
            "  --messages FILE.json JSON array of messages; ends with the assistant header (add_generation_prompt)\n"
            "  --tools FILE.json    JSON array of tool schemas for the template\n"
            "  --kwargs JSON        extra template variables, e.g. '{\"enable_thinking\": false}'\n"
            "  --now ISO-8601       fixes strftime_now's clock\n"
            "  --stop-on-special    also stop at any special token (not only EOS)\n"
            "  with --format json the reply is also split into content, reasoning_content (<think>...</think>) and\n"
            "  tool_calls (<tool_call>{...}</tool_call> or a Llama 3.x JSON call)\n"
            "\n"
            "cache:\n"
            "  --continue           append the prompt after the tokens of --prompt-cache (encoded without BOS)\n"
            "                       instead of requiring the prompt to repeat them\n"
            "  --save-cache FILE    write the KV cache (prompt + reply) after generating, for the next --continue\n");
}

int cli_chat_flag(int argc, char **argv, int *i, cli_chat_opts *o) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--continue")) return o->cont = 1, 1;
    if (!strcmp(a, "--stop-on-special")) return o->stop_on_special = 1, 1;
    const char **dst = !strcmp(a, "--messages") ? &o->messages : !strcmp(a, "--tools") ? &o->tools
                     : !strcmp(a, "--kwargs") ? &o->kwargs : !strcmp(a, "--save-cache") ? &o->save_cache
                     : !strcmp(a, "--now") ? &o->now : NULL;
    if (!dst) return 0;
    if (!v) {
        fprintf(stderr, "genparity: %s needs a value\n", a);
        return -1;
    }
    int64_t t;
    if (dst == &o->now && cli_parse_iso8601(v, &t)) {
        fprintf(stderr, "genparity: --now: '%s' is not an ISO-8601 date (YYYY-MM-DD[THH:MM[:SS]][Z])\n", v);
        return -1;
    }
    *dst = v;
    (*i)++;
    return 1;
}

/* 1 (after printing) when a message has a content part that is not text (image, audio, video): there is no
 * vision or audio path, so rendering it would drop the media silently. */
static int media_part(const char *messages_json, const char *file) {
    cJSON *root = cJSON_Parse(messages_json), *m, *part;
    cJSON *list = cJSON_IsArray(root) ? root : NULL;
    int bad = 0;
    cJSON_ArrayForEach(m, list) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        cJSON *parts = cJSON_IsArray(content) ? content : NULL;
        cJSON_ArrayForEach(part, parts) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
            if (!bad && cJSON_IsString(t) && strcmp(t->valuestring, "text")) {
                fprintf(stderr, "%s: %s: a '%s' content part: image/audio/video input is not supported (text only; "
                        "the vision tower of multimodal checkpoints is not loaded)\n", cli_prog, file, t->valuestring);
                bad = 1;
            }
        }
    }
    cJSON_Delete(root);
    return bad;
}

int cli_chat_prompt(const cli_chat_opts *o, const char *model_dir, const gp_tokenizer *tok, int32_t **ids, int32_t *n) {
    gp_chat_template *t = NULL;
    char *mj = NULL, *tj = NULL, *text = NULL;
    size_t len = 0;
    int rc = 1;
    if (!tok) {
        fprintf(stderr, "genparity: %s has no tokenizer.json to encode the chat\n", model_dir);
        return 1;
    }
    if (cli_load_template(model_dir, NULL, NULL, &t)) return 1;
    if (!(mj = cli_read_text(o->messages)) || (o->tools && !(tj = cli_read_text(o->tools)))) {
        cli_fail(mj ? o->tools : o->messages);
        goto done;
    }
    if (media_part(mj, o->messages)) goto done;
    gp_chat_opts co = gp_chat_opts_default();
    co.messages_json = mj;
    co.tools_json = tj;
    co.kwargs_json = o->kwargs;
    co.add_generation_prompt = 1;
    if (o->now) cli_parse_iso8601(o->now, &co.now);
    gp_status st = gp_chat_template_render(t, &co, &text, &len);
    if (st == GP_ERR_TEMPLATE) fprintf(stderr, "%s\n", gp_errmsg());
    else if (st != GP_OK) cli_fail("chat template");
    else if (gp_tokenizer_encode(tok, text, len, 0, ids, n) != GP_OK) cli_fail("encoding the chat"); /* as apply_chat_template: no extra BOS */
    else rc = 0;
done:
    gp_free(text);
    free(mj);
    free(tj);
    gp_chat_template_free(t);
    return rc;
}

void cli_print_reply_fields(FILE *f, const char *text, size_t len) {
    char *json = NULL;
    if (gp_chat_parse_reply(text ? text : "", text ? len : 0, &json) != GP_OK || json[0] != '{') {
        gp_free(json);
        return;
    }
    size_t n = strlen(json); /* {"content": ..., "reasoning_content": ..., "tool_calls": [...]} -> its members */
    fprintf(f, ",%.*s", (int)(n - 2), json + 1);
    gp_free(json);
}

int cli_save_cache(const gp_ctx *c, const gp_ctx_params *cp, const char *path) {
    (void)cp;
    return gp_ctx_cache_save((gp_ctx *)c, path) == GP_OK ? 0 : cli_fail("--save-cache");
}
