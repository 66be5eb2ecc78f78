/* kvcache.h — one sequence's KV cache (gp_cache): per layer a ring of slots for keys and values, optionally
 * rotating (max_kv_size with the first `keep` positions pinned) and optionally quantized (affine 4/8-bit groups,
 * positions before quantized_kv_start kept in float32), plus the token ids it holds.  Buffers are reference-counted
 * so a fork shares them until one side writes (copy-on-write). */
#ifndef GP_KVCACHE_H
#define GP_KVCACHE_H

#include "genparity.h"
#include "io/safetensors.h"
#include "kernels/backend.h"

#include <stdint.h>

/* How a cache stores positions (from gp_ctx_params). */
typedef struct gp_kv_params {
    int32_t n_ctx;       /* positions a non-rotating cache may hold */
    int32_t max_kv_size; /* 0 = unbounded (up to n_ctx); else rotating with this many slots per layer */
    int32_t keep;        /* rotating: the first `keep` positions are never evicted */
    int32_t bits;        /* 0 = float32; 4 or 8 = quantized */
    int32_t group;       /* quantization group size along a position's [n_kv * head_dim] row */
    int32_t q_start;     /* positions < q_start stay float32 */
} gp_kv_params;

/* One layer's keys or values. */
typedef struct kv_store {
    int refs;         /* caches sharing this buffer (copy-on-write) */
    float *f;         /* [n_f, kvd] float32 slots (all slots when not quantized) */
    uint8_t *q;       /* [cap, row_bytes] quantized slots (NULL when not quantized) */
    float *scale;     /* [cap, n_groups] */
    float *minv;      /* [cap, n_groups] */
} kv_store;

typedef struct gp_kv_layer {
    kv_store *k, *v;
    int32_t cap;      /* slots allocated */
    int32_t cap_max;  /* slots this layer may ever use */
    int32_t n_f;      /* float32 slots allocated */
    int32_t keep;     /* pinned positions (rotating) */
    int32_t window;   /* 0 = every earlier position visible; else p - j < window (or j < keep) */
} gp_kv_layer;

struct gp_cache {
    char name[64];
    gp_kv_params p;
    int32_t n_layers, kvd;
    gp_kv_layer *L;   /* [n_layers] */
    int32_t n_past;   /* positions held */
    int32_t *ids;     /* [n_past] token ids */
    int32_t ids_cap;
    uint64_t steer_epoch; /* the context's steering epoch when position 0 was written */
    int steer_mixed;      /* positions were written under different steering hooks: never reuse */
};
typedef struct gp_cache gp_cache;

/* Slot of position j in a layer ring. */
static inline int32_t gp_kv_slot(const gp_kv_layer *L, int32_t j) {
    return j < L->keep ? j : L->keep + (j - L->keep) % (L->cap - L->keep);
}

/* Creates an empty cache for a model's layers (window[l] = the model's sliding window of layer l, 0 = full). */
gp_status gp_cache_create(const char *name, const gp_kv_params *p, int32_t n_layers, int32_t kvd, const int32_t *window,
                          gp_cache **out);
void gp_cache_destroy(gp_cache *c);

/* Makes room for positions up to n_total - 1 and appends ids[n] to the id list (all or nothing). */
gp_status gp_cache_reserve(gp_cache *c, int32_t n_total);
gp_status gp_cache_push_ids(gp_cache *c, const int32_t *ids, int32_t n);

/* Stores position j's key and value rows [kvd] in layer l (copying a shared buffer first). */
gp_status gp_cache_write(gp_cache *c, int32_t l, int32_t j, const float *k, const float *v);

/* Views for the attention kernel. */
gp_kv_view gp_cache_view(const gp_cache *c, int32_t l, int values);


/* Gives layer l its own copy of buffers shared with a fork (copy-on-write). */
gp_status gp_cache_unshare(gp_cache *c, int32_t l);

/* Keeps the first n positions; GP_ERR_STATE if a rotated ring no longer holds what position n would attend to. */
gp_status gp_cache_trim(gp_cache *c, int32_t n);

/* A copy-on-write copy named name. */
gp_status gp_cache_fork(const gp_cache *src, const char *name, gp_cache **out);

/* Bytes allocated for keys and values. */
uint64_t gp_cache_bytes(const gp_cache *c);

/* Writes a cache file: safetensors with tensors token_ids and layer.{l}.{k,v}.{f32,q,scale,min} and metadata
 * describing the layout plus the caller's n_meta key/value pairs. */
gp_status gp_cache_save(const gp_cache *c, const char *path, const char *const *keys, const char *const *vals,
                        int32_t n_meta);

/* Reads a cache file written by gp_cache_save into a new cache with the same layout (params, layers, kvd, windows
 * must match the file's); check(st, ud) may refuse the file first (model fingerprint, ...).  All or nothing. */
gp_status gp_cache_load(const char *path, const char *name, const gp_kv_params *p, int32_t n_layers, int32_t kvd,
                        const int32_t *window, gp_status (*check)(const gp_st_set *st, const char *path, void *ud),
                        void *ud, gp_cache **out);

#endif
