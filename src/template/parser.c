/* parser.c — Jinja2 tokens to an AST (tpl_node), with Jinja2 3.1's grammar and operator precedence:
 * condexpr > or > and > not > compare (in, not in, ==, ...) > + - > ~ > * / // % > ** > unary - + >
 * primary with postfix (. [] ()) and filters (|f) / tests (is [not] t).  Statements: if/elif/else, for (with if
 * filter and else), set (also block set and namespace attributes), macro, call, filter, break/continue, raw,
 * generation, block.  Nesting is bounded (TPL_MAX_DEPTH) so hostile templates cannot overflow the stack. */
#include "template/lexer.h"
#include "template/tpl.h"
#include "util/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ps {
    tpl_lexer lx;
    size_t i;
    tpl_arena *a;
    int depth;
    char err[320];
    int failed;
    int in_loop;
} ps;

static tpl_tok *cur(ps *p) { return &p->lx.t[p->i]; }
static tpl_tok *peek(ps *p, size_t k) {
    size_t j = p->i + k;
    return &p->lx.t[j < p->lx.n ? j : p->lx.n - 1];
}
static void adv(ps *p) {
    if (p->i + 1 < p->lx.n) p->i++;
}

static void *fail(ps *p, const tpl_tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void *fail(ps *p, const tpl_tok *t, const char *fmt, ...) {
    if (p->failed) return NULL;
    p->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, sizeof p->err, "%s:%u:%u: %s", p->lx.name, t->line, t->col, msg);
    return NULL;
}

static int is_op(const tpl_tok *t, const char *op) {
    return t->type == TK_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static int is_name(const tpl_tok *t, const char *nm) {
    return t->type == TK_NAME && t->n == strlen(nm) && memcmp(t->s, nm, t->n) == 0;
}
static const char *tok_desc(const tpl_tok *t, char *buf, size_t cap) {
    if (t->type == TK_EOF) return "end of template";
    if (t->type == TK_BLOCK_END) return "end of statement block";
    if (t->type == TK_VAR_END) return "end of print statement";
    snprintf(buf, cap, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s);
    return buf;
}

static tpl_node *node(ps *p, int kind, const tpl_tok *at) {
    tpl_node *n = tpl_alloc(p->a, sizeof *n);
    if (!n) return fail(p, at, "out of memory");
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static int add(ps *p, tpl_nodes *l, tpl_node *n) {
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        tpl_node **v = tpl_alloc(p->a, cap * sizeof *v);
        if (!v) return fail(p, cur(p), "out of memory"), -1;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return 0;
}

static int expect_op(ps *p, const char *op) {
    char b[64];
    if (!is_op(cur(p), op)) return fail(p, cur(p), "expected '%s', got %s", op, tok_desc(cur(p), b, sizeof b)), -1;
    adv(p);
    return 0;
}

static tv name_value(ps *p, const tpl_tok *t) {
    tv v = tv_str_copy(p->a, t->s, t->n);
    if (v.t != TV_STR) fail(p, t, "out of memory");
    return v;
}

/* ---- literals ---- */
static int put_cp(tpl_buf *b, unsigned long cp) {
    char u[4];
    int n;
    if (cp > 0x10FFFF) return -1;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 63)), u[2] = (char)(0x80 | ((cp >> 6) & 63)),
        u[3] = (char)(0x80 | (cp & 63)), n = 4;
    tpl_buf_put(b, u, (size_t)n);
    return 0;
}

/* Python string-literal escapes (what Jinja's unicode-escape decoding accepts). */
static size_t unescape_one(const char *s, size_t i, size_t n, tpl_buf *b) {
    char c = s[i];
    static const char from[] = "nrtabfv\\'\"", to[] = "\n\r\t\a\b\f\v\\'\"";
    const char *k = strchr(from, c);
    if (c && k) {
        tpl_buf_putc(b, to[k - from]);
        return i + 1;
    }
    int len = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (len && i + (size_t)len < n + 0 && i + (size_t)len <= n - 1 + 1) {
        char hex[9] = {0};
        memcpy(hex, s + i + 1, (size_t)len);
        char *end;
        unsigned long cp = strtoul(hex, &end, 16);
        if (end == hex + len && put_cp(b, cp) == 0) return i + 1 + (size_t)len;
    }
    if (c >= '0' && c <= '7') {
        unsigned cp = 0;
        size_t j = i;
        while (j < n && j < i + 3 && s[j] >= '0' && s[j] <= '7') cp = cp * 8 + (unsigned)(s[j++] - '0');
        put_cp(b, cp);
        return j;
    }
    if (c == '\n') return i + 1; /* line continuation */
    tpl_buf_putc(b, '\\');
    return i;
}

static tv string_value(ps *p, const tpl_tok *t) {
    const char *s = t->s + 1;
    size_t n = t->n - 2;
    tpl_buf b = {0};
    for (size_t i = 0; i < n;) {
        if (s[i] == '\\' && i + 1 < n) i = unescape_one(s, i + 1, n, &b);
        else tpl_buf_putc(&b, s[i++]);
    }
    tv v = tv_str_copy(p->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    if (v.t != TV_STR) fail(p, t, "out of memory");
    return v;
}

static tv number_value(ps *p, const tpl_tok *t) {
    char buf[128];
    size_t k = 0;
    for (uint32_t i = 0; i < t->n && k + 1 < sizeof buf; i++)
        if (t->s[i] != '_') buf[k++] = t->s[i];
    buf[k] = 0;
    errno = 0;
    if (t->type == TK_INT) {
        long long v = strtoll(buf, NULL, 10);
        if (errno) {
            fail(p, t, "integer literal too large");
            return tv_none();
        }
        return tv_int(v);
    }
    return tv_float(strtod(buf, NULL));
}

static tpl_node *parse_expr(ps *p);
static tpl_node *parse_primary(ps *p);
static tpl_node *parse_postfix(ps *p, tpl_node *n);
static tpl_node *parse_filters(ps *p, tpl_node *n);

/* Arguments of a call / filter / test: "(a, b, k=v)"; the '(' is current. */
static int parse_args(ps *p, tpl_node *n) {
    adv(p);
    while (!is_op(cur(p), ")")) {
        if (n->args.n + n->kwargs.n && expect_op(p, ",")) return -1;
        if (is_op(cur(p), ")")) break; /* trailing comma */
        if (cur(p)->type == TK_NAME && is_op(peek(p, 1), "=")) {
            tpl_node *k = node(p, N_CONST, cur(p));
            if (!k) return -1;
            k->value = name_value(p, cur(p));
            adv(p);
            adv(p);
            tpl_node *v = parse_expr(p);
            if (!v || add(p, &n->kwnames, k) || add(p, &n->kwargs, v)) return -1;
        } else {
            if (n->kwargs.n) return fail(p, cur(p), "positional argument after keyword argument"), -1;
            tpl_node *v = parse_expr(p);
            if (!v || add(p, &n->args, v)) return -1;
        }
        if (p->failed) return -1;
    }
    adv(p);
    return 0;
}

static tpl_node *parse_seq(ps *p, int kind, const char *close) {
    tpl_node *n = node(p, kind, cur(p));
    if (!n) return NULL;
    adv(p);
    while (!is_op(cur(p), close)) {
        if (n->args.n && expect_op(p, ",")) return NULL;
        if (is_op(cur(p), close)) break;
        tpl_node *k = parse_expr(p);
        if (!k || add(p, &n->args, k)) return NULL;
        if (kind == N_DICT) {
            if (expect_op(p, ":")) return NULL;
            tpl_node *v = parse_expr(p);
            if (!v || add(p, &n->args, v)) return NULL;
        }
    }
    adv(p);
    return n;
}

static tpl_node *parse_paren(ps *p) {
    tpl_tok *at = cur(p);
    adv(p);
    if (is_op(cur(p), ")")) {
        adv(p);
        return node(p, N_TUPLE, at);
    }
    tpl_node *e = parse_expr(p);
    if (!e) return NULL;
    if (is_op(cur(p), ",")) {
        tpl_node *t = node(p, N_TUPLE, at);
        if (!t || add(p, &t->args, e)) return NULL;
        while (is_op(cur(p), ",")) {
            adv(p);
            if (is_op(cur(p), ")")) break;
            tpl_node *x = parse_expr(p);
            if (!x || add(p, &t->args, x)) return NULL;
        }
        e = t;
    }
    return expect_op(p, ")") ? NULL : e;
}

static tpl_node *parse_primary(ps *p) {
    tpl_tok *t = cur(p);
    char b[64];
    tpl_node *n;
    if (t->type == TK_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        for (int k = 0; k < 6; k++)
            if (is_name(t, consts[k])) {
                if (!(n = node(p, N_CONST, t))) return NULL;
                n->value = k < 4 ? tv_bool(k < 2) : tv_none();
                adv(p);
                return n;
            }
        if (!(n = node(p, N_NAME, t))) return NULL;
        n->value = name_value(p, t);
        adv(p);
        return n;
    }
    if (t->type == TK_STRING) {
        if (!(n = node(p, N_CONST, t))) return NULL;
        n->value = string_value(p, t);
        adv(p);
        while (cur(p)->type == TK_STRING) { /* adjacent literals concatenate */
            tv more = string_value(p, cur(p));
            tpl_buf cat = {0};
            tpl_buf_put(&cat, n->value.u.s, n->value.n);
            tpl_buf_put(&cat, more.u.s, more.n);
            n->value = tv_str_copy(p->a, cat.p ? cat.p : "", cat.n);
            tpl_buf_free(&cat);
            adv(p);
        }
        return n;
    }
    if (t->type == TK_INT || t->type == TK_FLOAT) {
        if (!(n = node(p, N_CONST, t))) return NULL;
        n->value = number_value(p, t);
        adv(p);
        return n;
    }
    if (is_op(t, "(")) return parse_paren(p);
    if (is_op(t, "[")) return parse_seq(p, N_LIST, "]");
    if (is_op(t, "{")) return parse_seq(p, N_DICT, "}");
    return fail(p, t, "unexpected %s", tok_desc(t, b, sizeof b));
}

static tpl_node *parse_subscript(ps *p, tpl_node *obj) {
    tpl_tok *at = cur(p);
    adv(p);
    tpl_node *parts[3] = {0};
    int k = 0, is_slice = 0;
    for (;;) {
        if (is_op(cur(p), ":")) {
            is_slice = 1;
            if (++k > 2) return fail(p, cur(p), "invalid slice");
            adv(p);
            continue;
        }
        if (is_op(cur(p), "]")) break;
        if (parts[k]) return fail(p, cur(p), "expected ']'");
        if (!(parts[k] = parse_expr(p))) return NULL;
    }
    adv(p);
    tpl_node *n = node(p, is_slice ? N_SLICE : N_GETITEM, at);
    if (!n) return NULL;
    n->a = obj;
    n->b = parts[0];
    if (is_slice) {
        n->c = parts[1];
        if (add(p, &n->args, parts[2])) return NULL;
    } else if (!parts[0]) {
        return fail(p, at, "expected an index");
    }
    return n;
}

static tpl_node *parse_postfix(ps *p, tpl_node *n) {
    char b[64];
    while (n && !p->failed) {
        tpl_tok *t = cur(p);
        if (is_op(t, ".")) {
            adv(p);
            tpl_tok *a = cur(p);
            tpl_node *g;
            if (a->type == TK_NAME) {
                if (!(g = node(p, N_GETATTR, t))) return NULL;
                g->value = name_value(p, a);
            } else if (a->type == TK_INT) {
                if (!(g = node(p, N_GETITEM, t)) || !(g->b = node(p, N_CONST, a))) return NULL;
                g->b->value = number_value(p, a);
            } else {
                return fail(p, a, "expected a name after '.', got %s", tok_desc(a, b, sizeof b));
            }
            adv(p);
            g->a = n;
            n = g;
        } else if (is_op(t, "[")) {
            n = parse_subscript(p, n);
        } else if (is_op(t, "(")) {
            tpl_node *c = node(p, N_CALL, t);
            if (!c) return NULL;
            c->a = n;
            if (parse_args(p, c)) return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static int test_arg_starts(const tpl_tok *t) {
    if (is_name(t, "else") || is_name(t, "or") || is_name(t, "and") || is_name(t, "is")) return 0;
    return t->type == TK_NAME || t->type == TK_STRING || t->type == TK_INT || t->type == TK_FLOAT ||
           is_op(t, "(") || is_op(t, "[") || is_op(t, "{");
}

static tpl_node *parse_filters(ps *p, tpl_node *n) {
    char b[64];
    while (n && !p->failed) {
        tpl_tok *t = cur(p);
        int is_filter = is_op(t, "|"), is_test = is_name(t, "is");
        if (!is_filter && !is_test) break;
        adv(p);
        tpl_node *f = node(p, is_filter ? N_FILTER : N_TEST, t);
        if (!f) return NULL;
        if (is_test && is_name(cur(p), "not")) {
            f->op = 1;
            adv(p);
        }
        tpl_tok *nm = cur(p);
        if (nm->type != TK_NAME) return fail(p, nm, "expected a %s name, got %s", is_filter ? "filter" : "test", tok_desc(nm, b, sizeof b));
        f->value = name_value(p, nm);
        adv(p);
        while (is_filter && is_op(cur(p), ".") && peek(p, 1)->type == TK_NAME) { /* dotted filter names */
            tv more = name_value(p, peek(p, 1));
            tpl_buf cat = {0};
            tpl_buf_put(&cat, f->value.u.s, f->value.n);
            tpl_buf_putc(&cat, '.');
            tpl_buf_put(&cat, more.u.s, more.n);
            f->value = tv_str_copy(p->a, cat.p, cat.n);
            tpl_buf_free(&cat);
            adv(p);
            adv(p);
        }
        f->a = n;
        if (is_op(cur(p), "(")) {
            if (parse_args(p, f)) return NULL;
        } else if (is_test && test_arg_starts(cur(p))) {
            tpl_node *arg = parse_postfix(p, parse_primary(p));
            if (!arg || add(p, &f->args, arg)) return NULL;
        }
        n = f;
    }
    return n;
}

static tpl_node *parse_unary(ps *p, int with_filter) {
    tpl_tok *t = cur(p);
    tpl_node *n;
    if (++p->depth > TPL_MAX_DEPTH) return fail(p, t, "expression nested too deeply (limit %d)", TPL_MAX_DEPTH);
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(p);
        if (!(n = node(p, N_UNARY, t))) return NULL;
        n->op = (uint8_t)t->s[0];
        n->a = parse_unary(p, 0);
        if (!n->a) return NULL;
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filters(p, n);
    p->depth--;
    return n;
}

/* Binary operator levels: returns the op code if cur is one of this level's operators. */
static int level_op(const tpl_tok *t, int level) {
    static const char *const lv[4][5] = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
    for (int k = 0; k < 5 && lv[level][k]; k++)
        if (is_op(t, lv[level][k])) return strlen(lv[level][k]) == 2 ? (lv[level][k][0] == '/' ? 'f' : 'p') : lv[level][k][0];
    return 0;
}

static tpl_node *parse_level(ps *p, int level) {
    tpl_node *l = level == 4 ? parse_unary(p, 1) : parse_level(p, level + 1);
    int op;
    while (l && !p->failed && (op = level_op(cur(p), level))) {
        tpl_tok *t = cur(p);
        adv(p);
        tpl_node *n = node(p, op == '~' ? N_CONCAT : N_BINARY, t);
        if (!n) return NULL;
        n->op = (uint8_t)op;
        n->a = l;
        n->b = level == 4 ? parse_unary(p, 1) : parse_level(p, level + 1);
        if (!n->b) return NULL;
        l = n;
    }
    return l;
}

static int compare_op(ps *p) {
    tpl_tok *t = cur(p);
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const char codes[] = {'e', 'n', '<', 'l', '>', 'g'};
    for (int k = 0; k < 6; k++)
        if (is_op(t, ops[k])) return codes[k];
    if (is_name(t, "in")) return 'i';
    if (is_name(t, "not") && is_name(peek(p, 1), "in")) return 'I';
    return 0;
}

static tpl_node *parse_compare(ps *p) {
    tpl_node *l = parse_level(p, 0);
    int op;
    while (l && !p->failed && (op = compare_op(p))) {
        tpl_node *n = node(p, N_COMPARE, cur(p));
        if (!n) return NULL;
        adv(p);
        if (op == 'I') adv(p);
        n->op = (uint8_t)op;
        n->a = l;
        if (!(n->b = parse_level(p, 0))) return NULL;
        l = n;
    }
    return l;
}

static tpl_node *parse_not(ps *p) {
    if (is_name(cur(p), "not")) {
        tpl_node *n = node(p, N_NOT, cur(p));
        if (!n) return NULL;
        adv(p);
        if (++p->depth > TPL_MAX_DEPTH) return fail(p, cur(p), "expression nested too deeply");
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static tpl_node *parse_logic(ps *p, int is_or) {
    tpl_node *l = is_or ? parse_logic(p, 0) : parse_not(p);
    while (l && !p->failed && is_name(cur(p), is_or ? "or" : "and")) {
        tpl_node *n = node(p, is_or ? N_OR : N_AND, cur(p));
        if (!n) return NULL;
        adv(p);
        n->a = l;
        if (!(n->b = is_or ? parse_logic(p, 0) : parse_not(p))) return NULL;
        l = n;
    }
    return l;
}

static tpl_node *parse_expr(ps *p) {
    if (++p->depth > TPL_MAX_DEPTH) return fail(p, cur(p), "expression nested too deeply (limit %d)", TPL_MAX_DEPTH);
    tpl_node *e = parse_logic(p, 1);
    while (e && !p->failed && is_name(cur(p), "if")) {
        tpl_node *n = node(p, N_CONDEXPR, cur(p));
        if (!n) return NULL;
        adv(p);
        n->a = e;
        if (!(n->b = parse_logic(p, 1))) return NULL;
        if (is_name(cur(p), "else")) {
            adv(p);
            if (!(n->c = parse_expr(p))) return NULL;
        }
        e = n;
    }
    p->depth--;
    return p->failed ? NULL : e;
}

/* ---- statements ---- */
static int parse_body(ps *p, tpl_nodes *body, const char *const *ends);

static int expect_block_end(ps *p) {
    char b[64];
    if (cur(p)->type != TK_BLOCK_END)
        return fail(p, cur(p), "expected end of statement block, got %s", tok_desc(cur(p), b, sizeof b)), -1;
    adv(p);
    return 0;
}

/* Assignment target: a name, "a, b" (tuple of names), or ns.attr when allow_attr. */
static tpl_node *parse_target(ps *p, int allow_attr) {
    char b[64];
    tpl_tok *t = cur(p);
    if (t->type != TK_NAME) return fail(p, t, "expected a name, got %s", tok_desc(t, b, sizeof b));
    tpl_node *n = node(p, N_NAME, t);
    if (!n) return NULL;
    n->value = name_value(p, t);
    adv(p);
    if (allow_attr && is_op(cur(p), ".") && peek(p, 1)->type == TK_NAME) {
        tpl_node *g = node(p, N_GETATTR, cur(p));
        if (!g) return NULL;
        g->a = n;
        g->value = name_value(p, peek(p, 1));
        adv(p);
        adv(p);
        return g;
    }
    if (!is_op(cur(p), ",")) return n;
    tpl_node *tup = node(p, N_TUPLE, t);
    if (!tup || add(p, &tup->args, n)) return NULL;
    while (is_op(cur(p), ",")) {
        adv(p);
        t = cur(p);
        if (t->type != TK_NAME) return fail(p, t, "expected a name, got %s", tok_desc(t, b, sizeof b));
        tpl_node *x = node(p, N_NAME, t);
        if (!x) return NULL;
        x->value = name_value(p, t);
        adv(p);
        if (add(p, &tup->args, x)) return NULL;
    }
    return tup;
}

/* Expression, or an implicit tuple "a, b" (for loop iterables and set values). */
static tpl_node *parse_tuple_expr(ps *p) {
    tpl_tok *at = cur(p);
    tpl_node *e = parse_expr(p);
    if (!e || !is_op(cur(p), ",")) return e;
    tpl_node *t = node(p, N_TUPLE, at);
    if (!t || add(p, &t->args, e)) return NULL;
    while (is_op(cur(p), ",")) {
        adv(p);
        if (cur(p)->type == TK_BLOCK_END) break;
        tpl_node *x = parse_expr(p);
        if (!x || add(p, &t->args, x)) return NULL;
    }
    return t;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};

static tpl_node *parse_if(ps *p, tpl_tok *at) {
    tpl_node *n = node(p, N_IF, at);
    if (!n || !(n->a = parse_tuple_expr(p)) || expect_block_end(p)) return NULL;
    if (parse_body(p, &n->body, END_IF)) return NULL;
    tpl_tok *t = cur(p);
    adv(p);
    if (is_name(t, "elif")) {
        tpl_node *e = parse_if(p, t);
        if (!e || add(p, &n->orelse, e)) return NULL;
        return n;
    }
    if (is_name(t, "else")) {
        if (expect_block_end(p) || parse_body(p, &n->orelse, END_IF + 2)) return NULL;
        adv(p);
    }
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_for(ps *p, tpl_tok *at) {
    tpl_node *n = node(p, N_FOR, at);
    if (!n || !(n->a = parse_target(p, 0))) return NULL;
    char b[64];
    if (!is_name(cur(p), "in")) return fail(p, cur(p), "expected 'in', got %s", tok_desc(cur(p), b, sizeof b));
    adv(p);
    tpl_tok *it = cur(p);
    if (!(n->b = parse_logic(p, 1))) return NULL; /* no inline if here: "if" starts the loop filter */
    if (is_op(cur(p), ",")) {
        tpl_node *t = node(p, N_TUPLE, it);
        if (!t || add(p, &t->args, n->b)) return NULL;
        while (is_op(cur(p), ",")) {
            adv(p);
            tpl_node *x = parse_logic(p, 1);
            if (!x || add(p, &t->args, x)) return NULL;
        }
        n->b = t;
    }
    if (is_name(cur(p), "if")) {
        adv(p);
        if (!(n->c = parse_expr(p))) return NULL;
    }
    if (is_name(cur(p), "recursive")) return fail(p, cur(p), "recursive loops are not supported");
    if (expect_block_end(p) || parse_body(p, &n->body, END_FOR)) return NULL;
    if (is_name(cur(p), "else")) {
        adv(p);
        if (expect_block_end(p) || parse_body(p, &n->orelse, END_FOR + 1)) return NULL;
    }
    adv(p);
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_set(ps *p, tpl_tok *at) {
    tpl_node *target = parse_target(p, 1);
    if (!target) return NULL;
    if (is_op(cur(p), "=")) {
        adv(p);
        tpl_node *n = node(p, N_SET, at);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple_expr(p)) || expect_block_end(p)) return NULL;
        return n;
    }
    tpl_node *n = node(p, N_SETBLOCK, at);
    static const char *const ends[] = {"endset", NULL};
    if (!n) return NULL;
    n->a = target;
    if (is_op(cur(p), "|")) { /* {% set x | filter %}: filters applied to the body (n->b, with a NULL operand) */
        n->b = parse_filters(p, node(p, N_CONST, cur(p)));
        if (!n->b) return NULL;
    }
    if (expect_block_end(p) || parse_body(p, &n->body, ends)) return NULL;
    adv(p);
    return expect_block_end(p) ? NULL : n;
}

/* "(a, b=1, ...)" of a macro or call block. */
static int parse_params(ps *p, tpl_node *n) {
    char b[64];
    if (!is_op(cur(p), "(")) return 0;
    adv(p);
    while (!is_op(cur(p), ")")) {
        if (n->params.n && expect_op(p, ",")) return -1;
        tpl_tok *t = cur(p);
        if (t->type != TK_NAME) return fail(p, t, "expected a parameter name, got %s", tok_desc(t, b, sizeof b)), -1;
        tpl_node *nm = node(p, N_NAME, t);
        if (!nm) return -1;
        nm->value = name_value(p, t);
        adv(p);
        tpl_node *def = NULL;
        if (is_op(cur(p), "=")) {
            adv(p);
            if (!(def = parse_expr(p))) return -1;
        }
        if (add(p, &n->params, nm) || add(p, &n->defaults, def)) return -1;
    }
    adv(p);
    return 0;
}

static tpl_node *parse_macro(ps *p, tpl_tok *at) {
    char b[64];
    tpl_node *n = node(p, N_MACRO, at);
    if (!n) return NULL;
    if (cur(p)->type != TK_NAME) return fail(p, cur(p), "expected a macro name, got %s", tok_desc(cur(p), b, sizeof b));
    n->value = name_value(p, cur(p));
    adv(p);
    if (!is_op(cur(p), "(")) return fail(p, cur(p), "expected '(' after the macro name");
    static const char *const ends[] = {"endmacro", NULL};
    if (parse_params(p, n) || expect_block_end(p) || parse_body(p, &n->body, ends)) return NULL;
    adv(p);
    if (cur(p)->type == TK_NAME) adv(p); /* {% endmacro name %} */
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_call_block(ps *p, tpl_tok *at) {
    tpl_node *n = node(p, N_CALLBLOCK, at);
    if (!n || parse_params(p, n)) return NULL;
    tpl_tok *ct = cur(p);
    if (!(n->a = parse_expr(p))) return NULL;
    if (n->a->kind != N_CALL) return fail(p, ct, "expected a call after 'call'");
    static const char *const ends[] = {"endcall", NULL};
    if (expect_block_end(p) || parse_body(p, &n->body, ends)) return NULL;
    adv(p);
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_filter_block(ps *p, tpl_tok *at) {
    tpl_node *n = node(p, N_FILTERBLOCK, at);
    if (!n) return NULL;
    tpl_tok *t = cur(p);
    if (t->type != TK_NAME) return fail(p, t, "expected a filter name");
    /* parse "name(args)|more" as filters applied to a placeholder constant */
    tpl_node *ph = node(p, N_CONST, t);
    tpl_tok bar = *t;
    bar.type = TK_OP;
    bar.s = "|";
    bar.n = 1;
    (void)bar;
    tpl_node *f = node(p, N_FILTER, t);
    if (!ph || !f) return NULL;
    f->value = name_value(p, t);
    f->a = ph;
    adv(p);
    if (is_op(cur(p), "(") && parse_args(p, f)) return NULL;
    if (!(n->a = parse_filters(p, f))) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    if (expect_block_end(p) || parse_body(p, &n->body, ends)) return NULL;
    adv(p);
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_simple_block(ps *p, tpl_tok *at, int kind, const char *end) {
    tpl_node *n = node(p, kind, at);
    const char *ends[] = {end, NULL};
    if (!n) return NULL;
    if (kind == N_BLOCK) {
        if (cur(p)->type != TK_NAME) return fail(p, cur(p), "expected a block name");
        adv(p);
        if (is_name(cur(p), "scoped") || is_name(cur(p), "required")) adv(p);
    }
    if (expect_block_end(p) || parse_body(p, &n->body, ends)) return NULL;
    adv(p);
    if (kind == N_BLOCK && cur(p)->type == TK_NAME) adv(p);
    return expect_block_end(p) ? NULL : n;
}

static tpl_node *parse_statement(ps *p) {
    char b[64];
    tpl_tok *t = cur(p);
    if (t->type != TK_NAME) return fail(p, t, "tag name expected, got %s", tok_desc(t, b, sizeof b));
    adv(p);
    if (is_name(t, "if")) return parse_if(p, t);
    if (is_name(t, "for")) return parse_for(p, t);
    if (is_name(t, "set")) return parse_set(p, t);
    if (is_name(t, "macro")) return parse_macro(p, t);
    if (is_name(t, "call")) return parse_call_block(p, t);
    if (is_name(t, "filter")) return parse_filter_block(p, t);
    if (is_name(t, "generation")) return parse_simple_block(p, t, N_GENERATION, "endgeneration");
    if (is_name(t, "block")) return parse_simple_block(p, t, N_BLOCK, "endblock");
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!p->in_loop) return fail(p, t, "'%.*s' outside of a loop", (int)t->n, t->s);
        tpl_node *n = node(p, is_name(t, "break") ? N_BREAK : N_CONTINUE, t);
        return !n || expect_block_end(p) ? NULL : n;
    }
    if (is_name(t, "extends") || is_name(t, "include") || is_name(t, "import") || is_name(t, "from"))
        return fail(p, t, "'%.*s' is not available to chat templates (no template loader)", (int)t->n, t->s);
    return fail(p, t, "encountered unknown tag '%.*s'", (int)(t->n < 40 ? t->n : 40), t->s);
}

static int is_end_name(const tpl_tok *t, const char *const *ends) {
    for (; ends && *ends; ends++)
        if (is_name(t, *ends)) return 1;
    return 0;
}

/* Parses statements until EOF (ends == NULL) or a block whose name is in ends (left current, after '{%'). */
static int parse_body(ps *p, tpl_nodes *body, const char *const *ends) {
    tpl_tok *start = cur(p);
    if (++p->depth > TPL_MAX_DEPTH) return fail(p, start, "blocks nested too deeply (limit %d)", TPL_MAX_DEPTH), -1;
    for (;;) {
        tpl_tok *t = cur(p);
        tpl_node *n = NULL;
        if (t->type == TK_EOF) {
            if (!ends) break;
            const char *last = ends[0];
            for (int k = 1; ends[k]; k++) last = ends[k];
            return fail(p, t, "unexpected end of template: a block opened at line %u is missing '%s'", start->line, last), -1;
        }
        if (t->type == TK_TEXT) {
            if (!(n = node(p, N_TEXT, t))) return -1;
            n->value = tv_str_copy(p->a, t->s, t->n);
            adv(p);
        } else if (t->type == TK_VAR_BEGIN) {
            adv(p);
            if (!(n = node(p, N_OUTPUT, t)) || !(n->a = parse_tuple_expr(p))) return -1;
            char b[64];
            if (cur(p)->type != TK_VAR_END) return fail(p, cur(p), "expected end of print statement, got %s", tok_desc(cur(p), b, sizeof b)), -1;
            adv(p);
        } else if (t->type == TK_BLOCK_BEGIN) {
            adv(p);
            if (is_end_name(cur(p), ends)) break;
            int was_loop = p->in_loop;
            if (is_name(cur(p), "for")) p->in_loop = 1;
            if (is_name(cur(p), "macro")) p->in_loop = 0;
            n = parse_statement(p);
            p->in_loop = was_loop;
            if (!n) return -1;
        } else {
            char b[64];
            return fail(p, t, "unexpected %s", tok_desc(t, b, sizeof b)), -1;
        }
        if (add(p, body, n)) return -1;
    }
    p->depth--;
    return 0;
}

gp_status tpl_parse(const char *src, size_t n, const char *name, tpl_program **out) {
    *out = NULL;
    if (n > TPL_MAX_SOURCE) return gp_set_error(GP_ERR_FORMAT, "%s: template of %zu bytes is over the %u-byte limit", name, n, TPL_MAX_SOURCE);
    char *norm = malloc(n + 1);
    tpl_program *prog = calloc(1, sizeof *prog);
    tpl_arena *a = tpl_arena_new(TPL_MAX_ARENA);
    char *pname = gp_strdup(name);
    if (!norm || !prog || !a || !pname) {
        free(norm), free(prog), tpl_arena_free(a), free(pname);
        return gp_set_error(GP_ERR_NOMEM, "%s: out of memory", name);
    }
    size_t k = 0; /* newlines normalised to \n, as Jinja's lexer does */
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            norm[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            norm[k++] = src[i];
        }
    }
    norm[k] = 0;
    prog->arena = a;
    prog->name = pname;
    ps p = {0};
    p.a = a;
    p.lx.src = norm;
    p.lx.len = k;
    p.lx.name = pname;
    gp_status st = GP_OK;
    if (tpl_lex(&p.lx)) {
        st = gp_set_error(GP_ERR_FORMAT, "%s", p.lx.err);
    } else if (parse_body(&p, &prog->body, NULL) || p.failed) {
        st = gp_set_error(GP_ERR_FORMAT, "%s", p.err);
    } else if (cur(&p)->type != TK_EOF) {
        st = gp_set_error(GP_ERR_FORMAT, "%s:%u:%u: unexpected tag", pname, cur(&p)->line, cur(&p)->col);
    }
    /* strings in the AST point into the arena (copied), never into norm */
    free(p.lx.t);
    free(norm);
    if (st != GP_OK) {
        tpl_program_free(prog);
        return st;
    }
    *out = prog;
    return GP_OK;
}

void tpl_program_free(tpl_program *p) {
    if (!p) return;
    tpl_arena_free(p->arena);
    free(p->name);
    free(p);
}
