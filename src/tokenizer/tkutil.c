/* tkutil.c — the tokenizer's small building blocks: string lists and buffers, hash maps, UTF-8 decoding and
 * sanitising (maximal-subpart U+FFFD rule), and PCRE2 regex wrappers. */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers and lists ------------------------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) return -1;
        nc *= 2;
    }
    void *q = gp_realloc(*p, nc, elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

int tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (b->len + n + 1 < n) return -1;
    if (grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) return -1;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int tk_buf_put_cp(tk_buf *b, uint32_t c) {
    char t[4];
    int n;
    if (c < 0x80) { t[0] = (char)c; n = 1; }
    else if (c < 0x800) { t[0] = (char)(0xC0 | (c >> 6)); t[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        t[0] = (char)(0xE0 | (c >> 12)); t[1] = (char)(0x80 | ((c >> 6) & 0x3F)); t[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (c >> 18)); t[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((c >> 6) & 0x3F)); t[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    }
    return tk_buf_put(b, t, (size_t)n);
}

void tk_list_clear(tk_list *l) { l->len = l->n = 0; }

void tk_list_free(tk_list *l) {
    free(l->buf);
    free(l->off);
    free(l->slen);
    free(l->at0);
    memset(l, 0, sizeof *l);
}

int tk_list_push(tk_list *l, const char *s, size_t len, int at0) {
    if (l->n == l->ncap) {
        size_t nc = l->ncap ? 2 * l->ncap : 64;
        size_t *o = gp_realloc(l->off, nc, sizeof *o);
        if (!o) return -1;
        l->off = o;
        size_t *q = gp_realloc(l->slen, nc, sizeof *q);
        if (!q) return -1;
        l->slen = q;
        uint8_t *a = gp_realloc(l->at0, nc, 1);
        if (!a) return -1;
        l->at0 = a;
        l->ncap = nc;
    }
    if (grow((void **)&l->buf, &l->cap, l->len + len + 1, 1)) return -1;
    if (len) memcpy(l->buf + l->len, s, len);
    l->off[l->n] = l->len;
    l->slen[l->n] = len;
    l->at0[l->n] = (uint8_t)at0;
    l->len += len;
    l->n++;
    return 0;
}

int tk_list_extend_last(tk_list *l, const char *s, size_t len) {
    if (grow((void **)&l->buf, &l->cap, l->len + len + 1, 1)) return -1;
    /* the last item ends at l->len */
    if (len) memcpy(l->buf + l->len, s, len);
    l->len += len;
    l->slen[l->n - 1] += len;
    return 0;
}

int tk_ids_push(tk_ids *a, int32_t id) {
    if (grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return -1;
    a->v[a->n++] = id;
    return 0;
}

/* ---- hashing ----------------------------------------------------------------------------------------------- */

uint64_t tk_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x100000001B3ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    if (n) memcpy(&v, s, n);
    h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

int tk_strmap_init(tk_strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    m->slots = gp_calloc(cap, sizeof *m->slots);
    if (!m->slots) return -1;
    m->mask = (uint32_t)(cap - 1);
    m->n = 0;
    return 0;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->n = m->mask = 0;
}

static int strmap_grow(tk_strmap *m) {
    tk_strmap nm;
    if (tk_strmap_init(&nm, (size_t)m->n * 2 + 16)) return -1;
    for (uint32_t i = 0; i <= m->mask; i++) {
        struct tk_strmap_slot *s = &m->slots[i];
        if (!s->key) continue;
        uint32_t j = s->hash & nm.mask;
        while (nm.slots[j].key) j = (j + 1) & nm.mask;
        nm.slots[j] = *s;
        nm.n++;
    }
    free(m->slots);
    *m = nm;
    return 0;
}

int tk_strmap_put(tk_strmap *m, const char *key, size_t len, int32_t val) {
    if (!m->slots && tk_strmap_init(m, 16)) return -1;
    if ((size_t)(m->n + 1) * 2 > (size_t)m->mask + 1 && strmap_grow(m)) return -1;
    uint32_t h = (uint32_t)tk_hash(key, len);
    uint32_t j = h & m->mask;
    for (;;) {
        struct tk_strmap_slot *s = &m->slots[j];
        if (!s->key) {
            s->key = key ? key : "";
            s->len = (uint32_t)len;
            s->hash = h;
            s->val = val;
            m->n++;
            return 1;
        }
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) {
            s->val = val;
            return 0;
        }
        j = (j + 1) & m->mask;
    }
}

int32_t tk_strmap_get(const tk_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint32_t h = (uint32_t)tk_hash(key, len);
    uint32_t j = h & m->mask;
    for (;;) {
        const struct tk_strmap_slot *s = &m->slots[j];
        if (!s->key) return -1;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s->val;
        j = (j + 1) & m->mask;
    }
}

/* ---- UTF-8 ------------------------------------------------------------------------------------------------- */

int tk_utf8_dec(const char *p, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p;
    unsigned c = s[0];
    if (c < 0x80 || n < 2) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu); return 2; }
    if (c < 0xF0 || n < 4) {
        if (n < 3) { *cp = c; return 1; }
        *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return 3;
    }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

int tk_utf8_valid_at(const unsigned char *s, size_t n, size_t *bad) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else { *bad = 1; return 0; }
    size_t i = 1;
    for (int k = 0; k < need; k++, i++) {
        if (i >= n) { *bad = i; return 0; }
        unsigned b = s[i];
        unsigned l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
        if (b < l || b > h) { *bad = i; return 0; }
    }
    return need + 1;
}

int tk_utf8_is_valid(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        size_t bad;
        int k = tk_utf8_valid_at(s + i, n - i, &bad);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

int tk_utf8_sanitize(tk_buf *b, const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0, run = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        size_t bad;
        int k = tk_utf8_valid_at(s + i, n - i, &bad);
        if (k) { i += (size_t)k; continue; }
        if (tk_buf_put(b, p + run, i - run) || tk_buf_put(b, "\xEF\xBF\xBD", 3)) return -1;
        i += bad;
        run = i;
    }
    return tk_buf_put(b, p + run, n - run);
}

int tk_unicode_is_whitespace(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- regex ------------------------------------------------------------------------------------------------- */

gp_status tk_regex_from_json(tk_regex *re, const void *jp, const char *path, const char *what) {
    const cJSON *j = jp;
    memset(re, 0, sizeof *re);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "Regex");
    if (cJSON_IsString(s)) {
        re->literal_len = strlen(s->valuestring);
        re->literal = gp_strdup(s->valuestring);
        return re->literal ? GP_OK : GP_ERR_NOMEM;
    }
    if (!cJSON_IsString(r))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': expected {\"String\": ...} or {\"Regex\": ...}", path,
                            what);
    int err;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)r->valuestring, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off,
                             NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s': regex /%s/ does not compile at offset %zu: %s",
                            path, what, r->valuestring, (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
    return GP_OK;
}

void tk_regex_free(tk_regex *re) {
    if (re->code) pcre2_code_free(re->code);
    free(re->literal);
    memset(re, 0, sizeof *re);
}

int tk_scratch_init(tk_scratch *sc) {
    memset(sc, 0, sizeof *sc);
    sc->md = pcre2_match_data_create(8, NULL);
    sc->mctx = pcre2_match_context_create(NULL);
    sc->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!sc->md || !sc->mctx || !sc->jit) {
        tk_scratch_free(sc);
        gp_set_error(GP_ERR_NOMEM, "out of memory allocating regex match state");
        return -1;
    }
    pcre2_jit_stack_assign(sc->mctx, NULL, sc->jit);
    return 0;
}

void tk_scratch_free(tk_scratch *sc) {
    if (sc->md) pcre2_match_data_free(sc->md);
    if (sc->mctx) pcre2_match_context_free(sc->mctx);
    if (sc->jit) pcre2_jit_stack_free(sc->jit);
    memset(sc, 0, sizeof *sc);
}

int tk_regex_next(const tk_regex *re, tk_scratch *sc, const char *s, size_t n, size_t from, size_t *ms,
                  size_t *me) {
    if (re->literal) {
        if (!re->literal_len || from >= n) return 0;
        const char *p = memmem(s + from, n - from, re->literal, re->literal_len);
        if (!p) return 0;
        *ms = (size_t)(p - s);
        *me = *ms + re->literal_len;
        return 1;
    }
    if (from > n) return 0;
    if (from == 0 || s != sc->ck_s || n != sc->ck_n) {
        sc->ck_s = NULL;
        if (!tk_utf8_is_valid(s, n)) {
            sc->err = gp_set_error(GP_ERR_FORMAT, "regex match: the subject (%zu bytes) is not valid UTF-8", n);
            return -1;
        }
        sc->ck_s = s;
        sc->ck_n = n;
    }
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, sc->md, sc->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        sc->err = gp_set_error(GP_ERR_UNSUPPORTED, "regex match failed: %s", (char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(sc->md);
    if (ov[0] > ov[1] || ov[1] > n) { /* \K in a lookaround can end a match before its start */
        sc->err = gp_set_error(GP_ERR_UNSUPPORTED, "regex match: a match ends before it starts (\\K in a lookaround?)");
        return -1;
    }
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
