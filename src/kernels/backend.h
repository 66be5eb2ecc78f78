/* backend.h — the compute backend: one function pointer per op, shapes in the comment.  The forward pass calls
 * only these; the CPU backend (kernels/cpu) is the reference every other backend is checked against. */
#ifndef GP_BACKEND_H
#define GP_BACKEND_H

#include "io/safetensors.h"
#include "model/config.h"

#include <stdint.h>

/* A weight matrix or vector as stored in the checkpoint (row-major, stored dtype, memory-mapped). */
typedef struct gp_wt {
    const void *data; /* NULL when the tensor is absent (optional weights) */
    gp_dtype dtype;   /* F32, F16 or BF16 */
    int64_t rows, cols; /* a vector is rows = 1 */
} gp_wt;

/* Everything one attention call needs.  Keys/values before the chunk come from the cache ring; those of the chunk
 * from k_new/v_new.  Query t (position pos0 + t) sees key j iff j <= pos0 + t and (window == 0 or pos0+t - j < window). */
typedef struct gp_attn_args {
    float *out;           /* [n, n_heads, head_dim] */
    const float *q;       /* [n, n_heads, head_dim], rope applied */
    const float *k_new;   /* [n, n_kv, head_dim], rope applied */
    const float *v_new;   /* [n, n_kv, head_dim] */
    const float *k_cache; /* [cap, n_kv, head_dim]: position j at slot j % cap */
    const float *v_cache; /* [cap, n_kv, head_dim] */
    int32_t cap;          /* ring capacity (>= window for sliding layers, >= every position for full layers) */
    int32_t n, pos0, n_heads, n_kv, head_dim, window;
    float scale;          /* multiplier of q·k */
    float softcap;        /* 0 = none */
    float *scratch;       /* [n_threads, scratch_stride] */
    int32_t scratch_stride; /* >= pos0 + n */
} gp_attn_args;

typedef struct gp_backend {
    const char *name;
    /* y [n, w.rows] = x [n, w.cols] @ W^T (+ bias [w.rows] if bias && bias->data) */
    void (*matmul)(float *y, const float *x, const gp_wt *w, const gp_wt *bias, int32_t n);
    /* y [n, d] = x [n, d] * rsqrt(mean(x^2) + eps) * (w or 1 + w), w [d]; y may alias x */
    void (*rmsnorm)(float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps, int plus_one);
    /* x [n, heads, hd] rotated in place (rotate_half convention) for positions pos0..pos0+n-1; inv_freq [hd/2] */
    void (*rope)(float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0, const float *inv_freq);
    /* scaled dot-product attention with causal + sliding mask, softmax in float32 */
    void (*attention)(const gp_attn_args *a);
    /* y [n, d] = table[ids[i]] * scale (scale 1 = none); table [vocab, d] */
    void (*embed)(float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale);
    /* gate [n] = act(gate) * up [n] */
    void (*glu)(float *gate, const float *up, int64_t n, gp_act act);
    /* y [n] += x [n] */
    void (*add)(float *y, const float *x, int64_t n);
    /* x [n] = cap * tanh(x / cap) */
    void (*softcap)(float *x, int64_t n, float cap);
} gp_backend;

/* The CPU backend (reference). */
const gp_backend *gp_backend_cpu(void);

#endif
