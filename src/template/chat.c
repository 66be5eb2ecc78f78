/* chat.c — the public chat-template API: finds a model's template (chat_template.jinja, or tokenizer_config.json's
 * chat_template as a string or a list of named templates), its special tokens, and renders a conversation with the
 * variables apply_chat_template passes (messages, tools, documents, add_generation_prompt, special tokens, kwargs). */
#include "template/tpl.h"
#include "io/json.h"
#include "util/util.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPLATES 16
#define MAX_SPECIALS 32

struct gp_chat_template {
    int n;
    char *names[MAX_TEMPLATES];
    tpl_program *progs[MAX_TEMPLATES];
    int n_special;
    char *special_name[MAX_SPECIALS], *special_value[MAX_SPECIALS];
};

void gp_chat_template_free(gp_chat_template *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        tpl_program_free(t->progs[i]);
    }
    for (int i = 0; i < t->n_special; i++) {
        free(t->special_name[i]);
        free(t->special_value[i]);
    }
    free(t);
}

const char *gp_chat_template_special(const gp_chat_template *t, const char *name) {
    if (!t || !name) return NULL;
    for (int i = 0; i < t->n_special; i++)
        if (!strcmp(t->special_name[i], name)) return t->special_value[i];
    return NULL;
}

static gp_status add_template(gp_chat_template *t, const char *name, const char *text, size_t len, const char *src) {
    if (t->n == MAX_TEMPLATES) return gp_set_error(GP_ERR_FORMAT, "%s: more than %d chat templates", src, MAX_TEMPLATES);
    tpl_program *p;
    gp_status st = tpl_parse(text, len, src, &p);
    if (st != GP_OK) return st;
    t->names[t->n] = gp_strdup(name);
    t->progs[t->n] = p;
    if (!t->names[t->n]) {
        tpl_program_free(p);
        return GP_ERR_NOMEM;
    }
    t->n++;
    return GP_OK;
}

static gp_status add_special(gp_chat_template *t, const char *name, const cJSON *v) {
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    if (cJSON_IsObject(v)) { /* {"__type": "AddedToken", "content": "<s>", ...} */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) s = c->valuestring;
    }
    if (!s || t->n_special == MAX_SPECIALS) return GP_OK;
    t->special_name[t->n_special] = gp_strdup(name);
    t->special_value[t->n_special] = gp_strdup(s);
    if (!t->special_name[t->n_special] || !t->special_value[t->n_special]) return GP_ERR_NOMEM;
    t->n_special++;
    return GP_OK;
}

/* Special tokens of tokenizer_config.json, as transformers' special_tokens_map (named ones + extra_special_tokens
 * given as a dict).  Loads the chat_template field too when want_template. */
static gp_status read_config(gp_chat_template *t, const char *path, int want_template) {
    char *data;
    size_t len;
    cJSON *j = NULL;
    gp_status st = gp_read_file(path, GP_JSON_CONFIG_BYTES, &data, &len);
    if (st != GP_OK) return st;
    st = gp_json_parse(path, data, len, GP_JSON_CONFIG_TREE, 0, &j); /* bounded; NOMEM reported as NOMEM */
    free(data);
    if (st != GP_OK) return st;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return gp_set_error(GP_ERR_FORMAT, "%s: not a JSON object", path);
    }
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
    for (int i = 0; i < 7 && st == GP_OK; i++) st = add_special(t, names[i], cJSON_GetObjectItemCaseSensitive(j, names[i]));
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "extra_special_tokens"), *e;
    if (cJSON_IsObject(extra))
        cJSON_ArrayForEach(e, extra) if (st == GP_OK) st = add_special(t, e->string, e);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    char src[512];
    if (st == GP_OK && want_template && cJSON_IsString(ct)) {
        snprintf(src, sizeof src, "%s: chat_template", path);
        st = add_template(t, "default", ct->valuestring, strlen(ct->valuestring), src);
    } else if (st == GP_OK && want_template && cJSON_IsArray(ct)) {
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name"), *tx = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(nm) || !cJSON_IsString(tx)) {
                st = gp_set_error(GP_ERR_FORMAT, "%s: field 'chat_template': each entry needs string 'name' and 'template'", path);
                break;
            }
            snprintf(src, sizeof src, "%s: chat_template '%s'", path, nm->valuestring);
            if ((st = add_template(t, nm->valuestring, tx->valuestring, strlen(tx->valuestring), src)) != GP_OK) break;
        }
    } else if (st == GP_OK && want_template && ct && !cJSON_IsNull(ct)) {
        st = gp_set_error(GP_ERR_FORMAT, "%s: field 'chat_template' must be a string or a list of {name, template}", path);
    }
    cJSON_Delete(j);
    return st;
}

gp_status gp_chat_template_from_string(const char *text, size_t len, const char *config_path, const char *name,
                                       gp_chat_template **out) {
    if (!out || (!text && len)) return gp_set_error(GP_ERR_INVALID_ARG, "gp_chat_template_from_string: NULL argument");
    *out = NULL;
    gp_chat_template *t = calloc(1, sizeof *t);
    if (!t) return gp_set_error(GP_ERR_NOMEM, "out of memory");
    gp_status st = add_template(t, "default", text ? text : "", len, name ? name : "template");
    if (st == GP_OK && config_path) st = read_config(t, config_path, 0);
    if (st != GP_OK) {
        gp_chat_template_free(t);
        return st;
    }
    *out = t;
    return GP_OK;
}

gp_status gp_chat_template_load(const char *dir, gp_chat_template **out) {
    if (!dir || !out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_chat_template_load: NULL argument");
    *out = NULL;
    gp_chat_template *t = calloc(1, sizeof *t);
    char *jinja = gp_path_join(dir, "chat_template.jinja"), *cfg = gp_path_join(dir, "tokenizer_config.json");
    gp_status st = t && jinja && cfg ? GP_OK : gp_set_error(GP_ERR_NOMEM, "out of memory");
    int have_jinja = st == GP_OK && gp_file_exists(jinja);
    if (have_jinja) {
        char *data;
        size_t len;
        st = gp_read_file(jinja, TPL_MAX_SOURCE, &data, &len);
        if (st == GP_OK) {
            st = add_template(t, "default", data, len, jinja);
            free(data);
        }
    }
    if (st == GP_OK && gp_file_exists(cfg)) st = read_config(t, cfg, !have_jinja);
    if (st == GP_OK && t->n == 0)
        st = gp_set_error(GP_ERR_MISSING, "%s: no chat template (neither chat_template.jinja nor tokenizer_config.json's "
                          "'chat_template')", dir);
    free(jinja);
    free(cfg);
    if (st != GP_OK) {
        gp_chat_template_free(t);
        return st;
    }
    *out = t;
    return GP_OK;
}

gp_chat_opts gp_chat_opts_default(void) {
    gp_chat_opts o;
    memset(&o, 0, sizeof o);
    o.now = GP_CHAT_NOW_CLOCK;
    return o;
}

static int pick(const gp_chat_template *t, const gp_chat_opts *o) {
    const char *want = o->template_name;
    if (!want && t->n == 1) return 0;
    if (!want && o->tools_json)
        for (int i = 0; i < t->n; i++)
            if (!strcmp(t->names[i], "tool_use")) return i;
    if (!want) want = "default";
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->names[i], want)) return i;
    return -1;
}

static gp_status set_json(tpl_render *r, const char *var, const char *json, int must_be) {
    tv v = tv_none();
    char err[256];
    if (json) {
        if (tv_parse_json(tpl_render_arena(r), json, strlen(json), &v, err, sizeof err))
            return gp_set_error(GP_ERR_FORMAT, "%s JSON: %s", var, err);
        if (must_be && v.t != must_be)
            return gp_set_error(GP_ERR_FORMAT, "%s JSON: expected %s, got %s", var, must_be == TV_LIST ? "an array" : "an object", tv_type_name(v));
    }
    if (tpl_render_set(r, var, v)) return gp_set_error(GP_ERR_NOMEM, "out of memory");
    return GP_OK;
}

gp_status gp_chat_template_render(const gp_chat_template *t, const gp_chat_opts *o, char **out, size_t *out_len) {
    if (!t || !o || !out || !o->messages_json) return gp_set_error(GP_ERR_INVALID_ARG, "gp_chat_template_render: NULL argument");
    *out = NULL;
    int k = pick(t, o);
    if (k < 0) {
        char names[512] = "";
        for (int i = 0; i < t->n; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, t->names[i], sizeof names - strlen(names) - 1);
        }
        return gp_set_error(GP_ERR_MISSING, "no chat template named '%s' (have: %s)", o->template_name ? o->template_name : "default", names);
    }
    tpl_render *r = tpl_render_new();
    if (!r) return gp_set_error(GP_ERR_NOMEM, "out of memory");
    gp_status st = GP_OK;
    for (int i = 0; i < t->n_special && st == GP_OK; i++) {
        tv s = tv_str_copy(tpl_render_arena(r), t->special_value[i], strlen(t->special_value[i]));
        if (s.t != TV_STR || tpl_render_set(r, t->special_name[i], s)) st = gp_set_error(GP_ERR_NOMEM, "out of memory");
    }
    if (st == GP_OK) st = set_json(r, "messages", o->messages_json, TV_LIST);
    if (st == GP_OK) st = set_json(r, "tools", o->tools_json, TV_LIST);
    if (st == GP_OK) st = set_json(r, "documents", o->documents_json, TV_LIST);
    if (st == GP_OK && tpl_render_set(r, "add_generation_prompt", tv_bool(o->add_generation_prompt)))
        st = gp_set_error(GP_ERR_NOMEM, "out of memory");
    if (st == GP_OK && o->kwargs_json) {
        tv kw;
        char err[256];
        if (tv_parse_json(tpl_render_arena(r), o->kwargs_json, strlen(o->kwargs_json), &kw, err, sizeof err))
            st = gp_set_error(GP_ERR_FORMAT, "kwargs JSON: %s", err);
        else if (kw.t != TV_DICT)
            st = gp_set_error(GP_ERR_FORMAT, "kwargs JSON: expected an object, got %s", tv_type_name(kw));
        for (uint32_t i = 0; st == GP_OK && i < kw.u.d->n; i++) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)kw.u.d->k[i].n, kw.u.d->k[i].u.s);
            if (tpl_render_set(r, name, kw.u.d->v[i])) st = gp_set_error(GP_ERR_NOMEM, "out of memory");
        }
    }
    if (st == GP_OK && o->now != GP_CHAT_NOW_CLOCK) tpl_render_set_now(r, o->now);
    if (st == GP_OK) st = tpl_render_run(r, t->progs[k], out, out_len);
    tpl_render_free(r);
    return st;
}
