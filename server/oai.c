/* oai.c — the OpenAI wire format of `genparity serve`: request JSON -> job (every field type-checked, ids checked
 * against the vocabulary, max_tokens against the context; chat messages rendered through the model's chat template),
 * generated tokens -> SSE chunks or one response object (chat replies split into content / reasoning_content /
 * tool_calls), and OpenAI-style error objects ({"error": {"message", "type", "param", "code"}}). */
#include "server.h"

#include <cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char *oai_error(const char *type, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* Parsing state: the first error wins. */
typedef struct pctx {
    server *s;
    job *j;
    char *err;
    const char *type_err; /* set by the getters on a wrong type */
} pctx;

#define BAD(pc, param, ...) ((pc)->err ? 0 : ((pc)->err = oai_error("invalid_request_error", param, __VA_ARGS__), 0))

/* Reads a number field: 1 when present (value in *out), 0 when absent or null, -1 on a wrong type (error set). */
static int get_num(pctx *pc, const cJSON *o, const char *name, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(pc, name, "'%s' must be a number", name), -1;
    if (v->valuedouble < lo || v->valuedouble > hi)
        return BAD(pc, name, "'%s' is %g; it must be in [%g, %g]", name, v->valuedouble, lo, hi), -1;
    *out = v->valuedouble;
    return 1;
}

static int get_int(pctx *pc, const cJSON *o, const char *name, double lo, double hi, int64_t *out) {
    double d;
    int r = get_num(pc, o, name, lo, hi, &d);
    if (r <= 0) return r;
    if (d != floor(d)) return BAD(pc, name, "'%s' must be an integer", name), -1;
    *out = (int64_t)d;
    return 1;
}

static int get_bool(pctx *pc, const cJSON *o, const char *name, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return BAD(pc, name, "'%s' must be a boolean", name), -1;
    *out = cJSON_IsTrue(v);
    return 1;
}

/* Token ids from a JSON array of integers, each checked against the vocabulary. */
static int parse_id_array(pctx *pc, const cJSON *a, const char *param, int32_t **ids, int32_t *n) {
    int cnt = cJSON_GetArraySize(a);
    int32_t *v = malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof *v);
    if (!v) return BAD(pc, param, "out of memory"), -1;
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)) {
            free(v);
            return BAD(pc, param, "'%s' must be a string or an array of integer token ids", param), -1;
        }
        if (e->valuedouble < 0 || e->valuedouble >= pc->s->n_vocab) {
            free(v);
            return BAD(pc, param, "token id %.0f at %s[%d] is outside the vocabulary [0, %d)", e->valuedouble, param,
                       k, pc->s->n_vocab), -1;
        }
        v[k++] = (int32_t)e->valuedouble;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* prompt: a string, an array of ids, or a one-element array of either. */
static int parse_prompt(pctx *pc, const cJSON *o) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    job *j = pc->j;
    if (!p) return BAD(pc, "prompt", "'prompt' is required"), -1;
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        if (!pc->s->tok) return BAD(pc, "prompt", "the model has no tokenizer.json; send the prompt as token ids"), -1;
        if (gp_tokenizer_encode(pc->s->tok, p->valuestring, strlen(p->valuestring), 1, &j->ids, &j->n_ids) != GP_OK)
            return BAD(pc, "prompt", "encoding the prompt: %s", gp_errmsg()), -1;
    } else if (cJSON_IsArray(p)) {
        if (cJSON_GetArraySize(p) > 0 && cJSON_IsArray(p->child))
            return BAD(pc, "prompt", "batched prompts are not supported; send one prompt per request"), -1;
        if (parse_id_array(pc, p, "prompt", &j->ids, &j->n_ids)) return -1;
    } else {
        return BAD(pc, "prompt", "'prompt' must be a string or an array of integer token ids"), -1;
    }
    if (j->n_ids == 0) return BAD(pc, "prompt", "the prompt is empty (no tokens)"), -1;
    return 0;
}

static int parse_stop(pctx *pc, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    job *j = pc->j;
    if (!v || cJSON_IsNull(v)) return 0;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > 16) return BAD(pc, "stop", "'stop' must be a string or an array of at most 16 strings"), -1;
    j->stops = calloc((size_t)n + 1, sizeof *j->stops);
    if (!j->stops) return BAD(pc, "stop", "out of memory"), -1;
    const cJSON *e = cJSON_IsString(v) ? v : v->child;
    for (int i = 0; i < n; i++, e = e->next) {
        if (!cJSON_IsString(e) || !*e->valuestring) return BAD(pc, "stop", "'stop' entries must be non-empty strings"), -1;
        if (!(j->stops[j->n_stops++] = strdup(e->valuestring))) return BAD(pc, "stop", "out of memory"), -1;
    }
    j->g.stop_strings = (const char *const *)j->stops;
    j->g.n_stop_strings = j->n_stops;
    return 0;
}

static int parse_logit_bias(pctx *pc, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
    job *j = pc->j;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) return BAD(pc, "logit_bias", "'logit_bias' must be an object of token id -> bias"), -1;
    int n = cJSON_GetArraySize(v);
    j->bias = calloc((size_t)n + 1, sizeof *j->bias);
    if (!j->bias) return BAD(pc, "logit_bias", "out of memory"), -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char *end;
        long id = strtol(e->string, &end, 10);
        if (!*e->string || *end || id < 0 || id >= pc->s->n_vocab)
            return BAD(pc, "logit_bias", "logit_bias key '%s' is not a token id in [0, %d)", e->string,
                       pc->s->n_vocab), -1;
        if (!cJSON_IsNumber(e) || e->valuedouble < -100 || e->valuedouble > 100)
            return BAD(pc, "logit_bias", "logit_bias['%s'] must be a number in [-100, 100]", e->string), -1;
        j->bias[j->g.n_logit_bias++] = (gp_token_bias){(int32_t)id, e->valuedouble};
    }
    j->g.logit_bias = j->bias;
    return 0;
}

/* temperature, top_p, ... : transformers' semantics over the model's generation_config.json; temperature 0 is greedy
 * and any other sampling field turns sampling on unless do_sample is given (as the CLI's flags do). */
static void parse_sampling(pctx *pc, const cJSON *o) {
    gp_gen_config *g = &pc->j->g;
    double d;
    int64_t i;
    int b, sampling = 0;
    if (get_num(pc, o, "temperature", 0, 1e6, &d) > 0) {
        if (d == 0) sampling = -1;
        else g->temperature = d, sampling = 1;
    }
    if (get_num(pc, o, "top_p", 0, 1, &d) > 0) g->top_p = d, sampling += sampling >= 0;
    if (get_int(pc, o, "top_k", 0, 1e9, &i) > 0) g->top_k = (int32_t)i, sampling += sampling >= 0;
    if (get_num(pc, o, "min_p", 0, 1, &d) > 0) g->min_p = d, sampling += sampling >= 0;
    if (get_num(pc, o, "typical_p", 0, 1, &d) > 0) g->typical_p = d, sampling += sampling >= 0;
    if (sampling) g->do_sample = sampling > 0;
    if (get_bool(pc, o, "do_sample", &b) > 0) g->do_sample = b;
    if (get_num(pc, o, "repetition_penalty", 1e-6, 1e6, &d) > 0) g->repetition_penalty = d;
    if (get_int(pc, o, "no_repeat_ngram_size", 0, 1e6, &i) > 0) g->no_repeat_ngram_size = (int32_t)i;
    if (get_int(pc, o, "min_tokens", 0, 1e9, &i) > 0) g->min_new_tokens = (int32_t)i;
    if (get_int(pc, o, "min_new_tokens", 0, 1e9, &i) > 0) g->min_new_tokens = (int32_t)i;
    if (get_num(pc, o, "presence_penalty", -2, 2, &d) > 0) g->presence_penalty = d;
    if (get_num(pc, o, "frequency_penalty", -2, 2, &d) > 0) g->frequency_penalty = d;
    if (get_int(pc, o, "seed", 0, 9007199254740992.0, &i) > 0) g->seed = (uint64_t)i;
    if (get_bool(pc, o, "ignore_eos", &b) > 0) g->ignore_eos = b;
    if (get_bool(pc, o, "skip_special_tokens", &b) > 0) g->skip_special_tokens = b;
}

/* stream, n, echo, logprobs, max_tokens (checked against the context). */
static void parse_shape(pctx *pc, const cJSON *o) {
    job *j = pc->j;
    int64_t i;
    int b;
    if (get_bool(pc, o, "stream", &j->stream) < 0) return;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so) && !cJSON_IsObject(so)) BAD(pc, "stream_options", "'stream_options' must be an object");
    else if (so) get_bool(pc, so, "include_usage", &j->include_usage);
    if (get_int(pc, o, "n", 1, 1, &i) < 0) return;
    if (get_bool(pc, o, "echo", &b) > 0 && b) BAD(pc, "echo", "'echo' is not supported");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (m && !cJSON_IsString(m) && !cJSON_IsNull(m)) BAD(pc, "model", "'model' must be a string");
    j->n_logprobs = -1;
    if (j->kind == JOB_COMPLETION) {
        if (get_int(pc, o, "logprobs", 0, 20, &i) > 0) j->n_logprobs = (int)i;
    } else if (get_bool(pc, o, "logprobs", &b) > 0 && b) {
        j->n_logprobs = 0;
        if (get_int(pc, o, "top_logprobs", 0, 20, &i) > 0) j->n_logprobs = (int)i;
    }
    if (j->n_logprobs >= 0) j->g.logprobs = 1, j->g.top_logprobs = j->n_logprobs;
    int64_t mt = j->kind == JOB_COMPLETION ? 16 : 0;
    const cJSON *mv = cJSON_GetObjectItemCaseSensitive(o, "max_tokens");
    const char *mname = "max_tokens";
    if (!mv) mv = cJSON_GetObjectItemCaseSensitive(o, mname = "max_completion_tokens");
    if (!mv) mv = cJSON_GetObjectItemCaseSensitive(o, mname = "max_new_tokens");
    if (mv && cJSON_IsNull(mv)) mt = 0;
    else if (mv && get_int(pc, o, mname, 1, 1e9, &mt) < 0) return;
    if (j->n_ids >= pc->s->n_ctx)
        BAD(pc, "prompt", "the prompt has %d tokens; the context holds %d", j->n_ids, pc->s->n_ctx);
    else if (mt > pc->s->n_ctx - j->n_ids)
        BAD(pc, mname, "%s (%lld) + prompt tokens (%d) exceeds the context (%d)", mname, (long long)mt, j->n_ids,
            pc->s->n_ctx);
    j->g.max_new_tokens = (int32_t)mt;
}

/* A message's content as one string: a string stays, null stays, an array of parts becomes the concatenation of its
 * {"type": "text", "text": ...} parts (other part types are refused). Returns 0 or -1 (error set). */
static int flatten_content(pctx *pc, cJSON *msg, int i) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (!c || cJSON_IsString(c) || cJSON_IsNull(c)) return 0;
    if (!cJSON_IsArray(c))
        return BAD(pc, "messages", "messages[%d].content must be a string, null or an array of text parts", i), -1;
    sbuf b = {0};
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(t) || (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "text")))) {
            sbuf_free(&b);
            return BAD(pc, "messages", "messages[%d].content: only text parts are supported", i), -1;
        }
        sbuf_add(&b, t->valuestring, strlen(t->valuestring));
    }
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", cJSON_CreateString(b.p ? b.p : ""));
    sbuf_free(&b);
    return 0;
}

/* messages (+ tools, chat_template_kwargs, add_generation_prompt) -> the model's chat template -> prompt ids (encoded
 * without special tokens, as apply_chat_template(tokenize=True) does). */
static int parse_messages(pctx *pc, const cJSON *o) {
    job *j = pc->j;
    server *s = pc->s;
    if (!s->tmpl)
        return BAD(pc, "messages", "the model folder has no chat template; use /v1/completions with a rendered prompt"), -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
        return BAD(pc, "messages", "'messages' must be a non-empty array of message objects"), -1;
    cJSON *msgs = cJSON_Duplicate(m, 1);
    int i = 0, rc = -1;
    cJSON *e;
    cJSON_ArrayForEach(e, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
        if (!cJSON_IsObject(e) || !cJSON_IsString(role)) {
            BAD(pc, "messages", "messages[%d] must be an object with a string 'role'", i);
            goto done;
        }
        if (flatten_content(pc, e, i++)) goto done;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        BAD(pc, "tools", "'tools' must be an array of tool schemas");
        goto done;
    }
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw)) {
        BAD(pc, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        goto done;
    }
    int agp = 1;
    if (get_bool(pc, o, "add_generation_prompt", &agp) < 0) goto done;
    gp_chat_opts opts = gp_chat_opts_default();
    char *mj = cJSON_PrintUnformatted(msgs);
    char *tj = cJSON_IsArray(tools) ? cJSON_PrintUnformatted(tools) : NULL;
    char *kj = cJSON_IsObject(kw) ? cJSON_PrintUnformatted(kw) : NULL;
    opts.messages_json = mj;
    opts.tools_json = tj;
    opts.kwargs_json = kj;
    opts.add_generation_prompt = agp;
    char *text = NULL;
    size_t len = 0;
    gp_status st = mj ? gp_chat_template_render(s->tmpl, &opts, &text, &len) : GP_ERR_NOMEM;
    free(mj);
    free(tj);
    free(kj);
    if (st != GP_OK) BAD(pc, "messages", "the chat template failed: %s", gp_errmsg());
    else if (gp_tokenizer_encode(s->tok, text, len, 0, &j->ids, &j->n_ids) != GP_OK)
        BAD(pc, "messages", "encoding the rendered conversation: %s", gp_errmsg());
    else if (j->n_ids == 0) BAD(pc, "messages", "the rendered conversation is empty");
    else rc = 0;
    gp_free(text);
done:
    cJSON_Delete(msgs);
    return rc;
}

/* Splits a non-stream chat reply into content / reasoning_content / tool_calls (gp_chat_parse_reply). */
static const char *chat_message(const job *j, cJSON *choice, const gp_gen_result *r) {
    char *json = NULL;
    if (gp_chat_parse_reply(r->text ? r->text : "", r->text ? r->text_len : 0, &json) != GP_OK) return NULL;
    cJSON *p = cJSON_Parse(json);
    gp_free(json);
    if (!p) return NULL;
    cJSON *msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
    const char *finish = NULL;
    cJSON *content = cJSON_DetachItemFromObjectCaseSensitive(p, "content");
    cJSON_ReplaceItemInObjectCaseSensitive(msg, "content", content ? content : cJSON_CreateNull());
    cJSON *reason = cJSON_DetachItemFromObjectCaseSensitive(p, "reasoning_content");
    if (cJSON_IsString(reason)) cJSON_AddItemToObject(msg, "reasoning_content", reason);
    else cJSON_Delete(reason);
    cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(p, "tool_calls");
    if (cJSON_IsArray(calls) && cJSON_GetArraySize(calls) > 0) {
        int k = 0;
        cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            char id[64];
            snprintf(id, sizeof id, "call_%s_%d", j->id, k++);
            cJSON_AddStringToObject(c, "id", id);
        }
        cJSON_AddItemToObject(msg, "tool_calls", calls);
        finish = "tool_calls";
    } else {
        cJSON_Delete(calls);
    }
    cJSON_Delete(p);
    return finish;
}

job *oai_parse_request(server *s, job_kind kind, const char *body, size_t len, char **err, int *status) {
    *err = NULL;
    *status = 400;
    cJSON *o = cJSON_ParseWithLength(body, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        *err = oai_error("invalid_request_error", NULL, o ? "the request body must be a JSON object"
                                                          : "the request body is not valid JSON");
        return NULL;
    }
    job *j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(o);
        *err = oai_error("server_error", NULL, "out of memory");
        *status = 500;
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, 0);
    j->kind = kind;
    j->srv = s;
    j->g = gp_model_gen_config(s->model);
    j->created = (long long)time(NULL);
    snprintf(j->id, sizeof j->id, "%s-%lld", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (long long)atomic_fetch_add(&s->next_id, 1));
    pctx pc = {s, j, NULL, NULL};
    if (kind == JOB_COMPLETION) parse_prompt(&pc, o);
    else parse_messages(&pc, o);
    if (!pc.err) parse_shape(&pc, o);
    if (!pc.err) parse_sampling(&pc, o);
    if (!pc.err) parse_stop(&pc, o);
    if (!pc.err) parse_logit_bias(&pc, o);
    if (!pc.err && gp_gen_config_validate(&j->g, s->n_vocab) != GP_OK) BAD(&pc, NULL, "%s", gp_errmsg());
    cJSON_Delete(o);
    if (pc.err) {
        *err = pc.err;
        job_release(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Output                                                                                                            */
/* ---------------------------------------------------------------------------------------------------------------- */

static const char *finish_str(gp_finish_reason r) {
    switch (r) {
    case GP_FINISH_STOP:
    case GP_FINISH_STOP_STRING: return "stop";
    case GP_FINISH_CANCELLED: return "cancelled";
    default: return "length";
    }
}

/* The text of one id (special tokens kept), added to o as name; bytes too when with_bytes.  Returns its length. */
static size_t add_token_str(const job *j, cJSON *o, const char *name, int32_t id, int with_bytes) {
    char *t = NULL;
    size_t n = 0;
    if (!j->srv->tok || gp_tokenizer_decode(j->srv->tok, &id, 1, 0, &t, &n) != GP_OK) {
        char buf[32];
        snprintf(buf, sizeof buf, "token_id:%d", id);
        cJSON_AddStringToObject(o, name, buf);
        n = strlen(buf);
    } else {
        cJSON_AddStringToObject(o, name, t);
    }
    if (with_bytes) {
        cJSON *b = cJSON_AddArrayToObject(o, "bytes");
        for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)t[k]));
    }
    gp_free(t);
    return n;
}

/* Appends one step's logprobs (chosen id + alternatives) in the request kind's format to lp (an object); returns the
 * length of the chosen id's text. */
static size_t add_logprob_step(const job *j, cJSON *lp, int32_t id, float logprob, const gp_top_logprob *top,
                             int n_top, size_t text_offset) {
    if (j->kind == JOB_CHAT) {
        cJSON *content = cJSON_GetObjectItemCaseSensitive(lp, "content");
        if (!content) content = cJSON_AddArrayToObject(lp, "content");
        cJSON *e = cJSON_CreateObject();
        size_t len = add_token_str(j, e, "token", id, 1);
        cJSON_AddNumberToObject(e, "logprob", logprob);
        cJSON *tl = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int t = 0; t < n_top; t++) {
            cJSON *a = cJSON_CreateObject();
            add_token_str(j, a, "token", top[t].id, 1);
            cJSON_AddNumberToObject(a, "logprob", top[t].logprob);
            cJSON_AddItemToArray(tl, a);
        }
        cJSON_AddItemToArray(content, e);
        return len;
    }
    const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    cJSON *arr[4];
    for (int k = 0; k < 4; k++) {
        arr[k] = cJSON_GetObjectItemCaseSensitive(lp, keys[k]);
        if (!arr[k]) arr[k] = cJSON_AddArrayToObject(lp, keys[k]);
    }
    cJSON *tmp = cJSON_CreateObject();
    size_t len = add_token_str(j, tmp, "t", id, 0);
    cJSON_AddItemToArray(arr[0], cJSON_CreateString(cJSON_GetObjectItem(tmp, "t")->valuestring));
    cJSON_Delete(tmp);
    cJSON_AddItemToArray(arr[1], cJSON_CreateNumber(logprob));
    cJSON *alt = cJSON_CreateObject();
    for (int t = 0; t < n_top; t++) {
        cJSON *o = cJSON_CreateObject();
        add_token_str(j, o, "t", top[t].id, 0);
        const char *ts = cJSON_GetObjectItem(o, "t")->valuestring;
        if (!cJSON_GetObjectItemCaseSensitive(alt, ts)) cJSON_AddNumberToObject(alt, ts, top[t].logprob);
        cJSON_Delete(o);
    }
    cJSON_AddItemToArray(arr[2], alt);
    cJSON_AddItemToArray(arr[3], cJSON_CreateNumber((double)text_offset));
    return len;
}

static cJSON *chunk_base(const job *j) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->model_name);
    return o;
}

static void emit(job *j, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    sbuf_add(&j->out, "data: ", 6);
    sbuf_add(&j->out, s, strlen(s));
    sbuf_add(&j->out, "\n\n", 2);
    free(s);
}

static cJSON *add_choice(const job *j, cJSON *o, const char *text, size_t len, const char *finish, int with_role) {
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = strndup(text ? text : "", text ? len : 0);
    if (j->kind == JOB_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, j->stream ? "delta" : "message");
        if (with_role) cJSON_AddStringToObject(d, "role", "assistant");
        if (t && (*t || !j->stream)) cJSON_AddStringToObject(d, "content", t);
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    }
    free(t);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    return c;
}

void oai_stream_token(job *j, const gp_token_event *ev) {
    if (!ev->piece_len && j->n_logprobs < 0 && !(j->kind == JOB_CHAT && ev->index == 0)) return;
    cJSON *o = chunk_base(j);
    cJSON *c = add_choice(j, o, ev->piece, ev->piece_len, NULL, ev->index == 0);
    if (j->n_logprobs >= 0) {
        cJSON *lp = cJSON_CreateObject();
        j->text_off += add_logprob_step(j, lp, ev->id, ev->logprob, ev->top, ev->n_top, j->text_off);
        cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp);
    }
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "genparity"), "token", ev->id);
    emit(j, o);
}

static void add_usage(const job *j, cJSON *o, int32_t n_gen) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_ids);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_ids + n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", j->n_cached);
}

static void finish_stream(job *j, gp_status st, const gp_gen_result *r) {
    if (st != GP_OK && st != GP_ERR_CANCELLED) {
        char *e = oai_error("server_error", NULL, "generation failed: %s", gp_errmsg());
        sbuf_add(&j->out, "data: ", 6);
        sbuf_add(&j->out, e, strlen(e));
        sbuf_add(&j->out, "\n\n", 2);
        free(e);
    } else {
        cJSON *o = chunk_base(j);
        add_choice(j, o, "", 0, finish_str(r->finish_reason), 0);
        add_usage(j, o, r->n_tokens);
        emit(j, o);
        if (j->include_usage) {
            o = chunk_base(j);
            cJSON_AddArrayToObject(o, "choices");
            add_usage(j, o, r->n_tokens);
            emit(j, o);
        }
    }
    sbuf_add(&j->out, "data: [DONE]\n\n", 14);
}

void oai_finish(job *j, gp_status st, const gp_gen_result *r) {
    if (j->stream) {
        finish_stream(j, st, r);
        return;
    }
    if (st != GP_OK) {
        char *e = oai_error("server_error", NULL, "generation failed: %s", st == GP_ERR_CANCELLED ? "cancelled"
                                                                                                 : gp_errmsg());
        j->http_status = 500;
        sbuf_add(&j->out, e, strlen(e));
        free(e);
        return;
    }
    cJSON *o = chunk_base(j);
    cJSON_ReplaceItemInObjectCaseSensitive(o, "object", cJSON_CreateString(j->kind == JOB_CHAT ? "chat.completion"
                                                                                              : "text_completion"));
    cJSON *c = add_choice(j, o, r->text, r->text_len, finish_str(r->finish_reason), 1);
    const char *chat_finish = j->kind == JOB_CHAT ? chat_message(j, c, r) : NULL;
    if (chat_finish) cJSON_ReplaceItemInObjectCaseSensitive(c, "finish_reason", cJSON_CreateString(chat_finish));
    if (j->n_logprobs >= 0 && r->logprobs) {
        cJSON *lp = cJSON_CreateObject();
        size_t off = 0;
        for (int32_t k = 0; k < r->n_tokens; k++) {
            const gp_top_logprob *top = r->top_logprobs ? r->top_logprobs + (size_t)k * (size_t)r->n_top : NULL;
            off += add_logprob_step(j, lp, r->tokens[k], r->logprobs[k], top, top ? r->n_top : 0, off);
        }
        cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp);
    }
    add_usage(j, o, r->n_tokens);
    cJSON *ext = cJSON_AddObjectToObject(o, "genparity");
    cJSON_AddItemToObject(ext, "tokens", cJSON_CreateIntArray(r->tokens, r->n_tokens));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    j->http_status = s ? 200 : 500;
    if (s) sbuf_add(&j->out, s, strlen(s));
    free(s);
}
