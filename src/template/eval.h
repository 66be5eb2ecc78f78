/* eval.h — what the evaluator (eval.c) and the builtins (filters.c, methods.c) share inside src/template/. */
#ifndef GP_TPL_EVAL_H
#define GP_TPL_EVAL_H

#include "template/tpl.h"

typedef struct tpl_frame { tv_dict *vars; struct tpl_frame *parent; } tpl_frame;

typedef struct tpl_macro {
    const tpl_node *def;       /* N_MACRO, or N_CALLBLOCK for a caller */
    tpl_frame *closure;
    tv caller;                 /* the caller passed by {% call %} (TV_UNDEF when none) */
} tpl_macro;

typedef struct tpl_loop { tv_list *items; int64_t i; int64_t depth; } tpl_loop;

struct tpl_render {
    tpl_arena *a;
    tv_dict *globals;
    const tpl_program *prog;
    int64_t iterations;
    int depth;
    int has_now;
    int64_t now;
    int raised;       /* err holds raise_exception's message */
    char err[1024];
};

/* Call arguments: positional v[0..n), keyword names kn (TV_STR) with values kv. */
typedef struct tpl_args { int n, nk; tv *v, *kn, *kv; } tpl_args;

/* Records an error at node `at` ("name:line:col: message") and returns -1. */
int tpl_err(tpl_render *r, const tpl_node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Positional argument pos or keyword `name`, else def. */
tv tpl_arg(const tpl_args *a, int pos, const char *name, tv def);
/* String value of v (Python str()) in the arena; -1 on error. */
int tpl_to_str(tpl_render *r, const tpl_node *at, tv v, tv *out);
/* The items of an iterable as a list (dict: keys, str: characters); -1 (error set) if v is not iterable. */
int tpl_iter(tpl_render *r, const tpl_node *at, tv v, tv_list **out);
/* Python comparison a < b (-1/0/1 in *cmp); -1 (error set) when the types do not order. */
int tpl_compare(tpl_render *r, const tpl_node *at, tv a, tv b, int *cmp);

/* Attribute access obj.name (dict keys, methods as TV_METHOD, loop and namespace fields). */
int tpl_getattr(tpl_render *r, const tpl_node *at, tv obj, const char *name, size_t n, tv *out);
/* Item access obj[key]. */
int tpl_getitem(tpl_render *r, const tpl_node *at, tv obj, tv key, tv *out);
/* Calls a filter / test by name on v. */
int tpl_filter(tpl_render *r, const tpl_node *at, const char *name, tv v, const tpl_args *args, tv *out);
int tpl_test(tpl_render *r, const tpl_node *at, const char *name, tv v, const tpl_args *args, int *out);
/* Calls a method value (TV_METHOD) or builtin function (TV_FUNC). */
int tpl_call_method(tpl_render *r, const tpl_node *at, const tv_method *m, const tpl_args *args, tv *out);
int tpl_call_func(tpl_render *r, const tpl_node *at, tv fn, const tpl_args *args, tv *out);
/* Global builtin function by name (range, namespace, dict, raise_exception, strftime_now, ...) or TV_UNDEF. */
tv tpl_builtin_global(const char *name, size_t n);
/* markupsafe.escape(v): a Markup string (unchanged when v already is one). */
int tpl_escape(tpl_render *r, const tpl_node *at, tv v, tv *out);
/* Calls any callable value (macro, function, method). */
int tpl_call_value(tpl_render *r, const tpl_node *at, tv fn, const tpl_args *args, tv *out);

#endif
