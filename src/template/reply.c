/* reply.c — splits a chat model's reply into OpenAI-style fields: reasoning_content (<think>...</think>), content, and
 * tool_calls parsed from Hermes/Qwen <tool_call>{...}</tool_call> blocks or a Llama 3.x JSON reply
 * ({"name": ..., "parameters"|"arguments": {...}}, optionally after <|python_tag|>).  Arguments are re-serialised as
 * Python's json.dumps(ensure_ascii=False) does, the form OpenAI-compatible servers send. */
#include "template/tpl.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void trim(const char **s, size_t *n) {
    while (*n && is_space(**s)) (*s)++, (*n)--;
    while (*n && is_space((*s)[*n - 1])) (*n)--;
}

static void put_json_str_or_null(tpl_buf *b, const char *s, size_t n) {
    const char *err;
    if (!s || n == 0) tpl_buf_put(b, "null", sizeof "null" - 1);
    else tv_write_json(b, tv_strn(s, (uint32_t)n), NULL, NULL, NULL, 0, 0, 0, &err);
}

/* Parses one tool call object; appends {"id", "type", "function": {"name", "arguments"}} to calls.  0 or -1. */
static int add_call(tpl_arena *a, tpl_buf *calls, int idx, const char *s, size_t n) {
    tv v;
    char err[128];
    const char *e;
    if (tv_parse_json(a, s, n, &v, err, sizeof err) || v.t != TV_DICT) return -1;
    tv *name = tv_dict_gets(v.u.d, "name", 4), *args = tv_dict_gets(v.u.d, "arguments", 9);
    if (!args) args = tv_dict_gets(v.u.d, "parameters", 10);
    if (!name || name->t != TV_STR) return -1;
    tpl_buf argb = {0};
    if (!args) tpl_buf_put(&argb, "{}", sizeof "{}" - 1);
    else if (args->t == TV_STR) tpl_buf_put(&argb, args->u.s, args->n);
    else if (tv_write_json(&argb, *args, NULL, NULL, NULL, 0, 0, 0, &e)) {
        tpl_buf_free(&argb);
        return -1;
    }
    if (idx) tpl_buf_put(calls, ", ", sizeof ", " - 1);
    char id[32];
    int k = snprintf(id, sizeof id, "call_%d", idx);
    tpl_buf_put(calls, "{\"id\": ", sizeof "{\"id\": " - 1);
    put_json_str_or_null(calls, id, (size_t)k);
    tpl_buf_put(calls, ", \"type\": \"function\", \"function\": {\"name\": ", sizeof ", \"type\": \"function\", \"function\": {\"name\": " - 1);
    put_json_str_or_null(calls, name->u.s, name->n);
    tpl_buf_put(calls, ", \"arguments\": ", sizeof ", \"arguments\": " - 1);
    put_json_str_or_null(calls, argb.p ? argb.p : "{}", argb.p ? argb.n : 2);
    tpl_buf_put(calls, "}}", sizeof "}}" - 1);
    tpl_buf_free(&argb);
    return 0;
}

/* Moves <tool_call> blocks from text into calls; what is left goes to rest. Returns the number of calls. */
static int hermes_calls(tpl_arena *a, const char *s, size_t n, tpl_buf *calls, tpl_buf *rest) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    int k = 0;
    const char *p = s, *e = s + n;
    while (p < e) {
        const char *o = memmem(p, (size_t)(e - p), open, sizeof open - 1);
        if (!o) break;
        const char *body = o + sizeof open - 1;
        const char *c = memmem(body, (size_t)(e - body), close, sizeof close - 1);
        const char *end = c ? c : e;
        const char *bs = body;
        size_t bn = (size_t)(end - body);
        trim(&bs, &bn);
        tpl_buf_put(rest, p, (size_t)(o - p));
        if (add_call(a, calls, k, bs, bn) == 0) k++;
        else tpl_buf_put(rest, o, (size_t)((c ? c + sizeof close - 1 : e) - o));
        p = c ? c + sizeof close - 1 : e;
    }
    if (p < e) tpl_buf_put(rest, p, (size_t)(e - p));
    return k;
}

gp_status gp_chat_parse_reply(const char *text, size_t len, char **json_out) {
    if (!json_out || (!text && len)) return gp_set_error(GP_ERR_INVALID_ARG, "gp_chat_parse_reply: NULL argument");
    *json_out = NULL;
    const char *s = text ? text : "", *reason = NULL;
    size_t n = len, rn = 0;
    const char *ct = memmem(s, n, "</think>", 8);
    if (ct) { /* reasoning: everything before </think>, without an opening <think> */
        reason = s;
        rn = (size_t)(ct - s);
        const char *ot = memmem(reason, rn, "<think>", 7);
        if (ot) rn -= (size_t)(ot + 7 - reason), reason = ot + 7;
        n -= (size_t)(ct + 8 - s);
        s = ct + 8;
    } else {
        const char *q = s;
        size_t qn = n;
        trim(&q, &qn);
        if (qn >= 7 && !memcmp(q, "<think>", 7)) { /* unterminated: the reply stopped inside its reasoning */
            reason = q + 7;
            rn = qn - 7;
            n = 0;
        }
    }
    trim(&reason, &rn);
    tpl_arena *a = tpl_arena_new(TPL_MAX_ARENA);
    tpl_buf calls = {0}, rest = {0}, out = {0};
    if (!a) return gp_set_error(GP_ERR_NOMEM, "out of memory");
    int k = hermes_calls(a, s, n, &calls, &rest);
    const char *c = rest.p ? rest.p : "";
    size_t cn = rest.n;
    trim(&c, &cn);
    if (k == 0 && cn > 13 && !memcmp(c, "<|python_tag|>", 14)) c += 14, cn -= 14;
    if (k == 0 && cn && c[0] == '{' && add_call(a, &calls, 0, c, cn) == 0) k = 1, cn = 0;
    tpl_buf_put(&out, "{\"content\": ", sizeof "{\"content\": " - 1);
    put_json_str_or_null(&out, c, cn);
    tpl_buf_put(&out, ", \"reasoning_content\": ", sizeof ", \"reasoning_content\": " - 1);
    put_json_str_or_null(&out, reason, reason ? rn : 0);
    tpl_buf_put(&out, ", \"tool_calls\": [", sizeof ", \"tool_calls\": [" - 1);
    if (calls.p) tpl_buf_put(&out, calls.p, calls.n);
    tpl_buf_put(&out, "]}", sizeof "]}" - 1);
    tpl_buf_free(&calls);
    tpl_buf_free(&rest);
    tpl_arena_free(a);
    if (out.oom) {
        tpl_buf_free(&out);
        return gp_set_error(GP_ERR_NOMEM, "reply too large");
    }
    *json_out = out.p;
    return GP_OK;
}
