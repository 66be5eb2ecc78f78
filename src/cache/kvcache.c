/* kvcache.c — KV cache storage: rings of slots per layer (plain, sliding-window or rotating with pinned positions),
 * float32 or affine-quantized rows, copy-on-write forks, trim, and cache files. */
#include "cache/kvcache.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_FORMAT "genparity.kvcache"
#define CACHE_VERSION "1"

static int32_t n_groups(const gp_kv_params *p, int32_t kvd) { return p->bits ? (kvd + p->group - 1) / p->group : 0; }
static int32_t row_bytes(const gp_kv_params *p, int32_t kvd) { return p->bits ? (kvd * p->bits + 7) / 8 : 0; }

gp_status gp_cache_create(const char *name, const gp_kv_params *p, int32_t n_layers, int32_t kvd, const int32_t *window,
                          gp_cache **out) {
    *out = NULL;
    if (p->max_kv_size < 0 || p->keep < 0 || (p->max_kv_size > 0 && p->keep >= p->max_kv_size))
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: need 0 <= keep < max_kv_size (got keep %d, max_kv_size %d)",
                            p->keep, p->max_kv_size);
    if (p->bits != 0 && p->bits != 4 && p->bits != 8)
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: kv_bits must be 4 or 8 (got %d)", p->bits);
    if (p->bits && p->group != 32 && p->group != 64 && p->group != 128)
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: kv_group_size must be 32, 64 or 128 (got %d)", p->group);
    if (p->q_start < 0) return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: quantized_kv_start must be >= 0");
    gp_cache *c = gp_calloc(1, sizeof *c);
    if (!c) return GP_ERR_NOMEM;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    c->p = *p;
    c->n_layers = n_layers;
    c->kvd = kvd;
    c->L = gp_calloc((size_t)n_layers, sizeof *c->L);
    if (!c->L) {
        free(c);
        return GP_ERR_NOMEM;
    }
    for (int32_t l = 0; l < n_layers; l++) {
        gp_kv_layer *L = &c->L[l];
        int32_t w = window[l];
        if (p->max_kv_size > 0 && (w == 0 || w > p->max_kv_size - p->keep)) {
            L->keep = p->keep;
            L->window = p->max_kv_size - p->keep;
            L->cap_max = p->max_kv_size;
        } else {
            L->window = w;
            L->cap_max = w > 0 && w < p->n_ctx ? w : p->n_ctx;
        }
    }
    *out = c;
    return GP_OK;
}

static void store_unref(kv_store *s) {
    if (!s || --s->refs > 0) return;
    free(s->f);
    free(s->q);
    free(s->scale);
    free(s->minv);
    free(s);
}

void gp_cache_destroy(gp_cache *c) {
    if (!c) return;
    for (int32_t l = 0; l < c->n_layers; l++) {
        store_unref(c->L[l].k);
        store_unref(c->L[l].v);
    }
    free(c->L);
    free(c->ids);
    free(c);
}

/* Grows (or creates) a store from (old_cap, old_nf) slots to (cap, nf), keeping slot contents. */
static gp_status store_grow(kv_store **ps, const gp_kv_params *p, int32_t kvd, int32_t cap, int32_t nf) {
    kv_store *s = *ps;
    if (!s) {
        if (!(s = gp_calloc(1, sizeof *s))) return GP_ERR_NOMEM;
        s->refs = 1;
        *ps = s;
    }
    if (nf > 0) {
        float *f = gp_realloc(s->f, (size_t)nf * (size_t)kvd, sizeof(float));
        if (!f) return GP_ERR_NOMEM;
        s->f = f;
    }
    if (p->bits) {
        size_t rb = (size_t)row_bytes(p, kvd), ng = (size_t)n_groups(p, kvd);
        uint8_t *q = gp_realloc(s->q, (size_t)cap * rb, 1);
        if (!q) return GP_ERR_NOMEM;
        s->q = q;
        float *sc = gp_realloc(s->scale, (size_t)cap * ng, sizeof(float));
        if (!sc) return GP_ERR_NOMEM;
        s->scale = sc;
        float *mn = gp_realloc(s->minv, (size_t)cap * ng, sizeof(float));
        if (!mn) return GP_ERR_NOMEM;
        s->minv = mn;
    }
    return GP_OK;
}

/* Float32 slots a layer of cap slots needs. */
static int32_t f32_slots(const gp_kv_params *p, int32_t cap) {
    if (!p->bits) return cap;
    return p->q_start < cap ? p->q_start : cap;
}

gp_status gp_cache_reserve(gp_cache *c, int32_t n_total) {
    if (c->p.max_kv_size == 0 && n_total > c->p.n_ctx)
        return gp_set_error(GP_ERR_RANGE, "KV cache '%s': %d positions exceed n_ctx = %d", c->name, n_total, c->p.n_ctx);
    for (int32_t l = 0; l < c->n_layers; l++) {
        gp_kv_layer *L = &c->L[l];
        int32_t need = n_total < L->cap_max ? n_total : L->cap_max;
        if (L->cap >= need) continue;
        int64_t grow = (int64_t)L->cap * 2;
        int32_t cap = (int32_t)(grow > need ? (grow < L->cap_max ? grow : L->cap_max) : need);
        int32_t nf = f32_slots(&c->p, cap);
        /* growing a shared store would change the other cache's buffer: copy first (caller wrote nothing yet) */
        gp_status s;
        if (((L->k && L->k->refs > 1) || (L->v && L->v->refs > 1)) && (s = gp_cache_unshare(c, l))) return s;
        if ((s = store_grow(&L->k, &c->p, c->kvd, cap, nf)) || (s = store_grow(&L->v, &c->p, c->kvd, cap, nf)))
            return gp_set_error(GP_ERR_NOMEM, "KV cache '%s': out of memory growing layer %d to %d positions", c->name,
                                l, cap);
        L->cap = cap;
        L->n_f = nf;
    }
    return GP_OK;
}

gp_status gp_cache_push_ids(gp_cache *c, const int32_t *ids, int32_t n) {
    if (c->n_past + n > c->ids_cap) {
        int32_t cap = c->ids_cap ? c->ids_cap : 64;
        while (cap < c->n_past + n) cap *= 2;
        int32_t *v = gp_realloc(c->ids, (size_t)cap, sizeof *v);
        if (!v) return GP_ERR_NOMEM;
        c->ids = v;
        c->ids_cap = cap;
    }
    if (n) memcpy(c->ids + c->n_past, ids, (size_t)n * sizeof *ids);
    return GP_OK;
}

/* Gives layer l its own copy of shared stores (copy-on-write). */
gp_status gp_cache_unshare(gp_cache *c, int32_t l) {
    gp_kv_layer *L = &c->L[l];
    kv_store **ss[2] = {&L->k, &L->v};
    for (int i = 0; i < 2; i++) {
        kv_store *s = *ss[i];
        if (!s || s->refs == 1) continue;
        kv_store *d = gp_calloc(1, sizeof *d);
        if (!d) return GP_ERR_NOMEM;
        d->refs = 1;
        size_t nf = (size_t)L->n_f * (size_t)c->kvd, rb = (size_t)row_bytes(&c->p, c->kvd) * (size_t)L->cap;
        size_t ng = (size_t)n_groups(&c->p, c->kvd) * (size_t)L->cap;
        int ok = 1;
        if (nf && (d->f = gp_malloc(nf, sizeof(float)))) memcpy(d->f, s->f, nf * sizeof(float));
        else ok &= !nf;
        if (c->p.bits) {
            d->q = gp_malloc(rb, 1);
            d->scale = gp_malloc(ng, sizeof(float));
            d->minv = gp_malloc(ng, sizeof(float));
            ok &= d->q && d->scale && d->minv;
            if (ok) {
                memcpy(d->q, s->q, rb);
                memcpy(d->scale, s->scale, ng * sizeof(float));
                memcpy(d->minv, s->minv, ng * sizeof(float));
            }
        }
        if (!ok) {
            d->refs = 1;
            store_unref(d);
            return gp_set_error(GP_ERR_NOMEM, "KV cache '%s': out of memory copying a forked layer", c->name);
        }
        s->refs--;
        *ss[i] = d;
    }
    return GP_OK;
}

/* Affine quantization of row [kvd] into slot: per group, q = round((x - min) / scale). */
static void quantize_row(const gp_kv_params *p, int32_t kvd, const float *x, uint8_t *q, float *scale, float *minv) {
    const int32_t G = p->group, ng = n_groups(p, kvd), qmax = (1 << p->bits) - 1;
    memset(q, 0, (size_t)row_bytes(p, kvd));
    for (int32_t g = 0; g < ng; g++) {
        int32_t a = g * G, b = a + G < kvd ? a + G : kvd;
        float lo = x[a], hi = x[a];
        for (int32_t i = a + 1; i < b; i++) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
        }
        float s = (hi - lo) / (float)qmax;
        scale[g] = s;
        minv[g] = lo;
        for (int32_t i = a; i < b; i++) {
            int32_t v = s > 0 ? (int32_t)lrintf((x[i] - lo) / s) : 0;
            v = v < 0 ? 0 : v > qmax ? qmax : v;
            if (p->bits == 8) q[i] = (uint8_t)v;
            else q[i / 2] |= (uint8_t)(v << ((i & 1) * 4));
        }
    }
}

gp_status gp_cache_write(gp_cache *c, int32_t l, int32_t j, const float *k, const float *v) {
    gp_kv_layer *L = &c->L[l];
    if ((L->k->refs > 1 || L->v->refs > 1)) {
        gp_status s = gp_cache_unshare(c, l);
        if (s) return s;
    }
    int32_t slot = gp_kv_slot(L, j);
    const float *src[2] = {k, v};
    kv_store *dst[2] = {L->k, L->v};
    for (int i = 0; i < 2; i++) {
        if (!c->p.bits || j < c->p.q_start) {
            memcpy(dst[i]->f + (size_t)slot * c->kvd, src[i], (size_t)c->kvd * sizeof(float));
        } else {
            size_t ng = (size_t)n_groups(&c->p, c->kvd);
            quantize_row(&c->p, c->kvd, src[i], dst[i]->q + (size_t)slot * row_bytes(&c->p, c->kvd),
                         dst[i]->scale + (size_t)slot * ng, dst[i]->minv + (size_t)slot * ng);
        }
    }
    return GP_OK;
}

gp_kv_view gp_cache_view(const gp_cache *c, int32_t l, int values) {
    const kv_store *s = values ? c->L[l].v : c->L[l].k;
    gp_kv_view v = {0};
    v.kvd = c->kvd;
    v.bits = c->p.bits;
    v.group = c->p.group;
    v.n_groups = n_groups(&c->p, c->kvd);
    v.row_bytes = row_bytes(&c->p, c->kvd);
    v.q_start = c->p.bits ? c->p.q_start : INT32_MAX;
    if (s) {
        v.f = s->f;
        v.q = s->q;
        v.scale = s->scale;
        v.minv = s->minv;
    }
    return v;
}

gp_status gp_cache_trim(gp_cache *c, int32_t n) {
    if (n < 0 || n > c->n_past)
        return gp_set_error(GP_ERR_RANGE, "KV cache '%s': cannot trim to %d of %d positions", c->name, n, c->n_past);
    for (int32_t l = 0; l < c->n_layers && n < c->n_past; l++) {
        const gp_kv_layer *L = &c->L[l];
        if (c->n_past <= L->cap) continue; /* never wrapped: every position is still in its slot */
        /* slots hold positions >= n_past - (cap - keep); position n would attend back to n - window + 1 */
        int32_t oldest = c->n_past - (L->cap - L->keep), need = n - L->window + 1;
        if (need < L->keep) need = L->keep;
        if (need < oldest)
            return gp_set_error(GP_ERR_STATE,
                                "KV cache '%s': layer %d's ring has already evicted positions needed after trimming to "
                                "%d; recompute instead",
                                c->name, l, n);
    }
    c->n_past = n;
    return GP_OK;
}

gp_status gp_cache_fork(const gp_cache *src, const char *name, gp_cache **out) {
    *out = NULL;
    gp_cache *c = gp_calloc(1, sizeof *c);
    if (!c) return GP_ERR_NOMEM;
    *c = *src;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->L = gp_malloc((size_t)src->n_layers, sizeof *c->L);
    c->ids = gp_malloc((size_t)(src->ids_cap ? src->ids_cap : 1), sizeof *c->ids);
    if (!c->L || !c->ids) {
        free(c->L);
        free(c->ids);
        free(c);
        return GP_ERR_NOMEM;
    }
    memcpy(c->L, src->L, (size_t)src->n_layers * sizeof *c->L);
    if (src->n_past) memcpy(c->ids, src->ids, (size_t)src->n_past * sizeof *c->ids); /* ids may be NULL when empty */
    for (int32_t l = 0; l < c->n_layers; l++) {
        if (c->L[l].k) c->L[l].k->refs++;
        if (c->L[l].v) c->L[l].v->refs++;
    }
    *out = c;
    return GP_OK;
}

uint64_t gp_cache_bytes(const gp_cache *c) {
    uint64_t b = 0;
    uint64_t rb = (uint64_t)row_bytes(&c->p, c->kvd), ng = (uint64_t)n_groups(&c->p, c->kvd);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const gp_kv_layer *L = &c->L[l];
        b += 2 * ((uint64_t)L->n_f * c->kvd * sizeof(float) + (uint64_t)L->cap * (rb + 2 * ng * sizeof(float)));
    }
    return b;
}

/* ---- files ---- */

gp_status gp_cache_save(const gp_cache *c, const char *path, const char *const *keys, const char *const *vals,
                        int32_t n_meta) {
    int32_t nt = 1 + c->n_layers * 8, k = 0;
    gp_st_write_tensor *t = gp_calloc((size_t)nt, sizeof *t);
    char (*names)[64] = gp_calloc((size_t)nt, sizeof *names);
    int32_t nm = n_meta + 12;
    const char **mk = gp_calloc((size_t)nm, sizeof *mk), **mv = gp_calloc((size_t)nm, sizeof *mv);
    char num[12][32];
    if (!t || !names || !mk || !mv) {
        free(t);
        free(names);
        free(mk);
        free(mv);
        return GP_ERR_NOMEM;
    }
    int32_t one = 0;
    t[k++] = (gp_st_write_tensor){.name = "token_ids", .dtype = GP_DTYPE_I32, .ndim = 1, .shape = {c->n_past},
                                  .data = c->n_past ? (const void *)c->ids : (const void *)&one};
    int32_t rb = row_bytes(&c->p, c->kvd), ng = n_groups(&c->p, c->kvd);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const gp_kv_layer *L = &c->L[l];
        const kv_store *ss[2] = {L->k, L->v};
        for (int i = 0; i < 2; i++) {
            const kv_store *s = ss[i];
            const char *kv = i ? "v" : "k";
#define ADD(suffix, DT, R, C, PTR)                                                                                   \
    do {                                                                                                             \
        snprintf(names[k], sizeof names[k], "layer.%d.%s.%s", l, kv, suffix);                                        \
        t[k] = (gp_st_write_tensor){.name = names[k], .dtype = DT, .ndim = 2, .shape = {R, C}, .data = PTR};        \
        k++;                                                                                                         \
    } while (0)
            ADD("f32", GP_DTYPE_F32, L->n_f, c->kvd, s && s->f ? (const void *)s->f : (const void *)&one);
            if (c->p.bits) {
                ADD("q", GP_DTYPE_U8, L->cap, rb, s ? (const void *)s->q : (const void *)&one);
                ADD("scale", GP_DTYPE_F32, L->cap, ng, s ? (const void *)s->scale : (const void *)&one);
                ADD("min", GP_DTYPE_F32, L->cap, ng, s ? (const void *)s->minv : (const void *)&one);
            }
#undef ADD
        }
    }
    int32_t m = 0;
    const char *fk[] = {"format", "version", "name", "n_past", "n_layers", "kvd", "n_ctx", "max_kv_size", "keep",
                        "kv_bits", "kv_group_size", "quantized_kv_start"};
    int64_t fv[] = {0, 0, 0, c->n_past, c->n_layers, c->kvd, c->p.n_ctx, c->p.max_kv_size, c->p.keep, c->p.bits,
                    c->p.group, c->p.q_start};
    for (int i = 0; i < 12; i++) {
        mk[m] = fk[i];
        if (i == 0) mv[m] = CACHE_FORMAT;
        else if (i == 1) mv[m] = CACHE_VERSION;
        else if (i == 2) mv[m] = c->name;
        else {
            snprintf(num[i], sizeof num[i], "%lld", (long long)fv[i]);
            mv[m] = num[i];
        }
        m++;
    }
    for (int32_t i = 0; i < n_meta; i++, m++) {
        mk[m] = keys[i];
        mv[m] = vals[i];
    }
    gp_status s = gp_st_write(path, t, k, mk, mv, m);
    free(t);
    free(names);
    free(mk);
    free(mv);
    return s;
}

static gp_status meta_int(const gp_st_set *st, const char *path, const char *key, int64_t *out) {
    const char *v = gp_st_metadata(st, key);
    char *end;
    if (!v) return gp_set_error(GP_ERR_FORMAT, "%s: metadata '%s' is missing", path, key);
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < 0 || x > INT32_MAX)
        return gp_set_error(GP_ERR_FORMAT, "%s: metadata '%s' = '%s' is not a valid count", path, key, v);
    *out = x;
    return GP_OK;
}

/* Copies tensor name of shape [rows, cols] and dtype into dst (bytes); absent or mismatched is an error. */
static gp_status load_tensor(const gp_st_set *st, const char *path, const char *name, gp_dtype dt, int64_t rows,
                             int64_t cols, void *dst) {
    const gp_tensor_view *t = gp_st_find(st, name);
    if (!t) return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    if (t->dtype != dt || t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' has the wrong dtype or shape (want %s [%lld, %lld])", path,
                            name, gp_dtype_name(dt), (long long)rows, (long long)cols);
    if (t->nbytes) memcpy(dst, t->data, t->nbytes);
    return GP_OK;
}

gp_status gp_cache_load(const char *path, const char *name, const gp_kv_params *p, int32_t n_layers, int32_t kvd,
                        const int32_t *window, gp_status (*check)(const gp_st_set *st, const char *path, void *ud),
                        void *ud, gp_cache **out) {
    *out = NULL;
    gp_st_set *st;
    gp_status s = gp_st_open_file(path, &st);
    if (s) return s;
    const char *fmt = gp_st_metadata(st, "format"), *ver = gp_st_metadata(st, "version");
    if (!fmt || strcmp(fmt, CACHE_FORMAT)) {
        gp_st_close(st);
        return gp_set_error(GP_ERR_FORMAT, "%s: metadata 'format' is not %s: not a genparity cache file", path,
                            CACHE_FORMAT);
    }
    if (!ver || strcmp(ver, CACHE_VERSION)) {
        /* format the message before closing: ver points into the file's metadata */
        gp_status e = gp_set_error(GP_ERR_UNSUPPORTED, "%s: metadata 'version' = '%s', this build reads version %s",
                                   path, ver ? ver : "(none)", CACHE_VERSION);
        gp_st_close(st);
        return e;
    }
    if (check && (s = check(st, path, ud))) {
        gp_st_close(st);
        return s;
    }
    int64_t v[9];
    const char *keys[] = {"n_past", "n_layers", "kvd", "n_ctx", "max_kv_size", "keep", "kv_bits", "kv_group_size",
                          "quantized_kv_start"};
    for (int i = 0; i < 9; i++)
        if ((s = meta_int(st, path, keys[i], &v[i]))) {
            gp_st_close(st);
            return s;
        }
    int64_t want[] = {-1, n_layers, kvd, -1, p->max_kv_size, p->keep, p->bits, p->group, p->q_start};
    for (int i = 1; i < 9; i++)
        if (i != 3 && v[i] != want[i] && !(i >= 7 && !p->bits && !v[6])) {
            gp_st_close(st);
            return gp_set_error(GP_ERR_STATE, "%s: metadata '%s' = %lld but this context has %lld", path, keys[i],
                                (long long)v[i], (long long)want[i]);
        }
    int32_t n_past = (int32_t)v[0];
    if (p->max_kv_size == 0 && n_past > p->n_ctx) {
        gp_st_close(st);
        return gp_set_error(GP_ERR_RANGE, "%s: the file holds %d positions, over this context's n_ctx = %d", path,
                            n_past, p->n_ctx);
    }
    const gp_tensor_view *ti = gp_st_find(st, "token_ids");
    if (!ti || ti->dtype != GP_DTYPE_I32 || ti->ndim != 1 || ti->shape[0] != n_past) {
        gp_st_close(st);
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor 'token_ids' must be I32 [n_past = %d]", path, n_past);
    }
    gp_cache *c;
    if ((s = gp_cache_create(name, p, n_layers, kvd, window, &c))) {
        gp_st_close(st);
        return s;
    }
    if ((s = gp_cache_reserve(c, n_past > 0 ? n_past : 0)) || (s = gp_cache_push_ids(c, ti->data, n_past))) goto fail;
    for (int32_t l = 0; l < n_layers; l++) {
        gp_kv_layer *L = &c->L[l];
        if (!L->k && (s = store_grow(&L->k, p, kvd, 0, 0))) goto fail;
        if (!L->v && (s = store_grow(&L->v, p, kvd, 0, 0))) goto fail;
        kv_store *ss[2] = {L->k, L->v};
        for (int i = 0; i < 2; i++) {
            char nm[64];
            const char *kv = i ? "v" : "k";
            snprintf(nm, sizeof nm, "layer.%d.%s.f32", l, kv);
            if ((s = load_tensor(st, path, nm, GP_DTYPE_F32, L->n_f, kvd, ss[i]->f))) goto fail;
            if (p->bits) {
                snprintf(nm, sizeof nm, "layer.%d.%s.q", l, kv);
                if ((s = load_tensor(st, path, nm, GP_DTYPE_U8, L->cap, row_bytes(p, kvd), ss[i]->q))) goto fail;
                snprintf(nm, sizeof nm, "layer.%d.%s.scale", l, kv);
                if ((s = load_tensor(st, path, nm, GP_DTYPE_F32, L->cap, n_groups(p, kvd), ss[i]->scale))) goto fail;
                snprintf(nm, sizeof nm, "layer.%d.%s.min", l, kv);
                if ((s = load_tensor(st, path, nm, GP_DTYPE_F32, L->cap, n_groups(p, kvd), ss[i]->minv))) goto fail;
            }
        }
    }
    c->n_past = n_past;
    gp_st_close(st);
    *out = c;
    return GP_OK;
fail:
    gp_cache_destroy(c);
    gp_st_close(st);
    return s;
}
