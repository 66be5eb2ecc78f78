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

/* Cached keys or values of one layer as the attention kernel reads them: row j (of kvd = n_kv*head_dim floats)
 * is float32 at f[slot] when j < q_start, else affine-quantized: x = q * scale[g] + minv[g] for group g = i / group
 * (4-bit values packed two per byte, low nibble first). */
typedef struct gp_kv_view {
    const float *f;           /* [slots, kvd] */
    const uint8_t *q;         /* [slots, row_bytes] */
    const float *scale, *minv; /* [slots, n_groups] */
    int32_t kvd, bits, group, n_groups, row_bytes, q_start;
} gp_kv_view;

/* Reads elements [off, off+len) of cached row j (at slot) into out [len], dequantizing when needed. */
static inline void gp_kv_read(const gp_kv_view *v, int32_t slot, int32_t j, int32_t off, int32_t len, float *out) {
    if (j < v->q_start) {
        const float *src = v->f + (size_t)slot * v->kvd + off;
        for (int32_t i = 0; i < len; i++) out[i] = src[i];
        return;
    }
    const uint8_t *q = v->q + (size_t)slot * v->row_bytes;
    const float *sc = v->scale + (size_t)slot * v->n_groups, *mn = v->minv + (size_t)slot * v->n_groups;
    for (int32_t i = off; i < off + len; i++) {
        int32_t g = i / v->group;
        int32_t x = v->bits == 8 ? q[i] : (q[i / 2] >> ((i & 1) * 4)) & 15;
        out[i - off] = (float)x * sc[g] + mn[g];
    }
}

/* Everything one attention call needs.  Keys/values before the chunk come from the cache views; those of the chunk
 * from k_new/v_new.  Query t (position p = pos0 + t) sees key j iff j <= p and (window == 0 or p - j < window or
 * j < keep).  Cached position j sits at slot j < keep ? j : keep + (j - keep) % (cap - keep). */
typedef struct gp_attn_args {
    float *out;           /* [n, n_heads, head_dim] */
    const float *q;       /* [n, n_heads, head_dim], rope applied */
    const float *k_new;   /* [n, n_kv, head_dim], rope applied */
    const float *v_new;   /* [n, n_kv, head_dim] */
    const gp_kv_view *kc; /* cached keys (positions < pos0) */
    const gp_kv_view *vc; /* cached values */
    int32_t cap, keep;    /* ring geometry */
    int32_t n, pos0, n_heads, n_kv, head_dim, window;
    float scale;          /* multiplier of q·k */
    float softcap;        /* 0 = none */
    float *scratch;       /* [n_threads, scratch_stride] */
    int32_t scratch_stride; /* >= (keys any query sees) + 2 * head_dim */
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
