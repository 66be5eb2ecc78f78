/* json.h — the one JSON reader of every parser (config.json, generation_config.json, tokenizer_config.json,
 * safetensors indexes, cache and reference metadata): a bounded parse (a non-allocating syntax scan that sizes the
 * tree before cJSON builds it) and typed field getters with range checks whose errors name the file and the field.
 *
 * Use:
 *     cJSON *root;
 *     if ((s = gp_json_load(path, GP_JSON_CONFIG_BYTES, GP_JSON_NO_DUP_KEYS, &root))) return s;
 *     gp_jobj o = gp_jobj_root(path, root);
 *     int64_t n = 0;
 *     if ((s = gp_json_int(&o, "vocab_size", 1, 1 << 24, &n))) ...      // absent/null: n unchanged, GP_OK
 *     cJSON_Delete(root);
 * Absent and null fields are "not set": getters return GP_OK and leave *out as it was (gp_json_has tells). */
#ifndef GP_JSON_H
#define GP_JSON_H

#include "genparity.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* Size limits sized to real files (the largest real tokenizer.json, Gemma 3's, is 33 MB and its tree ~1 GB;
 * configs are a few KB).  The tree limit bounds cJSON's memory (~80 bytes per value) before it is allocated. */
#define GP_JSON_CONFIG_BYTES ((size_t)16 << 20)   /* config.json, generation_config.json, tokenizer_config.json */
#define GP_JSON_CONFIG_TREE  ((size_t)256 << 20)
#define GP_JSON_TOKENIZER_BYTES ((size_t)64 << 20) /* tokenizer.json: Gemma 3's is 33 MB */
#define GP_JSON_TOKENIZER_TREE  ((size_t)512 << 20) /* Gemma 3's tree: ~180 MB */
#define GP_JSON_MAX_DEPTH 512

enum {
    GP_JSON_NO_DUP_KEYS = 1 /* refuse an object with a repeated key (cJSON keeps the first, Python the last) */
};

/* Parses text [len] into *root (the caller cJSON_Deletes it); path names the file in messages.  A scan that
 * allocates nothing checks the syntax first (GP_ERR_FORMAT "not valid JSON at byte N"), the nesting depth
 * (<= GP_JSON_MAX_DEPTH) and the tree's memory estimate (<= max_tree bytes, else GP_ERR_FORMAT naming the limit);
 * cJSON failing after a clean scan is GP_ERR_NOMEM.  flags: GP_JSON_NO_DUP_KEYS. */
gp_status gp_json_parse(const char *path, const char *text, size_t len, size_t max_tree, unsigned flags,
                        cJSON **root);

/* Reads path (a regular file of at most max_bytes) and parses it with a tree limit of 16 x max_bytes. */
gp_status gp_json_load(const char *path, size_t max_bytes, unsigned flags, cJSON **root);

/* Estimated bytes of the cJSON tree of a syntactically valid text [len] (0 if it is not valid JSON). */
size_t gp_json_tree_estimate(const char *text, size_t len);

/* Checks the syntax of text [len] without allocating (as gp_json_parse does first): GP_OK, or GP_ERR_FORMAT with
 * "<path>: <field>: not valid JSON at byte N: <why>" (field may be NULL).  *trailing = 1 when the only fault is text
 * after a complete value; *first = the first non-blank character (0 if none). */
gp_status gp_json_check(const char *path, const char *field, const char *text, size_t len, int *trailing, char *first);

/* ---------------------------------------------------------------------------------------------------------------- */
/* A streaming reader over text already accepted by gp_json_check: no tree, memory only for what the caller keeps    */
/* (the safetensors header).                                                                                        */
/* ---------------------------------------------------------------------------------------------------------------- */
typedef struct gp_jlex {
    const char *s;
    size_t n, i;
} gp_jlex;

/* The next non-blank character (consumed when it equals c and c != 0); 0 at the end. */
char gp_jlex_peek(gp_jlex *l);
int gp_jlex_eat(gp_jlex *l, char c);
/* A string at the cursor, unescaped (\u escapes to UTF-8) into a new NUL-terminated buffer (caller frees);
 * returns 0, -1 when it is not a string or holds a NUL, -2 out of memory. */
int gp_jlex_string(gp_jlex *l, char **out);
/* A number at the cursor that is a whole number in [0, 2^53] (4, 4.0, 4e0); 0 or -1 (not such a number: consumed
 * when it is a number). */
int gp_jlex_uint(gp_jlex *l, uint64_t *out);
/* Skips the value at the cursor (any type, any depth; iterative). */
void gp_jlex_skip(gp_jlex *l);

/* ---------------------------------------------------------------------------------------------------------------- */
/* Typed getters.  A gp_jobj is an object plus the names used in messages: "<path>: field '<prefix><key>' ..."      */
/* ---------------------------------------------------------------------------------------------------------------- */
typedef struct gp_jobj {
    const char *path;   /* file named in messages */
    const char *prefix; /* "" at the top level, else e.g. "rope_parameters." */
    const cJSON *o;     /* the object (NULL = empty) */
} gp_jobj;

static inline gp_jobj gp_jobj_root(const char *path, const cJSON *o) { return (gp_jobj){path, "", o}; }

/* The field's node when present and not null, else NULL. */
const cJSON *gp_json_get(const gp_jobj *o, const char *key);
/* 1 when the field is present and not null. */
int gp_json_has(const gp_jobj *o, const char *key);
/* Integer in [lo, hi] (|lo|, |hi| <= 2^53): a finite number with no fraction. */
gp_status gp_json_int(const gp_jobj *o, const char *key, int64_t lo, int64_t hi, int64_t *out);
gp_status gp_json_i32(const gp_jobj *o, const char *key, int32_t lo, int32_t hi, int32_t *out);
/* Required integer in [lo, hi]: absent or null is GP_ERR_MISSING naming the field. */
gp_status gp_json_need_i32(const gp_jobj *o, const char *key, int32_t lo, int32_t hi, int32_t *out);
/* Finite number in [lo, hi]. */
gp_status gp_json_num(const gp_jobj *o, const char *key, double lo, double hi, double *out);
/* true or false (0 / 1). */
gp_status gp_json_bool(const gp_jobj *o, const char *key, int *out);
/* String (points into the tree). */
gp_status gp_json_str(const gp_jobj *o, const char *key, const char **out);
/* Object field as a gp_jobj (prefix kept in buf [cap]); absent or null -> child->o = NULL. */
gp_status gp_json_obj(const gp_jobj *o, const char *key, gp_jobj *child, char *buf, size_t cap);
/* Array field (absent or null -> *out = NULL). */
gp_status gp_json_arr(const gp_jobj *o, const char *key, const cJSON **out);
/* Token ids: an integer or a list of integers, each in [0, hi], at most cap of them -> ids [*n].  Errors name
 * the element ("eos_token_id[1]").  Absent or null: *n unchanged. */
gp_status gp_json_ids(const gp_jobj *o, const char *key, int32_t hi, int32_t *ids, int32_t cap, int32_t *n);
/* Element i of an id list read as above, from any array node (field names the list in messages). */
gp_status gp_json_id_at(const char *path, const char *field, int32_t i, const cJSON *e, int32_t hi, int32_t *out);

#endif
