/* safetensors.c — the validating mmap reader of safetensors files (single, or sharded through
 * model.safetensors.index.json), the writer, and the dtype / half-float helpers.
 *
 * File layout: u64 LE header length N, N bytes of JSON header, then the data section.  The header is trusted only
 * after every check below; tensor views point into the read-only private mapping and nothing copies weight bytes
 * (so loading touches only the header's pages).
 *
 * Offset rule: tensors may be listed in any order in the JSON object, but sorted by their begin offset their spans
 * must start at 0, follow each other without gap or overlap, and end exactly at the end of the file.  This is what
 * the reference implementation (safetensors' validate) accepts; zero-byte tensors may sit anywhere on that chain. */
#include "io/safetensors.h"
#include "io/json.h"
#include "util/util.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_JSON_INT 9007199254740992.0 /* 2^53: the largest integer a JSON double holds exactly */

/* ---------------------------------------------------------------------------------------------------------- */
/* dtypes and half floats                                                                                      */
/* ---------------------------------------------------------------------------------------------------------- */

static const struct { const char *name; size_t size; } g_dtypes[GP_DTYPE_COUNT] = {
    [GP_DTYPE_F32] = {"F32", 4},         [GP_DTYPE_F16] = {"F16", 2},         [GP_DTYPE_BF16] = {"BF16", 2},
    [GP_DTYPE_F64] = {"F64", 8},         [GP_DTYPE_I64] = {"I64", 8},         [GP_DTYPE_I32] = {"I32", 4},
    [GP_DTYPE_I16] = {"I16", 2},         [GP_DTYPE_I8] = {"I8", 1},           [GP_DTYPE_U8] = {"U8", 1},
    [GP_DTYPE_BOOL] = {"BOOL", 1},       [GP_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [GP_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [GP_DTYPE_U32] = {"U32", 4},
};

size_t gp_dtype_size(gp_dtype t) { return (unsigned)t < GP_DTYPE_COUNT ? g_dtypes[t].size : 0; }

const char *gp_dtype_name(gp_dtype t) { return (unsigned)t < GP_DTYPE_COUNT ? g_dtypes[t].name : "?"; }

int gp_dtype_parse(const char *name, gp_dtype *out) {
    for (int i = 0; name && i < GP_DTYPE_COUNT; i++)
        if (!strcmp(name, g_dtypes[i].name)) {
            *out = (gp_dtype)i;
            return 0;
        }
    return -1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float gp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000 | (m << 13)); /* inf, NaN (payload kept) */
    if (e) return bits_f32(sign | ((e + 112) << 23) | (m << 13));  /* normal: rebias 15 -> 127 */
    if (!m) return bits_f32(sign);                                 /* +-0 */
    e = 113;                                                       /* subnormal m * 2^-24: normalise */
    while (!(m & 0x400)) m <<= 1, e--;
    return bits_f32(sign | (e << 23) | ((m & 0x3ff) << 13));
}

uint16_t gp_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN (quiet) */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

uint16_t gp_f32_to_f16(float f) {
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;
    if (a > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* NaN, quiet */
    if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520 (65504 + half an ulp, ties up) -> inf */
    if (a >= 0x38800000) {                                 /* normal half: rebias, round the low 13 bits */
        a -= 0x38000000;
        return (uint16_t)(sign | ((a + 0xfff + ((a >> 13) & 1)) >> 13));
    }
    if (a <= 0x33000000) return (uint16_t)sign; /* <= 2^-25: rounds to zero (the tie goes to even 0) */
    uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000, shift = 126 - e; /* subnormal: m * 2^(e-126) units */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++; /* may carry into the smallest normal: still right */
    return (uint16_t)(sign | r);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the set                                                                                                     */
/* ---------------------------------------------------------------------------------------------------------- */

typedef struct st_file {
    char *path;
    void *map;
    size_t len;
} st_file;

struct gp_st_set {
    st_file *files;
    int32_t n_files;
    gp_tensor_view *t; /* sorted by name once the set is complete */
    int32_t n;
    char **meta; /* key, value, key, value... of the first file */
    int32_t n_meta;
    uint64_t total;
};

static void free_views(gp_tensor_view *t, int32_t n) {
    for (int32_t i = 0; t && i < n; i++) free((char *)t[i].name);
    free(t);
}

static void free_meta(char **meta, int32_t n_meta) {
    for (int32_t i = 0; meta && i < 2 * n_meta; i++) free(meta[i]);
    free(meta);
}

void gp_st_close(gp_st_set *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_files; i++) {
        if (s->files[i].map) munmap(s->files[i].map, s->files[i].len);
        free(s->files[i].path);
    }
    free(s->files);
    free_views(s->t, s->n);
    free_meta(s->meta, s->n_meta);
    free(s);
}

static int cmp_view_name(const void *a, const void *b) {
    return strcmp(((const gp_tensor_view *)a)->name, ((const gp_tensor_view *)b)->name);
}

static int cmp_key_view(const void *key, const void *v) { return strcmp(key, ((const gp_tensor_view *)v)->name); }

const gp_tensor_view *gp_st_find(const gp_st_set *s, const char *name) {
    if (!s || !name || !s->n) return NULL;
    return bsearch(name, s->t, (size_t)s->n, sizeof *s->t, cmp_key_view);
}

int32_t gp_st_count(const gp_st_set *s) { return s ? s->n : 0; }

const gp_tensor_view *gp_st_at(const gp_st_set *s, int32_t i) {
    return s && i >= 0 && i < s->n ? &s->t[i] : NULL;
}

const char *gp_st_metadata(const gp_st_set *s, const char *key) {
    for (int32_t i = 0; s && key && i < s->n_meta; i++)
        if (!strcmp(s->meta[2 * i], key)) return s->meta[2 * i + 1];
    return NULL;
}

uint64_t gp_st_total_bytes(const gp_st_set *s) { return s ? s->total : 0; }

/* ---------------------------------------------------------------------------------------------------------- */
/* reading one file                                                                                            */
/* ---------------------------------------------------------------------------------------------------------- */

/* Reads the [d0, d1, ...] shape at the cursor into v (n_elems, nbytes need v->dtype). */
static gp_status read_shape(const char *path, const char *name, gp_jlex *l, gp_tensor_view *v) {
    if (!gp_jlex_eat(l, '['))
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'shape': missing or not an array", path, name);
    int k = 0;
    uint64_t n = 1;
    int overflow = 0;
    while (!gp_jlex_eat(l, ']')) {
        uint64_t x = 0;
        if (k && !gp_jlex_eat(l, ',')) break; /* cannot happen: the syntax was checked */
        if (gp_jlex_uint(l, &x) != 0)
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'shape': dimension %d is not an integer in "
                                "[0, 2^53]", path, name, k);
        if (k < GP_MAX_DIMS) v->shape[k] = (int64_t)x;
        overflow |= __builtin_mul_overflow(n, x, &n);
        k++;
    }
    if (k > GP_MAX_DIMS)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: tensor '%s': field 'shape': %d dimensions, at most %d supported",
                            path, name, k, GP_MAX_DIMS);
    if (overflow)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'shape': element count overflows", path, name);
    v->ndim = k;
    v->n_elems = n;
    return GP_OK;
}

/* Reads [begin, end] at the cursor; -1 when it is not two whole numbers. */
static int read_offsets(gp_jlex *l, uint64_t *begin, uint64_t *end) {
    if (gp_jlex_peek(l) != '[') return gp_jlex_skip(l), -1;
    gp_jlex_eat(l, '[');
    int ok = gp_jlex_uint(l, begin) == 0 && gp_jlex_eat(l, ',') && gp_jlex_uint(l, end) == 0 && gp_jlex_eat(l, ']');
    if (!ok) { /* skip the rest of the array */
        while (gp_jlex_peek(l) && !gp_jlex_eat(l, ']')) {
            gp_jlex_eat(l, ',');
            gp_jlex_skip(l);
        }
    }
    return ok ? 0 : -1;
}

/* Fills v from one header entry {"dtype", "shape", "data_offsets"} at the cursor (streamed: nothing but v is kept);
 * begin and end receive the data offsets. */
static gp_status parse_entry(const char *path, const char *name, gp_jlex *l, gp_tensor_view *v, uint64_t *begin,
                             uint64_t *end) {
    if (!gp_jlex_eat(l, '{')) return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, name);
    char *dt = NULL;
    int has_dt = 0, has_shape = 0, off_ok = 0;
    gp_status st = GP_OK;
    gp_tensor_view shape = {0};
    while (!st && !gp_jlex_eat(l, '}')) {
        char *key = NULL;
        gp_jlex_eat(l, ',');
        int r = gp_jlex_string(l, &key);
        if (r) {
            st = r == -2 ? GP_ERR_NOMEM : gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': a key holds a NUL", path, name);
            break;
        }
        gp_jlex_eat(l, ':');
        if (!strcmp(key, "dtype") && !has_dt) {
            has_dt = 1;
            if (gp_jlex_peek(l) != '"') gp_jlex_skip(l);
            else if (gp_jlex_string(l, &dt) == -2) st = GP_ERR_NOMEM;
        } else if (!strcmp(key, "shape") && !has_shape) {
            has_shape = 1;
            if (gp_jlex_peek(l) != '[') gp_jlex_skip(l), has_shape = -1;
            else st = read_shape(path, name, l, &shape);
        } else if (!strcmp(key, "data_offsets") && !off_ok) {
            off_ok = read_offsets(l, begin, end) == 0;
        } else gp_jlex_skip(l); /* unknown fields are ignored, as by the safetensors crate */
        free(key);
    }
    if (!st && !dt)
        st = gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'dtype': missing or not a string", path, name);
    if (!st && gp_dtype_parse(dt, &v->dtype) != 0)
        st = gp_set_error(GP_ERR_UNSUPPORTED, "%s: tensor '%s': field 'dtype': unsupported dtype '%s'", path, name, dt);
    free(dt);
    if (st) return st;
    if (has_shape != 1)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'shape': missing or not an array", path, name);
    v->ndim = shape.ndim;
    v->n_elems = shape.n_elems;
    memcpy(v->shape, shape.shape, sizeof v->shape);
    if (__builtin_mul_overflow(v->n_elems, (uint64_t)gp_dtype_size(v->dtype), &v->nbytes))
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'shape': byte size overflows", path, name);
    if (!off_ok)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': not [begin, end] integers", path,
                            name);
    if (*begin > *end)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': begin %" PRIu64 " > end %" PRIu64,
                            path, name, *begin, *end);
    if (*end - *begin != v->nbytes)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': span of %" PRIu64 " bytes, but "
                            "shape x dtype %s is %" PRIu64 " bytes", path, name, *end - *begin,
                            gp_dtype_name(v->dtype), v->nbytes);
    return GP_OK;
}

typedef struct span {
    uint64_t begin, end;
    int32_t i;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads the __metadata__ object (string -> string) at the cursor into meta [2 * n_meta] (key, value pairs). */
static gp_status parse_meta(const char *path, gp_jlex *l, char ***out, int32_t *out_n) {
    if (gp_jlex_peek(l) == 'n' && l->n - l->i >= 4 && !memcmp(l->s + l->i, "null", 4)) {
        l->i += 4; /* "__metadata__": null (mlx.core.save_safetensors without metadata): none */
        return GP_OK;
    }
    if (gp_jlex_peek(l) != '{') return gp_set_error(GP_ERR_FORMAT, "%s: field '__metadata__': not an object", path);
    gp_jlex_eat(l, '{');
    char **meta = NULL;
    int32_t n = 0, cap = 0;
    gp_status st = GP_OK;
    while (!st && !gp_jlex_eat(l, '}')) {
        gp_jlex_eat(l, ',');
        if (n == cap) {
            char **m = gp_realloc(meta, 2 * ((size_t)(cap = cap ? 2 * cap : 8)) + 1, sizeof *meta);
            if (!m) {
                st = GP_ERR_NOMEM;
                break;
            }
            meta = m;
        }
        char *k = NULL, *v = NULL;
        int r = gp_jlex_string(l, &k);
        gp_jlex_eat(l, ':');
        int rv = r ? -1 : gp_jlex_string(l, &v);
        if (r == -2 || rv == -2) st = GP_ERR_NOMEM;
        else if (r) st = gp_set_error(GP_ERR_FORMAT, "%s: field '__metadata__': a key holds a NUL", path);
        else if (rv)
            st = gp_set_error(GP_ERR_FORMAT, "%s: field '__metadata__': value of '%s' is not a string", path, k);
        if (st) {
            free(k);
            free(v);
            break;
        }
        meta[2 * n] = k;
        meta[2 * n + 1] = v;
        n++;
    }
    if (st) {
        free_meta(meta, n);
        return st;
    }
    *out = meta;
    *out_n = n;
    return GP_OK;
}

/* Sorted by begin, the spans must tile [0, data_len) exactly. */
static gp_status check_tiling(const char *path, const gp_tensor_view *t, span *sp, int32_t n, uint64_t data_len) {
    qsort(sp, (size_t)n, sizeof *sp, cmp_span);
    uint64_t at = 0;
    for (int32_t k = 0; k < n; k++) {
        if (sp[k].begin != at) {
            const char *prev = k ? t[sp[k - 1].i].name : NULL;
            if (sp[k].begin > at)
                return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': gap of %" PRIu64 " bytes "
                                    "before it (previous tensor %s%s%s ends at %" PRIu64 ")", path, t[sp[k].i].name,
                                    sp[k].begin - at, prev ? "'" : "", prev ? prev : "none", prev ? "'" : "", at);
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': [%" PRIu64 ", %" PRIu64 ") "
                                "overlaps tensor '%s' (ends at %" PRIu64 ")", path, t[sp[k].i].name, sp[k].begin,
                                sp[k].end, prev, at);
        }
        at = sp[k].end;
    }
    if (at != data_len)
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'data_offsets': tensors cover %" PRIu64 " bytes but the data "
                            "section is %" PRIu64 " bytes", path, at, data_len);
    return GP_OK;
}

/* Parses and checks the header of a mapped file whose data section is data_len bytes at data; on success returns
 * GP_OK with the views (file pointer not set yet) and, if want_meta, the metadata pairs.  The header is checked by
 * a scan that allocates nothing, then streamed: memory grows with the tensors kept (~150 bytes each, no JSON tree),
 * so a header of N bytes never costs much more than N. */
static gp_status parse_header(const char *path, const char *hdr, size_t hlen, const uint8_t *data, uint64_t data_len,
                              gp_tensor_view **out_t, int32_t *out_n, char ***out_meta, int32_t *out_n_meta) {
    int trailing = 0;
    char first = 0;
    if (gp_json_check(path, "header", hdr, hlen, &trailing, &first)) {
        if (trailing) return gp_set_error(GP_ERR_FORMAT, "%s: field 'header': trailing bytes after the JSON object", path);
        return GP_ERR_FORMAT;
    }
    if (first != '{') return gp_set_error(GP_ERR_FORMAT, "%s: field 'header': JSON is not an object", path);
    gp_jlex l = {hdr, hlen, 0};
    gp_jlex_eat(&l, '{');
    gp_status st = GP_OK;
    gp_tensor_view *t = NULL;
    span *sp = NULL;
    char **meta = NULL;
    int32_t n = 0, cap = 0, n_meta = 0;
    int has_meta = 0;
    while (!st && !gp_jlex_eat(&l, '}')) {
        char *name = NULL;
        gp_jlex_eat(&l, ',');
        int r = gp_jlex_string(&l, &name);
        gp_jlex_eat(&l, ':');
        if (r) {
            st = r == -2 ? GP_ERR_NOMEM : gp_set_error(GP_ERR_FORMAT, "%s: field 'header': a name holds a NUL", path);
            break;
        }
        if (!strcmp(name, "__metadata__")) {
            st = has_meta ? gp_set_error(GP_ERR_FORMAT, "%s: field '__metadata__': appears twice", path)
                          : parse_meta(path, &l, &meta, &n_meta);
            has_meta = 1;
            free(name);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            gp_tensor_view *t2 = gp_realloc(t, (size_t)cap + 1, sizeof *t);
            if (t2) t = t2;
            span *s2 = gp_realloc(sp, (size_t)cap + 1, sizeof *sp);
            if (s2) sp = s2;
            if (!t2 || !s2) {
                free(name);
                st = GP_ERR_NOMEM;
                break;
            }
        }
        gp_tensor_view *v = &t[n];
        memset(v, 0, sizeof *v);
        if ((st = parse_entry(path, name, &l, v, &sp[n].begin, &sp[n].end)) == GP_OK && sp[n].end > data_len)
            st = gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets': end %" PRIu64 " is past the "
                              "data section (%" PRIu64 " bytes)", path, name, sp[n].end, data_len);
        if (st) {
            free(name);
            break;
        }
        v->name = name;
        v->data = data + sp[n].begin;
        sp[n].i = n;
        n++;
    }
    if (!st && !t && !(t = gp_calloc(1, sizeof *t))) st = GP_ERR_NOMEM;
    if (!st) st = check_tiling(path, t, sp, n, data_len);
    free(sp);
    if (st != GP_OK) {
        free_views(t, n);
        free_meta(meta, n_meta);
        return st;
    }
    *out_t = t;
    *out_n = n;
    if (out_meta) *out_meta = meta;
    else free_meta(meta, n_meta);
    if (out_n_meta) *out_n_meta = out_meta ? n_meta : 0;
    return GP_OK;
}

/* Maps and validates path and appends its tensors to s (unsorted); on failure s is unchanged. */
static gp_status st_add_file(gp_st_set *s, const char *path) {
    int fd;
    gp_status os = gp_open_regular(path, &fd); /* never blocks on a FIFO */
    if (os) return os;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return gp_set_error(GP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'header length': file is %" PRIu64 " bytes, shorter than the "
                            "8-byte header length", path, size);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return gp_set_error(GP_ERR_NOMEM, "%s: file of %" PRIu64 " bytes cannot be mapped", path, size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return gp_set_error(GP_ERR_IO, "%s: cannot mmap: %s", path, strerror(map_errno));

    const uint8_t *b = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    gp_status st;
    gp_tensor_view *t = NULL;
    int32_t n = 0, n_meta = 0;
    char **meta = NULL, *pathc = NULL;
    st_file *files = NULL;
    if (hlen > GP_ST_MAX_HEADER) {
        st = gp_set_error(GP_ERR_FORMAT, "%s: field 'header length': %" PRIu64 " bytes, over the limit of %u", path,
                          hlen, GP_ST_MAX_HEADER);
        goto fail;
    }
    if (hlen > size - 8) {
        st = gp_set_error(GP_ERR_FORMAT, "%s: field 'header length': %" PRIu64 " bytes, past the end of the file "
                          "(%" PRIu64 " bytes)", path, hlen, size);
        goto fail;
    }
    st = parse_header(path, (const char *)b + 8, (size_t)hlen, b + 8 + hlen, size - 8 - hlen, &t, &n,
                      s->n_files ? NULL : &meta, s->n_files ? NULL : &n_meta);
    if (st != GP_OK) goto fail;
    if (!(pathc = gp_strdup(path)) || !(files = gp_realloc(s->files, (size_t)s->n_files + 1, sizeof *files))) {
        st = GP_ERR_NOMEM;
        goto fail;
    }
    s->files = files; /* grown; harmless if the next step fails */
    gp_tensor_view *all = gp_realloc(s->t, (size_t)s->n + (size_t)n + 1, sizeof *all);
    if (!all) {
        st = GP_ERR_NOMEM;
        goto fail;
    }
    s->t = all;
    for (int32_t i = 0; i < n; i++) {
        t[i].file = pathc;
        all[s->n + i] = t[i];
        s->total += t[i].nbytes;
    }
    s->n += n;
    free(t); /* the names moved into s->t */
    s->files[s->n_files++] = (st_file){pathc, map, (size_t)size};
    if (meta) s->meta = meta, s->n_meta = n_meta;
    return GP_OK;
fail:
    free(pathc);
    free_views(t, n);
    free_meta(meta, n_meta);
    munmap(map, (size_t)size);
    return st;
}

/* Sorts the views by name and rejects duplicates (within a file or across shards). */
static gp_status st_finish(gp_st_set *s) {
    qsort(s->t, (size_t)s->n, sizeof *s->t, cmp_view_name);
    for (int32_t i = 1; i < s->n; i++)
        if (!strcmp(s->t[i - 1].name, s->t[i].name)) {
            if (s->t[i - 1].file == s->t[i].file)
                return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': duplicate tensor name in the header",
                                    s->t[i].file, s->t[i].name);
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': also in shard %s", s->t[i].file, s->t[i].name,
                                s->t[i - 1].file);
        }
    return GP_OK;
}

gp_status gp_st_open_file(const char *path, gp_st_set **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_open_file: out is NULL");
    *out = NULL;
    if (!path) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_open_file: path is NULL");
    gp_st_set *s = gp_calloc(1, sizeof *s);
    if (!s) return GP_ERR_NOMEM;
    gp_status st = st_add_file(s, path);
    if (st == GP_OK) st = st_finish(s);
    if (st != GP_OK) {
        gp_st_close(s);
        return st;
    }
    *out = s;
    return GP_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* sharded folders                                                                                             */
/* ---------------------------------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static gp_status open_index(const char *dir, const char *ipath, gp_st_set *s) {
    char *text = NULL, *spath = NULL;
    const char **shards = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    gp_status st = gp_read_file(ipath, GP_ST_MAX_INDEX, &text, &len);
    if (st != GP_OK) return st;
    st = gp_json_parse(ipath, text, len, (size_t)16 * GP_ST_MAX_INDEX, GP_JSON_NO_DUP_KEYS, &root);
    free(text);
    if (st == GP_ERR_FORMAT && !strstr(gp_errmsg(), "appears twice"))
        st = gp_set_error(GP_ERR_FORMAT, "%s: field 'weight_map': file is not valid JSON (%s)", ipath, gp_errmsg());
    if (st) goto done;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        st = gp_set_error(GP_ERR_FORMAT, "%s: field 'weight_map': missing or not an object", ipath);
        goto done;
    }
    int n = cJSON_GetArraySize(wm), n_sh = 0;
    if (!(shards = gp_calloc((size_t)n + 1, sizeof *shards))) {
        st = GP_ERR_NOMEM;
        goto done;
    }
    for (const cJSON *e = wm->child; e; e = e->next) {
        const char *f = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!f || !*f || strchr(f, '/') || strstr(f, "..")) {
            st = gp_set_error(GP_ERR_FORMAT, "%s: field 'weight_map': tensor '%s': shard %s%s%s is not a plain file "
                              "name", ipath, e->string, f ? "'" : "", f ? f : "(not a string)", f ? "'" : "");
            goto done;
        }
        shards[n_sh++] = f;
    }
    qsort(shards, (size_t)n_sh, sizeof *shards, cmp_str);
    int k = 0;
    for (int i = 0; i < n_sh; i++)
        if (!k || strcmp(shards[k - 1], shards[i])) shards[k++] = shards[i];
    for (int i = 0; i < k; i++) {
        if (!(spath = gp_path_join(dir, shards[i]))) {
            st = GP_ERR_NOMEM;
            goto done;
        }
        if (!gp_file_exists(spath)) {
            st = gp_set_error(GP_ERR_MISSING, "%s: field 'weight_map': shard '%s' is missing (%s)", ipath, shards[i],
                              spath);
            goto done;
        }
        if ((st = st_add_file(s, spath)) != GP_OK) goto done;
        free(spath);
        spath = NULL;
    }
    if ((st = st_finish(s)) != GP_OK) goto done;
    for (const cJSON *e = wm->child; e; e = e->next) {
        const gp_tensor_view *v = gp_st_find(s, e->string);
        const char *base = v ? strrchr(v->file, '/') : NULL;
        base = base ? base + 1 : v ? v->file : NULL;
        if (!v || strcmp(base, e->valuestring)) {
            st = gp_set_error(GP_ERR_MISSING, "%s: field 'weight_map': tensor '%s' is not in shard '%s'%s%s", ipath,
                              e->string, e->valuestring, v ? " but in " : "", v ? v->file : "");
            goto done;
        }
    }
done:
    free(spath);
    free(shards);
    cJSON_Delete(root);
    return st;
}

gp_status gp_st_open_dir(const char *dir, gp_st_set **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_open_dir: out is NULL");
    *out = NULL;
    if (!dir) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_open_dir: dir is NULL");
    char *single = gp_path_join(dir, "model.safetensors");
    if (!single) return GP_ERR_NOMEM;
    if (gp_file_exists(single)) {
        gp_status st = gp_st_open_file(single, out);
        free(single);
        return st;
    }
    free(single);
    char *ipath = gp_path_join(dir, "model.safetensors.index.json");
    if (!ipath) return GP_ERR_NOMEM;
    if (!gp_file_exists(ipath)) {
        free(ipath);
        return gp_set_error(GP_ERR_MISSING, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    gp_st_set *s = gp_calloc(1, sizeof *s);
    gp_status st = s ? open_index(dir, ipath, s) : GP_ERR_NOMEM;
    free(ipath);
    if (st != GP_OK) {
        gp_st_close(s);
        return st;
    }
    *out = s;
    return GP_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* writer                                                                                                      */
/* ---------------------------------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)k < b->cap) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 64) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
}

/* Appends s as a JSON string literal. */
static void sb_json_str(sbuf *b, const char *s) {
    sb_printf(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') sb_printf(b, "\\%c", *c);
        else if (*c < 0x20) sb_printf(b, "\\u%04x", *c);
        else sb_printf(b, "%c", *c);
    }
    sb_printf(b, "\"");
}

static int write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

#define ST_STREAM_CHUNK ((size_t)4 << 20)

static gp_status st_write_impl(const char *path, const gp_st_write_tensor *tensors, int32_t n,
                               const char *const *meta_keys, const char *const *meta_values, int32_t n_meta,
                               gp_st_fill_fn fill, void *user) {
    if (!path) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_write: path is NULL");
    if (n < 0 || (n && !tensors) || n_meta < 0 || (n_meta && (!meta_keys || !meta_values)))
        return gp_set_error(GP_ERR_INVALID_ARG, "%s: bad tensor or metadata count/arrays", path);
    uint64_t *nbytes = gp_calloc((size_t)n + 1, sizeof *nbytes);
    if (!nbytes) return GP_ERR_NOMEM;
    gp_status st = GP_OK;
    sbuf b = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    for (int32_t i = 0; i < n && st == GP_OK; i++) {
        const gp_st_write_tensor *t = &tensors[i];
        uint64_t e = gp_dtype_size(t->dtype);
        if (!t->name || !strcmp(t->name, "__metadata__") || !e || t->ndim < 0 || t->ndim > GP_MAX_DIMS)
            st = gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor %d ('%s'): bad name, dtype or ndim", path, i,
                              t->name ? t->name : "(null)");
        for (int d = 0; st == GP_OK && d < t->ndim; d++)
            if (t->shape[d] < 0 || (double)t->shape[d] > MAX_JSON_INT || __builtin_mul_overflow(e, t->shape[d], &e))
                st = gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor '%s': field 'shape': bad dimension %d", path,
                                  t->name, d);
        if (st == GP_OK && e && !t->data && !fill)
            st = gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor '%s': data is NULL", path, t->name);
        for (int32_t j = 0; st == GP_OK && j < i; j++)
            if (!strcmp(tensors[j].name, t->name))
                st = gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor '%s': name given twice", path, t->name);
        nbytes[i] = e;
    }
    for (int32_t i = 0; st == GP_OK && i < n_meta; i++)
        if (!meta_keys[i] || !meta_values[i])
            st = gp_set_error(GP_ERR_INVALID_ARG, "%s: field '__metadata__': entry %d is NULL", path, i);
    if (st != GP_OK) goto done;

    /* header: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...} */
    sb_printf(&b, "{");
    if (n_meta) {
        sb_printf(&b, "\"__metadata__\":{");
        for (int32_t i = 0; i < n_meta; i++) {
            if (i) sb_printf(&b, ",");
            sb_json_str(&b, meta_keys[i]);
            sb_printf(&b, ":");
            sb_json_str(&b, meta_values[i]);
        }
        sb_printf(&b, "}");
    }
    uint64_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        const gp_st_write_tensor *t = &tensors[i];
        sb_printf(&b, "%s", n_meta || i ? "," : "");
        sb_json_str(&b, t->name);
        sb_printf(&b, ":{\"dtype\":\"%s\",\"shape\":[", gp_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) sb_printf(&b, "%s%" PRId64, d ? "," : "", t->shape[d]);
        if (__builtin_add_overflow(off, nbytes[i], &off)) b.oom = 1;
        sb_printf(&b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off - nbytes[i], off);
    }
    sb_printf(&b, "}");
    while (!b.oom && b.len % 8) sb_printf(&b, " "); /* pad so the data section starts 8-aligned */
    if (b.oom || b.len > GP_ST_MAX_HEADER) {
        st = gp_set_error(GP_ERR_NOMEM, "%s: header too large or out of memory", path);
        goto done;
    }

    if (!(tmp = gp_malloc(strlen(path) + 16, 1))) {
        st = GP_ERR_NOMEM;
        goto done;
    }
    sprintf(tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = gp_set_error(GP_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    fchmod(fd, 0644);
    if (!(f = fdopen(fd, "wb"))) {
        close(fd);
        st = gp_set_error(GP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        goto done;
    }
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
    int ok = write_all(f, le, 8) && write_all(f, b.p, b.len);
    if (!fill) {
        for (int32_t i = 0; ok && i < n; i++) ok = write_all(f, tensors[i].data, (size_t)nbytes[i]);
    } else {
        /* stream each tensor through a bounded buffer: the caller's data never has to exist in memory at once */
        uint8_t *chunk = gp_malloc(ST_STREAM_CHUNK, 1);
        if (!chunk) ok = 0;
        for (int32_t i = 0; ok && i < n; i++)
            for (uint64_t o = 0; ok && o < nbytes[i]; o += ST_STREAM_CHUNK) {
                size_t len = nbytes[i] - o < ST_STREAM_CHUNK ? (size_t)(nbytes[i] - o) : ST_STREAM_CHUNK;
                gp_status fs = fill(user, i, o, chunk, len);
                if (fs != GP_OK) {
                    st = fs;
                    ok = 0;
                } else ok = write_all(f, chunk, len);
            }
        free(chunk);
    }
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    f = NULL;
    if (!ok) {
        if (st == GP_OK) st = gp_set_error(GP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    } else if (rename(tmp, path) != 0) st = gp_set_error(GP_ERR_IO, "%s: cannot rename into place: %s", path,
                                                      strerror(errno));
done:
    if (tmp && st != GP_OK) unlink(tmp);
    free(tmp);
    free(b.p);
    free(nbytes);
    return st;
}

gp_status gp_st_write(const char *path, const gp_st_write_tensor *tensors, int32_t n, const char *const *meta_keys,
                      const char *const *meta_values, int32_t n_meta) {
    return st_write_impl(path, tensors, n, meta_keys, meta_values, n_meta, NULL, NULL);
}

gp_status gp_st_write_stream(const char *path, const gp_st_write_tensor *tensors, int32_t n,
                             const char *const *meta_keys, const char *const *meta_values, int32_t n_meta,
                             gp_st_fill_fn fill, void *user) {
    if (!fill) return gp_set_error(GP_ERR_INVALID_ARG, "gp_st_write_stream: fill is NULL");
    return st_write_impl(path, tensors, n, meta_keys, meta_values, n_meta, fill, user);
}

/* Pins every mapped file in RAM (mlock); all or nothing.  The message of a refusal gives the bytes needed and
 * RLIMIT_MEMLOCK. */
gp_status gp_st_mlock(const gp_st_set *s) {
    uint64_t total = 0;
    for (int32_t i = 0; i < s->n_files; i++) total += s->files[i].len;
    for (int32_t i = 0; i < s->n_files; i++) {
        if (!s->files[i].map || mlock(s->files[i].map, s->files[i].len) == 0) continue;
        int err = errno;
        for (int32_t j = 0; j < i; j++)
            if (s->files[j].map) munlock(s->files[j].map, s->files[j].len);
        struct rlimit rl;
        char lim[64] = "unknown";
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, sizeof lim, "unlimited");
            else snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
        }
        return gp_set_error(GP_ERR_UNSUPPORTED, "mlock: cannot pin the weights (%llu bytes in %d file(s), %s: %s); "
                            "RLIMIT_MEMLOCK is %s (raise it with `ulimit -l`, or run with CAP_IPC_LOCK)",
                            (unsigned long long)total, (int)s->n_files, s->files[i].path, strerror(err), lim);
    }
    return GP_OK;
}
