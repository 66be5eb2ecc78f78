/* tok_internal.h — the tokenizer's internal types shared by its layers: string lists, hash maps, the normalizer /
 * pre-tokenizer / decoder descriptions parsed from tokenizer.json, the BPE model and the tokenizer itself. */
#ifndef GP_TOK_INTERNAL_H
#define GP_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "genparity.h"
#include "util/util.h"

#include <stddef.h>
#include <stdint.h>

/* ---- growable list of byte strings in one buffer ---------------------------------------------------------- */
typedef struct tk_list {
    char *buf;
    size_t len, cap;     /* bytes used / allocated in buf */
    size_t *off, *slen;  /* item i is buf[off[i] .. off[i]+slen[i]) */
    uint8_t *at0;        /* item starts at offset 0 of the original input (Metaspace prepend_scheme "first") */
    size_t n, ncap;
} tk_list;

void tk_list_clear(tk_list *l);
void tk_list_free(tk_list *l);
/* Appends an item; returns 0 or -1 (out of memory, error set). */
int tk_list_push(tk_list *l, const char *s, size_t len, int at0);
/* Appends bytes to the last item (which must exist). */
int tk_list_extend_last(tk_list *l, const char *s, size_t len);
static inline const char *tk_list_str(const tk_list *l, size_t i) { return l->buf + l->off[i]; }

/* ---- growable byte buffer ---------------------------------------------------------------------------------- */
typedef struct tk_buf {
    char *p;
    size_t len, cap;
} tk_buf;
int tk_buf_put(tk_buf *b, const void *s, size_t n);
static inline int tk_buf_putc(tk_buf *b, char c) { return tk_buf_put(b, &c, 1); }
int tk_buf_put_cp(tk_buf *b, uint32_t cp); /* UTF-8 encodes cp */

/* ---- hash maps --------------------------------------------------------------------------------------------- */
uint64_t tk_hash(const void *s, size_t n);

/* string -> int32 (open addressing; the map does not own key bytes). */
typedef struct tk_strmap {
    uint32_t mask, n;
    struct tk_strmap_slot {
        const char *key;
        uint32_t len, hash;
        int32_t val;
    } *slots;
} tk_strmap;
int tk_strmap_init(tk_strmap *m, size_t expected);
void tk_strmap_free(tk_strmap *m);
/* Inserts or replaces; returns 1 if the key was new, 0 if replaced, -1 on allocation failure. */
int tk_strmap_put(tk_strmap *m, const char *key, size_t len, int32_t val);
/* Returns the value or -1. */
int32_t tk_strmap_get(const tk_strmap *m, const char *key, size_t len);

/* (a, b) pair of ids -> (rank, merged id). */
typedef struct tk_mergemap {
    uint32_t mask, n;
    struct tk_merge_slot {
        uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
        uint32_t rank;
        int32_t id;
    } *slots;
} tk_mergemap;

/* ---- UTF-8 ------------------------------------------------------------------------------------------------- */
/* Decodes one code point of valid UTF-8 at s (n bytes left); returns its length. */
int tk_utf8_dec(const char *s, size_t n, uint32_t *cp);
/* Length of the valid UTF-8 sequence at s, or 0 if s starts an invalid (maximal-subpart) sequence; *bad gets
 * the length of the maximal subpart to replace with U+FFFD in that case. */
int tk_utf8_valid_at(const unsigned char *s, size_t n, size_t *bad);
/* Appends s to b with every invalid sequence replaced by U+FFFD (WHATWG / Python "replace" rule). */
int tk_utf8_sanitize(tk_buf *b, const char *s, size_t n);
/* Returns 1 if s is valid UTF-8. */
int tk_utf8_is_valid(const char *s, size_t n);
int tk_unicode_is_whitespace(uint32_t c); /* Rust char::is_whitespace */

/* ---- regular expressions (PCRE2, UTF + UCP, JIT) ----------------------------------------------------------- */
typedef struct tk_regex {
    pcre2_code *code;
    char *literal; /* for String patterns: the literal, matched with memmem (faster, exact) */
    size_t literal_len;
} tk_regex;

/* Per-call matching state (match data + JIT stack). */
typedef struct tk_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    const char *ck_s;  /* the subject last checked as valid UTF-8 (PCRE2_NO_UTF_CHECK is passed only for it) */
    size_t ck_n;
    gp_status err;     /* the status of the last failed match (GP_OK: failures were allocation failures) */
} tk_scratch;

/* The status to return after a -1 from a function that matched with sc: a regex failure, else out of memory. */
static inline gp_status tk_fail_status(const tk_scratch *sc) { return sc->err ? sc->err : GP_ERR_NOMEM; }

/* Compiles a tokenizer.json pattern object {"String": s} or {"Regex": r}. what names the field for errors. */
gp_status tk_regex_from_json(tk_regex *re, const void *cjson_pattern, const char *path, const char *what);
void tk_regex_free(tk_regex *re);
/* Finds the next match in s[0..n) starting at from; returns 1 and [*ms, *me) or 0 when none, -1 on error (message
 * set).  The subject is checked as UTF-8 once per subject (on from == 0 or a new s/n): invalid bytes are an error,
 * never passed to PCRE2 unchecked. */
int tk_regex_next(const tk_regex *re, tk_scratch *sc, const char *s, size_t n, size_t from, size_t *ms,
                  size_t *me);
int tk_scratch_init(tk_scratch *sc);
void tk_scratch_free(tk_scratch *sc);

/* ---- normalizers ------------------------------------------------------------------------------------------- */
typedef enum {
    TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD, TK_NORM_LOWERCASE, TK_NORM_STRIP, TK_NORM_PREPEND,
    TK_NORM_REPLACE, TK_NORM_SEQUENCE, TK_NORM_STRIP_ACCENTS
} tk_norm_type;

typedef struct tk_norm {
    tk_norm_type type;
    int strip_left, strip_right;
    char *str;       /* Prepend: prepend; Replace: content */
    tk_regex re;     /* Replace */
    struct tk_norm *items;
    int n_items;
} tk_norm;

gp_status tk_norm_parse(tk_norm *n, const void *cjson, const char *path, const char *field);
void tk_norm_free(tk_norm *n);
/* Normalizes s (valid UTF-8) into out (cleared first). */
int tk_norm_apply(const tk_norm *n, tk_scratch *sc, const char *s, size_t len, tk_buf *out);

/* ---- pre-tokenizers ---------------------------------------------------------------------------------------- */
typedef enum {
    TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT, TK_SPLIT_CONTIGUOUS
} tk_split_behavior;

typedef enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend_scheme;

typedef enum {
    TK_PRE_SPLIT, TK_PRE_BYTELEVEL, TK_PRE_METASPACE, TK_PRE_DIGITS, TK_PRE_WHITESPACE, TK_PRE_WHITESPACE_SPLIT,
    TK_PRE_PUNCTUATION, TK_PRE_SEQUENCE
} tk_pre_type;

typedef struct tk_pre {
    tk_pre_type type;
    tk_regex re;                 /* Split; ByteLevel with use_regex; Whitespace */
    tk_split_behavior behavior;  /* Split, Punctuation */
    int invert;                  /* Split */
    int add_prefix_space;        /* ByteLevel */
    int use_regex;               /* ByteLevel */
    uint32_t replacement;        /* Metaspace */
    char rep_utf8[5];
    tk_prepend_scheme prepend;   /* Metaspace */
    int split;                   /* Metaspace */
    int individual_digits;       /* Digits */
    struct tk_pre *items;
    int n_items;
} tk_pre;

gp_status tk_pre_parse(tk_pre *p, const void *cjson, const char *path, const char *field);
/* Reads a Metaspace "replacement" character (default U+2581). */
gp_status tk_parse_replacement(const void *cjson, uint32_t *cp, const char *path, const char *field);
gp_status tk_parse_prepend_scheme(const void *cjson, tk_prepend_scheme *p, const char *path, const char *field);
void tk_pre_free(tk_pre *p);
/* Pre-tokenizes the items of *io in place (uses tmp as a spare list). */
int tk_pre_apply(const tk_pre *p, tk_scratch *sc, tk_list *io, tk_list *tmp);

/* GPT-2 byte <-> unicode map. */
static inline uint32_t tk_byte_to_cp(unsigned b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x121 + (b - 0x7F);
    if (b == 0xAD) return 0x143;
    return b;
}
static inline int tk_cp_to_byte(uint32_t cp) { /* -1 when cp is not in the map */
    if (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return -1;
    if (cp < 0x100) return (int)cp;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143) return 0xAD;
    return -1;
}

/* ---- decoders ---------------------------------------------------------------------------------------------- */
typedef enum {
    TK_DEC_BYTELEVEL, TK_DEC_REPLACE, TK_DEC_BYTEFALLBACK, TK_DEC_FUSE, TK_DEC_STRIP, TK_DEC_METASPACE,
    TK_DEC_SEQUENCE
} tk_dec_type;

typedef struct tk_dec {
    tk_dec_type type;
    tk_regex re;       /* Replace */
    char *content;     /* Replace */
    uint32_t strip_content; /* Strip */
    int start, stop;        /* Strip */
    uint32_t replacement;   /* Metaspace */
    tk_prepend_scheme prepend;
    struct tk_dec *items;
    int n_items;
} tk_dec;

gp_status tk_dec_parse(tk_dec *d, const void *cjson, const char *path, const char *field);
void tk_dec_free(tk_dec *d);

/* ---- BPE model --------------------------------------------------------------------------------------------- */
typedef struct tk_bpe {
    tk_strmap vocab;    /* token string -> id (model vocabulary) */
    tk_mergemap merges;
    int32_t unk_id;     /* -1: none */
    int fuse_unk, byte_fallback, ignore_merges;
    char *prefix, *suffix; /* continuing_subword_prefix / end_of_word_suffix, NULL if none */
    int32_t byte_ids[256]; /* byte_fallback: id of "<0xNN>", -1 if absent */
} tk_bpe;

/* Per-encode BPE word cache: word -> the ids it tokenizes to. */
typedef struct tk_bpe_cache {
    tk_strmap map;      /* word -> entry index */
    char **chunks;      /* key storage (chunks never move, so map keys stay valid) */
    size_t n_chunks, chunk_used, chunk_cap;
    int32_t *ids;       /* id runs of all entries */
    size_t n_ids, cap_ids;
    uint32_t *ent_off, *ent_n;
    size_t n_ent, cap_ent;
} tk_bpe_cache;

typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
int tk_ids_push(tk_ids *a, int32_t id);

/* Tokenizes one pre-token (valid UTF-8) and appends its ids. */
gp_status tk_bpe_word(const tk_bpe *m, tk_bpe_cache *cache, const char *w, size_t len, tk_ids *out);
void tk_bpe_cache_free(tk_bpe_cache *c);
gp_status tk_bpe_build_merges(tk_bpe *m, const void *cjson_merges, const char *path);
void tk_bpe_free(tk_bpe *m);

/* ---- the tokenizer ----------------------------------------------------------------------------------------- */
typedef struct tk_added {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
    char *norm_content; /* normalized form (normalized=true tokens whose normalization differs), else NULL */
    size_t norm_len;
} tk_added;

/* Leftmost-longest matcher over a set of added tokens (by first byte, longest first). */
typedef struct tk_matcher {
    int32_t *idx;       /* indices into tok->added, grouped by first byte */
    uint32_t start[257];
    int use_norm;       /* match norm_content when present */
} tk_matcher;

struct gp_tokenizer {
    char *path;
    tk_bpe bpe;
    char **id_str;      /* id -> token string (decoding form), NULL for holes */
    uint32_t *id_len;
    int32_t n_vocab;
    uint8_t *is_special;
    char *arena;           /* vocabulary strings */
    tk_added *added;
    int n_added;
    tk_strmap added_map;   /* content -> index in added */
    tk_matcher match_raw, match_norm;
    int has_norm, has_pre, has_dec;
    int split_metaspace; /* no pre-tokenizer and no token has U+2581 after another character: BPE may run on
                            each U+2581-led word separately (same result, much faster on long text) */
    tk_norm norm;
    tk_pre pre;
    tk_dec dec;
    int32_t *tmpl_prefix, *tmpl_suffix; /* post-processor ids around the sequence when add_special */
    int n_prefix, n_suffix;
    int32_t bos_id, eos_id, pad_id;
};

/* Decodes ids into *out (cleared first).  at_start = 0 decodes a continuation (detok windows): position-0 rules
 * (Metaspace's first-token rule, Strip's start cut of a fused string) are not applied. */
gp_status tk_decode(const gp_tokenizer *tok, const int32_t *ids, size_t n, int skip_special, int at_start,
                    tk_buf *out);

#endif
