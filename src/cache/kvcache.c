/* kvcache.c — KV cache storage: rings of slots per layer (plain, sliding-window or rotating with pinned positions),
 * float32, bfloat16 or affine-quantized rows in backend memory, chunk staging and the attention descriptor,
 * copy-on-write forks, trim, and cache files.  The only code that knows the ring and quantized layouts. */
#include "cache/kvcache.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_FORMAT "genparity.kvcache"
#define CACHE_VERSION "1"

/* One layer's keys or values in backend memory. */
typedef struct kv_store {
    int refs;     /* caches sharing this buffer (copy-on-write) */
    float *f;     /* [n_f, kvd] float32 slots (all slots when not quantized) */
    uint8_t *q;   /* [cap, row_bytes] quantized or bfloat16 slots (NULL for float32 rows) */
    float *scale; /* [cap, n_groups] */
    float *minv;  /* [cap, n_groups] */
} kv_store;

typedef struct kv_layer {
    kv_store *k, *v;
    int32_t cap;     /* slots allocated */
    int32_t cap_max; /* slots this layer may ever use */
    int32_t n_f;     /* float32 slots allocated */
    int32_t keep;    /* pinned positions (rotating) */
    int32_t window;  /* 0 = every earlier position visible; else p - j < window (or j < keep) */
} kv_layer;

struct gp_cache {
    char name[64];
    gp_kv_params p;
    gp_backend *be;
    int32_t n_layers, kvd;
    kv_layer *L;          /* [n_layers] */
    int32_t n_past;       /* positions held */
    int32_t *ids;         /* [ids_cap] token ids (host) */
    int32_t ids_cap;
    uint64_t steer_epoch; /* the context's steering epoch when position 0 was written */
    int steer_mixed;      /* positions were written under different steering hooks: never reuse */
    /* the chunk being appended: its float rows are the caller's k/v, its quantized rows are staged here */
    const float *chunk_k, *chunk_v;
    kv_store stage_k, stage_v; /* quantized rows [stage_rows] (bits > 0) */
    int32_t stage_rows;
};

/* bits 16: bfloat16 rows (every position; no groups), stored by rope_qk as float32 rows are (early rows) */
static int32_t n_groups(const gp_kv_params *p, int32_t kvd) {
    return p->bits && p->bits != 16 ? (kvd + p->group - 1) / p->group : 0;
}
static int32_t row_bytes(const gp_kv_params *p, int32_t kvd) { return p->bits ? (kvd * p->bits + 7) / 8 : 0; }
/* positions < q_start are float32 (all of them in a float cache, none in a bfloat16 one) */
static int32_t q_start(const gp_kv_params *p) { return p->bits == 16 ? 0 : p->bits ? p->q_start : INT32_MAX; }
/* positions < direct_end may be stored straight into the cache's rows (float32 or bfloat16: no groups to fit) */
static int32_t direct_end(const gp_kv_params *p) { return p->bits == 16 ? INT32_MAX : q_start(p); }

/* Slot of position j in a layer ring. */
static inline int32_t slot_of(const kv_layer *L, int32_t j) {
    return j < L->keep ? j : L->keep + (j - L->keep) % (L->cap - L->keep);
}

/* The backend view of a store. */
static gp_kv_rows rows_of(const gp_cache *c, const kv_store *s) {
    gp_kv_rows r = {0};
    r.kvd = c->kvd;
    r.bits = c->p.bits;
    r.group = c->p.group;
    r.n_groups = n_groups(&c->p, c->kvd);
    r.row_bytes = row_bytes(&c->p, c->kvd);
    if (s) {
        r.f = s->f;
        r.q = s->q;
        r.scale = s->scale;
        r.minv = s->minv;
    }
    return r;
}

gp_status gp_cache_create(const char *name, const gp_kv_params *p, gp_backend *be, int32_t n_layers, int32_t kvd,
                          const int32_t *window, gp_cache **out) {
    *out = NULL;
    if (p->max_kv_size < 0 || p->keep < 0 || (p->max_kv_size > 0 && p->keep >= p->max_kv_size))
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: need 0 <= keep < max_kv_size (got keep %d, max_kv_size %d)",
                            p->keep, p->max_kv_size);
    if (p->bits != 0 && p->bits != 4 && p->bits != 8 && p->bits != 16)
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: kv_bits must be 4 or 8 (got %d)", p->bits);
    if ((p->bits == 4 || p->bits == 8) && p->group != 32 && p->group != 64 && p->group != 128)
        return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: kv_group_size must be 32, 64 or 128 (got %d)", p->group);
    if (p->q_start < 0) return gp_set_error(GP_ERR_INVALID_ARG, "KV cache: quantized_kv_start must be >= 0");
    gp_cache *c = gp_calloc(1, sizeof *c);
    if (!c) return GP_ERR_NOMEM;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    c->p = *p;
    c->be = be;
    c->n_layers = n_layers;
    c->kvd = kvd;
    c->L = gp_calloc((size_t)n_layers, sizeof *c->L);
    if (!c->L) {
        free(c);
        return GP_ERR_NOMEM;
    }
    for (int32_t l = 0; l < n_layers; l++) {
        kv_layer *L = &c->L[l];
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

static void store_free_bufs(gp_backend *be, kv_store *s) {
    be->ops->dealloc(be, s->f);
    be->ops->dealloc(be, s->q);
    be->ops->dealloc(be, s->scale);
    be->ops->dealloc(be, s->minv);
}

static void store_unref(gp_backend *be, kv_store *s) {
    if (!s || --s->refs > 0) return;
    store_free_bufs(be, s);
    free(s);
}

void gp_cache_destroy(gp_cache *c) {
    if (!c) return;
    for (int32_t l = 0; l < c->n_layers; l++) {
        store_unref(c->be, c->L[l].k);
        store_unref(c->be, c->L[l].v);
    }
    store_free_bufs(c->be, &c->stage_k);
    store_free_bufs(c->be, &c->stage_v);
    free(c->L);
    free(c->ids);
    free(c);
}

const char *gp_cache_name(const gp_cache *c) { return c->name; }
int32_t gp_cache_n_past(const gp_cache *c) { return c->n_past; }
const int32_t *gp_cache_ids(const gp_cache *c) { return c->ids; }
int32_t gp_cache_layer_cap(const gp_cache *c, int32_t l) { return c->L[l].cap; }

/* *buf (old_n elements of es bytes) becomes a backend buffer of new_n elements keeping the first keep_n. */
static gp_status buf_grow(gp_backend *be, void **buf, size_t keep_n, size_t new_n, size_t es) {
    size_t bytes;
    if (!gp_mul_ok(new_n, es, &bytes)) return GP_ERR_NOMEM;
    void *nb = be->ops->alloc(be, bytes);
    if (!nb) return GP_ERR_NOMEM;
    if (*buf && keep_n) be->ops->copy(be, nb, *buf, keep_n * es);
    be->ops->dealloc(be, *buf);
    *buf = nb;
    return GP_OK;
}

/* Grows (or creates) a store from (old_cap, old_nf) slots to (cap, nf), keeping slot contents. */
static gp_status store_grow(gp_cache *c, kv_store **ps, int32_t old_cap, int32_t old_nf, int32_t cap, int32_t nf) {
    kv_store *s = *ps;
    if (!s) {
        if (!(s = gp_calloc(1, sizeof *s))) return GP_ERR_NOMEM;
        s->refs = 1;
        *ps = s;
    }
    const size_t kvd = (size_t)c->kvd, rb = (size_t)row_bytes(&c->p, c->kvd), ng = (size_t)n_groups(&c->p, c->kvd);
    gp_status st = GP_OK;
    if (nf > old_nf || !s->f) st = buf_grow(c->be, (void **)&s->f, (size_t)old_nf * kvd, (size_t)nf * kvd, sizeof(float));
    if (!st && c->p.bits) {
        if (!st) st = buf_grow(c->be, (void **)&s->q, (size_t)old_cap * rb, (size_t)cap * rb, 1);
        if (!st) st = buf_grow(c->be, (void **)&s->scale, (size_t)old_cap * ng, (size_t)cap * ng, sizeof(float));
        if (!st) st = buf_grow(c->be, (void **)&s->minv, (size_t)old_cap * ng, (size_t)cap * ng, sizeof(float));
    }
    return st;
}

/* Float32 slots a layer of cap slots needs. */
static int32_t f32_slots(const gp_kv_params *p, int32_t cap) { return q_start(p) < cap ? q_start(p) : cap; }

/* Slots layer L of c grows to for n_total positions: twice its slots, at least p.min_slots, at most cap_max. */
static int32_t cap_for(const gp_cache *c, const kv_layer *L, int32_t n_total) {
    int32_t need = n_total < L->cap_max ? n_total : L->cap_max;
    if (L->cap >= need) return L->cap;
    int64_t grow = (int64_t)L->cap * 2;
    if (grow < c->p.min_slots) grow = c->p.min_slots;
    return (int32_t)(grow > need ? (grow < L->cap_max ? grow : L->cap_max) : need);
}

/* Bytes of a layer's keys and values with cap slots. */
static uint64_t layer_bytes(const gp_cache *c, int32_t cap) {
    const uint64_t rb = (uint64_t)row_bytes(&c->p, c->kvd), ng = (uint64_t)n_groups(&c->p, c->kvd);
    return 2 * ((uint64_t)f32_slots(&c->p, cap) * (uint64_t)c->kvd * sizeof(float) +
                (c->p.bits ? (uint64_t)cap * (rb + 2 * ng * sizeof(float)) : 0));
}

uint64_t gp_cache_bytes(const gp_cache *c) {
    uint64_t b = 0;
    for (int32_t l = 0; l < c->n_layers; l++) b += layer_bytes(c, c->L[l].cap);
    return b;
}

uint64_t gp_cache_bytes_for(const gp_cache *c, int32_t n_total) {
    uint64_t b = 0;
    for (int32_t l = 0; l < c->n_layers; l++) b += layer_bytes(c, cap_for(c, &c->L[l], n_total));
    return b;
}

/* Gives layer l its own copy of shared stores (copy-on-write). */
static gp_status unshare(gp_cache *c, int32_t l) {
    kv_layer *L = &c->L[l];
    kv_store **ss[2] = {&L->k, &L->v};
    for (int i = 0; i < 2; i++) {
        kv_store *s = *ss[i], *d = NULL;
        if (!s || s->refs == 1) continue;
        if (store_grow(c, &d, 0, 0, L->cap, L->n_f)) {
            if (d) store_unref(c->be, d);
            return gp_set_error(GP_ERR_NOMEM, "KV cache '%s': out of memory copying a forked layer", c->name);
        }
        const gp_kv_rows dst = rows_of(c, d), src = rows_of(c, s);
        gp_backend *be = c->be;
        be->ops->copy(be, dst.f, src.f, (size_t)L->n_f * (size_t)c->kvd * sizeof(float));
        if (c->p.bits) {
            be->ops->copy(be, dst.q, src.q, (size_t)L->cap * (size_t)dst.row_bytes);
            be->ops->copy(be, dst.scale, src.scale, (size_t)L->cap * (size_t)dst.n_groups * sizeof(float));
            be->ops->copy(be, dst.minv, src.minv, (size_t)L->cap * (size_t)dst.n_groups * sizeof(float));
        }
        s->refs--;
        *ss[i] = d;
    }
    return GP_OK;
}

/* Grows the staging rows of quantized chunks to n rows. */
static gp_status stage_reserve(gp_cache *c, int32_t n) {
    if (!c->p.bits || n <= c->stage_rows) return GP_OK;
    const size_t rb = (size_t)row_bytes(&c->p, c->kvd), ng = (size_t)n_groups(&c->p, c->kvd);
    kv_store *ss[2] = {&c->stage_k, &c->stage_v};
    for (int i = 0; i < 2; i++) {
        gp_status s = buf_grow(c->be, (void **)&ss[i]->q, 0, (size_t)n * rb, 1);
        if (!s) s = buf_grow(c->be, (void **)&ss[i]->scale, 0, (size_t)n * ng, sizeof(float));
        if (!s) s = buf_grow(c->be, (void **)&ss[i]->minv, 0, (size_t)n * ng, sizeof(float));
        if (s) return gp_set_error(GP_ERR_NOMEM, "KV cache '%s': out of memory staging %d positions", c->name, n);
    }
    c->stage_rows = n;
    return GP_OK;
}

gp_status gp_cache_reserve(gp_cache *c, int32_t n_total, int32_t n_chunk) {
    if (c->p.max_kv_size == 0 && n_total > c->p.n_ctx)
        return gp_set_error(GP_ERR_RANGE, "KV cache '%s': %d positions exceed n_ctx = %d", c->name, n_total, c->p.n_ctx);
    for (int32_t l = 0; l < c->n_layers; l++) {
        kv_layer *L = &c->L[l];
        gp_status s;
        /* growing or writing a shared store would change the other cache's buffer: copy first */
        if ((s = unshare(c, l))) return s;
        const int32_t cap = cap_for(c, L, n_total);
        if (cap == L->cap && L->k) continue;
        const int32_t nf = f32_slots(&c->p, cap);
        if ((s = store_grow(c, &L->k, L->cap, L->n_f, cap, nf)) || (s = store_grow(c, &L->v, L->cap, L->n_f, cap, nf)))
            return gp_set_error(GP_ERR_NOMEM, "KV cache '%s': out of memory growing layer %d to %d positions", c->name,
                                l, cap);
        L->cap = cap;
        L->n_f = nf;
    }
    return stage_reserve(c, n_chunk);
}

static gp_status push_ids(gp_cache *c, const int32_t *ids, int32_t n) {
    if (c->n_past + n > c->ids_cap) {
        int32_t cap = c->ids_cap ? c->ids_cap : 64;
        while (cap < c->n_past + n) cap *= 2;
        int32_t *v = gp_realloc(c->ids, (size_t)cap, sizeof *v);
        if (!v) return GP_ERR_NOMEM;
        c->ids = v;
        c->ids_cap = cap;
    }
    if (n > 0) memcpy(c->ids + c->n_past, ids, (size_t)n * sizeof *ids);
    return GP_OK;
}

gp_status gp_cache_begin(gp_cache *c, const int32_t *ids, int32_t n, uint64_t steer_epoch) {
    gp_status s = push_ids(c, ids, n);
    if (s) return s;
    if (c->n_past == 0) {
        c->steer_epoch = steer_epoch;
        c->steer_mixed = 0;
    } else if (c->steer_epoch != steer_epoch) c->steer_mixed = 1;
    return GP_OK;
}

/* Appends segment [p0, p1) at rows r0.. of storage src to d, split at q_start (float rows before, quantized after). */
static void add_seg(gp_kv_desc *d, int32_t p0, int32_t p1, int32_t r0, int src, int32_t qs) {
    for (int part = 0; part < 2 && p0 < p1; part++) {
        const int quant = p0 >= qs;
        const int32_t e = quant || p1 <= qs ? p1 : qs;
        d->seg[d->n_seg++] = (gp_kv_seg){p0, e, r0, (uint8_t)src, (uint8_t)quant};
        r0 += e - p0;
        p0 = e;
    }
}

int gp_cache_early_rows(const gp_cache *c, int32_t l, int32_t n, gp_kv_rows *k, gp_kv_rows *v, int32_t *r0) {
    const kv_layer *L = &c->L[l];
    const int32_t pos0 = c->n_past;
    if (n <= 0 || (int64_t)pos0 + n > direct_end(&c->p) || (n > 1 && pos0 + n > L->cap)) return 0;
    *k = rows_of(c, L->k);
    *v = rows_of(c, L->v);
    *r0 = slot_of(L, pos0);
    return 1;
}

void gp_cache_stage(gp_cache *c, gp_ws *ws, int32_t l, const float *k, const float *v, int32_t n, int stored,
                    gp_kv_desc *d) {
    const kv_layer *L = &c->L[l];
    const int32_t pos0 = c->n_past, qs = q_start(&c->p), kvd = c->kvd;
    memset(d, 0, sizeof *d);
    d->k[0] = rows_of(c, L->k);
    d->v[0] = rows_of(c, L->v);
    d->k[1] = rows_of(c, &c->stage_k);
    d->v[1] = rows_of(c, &c->stage_v);
    d->k[1].f = (float *)k; /* the chunk's float rows are read in place */
    d->v[1].f = (float *)v;
    d->window = L->window;
    d->pinned = L->keep;
    c->chunk_k = k;
    c->chunk_v = v;
    /* held positions: the pinned ones, then the ring's (at most one wrap; stored early, the chunk's rows replaced
     * the oldest ones) */
    const int32_t pin = pos0 < L->keep ? pos0 : L->keep, span = L->cap - L->keep;
    add_seg(d, 0, pin, 0, 0, qs);
    int32_t j = pos0 + (stored ? n : 0) - span > L->keep ? pos0 + (stored ? n : 0) - span : L->keep;
    while (j < pos0) {
        const int32_t s = slot_of(L, j), e = pos0 - j < L->cap - s ? pos0 : j + (L->cap - s);
        add_seg(d, j, e, s, 0, qs);
        j = e;
    }
    if (stored) { /* float rows at consecutive slots (gp_cache_early_rows) */
        add_seg(d, pos0, pos0 + n, slot_of(L, pos0), 0, qs);
        return;
    }
    /* the chunk: quantized rows go through the cache's quantization now, so every query reads what the cache will */
    add_seg(d, pos0, pos0 + n, 0, 1, qs);
    const int32_t q0 = qs > pos0 ? (qs - pos0 < n ? qs - pos0 : n) : 0;
    if (q0 < n)
        ws->be->ops->kv_store(ws, &d->k[1], &d->v[1], q0, k + (int64_t)q0 * kvd, v + (int64_t)q0 * kvd, n - q0, 1);
}

void gp_cache_commit(gp_cache *c, gp_ws *ws, int32_t l, int32_t n, int stored) {
    if (stored) return;
    const kv_layer *L = &c->L[l];
    const int32_t pos0 = c->n_past, qs = q_start(&c->p), kvd = c->kvd;
    const gp_kv_rows dk = rows_of(c, L->k), dv = rows_of(c, L->v);
    const gp_kv_rows sk = rows_of(c, &c->stage_k), sv = rows_of(c, &c->stage_v);
    const gp_backend_ops *B = ws->be->ops;
    for (int32_t j = pos0; j < pos0 + n;) {
        /* a run of positions with consecutive slots and one storage format */
        const int32_t s = slot_of(L, j), quant = j >= qs;
        int32_t e = j < L->keep ? L->keep : j + (L->cap - s);
        e = e < pos0 + n ? e : pos0 + n;
        if (!quant && e > qs) e = qs;
        const int32_t r = j - pos0;
        if (quant) B->kv_copy(ws, &dk, &dv, s, &sk, &sv, r, e - j, 1);
        else B->kv_store(ws, &dk, &dv, s, c->chunk_k + (int64_t)r * kvd, c->chunk_v + (int64_t)r * kvd, e - j, 0);
        j = e;
    }
}

void gp_cache_advance(gp_cache *c, int32_t n) {
    c->n_past += n;
    c->chunk_k = c->chunk_v = NULL;
}

int gp_cache_reusable(const gp_cache *c, uint64_t epoch) { return !c->steer_mixed && c->steer_epoch == epoch; }

void gp_cache_set_provenance(gp_cache *c, uint64_t epoch, int mixed) {
    c->steer_epoch = epoch;
    c->steer_mixed = mixed;
}

gp_status gp_cache_trim(gp_cache *c, int32_t n) {
    if (n < 0 || n > c->n_past)
        return gp_set_error(GP_ERR_RANGE, "KV cache '%s': cannot trim to %d of %d positions", c->name, n, c->n_past);
    for (int32_t l = 0; l < c->n_layers && n < c->n_past; l++) {
        const kv_layer *L = &c->L[l];
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

void gp_cache_clear(gp_cache *c) { c->n_past = 0; }

gp_status gp_cache_fork(const gp_cache *src, const char *name, gp_cache **out) {
    *out = NULL;
    gp_cache *c = gp_calloc(1, sizeof *c);
    if (!c) return GP_ERR_NOMEM;
    *c = *src;
    snprintf(c->name, sizeof c->name, "%s", name);
    memset(&c->stage_k, 0, sizeof c->stage_k);
    memset(&c->stage_v, 0, sizeof c->stage_v);
    c->stage_rows = 0;
    c->L = gp_malloc((size_t)src->n_layers, sizeof *c->L);
    c->ids = gp_malloc((size_t)(src->ids_cap ? src->ids_cap : 1), sizeof *c->ids);
    if (!c->L || !c->ids) {
        free(c->L);
        free(c->ids);
        free(c);
        return GP_ERR_NOMEM;
    }
    memcpy(c->L, src->L, (size_t)src->n_layers * sizeof *c->L);
    if (src->n_past) memcpy(c->ids, src->ids, (size_t)src->n_past * sizeof *c->ids);
    for (int32_t l = 0; l < c->n_layers; l++) {
        if (c->L[l].k) c->L[l].k->refs++;
        if (c->L[l].v) c->L[l].v->refs++;
    }
    *out = c;
    return GP_OK;
}

/* ---- files ---- */

/* Slots of layer L that hold positions (a ring never wrapped holds slots [0, n_past)). */
static int32_t used_slots(const gp_cache *c, const kv_layer *L) { return c->n_past < L->cap ? c->n_past : L->cap; }

/* A host-readable copy of bytes of backend memory p (p itself when backend memory is host memory); *tmp owns it. */
static const void *host_view(gp_backend *be, const void *p, size_t bytes, void **tmp) {
    *tmp = NULL;
    if (be->host_memory || !p || !bytes) return p;
    if (!(*tmp = malloc(bytes))) return NULL;
    be->ops->download(be, *tmp, p, bytes);
    return *tmp;
}

/* Rows [rows, kvd] of bfloat16 backend memory p widened (exactly) to float32 on the host; *tmp owns them. */
static const void *widened_view(gp_backend *be, const uint8_t *p, size_t rows, size_t kvd, void **tmp) {
    void *raw;
    const uint16_t *h = host_view(be, p, rows * kvd * 2, &raw);
    float *f = h ? malloc(rows * kvd * sizeof *f) : NULL;
    for (size_t i = 0; f && i < rows * kvd; i++) f[i] = gp_bf16_to_f32(h[i]);
    free(raw);
    *tmp = f;
    return f;
}

/* kv_bits as files record it: bfloat16 rows are written as float32 rows (the file of a float32 cache) */
static int32_t file_bits(const gp_kv_params *p) { return p->bits == 16 ? 0 : p->bits; }

gp_status gp_cache_save(const gp_cache *c, const char *path, const char *const *keys, const char *const *vals,
                        int32_t n_meta) {
    int32_t nt = 1 + c->n_layers * 8, k = 0;
    gp_st_write_tensor *t = gp_calloc((size_t)nt, sizeof *t);
    void **tmps = gp_calloc((size_t)nt, sizeof *tmps);
    char (*names)[64] = gp_calloc((size_t)nt, sizeof *names);
    int32_t nm = n_meta + 12;
    const char **mk = gp_calloc((size_t)nm, sizeof *mk), **mv = gp_calloc((size_t)nm, sizeof *mv);
    char num[12][32];
    gp_status s = GP_ERR_NOMEM;
    if (!t || !tmps || !names || !mk || !mv) goto done;
    int32_t one = 0;
    t[k++] = (gp_st_write_tensor){.name = "token_ids", .dtype = GP_DTYPE_I32, .ndim = 1, .shape = {c->n_past},
                                  .data = c->n_past ? (const void *)c->ids : (const void *)&one};
    const int32_t rb = row_bytes(&c->p, c->kvd), ng = n_groups(&c->p, c->kvd);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const kv_layer *L = &c->L[l];
        const int32_t used = used_slots(c, L), nf = L->n_f < used ? L->n_f : used; /* save what is valid */
        const kv_store *ss[2] = {L->k, L->v};
        for (int i = 0; i < 2; i++) {
            const kv_store *st = ss[i];
            const char *kv = i ? "v" : "k";
#define ADD(suffix, DT, R, C, ES, PTR)                                                                               \
    do {                                                                                                             \
        snprintf(names[k], sizeof names[k], "layer.%d.%s.%s", l, kv, suffix);                                        \
        const size_t n_ = (size_t)(R) * (size_t)(C);                                                                 \
        const void *d_ = !st || !(R) ? NULL                                                                          \
                         : c->p.bits == 16 && (DT) == GP_DTYPE_F32                                                   \
                             ? widened_view(c->be, st->q, (size_t)(R), (size_t)(C), &tmps[k])                        \
                             : host_view(c->be, PTR, n_ * (ES), &tmps[k]);                                           \
        if (st && (R) && !d_) goto done;                                                                             \
        t[k] = (gp_st_write_tensor){.name = names[k], .dtype = DT, .ndim = 2, .shape = {R, C},                      \
                                    .data = d_ ? d_ : (const void *)&one};                                           \
        k++;                                                                                                         \
    } while (0)
            ADD("f32", GP_DTYPE_F32, c->p.bits == 16 ? used : nf, c->kvd, sizeof(float), st->f);
            if (file_bits(&c->p)) {
                ADD("q", GP_DTYPE_U8, used, rb, 1, st->q);
                ADD("scale", GP_DTYPE_F32, used, ng, sizeof(float), st->scale);
                ADD("min", GP_DTYPE_F32, used, ng, sizeof(float), st->minv);
            }
#undef ADD
        }
    }
    int32_t m = 0;
    const char *fk[] = {"format", "version", "name", "n_past", "n_layers", "kvd", "n_ctx", "max_kv_size", "keep",
                        "kv_bits", "kv_group_size", "quantized_kv_start"};
    int64_t fv[] = {0, 0, 0, c->n_past, c->n_layers, c->kvd, c->p.n_ctx, c->p.max_kv_size, c->p.keep, file_bits(&c->p),
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
    s = gp_st_write(path, t, k, mk, mv, m);
done:
    for (int32_t i = 0; tmps && i < nt; i++) free(tmps[i]);
    free(tmps);
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

/* Uploads the first rows rows of tensor name [>= rows, cols] of dtype dt into backend memory dst.  Files hold the
 * slots that hold positions; files written before that fix hold every allocated slot (more rows): both load. */
static gp_status load_tensor(gp_backend *be, const gp_st_set *st, const char *path, const char *name, gp_dtype dt,
                             int64_t rows, int64_t cols, void *dst) {
    const gp_tensor_view *t = gp_st_find(st, name);
    if (!t) return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
    if (t->dtype != dt || t->ndim != 2 || t->shape[0] < rows || t->shape[1] != cols)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' has the wrong dtype or shape (want %s [%lld, %lld])", path,
                            name, gp_dtype_name(dt), (long long)rows, (long long)cols);
    const size_t bytes = (size_t)rows * (size_t)cols * gp_dtype_size(dt);
    if (bytes) be->ops->upload(be, dst, t->data, bytes);
    return GP_OK;
}

/* load_tensor of float32 rows into bfloat16 rows dst [rows, cols] (rounded to nearest even: exact for the rows of a
 * cache that held bfloat16 rows). */
static gp_status load_narrowed(gp_backend *be, const gp_st_set *st, const char *path, const char *name, int64_t rows,
                               int64_t cols, void *dst) {
    const gp_tensor_view *t = gp_st_find(st, name);
    if (!t || t->dtype != GP_DTYPE_F32 || t->ndim != 2 || t->shape[0] < rows || t->shape[1] != cols)
        return load_tensor(be, st, path, name, GP_DTYPE_F32, rows, cols, dst); /* (its message) */
    const size_t n = (size_t)rows * (size_t)cols;
    uint16_t *h = malloc(n ? n * sizeof *h : 1);
    if (!h) return gp_set_error(GP_ERR_NOMEM, "%s: out of memory reading tensor '%s'", path, name);
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, (const char *)t->data + 4 * i, 4);
        h[i] = gp_f32_to_bf16(x);
    }
    if (n) be->ops->upload(be, dst, h, n * sizeof *h);
    free(h);
    return GP_OK;
}

gp_status gp_cache_load(const char *path, const char *name, const gp_kv_params *p, gp_backend *be, int32_t n_layers,
                        int32_t kvd, const int32_t *window,
                        gp_status (*check)(const gp_st_set *st, const char *path, void *ud), void *ud, gp_cache **out) {
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
    const int32_t fb = file_bits(p);
    int64_t want[] = {-1, n_layers, kvd, -1, p->max_kv_size, p->keep, fb, p->group, p->q_start};
    for (int i = 1; i < 9; i++)
        if (i != 3 && v[i] != want[i] && !(i >= 7 && !fb && !v[6])) {
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
    if ((s = gp_cache_create(name, p, be, n_layers, kvd, window, &c))) {
        gp_st_close(st);
        return s;
    }
    if ((s = gp_cache_reserve(c, n_past, 0)) || (s = push_ids(c, ti->data, n_past))) goto fail;
    c->n_past = n_past; /* the slots that hold positions (used_slots) depend on it */
    for (int32_t l = 0; l < n_layers; l++) {
        kv_layer *L = &c->L[l];
        const int32_t used = used_slots(c, L), nf = L->n_f < used ? L->n_f : used;
        const gp_kv_rows rk = rows_of(c, L->k), rv = rows_of(c, L->v), *rs[2] = {&rk, &rv};
        for (int i = 0; i < 2; i++) {
            char nm[64];
            const char *kv = i ? "v" : "k";
            snprintf(nm, sizeof nm, "layer.%d.%s.f32", l, kv);
            if (p->bits == 16) {
                if ((s = load_narrowed(be, st, path, nm, used, kvd, rs[i]->q))) goto fail;
                continue;
            }
            if ((s = load_tensor(be, st, path, nm, GP_DTYPE_F32, nf, kvd, rs[i]->f))) goto fail;
            if (p->bits) {
                snprintf(nm, sizeof nm, "layer.%d.%s.q", l, kv);
                if ((s = load_tensor(be, st, path, nm, GP_DTYPE_U8, used, row_bytes(p, kvd), rs[i]->q))) goto fail;
                snprintf(nm, sizeof nm, "layer.%d.%s.scale", l, kv);
                if ((s = load_tensor(be, st, path, nm, GP_DTYPE_F32, used, n_groups(p, kvd), rs[i]->scale))) goto fail;
                snprintf(nm, sizeof nm, "layer.%d.%s.min", l, kv);
                if ((s = load_tensor(be, st, path, nm, GP_DTYPE_F32, used, n_groups(p, kvd), rs[i]->minv))) goto fail;
            }
        }
    }
    gp_st_close(st);
    *out = c;
    return GP_OK;
fail:
    gp_cache_destroy(c);
    gp_st_close(st);
    return s;
}
