/* tokenizer.c — loading tokenizer.json (+ tokenizer_config.json) into a gp_tokenizer, the encode pipeline (added
 * tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor) and the small query API. */
#include "tokenizer/tok_internal.h"
#include "io/json.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_VOCAB_ID (1 << 24)

/* ---- loading helpers ---------------------------------------------------------------------------------------- */

/* Every key and string value of the tree must be valid UTF-8 (cJSON does not check, tokenizers' serde does): added
 * tokens, vocabulary keys, normalizer and decoder strings are later matched and split as UTF-8 characters.  at
 * holds the JSON path of j (at[len] is where children append). */
static gp_status check_utf8_tree(const cJSON *j, const char *path, char *at, size_t len, size_t cap) {
    if (j->string && !tk_utf8_is_valid(j->string, strlen(j->string)))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': a key is not valid UTF-8", path, len ? at : "(root)");
    if (cJSON_IsString(j) && j->valuestring && !tk_utf8_is_valid(j->valuestring, strlen(j->valuestring)))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': the string is not valid UTF-8", path, len ? at : "(root)");
    int i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
        int k = c->string && tk_utf8_is_valid(c->string, strlen(c->string))
                    ? snprintf(at + len, cap - len, "%s%s", len ? "." : "", c->string)
                    : snprintf(at + len, cap - len, "[%d]", i);
        size_t nl = k < 0 ? len : len + (size_t)k < cap ? len + (size_t)k : cap - 1;
        gp_status s = check_utf8_tree(c, path, at, nl, cap);
        at[len] = 0;
        if (s) return s;
    }
    return GP_OK;
}

/* The bounded parse of src/io/json.h, with limits sized to real tokenizer.json files. */
static gp_status parse_json_file(const char *path, cJSON **out) {
    char *data;
    size_t len;
    *out = NULL;
    gp_status s = gp_read_file(path, GP_JSON_TOKENIZER_BYTES, &data, &len);
    if (s) return s;
    s = gp_json_parse(path, data, len, GP_JSON_TOKENIZER_TREE, 0, out);
    free(data);
    if (s) return s;
    char at[256] = "";
    gp_status us = check_utf8_tree(*out, path, at, 0, sizeof at);
    if (us) {
        cJSON_Delete(*out);
        *out = NULL;
        return us;
    }
    return GP_OK;
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static int jnull(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* A token name in tokenizer_config.json: "x" or {"content": "x", ...}. */
static const char *token_name(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = jget(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

static int is_word_char(uint32_t cp) { /* Rust regex \w (Unicode) */
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_NO) || c == UTF8PROC_CATEGORY_PC || cp == 0x200C ||
           cp == 0x200D;
}

/* ---- added-token matcher ------------------------------------------------------------------------------------ */

static const char *added_text(const tk_added *a, int use_norm, size_t *len) {
    if (use_norm && a->norm_content) {
        *len = a->norm_len;
        return a->norm_content;
    }
    *len = a->len;
    return a->content;
}

/* Orders added tokens longest first (ties: lower index first); shell sort, so no global context is needed. */
static int added_before(const gp_tokenizer *t, int normalized, int32_t x, int32_t y) {
    size_t lx, ly;
    added_text(&t->added[x], normalized, &lx);
    added_text(&t->added[y], normalized, &ly);
    return lx != ly ? lx > ly : x < y;
}

static void sort_added(const gp_tokenizer *t, int normalized, int32_t *v, size_t n) {
    static const size_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        size_t gap = gaps[g];
        for (size_t i = gap; i < n; i++) {
            int32_t x = v[i];
            size_t j = i;
            while (j >= gap && added_before(t, normalized, x, v[j - gap])) {
                v[j] = v[j - gap];
                j -= gap;
            }
            v[j] = x;
        }
    }
}

static gp_status build_matcher(gp_tokenizer *t, tk_matcher *m, int normalized) {
    memset(m, 0, sizeof *m);
    m->use_norm = normalized;
    int cnt[256] = {0};
    for (int i = 0; i < t->n_added; i++) {
        size_t l;
        const char *s = added_text(&t->added[i], normalized, &l);
        if (t->added[i].normalized == normalized && l) cnt[(unsigned char)s[0]]++;
    }
    m->start[0] = 0;
    for (int b = 0; b < 256; b++) m->start[b + 1] = m->start[b] + (uint32_t)cnt[b];
    m->idx = gp_malloc(m->start[256] ? m->start[256] : 1, sizeof *m->idx);
    if (!m->idx) return GP_ERR_NOMEM;
    uint32_t fill[256];
    memcpy(fill, m->start, sizeof fill);
    for (int i = 0; i < t->n_added; i++) {
        size_t l;
        const char *s = added_text(&t->added[i], normalized, &l);
        if (t->added[i].normalized == normalized && l) m->idx[fill[(unsigned char)s[0]]++] = i;
    }
    for (int b = 0; b < 256; b++)
        if (cnt[b] > 1) sort_added(t, normalized, m->idx + m->start[b], (size_t)cnt[b]);
    return GP_OK;
}

/* One piece of a split on added tokens: text [s, e) or an added token (idx >= 0). */
typedef struct {
    size_t s, e;
    int idx;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int span_push(spans *sp, size_t s, size_t e, int idx) {
    if (sp->n == sp->cap) {
        size_t nc = sp->cap ? sp->cap * 2 : 16;
        span *q = gp_realloc(sp->v, nc, sizeof *q);
        if (!q) return -1;
        sp->v = q;
        sp->cap = nc;
    }
    sp->v[sp->n++] = (span){s, e, idx};
    return 0;
}

static size_t prev_char(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

/* Splits s on the matcher's tokens (leftmost-longest, then single_word / lstrip / rstrip like AddedVocabulary). */
static int split_added(const gp_tokenizer *t, const tk_matcher *m, const char *s, size_t n, spans *out) {
    out->n = 0;
    size_t start_offset = 0, i = 0;
    if (m->start[256] == 0) return n ? span_push(out, 0, n, -1) : 0;
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        uint32_t a0 = m->start[b], a1 = m->start[b + 1];
        int hit = -1;
        size_t hl = 0;
        for (uint32_t k = a0; k < a1; k++) {
            size_t l;
            const char *c = added_text(&t->added[m->idx[k]], m->use_norm, &l);
            if (l <= n - i && memcmp(s + i, c, l) == 0) {
                hit = m->idx[k];
                hl = l;
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        size_t ms = i, me = i + hl;
        i = me; /* the search resumes after this match even if it is discarded */
        const tk_added *a = &t->added[hit];
        if (a->single_word) {
            uint32_t cp;
            int left_ok = ms == 0, right_ok = me == n;
            if (!left_ok) {
                size_t p = prev_char(s, ms);
                tk_utf8_dec(s + p, ms - p, &cp);
                left_ok = !is_word_char(cp);
            }
            if (!right_ok) {
                tk_utf8_dec(s + me, n - me, &cp);
                right_ok = !is_word_char(cp);
            }
            if (!left_ok || !right_ok) continue;
        }
        if (a->lstrip) {
            size_t ns = ms;
            while (ns > 0) {
                size_t p = prev_char(s, ns);
                uint32_t cp;
                tk_utf8_dec(s + p, ns - p, &cp);
                if (!tk_unicode_is_whitespace(cp)) break;
                ns = p;
            }
            ms = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (me < n) {
                uint32_t cp;
                int l = tk_utf8_dec(s + me, n - me, &cp);
                if (!tk_unicode_is_whitespace(cp)) break;
                me += (size_t)l;
            }
            i = me;
        }
        if (start_offset < ms && span_push(out, start_offset, ms, -1)) return -1;
        if (span_push(out, ms, me, hit)) return -1;
        start_offset = me;
    }
    if (start_offset < n && span_push(out, start_offset, n, -1)) return -1;
    return 0;
}

/* ---- load --------------------------------------------------------------------------------------------------- */

static gp_status load_vocab(gp_tokenizer *t, const cJSON *vocab, const cJSON *added, const char *path) {
    if (!cJSON_IsObject(vocab))
        return gp_set_error(jnull(vocab) ? GP_ERR_MISSING : GP_ERR_FORMAT, "%s: field 'model.vocab': %s", path,
                            jnull(vocab) ? "missing" : "not an object");
    size_t bytes = 0, n = 0;
    int32_t max_id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next, n++) {
        double v = e->valuedouble;
        if (!cJSON_IsNumber(e) || v < 0 || v >= MAX_VOCAB_ID || v != (double)(int32_t)v)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'model.vocab': id of token '%s' is not an integer in [0, %d)",
                                path, e->string ? e->string : "", MAX_VOCAB_ID);
        if ((int32_t)v > max_id) max_id = (int32_t)v;
        bytes += strlen(e->string) + 1;
    }
    int n_added = cJSON_GetArraySize(added);
    int i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        const cJSON *id = jget(e, "id"), *c = jget(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= MAX_VOCAB_ID ||
            id->valuedouble != (double)(int32_t)id->valuedouble)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'added_tokens[%d].id': not an integer in [0, %d)", path, i,
                                MAX_VOCAB_ID);
        if (!cJSON_IsString(c))
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'added_tokens[%d].content': missing or not a string", path, i);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    t->n_vocab = max_id + 1;
    t->arena = gp_malloc(bytes ? bytes : 1, 1);
    t->id_str = gp_calloc((size_t)t->n_vocab + 1, sizeof *t->id_str);
    t->id_len = gp_calloc((size_t)t->n_vocab + 1, sizeof *t->id_len);
    t->is_special = gp_calloc((size_t)t->n_vocab + 1, 1);
    t->added = gp_calloc((size_t)(n_added ? n_added : 1), sizeof *t->added);
    if (!t->arena || !t->id_str || !t->id_len || !t->is_special || !t->added) return GP_ERR_NOMEM;
    if (tk_strmap_init(&t->bpe.vocab, n)) return GP_ERR_NOMEM;
    char *p = t->arena;
    t->split_metaspace = 1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id = (int32_t)e->valuedouble;
        size_t l = strlen(e->string);
        memcpy(p, e->string, l + 1);
        if (t->id_str[id])
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'model.vocab': id %d is used by both '%s' and '%s'", path, id,
                                t->id_str[id], p);
        int r = tk_strmap_put(&t->bpe.vocab, p, l, id);
        if (r < 0) return GP_ERR_NOMEM;
        if (r == 0) return gp_set_error(GP_ERR_FORMAT, "%s: field 'model.vocab': token '%s' is duplicated", path, p);
        t->id_str[id] = p;
        t->id_len[id] = (uint32_t)l;
        for (const char *q = p; t->split_metaspace && (q = memmem(q, l - (size_t)(q - p), "\xE2\x96\x81", 3)); q += 3)
            if (q > p && (q - p < 3 || memcmp(q - 3, "\xE2\x96\x81", 3) != 0)) t->split_metaspace = 0;
        p += l + 1;
    }
    i = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, i++) {
        tk_added *a = &t->added[i];
        const char *c = jget(e, "content")->valuestring;
        a->len = strlen(c);
        if (!(a->content = gp_strdup(c))) return GP_ERR_NOMEM;
        a->id = (int32_t)jget(e, "id")->valuedouble;
        a->special = cJSON_IsTrue(jget(e, "special"));
        a->lstrip = cJSON_IsTrue(jget(e, "lstrip"));
        a->rstrip = cJSON_IsTrue(jget(e, "rstrip"));
        a->single_word = cJSON_IsTrue(jget(e, "single_word"));
        const cJSON *nz = jget(e, "normalized");
        a->normalized = nz ? cJSON_IsTrue(nz) : !a->special;
        t->n_added = i + 1;
        if (tk_strmap_put(&t->added_map, a->content, a->len, i) < 0) return GP_ERR_NOMEM;
        t->id_str[a->id] = a->content;
        t->id_len[a->id] = (uint32_t)a->len;
        if (a->special) t->is_special[a->id] = 1;
    }
    return GP_OK;
}

static gp_status load_model(gp_tokenizer *t, const cJSON *root, const char *path) {
    const cJSON *model = jget(root, "model");
    if (!cJSON_IsObject(model))
        return gp_set_error(jnull(model) ? GP_ERR_MISSING : GP_ERR_FORMAT, "%s: field 'model': %s", path,
                            jnull(model) ? "missing" : "not an object");
    const cJSON *type = jget(model, "type");
    const cJSON *merges = jget(model, "merges");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE") != 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'model.type': tokenizer model '%s' is not supported (only BPE)",
                            path, type->valuestring);
    if (!jnull(type) && !cJSON_IsString(type))
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'model.type': not a string", path);
    if (jnull(merges))
        return gp_set_error(type ? GP_ERR_MISSING : GP_ERR_UNSUPPORTED, "%s: field 'model.merges': %s", path,
                            type ? "missing" : "missing, and model.type is absent (only BPE is supported)");
    if (!cJSON_IsArray(merges)) return gp_set_error(GP_ERR_FORMAT, "%s: field 'model.merges': not an array", path);
    gp_status s = load_vocab(t, jget(model, "vocab"), jget(root, "added_tokens"), path);
    if (s) return s;
    tk_bpe *m = &t->bpe;
    m->fuse_unk = cJSON_IsTrue(jget(model, "fuse_unk"));
    m->byte_fallback = cJSON_IsTrue(jget(model, "byte_fallback"));
    m->ignore_merges = cJSON_IsTrue(jget(model, "ignore_merges"));
    const cJSON *pre = jget(model, "continuing_subword_prefix"), *suf = jget(model, "end_of_word_suffix");
    if (cJSON_IsString(pre) && pre->valuestring[0] && !(m->prefix = gp_strdup(pre->valuestring))) return GP_ERR_NOMEM;
    if (cJSON_IsString(suf) && suf->valuestring[0] && !(m->suffix = gp_strdup(suf->valuestring))) return GP_ERR_NOMEM;
    const cJSON *unk = jget(model, "unk_token");
    m->unk_id = cJSON_IsString(unk) ? tk_strmap_get(&m->vocab, unk->valuestring, strlen(unk->valuestring)) : -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tk_strmap_get(&m->vocab, name, 6);
    }
    return tk_bpe_build_merges(m, merges, path);
}

/* Post-processor: the ids placed before / after the sequence when add_special is set. */
static gp_status load_post(gp_tokenizer *t, const cJSON *pp, const char *path, const char *field) {
    if (jnull(pp)) return GP_OK;
    const cJSON *type = jget(pp, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    char sub[128];
    if (!strcmp(ty, "ByteLevel")) return GP_OK;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = jget(pp, "processors");
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(a) ? a->child : NULL; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.processors[%d]", field, i);
            gp_status s = load_post(t, e, path, sub);
            if (s) return s;
        }
        return GP_OK;
    }
    if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
        const cJSON *cls = jget(pp, "cls"), *sep = jget(pp, "sep");
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || !cJSON_IsNumber(cJSON_GetArrayItem(cls, 1)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(sep, 1)))
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.cls/sep': expected [token, id]", path, field);
        for (int k = 0; k < 2; k++) {
            double id = cJSON_GetArrayItem(k ? sep : cls, 1)->valuedouble;
            if (!(id >= 0 && id < t->n_vocab) || id != (double)(int32_t)id)
                return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.%s[1]': id %g is outside the vocabulary [0, %d)",
                                    path, field, k ? "sep" : "cls", id, t->n_vocab);
        }
        free(t->tmpl_prefix);
        free(t->tmpl_suffix);
        t->tmpl_prefix = gp_malloc(1, sizeof(int32_t));
        t->tmpl_suffix = gp_malloc(1, sizeof(int32_t));
        if (!t->tmpl_prefix || !t->tmpl_suffix) return GP_ERR_NOMEM;
        t->tmpl_prefix[0] = (int32_t)cJSON_GetArrayItem(cls, 1)->valuedouble;
        t->tmpl_suffix[0] = (int32_t)cJSON_GetArrayItem(sep, 1)->valuedouble;
        t->n_prefix = t->n_suffix = 1;
        return GP_OK;
    }
    if (strcmp(ty, "TemplateProcessing") != 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s.type': post-processor '%s' is not supported", path, field, ty);
    const cJSON *single = jget(pp, "single"), *specials = jget(pp, "special_tokens");
    if (!cJSON_IsArray(single)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.single': missing or not an array", path, field);
    tk_ids pre = {0}, post = {0};
    int seen_seq = 0, i = 0;
    gp_status st = GP_OK;
    for (const cJSON *e = single->child; e; e = e->next, i++) {
        const cJSON *sp = jget(e, "SpecialToken");
        if (jget(e, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const cJSON *name = jget(sp, "id");
        const cJSON *def = cJSON_IsString(name) ? jget(specials, name->valuestring) : NULL;
        const cJSON *ids = jget(def, "ids");
        if (!cJSON_IsArray(ids)) {
            st = gp_set_error(GP_ERR_FORMAT, "%s: field '%s.single[%d]': special token '%s' not in %s.special_tokens",
                              path, field, i, cJSON_IsString(name) ? name->valuestring : "?", field);
            break;
        }
        for (const cJSON *x = ids->child; x; x = x->next) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= t->n_vocab) {
                st = gp_set_error(GP_ERR_FORMAT, "%s: field '%s.special_tokens.%s.ids': id out of range", path, field,
                                  name->valuestring);
                break;
            }
            if (tk_ids_push(seen_seq ? &post : &pre, (int32_t)x->valuedouble)) { st = GP_ERR_NOMEM; break; }
        }
        if (st) break;
    }
    if (st) {
        free(pre.v);
        free(post.v);
        return st;
    }
    free(t->tmpl_prefix);
    free(t->tmpl_suffix);
    t->tmpl_prefix = pre.v;
    t->tmpl_suffix = post.v;
    t->n_prefix = (int)pre.n;
    t->n_suffix = (int)post.n;
    return GP_OK;
}

static gp_status load_config(gp_tokenizer *t, const char *cfg_path) {
    t->bos_id = t->eos_id = t->pad_id = -1;
    if (!gp_file_exists(cfg_path)) return GP_OK;
    cJSON *c;
    gp_status s = parse_json_file(cfg_path, &c);
    if (s) return s;
    const char *bos = token_name(jget(c, "bos_token")), *eos = token_name(jget(c, "eos_token")),
               *pad = token_name(jget(c, "pad_token"));
    if (bos) t->bos_id = gp_tokenizer_token_to_id(t, bos);
    if (eos) t->eos_id = gp_tokenizer_token_to_id(t, eos);
    if (pad) t->pad_id = gp_tokenizer_token_to_id(t, pad);
    /* add_bos_token / add_eos_token replace the post-processor's template (transformers' update_post_processor) */
    const cJSON *ab = jget(c, "add_bos_token"), *ae = jget(c, "add_eos_token");
    if (cJSON_IsBool(ab) || cJSON_IsBool(ae)) {
        int add_bos = cJSON_IsTrue(ab), add_eos = cJSON_IsTrue(ae);
        if ((add_bos && t->bos_id < 0) || (add_eos && t->eos_id < 0)) {
            cJSON_Delete(c);
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': the token is not in the vocabulary", cfg_path,
                                add_bos && t->bos_id < 0 ? "bos_token" : "eos_token");
        }
        free(t->tmpl_prefix);
        free(t->tmpl_suffix);
        t->tmpl_prefix = gp_malloc(1, sizeof(int32_t));
        t->tmpl_suffix = gp_malloc(1, sizeof(int32_t));
        if (!t->tmpl_prefix || !t->tmpl_suffix) {
            cJSON_Delete(c);
            return GP_ERR_NOMEM;
        }
        t->n_prefix = add_bos;
        t->n_suffix = add_eos;
        t->tmpl_prefix[0] = t->bos_id;
        t->tmpl_suffix[0] = t->eos_id;
    }
    cJSON_Delete(c);
    return GP_OK;
}

static gp_status load_added_norms(gp_tokenizer *t) {
    if (!t->has_norm) return GP_OK;
    tk_scratch sc;
    if (tk_scratch_init(&sc)) return GP_ERR_NOMEM;
    tk_buf b = {0};
    gp_status st = GP_OK;
    for (int i = 0; i < t->n_added && !st; i++) {
        tk_added *a = &t->added[i];
        if (!a->normalized) continue;
        if (tk_norm_apply(&t->norm, &sc, a->content, a->len, &b)) { st = tk_fail_status(&sc); break; }
        if (b.len == a->len && !memcmp(b.p, a->content, a->len)) continue;
        a->norm_content = gp_malloc(b.len + 1, 1);
        if (!a->norm_content) { st = GP_ERR_NOMEM; break; }
        memcpy(a->norm_content, b.p, b.len + 1);
        a->norm_len = b.len;
        t->id_str[a->id] = a->norm_content; /* decoding uses the normalized form, like simple_id_to_token */
        t->id_len[a->id] = (uint32_t)a->norm_len;
    }
    free(b.p);
    tk_scratch_free(&sc);
    return st;
}

gp_status gp_tokenizer_load(const char *path, gp_tokenizer **out) {
    if (out) *out = NULL;
    if (!path || !out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_tokenizer_load: NULL path or out");
    cJSON *root;
    gp_status s = parse_json_file(path, &root);
    if (s) return s;
    gp_tokenizer *t = gp_calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return GP_ERR_NOMEM;
    }
    t->bos_id = t->eos_id = t->pad_id = -1;
    if (!(t->path = gp_strdup(path))) { s = GP_ERR_NOMEM; goto fail; }
    if (!cJSON_IsObject(root)) {
        s = gp_set_error(GP_ERR_FORMAT, "%s: not a JSON object", path);
        goto fail;
    }
    if ((s = load_model(t, root, path))) goto fail;
    const cJSON *n = jget(root, "normalizer"), *p = jget(root, "pre_tokenizer"), *d = jget(root, "decoder");
    if (!jnull(n)) {
        t->has_norm = 1;
        if ((s = tk_norm_parse(&t->norm, n, path, "normalizer"))) goto fail;
    }
    if (!jnull(p)) {
        t->has_pre = 1;
        t->split_metaspace = 0;
        if ((s = tk_pre_parse(&t->pre, p, path, "pre_tokenizer"))) goto fail;
    }
    if (!jnull(d)) {
        t->has_dec = 1;
        if ((s = tk_dec_parse(&t->dec, d, path, "decoder"))) goto fail;
    }
    if ((s = load_post(t, jget(root, "post_processor"), path, "post_processor"))) goto fail;
    if ((s = load_added_norms(t))) goto fail;
    if ((s = build_matcher(t, &t->match_raw, 0)) || (s = build_matcher(t, &t->match_norm, 1))) goto fail;
    cJSON_Delete(root);
    root = NULL;
    {
        /* tokenizer_config.json beside tokenizer.json */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? gp_malloc((size_t)(slash - path) + 1, 1) : gp_strdup(".");
        if (!dir) { s = GP_ERR_NOMEM; goto fail; }
        if (slash) {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = 0;
        }
        char *cfg = gp_path_join(dir[0] ? dir : "/", "tokenizer_config.json");
        free(dir);
        if (!cfg) { s = GP_ERR_NOMEM; goto fail; }
        s = load_config(t, cfg);
        free(cfg);
        if (s) goto fail;
    }
    *out = t;
    return GP_OK;
fail:
    cJSON_Delete(root);
    gp_tokenizer_free(t);
    return s;
}

gp_status gp_tokenizer_load_dir(const char *dir, gp_tokenizer **out) {
    if (out) *out = NULL;
    if (!dir || !out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_tokenizer_load_dir: NULL dir or out");
    char *p = gp_path_join(dir, "tokenizer.json");
    if (!p) return GP_ERR_NOMEM;
    gp_status s;
    if (!gp_file_exists(p)) s = gp_set_error(GP_ERR_MISSING, "%s: tokenizer.json not found in %s", p, dir);
    else s = gp_tokenizer_load(p, out);
    free(p);
    return s;
}

void gp_tokenizer_free(gp_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].norm_content);
    }
    free(t->added);
    tk_strmap_free(&t->added_map);
    free(t->match_raw.idx);
    free(t->match_norm.idx);
    tk_bpe_free(&t->bpe);
    free(t->id_str);
    free(t->id_len);
    free(t->is_special);
    free(t->arena);
    if (t->has_norm) tk_norm_free(&t->norm);
    if (t->has_pre) tk_pre_free(&t->pre);
    if (t->has_dec) tk_dec_free(&t->dec);
    free(t->tmpl_prefix);
    free(t->tmpl_suffix);
    free(t->path);
    free(t);
}

/* ---- encode ------------------------------------------------------------------------------------------------- */

typedef struct {
    tk_scratch sc;
    tk_bpe_cache cache;
    tk_list pieces, tmp;
    tk_buf norm;
    spans sp_raw, sp_norm;
    tk_ids ids;
} enc_state;

/* Pre-tokenizes and BPE-encodes one stretch of normalized text. */
static gp_status encode_text(const gp_tokenizer *t, enc_state *e, const char *s, size_t n, int at0) {
    tk_list_clear(&e->pieces);
    if (!n) return GP_OK;
    if (tk_list_push(&e->pieces, s, n, at0)) return GP_ERR_NOMEM;
    if (t->has_pre && tk_pre_apply(&t->pre, &e->sc, &e->pieces, &e->tmp)) return tk_fail_status(&e->sc);
    if (t->split_metaspace) {
        /* one BPE word per run of U+2581 and what follows it, up to the next such run */
        size_t a = 0;
        for (size_t q = 1; q + 3 <= n; q++) {
            if (memcmp(s + q, "\xE2\x96\x81", 3) != 0) continue;
            if (q >= 3 && memcmp(s + q - 3, "\xE2\x96\x81", 3) == 0) continue;
            gp_status st = tk_bpe_word(&t->bpe, &e->cache, s + a, q - a, &e->ids);
            if (st) return st;
            a = q;
            q += 2;
        }
        return tk_bpe_word(&t->bpe, &e->cache, s + a, n - a, &e->ids);
    }
    for (size_t i = 0; i < e->pieces.n; i++) {
        gp_status st = tk_bpe_word(&t->bpe, &e->cache, tk_list_str(&e->pieces, i), e->pieces.slen[i], &e->ids);
        if (st) return st;
    }
    return GP_OK;
}

static gp_status encode_all(const gp_tokenizer *t, enc_state *e, const char *s, size_t n, int add_special) {
    if (add_special)
        for (int i = 0; i < t->n_prefix; i++)
            if (tk_ids_push(&e->ids, t->tmpl_prefix[i])) return GP_ERR_NOMEM;
    if (split_added(t, &t->match_raw, s, n, &e->sp_raw)) return GP_ERR_NOMEM;
    for (size_t k = 0; k < e->sp_raw.n; k++) {
        span r = e->sp_raw.v[k];
        if (r.idx >= 0) {
            if (tk_ids_push(&e->ids, t->added[r.idx].id)) return GP_ERR_NOMEM;
            continue;
        }
        const char *seg = s + r.s;
        size_t sn = r.e - r.s;
        if (t->has_norm) {
            if (tk_norm_apply(&t->norm, &e->sc, seg, sn, &e->norm)) return tk_fail_status(&e->sc);
            seg = e->norm.p ? e->norm.p : "";
            sn = e->norm.len;
        }
        if (split_added(t, &t->match_norm, seg, sn, &e->sp_norm)) return GP_ERR_NOMEM;
        for (size_t q = 0; q < e->sp_norm.n; q++) {
            span u = e->sp_norm.v[q];
            gp_status st;
            if (u.idx >= 0) st = tk_ids_push(&e->ids, t->added[u.idx].id) ? GP_ERR_NOMEM : GP_OK;
            else st = encode_text(t, e, seg + u.s, u.e - u.s, r.s == 0 && u.s == 0);
            if (st) return st;
        }
    }
    if (add_special)
        for (int i = 0; i < t->n_suffix; i++)
            if (tk_ids_push(&e->ids, t->tmpl_suffix[i])) return GP_ERR_NOMEM;
    return GP_OK;
}

gp_status gp_tokenizer_encode(const gp_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                              int32_t *n_ids) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (len && !text))
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_tokenizer_encode: NULL tokenizer/text/ids/n_ids");
    enc_state e;
    memset(&e, 0, sizeof e);
    gp_status st = GP_OK;
    tk_buf clean = {0};
    if (tk_scratch_init(&e.sc)) return GP_ERR_NOMEM;
    if (len && !tk_utf8_is_valid(text, len)) {
        if (tk_utf8_sanitize(&clean, text, len)) { st = GP_ERR_NOMEM; goto done; }
        text = clean.p;
        len = clean.len;
    }
    st = encode_all(t, &e, text ? text : "", len, add_special);
    if (!st && e.ids.n > (size_t)INT32_MAX) st = gp_set_error(GP_ERR_RANGE, "gp_tokenizer_encode: too many ids");
    if (!st) {
        if (!e.ids.v && !(e.ids.v = gp_malloc(1, sizeof *e.ids.v))) st = GP_ERR_NOMEM;
        else {
            *ids = e.ids.v;
            *n_ids = (int32_t)e.ids.n;
            e.ids.v = NULL;
        }
    }
done:
    free(clean.p);
    free(e.ids.v);
    free(e.norm.p);
    free(e.sp_raw.v);
    free(e.sp_norm.v);
    tk_list_free(&e.pieces);
    tk_list_free(&e.tmp);
    tk_bpe_cache_free(&e.cache);
    tk_scratch_free(&e.sc);
    return st;
}

/* ---- queries ------------------------------------------------------------------------------------------------ */

int32_t gp_tokenizer_n_vocab(const gp_tokenizer *t) { return t ? t->n_vocab : 0; }

int32_t gp_tokenizer_token_to_id(const gp_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t l = strlen(token);
    int32_t a = tk_strmap_get(&t->added_map, token, l);
    if (a >= 0) return t->added[a].id;
    return tk_strmap_get(&t->bpe.vocab, token, l);
}

const char *gp_tokenizer_id_to_token(const gp_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return t->id_str[id];
}

int32_t gp_tokenizer_bos_id(const gp_tokenizer *t) { return t ? t->bos_id : -1; }
int32_t gp_tokenizer_eos_id(const gp_tokenizer *t) { return t ? t->eos_id : -1; }
int32_t gp_tokenizer_pad_id(const gp_tokenizer *t) { return t ? t->pad_id : -1; }

int gp_tokenizer_is_special(const gp_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->is_special[id];
}
