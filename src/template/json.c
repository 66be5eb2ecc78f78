/* json.c — JSON for the template engine: parsing messages/tools/kwargs into template values, and transformers'
 * tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys).  The engine parses JSON itself instead
 * of through cJSON because Python keeps what cJSON drops: 1 and 1.0 are different (int vs float, printed "1" vs
 * "1.0"), integers beyond 2^53 stay exact, and key order with later-duplicate-wins is Python's dict. */
#include "template/tpl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ---- */
typedef struct jp {
    tpl_arena *a;
    const char *s, *e, *p;
    char *err;
    size_t cap;
    int depth;
} jp;

static int jp_fail(jp *j, const char *msg) {
    int line = 1, col = 1;
    for (const char *q = j->s; q < j->p && q < j->e; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    snprintf(j->err, j->cap, "line %d column %d: %s", line, col, msg);
    return -1;
}

static void jp_ws(jp *j) {
    while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(tpl_buf *b, unsigned cp) {
    char u[4];
    int n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 63)), u[2] = (char)(0x80 | ((cp >> 6) & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    tpl_buf_put(b, u, (size_t)n);
}

static int jp_escape(jp *j, tpl_buf *b) {
    char c = *j->p++;
    switch (c) {
    case '"': case '\\': case '/': tpl_buf_putc(b, c); return 0;
    case 'b': tpl_buf_putc(b, '\b'); return 0;
    case 'f': tpl_buf_putc(b, '\f'); return 0;
    case 'n': tpl_buf_putc(b, '\n'); return 0;
    case 'r': tpl_buf_putc(b, '\r'); return 0;
    case 't': tpl_buf_putc(b, '\t'); return 0;
    case 'u': break;
    default: j->p--; return jp_fail(j, "invalid escape in string");
    }
    unsigned cp, lo;
    if (j->e - j->p < 4 || hex4(j->p, &cp)) return jp_fail(j, "invalid \\u escape");
    j->p += 4;
    if (cp >= 0xD800 && cp < 0xDC00 && j->e - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u' &&
        !hex4(j->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        j->p += 6;
    }
    put_utf8(b, cp); /* a lone surrogate is kept as its 3-byte form, like Python's surrogatepass */
    return 0;
}

static int jp_string(jp *j, tv *out) {
    tpl_buf b = {0};
    j->p++;
    for (;;) {
        if (j->p >= j->e) {
            tpl_buf_free(&b);
            return jp_fail(j, "unterminated string");
        }
        const char *q = j->p;
        while (q < j->e && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
        tpl_buf_put(&b, j->p, (size_t)(q - j->p));
        j->p = q;
        if (q >= j->e) continue;
        if (*q == '"') break;
        if ((unsigned char)*q < 0x20) {
            tpl_buf_free(&b);
            return jp_fail(j, "control character in string");
        }
        j->p++;
        if (j->p >= j->e || jp_escape(j, &b)) {
            tpl_buf_free(&b);
            return j->p >= j->e ? jp_fail(j, "unterminated string") : -1;
        }
    }
    j->p++;
    if (b.oom) {
        tpl_buf_free(&b);
        return jp_fail(j, "string too long");
    }
    *out = tv_str_copy(j->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return out->t == TV_STR ? 0 : jp_fail(j, "out of memory");
}

static int jp_number(jp *j, tv *out) {
    const char *q = j->p;
    int is_float = 0;
    if (q < j->e && *q == '-') q++;
    if (q >= j->e || *q < '0' || *q > '9') return jp_fail(j, "invalid value");
    while (q < j->e && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E' || *q == '+' || *q == '-')) {
        if (*q == '.' || *q == 'e' || *q == 'E') is_float = 1;
        q++;
    }
    char tmp[64];
    size_t n = (size_t)(q - j->p);
    if (n >= sizeof tmp) return jp_fail(j, "number too long");
    memcpy(tmp, j->p, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    if (!is_float) {
        long long v = strtoll(tmp, &end, 10);
        if (*end == 0 && errno == 0) {
            *out = tv_int(v);
            j->p = q;
            return 0;
        }
    }
    double d = strtod(tmp, &end);
    if (*end) return jp_fail(j, "invalid number");
    *out = tv_float(d);
    j->p = q;
    return 0;
}

static int jp_value(jp *j, tv *out);

static int jp_array(jp *j, tv *out) {
    tv_list *l = tv_list_new(j->a, 0);
    if (!l) return jp_fail(j, "out of memory");
    j->p++;
    jp_ws(j);
    if (j->p < j->e && *j->p == ']') {
        j->p++;
    } else {
        for (;;) {
            tv v;
            if (jp_value(j, &v)) return -1;
            if (tv_list_push(j->a, l, v)) return jp_fail(j, "out of memory");
            jp_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == ']') { j->p++; break; }
            return jp_fail(j, "expected ',' or ']'");
        }
    }
    out->t = TV_LIST;
    out->tuple = 0;
    out->u.l = l;
    return 0;
}

static int jp_object(jp *j, tv *out) {
    tv_dict *d = tv_dict_new(j->a, 0);
    if (!d) return jp_fail(j, "out of memory");
    j->p++;
    jp_ws(j);
    if (j->p < j->e && *j->p == '}') {
        j->p++;
    } else {
        for (;;) {
            tv k, v;
            jp_ws(j);
            if (j->p >= j->e || *j->p != '"') return jp_fail(j, "expected a string key");
            if (jp_string(j, &k)) return -1;
            jp_ws(j);
            if (j->p >= j->e || *j->p != ':') return jp_fail(j, "expected ':'");
            j->p++;
            if (jp_value(j, &v)) return -1;
            if (tv_dict_set(j->a, d, k, v)) return jp_fail(j, "out of memory");
            jp_ws(j);
            if (j->p < j->e && *j->p == ',') { j->p++; continue; }
            if (j->p < j->e && *j->p == '}') { j->p++; break; }
            return jp_fail(j, "expected ',' or '}'");
        }
    }
    out->t = TV_DICT;
    out->u.d = d;
    return 0;
}

static int jp_word(jp *j, const char *w, tv v, tv *out) {
    size_t n = strlen(w);
    if ((size_t)(j->e - j->p) < n || memcmp(j->p, w, n) != 0) return jp_fail(j, "invalid value");
    j->p += n;
    *out = v;
    return 0;
}

static int jp_value(jp *j, tv *out) {
    jp_ws(j);
    if (j->p >= j->e) return jp_fail(j, "unexpected end of JSON");
    if (++j->depth > TPL_MAX_DEPTH) return jp_fail(j, "nested too deeply");
    int rc;
    switch (*j->p) {
    case '"': rc = jp_string(j, out); break;
    case '[': rc = jp_array(j, out); break;
    case '{': rc = jp_object(j, out); break;
    case 't': rc = jp_word(j, "true", tv_bool(1), out); break;
    case 'f': rc = jp_word(j, "false", tv_bool(0), out); break;
    case 'n': rc = jp_word(j, "null", tv_none(), out); break;
    case 'N': rc = jp_word(j, "NaN", tv_float(NAN), out); break;
    case 'I': rc = jp_word(j, "Infinity", tv_float(INFINITY), out); break;
    default: rc = jp_number(j, out);
    }
    j->depth--;
    return rc;
}

int tv_parse_json(tpl_arena *a, const char *s, size_t n, tv *out, char *err, size_t cap) {
    jp j = {a, s, s + n, s, err, cap, 0};
    if (jp_value(&j, out)) return -1;
    jp_ws(&j);
    if (j.p != j.e) return jp_fail(&j, "extra data after the JSON value");
    return 0;
}

/* ---- tojson ---- */
static size_t json_ascii_escape(const char *s, size_t n, size_t i, char *u) {
    unsigned char c = (unsigned char)s[i];
    unsigned cp;
    size_t k;
    if (c >= 0xF0 && i + 3 < n) cp = (unsigned)(c & 7) << 18 | (unsigned)(s[i + 1] & 63) << 12 | (unsigned)(s[i + 2] & 63) << 6 | (unsigned)(s[i + 3] & 63), k = 4;
    else if (c >= 0xE0 && i + 2 < n) cp = (unsigned)(c & 15) << 12 | (unsigned)(s[i + 1] & 63) << 6 | (unsigned)(s[i + 2] & 63), k = 3;
    else if (c >= 0xC0 && i + 1 < n) cp = (unsigned)(c & 31) << 6 | (unsigned)(s[i + 1] & 63), k = 2;
    else cp = 0xFFFD, k = 1;
    if (cp >= 0x10000) {
        cp -= 0x10000;
        snprintf(u, 16, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
        snprintf(u, 16, "\\u%04x", cp);
    }
    return k;
}

static void json_string(tpl_buf *b, const char *s, size_t n, int ascii) {
    tpl_buf_putc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[16];
        if (ascii && c >= 0x80) {
            size_t k = json_ascii_escape(s, n, i, u);
            tpl_buf_put(b, s + run, i - run);
            tpl_buf_put(b, u, strlen(u));
            i += k - 1;
            run = i + 1;
            continue;
        }
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc) continue;
        tpl_buf_put(b, s + run, i - run);
        tpl_buf_put(b, esc, strlen(esc));
        run = i + 1;
    }
    tpl_buf_put(b, s + run, n - run);
    tpl_buf_putc(b, '"');
}

static void json_newline(tpl_buf *b, const char *indent, int level) {
    tpl_buf_putc(b, '\n');
    for (int i = 0; i < level; i++) tpl_buf_put(b, indent, strlen(indent));
}

static int key_cmp(const void *x, const void *y) {
    const tv *a = *(const tv *const *)x, *b = *(const tv *const *)y;
    size_t n = a->n < b->n ? a->n : b->n;
    int c = n ? memcmp(a->u.s, b->u.s, n) : 0;
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

static int json_dict(tpl_buf *b, const tv_dict *d, const char *indent, const char *isep, const char *ksep, int sort,
                     int ascii, int depth, const char **err) {
    if (d->n == 0) {
        tpl_buf_put(b, "{}", 2);
        return 0;
    }
    const tv **keys = malloc((size_t)d->n * sizeof *keys);
    if (!keys) return *err = "out of memory", -1;
    for (uint32_t i = 0; i < d->n; i++) {
        keys[i] = &d->k[i];
        if (d->k[i].t != TV_STR) {
            free(keys);
            return *err = "tojson: keys must be strings", -1;
        }
    }
    if (sort) qsort(keys, d->n, sizeof *keys, key_cmp);
    tpl_buf_putc(b, '{');
    int rc = 0;
    for (uint32_t i = 0; i < d->n && !rc; i++) {
        if (i) tpl_buf_put(b, isep, strlen(isep));
        if (indent) json_newline(b, indent, depth + 1);
        json_string(b, keys[i]->u.s, keys[i]->n, ascii);
        tpl_buf_put(b, ksep, strlen(ksep));
        rc = tv_write_json(b, d->v[keys[i] - d->k], indent, isep, ksep, sort, ascii, depth + 1, err);
    }
    free(keys);
    if (indent) json_newline(b, indent, depth);
    tpl_buf_putc(b, '}');
    return rc;
}

int tv_write_json(tpl_buf *b, tv v, const char *indent, const char *isep, const char *ksep, int sort, int ascii,
                  int depth, const char **err) {
    if (!isep) isep = indent ? "," : ", ";
    if (!ksep) ksep = ": ";
    if (depth > TPL_MAX_DEPTH) return *err = "tojson: nested too deeply", -1;
    switch (v.t) {
    case TV_NONE: tpl_buf_put(b, "null", 4); return 0;
    case TV_BOOL: v.u.i ? tpl_buf_put(b, "true", 4) : tpl_buf_put(b, "false", 5); return 0;
    case TV_INT: tv_write_str(b, v); return 0;
    case TV_FLOAT:
        if (isnan(v.u.f)) tpl_buf_put(b, "NaN", 3);
        else if (isinf(v.u.f)) v.u.f > 0 ? tpl_buf_put(b, "Infinity", 8) : tpl_buf_put(b, "-Infinity", 9);
        else tv_write_float(b, v.u.f);
        return 0;
    case TV_STR: json_string(b, v.u.s, v.n, ascii); return 0;
    case TV_LIST:
        if (v.tuple == TV_GENERATOR) return *err = "Object of type generator is not JSON serializable", -1;
        if (v.u.l->n == 0) {
            tpl_buf_put(b, "[]", 2);
            return 0;
        }
        tpl_buf_putc(b, '[');
        for (uint32_t i = 0; i < v.u.l->n; i++) {
            if (i) tpl_buf_put(b, isep, strlen(isep));
            if (indent) json_newline(b, indent, depth + 1);
            if (tv_write_json(b, v.u.l->v[i], indent, isep, ksep, sort, ascii, depth + 1, err)) return -1;
        }
        if (indent) json_newline(b, indent, depth);
        tpl_buf_putc(b, ']');
        return 0;
    case TV_DICT: return json_dict(b, v.u.d, indent, isep, ksep, sort, ascii, depth, err);
    case TV_UNDEF: return *err = "Object of type Undefined is not JSON serializable", -1;
    default: return *err = "tojson: value is not JSON serializable", -1;
    }
}
