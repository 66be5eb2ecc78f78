/* json.c — the bounded JSON parse (syntax scan that allocates nothing, tree-size estimate, then cJSON; duplicate-key
 * check) and the typed field getters every parser uses; errors name the file and the field. */
#include "io/json.h"
#include "util/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------------------------- */
/* The scan: JSON grammar (RFC 8259, plus what cJSON refuses: lone UTF-16 surrogates, numbers over 63 characters)   */
/* ---------------------------------------------------------------------------------------------------------------- */

typedef struct scan {
    const char *s;
    size_t n, i;
    size_t values, strings, str_bytes; /* for the tree estimate; strings counts keys too */
    const char *why;                   /* what was wrong at byte i */
} scan;

static void ws(scan *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static int hex4(scan *c, size_t at, unsigned *out) {
    if (at + 4 > c->n) return 0;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char h = c->s[at + (size_t)k];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return 0;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 1;
}

/* A string starting at c->s[c->i] == '"'; leaves c->i after the closing quote. */
static int scan_string(scan *c) {
    c->i++;
    size_t bytes = 0;
    while (c->i < c->n && c->s[c->i] != '"') {
        if (c->s[c->i] != '\\') {
            c->i++;
            bytes++;
            continue;
        }
        if (++c->i >= c->n) break;
        char e = c->s[c->i];
        if (e == 'u') {
            unsigned u, lo;
            if (!hex4(c, c->i + 1, &u)) return c->why = "a \\u escape needs 4 hex digits", 0;
            c->i += 5;
            if (u >= 0xDC00 && u <= 0xDFFF) return c->why = "a lone UTF-16 low surrogate", 0;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (c->i + 1 >= c->n || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u' || !hex4(c, c->i + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return c->why = "a lone UTF-16 high surrogate", 0;
                c->i += 6;
            }
            bytes += 4;
            continue;
        }
        if (!strchr("\"\\/bfnrt", e) || !e) return c->why = "an invalid escape", 0;
        c->i++;
        bytes++;
    }
    if (c->i >= c->n) return c->why = "an unterminated string", 0;
    c->i++;
    c->strings++;
    c->str_bytes += bytes;
    return 1;
}

static int digits(scan *c) {
    size_t b = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
    return c->i > b;
}

static int scan_number(scan *c) {
    size_t b = c->i;
    if (c->s[c->i] == '-') c->i++;
    if (c->i < c->n && c->s[c->i] == '0') c->i++;
    else if (!digits(c)) return c->why = "a malformed number", 0;
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        if (!digits(c)) return c->why = "a malformed number", 0;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!digits(c)) return c->why = "a malformed number", 0;
    }
    if (c->i - b > 63) return c->i = b, c->why = "a number of over 63 characters", 0;
    return 1;
}

/* A scalar or the opening of a container at c->i; *open = '{' or '[' when a container was opened. */
static int scan_atom(scan *c, char *open) {
    *open = 0;
    if (c->i >= c->n) return c->why = "the text ends where a value is expected", 0;
    char ch = c->s[c->i];
    c->values++;
    if (ch == '{' || ch == '[') {
        *open = ch;
        c->i++;
        return 1;
    }
    if (ch == '"') return scan_string(c);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return scan_number(c);
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t l = strlen(lits[k]);
        if (c->n - c->i >= l && !memcmp(c->s + c->i, lits[k], l)) {
            c->i += l;
            return 1;
        }
    }
    return c->why = "an unexpected character", 0;
}

/* The whole text: one value, nothing after it but whitespace.  Iterative; the container stack is bounded. */
static int scan_text(scan *c) {
    char stk[GP_JSON_MAX_DEPTH];
    int depth = 0, want_key = 0;
    for (;;) {
        ws(c);
        if (want_key) {
            if (c->i >= c->n || c->s[c->i] != '"') return c->why = "an object key (a string) is expected", 0;
            if (!scan_string(c)) return 0;
            ws(c);
            if (c->i >= c->n || c->s[c->i] != ':') return c->why = "':' is expected after an object key", 0;
            c->i++;
            ws(c);
        }
        char open;
        if (!scan_atom(c, &open)) return 0;
        if (open) {
            if (depth == GP_JSON_MAX_DEPTH) return c->why = "nesting deeper than 512 levels", 0;
            stk[depth++] = open;
            ws(c);
            char close = open == '{' ? '}' : ']';
            if (c->i < c->n && c->s[c->i] == close) {
                c->i++;
                depth--;
            } else {
                want_key = open == '{';
                continue;
            }
        }
        /* after a value: ',' continues the container, a closer ends it (maybe several) */
        for (;;) {
            ws(c);
            if (depth == 0) return c->i == c->n ? 1 : (c->why = "text after the JSON value", 0);
            if (c->i >= c->n) return c->why = "the text ends inside a container", 0;
            char ch = c->s[c->i], top = stk[depth - 1];
            if (ch == ',') {
                c->i++;
                want_key = top == '{';
                break;
            }
            if ((top == '{' && ch == '}') || (top == '[' && ch == ']')) {
                c->i++;
                depth--;
                continue;
            }
            return c->why = top == '{' ? "',' or '}' is expected" : "',' or ']' is expected", 0;
        }
    }
}

/* cJSON: one node per value (~64 bytes + allocator overhead), one allocation per string and per key. */
static size_t estimate(const scan *c) {
    return c->values * (sizeof(cJSON) + 16) + c->str_bytes + c->strings * 24;
}

size_t gp_json_tree_estimate(const char *text, size_t len) {
    scan c = {text, len, 0, 0, 0, 0, NULL};
    return scan_text(&c) ? estimate(&c) : 0;
}

gp_status gp_json_check(const char *path, const char *field, const char *text, size_t len, int *trailing,
                        char *first) {
    scan c = {text, len, 0, 0, 0, 0, NULL};
    ws(&c);
    if (first) *first = c.i < len ? text[c.i] : 0;
    c.i = 0;
    int ok = scan_text(&c);
    if (trailing) *trailing = !ok && !strcmp(c.why, "text after the JSON value");
    if (ok) return GP_OK;
    return gp_set_error(GP_ERR_FORMAT, "%s: %s%s%snot valid JSON at byte %zu of %zu: %s%s", path, field ? "field '" : "",
                        field ? field : "", field ? "': " : "", c.i, len, c.why,
                        c.i >= len ? " (the file looks truncated)" : "");
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* The streaming reader (text already checked)                                                                       */
/* ---------------------------------------------------------------------------------------------------------------- */

char gp_jlex_peek(gp_jlex *l) {
    while (l->i < l->n && strchr(" \t\r\n", l->s[l->i]) && l->s[l->i]) l->i++;
    return l->i < l->n ? l->s[l->i] : 0;
}

int gp_jlex_eat(gp_jlex *l, char c) {
    if (!c || gp_jlex_peek(l) != c) return 0;
    l->i++;
    return 1;
}

/* Appends code point u as UTF-8 to d; returns the bytes written. */
static size_t put_utf8(char *d, unsigned u) {
    if (u < 0x80) return d[0] = (char)u, 1;
    if (u < 0x800) return d[0] = (char)(0xC0 | u >> 6), d[1] = (char)(0x80 | (u & 0x3F)), 2;
    if (u < 0x10000)
        return d[0] = (char)(0xE0 | u >> 12), d[1] = (char)(0x80 | (u >> 6 & 0x3F)), d[2] = (char)(0x80 | (u & 0x3F)), 3;
    d[0] = (char)(0xF0 | u >> 18), d[1] = (char)(0x80 | (u >> 12 & 0x3F)), d[2] = (char)(0x80 | (u >> 6 & 0x3F));
    d[3] = (char)(0x80 | (u & 0x3F));
    return 4;
}

int gp_jlex_string(gp_jlex *l, char **out) {
    *out = NULL;
    if (gp_jlex_peek(l) != '"') return -1;
    scan c = {l->s, l->n, l->i, 0, 0, 0, NULL};
    if (!scan_string(&c)) return -1;
    size_t end = c.i - 1; /* the closing quote; escapes never grow the text */
    char *d = gp_malloc(end - l->i, 1);
    if (!d) return -2;
    size_t k = 0;
    for (size_t i = l->i + 1; i < end;) {
        char ch = l->s[i];
        if (ch != '\\') {
            d[k++] = ch;
            i++;
            continue;
        }
        char e = l->s[i + 1];
        i += 2;
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            d[k++] = to[strchr(from, e) - from];
            continue;
        }
        unsigned u = 0, lo = 0;
        hex4(&c, i, &u);
        i += 4;
        if (u >= 0xD800 && u <= 0xDBFF) {
            hex4(&c, i + 2, &lo);
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        }
        k += put_utf8(d + k, u);
    }
    d[k] = 0;
    l->i = c.i;
    if (strlen(d) != k) { /* a \u0000 inside */
        free(d);
        return -1;
    }
    *out = d;
    return 0;
}

int gp_jlex_uint(gp_jlex *l, uint64_t *out) {
    char ch = gp_jlex_peek(l);
    if (ch != '-' && !(ch >= '0' && ch <= '9')) return -1;
    scan c = {l->s, l->n, l->i, 0, 0, 0, NULL};
    if (!scan_number(&c)) return -1;
    char buf[64];
    size_t len = c.i - l->i;
    memcpy(buf, l->s + l->i, len);
    buf[len] = 0;
    l->i = c.i;
    double d = strtod(buf, NULL); /* the token is a checked JSON number of at most 63 characters */
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

void gp_jlex_skip(gp_jlex *l) {
    size_t depth = 0;
    do {
        char ch = gp_jlex_peek(l);
        if (!ch) return;
        if (ch == '"') {
            scan c = {l->s, l->n, l->i, 0, 0, 0, NULL};
            scan_string(&c);
            l->i = c.i;
        } else if (ch == '{' || ch == '[') {
            depth++;
            l->i++;
        } else if (ch == '}' || ch == ']') {
            depth--;
            l->i++;
        } else if (ch == ',' || ch == ':') {
            l->i++;
            continue;
        } else {
            while (l->i < l->n && !strchr(" \t\r\n,:]}", l->s[l->i])) l->i++;
        }
    } while (depth > 0);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Duplicate keys                                                                                                    */
/* ---------------------------------------------------------------------------------------------------------------- */

static int cmp_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first repeated key of object o (NULL if none); *nomem on allocation failure. */
static const char *dup_in(const cJSON *o, int *nomem) {
    size_t k = 0;
    for (const cJSON *e = o->child; e; e = e->next) k++;
    if (k < 2) return NULL;
    if (k <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (!strcmp(a->string, b->string)) return a->string;
        return NULL;
    }
    const cJSON **v = gp_malloc(k, sizeof *v);
    if (!v) return *nomem = 1, NULL;
    size_t j = 0;
    for (const cJSON *e = o->child; e; e = e->next) v[j++] = e;
    qsort(v, k, sizeof *v, cmp_key);
    const char *d = NULL;
    for (j = 1; j < k && !d; j++)
        if (!strcmp(v[j - 1]->string, v[j]->string)) d = v[j]->string;
    free(v);
    return d;
}

static gp_status check_dups(const char *path, const cJSON *node, int depth) {
    if (cJSON_IsObject(node)) {
        int nomem = 0;
        const char *d = dup_in(node, &nomem);
        if (nomem) return GP_ERR_NOMEM;
        if (d)
            return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' appears twice%s%s (duplicate keys are refused)", path,
                                d, node->string ? " in object " : "", node->string ? node->string : "");
    }
    if (depth < GP_JSON_MAX_DEPTH && (cJSON_IsObject(node) || cJSON_IsArray(node)))
        for (const cJSON *e = node->child; e; e = e->next) {
            gp_status s = check_dups(path, e, depth + 1);
            if (s) return s;
        }
    return GP_OK;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Parse and load                                                                                                    */
/* ---------------------------------------------------------------------------------------------------------------- */

gp_status gp_json_parse(const char *path, const char *text, size_t len, size_t max_tree, unsigned flags,
                        cJSON **root) {
    *root = NULL;
    if (!path) path = "(json)";
    if (!text) return gp_set_error(GP_ERR_INVALID_ARG, "%s: no JSON text", path);
    scan c = {text, len, 0, 0, 0, 0, NULL};
    if (!scan_text(&c))
        return gp_set_error(GP_ERR_FORMAT, "%s: not valid JSON at byte %zu of %zu: %s%s", path, c.i, len, c.why,
                            c.i >= len ? " (the file looks truncated)" : "");
    size_t est = estimate(&c);
    if (est > max_tree)
        return gp_set_error(GP_ERR_FORMAT,
                            "%s: JSON of %zu values would take about %zu MB to parse, over the limit of %zu MB", path,
                            c.values, est >> 20, max_tree >> 20);
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) return gp_set_error(GP_ERR_NOMEM, "%s: out of memory parsing %zu bytes of JSON", path, len);
    if (flags & GP_JSON_NO_DUP_KEYS) {
        gp_status s = check_dups(path, j, 0);
        if (s) {
            cJSON_Delete(j);
            return s;
        }
    }
    *root = j;
    return GP_OK;
}

gp_status gp_json_load(const char *path, size_t max_bytes, unsigned flags, cJSON **root) {
    char *text = NULL;
    size_t len = 0;
    *root = NULL;
    gp_status s = gp_read_file(path, max_bytes, &text, &len);
    if (s) return s;
    size_t tree = max_bytes > SIZE_MAX / 16 ? SIZE_MAX : max_bytes * 16;
    s = gp_json_parse(path, text, len, tree, flags, root);
    free(text);
    return s;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Getters                                                                                                           */
/* ---------------------------------------------------------------------------------------------------------------- */

#define FERR(st, o, key, ...) field_error(st, o, key, __VA_ARGS__)

static gp_status field_error(gp_status st, const gp_jobj *o, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static gp_status field_error(gp_status st, const gp_jobj *o, const char *key, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gp_set_error(st, "%s: field '%s%s' %s", o->path, o->prefix ? o->prefix : "", key, what);
}

const cJSON *gp_json_get(const gp_jobj *o, const char *key) {
    const cJSON *v = o->o ? cJSON_GetObjectItemCaseSensitive(o->o, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int gp_json_has(const gp_jobj *o, const char *key) { return gp_json_get(o, key) != NULL; }

#define MAX_EXACT 9007199254740992.0 /* 2^53 */

gp_status gp_json_int(const gp_jobj *o, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = gp_json_get(o, key);
    if (!v) return GP_OK;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d))
        return FERR(GP_ERR_FORMAT, o, key, "must be an integer");
    double dlo = fmax((double)lo, -MAX_EXACT), dhi = fmin((double)hi, MAX_EXACT);
    if (d < dlo || d > dhi)
        return FERR(GP_ERR_FORMAT, o, key, "= %.17g is outside [%lld, %lld]", d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return GP_OK;
}

gp_status gp_json_i32(const gp_jobj *o, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    int64_t v = 0;
    if (!gp_json_has(o, key)) return GP_OK;
    gp_status s = gp_json_int(o, key, lo, hi, &v);
    if (!s) *out = (int32_t)v;
    return s;
}

gp_status gp_json_need_i32(const gp_jobj *o, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    if (!gp_json_has(o, key)) return FERR(GP_ERR_MISSING, o, key, "is required but missing");
    return gp_json_i32(o, key, lo, hi, out);
}

gp_status gp_json_num(const gp_jobj *o, const char *key, double lo, double hi, double *out) {
    const cJSON *v = gp_json_get(o, key);
    if (!v) return GP_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return FERR(GP_ERR_FORMAT, o, key, "must be a finite number");
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return FERR(GP_ERR_FORMAT, o, key, "= %g must be in [%g, %g]", v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return GP_OK;
}

gp_status gp_json_bool(const gp_jobj *o, const char *key, int *out) {
    const cJSON *v = gp_json_get(o, key);
    if (!v) return GP_OK;
    if (!cJSON_IsBool(v)) return FERR(GP_ERR_FORMAT, o, key, "must be true or false");
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return GP_OK;
}

gp_status gp_json_str(const gp_jobj *o, const char *key, const char **out) {
    const cJSON *v = gp_json_get(o, key);
    if (!v) return GP_OK;
    if (!cJSON_IsString(v)) return FERR(GP_ERR_FORMAT, o, key, "must be a string");
    *out = v->valuestring;
    return GP_OK;
}

gp_status gp_json_obj(const gp_jobj *o, const char *key, gp_jobj *child, char *buf, size_t cap) {
    const cJSON *v = gp_json_get(o, key);
    snprintf(buf, cap, "%s%s.", o->prefix ? o->prefix : "", key);
    *child = (gp_jobj){o->path, buf, NULL};
    if (!v) return GP_OK;
    if (!cJSON_IsObject(v)) return FERR(GP_ERR_FORMAT, o, key, "must be an object");
    child->o = v;
    return GP_OK;
}

gp_status gp_json_arr(const gp_jobj *o, const char *key, const cJSON **out) {
    const cJSON *v = gp_json_get(o, key);
    *out = NULL;
    if (!v) return GP_OK;
    if (!cJSON_IsArray(v)) return FERR(GP_ERR_FORMAT, o, key, "must be a list");
    *out = v;
    return GP_OK;
}

gp_status gp_json_id_at(const char *path, const char *field, int32_t i, const cJSON *e, int32_t hi, int32_t *out) {
    double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
    char name[160];
    if (i >= 0) snprintf(name, sizeof name, "%s[%d]", field, (int)i);
    else snprintf(name, sizeof name, "%s", field);
    if (!isfinite(d) || d != floor(d) || d < 0 || d > (double)hi)
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' = %.17g must be a token id in [0, %d]", path, name,
                            cJSON_IsNumber(e) ? d : NAN, (int)hi);
    *out = (int32_t)d;
    return GP_OK;
}

gp_status gp_json_ids(const gp_jobj *o, const char *key, int32_t hi, int32_t *ids, int32_t cap, int32_t *n) {
    const cJSON *v = gp_json_get(o, key);
    char field[160];
    snprintf(field, sizeof field, "%s%s", o->prefix ? o->prefix : "", key);
    if (!v) return GP_OK;
    if (cJSON_IsNumber(v)) {
        if (cap < 1) return FERR(GP_ERR_UNSUPPORTED, o, key, "has more than %d ids", (int)cap);
        gp_status s = gp_json_id_at(o->path, field, -1, v, hi, &ids[0]);
        if (!s) *n = 1;
        return s;
    }
    if (!cJSON_IsArray(v)) return FERR(GP_ERR_FORMAT, o, key, "must be a token id or a list of token ids");
    int32_t k = 0;
    int32_t tmp[64];
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (k == cap || k == 64) return FERR(GP_ERR_FORMAT, o, key, "has more than %d ids", (int)(cap < 64 ? cap : 64));
        gp_status s = gp_json_id_at(o->path, field, k, e, hi, &tmp[k]);
        if (s) return s;
        k++;
    }
    if (k) memcpy(ids, tmp, (size_t)k * sizeof *ids);
    *n = k;
    return GP_OK;
}
