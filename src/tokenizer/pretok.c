/* pretok.c — tokenizer.json pre-tokenizers (Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit,
 * Punctuation, Sequence): parsing, and splitting a list of pieces the way Hugging Face tokenizers does. */
#include "tokenizer/tok_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define WHITESPACE_PATTERN "\\w+|[^\\w\\s]+"

static gp_status compile_builtin(tk_regex *re, const char *pattern, const char *path, const char *field) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "Regex", pattern)) {
        cJSON_Delete(o);
        return gp_set_error(GP_ERR_NOMEM, "out of memory");
    }
    gp_status s = tk_regex_from_json(re, o, path, field);
    cJSON_Delete(o);
    return s;
}

static gp_status parse_behavior(const cJSON *j, tk_split_behavior *b, const char *path, const char *field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "behavior");
    if (!v) { *b = TK_SPLIT_ISOLATED; return GP_OK; }
    const char *s = cJSON_IsString(v) ? v->valuestring : "";
    if (!strcmp(s, "Removed")) *b = TK_SPLIT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = TK_SPLIT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = TK_SPLIT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = TK_SPLIT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = TK_SPLIT_CONTIGUOUS;
    else return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.behavior': unknown split behavior '%s'", path, field, s);
    return GP_OK;
}

gp_status tk_parse_prepend_scheme(const void *jp, tk_prepend_scheme *p, const char *path, const char *field) {
    const cJSON *j = jp;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
    *p = TK_PREPEND_ALWAYS;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "first")) *p = TK_PREPEND_FIRST;
        else if (!strcmp(v->valuestring, "never")) *p = TK_PREPEND_NEVER;
        else if (!strcmp(v->valuestring, "always")) *p = TK_PREPEND_ALWAYS;
        else return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.prepend_scheme': unknown value '%s'", path, field, v->valuestring);
    }
    if (cJSON_IsFalse(aps)) *p = TK_PREPEND_NEVER; /* legacy add_prefix_space = false */
    return GP_OK;
}

gp_status tk_parse_replacement(const void *jp, uint32_t *cp, const char *path, const char *field) {
    const cJSON *j = jp;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "replacement");
    if (!r) { *cp = 0x2581; return GP_OK; }
    if (!cJSON_IsString(r) || !r->valuestring[0])
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.replacement': expected a one-character string", path, field);
    size_t n = strlen(r->valuestring);
    if (!tk_utf8_is_valid(r->valuestring, n))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.replacement': not UTF-8", path, field);
    tk_utf8_dec(r->valuestring, n, cp);
    return GP_OK;
}

gp_status tk_pre_parse(tk_pre *p, const void *jp, const char *path, const char *field) {
    const cJSON *j = jp;
    memset(p, 0, sizeof *p);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.type': missing or not a string", path, field);
    const char *ty = t->valuestring;
    char sub[256];
    if (!strcmp(ty, "Split")) {
        p->type = TK_PRE_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        p->invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "invert"));
        gp_status s = parse_behavior(j, &p->behavior, path, field);
        if (s) return s;
        snprintf(sub, sizeof sub, "%s.pattern", field);
        return tk_regex_from_json(&p->re, pat, path, sub);
    }
    if (!strcmp(ty, "ByteLevel")) {
        p->type = TK_PRE_BYTELEVEL;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "use_regex");
        p->add_prefix_space = a ? cJSON_IsTrue(a) : 1;
        p->use_regex = u ? cJSON_IsTrue(u) : 1;
        if (p->use_regex) return compile_builtin(&p->re, GPT2_PATTERN, path, field);
        return GP_OK;
    }
    if (!strcmp(ty, "Metaspace")) {
        p->type = TK_PRE_METASPACE;
        gp_status s = tk_parse_replacement(j, &p->replacement, path, field);
        if (!s) s = tk_parse_prepend_scheme(j, &p->prepend, path, field);
        if (s) return s;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "split");
        p->split = sp ? cJSON_IsTrue(sp) : 1;
        utf8proc_encode_char((utf8proc_int32_t)p->replacement, (utf8proc_uint8_t *)p->rep_utf8);
        return GP_OK;
    }
    if (!strcmp(ty, "Digits")) {
        p->type = TK_PRE_DIGITS;
        p->individual_digits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "individual_digits"));
        return GP_OK;
    }
    if (!strcmp(ty, "Whitespace")) {
        p->type = TK_PRE_WHITESPACE;
        return compile_builtin(&p->re, WHITESPACE_PATTERN, path, field);
    }
    if (!strcmp(ty, "WhitespaceSplit")) { p->type = TK_PRE_WHITESPACE_SPLIT; return GP_OK; }
    if (!strcmp(ty, "Punctuation")) {
        p->type = TK_PRE_PUNCTUATION;
        return parse_behavior(j, &p->behavior, path, field);
    }
    if (!strcmp(ty, "Sequence")) {
        p->type = TK_PRE_SEQUENCE;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(a)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.pretokenizers': missing or not an array", path, field);
        int k = cJSON_GetArraySize(a);
        p->items = gp_calloc((size_t)(k ? k : 1), sizeof *p->items);
        if (!p->items) return GP_ERR_NOMEM;
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i);
            gp_status s = tk_pre_parse(&p->items[i], e, path, sub);
            p->n_items = i + 1;
            if (s) return s;
        }
        return GP_OK;
    }
    return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s.type': pre-tokenizer '%s' is not supported", path, field, ty);
}

void tk_pre_free(tk_pre *p) {
    for (int i = 0; i < p->n_items; i++) tk_pre_free(&p->items[i]);
    free(p->items);
    tk_regex_free(&p->re);
    memset(p, 0, sizeof *p);
}

/* ---- splitting ---------------------------------------------------------------------------------------------- */

typedef struct {
    size_t s, e;
    int m;
} event;

typedef struct {
    event *v;
    size_t n, cap;
} events;

static int ev_push(events *ev, size_t s, size_t e, int m) {
    if (ev->n == ev->cap) {
        size_t nc = ev->cap ? ev->cap * 2 : 64;
        event *q = gp_realloc(ev->v, nc, sizeof *q);
        if (!q) return -1;
        ev->v = q;
        ev->cap = nc;
    }
    ev->v[ev->n++] = (event){s, e, m};
    return 0;
}

/* Applies a split behavior to the match events of one piece and appends the resulting pieces to out. */
static int emit_split(const char *s, int at0, events *ev, tk_split_behavior b, tk_list *out) {
    event *v = ev->v;
    size_t n = ev->n, k = 0;
    switch (b) {
    case TK_SPLIT_ISOLATED: k = n; break;
    case TK_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!v[i].m) v[k++] = v[i];
        break;
    case TK_SPLIT_CONTIGUOUS: {
        int prev = 0;
        for (size_t i = 0; i < n; i++) {
            int m = v[i].m;
            if (m == prev && k) v[k - 1].e = v[i].e;
            else v[k++] = v[i];
            prev = m;
        }
        break;
    }
    case TK_SPLIT_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < n; i++) {
            int m = v[i].m;
            if (m && !prev && k) v[k - 1].e = v[i].e;
            else v[k++] = v[i];
            prev = m;
        }
        break;
    }
    case TK_SPLIT_MERGED_NEXT: {
        /* walk backwards, merging each match into the piece that follows it; the result is built at the end of
         * the array and then moved to the front */
        int prev = 0;
        size_t top = n; /* result occupies v[top..n) in order */
        for (size_t i = n; i-- > 0;) {
            event e = v[i];
            if (e.m && !prev && top < n) v[top].s = e.s;
            else v[--top] = e;
            prev = e.m;
        }
        k = n - top;
        memmove(v, v + top, k * sizeof *v);
        break;
    }
    }
    for (size_t i = 0; i < k; i++) {
        if (v[i].e == v[i].s) continue;
        if (tk_list_push(out, s + v[i].s, v[i].e - v[i].s, at0 && v[i].s == 0)) return -1;
    }
    return 0;
}

static int regex_events(const tk_regex *re, tk_scratch *sc, const char *s, size_t n, int invert, events *ev) {
    ev->n = 0;
    size_t prev = 0, from = 0, ms, me;
    while (from <= n) {
        int r = tk_regex_next(re, sc, s, n, from, &ms, &me);
        if (r < 0) return -1;
        if (r == 0) break;
        if (me == ms) { /* empty match: no split, step one character */
            if (ms >= n) break;
            uint32_t cp;
            from = ms + (size_t)tk_utf8_dec(s + ms, n - ms, &cp);
            continue;
        }
        if (prev != ms && ev_push(ev, prev, ms, invert)) return -1;
        if (ev_push(ev, ms, me, !invert)) return -1;
        prev = from = me;
    }
    if (prev != n && ev_push(ev, prev, n, invert)) return -1;
    return 0;
}

typedef int (*char_pred)(uint32_t cp, uint32_t arg);

static int char_events(const char *s, size_t n, char_pred pred, uint32_t arg, events *ev) {
    ev->n = 0;
    size_t last = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        int k = tk_utf8_dec(s + i, n - i, &cp);
        if (pred(cp, arg)) {
            if (last < i && ev_push(ev, last, i, 0)) return -1;
            if (ev_push(ev, i, i + (size_t)k, 1)) return -1;
            last = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (last < n && ev_push(ev, last, n, 0)) return -1;
    return 0;
}

static int pred_numeric(uint32_t cp, uint32_t arg) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static int pred_punct(uint32_t cp, uint32_t arg) {
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                          (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

static int pred_ws(uint32_t cp, uint32_t arg) { return tk_unicode_is_whitespace(cp); }
static int pred_eq(uint32_t cp, uint32_t arg) { return cp == arg; }

static void swap_lists(tk_list *a, tk_list *b) {
    tk_list t = *a;
    *a = *b;
    *b = t;
}

static int apply_one(const tk_pre *p, tk_scratch *sc, tk_list *io, tk_list *tmp, events *ev, tk_buf *work,
                     tk_buf *work2) {
    tk_list_clear(tmp);
    for (size_t i = 0; i < io->n; i++) {
        const char *s = tk_list_str(io, i);
        size_t n = io->slen[i];
        int at0 = io->at0[i];
        switch (p->type) {
        case TK_PRE_SPLIT:
            if (regex_events(&p->re, sc, s, n, p->invert, ev) || emit_split(s, at0, ev, p->behavior, tmp)) return -1;
            break;
        case TK_PRE_WHITESPACE:
            if (regex_events(&p->re, sc, s, n, 1, ev) || emit_split(s, at0, ev, TK_SPLIT_REMOVED, tmp)) return -1;
            break;
        case TK_PRE_WHITESPACE_SPLIT:
            if (char_events(s, n, pred_ws, 0, ev) || emit_split(s, at0, ev, TK_SPLIT_REMOVED, tmp)) return -1;
            break;
        case TK_PRE_PUNCTUATION:
            if (char_events(s, n, pred_punct, 0, ev) || emit_split(s, at0, ev, p->behavior, tmp)) return -1;
            break;
        case TK_PRE_DIGITS:
            if (char_events(s, n, pred_numeric, 0, ev) ||
                emit_split(s, at0, ev, p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS, tmp))
                return -1;
            break;
        case TK_PRE_BYTELEVEL: {
            work->len = 0;
            if (p->add_prefix_space && (n == 0 || s[0] != ' ') && tk_buf_putc(work, ' ')) return -1;
            if (tk_buf_put(work, s, n)) return -1;
            const char *w = work->p;
            size_t wn = work->len;
            ev->n = 0;
            if (p->use_regex) {
                if (regex_events(&p->re, sc, w, wn, 0, ev)) return -1;
            } else if (ev_push(ev, 0, wn, 0)) {
                return -1;
            }
            /* every piece (Isolated) is mapped byte by byte through the GPT-2 byte -> unicode table */
            for (size_t k = 0; k < ev->n; k++) {
                if (ev->v[k].e == ev->v[k].s) continue;
                work2->len = 0;
                const unsigned char *b = (const unsigned char *)w;
                for (size_t q = ev->v[k].s; q < ev->v[k].e; q++) {
                    uint32_t cp = tk_byte_to_cp(b[q]);
                    char u[2];
                    if (cp < 0x80) {
                        u[0] = (char)cp;
                        if (tk_buf_put(work2, u, 1)) return -1;
                    } else {
                        u[0] = (char)(0xC0 | (cp >> 6));
                        u[1] = (char)(0x80 | (cp & 0x3F));
                        if (tk_buf_put(work2, u, 2)) return -1;
                    }
                }
                if (tk_list_push(tmp, work2->p, work2->len, at0 && ev->v[k].s == 0)) return -1;
            }
            break;
        }
        case TK_PRE_METASPACE: {
            work->len = 0;
            size_t rl = strlen(p->rep_utf8);
            int starts_rep = n >= 1 && s[0] == ' '; /* after replacement, ' ' becomes the replacement char */
            if (!starts_rep && n >= rl && memcmp(s, p->rep_utf8, rl) == 0) starts_rep = 1;
            if (!starts_rep && (p->prepend == TK_PREPEND_ALWAYS || (p->prepend == TK_PREPEND_FIRST && at0)))
                if (tk_buf_put(work, p->rep_utf8, rl)) return -1;
            for (size_t q = 0; q < n; q++) {
                if (s[q] == ' ') {
                    if (tk_buf_put(work, p->rep_utf8, rl)) return -1;
                } else if (tk_buf_putc(work, s[q])) {
                    return -1;
                }
            }
            if (p->split) {
                if (char_events(work->p, work->len, pred_eq, p->replacement, ev) ||
                    emit_split(work->p, at0, ev, TK_SPLIT_MERGED_NEXT, tmp))
                    return -1;
            } else if (work->len && tk_list_push(tmp, work->p, work->len, at0)) {
                return -1;
            }
            break;
        }
        case TK_PRE_SEQUENCE: break;
        }
    }
    swap_lists(io, tmp);
    return 0;
}

int tk_pre_apply(const tk_pre *p, tk_scratch *sc, tk_list *io, tk_list *tmp) {
    if (p->type == TK_PRE_SEQUENCE) {
        for (int i = 0; i < p->n_items; i++)
            if (tk_pre_apply(&p->items[i], sc, io, tmp)) return -1;
        return 0;
    }
    events ev = {0};
    tk_buf work = {0}, work2 = {0};
    int rc = apply_one(p, sc, io, tmp, &ev, &work, &work2);
    free(ev.v);
    free(work.p);
    free(work2.p);
    return rc;
}
