/* normalize.c — tokenizer.json normalizers (NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Prepend, Replace,
 * Sequence): parsing and application to a UTF-8 string, as Hugging Face tokenizers does. */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int jbool(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

gp_status tk_norm_parse(tk_norm *n, const void *jp, const char *path, const char *field) {
    const cJSON *j = jp;
    memset(n, 0, sizeof *n);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.type': missing or not a string", path, field);
    const char *ty = t->valuestring;
    if (!strcmp(ty, "NFC")) n->type = TK_NORM_NFC;
    else if (!strcmp(ty, "NFD")) n->type = TK_NORM_NFD;
    else if (!strcmp(ty, "NFKC")) n->type = TK_NORM_NFKC;
    else if (!strcmp(ty, "NFKD")) n->type = TK_NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) n->type = TK_NORM_LOWERCASE;
    else if (!strcmp(ty, "StripAccents")) n->type = TK_NORM_STRIP_ACCENTS;
    else if (!strcmp(ty, "Strip")) {
        n->type = TK_NORM_STRIP;
        n->strip_left = jbool(j, "strip_left", 1);
        n->strip_right = jbool(j, "strip_right", 1);
    } else if (!strcmp(ty, "Prepend")) {
        n->type = TK_NORM_PREPEND;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prepend");
        if (!cJSON_IsString(p)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.prepend': missing or not a string", path, field);
        if (!(n->str = gp_strdup(p->valuestring))) return GP_ERR_NOMEM;
    } else if (!strcmp(ty, "Replace")) {
        n->type = TK_NORM_REPLACE;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        if (!cJSON_IsString(c) || !cJSON_IsObject(p))
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': Replace needs 'pattern' and 'content'", path, field);
        if (!(n->str = gp_strdup(c->valuestring))) return GP_ERR_NOMEM;
        char what[256];
        snprintf(what, sizeof what, "%s.pattern", field);
        gp_status s = tk_regex_from_json(&n->re, p, path, what);
        if (s) return s;
    } else if (!strcmp(ty, "Sequence")) {
        n->type = TK_NORM_SEQUENCE;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(a)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.normalizers': missing or not an array", path, field);
        int k = cJSON_GetArraySize(a);
        n->items = gp_calloc((size_t)(k ? k : 1), sizeof *n->items);
        if (!n->items) return GP_ERR_NOMEM;
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i);
            gp_status s = tk_norm_parse(&n->items[i], e, path, sub);
            n->n_items = i + 1;
            if (s) return s;
        }
    } else {
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s.type': normalizer '%s' is not supported", path, field, ty);
    }
    return GP_OK;
}

void tk_norm_free(tk_norm *n) {
    for (int i = 0; i < n->n_items; i++) tk_norm_free(&n->items[i]);
    free(n->items);
    free(n->str);
    tk_regex_free(&n->re);
    memset(n, 0, sizeof *n);
}

static int all_below(const char *s, size_t len, uint32_t lim) {
    const unsigned char *u = (const unsigned char *)s;
    if (lim <= 0x80) {
        for (size_t i = 0; i < len; i++)
            if (u[i] >= 0x80) return 0;
        return 1;
    }
    /* lim <= 0x800: two-byte sequences below lim */
    for (size_t i = 0; i < len; i++) {
        if (u[i] < 0x80) continue;
        if (u[i] >= 0xE0) return 0;
        uint32_t cp = ((u[i] & 0x1Fu) << 6) | (i + 1 < len ? (u[i + 1] & 0x3Fu) : 0);
        if (cp >= lim) return 0;
        i++;
    }
    return 1;
}

static int unicode_form(tk_norm_type t, const char *s, size_t len, tk_buf *out) {
    /* Fast paths: ASCII is invariant under every form; text below U+0300 is invariant under NFC. */
    if (all_below(s, len, t == TK_NORM_NFC ? 0x300 : 0x80)) return tk_buf_put(out, s, len);
    int opt = UTF8PROC_STABLE;
    switch (t) {
    case TK_NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TK_NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TK_NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &r, (utf8proc_option_t)opt);
    if (n < 0) {
        gp_set_error(GP_ERR_FORMAT, "unicode normalization failed: %s", utf8proc_errmsg(n));
        return -1;
    }
    int rc = tk_buf_put(out, r, (size_t)n);
    free(r);
    return rc;
}

static int lowercase(const char *s, size_t len, tk_buf *out) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = tk_utf8_dec(s + i, len - i, &cp);
        i += (size_t)k;
        if (cp < 0x80) {
            if (tk_buf_putc(out, (char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp))) return -1;
        } else if (cp == 0x130) { /* İ lowercases to i + combining dot above (Rust's full mapping) */
            if (tk_buf_put(out, "i\xCC\x87", 3)) return -1;
        } else if (tk_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp))) {
            return -1;
        }
    }
    return 0;
}

static int strip_ws(const char *s, size_t len, int left, int right, tk_buf *out) {
    size_t a = 0, b = len;
    if (left)
        while (a < b) {
            uint32_t cp;
            int k = tk_utf8_dec(s + a, b - a, &cp);
            if (!tk_unicode_is_whitespace(cp)) break;
            a += (size_t)k;
        }
    if (right)
        while (b > a) {
            size_t p = b - 1;
            while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
            uint32_t cp;
            tk_utf8_dec(s + p, b - p, &cp);
            if (!tk_unicode_is_whitespace(cp)) break;
            b = p;
        }
    return tk_buf_put(out, s + a, b - a);
}

static int strip_accents(const char *s, size_t len, tk_buf *out) {
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int k = tk_utf8_dec(s + i, len - i, &cp);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        if (c != UTF8PROC_CATEGORY_MN && c != UTF8PROC_CATEGORY_MC && c != UTF8PROC_CATEGORY_ME &&
            tk_buf_put(out, s + i, (size_t)k))
            return -1;
        i += (size_t)k;
    }
    return 0;
}

static int replace_all(const tk_regex *re, tk_scratch *sc, const char *content, const char *s, size_t len,
                       tk_buf *out) {
    size_t pos = 0, from = 0, ms, me;
    size_t clen = strlen(content);
    for (;;) {
        int r = tk_regex_next(re, sc, s, len, from, &ms, &me);
        if (r < 0) return -1;
        if (r == 0) break;
        if (me == ms) { /* empty match: step over one character */
            if (ms >= len) break;
            uint32_t cp;
            from = ms + (size_t)tk_utf8_dec(s + ms, len - ms, &cp);
            continue;
        }
        if (tk_buf_put(out, s + pos, ms - pos) || tk_buf_put(out, content, clen)) return -1;
        pos = from = me;
    }
    return tk_buf_put(out, s + pos, len - pos);
}

int tk_norm_apply(const tk_norm *n, tk_scratch *sc, const char *s, size_t len, tk_buf *out) {
    out->len = 0;
    switch (n->type) {
    case TK_NORM_NFC: case TK_NORM_NFD: case TK_NORM_NFKC: case TK_NORM_NFKD:
        return unicode_form(n->type, s, len, out);
    case TK_NORM_LOWERCASE: return lowercase(s, len, out);
    case TK_NORM_STRIP: return strip_ws(s, len, n->strip_left, n->strip_right, out);
    case TK_NORM_STRIP_ACCENTS: return strip_accents(s, len, out);
    case TK_NORM_PREPEND:
        if (len && tk_buf_put(out, n->str, strlen(n->str))) return -1;
        return tk_buf_put(out, s, len);
    case TK_NORM_REPLACE: return replace_all(&n->re, sc, n->str, s, len, out);
    case TK_NORM_SEQUENCE: {
        tk_buf a = {0}, b = {0};
        if (tk_buf_put(&a, s, len)) return -1;
        for (int i = 0; i < n->n_items; i++) {
            if (tk_norm_apply(&n->items[i], sc, a.p, a.len, &b)) {
                free(a.p);
                free(b.p);
                return -1;
            }
            tk_buf t = a;
            a = b;
            b = t;
        }
        int rc = tk_buf_put(out, a.p, a.len);
        free(a.p);
        free(b.p);
        return rc;
    }
    }
    return 0;
}
