/* kvcache.h — one sequence's KV cache (gp_cache, opaque): per layer a ring of slots for keys and values, optionally
 * rotating (max_kv_size with the first `keep` positions pinned), float32 or bfloat16 rows or quantized (affine 4/8-bit
 * groups, positions before quantized_kv_start kept in float32), plus the token ids it holds and the steering
 * provenance of its positions.  Storage is allocated through the backend; ring and quantized layouts are known only to
 * kvcache.c: the forward pass stages a chunk's keys/values (gp_cache_stage, which gives attention a gp_kv_desc), then
 * commits them (gp_cache_commit) and advances (gp_cache_advance).  Buffers are reference-counted so a fork shares them
 * until one side writes (copy-on-write). */
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
    int32_t bits;        /* 0 = float32; 16 = bfloat16 (every position); 4 or 8 = quantized */
    int32_t group;       /* quantization group size along a position's [n_kv * head_dim] row */
    int32_t q_start;     /* positions < q_start stay float32 */
    int32_t min_slots;   /* slots a layer grows to at least (0: as needed, doubling) */
} gp_kv_params;

typedef struct gp_cache gp_cache;

/* Creates an empty cache for a model's layers (window[l] = the model's sliding window of layer l, 0 = full) whose
 * storage lives in backend be (borrowed; must outlive the cache). */
gp_status gp_cache_create(const char *name, const gp_kv_params *p, gp_backend *be, int32_t n_layers, int32_t kvd,
                          const int32_t *window, gp_cache **out);
void gp_cache_destroy(gp_cache *c); /* NULL = no-op */

const char *gp_cache_name(const gp_cache *c);
int32_t gp_cache_n_past(const gp_cache *c);              /* positions held */
const int32_t *gp_cache_ids(const gp_cache *c);          /* [n_past] token ids (borrowed) */
int32_t gp_cache_layer_cap(const gp_cache *c, int32_t l); /* slots allocated in layer l's ring */

/* Bytes of keys/values the cache holds now, and would hold after gp_cache_reserve(c, n_total). */
uint64_t gp_cache_bytes(const gp_cache *c);
uint64_t gp_cache_bytes_for(const gp_cache *c, int32_t n_total);

/* Makes room for positions up to n_total - 1 and for chunks of up to n_chunk positions, and gives every layer its
 * own copy of buffers shared with a fork.  After GP_OK, staging and committing such chunks cannot fail. */
gp_status gp_cache_reserve(gp_cache *c, int32_t n_total, int32_t n_chunk);

/* Starts appending n positions: records ids and the steering epoch they are computed under (positions written under
 * different epochs are never reused).  Call after gp_cache_reserve(c, n_past + n, ...). */
gp_status gp_cache_begin(gp_cache *c, const int32_t *ids, int32_t n, uint64_t steer_epoch);

/* Whether layer l can take a chunk of n positions at n_past.. before attention runs: its rows are float32 or
 * bfloat16 (rope_qk rounds them as kv_store does) and
 * storing them overwrites no position a query of the chunk sees (one position, or a ring that does not wrap).  Then
 * *dst names the rows (the caller stores the keys and values there, e.g. through rope_qk) and returns 1; else 0. */
int gp_cache_early_rows(const gp_cache *c, int32_t l, int32_t n, gp_kv_rows *k, gp_kv_rows *v, int32_t *r0);

/* Layer l of a chunk of n positions at n_past..: stores the chunk's keys/values k, v [n, kvd] (backend memory,
 * must stay valid until gp_cache_commit) in the cache's storage format and fills *d for attention (held positions
 * plus the chunk's; quantized positions are read back through the same quantization as cached rows).  stored: the
 * caller already wrote them to the rows gp_cache_early_rows gave (nothing is staged; commit has nothing to do). */
void gp_cache_stage(gp_cache *c, gp_ws *ws, int32_t l, const float *k, const float *v, int32_t n, int stored,
                    gp_kv_desc *d);

/* Writes the staged chunk of layer l into its ring (later positions overwrite earlier ones sharing a slot);
 * nothing when it was stored early. */
void gp_cache_commit(gp_cache *c, gp_ws *ws, int32_t l, int32_t n, int stored);

/* The chunk's n positions are now held (after every layer committed). */
void gp_cache_advance(gp_cache *c, int32_t n);

/* 1 when the held positions were all computed under steering epoch `epoch` (and may be reused). */
int gp_cache_reusable(const gp_cache *c, uint64_t epoch);

/* Marks the held positions as computed under other hooks than epoch (never reused) when mixed, else as epoch's. */
void gp_cache_set_provenance(gp_cache *c, uint64_t epoch, int mixed);

/* Keeps the first n positions; GP_ERR_STATE if a rotated ring no longer holds what position n would attend to. */
gp_status gp_cache_trim(gp_cache *c, int32_t n);

/* Forgets every position (always succeeds). */
void gp_cache_clear(gp_cache *c);

/* A copy-on-write copy named name. */
gp_status gp_cache_fork(const gp_cache *src, const char *name, gp_cache **out);

/* Writes a cache file: safetensors with tensors token_ids and layer.{l}.{k,v}.{f32,q,scale,min} (the slots that
 * hold positions; bfloat16 rows widened to f32, as a float32 cache's) and metadata describing the layout plus the
 * caller's n_meta key/value pairs. */
gp_status gp_cache_save(const gp_cache *c, const char *path, const char *const *keys, const char *const *vals,
                        int32_t n_meta);

/* Reads a cache file written by gp_cache_save into a new cache with the same layout (params, layers, kvd, windows
 * must match the file's; float32 and bfloat16 rows load from either, rounded to nearest even into bfloat16); check(st,
 * ud) may refuse the file first (model fingerprint, ...).  All or nothing. */
gp_status gp_cache_load(const char *path, const char *name, const gp_kv_params *p, gp_backend *be, int32_t n_layers,
                        int32_t kvd, const int32_t *window,
                        gp_status (*check)(const gp_st_set *st, const char *path, void *ud), void *ud, gp_cache **out);

#endif
