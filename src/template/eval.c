/* eval.c — the sandboxed tree-walking evaluator: statements write into an output buffer, expressions produce values
 * in the render's arena.  Scoping is Jinja2's: a for-loop body gets a fresh scope each iteration, macros close over
 * the scope they were defined in, if-blocks share their scope.  Limits: nesting depth, total loop iterations, output
 * and arena size (TPL_MAX_*); every violation is an error with line and column. */
#include "template/eval.h"
#include "util/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FLOW_OK = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2, FLOW_ERR = -1 };

int tpl_err(tpl_render *r, const tpl_node *at, const char *fmt, ...) {
    if (r->err[0]) return -1; /* keep the first (innermost) message */
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) snprintf(r->err, sizeof r->err, "%s:%u:%u: %s", r->prog->name, at->line, at->col, msg);
    else snprintf(r->err, sizeof r->err, "%s: %s", r->prog->name, msg);
    return -1;
}

static int oom(tpl_render *r, const tpl_node *at) {
    return tpl_err(r, at, "the template used more than %u MiB of memory", TPL_MAX_ARENA >> 20);
}

tv tpl_arg(const tpl_args *a, int pos, const char *name, tv def) {
    if (name) {
        size_t n = strlen(name);
        for (int i = 0; i < a->nk; i++)
            if (a->kn[i].n == n && memcmp(a->kn[i].u.s, name, n) == 0) return a->kv[i];
    }
    if (pos >= 0 && pos < a->n) return a->v[pos];
    return def;
}

int tpl_to_str(tpl_render *r, const tpl_node *at, tv v, tv *out) {
    if (v.t == TV_STR) {
        *out = v;
        return 0;
    }
    tpl_buf b = {0};
    tv_write_str(&b, v);
    if (b.oom) {
        tpl_buf_free(&b);
        return tpl_err(r, at, "string exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
    }
    *out = tv_str_copy(r->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return out->t == TV_STR ? 0 : oom(r, at);
}

int tpl_iter(tpl_render *r, const tpl_node *at, tv v, tv_list **out) {
    if (v.t == TV_LIST) {
        *out = v.u.l;
        return 0;
    }
    if (v.t == TV_UNDEF) {
        *out = tv_list_new(r->a, 0);
        return *out ? 0 : oom(r, at);
    }
    if (v.t == TV_DICT || v.t == TV_STR) {
        tv_list *l = tv_list_new(r->a, v.t == TV_DICT ? v.u.d->n : v.n);
        if (!l) return oom(r, at);
        if (v.t == TV_DICT) {
            for (uint32_t i = 0; i < v.u.d->n; i++) l->v[l->n++] = v.u.d->k[i];
        } else {
            for (uint32_t i = 0; i < v.n;) {
                uint32_t j = i + 1;
                while (j < v.n && ((unsigned char)v.u.s[j] & 0xC0) == 0x80) j++;
                l->v[l->n++] = tv_strn(v.u.s + i, j - i);
                i = j;
            }
        }
        *out = l;
        return 0;
    }
    return tpl_err(r, at, "'%s' object is not iterable", tv_type_name(v));
}

int tpl_compare(tpl_render *r, const tpl_node *at, tv a, tv b, int *cmp) {
    int na = a.t == TV_BOOL || a.t == TV_INT || a.t == TV_FLOAT, nb = b.t == TV_BOOL || b.t == TV_INT || b.t == TV_FLOAT;
    if (na && nb) {
        if (a.t != TV_FLOAT && b.t != TV_FLOAT) *cmp = (a.u.i > b.u.i) - (a.u.i < b.u.i);
        else {
            double x = a.t == TV_FLOAT ? a.u.f : (double)a.u.i, y = b.t == TV_FLOAT ? b.u.f : (double)b.u.i;
            *cmp = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.t == TV_STR && b.t == TV_STR) {
        size_t n = a.n < b.n ? a.n : b.n;
        int c = n ? memcmp(a.u.s, b.u.s, n) : 0;
        *cmp = c ? (c > 0) - (c < 0) : (a.n > b.n) - (a.n < b.n);
        return 0;
    }
    if (a.t == TV_LIST && b.t == TV_LIST) {
        for (uint32_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (tv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return tpl_compare(r, at, a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return tpl_err(r, at, "'<' not supported between instances of '%s' and '%s'", tv_type_name(a), tv_type_name(b));
}

/* ---- scopes ---- */
static tpl_frame *frame_new(tpl_render *r, tpl_frame *parent) {
    tpl_frame *f = tpl_alloc(r->a, sizeof *f);
    if (!f || !(f->vars = tv_dict_new(r->a, 0))) return NULL;
    f->parent = parent;
    return f;
}

static tv lookup(tpl_render *r, tpl_frame *f, tv name) {
    for (; f; f = f->parent) {
        tv *v = tv_dict_gets(f->vars, name.u.s, name.n);
        if (v) return *v;
    }
    tv *g = tv_dict_gets(r->globals, name.u.s, name.n);
    if (g) return *g;
    tv b = tpl_builtin_global(name.u.s, name.n);
    if (b.t != TV_UNDEF) return b;
    tv u = tv_undef();
    u.u.s = name.u.s;
    u.n = name.n;
    return u;
}

static int bind(tpl_render *r, tpl_frame *f, const tpl_node *at, tv name, tv v) {
    return tv_dict_set(r->a, f->vars, name, v) ? oom(r, at) : 0;
}

static int eval(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *out);
static int exec_body(tpl_render *r, tpl_frame *f, const tpl_nodes *body, tpl_buf *out);

static int undefined_error(tpl_render *r, const tpl_node *at, tv u) {
    if (u.u.s) return tpl_err(r, at, "'%.*s' is undefined", (int)u.n, u.u.s);
    return tpl_err(r, at, "undefined value");
}

/* ---- expressions ---- */
static int eval_args(tpl_render *r, tpl_frame *f, const tpl_node *n, tpl_args *a) {
    a->n = (int)n->args.n;
    a->nk = (int)n->kwargs.n;
    a->v = tpl_alloc(r->a, (n->args.n + 1) * sizeof(tv));
    a->kn = tpl_alloc(r->a, (n->kwargs.n + 1) * sizeof(tv));
    a->kv = tpl_alloc(r->a, (n->kwargs.n + 1) * sizeof(tv));
    if (!a->v || !a->kn || !a->kv) return oom(r, n);
    for (uint32_t i = 0; i < n->args.n; i++)
        if (eval(r, f, n->args.v[i], &a->v[i])) return -1;
    for (uint32_t i = 0; i < n->kwargs.n; i++) {
        a->kn[i] = n->kwnames.v[i]->value;
        if (eval(r, f, n->kwargs.v[i], &a->kv[i])) return -1;
    }
    return 0;
}

static int call_macro(tpl_render *r, const tpl_node *at, const tpl_macro *m, const tpl_args *a, tv *out) {
    const tpl_node *def = m->def;
    if (++r->depth > TPL_MAX_DEPTH) return tpl_err(r, at, "macro calls nested too deeply (limit %d)", TPL_MAX_DEPTH);
    tpl_frame *f = frame_new(r, m->closure);
    tv_list *varargs = tv_list_new(r->a, 0);
    tv_dict *kwargs = tv_dict_new(r->a, 0);
    if (!f || !varargs || !kwargs) return oom(r, at);
    for (uint32_t i = 0; i < def->params.n; i++) {
        tv name = def->params.v[i]->value, v = tv_undef();
        if ((int)i < a->n) v = a->v[i];
        for (int k = 0; k < a->nk; k++)
            if (tv_equal(a->kn[k], name)) v = a->kv[k];
        if (v.t == TV_UNDEF && def->defaults.v[i] && eval(r, f, def->defaults.v[i], &v)) return -1;
        if (bind(r, f, at, name, v)) return -1;
    }
    for (int i = (int)def->params.n; i < a->n; i++)
        if (tv_list_push(r->a, varargs, a->v[i])) return oom(r, at);
    for (int k = 0; k < a->nk; k++) {
        int known = 0;
        for (uint32_t i = 0; i < def->params.n; i++) known |= tv_equal(a->kn[k], def->params.v[i]->value);
        if (!known && tv_dict_set(r->a, kwargs, a->kn[k], a->kv[k])) return oom(r, at);
    }
    tv lv = {.t = TV_LIST}, dv = {.t = TV_DICT};
    lv.u.l = varargs;
    dv.u.d = kwargs;
    if (bind(r, f, at, tv_strn("varargs", 7), lv) || bind(r, f, at, tv_strn("kwargs", 6), dv)) return -1;
    if (m->caller.t != TV_UNDEF && bind(r, f, at, tv_strn("caller", 6), m->caller)) return -1;
    tpl_buf b = {0};
    int rc = exec_body(r, f, &def->body, &b);
    if (rc == FLOW_OK) {
        *out = tv_str_copy(r->a, b.p ? b.p : "", b.n);
        if (out->t != TV_STR) rc = oom(r, at);
    }
    tpl_buf_free(&b);
    r->depth--;
    return rc == FLOW_ERR ? -1 : 0;
}

int tpl_call_value(tpl_render *r, const tpl_node *at, tv fn, const tpl_args *a, tv *out) {
    switch (fn.t) {
    case TV_MACRO: return call_macro(r, at, fn.u.p, a, out);
    case TV_METHOD: return tpl_call_method(r, at, fn.u.p, a, out);
    case TV_FUNC: return tpl_call_func(r, at, fn, a, out);
    case TV_UNDEF: return undefined_error(r, at, fn);
    default: return tpl_err(r, at, "'%s' object is not callable", tv_type_name(fn));
    }
}

static int eval_call(tpl_render *r, tpl_frame *f, const tpl_node *n, tv caller, tv *out) {
    tv fn;
    tpl_args a;
    if (eval(r, f, n->a, &fn) || eval_args(r, f, n, &a)) return -1;
    if (caller.t != TV_UNDEF) {
        if (fn.t != TV_MACRO) return tpl_err(r, n, "{%% call %%} needs a macro");
        tpl_macro *m = tpl_alloc(r->a, sizeof *m);
        if (!m) return oom(r, n);
        *m = *(const tpl_macro *)fn.u.p;
        m->caller = caller;
        fn.u.p = m;
    }
    return tpl_call_value(r, n, fn, &a, out);
}

static int slice_index(tpl_render *r, tpl_frame *f, const tpl_node *e, int64_t *out, int *given) {
    *given = 0;
    if (!e) return 0;
    tv v;
    if (eval(r, f, e, &v)) return -1;
    if (v.t == TV_NONE) return 0;
    if (v.t != TV_INT && v.t != TV_BOOL) return tpl_err(r, e, "slice indices must be integers or None");
    *out = v.u.i;
    *given = 1;
    return 0;
}

/* Python slice [start:stop:step] of a list or string. */
static int eval_slice(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *out) {
    tv obj;
    int64_t start = 0, stop = 0, step = 1;
    int gs, ge, gt;
    if (eval(r, f, n->a, &obj) || slice_index(r, f, n->b, &start, &gs) || slice_index(r, f, n->c, &stop, &ge) ||
        slice_index(r, f, n->args.n ? n->args.v[0] : NULL, &step, &gt))
        return -1;
    if (step == 0) return tpl_err(r, n, "slice step cannot be zero");
    tv_list *items;
    if (obj.t != TV_LIST && obj.t != TV_STR) return tpl_err(r, n, "'%s' object is not subscriptable", tv_type_name(obj));
    if (tpl_iter(r, n, obj, &items)) return -1;
    int64_t len = items->n;
    if (!gs) start = step > 0 ? 0 : len - 1;
    else if (start < 0) start = start + len < 0 ? (step > 0 ? 0 : -1) : start + len;
    else if (start >= len) start = step > 0 ? len : len - 1;
    if (!ge) stop = step > 0 ? len : -1;
    else if (stop < 0) stop = stop + len < 0 ? (step > 0 ? 0 : -1) : stop + len;
    else if (stop >= len) stop = step > 0 ? len : len - 1;
    tv_list *res = tv_list_new(r->a, 0);
    if (!res) return oom(r, n);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (tv_list_push(r->a, res, items->v[i])) return oom(r, n);
    if (obj.t == TV_LIST) {
        out->t = TV_LIST;
        out->tuple = obj.tuple;
        out->u.l = res;
        return 0;
    }
    tpl_buf b = {0};
    for (uint32_t i = 0; i < res->n; i++) tpl_buf_put(&b, res->v[i].u.s, res->v[i].n);
    *out = tv_str_copy(r->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return out->t == TV_STR ? 0 : oom(r, n);
}

static int num_binary(tpl_render *r, const tpl_node *n, tv a, tv b, tv *out);

static int eval_binary(tpl_render *r, const tpl_node *n, tv a, tv b, tv *out) {
    int op = n->op;
    if (a.t == TV_UNDEF) return undefined_error(r, n, a);
    if (b.t == TV_UNDEF) return undefined_error(r, n, b);
    if (op == '+' && a.t == TV_STR && b.t == TV_STR) {
        int markup = a.tuple || b.tuple; /* Markup + str escapes the str (markupsafe) */
        if (markup && (tpl_escape(r, n, a, &a) || tpl_escape(r, n, b, &b))) return -1;
        if ((size_t)a.n + b.n > TPL_MAX_OUTPUT) return tpl_err(r, n, "string exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
        char *p = tpl_alloc(r->a, (size_t)a.n + b.n + 1);
        if (!p) return oom(r, n);
        memcpy(p, a.u.s, a.n);
        memcpy(p + a.n, b.u.s, b.n);
        *out = tv_strn(p, a.n + b.n);
        out->tuple = (uint8_t)markup;
        return 0;
    }
    if (op == '+' && a.t == TV_LIST && b.t == TV_LIST) {
        tv_list *l = tv_list_new(r->a, a.u.l->n + b.u.l->n);
        if (!l) return oom(r, n);
        for (uint32_t i = 0; i < a.u.l->n; i++) l->v[l->n++] = a.u.l->v[i];
        for (uint32_t i = 0; i < b.u.l->n; i++) l->v[l->n++] = b.u.l->v[i];
        out->t = TV_LIST;
        out->tuple = 0;
        out->u.l = l;
        return 0;
    }
    if (op == '*' && ((a.t == TV_STR && b.t == TV_INT) || (a.t == TV_INT && b.t == TV_STR))) {
        tv s = a.t == TV_STR ? a : b;
        int64_t k = a.t == TV_INT ? a.u.i : b.u.i;
        if (k < 0) k = 0;
        if (s.n && (uint64_t)k > TPL_MAX_OUTPUT / s.n) return tpl_err(r, n, "string exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
        char *p = tpl_alloc(r->a, (size_t)k * s.n + 1);
        if (!p) return oom(r, n);
        for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * s.n, s.u.s, s.n);
        *out = tv_strn(p, (uint32_t)((size_t)k * s.n));
        return 0;
    }
    return num_binary(r, n, a, b, out);
}

static double as_f(tv v) { return v.t == TV_FLOAT ? v.u.f : (double)v.u.i; }

static int num_binary(tpl_render *r, const tpl_node *n, tv a, tv b, tv *out) {
    int op = n->op;
    int na = a.t == TV_BOOL || a.t == TV_INT || a.t == TV_FLOAT, nb = b.t == TV_BOOL || b.t == TV_INT || b.t == TV_FLOAT;
    static const char *names[128] = {['+'] = "+", ['-'] = "-", ['*'] = "*", ['/'] = "/", ['f'] = "//", ['%'] = "%", ['p'] = "**"};
    if (!na || !nb)
        return tpl_err(r, n, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], tv_type_name(a), tv_type_name(b));
    int fl = a.t == TV_FLOAT || b.t == TV_FLOAT;
    if ((op == '/' || op == 'f' || op == '%') && (fl ? as_f(b) == 0.0 : b.u.i == 0))
        return tpl_err(r, n, "division by zero");
    if (op == '/') {
        *out = tv_float(as_f(a) / as_f(b));
        return 0;
    }
    if (fl) {
        double x = as_f(a), y = as_f(b), z;
        switch (op) {
        case '+': z = x + y; break;
        case '-': z = x - y; break;
        case '*': z = x * y; break;
        case 'f': z = floor(x / y); break;
        case '%': z = fmod(x, y); if (z != 0 && ((z < 0) != (y < 0))) z += y; break;
        default: z = pow(x, y);
        }
        *out = tv_float(z);
        return 0;
    }
    int64_t x = a.u.i, y = b.u.i, z = 0;
    int ovf = 0;
    switch (op) {
    case '+': ovf = __builtin_add_overflow(x, y, &z); break;
    case '-': ovf = __builtin_sub_overflow(x, y, &z); break;
    case '*': ovf = __builtin_mul_overflow(x, y, &z); break;
    case 'f': if (x == INT64_MIN && y == -1) ovf = 1; else { z = x / y; if ((x % y != 0) && ((x < 0) != (y < 0))) z--; } break;
    case '%': if (y == -1) z = 0; else { z = x % y; if (z != 0 && ((z < 0) != (y < 0))) z += y; } break;
    default:
        if (y < 0) {
            *out = tv_float(pow((double)x, (double)y));
            return 0;
        }
        z = 1;
        for (int64_t i = 0; i < y && !ovf; i++) ovf = __builtin_mul_overflow(z, x, &z);
    }
    if (ovf) return tpl_err(r, n, "integer overflow");
    *out = tv_int(z);
    return 0;
}

static int eval_compare(tpl_render *r, const tpl_node *n, tv a, tv b, tv *out) {
    int op = n->op, c;
    if (op == 'e' || op == 'n') {
        *out = tv_bool(tv_equal(a, b) == (op == 'e'));
        return 0;
    }
    if (op == 'i' || op == 'I') {
        int in = 0;
        if (b.t == TV_STR) {
            if (a.t != TV_STR) return tpl_err(r, n, "'in <string>' requires string as left operand, not %s", tv_type_name(a));
            in = a.n == 0 || memmem(b.u.s, b.n, a.u.s, a.n) != NULL;
        } else if (b.t == TV_DICT) {
            in = tv_dict_get(b.u.d, a) != NULL;
        } else if (b.t == TV_LIST) {
            for (uint32_t i = 0; i < b.u.l->n && !in; i++) in = tv_equal(a, b.u.l->v[i]);
        } else if (b.t == TV_UNDEF) {
            in = 0; /* Undefined iterates as empty */
        } else {
            return tpl_err(r, n, "argument of type '%s' is not iterable", tv_type_name(b));
        }
        *out = tv_bool(in == (op == 'i'));
        return 0;
    }
    if (a.t == TV_UNDEF) return undefined_error(r, n, a);
    if (b.t == TV_UNDEF) return undefined_error(r, n, b);
    if (tpl_compare(r, n, a, b, &c)) return -1;
    *out = tv_bool(op == '<' ? c < 0 : op == 'l' ? c <= 0 : op == '>' ? c > 0 : c >= 0);
    return 0;
}

static int eval_filter(tpl_render *r, tpl_frame *f, const tpl_node *n, tv v, tv *out) {
    tpl_args a;
    if (eval_args(r, f, n, &a)) return -1;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)n->value.n, n->value.u.s);
    if (n->kind == N_FILTER) return tpl_filter(r, n, name, v, &a, out);
    int res;
    if (tpl_test(r, n, name, v, &a, &res)) return -1;
    *out = tv_bool(n->op ? !res : res);
    return 0;
}

static int eval_seq(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *out) {
    if (n->kind == N_DICT) {
        tv_dict *d = tv_dict_new(r->a, 0);
        if (!d) return oom(r, n);
        for (uint32_t i = 0; i + 1 < n->args.n; i += 2) {
            tv k, v;
            if (eval(r, f, n->args.v[i], &k) || eval(r, f, n->args.v[i + 1], &v)) return -1;
            if (tv_dict_set(r->a, d, k, v)) return oom(r, n);
        }
        out->t = TV_DICT;
        out->u.d = d;
        return 0;
    }
    tv_list *l = tv_list_new(r->a, n->args.n);
    if (!l) return oom(r, n);
    for (uint32_t i = 0; i < n->args.n; i++)
        if (eval(r, f, n->args.v[i], &l->v[l->n++])) return -1;
    out->t = TV_LIST;
    out->tuple = n->kind == N_TUPLE;
    out->u.l = l;
    return 0;
}

static int eval_inner(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *out) {
    tv a, b;
    switch (n->kind) {
    case N_CONST: *out = n->value; return 0;
    case N_NAME: *out = lookup(r, f, n->value); return 0;
    case N_LIST: case N_TUPLE: case N_DICT: return eval_seq(r, f, n, out);
    case N_GETATTR:
        if (eval(r, f, n->a, &a)) return -1;
        return tpl_getattr(r, n, a, n->value.u.s, n->value.n, out);
    case N_GETITEM:
        if (eval(r, f, n->a, &a) || eval(r, f, n->b, &b)) return -1;
        return tpl_getitem(r, n, a, b, out);
    case N_SLICE: return eval_slice(r, f, n, out);
    case N_CALL: return eval_call(r, f, n, tv_undef(), out);
    case N_FILTER: case N_TEST: return eval(r, f, n->a, &a) || eval_filter(r, f, n, a, out);
    case N_UNARY:
        if (eval(r, f, n->a, &a)) return -1;
        if (a.t == TV_FLOAT) *out = tv_float(n->op == '-' ? -a.u.f : a.u.f);
        else if (a.t == TV_INT || a.t == TV_BOOL) {
            if (n->op == '-' && a.u.i == INT64_MIN) return tpl_err(r, n, "integer overflow");
            *out = tv_int(n->op == '-' ? -a.u.i : a.u.i);
        } else return a.t == TV_UNDEF ? undefined_error(r, n, a) : tpl_err(r, n, "bad operand type for unary %c: '%s'", n->op, tv_type_name(a));
        return 0;
    case N_BINARY: return eval(r, f, n->a, &a) || eval(r, f, n->b, &b) || eval_binary(r, n, a, b, out);
    case N_CONCAT: {
        tv sa, sb;
        if (eval(r, f, n->a, &a) || eval(r, f, n->b, &b) || tpl_to_str(r, n, a, &sa) || tpl_to_str(r, n, b, &sb)) return -1;
        tpl_node plus = *n;
        plus.op = '+';
        sa.tuple = sb.tuple = 0; /* str_join: plain strings */
        return eval_binary(r, &plus, sa, sb, out);
    }
    case N_AND: case N_OR:
        if (eval(r, f, n->a, &a)) return -1;
        if (tv_truthy(a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        return eval(r, f, n->b, out);
    case N_NOT: if (eval(r, f, n->a, &a)) return -1; *out = tv_bool(!tv_truthy(a)); return 0;
    case N_COMPARE: return eval(r, f, n->a, &a) || eval(r, f, n->b, &b) || eval_compare(r, n, a, b, out);
    case N_CONDEXPR:
        if (eval(r, f, n->b, &a)) return -1;
        if (tv_truthy(a)) return eval(r, f, n->a, out);
        if (n->c) return eval(r, f, n->c, out);
        *out = tv_undef();
        return 0;
    default: return tpl_err(r, n, "internal: not an expression");
    }
}

static int eval(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *out) {
    if (++r->depth > 4 * TPL_MAX_DEPTH) return tpl_err(r, n, "template nested too deeply");
    int rc = eval_inner(r, f, n, out);
    r->depth--;
    return rc;
}

/* ---- statements ---- */
static int assign(tpl_render *r, tpl_frame *f, const tpl_node *target, tv v) {
    if (target->kind == N_NAME) return bind(r, f, target, target->value, v);
    if (target->kind == N_GETATTR) {
        tv ns = lookup(r, f, target->a->value);
        if (ns.t != TV_NS) return tpl_err(r, target, "cannot assign attribute on non-namespace object");
        return tv_dict_set(r->a, ns.u.d, target->value, v) ? oom(r, target) : 0;
    }
    tv_list *items; /* tuple unpacking */
    if (tpl_iter(r, target, v, &items)) return -1;
    if (items->n != target->args.n)
        return tpl_err(r, target, "cannot unpack %u values into %u names", items->n, target->args.n);
    for (uint32_t i = 0; i < items->n; i++)
        if (bind(r, f, target, target->args.v[i]->value, items->v[i])) return -1;
    return 0;
}

static int exec_for(tpl_render *r, tpl_frame *f, const tpl_node *n, tpl_buf *out) {
    tv it;
    tv_list *items;
    if (eval(r, f, n->b, &it)) return FLOW_ERR;
    if (it.t == TV_NONE) return tpl_err(r, n->b, "'NoneType' object is not iterable");
    if (tpl_iter(r, n->b, it, &items)) return FLOW_ERR;
    if (n->c) { /* {% for x in xs if cond %}: filter first, so loop.* counts the kept items */
        tv_list *kept = tv_list_new(r->a, 0);
        if (!kept) return oom(r, n);
        for (uint32_t i = 0; i < items->n; i++) {
            tpl_frame *lf = frame_new(r, f);
            tv c;
            if (++r->iterations > TPL_MAX_ITERATIONS) return tpl_err(r, n, "more than %d loop iterations", TPL_MAX_ITERATIONS);
            if (!lf) return oom(r, n);
            if (assign(r, lf, n->a, items->v[i]) || eval(r, lf, n->c, &c)) return FLOW_ERR;
            if (tv_truthy(c) && tv_list_push(r->a, kept, items->v[i])) return oom(r, n);
        }
        items = kept;
    }
    tpl_loop *loop = tpl_alloc(r->a, sizeof *loop);
    if (!loop) return oom(r, n);
    loop->items = items;
    tv outer = lookup(r, f, tv_strn("loop", 4));
    loop->depth = outer.t == TV_LOOP ? ((tpl_loop *)outer.u.p)->depth + 1 : 1;
    tv lv = {.t = TV_LOOP};
    lv.u.p = loop;
    for (uint32_t i = 0; i < items->n; i++) {
        if (++r->iterations > TPL_MAX_ITERATIONS) return tpl_err(r, n, "more than %d loop iterations", TPL_MAX_ITERATIONS);
        tpl_frame *lf = frame_new(r, f);
        if (!lf) return oom(r, n);
        loop->i = i;
        if (bind(r, lf, n, tv_strn("loop", 4), lv) || assign(r, lf, n->a, items->v[i])) return FLOW_ERR;
        int rc = exec_body(r, lf, &n->body, out);
        if (rc == FLOW_ERR) return rc;
        if (rc == FLOW_BREAK) break;
    }
    if (items->n == 0 && n->orelse.n) return exec_body(r, f, &n->orelse, out);
    return FLOW_OK;
}

static int render_to_string(tpl_render *r, tpl_frame *f, const tpl_node *n, tv *s) {
    tpl_buf b = {0};
    int rc = exec_body(r, f, &n->body, &b);
    if (rc == FLOW_OK) {
        *s = tv_str_copy(r->a, b.p ? b.p : "", b.n);
        if (s->t != TV_STR) rc = oom(r, n);
    }
    tpl_buf_free(&b);
    return rc == FLOW_OK ? 0 : -1;
}

/* Applies a filter chain parsed onto a placeholder (N_FILTER nodes whose innermost operand is a N_CONST). */
static int apply_chain(tpl_render *r, tpl_frame *f, const tpl_node *chain, tv v, tv *out) {
    if (chain->kind != N_FILTER && chain->kind != N_TEST) {
        *out = v;
        return 0;
    }
    tv inner;
    if (apply_chain(r, f, chain->a, v, &inner)) return -1;
    return eval_filter(r, f, chain, inner, out);
}

static int exec_stmt(tpl_render *r, tpl_frame *f, const tpl_node *n, tpl_buf *out) {
    tv v, s;
    switch (n->kind) {
    case N_TEXT: tpl_buf_put(out, n->value.u.s, n->value.n); return FLOW_OK;
    case N_OUTPUT:
        if (eval(r, f, n->a, &v)) return FLOW_ERR;
        if (v.t == TV_STR) tpl_buf_put(out, v.u.s, v.n);
        else tv_write_str(out, v);
        return FLOW_OK;
    case N_IF:
        if (eval(r, f, n->a, &v)) return FLOW_ERR;
        return exec_body(r, f, tv_truthy(v) ? &n->body : &n->orelse, out);
    case N_FOR: return exec_for(r, f, n, out);
    case N_SET: return eval(r, f, n->b, &v) || assign(r, f, n->a, v) ? FLOW_ERR : FLOW_OK;
    case N_SETBLOCK:
        if (render_to_string(r, f, n, &v)) return FLOW_ERR;
        if (n->b && apply_chain(r, f, n->b, v, &v)) return FLOW_ERR;
        return assign(r, f, n->a, v) ? FLOW_ERR : FLOW_OK;
    case N_MACRO: {
        tpl_macro *m = tpl_alloc(r->a, sizeof *m);
        if (!m) return oom(r, n);
        m->def = n;
        m->closure = f;
        tv mv = {.t = TV_MACRO};
        mv.u.p = m;
        return bind(r, f, n, n->value, mv) ? FLOW_ERR : FLOW_OK;
    }
    case N_CALLBLOCK: {
        tpl_macro *c = tpl_alloc(r->a, sizeof *c);
        if (!c) return oom(r, n);
        c->def = n;
        c->closure = f;
        tv cv = {.t = TV_MACRO};
        cv.u.p = c;
        if (eval_call(r, f, n->a, cv, &v)) return FLOW_ERR;
        if (tpl_to_str(r, n, v, &s)) return FLOW_ERR;
        tpl_buf_put(out, s.u.s, s.n);
        return FLOW_OK;
    }
    case N_FILTERBLOCK:
        if (render_to_string(r, f, n, &v) || apply_chain(r, f, n->a, v, &v) || tpl_to_str(r, n, v, &s)) return FLOW_ERR;
        tpl_buf_put(out, s.u.s, s.n);
        return FLOW_OK;
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_GENERATION: case N_BLOCK: return exec_body(r, f, &n->body, out);
    default: return tpl_err(r, n, "internal: not a statement");
    }
}

static int exec_body(tpl_render *r, tpl_frame *f, const tpl_nodes *body, tpl_buf *out) {
    if (++r->depth > 4 * TPL_MAX_DEPTH) return tpl_err(r, body->n ? body->v[0] : NULL, "template nested too deeply");
    for (uint32_t i = 0; i < body->n; i++) {
        int rc = exec_stmt(r, f, body->v[i], out);
        if (out->oom) rc = tpl_err(r, body->v[i], "output exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
        if (rc != FLOW_OK) {
            r->depth--;
            return rc;
        }
    }
    r->depth--;
    return FLOW_OK;
}

/* ---- render API ---- */
tpl_render *tpl_render_new(void) {
    tpl_render *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->a = tpl_arena_new(TPL_MAX_ARENA);
    if (!r->a || !(r->globals = tv_dict_new(r->a, 8))) {
        tpl_render_free(r);
        return NULL;
    }
    return r;
}

void tpl_render_free(tpl_render *r) {
    if (!r) return;
    tpl_arena_free(r->a);
    free(r);
}

tpl_arena *tpl_render_arena(tpl_render *r) { return r->a; }

int tpl_render_set(tpl_render *r, const char *name, tv v) {
    tv k = tv_str_copy(r->a, name, strlen(name));
    return k.t != TV_STR || tv_dict_set(r->a, r->globals, k, v) ? -1 : 0;
}

void tpl_render_set_now(tpl_render *r, int64_t epoch_seconds) {
    r->has_now = 1;
    r->now = epoch_seconds;
}

gp_status tpl_render_run(tpl_render *r, const tpl_program *p, char **out, size_t *n) {
    *out = NULL;
    if (n) *n = 0;
    r->prog = p;
    r->err[0] = 0;
    r->raised = 0;
    r->iterations = 0;
    r->depth = 0;
    tpl_frame *top = frame_new(r, NULL);
    tpl_buf b = {0};
    int rc = top ? exec_body(r, top, &p->body, &b) : oom(r, NULL);
    if (rc == FLOW_OK && b.oom) rc = tpl_err(r, NULL, "output exceeds the %u MiB limit", TPL_MAX_OUTPUT >> 20);
    if (rc != FLOW_OK) {
        tpl_buf_free(&b);
        if (!r->err[0]) tpl_err(r, NULL, "'break' or 'continue' outside of a loop");
        return gp_set_error(GP_ERR_TEMPLATE, "%s", r->err);
    }
    if (!b.p) {
        b.p = calloc(1, 1);
        if (!b.p) return gp_set_error(GP_ERR_NOMEM, "out of memory");
    }
    *out = b.p;
    if (n) *n = b.n;
    return GP_OK;
}
