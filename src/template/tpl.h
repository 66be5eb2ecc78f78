/* tpl.h — internal interface of the Jinja2 engine that renders chat templates (src/template/): values in a
 * per-render arena, the lexer/parser that turns template text into an AST, and the sandboxed evaluator.
 * Semantics follow Jinja2 3.1 as transformers configures it: ImmutableSandboxedEnvironment, trim_blocks,
 * lstrip_blocks, loopcontrols, the {% generation %} tag, transformers' tojson / raise_exception / strftime_now. */
#ifndef GP_TPL_H
#define GP_TPL_H

#include "genparity.h"

#include <stddef.h>
#include <stdint.h>

/* ---- sandbox limits ---------------------------------------------------------------------------------------- */
#define TPL_MAX_DEPTH 200              /* nesting of statements/expressions when parsing, and of macro calls */
#define TPL_MAX_ITERATIONS 1000000     /* loop iterations (all loops together) of one render */
#define TPL_MAX_OUTPUT (64u << 20)     /* bytes of rendered text, and of any one string value */
#define TPL_MAX_ARENA (512u << 20)     /* bytes of values one render may allocate */
#define TPL_MAX_SOURCE (16u << 20)     /* bytes of template text */

/* ---- arena ------------------------------------------------------------------------------------------------- */
typedef struct tpl_arena tpl_arena;
tpl_arena *tpl_arena_new(size_t cap);
void tpl_arena_free(tpl_arena *a);
void *tpl_alloc(tpl_arena *a, size_t n); /* zeroed; NULL when the arena's cap would be exceeded */

/* ---- values ------------------------------------------------------------------------------------------------ */
typedef enum {
    TV_UNDEF = 0, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT,
    TV_MACRO, TV_NS, TV_FUNC, TV_METHOD, TV_LOOP
} tv_type;

#define TV_GENERATOR 2

typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;
struct tpl_node;

typedef struct tv {
    uint8_t t;
    uint8_t tuple;    /* TV_LIST: 1 tuple, TV_GENERATOR (map/select results); TV_STR: 1 = Markup (|safe, |escape) */
    uint32_t n;       /* TV_STR: byte length */
    union {
        int64_t i;    /* TV_BOOL, TV_INT */
        double f;
        const char *s; /* TV_STR (not NUL-terminated), TV_UNDEF: the name that was looked up (may be NULL) */
        tv_list *l;
        tv_dict *d;   /* TV_DICT, TV_NS, TV_LOOP */
        const struct tpl_node *m; /* TV_MACRO */
        void *p;      /* TV_FUNC / TV_METHOD payload */
    } u;
} tv;

struct tv_list { tv *v; uint32_t n, cap; };
struct tv_dict { tv *k, *v; uint32_t n, cap; };

typedef struct tv_method { tv self; const char *name; const void *extra; } tv_method;

static inline tv tv_undef(void) { tv x = {0}; return x; }
static inline tv tv_none(void) { tv x = {0}; x.t = TV_NONE; return x; }
static inline tv tv_bool(int b) { tv x = {0}; x.t = TV_BOOL; x.u.i = b != 0; return x; }
static inline tv tv_int(int64_t i) { tv x = {0}; x.t = TV_INT; x.u.i = i; return x; }
static inline tv tv_float(double f) { tv x = {0}; x.t = TV_FLOAT; x.u.f = f; return x; }
static inline tv tv_strn(const char *s, uint32_t n) { tv x = {0}; x.t = TV_STR; x.u.s = s; x.n = n; return x; }

tv_list *tv_list_new(tpl_arena *a, uint32_t cap);
int tv_list_push(tpl_arena *a, tv_list *l, tv v); /* 0 ok, -1 out of memory */
tv_dict *tv_dict_new(tpl_arena *a, uint32_t cap);
int tv_dict_set(tpl_arena *a, tv_dict *d, tv k, tv v);
tv *tv_dict_get(const tv_dict *d, tv k);
tv *tv_dict_gets(const tv_dict *d, const char *key, size_t n);
tv tv_str_copy(tpl_arena *a, const char *s, size_t n); /* TV_UNDEF (t == 0) with u.s NULL on out of memory */

int tv_truthy(tv v);
int tv_equal(tv a, tv b);
const char *tv_type_name(tv v); /* Python's name of the type: "str", "int", "list", "dict", "NoneType", ... */

/* ---- growable byte buffer (malloc'd) ---------------------------------------------------------------------- */
typedef struct tpl_buf { char *p; size_t n, cap; int oom; } tpl_buf;
void tpl_buf_put(tpl_buf *b, const char *s, size_t n);
void tpl_buf_putc(tpl_buf *b, char c);
void tpl_buf_free(tpl_buf *b);

/* Python str(v) / repr(v) appended to b (lists and dicts use repr for their items). */
void tv_write_str(tpl_buf *b, tv v);
void tv_write_repr(tpl_buf *b, tv v);
/* Python float repr ("1.0", "1e-05", "inf"). */
void tv_write_float(tpl_buf *b, double f);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys): indent NULL = none; item_sep/key_sep NULL = the
 * defaults.  Returns 0, or -1 with *err set to a static message for a value JSON cannot hold. */
int tv_write_json(tpl_buf *b, tv v, const char *indent, const char *item_sep, const char *key_sep, int sort_keys,
                  int ensure_ascii, int depth, const char **err);

/* Parses JSON text into values (ints stay ints, key order kept, later duplicate keys win as in Python).
 * Returns 0, or -1 with a message "line L column C: ..." in err (cap bytes). */
int tv_parse_json(tpl_arena *a, const char *s, size_t n, tv *out, char *err, size_t cap);

/* UTF-8 helpers: number of code points, and the byte offset of code point i (clamped to n). */
size_t tpl_utf8_len(const char *s, size_t n);
size_t tpl_utf8_offset(const char *s, size_t n, size_t i);

/* ---- AST --------------------------------------------------------------------------------------------------- */
typedef enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK, N_FILTERBLOCK, N_BREAK, N_CONTINUE,
    N_BLOCK, N_GENERATION,
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BINARY, N_AND, N_OR, N_NOT, N_COMPARE, N_CONDEXPR, N_CONCAT
} tpl_node_kind;

typedef struct tpl_node tpl_node;
typedef struct tpl_nodes { tpl_node **v; uint32_t n, cap; } tpl_nodes;

struct tpl_node {
    uint8_t kind;
    uint8_t op;           /* operator token for N_UNARY/N_BINARY/N_COMPARE; negate flag for N_TEST */
    uint32_t line, col;
    tv value;             /* N_CONST; N_TEXT text; N_NAME/N_GETATTR/N_FILTER/N_TEST name (TV_STR) */
    tpl_node *a, *b, *c;  /* operands: target/iter/cond; slice start/stop/step */
    tpl_nodes args;       /* call/filter/test arguments; list/tuple/dict items (dict: key, value pairs) */
    tpl_nodes kwnames;    /* N_CALL/N_FILTER/N_TEST: keyword argument names (N_CONST strings), values in kwargs */
    tpl_nodes kwargs;
    tpl_nodes body, orelse; /* statement bodies; N_IF: orelse is the else branch (elif = nested N_IF) */
    tpl_nodes params, defaults; /* N_MACRO parameters (N_NAME) and default values (NULL where none) */
};

typedef struct tpl_program {
    tpl_arena *arena;     /* owns every node and constant */
    tpl_nodes body;
    char *name;           /* source name for messages ("chat_template.jinja") */
} tpl_program;

/* Parses template text.  Returns GP_OK, or GP_ERR_FORMAT with "name:line:col: message". */
gp_status tpl_parse(const char *src, size_t n, const char *name, tpl_program **out);
void tpl_program_free(tpl_program *p);

/* ---- rendering --------------------------------------------------------------------------------------------- */
typedef struct tpl_render tpl_render;
tpl_render *tpl_render_new(void);
void tpl_render_free(tpl_render *r);
tpl_arena *tpl_render_arena(tpl_render *r);
/* Sets global variable name = v (values from this render's arena). */
int tpl_render_set(tpl_render *r, const char *name, tv v);
/* Fixes the time behind strftime_now (seconds since the epoch, formatted in UTC); not called = local clock. */
void tpl_render_set_now(tpl_render *r, int64_t epoch_seconds);
/* Renders p with the globals set so far.  Returns GP_OK and a malloc'd NUL-terminated text, or GP_ERR_TEMPLATE with
 * the message: raise_exception's message exactly, otherwise "name:line:col: ...". */
gp_status tpl_render_run(tpl_render *r, const tpl_program *p, char **out, size_t *n);

#endif
