/* safetensors.h — validating, memory-mapping reader for safetensors files (single or sharded with
 * model.safetensors.index.json), and a small writer.  Tensors stay in their stored dtype inside the mapping;
 * nothing here copies weight data. */
#ifndef GP_SAFETENSORS_H
#define GP_SAFETENSORS_H

#include "genparity.h"

#include <stddef.h>
#include <stdint.h>

#define GP_MAX_DIMS 8
#define GP_ST_MAX_HEADER (100u * 1024u * 1024u) /* headers over 100 MB are rejected */
#define GP_ST_MAX_INDEX (16u * 1024u * 1024u)   /* model.safetensors.index.json: real ones are under 2 MB */

typedef enum gp_dtype {
    GP_DTYPE_F32 = 0,
    GP_DTYPE_F16,
    GP_DTYPE_BF16,
    GP_DTYPE_F64,
    GP_DTYPE_I64,
    GP_DTYPE_I32,
    GP_DTYPE_I16,
    GP_DTYPE_I8,
    GP_DTYPE_U8,
    GP_DTYPE_BOOL,
    GP_DTYPE_F8_E4M3,
    GP_DTYPE_F8_E5M2,
    GP_DTYPE_U32,
    GP_DTYPE_COUNT
} gp_dtype;

/* Bytes per element of a dtype. */
size_t gp_dtype_size(gp_dtype t);
/* safetensors' name of a dtype ("BF16"). */
const char *gp_dtype_name(gp_dtype t);
/* Parses a safetensors dtype name; returns 0 and *out, or -1 if unknown. */
int gp_dtype_parse(const char *name, gp_dtype *out);

/* One tensor inside a mapped file.  data points into the mapping (valid while the set is open). */
typedef struct gp_tensor_view {
    const char *name;
    gp_dtype dtype;
    int32_t ndim;
    int64_t shape[GP_MAX_DIMS];
    uint64_t n_elems;
    const void *data;
    uint64_t nbytes;
    const char *file; /* path of the file that holds it (owned by the set) */
} gp_tensor_view;

typedef struct gp_st_set gp_st_set; /* one or more mapped safetensors files */

/* Opens and validates one safetensors file (header length, JSON, dtypes, shapes; sorted by begin offset the spans
 * start at 0, have no gaps/overlaps and exactly cover the data section; the JSON's key order is free).  Returns GP_OK and *out (close with gp_st_close), or a
 * status with a message naming the file and the tensor/field; nothing stays mapped on failure. */
gp_status gp_st_open_file(const char *path, gp_st_set **out);

/* Opens a model folder's weights: DIR/model.safetensors, else DIR/model.safetensors.index.json and every shard
 * named in its weight_map (each tensor must be in the shard the index names; duplicates across shards are an
 * error).  Same contract as gp_st_open_file. */
gp_status gp_st_open_dir(const char *dir, gp_st_set **out);

/* Unmaps and frees; NULL is a no-op. */
void gp_st_close(gp_st_set *s);

/* Returns the tensor with that name, or NULL. O(log n). */
const gp_tensor_view *gp_st_find(const gp_st_set *s, const char *name);

/* Number of tensors, and the i-th (sorted by name). */
int32_t gp_st_count(const gp_st_set *s);
const gp_tensor_view *gp_st_at(const gp_st_set *s, int32_t i);

/* Value of a "__metadata__" string entry of the (first) file, or NULL. */
const char *gp_st_metadata(const gp_st_set *s, const char *key);

/* Sum of nbytes over all tensors. */
uint64_t gp_st_total_bytes(const gp_st_set *s);

/* A tensor to write: data is read from memory in dtype's layout. */
typedef struct gp_st_write_tensor {
    const char *name;
    gp_dtype dtype;
    int32_t ndim;
    int64_t shape[GP_MAX_DIMS];
    const void *data;
} gp_st_write_tensor;

/* Writes a safetensors file (tensors in the given order; metadata as n_meta key/value string pairs, may be 0).
 * Returns GP_OK or GP_ERR_IO/GP_ERR_INVALID_ARG with a message naming the path. */
gp_status gp_st_write(const char *path, const gp_st_write_tensor *tensors, int32_t n, const char *const *meta_keys,
                      const char *const *meta_values, int32_t n_meta);

/* Fills buf [len bytes] with bytes offset.. offset+len-1 of tensor i (in its dtype's layout); returns GP_OK or an
 * error (with its message set) that aborts the write. */
typedef gp_status (*gp_st_fill_fn)(void *user, int32_t i, uint64_t offset, void *buf, size_t len);

/* Like gp_st_write, but tensors[i].data is ignored and the bytes come from fill, called in file order with chunks
 * of at most 4 MiB, so a multi-GB file is written without holding it in memory. */
gp_status gp_st_write_stream(const char *path, const gp_st_write_tensor *tensors, int32_t n,
                             const char *const *meta_keys, const char *const *meta_values, int32_t n_meta,
                             gp_st_fill_fn fill, void *user);

/* float conversions used by every reader of stored weights */
static inline float gp_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
float gp_f16_to_f32(uint16_t h);
uint16_t gp_f32_to_bf16(float f); /* round to nearest even, NaN kept */
uint16_t gp_f32_to_f16(float f);  /* round to nearest even */

#endif
