/* value.c — the template engine's values: a bump arena per render, lists and ordered dicts, Python truthiness and
 * equality, and Python's str()/repr() of values (what {{ x }} prints), including the shortest float repr. */
#include "template/tpl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */
typedef struct chunk { struct chunk *next; size_t used, cap; max_align_t data[]; } chunk;
struct tpl_arena { chunk *head; size_t total, cap; };

tpl_arena *tpl_arena_new(size_t cap) {
    tpl_arena *a = calloc(1, sizeof *a);
    if (a) a->cap = cap;
    return a;
}

void tpl_arena_free(tpl_arena *a) {
    if (!a) return;
    for (chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(a);
}

void *tpl_alloc(tpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        if (cap > a->cap || a->total > a->cap - cap) return NULL;
        chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->used = 0;
        nc->cap = cap;
        a->total += cap;
        if (c && n > (64u << 10)) { /* a big block goes behind the current chunk, which keeps serving */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            memset(nc->data, 0, n);
            return nc->data;
        }
        nc->next = c;
        a->head = c = nc;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

/* ---- lists and dicts ---- */
tv_list *tv_list_new(tpl_arena *a, uint32_t cap) {
    tv_list *l = tpl_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = tpl_alloc(a, (size_t)cap * sizeof(tv));
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

int tv_list_push(tpl_arena *a, tv_list *l, tv v) {
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        if (cap < l->cap) return -1;
        tv *nv = tpl_alloc(a, (size_t)cap * sizeof(tv));
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

tv_dict *tv_dict_new(tpl_arena *a, uint32_t cap) {
    tv_dict *d = tpl_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap) {
        d->k = tpl_alloc(a, (size_t)cap * sizeof(tv));
        d->v = tpl_alloc(a, (size_t)cap * sizeof(tv));
        if (!d->k || !d->v) return NULL;
        d->cap = cap;
    }
    return d;
}

tv *tv_dict_get(const tv_dict *d, tv k) {
    for (uint32_t i = 0; i < d->n; i++)
        if (tv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

tv *tv_dict_gets(const tv_dict *d, const char *key, size_t n) {
    for (uint32_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].n == n && memcmp(d->k[i].u.s, key, n) == 0) return &d->v[i];
    return NULL;
}

int tv_dict_set(tpl_arena *a, tv_dict *d, tv k, tv v) {
    tv *old = tv_dict_get(d, k);
    if (old) {
        *old = v;
        return 0;
    }
    if (d->n == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        tv *nk = tpl_alloc(a, (size_t)cap * sizeof(tv)), *nv = tpl_alloc(a, (size_t)cap * sizeof(tv));
        if (!nk || !nv) return -1;
        if (d->n) {
            memcpy(nk, d->k, (size_t)d->n * sizeof(tv));
            memcpy(nv, d->v, (size_t)d->n * sizeof(tv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

tv tv_str_copy(tpl_arena *a, const char *s, size_t n) {
    if (n > TPL_MAX_OUTPUT) return tv_undef();
    char *p = tpl_alloc(a, n + 1);
    if (!p) return tv_undef();
    if (n) memcpy(p, s, n);
    return tv_strn(p, (uint32_t)n);
}

/* ---- Python semantics ---- */
int tv_truthy(tv v) {
    switch (v.t) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.n != 0;
    case TV_LIST: return v.tuple == TV_GENERATOR || v.u.l->n != 0; /* a generator object is always true */
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(tv v) { return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT; }

int tv_equal(tv a, tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) {
            double x = a.t == TV_FLOAT ? a.u.f : (double)a.u.i, y = b.t == TV_FLOAT ? b.u.f : (double)b.u.i;
            return x == y;
        }
        return a.u.i == b.u.i;
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR: return a.n == b.n && (a.n == 0 || memcmp(a.u.s, b.u.s, a.n) == 0);
    case TV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (uint32_t i = 0; i < a.u.l->n; i++)
            if (!tv_equal(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (uint32_t i = 0; i < a.u.d->n; i++) {
            tv *o = tv_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !tv_equal(a.u.d->v[i], *o)) return 0;
        }
        return 1;
    default: return a.u.p == b.u.p;
    }
}

const char *tv_type_name(tv v) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                  "Macro", "Namespace", "function", "method", "LoopContext"};
    if (v.t == TV_LIST && v.tuple) return v.tuple == TV_GENERATOR ? "generator" : "tuple";
    return v.t < sizeof names / sizeof names[0] ? names[v.t] : "object";
}

/* ---- buffers ---- */
void tpl_buf_put(tpl_buf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (n > TPL_MAX_OUTPUT || b->n + n > TPL_MAX_OUTPUT) {
        b->oom = 1;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tpl_buf_putc(tpl_buf *b, char c) { tpl_buf_put(b, &c, 1); }

void tpl_buf_free(tpl_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void buf_printf(tpl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(tpl_buf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) tpl_buf_put(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* Python's repr(float): the shortest digits that round-trip; exponent form below 1e-4 and from 1e16 up. */
void tv_write_float(tpl_buf *b, double f) {
    if (isnan(f)) return tpl_buf_put(b, "nan", 3);
    if (isinf(f)) return f > 0 ? tpl_buf_put(b, "inf", 3) : tpl_buf_put(b, "-inf", 4);
    char digs[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digs, sizeof digs, "%.*e", prec - 1, f);
        if (strtod(digs, NULL) == f) break;
    }
    /* digs = "-d.ddde[+-]XX": split into sign, digits, exponent */
    const char *p = digs;
    int neg = *p == '-';
    if (neg) p++;
    char d[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') d[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && d[nd - 1] == '0') nd--;
    if (neg) tpl_buf_putc(b, '-');
    if (e < -4 || e >= 16) {
        tpl_buf_putc(b, d[0]);
        if (nd > 1) {
            tpl_buf_putc(b, '.');
            tpl_buf_put(b, d + 1, (size_t)nd - 1);
        }
        buf_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (e < 0) {
        tpl_buf_put(b, "0.", 2);
        for (int i = 0; i < -e - 1; i++) tpl_buf_putc(b, '0');
        tpl_buf_put(b, d, (size_t)nd);
    } else {
        for (int i = 0; i <= e; i++) tpl_buf_putc(b, i < nd ? d[i] : '0');
        tpl_buf_putc(b, '.');
        if (nd > e + 1) tpl_buf_put(b, d + e + 1, (size_t)(nd - e - 1));
        else tpl_buf_putc(b, '0');
    }
}

static void write_str_repr(tpl_buf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tpl_buf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q || c == '\\') {
            tpl_buf_putc(b, '\\');
            tpl_buf_putc(b, (char)c);
        } else if (c == '\n') tpl_buf_put(b, "\\n", 2);
        else if (c == '\r') tpl_buf_put(b, "\\r", 2);
        else if (c == '\t') tpl_buf_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) buf_printf(b, "\\x%02x", c);
        else tpl_buf_putc(b, (char)c);
    }
    tpl_buf_putc(b, q);
}

void tv_write_repr(tpl_buf *b, tv v) {
    if (v.t == TV_STR) return write_str_repr(b, v.u.s, v.n);
    if (v.t == TV_LIST && v.tuple == TV_GENERATOR) return tpl_buf_put(b, "<generator object>", 18);
    if (v.t == TV_LIST) {
        tpl_buf_putc(b, v.tuple ? '(' : '[');
        for (uint32_t i = 0; i < v.u.l->n; i++) {
            if (i) tpl_buf_put(b, ", ", 2);
            tv_write_repr(b, v.u.l->v[i]);
        }
        if (v.tuple && v.u.l->n == 1) tpl_buf_putc(b, ',');
        tpl_buf_putc(b, v.tuple ? ')' : ']');
        return;
    }
    if (v.t == TV_DICT) {
        tpl_buf_putc(b, '{');
        for (uint32_t i = 0; i < v.u.d->n; i++) {
            if (i) tpl_buf_put(b, ", ", 2);
            tv_write_repr(b, v.u.d->k[i]);
            tpl_buf_put(b, ": ", 2);
            tv_write_repr(b, v.u.d->v[i]);
        }
        tpl_buf_putc(b, '}');
        return;
    }
    tv_write_str(b, v);
}

void tv_write_str(tpl_buf *b, tv v) {
    switch (v.t) {
    case TV_UNDEF: return;
    case TV_NONE: return tpl_buf_put(b, "None", 4);
    case TV_BOOL: return v.u.i ? tpl_buf_put(b, "True", 4) : tpl_buf_put(b, "False", 5);
    case TV_INT: return buf_printf(b, "%lld", (long long)v.u.i);
    case TV_FLOAT: return tv_write_float(b, v.u.f);
    case TV_STR: return tpl_buf_put(b, v.u.s, v.n);
    case TV_LIST: case TV_DICT: return tv_write_repr(b, v);
    case TV_NS: return tpl_buf_put(b, "<Namespace>", 11);
    case TV_LOOP: return tpl_buf_put(b, "<LoopContext>", 13);
    default: return tpl_buf_put(b, "<function>", 10);
    }
}

/* ---- UTF-8 ---- */
size_t tpl_utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t tpl_utf8_offset(const char *s, size_t n, size_t i) {
    size_t k = 0, off = 0;
    for (; off < n; off++) {
        if (((unsigned char)s[off] & 0xC0) != 0x80) {
            if (k == i) return off;
            k++;
        }
    }
    return n;
}
