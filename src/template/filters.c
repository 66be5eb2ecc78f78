/* filters.c — Jinja2's filters and tests as chat templates use them, with Jinja2 3.1's semantics (trim, tojson in
 * transformers' version, length, default, join, first/last, map, select/reject(attr), list, string, int, float,
 * indent, dictsort, sort, unique, items, replace, upper/lower/title/capitalize, round, abs, sum, min/max, ...)
 * and the tests (defined, none, string, mapping, iterable, sequence, number, equalto, in, ...). */
#include "template/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tpl_str_replace(tpl_render *r, const tpl_node *at, tv s, tv old, tv new, tv count, tv *out);
int tpl_str_case(tpl_render *r, const tpl_node *at, tv s, int mode, tv *out);

typedef int (*filter_fn)(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out);

static int finish(tpl_render *r, const tpl_node *at, tpl_buf *b, tv *out) {
    if (b->oom) {
        tpl_buf_free(b);
        return tpl_err(r, at, "string exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
    }
    *out = tv_str_copy(r->a, b->p ? b->p : "", b->n);
    tpl_buf_free(b);
    return out->t == TV_STR ? 0 : tpl_err(r, at, "out of memory");
}

static tv list_tv(tv_list *l) {
    tv v = {.t = TV_LIST};
    v.u.l = l;
    return v;
}

static int as_str(tpl_render *r, const tpl_node *at, tv v, tv *out) { return tpl_to_str(r, at, v, out); }

/* ---- simple filters ---- */
static int f_trim(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv s;
    if (as_str(r, at, v, &s)) return -1;
    tv_method m = {s, "strip", NULL};
    tpl_args b = {0};
    tv chars = tpl_arg(a, 0, "chars", tv_undef());
    b.n = chars.t == TV_UNDEF ? 0 : 1;
    b.v = &chars;
    return tpl_call_method(r, at, &m, &b, out);
}

static int f_tojson(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv ind = tpl_arg(a, 1, "indent", tv_none()), seps = tpl_arg(a, 2, "separators", tv_none());
    tv sortk = tpl_arg(a, 3, "sort_keys", tv_bool(0)), ascii = tpl_arg(a, 0, "ensure_ascii", tv_bool(0));
    char indent[64];
    const char *ip = NULL, *isep = NULL, *ksep = NULL;
    tv is, ks;
    if (ind.t == TV_INT) {
        int k = ind.u.i < 0 ? 0 : ind.u.i > 32 ? 32 : (int)ind.u.i;
        memset(indent, ' ', (size_t)k);
        indent[k] = 0;
        ip = indent;
    } else if (ind.t == TV_STR) {
        snprintf(indent, sizeof indent, "%.*s", (int)(ind.n < 63 ? ind.n : 63), ind.u.s);
        ip = indent;
    }
    char sepbuf[2][32];
    if (seps.t == TV_LIST && seps.u.l->n == 2) {
        is = seps.u.l->v[0];
        ks = seps.u.l->v[1];
        if (is.t != TV_STR || ks.t != TV_STR) return tpl_err(r, at, "tojson: separators must be strings");
        snprintf(sepbuf[0], 32, "%.*s", (int)(is.n < 31 ? is.n : 31), is.u.s);
        snprintf(sepbuf[1], 32, "%.*s", (int)(ks.n < 31 ? ks.n : 31), ks.u.s);
        isep = sepbuf[0];
        ksep = sepbuf[1];
    }
    tpl_buf b = {0};
    const char *err = NULL;
    if (tv_write_json(&b, v, ip, isep, ksep, tv_truthy(sortk), tv_truthy(ascii), 0, &err)) {
        tpl_buf_free(&b);
        return tpl_err(r, at, "%s", err);
    }
    return finish(r, at, &b, out);
}

static int f_length(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    switch (v.t) {
    case TV_STR: *out = tv_int((int64_t)tpl_utf8_len(v.u.s, v.n)); return 0;
    case TV_LIST:
        if (v.tuple == TV_GENERATOR) break;
        *out = tv_int(v.u.l->n);
        return 0;
    case TV_DICT: case TV_NS: *out = tv_int(v.u.d->n); return 0;
    case TV_UNDEF: *out = tv_int(0); return 0;
    default: break;
    }
    return tpl_err(r, at, "object of type '%s' has no len()", tv_type_name(v));
}

static int f_default(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv d = tpl_arg(a, 0, "default_value", tv_strn("", 0));
    int boolean = tv_truthy(tpl_arg(a, 1, "boolean", tv_bool(0)));
    *out = v.t == TV_UNDEF || (boolean && !tv_truthy(v)) ? d : v;
    return 0;
}

static int attr_path(tpl_render *r, const tpl_node *at, tv v, tv attr, tv *out) {
    if (attr.t == TV_INT) return tpl_getitem(r, at, v, attr, out);
    if (attr.t != TV_STR) return tpl_err(r, at, "attribute name must be a string");
    const char *p = attr.u.s, *e = attr.u.s + attr.n;
    *out = v;
    while (p <= e) { /* "a.b.0" */
        const char *dot = memchr(p, '.', (size_t)(e - p));
        if (!dot) dot = e;
        tv key = tv_strn(p, (uint32_t)(dot - p));
        int is_int = dot > p;
        for (const char *q = p; q < dot; q++) is_int &= *q >= '0' && *q <= '9';
        if (is_int) key = tv_int(atoll(p));
        if (tpl_getitem(r, at, *out, key, out)) return -1;
        p = dot + 1;
    }
    return 0;
}

static int f_join(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv sep = tpl_arg(a, 0, "d", tv_strn("", 0)), attr = tpl_arg(a, 1, "attribute", tv_undef()), s;
    tv_list *l;
    if (tpl_iter(r, at, v, &l) || as_str(r, at, sep, &sep)) return -1;
    tpl_buf b = {0};
    for (uint32_t i = 0; i < l->n; i++) {
        tv x = l->v[i];
        if (attr.t != TV_UNDEF && attr_path(r, at, x, attr, &x)) return tpl_buf_free(&b), -1;
        if (i) tpl_buf_put(&b, sep.u.s, sep.n);
        if (as_str(r, at, x, &s)) return tpl_buf_free(&b), -1;
        tpl_buf_put(&b, s.u.s, s.n);
    }
    return finish(r, at, &b, out);
}

static int f_first_last(tpl_render *r, const tpl_node *at, tv v, int last, tv *out) {
    tv_list *l;
    if (last && v.t == TV_LIST && v.tuple == TV_GENERATOR) return tpl_err(r, at, "'generator' object is not reversible");
    if (tpl_iter(r, at, v, &l)) return -1;
    *out = l->n ? l->v[last ? l->n - 1 : 0] : tv_undef();
    return 0;
}
static int f_first(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_first_last(r, at, v, 0, out); }
static int f_last(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_first_last(r, at, v, 1, out); }

static int f_list(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l, *c;
    if (tpl_iter(r, at, v, &l)) return -1;
    if (!(c = tv_list_new(r->a, l->n))) return tpl_err(r, at, "out of memory");
    memcpy(c->v, l->v, l->n * sizeof(tv));
    c->n = l->n;
    *out = list_tv(c);
    return 0;
}

static int f_string(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return as_str(r, at, v, out); }
static int f_safe(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    if (as_str(r, at, v, out)) return -1;
    out->tuple = 1; /* Markup */
    return 0;
}

static int f_int(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv d = tpl_arg(a, 0, "default", tv_int(0));
    if (v.t == TV_INT || v.t == TV_BOOL) *out = tv_int(v.u.i);
    else if (v.t == TV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) *out = tv_int((int64_t)v.u.f);
    else if (v.t == TV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v.n < 63 ? v.n : 63), v.u.s);
        long long x = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\n' || *end == '\t') end++;
        if (*end == 0 && end != buf) *out = tv_int(x);
        else {
            double f = strtod(buf, &end);
            *out = end != buf && *end == 0 && isfinite(f) && fabs(f) < 9.2e18 ? tv_int((int64_t)f) : d;
        }
    } else *out = d;
    return 0;
}

static int f_float(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv d = tpl_arg(a, 0, "default", tv_float(0.0));
    if (v.t == TV_INT || v.t == TV_BOOL) *out = tv_float((double)v.u.i);
    else if (v.t == TV_FLOAT) *out = v;
    else if (v.t == TV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v.n < 63 ? v.n : 63), v.u.s);
        double f = strtod(buf, &end);
        *out = end != buf && *end == 0 ? tv_float(f) : d;
    } else *out = d;
    return 0;
}

/* str.splitlines() (used by indent): Python's line boundaries. */
static int f_splitlines(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l = tv_list_new(r->a, 0);
    if (!l) return tpl_err(r, at, "out of memory");
    const unsigned char *s = (const unsigned char *)v.u.s;
    size_t n = v.n, start = 0, i = 0;
    while (i < n) {
        size_t brk = 0;
        if (s[i] == '\r') brk = i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
        else if (s[i] == '\n' || s[i] == 0x0b || s[i] == 0x0c || (s[i] >= 0x1c && s[i] <= 0x1e)) brk = 1;
        else if (s[i] == 0xc2 && i + 1 < n && s[i + 1] == 0x85) brk = 2;
        else if (s[i] == 0xe2 && i + 2 < n && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9)) brk = 3;
        if (!brk) {
            i++;
            continue;
        }
        if (tv_list_push(r->a, l, tv_strn(v.u.s + start, (uint32_t)(i - start)))) return tpl_err(r, at, "out of memory");
        i += brk;
        start = i;
    }
    if (start < n && tv_list_push(r->a, l, tv_strn(v.u.s + start, (uint32_t)(n - start)))) return tpl_err(r, at, "out of memory");
    *out = list_tv(l);
    return 0;
}

static int f_indent(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv width = tpl_arg(a, 0, "width", tv_int(4)), ind;
    int first = tv_truthy(tpl_arg(a, 1, "first", tv_bool(0))), blank = tv_truthy(tpl_arg(a, 2, "blank", tv_bool(0)));
    tv s, lines;
    if (as_str(r, at, v, &s)) return -1;
    if (width.t == TV_STR) ind = width;
    else {
        int64_t w = width.t == TV_INT ? width.u.i : 4;
        if (w < 0) w = 0;
        if (w > 1024) return tpl_err(r, at, "indent width %lld is over 1024", (long long)w);
        char *sp = tpl_alloc(r->a, (size_t)w + 1);
        if (!sp) return tpl_err(r, at, "out of memory");
        memset(sp, ' ', (size_t)w);
        ind = tv_strn(sp, (uint32_t)w);
    }
    char *plus = tpl_alloc(r->a, (size_t)s.n + 2); /* s += "\n" (Jinja's quirk before splitlines) */
    if (!plus) return tpl_err(r, at, "out of memory");
    memcpy(plus, s.u.s, s.n);
    plus[s.n] = '\n';
    if (f_splitlines(r, at, tv_strn(plus, s.n + 1), a, &lines)) return -1;
    tpl_buf b = {0};
    if (first) tpl_buf_put(&b, ind.u.s, ind.n);
    for (uint32_t i = 0; i < lines.u.l->n; i++) {
        tv line = lines.u.l->v[i];
        if (i) {
            tpl_buf_putc(&b, '\n');
            if (blank || line.n) tpl_buf_put(&b, ind.u.s, ind.n);
        }
        tpl_buf_put(&b, line.u.s, line.n);
    }
    return finish(r, at, &b, out);
}

/* ---- map / select ---- */
static int f_map(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l, *res;
    if (!tv_truthy(v)) v = tv_undef(); /* Jinja: "if value:" — None and empty give nothing */
    if (tpl_iter(r, at, v, &l) || !(res = tv_list_new(r->a, l->n))) return -1;
    tv attr = tpl_arg(a, -1, "attribute", tv_undef()), dflt = tpl_arg(a, -1, "default", tv_undef());
    tv fname = tpl_arg(a, 0, NULL, tv_undef());
    tpl_args rest = *a;
    if (rest.n) rest.n--, rest.v++;
    rest.nk = 0;
    char name[64] = {0};
    if (attr.t == TV_UNDEF) {
        if (fname.t != TV_STR) return tpl_err(r, at, "map: expected a filter name or attribute=");
        snprintf(name, sizeof name, "%.*s", (int)(fname.n < 63 ? fname.n : 63), fname.u.s);
    }
    for (uint32_t i = 0; i < l->n; i++) {
        tv x = l->v[i];
        if (attr.t != TV_UNDEF) {
            if (attr_path(r, at, x, attr, &x)) return -1;
            if (x.t == TV_UNDEF && dflt.t != TV_UNDEF) x = dflt;
        } else if (tpl_filter(r, at, name, x, &rest, &x)) {
            return -1;
        }
        res->v[res->n++] = x;
    }
    *out = list_tv(res);
    out->tuple = TV_GENERATOR;
    return 0;
}

/* select / reject (by test) and selectattr / rejectattr (by attribute and test). */
static int do_select(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, int reject, int by_attr, tv *out) {
    tv_list *l, *res;
    if (!tv_truthy(v)) v = tv_undef(); /* Jinja: "if value:" — None and empty give nothing */
    if (tpl_iter(r, at, v, &l) || !(res = tv_list_new(r->a, 0))) return -1;
    int k = by_attr ? 1 : 0;
    tv attr = by_attr ? tpl_arg(a, 0, NULL, tv_undef()) : tv_undef(), test = tpl_arg(a, k, NULL, tv_undef());
    tpl_args rest = *a;
    rest.n = a->n > k + 1 ? a->n - k - 1 : 0;
    rest.v = a->v + (a->n > k + 1 ? k + 1 : 0);
    char name[64] = {0};
    if (test.t == TV_STR) snprintf(name, sizeof name, "%.*s", (int)(test.n < 63 ? test.n : 63), test.u.s);
    for (uint32_t i = 0; i < l->n; i++) {
        tv x = l->v[i];
        int keep;
        if (by_attr && attr_path(r, at, x, attr, &x)) return -1;
        if (test.t == TV_STR) {
            if (tpl_test(r, at, name, x, &rest, &keep)) return -1;
        } else {
            keep = tv_truthy(x);
        }
        if (keep != reject && tv_list_push(r->a, res, l->v[i])) return tpl_err(r, at, "out of memory");
    }
    *out = list_tv(res);
    out->tuple = TV_GENERATOR;
    return 0;
}
static int f_select(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return do_select(r, at, v, a, 0, 0, out); }
static int f_reject(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return do_select(r, at, v, a, 1, 0, out); }
static int f_selectattr(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return do_select(r, at, v, a, 0, 1, out); }
static int f_rejectattr(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return do_select(r, at, v, a, 1, 1, out); }

/* ---- sorting ---- */
typedef struct sort_ctx { tpl_render *r; const tpl_node *at; int err, ci; } sort_ctx;
static _Thread_local sort_ctx *t_sort; /* qsort has no user pointer in C11: set around one qsort call */

static tv fold(tv x, int ci, tpl_render *r, const tpl_node *at) {
    tv o = x;
    if (ci && x.t == TV_STR) tpl_str_case(r, at, x, 'l', &o);
    return o;
}

static int key_cmp(const void *pa, const void *pb) {
    sort_ctx *c = t_sort;
    const tv *a = pa, *b = pb; /* items are [key, value, index] triples */
    int cmp = 0;
    if (!c->err && tpl_compare(c->r, c->at, fold(a[0], c->ci, c->r, c->at), fold(b[0], c->ci, c->r, c->at), &cmp)) c->err = 1;
    if (cmp == 0) cmp = (a[2].u.i > b[2].u.i) - (a[2].u.i < b[2].u.i); /* stable, like Python's sort */
    return cmp;
}

/* Sorts items by key (keys[i]); reverse keeps stability as Python's reverse=True does. */
static int sort_by(tpl_render *r, const tpl_node *at, tv_list *items, const tv *keys, int reverse, int ci, tv *out) {
    uint32_t n = items->n;
    tv *tri = malloc((size_t)n * 3 * sizeof(tv) + 1);
    if (!tri) return tpl_err(r, at, "out of memory");
    for (uint32_t i = 0; i < n; i++) tri[3 * i] = keys[i], tri[3 * i + 1] = items->v[i], tri[3 * i + 2] = tv_int(reverse ? -(int64_t)i : i);
    sort_ctx c = {r, at, 0, ci};
    t_sort = &c;
    qsort(tri, n, 3 * sizeof(tv), key_cmp);
    t_sort = NULL;
    tv_list *res = tv_list_new(r->a, n);
    if (!res || c.err) {
        free(tri);
        return c.err ? -1 : tpl_err(r, at, "out of memory");
    }
    for (uint32_t i = 0; i < n; i++) res->v[i] = tri[3 * (reverse ? n - 1 - i : i) + 1];
    res->n = n;
    free(tri);
    *out = list_tv(res);
    return 0;
}

static int f_sort(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    int reverse = tv_truthy(tpl_arg(a, 0, "reverse", tv_bool(0))), cs = tv_truthy(tpl_arg(a, 1, "case_sensitive", tv_bool(0)));
    tv attr = tpl_arg(a, 2, "attribute", tv_undef());
    tv_list *l;
    if (tpl_iter(r, at, v, &l)) return -1;
    tv *keys = tpl_alloc(r->a, (l->n + 1) * sizeof(tv));
    if (!keys) return tpl_err(r, at, "out of memory");
    for (uint32_t i = 0; i < l->n; i++) {
        keys[i] = l->v[i];
        if (attr.t != TV_UNDEF && attr_path(r, at, l->v[i], attr, &keys[i])) return -1;
    }
    return sort_by(r, at, l, keys, reverse, !cs, out);
}

static int f_dictsort(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    int cs = tv_truthy(tpl_arg(a, 0, "case_sensitive", tv_bool(0)));
    tv by = tpl_arg(a, 1, "by", tv_strn("key", 3));
    int reverse = tv_truthy(tpl_arg(a, 2, "reverse", tv_bool(0)));
    if (v.t != TV_DICT) return tpl_err(r, at, "dictsort: expected a mapping, got '%s'", tv_type_name(v));
    tv items;
    tv_method m = {v, "items", NULL};
    tpl_args none = {0};
    if (tpl_call_method(r, at, &m, &none, &items)) return -1;
    int by_value = by.t == TV_STR && by.n == 5 && !memcmp(by.u.s, "value", 5);
    tv *keys = tpl_alloc(r->a, (items.u.l->n + 1) * sizeof(tv));
    if (!keys) return tpl_err(r, at, "out of memory");
    for (uint32_t i = 0; i < items.u.l->n; i++) keys[i] = items.u.l->v[i].u.l->v[by_value];
    return sort_by(r, at, items.u.l, keys, reverse, !cs, out);
}

static int f_unique(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l, *res;
    if (tpl_iter(r, at, v, &l) || !(res = tv_list_new(r->a, 0))) return -1;
    int cs = tv_truthy(tpl_arg(a, 0, "case_sensitive", tv_bool(0)));
    tv attr = tpl_arg(a, 1, "attribute", tv_undef());
    for (uint32_t i = 0; i < l->n; i++) {
        tv k = l->v[i];
        if (attr.t != TV_UNDEF && attr_path(r, at, k, attr, &k)) return -1;
        k = fold(k, !cs, r, at);
        int seen = 0;
        for (uint32_t j = 0; j < i && !seen; j++) {
            tv kj = l->v[j];
            if (attr.t != TV_UNDEF && attr_path(r, at, kj, attr, &kj)) return -1;
            seen = tv_equal(k, fold(kj, !cs, r, at));
        }
        if (!seen && tv_list_push(r->a, res, l->v[i])) return tpl_err(r, at, "out of memory");
    }
    *out = list_tv(res);
    return 0;
}

static int f_reverse(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l, *res;
    if (tpl_iter(r, at, v, &l) || !(res = tv_list_new(r->a, l->n))) return -1;
    for (uint32_t i = 0; i < l->n; i++) res->v[i] = l->v[l->n - 1 - i];
    res->n = l->n;
    if (v.t != TV_STR) {
        *out = list_tv(res);
        return 0;
    }
    tpl_buf b = {0};
    for (uint32_t i = 0; i < res->n; i++) tpl_buf_put(&b, res->v[i].u.s, res->v[i].n);
    return finish(r, at, &b, out);
}

static int f_items(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    if (v.t == TV_UNDEF) return f_list(r, at, v, a, out);
    if (v.t != TV_DICT) return tpl_err(r, at, "items: expected a mapping, got '%s'", tv_type_name(v));
    tv_method m = {v, "items", NULL};
    tpl_args none = {0};
    return tpl_call_method(r, at, &m, &none, out);
}

/* ---- strings and numbers ---- */
static int f_case(tpl_render *r, const tpl_node *at, tv v, int mode, tv *out) {
    tv s;
    return as_str(r, at, v, &s) || tpl_str_case(r, at, s, mode, out);
}
static int f_upper(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_case(r, at, v, 'u', out); }
static int f_lower(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_case(r, at, v, 'l', out); }
static int f_title(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_case(r, at, v, 'j', out); }
static int f_capitalize(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_case(r, at, v, 'c', out); }

static int f_replace(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv s;
    if (as_str(r, at, v, &s)) return -1;
    return tpl_str_replace(r, at, s, tpl_arg(a, 0, "old", tv_undef()), tpl_arg(a, 1, "new", tv_undef()),
                           tpl_arg(a, 2, "count", tv_none()), out);
}

int tpl_escape(tpl_render *r, const tpl_node *at, tv v, tv *out) {
    tv s;
    if (v.t == TV_STR && v.tuple) { /* already Markup */
        *out = v;
        return 0;
    }
    if (as_str(r, at, v, &s)) return -1;
    tpl_buf b = {0};
    for (uint32_t i = 0; i < s.n; i++) {
        char c = s.u.s[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) tpl_buf_put(&b, e, strlen(e));
        else tpl_buf_putc(&b, c);
    }
    if (finish(r, at, &b, out)) return -1;
    out->tuple = 1;
    return 0;
}

static int f_escape(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return tpl_escape(r, at, v, out); }

static int f_wordcount(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv s;
    if (as_str(r, at, v, &s)) return -1;
    int64_t k = 0;
    int in = 0;
    for (uint32_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.u.s[i];
        int w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        if (w && !in) k++;
        in = w;
    }
    *out = tv_int(k);
    return 0;
}

static int f_abs(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    if (v.t == TV_FLOAT) *out = tv_float(fabs(v.u.f));
    else if ((v.t == TV_INT || v.t == TV_BOOL) && v.u.i != INT64_MIN) *out = tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    else return tpl_err(r, at, "bad operand type for abs(): '%s'", tv_type_name(v));
    return 0;
}

static int f_round(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv prec = tpl_arg(a, 0, "precision", tv_int(0)), method = tpl_arg(a, 1, "method", tv_strn("common", 6));
    if (v.t != TV_FLOAT && v.t != TV_INT && v.t != TV_BOOL) return tpl_err(r, at, "round: expected a number");
    double x = v.t == TV_FLOAT ? v.u.f : (double)v.u.i, m = pow(10.0, (double)(prec.t == TV_INT ? prec.u.i : 0));
    char c = method.t == TV_STR && method.n ? method.u.s[0] : 'c';
    double y = c == 'f' ? floor(x * m) / m : c == 'c' && method.n == 4 ? ceil(x * m) / m : round(x * m) / m;
    if (c == 'c' && method.n == 6) { /* "common": Python's round(), half to even */
        double t = x * m, fl = floor(t), diff = t - fl;
        y = (diff > 0.5 || (diff == 0.5 && fmod(fl, 2.0) != 0.0)) ? (fl + 1) / m : fl / m;
    }
    *out = tv_float(y);
    return 0;
}

static int f_sum(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv_list *l;
    tv attr = tpl_arg(a, 0, "attribute", tv_undef()), acc = tpl_arg(a, 1, "start", tv_int(0));
    if (tpl_iter(r, at, v, &l)) return -1;
    for (uint32_t i = 0; i < l->n; i++) {
        tv x = l->v[i];
        if (attr.t != TV_UNDEF && attr_path(r, at, x, attr, &x)) return -1;
        int na = acc.t == TV_INT || acc.t == TV_FLOAT || acc.t == TV_BOOL, nx = x.t == TV_INT || x.t == TV_FLOAT || x.t == TV_BOOL;
        if (!na || !nx) return tpl_err(r, at, "sum: unsupported operand types '%s' and '%s'", tv_type_name(acc), tv_type_name(x));
        if (acc.t == TV_FLOAT || x.t == TV_FLOAT)
            acc = tv_float((acc.t == TV_FLOAT ? acc.u.f : (double)acc.u.i) + (x.t == TV_FLOAT ? x.u.f : (double)x.u.i));
        else if (__builtin_add_overflow(acc.u.i, x.u.i, &acc.u.i)) return tpl_err(r, at, "integer overflow");
        else acc.t = TV_INT;
    }
    *out = acc;
    return 0;
}

static int f_minmax(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, int want, tv *out) {
    tv_list *l;
    if (tpl_iter(r, at, v, &l)) return -1;
    tv attr = tpl_arg(a, 1, "attribute", tv_undef());
    *out = tv_undef();
    tv best = tv_undef();
    for (uint32_t i = 0; i < l->n; i++) {
        tv k = l->v[i];
        int c;
        if (attr.t != TV_UNDEF && attr_path(r, at, k, attr, &k)) return -1;
        k = fold(k, !tv_truthy(tpl_arg(a, 0, "case_sensitive", tv_bool(0))), r, at);
        if (i && tpl_compare(r, at, k, best, &c)) return -1;
        if (i == 0 || c == want) best = k, *out = l->v[i];
    }
    return 0;
}
static int f_min(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_minmax(r, at, v, a, -1, out); }
static int f_max(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) { return f_minmax(r, at, v, a, 1, out); }

static int f_format(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv s; /* printf-style "%s" only: what templates use */
    if (as_str(r, at, v, &s)) return -1;
    tpl_buf b = {0};
    int k = 0;
    for (uint32_t i = 0; i < s.n; i++) {
        if (s.u.s[i] == '%' && i + 1 < s.n && s.u.s[i + 1] == '%') {
            tpl_buf_putc(&b, '%');
            i++;
        } else if (s.u.s[i] == '%' && i + 1 < s.n && (s.u.s[i + 1] == 's' || s.u.s[i + 1] == 'd')) {
            tv_write_str(&b, tpl_arg(a, k++, NULL, tv_strn("", 0)));
            i++;
        } else {
            tpl_buf_putc(&b, s.u.s[i]);
        }
    }
    return finish(r, at, &b, out);
}

static int f_attr(tpl_render *r, const tpl_node *at, tv v, const tpl_args *a, tv *out) {
    tv name = tpl_arg(a, 0, "name", tv_undef());
    if (name.t != TV_STR) return tpl_err(r, at, "attr: expected an attribute name");
    return tpl_getattr(r, at, v, name.u.s, name.n, out);
}

static const struct { const char *name; filter_fn fn; } FILTERS[] = {
    {"trim", f_trim}, {"tojson", f_tojson}, {"length", f_length}, {"count", f_length}, {"default", f_default},
    {"d", f_default}, {"join", f_join}, {"first", f_first}, {"last", f_last}, {"map", f_map}, {"select", f_select},
    {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"list", f_list},
    {"string", f_string}, {"int", f_int}, {"float", f_float}, {"safe", f_safe}, {"indent", f_indent},
    {"dictsort", f_dictsort}, {"sort", f_sort}, {"unique", f_unique}, {"reverse", f_reverse}, {"items", f_items},
    {"upper", f_upper}, {"lower", f_lower}, {"title", f_title}, {"capitalize", f_capitalize}, {"replace", f_replace},
    {"escape", f_escape}, {"e", f_escape}, {"forceescape", f_escape}, {"wordcount", f_wordcount}, {"abs", f_abs},
    {"round", f_round}, {"sum", f_sum}, {"min", f_min}, {"max", f_max}, {"format", f_format}, {"attr", f_attr},
    {"__splitlines", f_splitlines}};

int tpl_filter(tpl_render *r, const tpl_node *at, const char *name, tv v, const tpl_args *args, tv *out) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (!strcmp(FILTERS[i].name, name)) return FILTERS[i].fn(r, at, v, args, out);
    return tpl_err(r, at, "no filter named '%s'", name);
}

/* ---- tests ---- */
static int is_number(tv v) { return v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL; }

static int test_cmp(tpl_render *r, const tpl_node *at, tv v, tv o, int want, int *res) {
    int c;
    if (tpl_compare(r, at, v, o, &c)) return -1;
    *res = want == 'l' ? c < 0 : want == 'L' ? c <= 0 : want == 'g' ? c > 0 : c >= 0;
    return 0;
}

static int test_case(tv v, int upper) {
    if (v.t != TV_STR) return 0;
    int cased = 0;
    for (uint32_t i = 0; i < v.n; i++) {
        char c = v.u.s[i];
        if ((upper && c >= 'a' && c <= 'z') || (!upper && c >= 'A' && c <= 'Z')) return 0;
        cased |= (c | 32) >= 'a' && (c | 32) <= 'z';
    }
    return cased;
}

int tpl_test(tpl_render *r, const tpl_node *at, const char *name, tv v, const tpl_args *a, int *res) {
    tv o = tpl_arg(a, 0, NULL, tv_undef());
    const char *n = name;
    if (!strcmp(n, "defined")) *res = v.t != TV_UNDEF;
    else if (!strcmp(n, "undefined")) *res = v.t == TV_UNDEF;
    else if (!strcmp(n, "none")) *res = v.t == TV_NONE;
    else if (!strcmp(n, "string")) *res = v.t == TV_STR;
    else if (!strcmp(n, "mapping")) *res = v.t == TV_DICT;
    else if (!strcmp(n, "iterable")) *res = v.t == TV_LIST || v.t == TV_DICT || v.t == TV_STR || v.t == TV_UNDEF;
    else if (!strcmp(n, "sequence")) *res = v.t == TV_LIST || v.t == TV_DICT || v.t == TV_STR || v.t == TV_UNDEF;
    else if (!strcmp(n, "number")) *res = is_number(v);
    else if (!strcmp(n, "integer")) *res = v.t == TV_INT;
    else if (!strcmp(n, "float")) *res = v.t == TV_FLOAT;
    else if (!strcmp(n, "boolean")) *res = v.t == TV_BOOL;
    else if (!strcmp(n, "true")) *res = v.t == TV_BOOL && v.u.i;
    else if (!strcmp(n, "false")) *res = v.t == TV_BOOL && !v.u.i;
    else if (!strcmp(n, "callable")) *res = v.t == TV_MACRO || v.t == TV_FUNC || v.t == TV_METHOD;
    else if (!strcmp(n, "equalto") || !strcmp(n, "eq") || !strcmp(n, "==") || !strcmp(n, "sameas")) *res = tv_equal(v, o);
    else if (!strcmp(n, "ne") || !strcmp(n, "!=")) *res = !tv_equal(v, o);
    else if (!strcmp(n, "lt") || !strcmp(n, "<") || !strcmp(n, "lessthan")) return test_cmp(r, at, v, o, 'l', res);
    else if (!strcmp(n, "le") || !strcmp(n, "<=")) return test_cmp(r, at, v, o, 'L', res);
    else if (!strcmp(n, "gt") || !strcmp(n, ">") || !strcmp(n, "greaterthan")) return test_cmp(r, at, v, o, 'g', res);
    else if (!strcmp(n, "ge") || !strcmp(n, ">=")) return test_cmp(r, at, v, o, 'G', res);
    else if (!strcmp(n, "odd") || !strcmp(n, "even")) {
        if (v.t != TV_INT && v.t != TV_BOOL) return tpl_err(r, at, "test '%s' needs an integer", n);
        *res = (int)(v.u.i & 1) == (n[0] == 'o');
    } else if (!strcmp(n, "divisibleby")) {
        if ((v.t != TV_INT && v.t != TV_BOOL) || o.t != TV_INT || o.u.i == 0) return tpl_err(r, at, "divisibleby needs integers");
        *res = o.u.i == -1 || v.u.i % o.u.i == 0;
    } else if (!strcmp(n, "in")) {
        tpl_node cmp = *at;
        cmp.op = 'i';
        tv out;
        if (o.t == TV_STR && v.t == TV_STR) *res = v.n == 0 || memmem(o.u.s, o.n, v.u.s, v.n) != NULL;
        else if (o.t == TV_DICT) *res = tv_dict_get(o.u.d, v) != NULL;
        else if (o.t == TV_LIST) {
            *res = 0;
            for (uint32_t i = 0; i < o.u.l->n && !*res; i++) *res = tv_equal(v, o.u.l->v[i]);
        } else return tpl_err(r, at, "test 'in': argument of type '%s' is not iterable", tv_type_name(o));
        (void)cmp, (void)out;
    } else if (!strcmp(n, "lower")) *res = test_case(v, 0);
    else if (!strcmp(n, "upper")) *res = test_case(v, 1);
    else if (!strcmp(n, "escaped")) *res = 0;
    else if (!strcmp(n, "filter") || !strcmp(n, "test")) {
        *res = 0;
        if (v.t == TV_STR) {
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s", (int)(v.n < 63 ? v.n : 63), v.u.s);
            for (size_t i = 0; n[0] == 'f' && i < sizeof FILTERS / sizeof FILTERS[0]; i++) *res |= !strcmp(FILTERS[i].name, nm);
        }
    } else return tpl_err(r, at, "no test named '%s'", n);
    return 0;
}
