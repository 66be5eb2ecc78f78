/* lexer.c — splits Jinja2 template text into tokens the way Jinja2 3.1's lexer does with trim_blocks and
 * lstrip_blocks on: text runs (whitespace control applied: {%- -%} {{- -}} {#- -#}, {%+ and +%} opt-outs, raw
 * blocks, the one trailing newline dropped) and the tokens inside {{ }} / {% %} (names, numbers, strings, operators). */
#include "template/lexer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (unsigned char)c >= 0x80; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int lx_error(tpl_lexer *lx, uint32_t line, uint32_t col, const char *msg) {
    snprintf(lx->err, sizeof lx->err, "%s:%u:%u: %s", lx->name, line, col, msg);
    return -1;
}

static int push(tpl_lexer *lx, tpl_tok t) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        tpl_tok *v = realloc(lx->t, cap * sizeof *v);
        if (!v) return lx_error(lx, t.line, t.col, "out of memory");
        lx->t = v;
        lx->cap = cap;
    }
    lx->t[lx->n++] = t;
    return 0;
}

/* Line and column (1-based, in bytes) of offset off; incremental because offsets only grow. */
static void pos_of(tpl_lexer *lx, size_t off, uint32_t *line, uint32_t *col) {
    while (lx->lpos < off) {
        if (lx->src[lx->lpos] == '\n') lx->line++, lx->lstart = lx->lpos + 1;
        lx->lpos++;
    }
    *line = lx->line;
    *col = (uint32_t)(off - lx->lstart + 1);
}

static int push_at(tpl_lexer *lx, int type, size_t off, size_t n) {
    tpl_tok t = {0};
    t.type = type;
    t.s = lx->src + off;
    t.n = (uint32_t)n;
    pos_of(lx, off, &t.line, &t.col);
    return push(lx, t);
}

/* Emits text [a, b) with the whitespace control of the tag that follows it. */
static int emit_text(tpl_lexer *lx, size_t a, size_t b, char sign, int is_var, int line_starting) {
    const char *s = lx->src;
    if (sign == '-') {
        while (b > a && is_ws(s[b - 1])) b--;
    } else if (sign != '+' && !is_var) {
        size_t l = b;
        while (l > a && s[l - 1] != '\n') l--;
        if ((l > a || line_starting) && l < b) {
            size_t k = l;
            while (k < b && is_ws(s[k])) k++;
            if (k == b) b = l;
        }
    }
    return b > a ? push_at(lx, TK_TEXT, a, b - a) : 0;
}

/* After a tag's closing marker at e (pointing just past it): applies -X} / +X} / trim_blocks; returns new offset. */
static size_t after_end(tpl_lexer *lx, size_t e, char sign, int trim, int *line_starting) {
    const char *s = lx->src;
    size_t n = lx->len;
    if (sign == '-') {
        while (e < n && is_ws(s[e])) e++;
    } else if (sign != '+' && trim && e < n && s[e] == '\n') {
        e++;
    }
    *line_starting = e > 0 && s[e - 1] == '\n';
    return e;
}

static int lex_string(tpl_lexer *lx, size_t *pp) {
    const char *s = lx->src;
    size_t p = *pp, q = p + 1;
    char quote = s[p];
    while (q < lx->len && s[q] != quote) {
        if (s[q] == '\\' && q + 1 < lx->len) q++;
        q++;
    }
    if (q >= lx->len) {
        uint32_t line, col;
        pos_of(lx, p, &line, &col);
        return lx_error(lx, line, col, "unexpected end of template: unterminated string");
    }
    *pp = q + 1;
    return push_at(lx, TK_STRING, p, q + 1 - p);
}

static int lex_number(tpl_lexer *lx, size_t *pp) {
    const char *s = lx->src;
    size_t p = *pp, q = p;
    int is_float = 0;
    while (q < lx->len && (is_digit(s[q]) || s[q] == '_')) q++;
    if (q + 1 < lx->len && s[q] == '.' && is_digit(s[q + 1])) {
        is_float = 1;
        q++;
        while (q < lx->len && (is_digit(s[q]) || s[q] == '_')) q++;
    }
    if (q < lx->len && (s[q] == 'e' || s[q] == 'E')) {
        size_t r = q + 1;
        if (r < lx->len && (s[r] == '+' || s[r] == '-')) r++;
        if (r < lx->len && is_digit(s[r])) {
            is_float = 1;
            q = r;
            while (q < lx->len && (is_digit(s[q]) || s[q] == '_')) q++;
        }
    }
    *pp = q;
    return push_at(lx, is_float ? TK_FLOAT : TK_INT, p, q - p);
}

static const char *const OPS[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";", NULL};

/* Lexes the inside of a {{ }} (end "}}") or {% %} (end "%}") tag starting at *pp; stops after the end marker. */
static int lex_tag(tpl_lexer *lx, size_t *pp, char endc, char *sign_out) {
    const char *s = lx->src;
    size_t p = *pp;
    int balance = 0;
    for (;;) {
        while (p < lx->len && is_ws(s[p])) p++;
        if (p >= lx->len) {
            uint32_t line, col;
            pos_of(lx, *pp, &line, &col);
            return lx_error(lx, line, col, endc == '}' ? "unexpected end of template: missing '}}'"
                                                       : "unexpected end of template: missing '%}'");
        }
        if (balance == 0) {
            char sg = 0;
            size_t q = p;
            if ((s[q] == '-' || s[q] == '+') && q + 2 < lx->len + 1 && q + 1 < lx->len && s[q + 1] == endc &&
                q + 2 < lx->len && s[q + 2] == '}' && !(endc == '}' && s[q] == '+'))
                sg = s[q], q++;
            if (q + 1 < lx->len && s[q] == endc && s[q + 1] == '}') {
                if (push_at(lx, endc == '}' ? TK_VAR_END : TK_BLOCK_END, p, q + 2 - p)) return -1;
                *sign_out = sg;
                *pp = q + 2;
                return 0;
            }
        }
        if (s[p] == '"' || s[p] == '\'') {
            if (lex_string(lx, &p)) return -1;
        } else if (is_digit(s[p])) {
            if (lex_number(lx, &p)) return -1;
        } else if (is_name0(s[p])) {
            size_t q = p;
            while (q < lx->len && (is_name0(s[q]) || is_digit(s[q]))) q++;
            if (push_at(lx, TK_NAME, p, q - p)) return -1;
            p = q;
        } else {
            int k;
            for (k = 0; OPS[k]; k++) {
                size_t m = strlen(OPS[k]);
                if (p + m <= lx->len && memcmp(s + p, OPS[k], m) == 0) break;
            }
            if (!OPS[k]) {
                uint32_t line, col;
                pos_of(lx, p, &line, &col);
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected char '%c'", s[p]);
                return lx_error(lx, line, col, msg);
            }
            char c = s[p];
            if (c == '(' || c == '[' || c == '{') balance++;
            if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
            if (push_at(lx, TK_OP, p, strlen(OPS[k]))) return -1;
            p += strlen(OPS[k]);
        }
    }
}

/* "{% raw %}" at p (sign already known)?  Returns the offset after its "%}", or 0. */
static size_t raw_begin(const char *s, size_t n, size_t p, size_t *end_sign_pos) {
    size_t q = p + 2;
    if (q < n && (s[q] == '-' || s[q] == '+')) q++;
    while (q < n && is_ws(s[q])) q++;
    if (n - q < 3 || memcmp(s + q, "raw", 3) != 0) return 0;
    q += 3;
    while (q < n && is_ws(s[q])) q++;
    *end_sign_pos = q;
    if (q < n && s[q] == '-') q++;
    if (q + 1 < n && s[q] == '%' && s[q + 1] == '}') return q + 2;
    return 0;
}

static int lex_raw(tpl_lexer *lx, size_t *pp, int *line_starting) {
    const char *s = lx->src;
    size_t n = lx->len, body = *pp, q = body;
    for (; q + 1 < n; q++) {
        if (s[q] != '{' || s[q + 1] != '%') continue;
        size_t r = q + 2;
        char sign = 0;
        if (r < n && (s[r] == '-' || s[r] == '+')) sign = s[r++];
        while (r < n && is_ws(s[r])) r++;
        if (n - r < 6 || memcmp(s + r, "endraw", 6) != 0) continue;
        r += 6;
        while (r < n && is_ws(s[r])) r++;
        char esign = 0;
        if (r < n && (s[r] == '-' || s[r] == '+')) esign = s[r++];
        if (r + 1 >= n || s[r] != '%' || s[r + 1] != '}') continue;
        if (emit_text(lx, body, q, sign, 0, *line_starting)) return -1;
        *pp = after_end(lx, r + 2, esign, 1, line_starting);
        return 0;
    }
    uint32_t line, col;
    pos_of(lx, body, &line, &col);
    return lx_error(lx, line, col, "missing end of raw directive");
}

int tpl_lex(tpl_lexer *lx) {
    const char *s = lx->src;
    size_t n = lx->len, p = 0;
    if (n && s[n - 1] == '\n') n = --lx->len; /* keep_trailing_newline=False */
    if (n && s[n - 1] == '\r') n = --lx->len;
    int line_starting = 1;
    lx->line = 1;
    while (p < n) {
        size_t q = p;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            if (push_at(lx, TK_TEXT, p, n - p)) return -1;
            break;
        }
        char kind = s[q + 1], sign = 0;
        if (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) sign = s[q + 2];
        if (emit_text(lx, p, q, sign, kind == '{', line_starting)) return -1;
        size_t body = q + 2 + (sign ? 1 : 0), esp;
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) {
                uint32_t line, col;
                pos_of(lx, q, &line, &col);
                return lx_error(lx, line, col, "missing end of comment tag");
            }
            char es = e > body && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            p = after_end(lx, e + 2, es, 1, &line_starting);
            continue;
        }
        size_t rb = kind == '%' ? raw_begin(s, n, q, &esp) : 0;
        if (rb) {
            p = after_end(lx, rb, s[esp] == '-' ? '-' : 0, 0, &line_starting);
            if (lex_raw(lx, &p, &line_starting)) return -1;
            continue;
        }
        if (push_at(lx, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, q, body - q)) return -1;
        char esign = 0;
        p = body;
        if (lex_tag(lx, &p, kind == '{' ? '}' : '%', &esign)) return -1;
        p = after_end(lx, p, esign, kind == '%', &line_starting);
    }
    tpl_tok eof = {0};
    eof.type = TK_EOF;
    eof.s = s + n;
    pos_of(lx, n, &eof.line, &eof.col);
    return push(lx, eof);
}
