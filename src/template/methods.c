/* methods.c — attribute and item access in the sandbox, and the methods templates may call: str (strip, split,
 * startswith, replace, upper, format, ...), dict (items, keys, values, get), list (index, count), loop (cycle), plus
 * the global functions (range, namespace, dict, raise_exception, strftime_now).  As in Jinja2's
 * ImmutableSandboxedEnvironment, nothing beyond data is reachable (no dunder attributes, no Python objects) and the
 * mutating methods (list.append, dict.update, ...) are refused. */
#include "template/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---- UTF-8 ---- */
static int32_t u8_next(const char *s, size_t n, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) {
        (*i)++;
        return 0xFFFD;
    }
    *i += (size_t)k;
    return cp;
}

static void u8_put(tpl_buf *b, int32_t cp) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, u);
    tpl_buf_put(b, (const char *)u, (size_t)(k > 0 ? k : 0));
}

static int uc_space(int32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static int finish_str(tpl_render *r, const tpl_node *at, tpl_buf *b, tv *out) {
    if (b->oom) {
        tpl_buf_free(b);
        return tpl_err(r, at, "string exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
    }
    *out = tv_str_copy(r->a, b->p ? b->p : "", b->n);
    tpl_buf_free(b);
    return out->t == TV_STR ? 0 : tpl_err(r, at, "out of memory");
}

static int want_str(tpl_render *r, const tpl_node *at, tv v, const char *what) {
    if (v.t == TV_STR) return 0;
    return tpl_err(r, at, "%s: expected a string, got '%s'", what, tv_type_name(v));
}

/* ---- str methods ---- */
static int in_set(int32_t c, tv chars) {
    size_t i = 0;
    while (i < chars.n)
        if (u8_next(chars.u.s, chars.n, &i) == c) return 1;
    return 0;
}

/* strip / lstrip / rstrip: which = 3 / 1 / 2. */
static int str_strip(tpl_render *r, const tpl_node *at, tv s, tv chars, int which, tv *out) {
    if (chars.t != TV_UNDEF && chars.t != TV_NONE && want_str(r, at, chars, "strip")) return -1;
    int dflt = chars.t != TV_STR;
    size_t a = 0, b = s.n;
    if (which & 1)
        while (a < b) {
            size_t j = a;
            int32_t c = u8_next(s.u.s, b, &j);
            if (!(dflt ? uc_space(c) : in_set(c, chars))) break;
            a = j;
        }
    if (which & 2)
        while (b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)s.u.s[j] & 0xC0) == 0x80) j--;
            size_t k = j;
            int32_t c = u8_next(s.u.s, b, &k);
            if (!(dflt ? uc_space(c) : in_set(c, chars))) break;
            b = j;
        }
    *out = tv_strn(s.u.s + a, (uint32_t)(b - a));
    return 0;
}

static int push_str(tpl_render *r, const tpl_node *at, tv_list *l, const char *p, size_t n) {
    return tv_list_push(r->a, l, tv_strn(p, (uint32_t)n)) ? tpl_err(r, at, "out of memory") : 0;
}

static int str_split(tpl_render *r, const tpl_node *at, tv s, tv sep, tv maxv, tv *out) {
    int64_t max = maxv.t == TV_INT ? maxv.u.i : -1;
    tv_list *l = tv_list_new(r->a, 0);
    if (!l) return tpl_err(r, at, "out of memory");
    const char *p = s.u.s, *e = s.u.s + s.n;
    if (sep.t == TV_STR) {
        if (sep.n == 0) return tpl_err(r, at, "empty separator");
        while (max-- != 0) {
            const char *q = memmem(p, (size_t)(e - p), sep.u.s, sep.n);
            if (!q) break;
            if (push_str(r, at, l, p, (size_t)(q - p))) return -1;
            p = q + sep.n;
        }
        if (push_str(r, at, l, p, (size_t)(e - p))) return -1;
    } else {
        size_t i = 0, n = s.n;
        for (;;) {
            size_t j = i;
            while (j < n) { /* skip whitespace */
                size_t k = j;
                if (!uc_space(u8_next(s.u.s, n, &k))) break;
                j = k;
            }
            if (j >= n) break;
            if (max-- == 0) {
                size_t end = n; /* the rest, right-stripped */
                tv rest;
                str_strip(r, at, tv_strn(s.u.s + j, (uint32_t)(end - j)), tv_undef(), 2, &rest);
                if (push_str(r, at, l, rest.u.s, rest.n)) return -1;
                break;
            }
            size_t k = j;
            while (k < n) {
                size_t m = k;
                if (uc_space(u8_next(s.u.s, n, &m))) break;
                k = m;
            }
            if (push_str(r, at, l, s.u.s + j, k - j)) return -1;
            i = k;
        }
    }
    out->t = TV_LIST;
    out->tuple = 0;
    out->u.l = l;
    return 0;
}

static int affix(tv s, tv x, int end) {
    if (x.t != TV_STR || x.n > s.n) return 0;
    return memcmp(s.u.s + (end ? s.n - x.n : 0), x.u.s, x.n) == 0;
}

static int str_startsend(tpl_render *r, const tpl_node *at, tv s, tv x, int end, tv *out) {
    int yes = 0;
    if (x.t == TV_LIST) {
        for (uint32_t i = 0; i < x.u.l->n; i++) yes |= affix(s, x.u.l->v[i], end);
    } else if (x.t == TV_STR) {
        yes = affix(s, x, end);
    } else {
        return tpl_err(r, at, "%s arg must be str or a tuple of str, not %s", end ? "endswith" : "startswith", tv_type_name(x));
    }
    *out = tv_bool(yes);
    return 0;
}

int tpl_str_replace(tpl_render *r, const tpl_node *at, tv s, tv old, tv new, tv count, tv *out) {
    if (want_str(r, at, old, "replace") || want_str(r, at, new, "replace")) return -1;
    int64_t max = count.t == TV_INT ? count.u.i : -1;
    tpl_buf b = {0};
    const char *p = s.u.s, *e = s.u.s + s.n;
    if (old.n == 0) { /* Python inserts new between every character */
        size_t i = 0;
        while (max-- != 0 && !b.oom) {
            tpl_buf_put(&b, new.u.s, new.n);
            if (i >= s.n) break;
            size_t j = i;
            u8_next(s.u.s, s.n, &j);
            tpl_buf_put(&b, s.u.s + i, j - i);
            i = j;
        }
        if (i < s.n) tpl_buf_put(&b, s.u.s + i, s.n - i);
        return finish_str(r, at, &b, out);
    }
    while (max-- != 0 && !b.oom) {
        const char *q = memmem(p, (size_t)(e - p), old.u.s, old.n);
        if (!q) break;
        tpl_buf_put(&b, p, (size_t)(q - p));
        tpl_buf_put(&b, new.u.s, new.n);
        p = q + old.n;
    }
    tpl_buf_put(&b, p, (size_t)(e - p));
    return finish_str(r, at, &b, out);
}

/* mode: 'u' upper, 'l' lower, 't' str.title, 'c' capitalize, 'j' Jinja's title filter */
int tpl_str_case(tpl_render *r, const tpl_node *at, tv s, int mode, tv *out) {
    tpl_buf b = {0};
    size_t i = 0;
    int prev_cased = 0, word_start = 1, first = 1;
    while (i < s.n) {
        int32_t c = u8_next(s.u.s, s.n, &i), o = c;
        switch (mode) {
        case 'u': o = utf8proc_toupper(c); break;
        case 'l': o = utf8proc_tolower(c); break;
        case 'c': o = first ? utf8proc_toupper(c) : utf8proc_tolower(c); break;
        case 't': {
            int cased = utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
            o = cased ? (prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c)) : c;
            prev_cased = cased;
            break;
        }
        default: {
            int delim = uc_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            o = delim ? c : word_start ? utf8proc_toupper(c) : utf8proc_tolower(c);
            word_start = delim;
        }
        }
        first = 0;
        u8_put(&b, o);
    }
    return finish_str(r, at, &b, out);
}

/* str.format with {} / {0} / {name} fields (no format specs). */
static int str_format(tpl_render *r, const tpl_node *at, tv s, const tpl_args *a, tv *out) {
    tpl_buf b = {0};
    int auto_i = 0;
    for (uint32_t i = 0; i < s.n; i++) {
        char c = s.u.s[i];
        if ((c == '{' || c == '}') && i + 1 < s.n && s.u.s[i + 1] == c) {
            tpl_buf_putc(&b, c);
            i++;
            continue;
        }
        if (c != '{') {
            tpl_buf_putc(&b, c);
            continue;
        }
        const char *close = memchr(s.u.s + i, '}', s.n - i);
        if (!close) {
            tpl_buf_free(&b);
            return tpl_err(r, at, "format: single '{' encountered in format string");
        }
        size_t fl = (size_t)(close - (s.u.s + i + 1));
        const char *field = s.u.s + i + 1;
        tv v;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(fl < 63 ? fl : 63), field);
        if (fl == 0) v = tpl_arg(a, auto_i++, NULL, tv_undef());
        else if (key[0] >= '0' && key[0] <= '9') v = tpl_arg(a, atoi(key), NULL, tv_undef());
        else v = tpl_arg(a, -1, key, tv_undef());
        if (v.t == TV_UNDEF) {
            tpl_buf_free(&b);
            return tpl_err(r, at, "format: no argument for field '{%s}'", key);
        }
        tv_write_str(&b, v);
        i = (uint32_t)(close - s.u.s);
    }
    return finish_str(r, at, &b, out);
}

static int str_join(tpl_render *r, const tpl_node *at, tv sep, tv items, tv *out) {
    tv_list *l;
    if (tpl_iter(r, at, items, &l)) return -1;
    tpl_buf b = {0};
    for (uint32_t i = 0; i < l->n; i++) {
        if (l->v[i].t != TV_STR) {
            tpl_buf_free(&b);
            return tpl_err(r, at, "sequence item %u: expected str instance, %s found", i, tv_type_name(l->v[i]));
        }
        if (i) tpl_buf_put(&b, sep.u.s, sep.n);
        tpl_buf_put(&b, l->v[i].u.s, l->v[i].n);
    }
    return finish_str(r, at, &b, out);
}

static int str_find(tv s, tv x, int rev) {
    if (x.t != TV_STR) return -1;
    if (x.n > s.n) return -1;
    int found = -1;
    for (size_t i = 0; i + x.n <= s.n; i++)
        if (memcmp(s.u.s + i, x.u.s, x.n) == 0) {
            found = (int)tpl_utf8_len(s.u.s, i);
            if (!rev) break;
        }
    return found;
}

static int str_is(tv s, int kind) {
    if (s.n == 0) return 0;
    size_t i = 0;
    int any_cased = 0;
    while (i < s.n) {
        int32_t c = u8_next(s.u.s, s.n, &i);
        const char *cat = utf8proc_category_string(c);
        int ok;
        switch (kind) {
        case 'd': ok = cat[0] == 'N' && cat[1] == 'd'; break;
        case 'a': ok = cat[0] == 'L'; break;
        case 'n': ok = cat[0] == 'L' || cat[0] == 'N'; break;
        case 's': ok = uc_space(c); break;
        case 'u': ok = !(utf8proc_toupper(c) != c); any_cased |= utf8proc_tolower(c) != c; break;
        default: ok = !(utf8proc_tolower(c) != c); any_cased |= utf8proc_toupper(c) != c; break;
        }
        if (!ok) return 0;
    }
    return kind == 'u' || kind == 'l' ? any_cased : 1;
}

static int str_method(tpl_render *r, const tpl_node *at, tv s, const char *m, const tpl_args *a, tv *out) {
    tv a0 = tpl_arg(a, 0, NULL, tv_undef()), a1 = tpl_arg(a, 1, NULL, tv_undef());
    if (!strcmp(m, "strip")) return str_strip(r, at, s, a0, 3, out);
    if (!strcmp(m, "lstrip")) return str_strip(r, at, s, a0, 1, out);
    if (!strcmp(m, "rstrip")) return str_strip(r, at, s, a0, 2, out);
    if (!strcmp(m, "split")) return str_split(r, at, s, tpl_arg(a, 0, "sep", tv_none()), tpl_arg(a, 1, "maxsplit", tv_int(-1)), out);
    if (!strcmp(m, "startswith")) return str_startsend(r, at, s, a0, 0, out);
    if (!strcmp(m, "endswith")) return str_startsend(r, at, s, a0, 1, out);
    if (!strcmp(m, "replace")) return tpl_str_replace(r, at, s, a0, a1, tpl_arg(a, 2, "count", tv_int(-1)), out);
    if (!strcmp(m, "upper")) return tpl_str_case(r, at, s, 'u', out);
    if (!strcmp(m, "lower")) return tpl_str_case(r, at, s, 'l', out);
    if (!strcmp(m, "title")) return tpl_str_case(r, at, s, 't', out);
    if (!strcmp(m, "capitalize")) return tpl_str_case(r, at, s, 'c', out);
    if (!strcmp(m, "format")) return str_format(r, at, s, a, out);
    if (!strcmp(m, "join")) return str_join(r, at, s, a0, out);
    if (!strcmp(m, "find") || !strcmp(m, "rfind")) {
        if (want_str(r, at, a0, m)) return -1;
        *out = tv_int(str_find(s, a0, m[0] == 'r'));
        return 0;
    }
    if (!strcmp(m, "count")) {
        if (want_str(r, at, a0, m)) return -1;
        int64_t k = 0;
        if (a0.n == 0) k = (int64_t)tpl_utf8_len(s.u.s, s.n) + 1;
        else
            for (const char *p = s.u.s, *e = s.u.s + s.n; (p = memmem(p, (size_t)(e - p), a0.u.s, a0.n)); p += a0.n) k++;
        *out = tv_int(k);
        return 0;
    }
    if (!strcmp(m, "splitlines")) return tpl_filter(r, at, "__splitlines", s, a, out);
    static const char *const is_names[] = {"isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower"};
    static const char is_kind[] = {'d', 'a', 'n', 's', 'u', 'l'};
    for (int k = 0; k < 6; k++)
        if (!strcmp(m, is_names[k])) {
            *out = tv_bool(str_is(s, is_kind[k]));
            return 0;
        }
    return tpl_err(r, at, "'str' object has no attribute '%s'", m);
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "replace",
                                          "upper", "lower", "title", "capitalize", "format", "join", "find", "rfind",
                                          "count", "splitlines", "isdigit", "isalpha", "isalnum", "isspace", "isupper",
                                          "islower", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const DICT_UNSAFE[] = {"update", "pop", "popitem", "clear", "setdefault", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL};
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear", NULL};

static const char *find_name(const char *const *names, const char *s, size_t n) {
    for (; *names; names++)
        if (strlen(*names) == n && memcmp(*names, s, n) == 0) return *names;
    return NULL;
}

static int make_method(tpl_render *r, const tpl_node *at, tv self, const char *name, tv *out) {
    tv_method *m = tpl_alloc(r->a, sizeof *m);
    if (!m) return tpl_err(r, at, "out of memory");
    m->self = self;
    m->name = name;
    out->t = TV_METHOD;
    out->u.p = m;
    return 0;
}

static int dict_items(tpl_render *r, const tpl_node *at, const tv_dict *d, int what, tv *out) {
    tv_list *l = tv_list_new(r->a, d->n);
    if (!l) return tpl_err(r, at, "out of memory");
    for (uint32_t i = 0; i < d->n; i++) {
        if (what == 'k') l->v[i] = d->k[i];
        else if (what == 'v') l->v[i] = d->v[i];
        else {
            tv_list *pair = tv_list_new(r->a, 2);
            if (!pair) return tpl_err(r, at, "out of memory");
            pair->v[0] = d->k[i];
            pair->v[1] = d->v[i];
            pair->n = 2;
            l->v[i].t = TV_LIST;
            l->v[i].tuple = 1;
            l->v[i].u.l = pair;
        }
    }
    l->n = d->n;
    out->t = TV_LIST;
    out->tuple = 0;
    out->u.l = l;
    return 0;
}

static int loop_attr(tpl_render *r, const tpl_node *at, tv obj, const char *name, tv *out) {
    const tpl_loop *l = obj.u.p;
    int64_t i = l->i, n = l->items->n;
    if (!strcmp(name, "index")) *out = tv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int(i);
    else if (!strcmp(name, "revindex")) *out = tv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = tv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = tv_int(n);
    else if (!strcmp(name, "depth")) *out = tv_int(l->depth);
    else if (!strcmp(name, "depth0")) *out = tv_int(l->depth - 1);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? l->items->v[i - 1] : tv_undef();
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? l->items->v[i + 1] : tv_undef();
    else if (!strcmp(name, "cycle")) return make_method(r, at, obj, "cycle", out);
    else *out = tv_undef();
    return 0;
}

int tpl_getattr(tpl_render *r, const tpl_node *at, tv obj, const char *name, size_t n, tv *out) {
    const char *m;
    char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)(n < 63 ? n : 63), name);
    *out = tv_undef();
    out->u.s = name;
    out->n = (uint32_t)n;
    switch (obj.t) {
    case TV_UNDEF:
        if (obj.u.s) return tpl_err(r, at, "'%.*s' is undefined", (int)obj.n, obj.u.s);
        return tpl_err(r, at, "undefined value has no attribute '%s'", nm);
    case TV_DICT:
        if ((m = find_name(DICT_METHODS, name, n)) || (m = find_name(DICT_UNSAFE, name, n)))
            return make_method(r, at, obj, m, out);
        /* fall through */
    case TV_NS: {
        tv *v = tv_dict_gets(obj.u.d, name, n);
        if (v) *out = *v;
        return 0;
    }
    case TV_STR:
        if ((m = find_name(STR_METHODS, name, n))) return make_method(r, at, obj, m, out);
        return 0;
    case TV_LIST:
        if ((m = find_name(LIST_METHODS, name, n)) || (m = find_name(LIST_UNSAFE, name, n)))
            return make_method(r, at, obj, m, out);
        return 0;
    case TV_LOOP: return loop_attr(r, at, obj, nm, out);
    default: return 0;
    }
}

int tpl_getitem(tpl_render *r, const tpl_node *at, tv obj, tv key, tv *out) {
    *out = tv_undef();
    if (obj.t == TV_UNDEF) return tpl_getattr(r, at, obj, "", 0, out);
    if ((obj.t == TV_LIST || obj.t == TV_STR) && (key.t == TV_INT || key.t == TV_BOOL)) {
        int64_t i = key.u.i;
        if (obj.t == TV_LIST) {
            int64_t len = obj.tuple == TV_GENERATOR ? 0 : obj.u.l->n; /* a generator is not subscriptable */
            if (i < 0) i += len;
            if (i >= 0 && i < len) *out = obj.u.l->v[i];
            return 0;
        }
        int64_t len = (int64_t)tpl_utf8_len(obj.u.s, obj.n);
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            size_t a = tpl_utf8_offset(obj.u.s, obj.n, (size_t)i), b = tpl_utf8_offset(obj.u.s, obj.n, (size_t)i + 1);
            *out = tv_strn(obj.u.s + a, (uint32_t)(b - a));
        }
        return 0;
    }
    if (obj.t == TV_DICT) {
        tv *v = tv_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    if (key.t == TV_STR) return tpl_getattr(r, at, obj, key.u.s, key.n, out);
    return 0;
}

int tpl_call_method(tpl_render *r, const tpl_node *at, const tv_method *m, const tpl_args *a, tv *out) {
    tv self = m->self;
    const char *name = m->name;
    if (self.t == TV_STR) return str_method(r, at, self, name, a, out);
    if (self.t == TV_DICT) {
        if (!strcmp(name, "items")) return dict_items(r, at, self.u.d, 'i', out);
        if (!strcmp(name, "keys")) return dict_items(r, at, self.u.d, 'k', out);
        if (!strcmp(name, "values")) return dict_items(r, at, self.u.d, 'v', out);
        if (!strcmp(name, "get")) {
            tv *v = tv_dict_get(self.u.d, tpl_arg(a, 0, NULL, tv_undef()));
            *out = v ? *v : tpl_arg(a, 1, "default", tv_none());
            return 0;
        }
        return tpl_err(r, at, "access to attribute '%s' of 'dict' object is unsafe", name);
    }
    if (self.t == TV_LIST) {
        tv x = tpl_arg(a, 0, NULL, tv_undef());
        int64_t k = 0;
        for (uint32_t i = 0; i < self.u.l->n; i++) {
            if (!tv_equal(self.u.l->v[i], x)) continue;
            if (!strcmp(name, "index")) {
                *out = tv_int(i);
                return 0;
            }
            k++;
        }
        if (!strcmp(name, "count")) {
            *out = tv_int(k);
            return 0;
        }
        if (!strcmp(name, "index")) return tpl_err(r, at, "list.index(x): x not in list");
        return tpl_err(r, at, "access to attribute '%s' of 'list' object is unsafe", name);
    }
    if (self.t == TV_LOOP && !strcmp(name, "cycle")) {
        if (a->n == 0) return tpl_err(r, at, "no items for cycling given");
        *out = a->v[((const tpl_loop *)self.u.p)->i % a->n];
        return 0;
    }
    return tpl_err(r, at, "'%s' is not callable", name);
}

/* ---- global functions ---- */
typedef int (*gfn)(tpl_render *, const tpl_node *, const tpl_args *, tv *);

static int fn_range(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out) {
    int64_t start = 0, stop, step = 1;
    for (int i = 0; i < a->n; i++)
        if (a->v[i].t != TV_INT && a->v[i].t != TV_BOOL)
            return tpl_err(r, at, "range: '%s' object cannot be interpreted as an integer", tv_type_name(a->v[i]));
    if (a->n == 1) stop = a->v[0].u.i;
    else if (a->n == 2 || a->n == 3) {
        start = a->v[0].u.i;
        stop = a->v[1].u.i;
        if (a->n == 3) step = a->v[2].u.i;
    } else return tpl_err(r, at, "range expected 1 to 3 arguments, got %d", a->n);
    if (step == 0) return tpl_err(r, at, "range() arg 3 must not be zero");
    double count = ((double)stop - (double)start) / (double)step;
    if (count > TPL_MAX_ITERATIONS) return tpl_err(r, at, "range of more than %d items", TPL_MAX_ITERATIONS);
    tv_list *l = tv_list_new(r->a, count > 0 ? (uint32_t)count + 1 : 0);
    if (!l) return tpl_err(r, at, "out of memory");
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) l->v[l->n++] = tv_int(i);
    out->t = TV_LIST;
    out->tuple = 0;
    out->u.l = l;
    return 0;
}

static int fn_dict(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out, int type) {
    tv_dict *d = tv_dict_new(r->a, 0);
    if (!d) return tpl_err(r, at, "out of memory");
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].t != TV_DICT) return tpl_err(r, at, "expected a mapping, got '%s'", tv_type_name(a->v[i]));
        for (uint32_t k = 0; k < a->v[i].u.d->n; k++)
            if (tv_dict_set(r->a, d, a->v[i].u.d->k[k], a->v[i].u.d->v[k])) return tpl_err(r, at, "out of memory");
    }
    for (int i = 0; i < a->nk; i++)
        if (tv_dict_set(r->a, d, a->kn[i], a->kv[i])) return tpl_err(r, at, "out of memory");
    out->t = (uint8_t)type;
    out->u.d = d;
    return 0;
}
static int fn_namespace(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out) { return fn_dict(r, at, a, out, TV_NS); }
static int fn_mkdict(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out) { return fn_dict(r, at, a, out, TV_DICT); }

static int fn_raise(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out) {
    tpl_buf b = {0};
    tv_write_str(&b, tpl_arg(a, 0, "message", tv_strn("", 0)));
    snprintf(r->err, sizeof r->err, "%s", b.p ? b.p : "");
    tpl_buf_free(&b);
    r->raised = 1;
    (void)at, (void)out;
    return -1;
}

static int fn_strftime(tpl_render *r, const tpl_node *at, const tpl_args *a, tv *out) {
    tv fmt = tpl_arg(a, 0, "format", tv_undef());
    if (fmt.t != TV_STR) return tpl_err(r, at, "strftime_now: format must be a string");
    struct tm tm;
    time_t t = r->has_now ? (time_t)r->now : time(NULL);
    if (r->has_now) gmtime_r(&t, &tm);
    else localtime_r(&t, &tm);
    char f[256], buf[512];
    snprintf(f, sizeof f, "%.*s", (int)(fmt.n < 255 ? fmt.n : 255), fmt.u.s);
    size_t n = f[0] ? strftime(buf, sizeof buf, f, &tm) : 0;
    *out = tv_str_copy(r->a, buf, n);
    return out->t == TV_STR ? 0 : tpl_err(r, at, "out of memory");
}

static const struct { const char *name; gfn fn; } GLOBALS[] = {
    {"range", fn_range}, {"namespace", fn_namespace}, {"dict", fn_mkdict}, {"raise_exception", fn_raise},
    {"strftime_now", fn_strftime}};

tv tpl_builtin_global(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++)
        if (strlen(GLOBALS[i].name) == n && memcmp(GLOBALS[i].name, name, n) == 0) {
            tv f = {.t = TV_FUNC};
            f.u.p = (void *)&GLOBALS[i];
            return f;
        }
    return tv_undef();
}

int tpl_call_func(tpl_render *r, const tpl_node *at, tv fn, const tpl_args *a, tv *out) {
    const __typeof__(GLOBALS[0]) *g = fn.u.p;
    return g->fn(r, at, a, out);
}
