/* gen_config.c — the generation config: transformers' GenerationConfig defaults, validation (errors name the field),
 * finish-reason names, and applying a model's generation_config.json (a Hugging Face file format like config.json,
 * hence below src/sample/; errors name the file and the field). */
#include "model/gen_config.h"
#include "io/json.h"
#include "util/util.h"

#include <cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gp_gen_config gp_gen_config_default(void) {
    gp_gen_config g;
    memset(&g, 0, sizeof g);
    g.max_new_tokens = 20;
    g.do_sample = 0;
    g.temperature = 1.0;
    g.top_k = 50;
    g.top_p = 1.0;
    g.seed = 0;
    g.typical_p = 1.0;
    g.repetition_penalty = 1.0;
    g.forced_bos_token_id = -1;
    g.forced_eos_token_id = -1;
    g.skip_special_tokens = 1;
    return g;
}

const char *gp_finish_reason_str(gp_finish_reason r) {
    switch (r) {
    case GP_FINISH_NONE: return "none";
    case GP_FINISH_STOP: return "stop";
    case GP_FINISH_LENGTH: return "length";
    case GP_FINISH_STOP_STRING: return "stop_string";
    case GP_FINISH_TIME: return "time";
    case GP_FINISH_CANCELLED: return "cancelled";
    case GP_FINISH_CONTEXT: return "context";
    }
    return "unknown";
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Validation                                                                                                        */
/* ---------------------------------------------------------------------------------------------------------------- */

#define BAD(...) gp_set_error(GP_ERR_INVALID_ARG, __VA_ARGS__)

static int id_ok(int32_t id, int32_t n_vocab) { return id >= 0 && (n_vocab <= 0 || id < n_vocab); }

static gp_status check_ids(const char *field, const int32_t *ids, int32_t n, int32_t n_vocab) {
    if (n < 0) return BAD("gen_config: field 'n_%s' = %d is negative", field, (int)n);
    if (n > 0 && !ids) return BAD("gen_config: field '%s' is NULL with %d entries", field, (int)n);
    for (int32_t i = 0; i < n; i++)
        if (!id_ok(ids[i], n_vocab))
            return BAD("gen_config: field '%s[%d]' = %d is outside the vocabulary (%d ids)", field, (int)i,
                       (int)ids[i], (int)n_vocab);
    return GP_OK;
}

static gp_status check_range(const char *field, double v, double lo, double hi, int lo_open, int hi_open) {
    int ok = !isnan(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok)
        return BAD("gen_config: field '%s' = %g must be in %c%g, %g%c", field, v, lo_open ? '(' : '[', lo, hi,
                   hi_open ? ')' : ']');
    return GP_OK;
}

gp_status gp_gen_config_validate(const gp_gen_config *g, int32_t n_vocab) {
    if (!g) return BAD("gen_config: config is NULL");
    gp_status s;
    if (g->max_new_tokens < 0) return BAD("gen_config: field 'max_new_tokens' = %d is negative", (int)g->max_new_tokens);
    if (g->max_length < 0) return BAD("gen_config: field 'max_length' = %d is negative", (int)g->max_length);
    if (g->min_new_tokens < 0) return BAD("gen_config: field 'min_new_tokens' = %d is negative", (int)g->min_new_tokens);
    if (g->min_length < 0) return BAD("gen_config: field 'min_length' = %d is negative", (int)g->min_length);
    if (g->do_sample && (s = check_range("temperature", g->temperature, 0.0, INFINITY, 1, 1))) return s;
    if (g->top_k < 0) return BAD("gen_config: field 'top_k' = %d is negative", (int)g->top_k);
    if ((s = check_range("top_p", g->top_p, 0.0, 1.0, 0, 0))) return s;
    if ((s = check_range("min_p", g->min_p, 0.0, 1.0, 0, 0))) return s;
    if ((s = check_range("typical_p", g->typical_p, 0.0, 1.0, 1, 0))) return s;
    if ((s = check_range("epsilon_cutoff", g->epsilon_cutoff, 0.0, 1.0, 0, 1))) return s;
    if ((s = check_range("eta_cutoff", g->eta_cutoff, 0.0, 1.0, 0, 1))) return s;
    if ((s = check_range("repetition_penalty", g->repetition_penalty, 0.0, INFINITY, 1, 1))) return s;
    if ((s = check_range("frequency_penalty", g->frequency_penalty, -INFINITY, INFINITY, 1, 1))) return s;
    if ((s = check_range("presence_penalty", g->presence_penalty, -INFINITY, INFINITY, 1, 1))) return s;
    if ((s = check_range("max_time", g->max_time, 0.0, INFINITY, 0, 1))) return s;
    if (g->no_repeat_ngram_size < 0)
        return BAD("gen_config: field 'no_repeat_ngram_size' = %d is negative", (int)g->no_repeat_ngram_size);
    if (g->penalty_window < 0) return BAD("gen_config: field 'penalty_window' = %d is negative", (int)g->penalty_window);
    if (g->n_eos < 0 || g->n_eos > GP_MAX_EOS)
        return BAD("gen_config: field 'n_eos' = %d must be in [0, %d]", (int)g->n_eos, GP_MAX_EOS);
    if ((s = check_ids("eos_ids", g->eos_ids, g->n_eos, n_vocab))) return s;
    if (g->forced_bos_token_id >= 0 && !id_ok(g->forced_bos_token_id, n_vocab))
        return BAD("gen_config: field 'forced_bos_token_id' = %d is outside the vocabulary", (int)g->forced_bos_token_id);
    if (g->forced_eos_token_id >= 0 && !id_ok(g->forced_eos_token_id, n_vocab))
        return BAD("gen_config: field 'forced_eos_token_id' = %d is outside the vocabulary", (int)g->forced_eos_token_id);
    if ((s = check_ids("suppress_tokens", g->suppress_tokens, g->n_suppress_tokens, n_vocab))) return s;
    if ((s = check_ids("begin_suppress_tokens", g->begin_suppress_tokens, g->n_begin_suppress_tokens, n_vocab)))
        return s;
    if (g->n_bad_words_ids < 0 || (g->n_bad_words_ids > 0 && !g->bad_words_ids))
        return BAD("gen_config: field 'bad_words_ids' is NULL or its count %d is negative", (int)g->n_bad_words_ids);
    for (int32_t i = 0; i < g->n_bad_words_ids; i++) {
        const gp_token_seq *w = &g->bad_words_ids[i];
        if (w->n <= 0 || !w->ids) return BAD("gen_config: field 'bad_words_ids[%d]' is empty", (int)i);
        for (int32_t j = 0; j < w->n; j++)
            if (!id_ok(w->ids[j], n_vocab))
                return BAD("gen_config: field 'bad_words_ids[%d][%d]' = %d is outside the vocabulary", (int)i, (int)j,
                           (int)w->ids[j]);
    }
    if (g->n_sequence_bias < 0 || (g->n_sequence_bias > 0 && !g->sequence_bias))
        return BAD("gen_config: field 'sequence_bias' is NULL or its count %d is negative", (int)g->n_sequence_bias);
    for (int32_t i = 0; i < g->n_sequence_bias; i++) {
        const gp_seq_bias *e = &g->sequence_bias[i];
        if (e->n <= 0 || !e->ids) return BAD("gen_config: field 'sequence_bias[%d]' is empty", (int)i);
        if (isnan(e->bias)) return BAD("gen_config: field 'sequence_bias[%d]' has a NaN bias", (int)i);
        for (int32_t j = 0; j < e->n; j++)
            if (!id_ok(e->ids[j], n_vocab))
                return BAD("gen_config: field 'sequence_bias[%d][%d]' = %d is outside the vocabulary", (int)i, (int)j,
                           (int)e->ids[j]);
    }
    if (g->n_logit_bias < 0 || (g->n_logit_bias > 0 && !g->logit_bias))
        return BAD("gen_config: field 'logit_bias' is NULL or its count %d is negative", (int)g->n_logit_bias);
    for (int32_t i = 0; i < g->n_logit_bias; i++) {
        if (!id_ok(g->logit_bias[i].id, n_vocab))
            return BAD("gen_config: field 'logit_bias[%d].id' = %d is outside the vocabulary", (int)i,
                       (int)g->logit_bias[i].id);
        if (isnan(g->logit_bias[i].bias)) return BAD("gen_config: field 'logit_bias[%d].bias' is NaN", (int)i);
    }
    if (g->n_stop_strings < 0 || (g->n_stop_strings > 0 && !g->stop_strings))
        return BAD("gen_config: field 'stop_strings' is NULL or its count %d is negative", (int)g->n_stop_strings);
    for (int32_t i = 0; i < g->n_stop_strings; i++)
        if (!g->stop_strings[i] || !g->stop_strings[i][0])
            return BAD("gen_config: field 'stop_strings[%d]' is NULL or empty", (int)i);
    if (g->n_logits_processors < 0 || (g->n_logits_processors > 0 && !g->logits_processors))
        return BAD("gen_config: field 'logits_processors' is NULL or its count %d is negative",
                   (int)g->n_logits_processors);
    if (g->logprobs < 0) return BAD("gen_config: field 'logprobs' = %d is negative", (int)g->logprobs);
    if (g->top_logprobs < 0) return BAD("gen_config: field 'top_logprobs' = %d is negative", (int)g->top_logprobs);
    return GP_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Storage owned by a config (arrays parsed from JSON): a chain of blocks in g->_owned                               */
/* ---------------------------------------------------------------------------------------------------------------- */

typedef struct owned_block {
    struct owned_block *next;
    max_align_t data[];
} owned_block;

static void *owned_alloc(gp_gen_config *g, size_t n, size_t size) {
    size_t bytes, total;
    if (!gp_mul_ok(n ? n : 1, size, &bytes) || __builtin_add_overflow(bytes, sizeof(owned_block), &total)) {
        gp_set_error(GP_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    owned_block *b = gp_calloc(1, total);
    if (!b) return NULL;
    b->next = g->_owned;
    g->_owned = b;
    return b->data;
}

void gp_gen_config_free_owned(gp_gen_config *g) {
    if (!g) return;
    owned_block *b = g->_owned;
    if (!b) return;
    while (b) {
        owned_block *n = b->next;
        free(b);
        b = n;
    }
    /* clear the pointers into the storage (the arrays JSON can set all live there) */
    g->_owned = NULL;
    g->bad_words_ids = NULL;
    g->n_bad_words_ids = 0;
    g->sequence_bias = NULL;
    g->n_sequence_bias = 0;
    g->suppress_tokens = NULL;
    g->n_suppress_tokens = 0;
    g->begin_suppress_tokens = NULL;
    g->n_begin_suppress_tokens = 0;
    g->stop_strings = NULL;
    g->n_stop_strings = 0;
}

/* generation_config.json                                                                                            */
/* ---------------------------------------------------------------------------------------------------------------- */

#define JERR(...) gp_set_error(GP_ERR_FORMAT, __VA_ARGS__)

/* Reads a JSON array of token ids in [0, hi] into ids [n] (owned by g); field names the array in messages. */
static gp_status id_array(gp_gen_config *g, const cJSON *arr, const char *path, const char *field, int32_t hi,
                          int32_t **ids, int32_t *n) {
    if (!cJSON_IsArray(arr)) return JERR("%s: field '%s' must be a list of token ids", path, field);
    int32_t k = (int32_t)cJSON_GetArraySize(arr);
    int32_t *v = owned_alloc(g, (size_t)k, sizeof(int32_t));
    if (!v) return GP_ERR_NOMEM;
    int32_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        gp_status s = gp_json_id_at(path, field, i, e, hi, &v[i]);
        if (s) return s;
        i++;
    }
    *ids = v;
    *n = k;
    return GP_OK;
}

static gp_status apply_bad_words(gp_gen_config *g, const gp_jobj *o, int32_t hi) {
    const cJSON *v;
    gp_status s = gp_json_arr(o, "bad_words_ids", &v);
    if (s || !v) return s;
    int32_t n = (int32_t)cJSON_GetArraySize(v);
    gp_token_seq *seqs = owned_alloc(g, (size_t)n, sizeof *seqs);
    if (!seqs) return GP_ERR_NOMEM;
    int32_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char field[48];
        snprintf(field, sizeof field, "bad_words_ids[%d]", (int)i);
        int32_t *ids, k;
        if ((s = id_array(g, e, o->path, field, hi, &ids, &k))) return s;
        if (k == 0) return JERR("%s: field '%s' is an empty list", o->path, field);
        seqs[i].ids = ids;
        seqs[i].n = k;
        i++;
    }
    g->bad_words_ids = seqs;
    g->n_bad_words_ids = n;
    return GP_OK;
}

/* sequence_bias as transformers serialises it: a list of [[ids...], bias] pairs. */
static gp_status apply_sequence_bias(gp_gen_config *g, const gp_jobj *o, int32_t hi) {
    const cJSON *v = gp_json_get(o, "sequence_bias");
    if (!v) return GP_OK;
    if (!cJSON_IsArray(v))
        return JERR("%s: field 'sequence_bias' must be a list of [[token ids], bias] pairs", o->path);
    int32_t n = (int32_t)cJSON_GetArraySize(v);
    gp_seq_bias *sb = owned_alloc(g, (size_t)n, sizeof *sb);
    if (!sb) return GP_ERR_NOMEM;
    int32_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char field[48];
        snprintf(field, sizeof field, "sequence_bias[%d]", (int)i);
        const cJSON *b = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(b) || !isfinite(b->valuedouble))
            return JERR("%s: field '%s' must be a [[token ids], bias] pair with a finite bias", o->path, field);
        int32_t *ids, k;
        gp_status s = id_array(g, cJSON_GetArrayItem(e, 0), o->path, field, hi, &ids, &k);
        if (s) return s;
        if (k == 0) return JERR("%s: field '%s' has an empty token list", o->path, field);
        sb[i].ids = ids;
        sb[i].n = k;
        sb[i].bias = b->valuedouble;
        i++;
    }
    g->sequence_bias = sb;
    g->n_sequence_bias = n;
    return GP_OK;
}

static gp_status apply_stop_strings(gp_gen_config *g, const gp_jobj *o) {
    const cJSON *v = gp_json_get(o, "stop_strings");
    if (!v) return GP_OK;
    int32_t n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? (int32_t)cJSON_GetArraySize(v) : -1;
    if (n < 0) return JERR("%s: field 'stop_strings' must be a string or a list of strings", o->path);
    const char **list = owned_alloc(g, (size_t)n, sizeof *list);
    if (!list) return GP_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(e) || !e->valuestring[0])
            return JERR("%s: field 'stop_strings[%d]' must be a non-empty string", o->path, (int)i);
        size_t len = strlen(e->valuestring);
        char *copy = owned_alloc(g, len + 1, 1);
        if (!copy) return GP_ERR_NOMEM;
        memcpy(copy, e->valuestring, len + 1);
        list[i] = copy;
    }
    g->stop_strings = list;
    g->n_stop_strings = n;
    return GP_OK;
}

static gp_status apply_forced_eos(gp_gen_config *g, const gp_jobj *o, int32_t hi) {
    const cJSON *v = gp_json_get(o, "forced_eos_token_id");
    if (!v) return GP_OK;
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) != 1)
            return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'forced_eos_token_id': only one id is supported",
                                o->path);
        v = cJSON_GetArrayItem(v, 0);
    }
    return gp_json_id_at(o->path, "forced_eos_token_id", -1, v, hi, &g->forced_eos_token_id);
}

static gp_status apply_id_list(gp_gen_config *g, const gp_jobj *o, const char *key, int32_t hi, const int32_t **ids,
                               int32_t *n) {
    const cJSON *v = gp_json_get(o, key);
    if (!v) return GP_OK;
    int32_t *out;
    gp_status s = id_array(g, v, o->path, key, hi, &out, n);
    if (!s) *ids = out;
    return s;
}

/* The scalar knobs (ranges beyond the type are gp_gen_config_validate's). */
static gp_status apply_scalars(gp_gen_config *t, const gp_jobj *o, int32_t hi) {
    const double H = HUGE_VAL;
    gp_status s = GP_OK;
    if (!s) s = gp_json_i32(o, "max_new_tokens", 0, INT32_MAX, &t->max_new_tokens);
    if (!s) s = gp_json_i32(o, "max_length", 0, INT32_MAX, &t->max_length);
    if (!s) s = gp_json_i32(o, "min_length", 0, INT32_MAX, &t->min_length);
    if (!s) s = gp_json_i32(o, "min_new_tokens", 0, INT32_MAX, &t->min_new_tokens);
    if (!s) s = gp_json_bool(o, "do_sample", &t->do_sample);
    if (!s) s = gp_json_num(o, "temperature", -H, H, &t->temperature);
    if (!s) s = gp_json_i32(o, "top_k", 0, INT32_MAX, &t->top_k);
    if (!s) s = gp_json_num(o, "top_p", -H, H, &t->top_p);
    if (!s) s = gp_json_num(o, "min_p", -H, H, &t->min_p);
    if (!s) s = gp_json_num(o, "typical_p", -H, H, &t->typical_p);
    if (!s) s = gp_json_num(o, "epsilon_cutoff", -H, H, &t->epsilon_cutoff);
    if (!s) s = gp_json_num(o, "eta_cutoff", -H, H, &t->eta_cutoff);
    if (!s) s = gp_json_num(o, "repetition_penalty", -H, H, &t->repetition_penalty);
    if (!s) s = gp_json_i32(o, "no_repeat_ngram_size", 0, INT32_MAX, &t->no_repeat_ngram_size);
    if (!s) s = gp_json_num(o, "max_time", -H, H, &t->max_time);
    if (!s && gp_json_has(o, "forced_bos_token_id"))
        s = gp_json_id_at(o->path, "forced_bos_token_id", -1, gp_json_get(o, "forced_bos_token_id"), hi,
                          &t->forced_bos_token_id);
    return s;
}

/* Applies the fields of a parsed generation_config.json onto t. */
static gp_status apply_fields(gp_gen_config *t, const gp_jobj *o, int32_t n_vocab) {
    int32_t hi = n_vocab > 0 ? n_vocab - 1 : INT32_MAX;
    int has_max_new = gp_json_has(o, "max_new_tokens"), has_max_len = gp_json_has(o, "max_length");
    gp_status s = apply_scalars(t, o, hi);
    if (!s) s = apply_forced_eos(t, o, hi);
    if (!s) s = gp_json_ids(o, "eos_token_id", hi, t->eos_ids, GP_MAX_EOS, &t->n_eos);
    if (!s) s = apply_bad_words(t, o, hi);
    if (!s) s = apply_sequence_bias(t, o, hi);
    if (!s) s = apply_stop_strings(t, o);
    if (!s) s = apply_id_list(t, o, "suppress_tokens", hi, &t->suppress_tokens, &t->n_suppress_tokens);
    if (!s) s = apply_id_list(t, o, "begin_suppress_tokens", hi, &t->begin_suppress_tokens, &t->n_begin_suppress_tokens);
    /* transformers: max_new_tokens wins over max_length; a model's max_length replaces the library's default cap
     * of 20 new tokens when the file sets no max_new_tokens */
    if (!s && has_max_len && !has_max_new) t->max_new_tokens = 0;
    if (!s && gp_gen_config_validate(t, n_vocab) != GP_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", gp_errmsg());
        s = JERR("%s: %s", o->path, msg);
    }
    return s;
}

gp_status gp_gen_config_parse_json(gp_gen_config *g, const char *json, size_t len, const char *path, int32_t n_vocab,
                                   int32_t *bos_id) {
    if (!g || !json) return gp_set_error(GP_ERR_INVALID_ARG, "gp_gen_config_apply_json: NULL argument");
    if (!path) path = "generation_config.json";
    cJSON *root;
    gp_status s = gp_json_parse(path, json, len, GP_JSON_CONFIG_TREE, GP_JSON_NO_DUP_KEYS, &root);
    if (s) return s;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return JERR("%s: the top level must be a JSON object", path);
    }
    gp_jobj o = gp_jobj_root(path, root);
    /* work on a copy so that a failure leaves *g as it was (storage allocated on the way is released) */
    gp_gen_config t = *g;
    t._owned = NULL;
    s = apply_fields(&t, &o, n_vocab);
    if (!s && bos_id && gp_json_has(&o, "bos_token_id"))
        s = gp_json_id_at(path, "bos_token_id", -1, gp_json_get(&o, "bos_token_id"),
                          n_vocab > 0 ? n_vocab - 1 : INT32_MAX, bos_id);
    cJSON_Delete(root);
    if (s) {
        gp_gen_config_free_owned(&t);
        return s;
    }
    /* chain the new storage in front of what g already owned */
    if (t._owned) {
        owned_block *last = t._owned;
        while (last->next) last = last->next;
        last->next = g->_owned;
    } else t._owned = g->_owned;
    *g = t;
    return GP_OK;
}

gp_status gp_gen_config_apply_json_text(gp_gen_config *g, const char *json, const char *path) {
    return gp_gen_config_parse_json(g, json, json ? strlen(json) : 0, path, 0, NULL);
}

gp_status gp_gen_config_load_json(gp_gen_config *g, const char *path, int32_t n_vocab, int32_t *bos_id) {
    if (!g || !path) return gp_set_error(GP_ERR_INVALID_ARG, "gp_gen_config_apply_json: NULL argument");
    char *text = NULL;
    size_t len = 0;
    gp_status s = gp_read_file(path, GP_JSON_CONFIG_BYTES, &text, &len);
    if (s) return s;
    s = gp_gen_config_parse_json(g, text, len, path, n_vocab, bos_id);
    free(text);
    return s;
}

gp_status gp_gen_config_apply_json(gp_gen_config *g, const char *path) { return gp_gen_config_load_json(g, path, 0, NULL); }
