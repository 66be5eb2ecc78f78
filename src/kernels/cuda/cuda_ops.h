/* cuda_ops.h — the CUDA kernels as plain C calls on device pointers (compiled by nvcc in cuda_*.cu, linked only in
 * the `make cuda` build).  Every op is enqueued on the device's one stream and returns 0 or a CUDA error code
 * (gp_cu_errstr names it); nothing here prints, exits or allocates behind the caller's back.
 *
 * Numerics: float32 activations and accumulation; weights are read in their stored dtype (f32, bf16, f16) and
 * widened in registers.  Every reduction has one fixed order that depends neither on the number of tokens of a call
 * nor on the device's scheduling (no atomics): a weight row's dot product is one warp's, lane l taking 16-byte
 * vectors l, l+32, ... in order and the warp summing its lanes by the xor butterfly, the same for 1 or 512 tokens;
 * attention splits the keys at fixed absolute positions (GP_CU_ATTN_SPLIT) and combines the splits in order.  So
 * results are bit-identical run to run and for every prefill chunking. */
#ifndef GP_CUDA_OPS_H
#define GP_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GP_CU_F32 = 0, GP_CU_BF16 = 1, GP_CU_F16 = 2 };
enum { GP_CU_ACT_SILU = 0, GP_CU_ACT_GELU_TANH = 1 };
#define GP_CU_ATTN_SPLIT 64 /* keys per attention split (fixed absolute boundaries) */

typedef struct gp_cu gp_cu; /* one device: its stream and cuBLAS handle */

/* A weight matrix (or vector: rows = 1) in device memory, row-major, stored dtype GP_CU_*. */
typedef struct gp_cu_wt {
    const void *data; /* NULL = absent */
    int32_t dtype;
    int64_t rows, cols;
} gp_cu_wt;

/* Returns the number of usable devices (>= 1), or 0 with a reason in msg (no driver, no device, ...). */
int gp_cu_device_count(char *msg, size_t cap);
/* Opens device dev: stream + cuBLAS handle.  Returns 0 and *out, else a CUDA error with a reason in msg. */
int gp_cu_open(int32_t dev, gp_cu **out, char *msg, size_t cap);
/* Closes a device handle; NULL is a no-op. */
void gp_cu_close(gp_cu *d);
/* Device name and memory (free, total bytes) of the handle's device. */
int gp_cu_mem(gp_cu *d, char *name, size_t cap, uint64_t *free_b, uint64_t *total_b);
/* Static description of a CUDA error code. */
const char *gp_cu_errstr(int e);

/* Device memory (cudaMalloc; never managed memory).  *p = NULL for bytes = 0. */
int gp_cu_alloc(gp_cu *d, void **p, size_t bytes);
void gp_cu_release(gp_cu *d, void *p);
/* Copies (synchronous with respect to the host: when they return, src may be reused / dst holds the data). */
int gp_cu_h2d(gp_cu *d, void *dst, const void *src, size_t bytes);
int gp_cu_d2h(gp_cu *d, void *dst, const void *src, size_t bytes);
/* Host-to-device copy enqueued on the stream (src must stay valid until the stream reaches it). */
int gp_cu_h2d_async(gp_cu *d, void *dst, const void *src, size_t bytes);
/* The bf16 compute mode of the ops enqueued through d from now on (GP_COMPUTE_BF16): each op rounds its outputs to
 * bfloat16 where transformers' bf16 forward does (the CPU backend's bf16 mode, op for op), except attention, which
 * follows sdpa's numerics on the GPU (float32 scores and softmax, the probabilities rounded to bf16 before p·v,
 * the output rounded).  float32/float16 weights are rounded to bf16 as they are read, as transformers loads them in
 * bf16.  on = 0: float32. */
void gp_cu_set_bf16(gp_cu *d, int on);
int gp_cu_bf16(gp_cu *d);

/* Waits for the stream; returns the first error of the work enqueued. */
int gp_cu_sync(gp_cu *d);

/* CUDA graphs: between begin and end the ops enqueued on d's stream are recorded, not run; end instantiates them
 * into *exec (NULL on failure, which also ends the capture).  Launch replays the recording; free releases it. */
int gp_cu_capture_begin(gp_cu *d);
int gp_cu_capture_end(gp_cu *d, void **exec);
int gp_cu_graph_launch(gp_cu *d, void *exec);
void gp_cu_graph_free(void *exec);

/* --- ops (device pointers; shapes in the comment) --- */

/* y [n, w.rows] = x [n, w.cols] @ W^T (+ bias [w.rows]): one warp per row, fixed order (header comment). */
int gp_cu_matmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n);
/* y [n, w.rows] += x @ W^T (+ bias): gp_cu_matmul's product then the residual add, the bits of the two ops. */
int gp_cu_matmul_add(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n);
/* y [n, w.rows] (+)= (act(gu[:, :cols]) * gu[:, cols:]) @ W^T (+ bias), gu [n, 2 * w.cols]: the GLU op and the
 * product (and the residual add when accum) in one kernel, with their bits.  Not used by the forward: every row
 * recomputes the activation of the whole input, which on the H100 cost more (Llama-3.2-1B decode 644 -> 504
 * tokens/s) than the launch it saves. */
int gp_cu_matmul_glu(gp_cu *d, float *y, const float *gu, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n,
                     int32_t act, int accum);
/* One token (decode): y [w.rows / 2] = act(gate) * up where gate|up = x [w.cols] @ W^T (+ bias), W stacking the
 * gate rows then the up rows: gp_cu_matmul then gp_cu_glu in one kernel, with their bits. */
int gp_cu_matmul_gluo(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t act);
/* The same product through cuBLAS (float32 compute, no TF32): W is widened to float32 into wide [rows*cols] first
 * when it is not float32.  Deterministic run to run for a given shape, but not the bits of gp_cu_matmul. */
int gp_cu_matmul_cublas(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n,
                        float *wide);
/* y [n, dim] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w); y may alias x. */
int gp_cu_rmsnorm(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, int32_t n, int32_t dim, float eps,
                  int plus_one);
/* x [n, heads, hd] rotated in place (rotate_half) for positions *pos0 + t; inv_freq [hd/2] (device). */
int gp_cu_rope(gp_cu *d, float *x, int32_t n, int32_t heads, int32_t hd, const int32_t *pos0, const float *inv_freq);
/* y [n, table.cols] = table[ids[t]] * scale; ids [n] on the device. */
int gp_cu_embed(gp_cu *d, float *y, const int32_t *ids, int32_t n, const gp_cu_wt *table, float scale);
/* gate [n] = act(gate) * up [n] */
int gp_cu_glu(gp_cu *d, float *gate, const float *up, int64_t n, int32_t act);
/* y [n] += x [n] */
int gp_cu_add(gp_cu *d, float *y, const float *x, int64_t n);
/* y [n, dim] += alpha * v [dim] for every row (steering) */
int gp_cu_add_rows(gp_cu *d, float *y, const float *v, float alpha, int32_t n, int32_t dim);
/* x [n] = cap * tanh(x / cap) */
int gp_cu_softcap(gp_cu *d, float *x, int64_t n, float cap);

/* One layer's float32 cache: slot s holds a position's [kvd] row; position j sits at slot
 * j < keep ? j : keep + (j - keep) % (cap - keep). */
typedef struct gp_cu_kv {
    float *k, *v; /* [cap, kvd] */
    int32_t cap, keep, kvd;
} gp_cu_kv;

/* Stores the chunk's rows k, v [n, kvd] at positions *pos0 + t (the last of the chunk's positions sharing a slot
 * wins, as if written in order). */
int gp_cu_kv_store(gp_cu *d, const gp_cu_kv *c, const float *k, const float *v, int32_t n, const int32_t *pos0);

/* One token (decode): q|k [nh + nkv heads, hd] rotated in place at position *pos0, and the rotated k heads and
 * v [nkv, hd] stored into the cache at that position: gp_cu_rope then gp_cu_kv_store in one kernel, same bits.
 * With qn and kn (data != NULL) each head is first RMS-normalized (Qwen3's q_norm/k_norm: gp_cu_rmsnorm's bits). */
int gp_cu_rope_store(gp_cu *d, float *qk, int32_t nh, int32_t nkv, int32_t hd, const int32_t *pos0,
                     const float *inv_freq, const float *v, const gp_cu_kv *c, const gp_cu_wt *qn,
                     const gp_cu_wt *kn, float eps, int plus_one);

/* Attention of a chunk of n queries at positions *pos0 + t: keys/values before *pos0 from the cache, those of the
 * chunk from k_new/v_new.  Query p sees key j iff j <= p and (window == 0 or p - j < window or j < keep). */
typedef struct gp_cu_attn {
    float *out;                 /* [n, n_heads, head_dim] */
    const float *q;             /* [n, n_heads, head_dim] */
    const float *k_new, *v_new; /* [n, n_kv, head_dim] */
    const gp_cu_kv *cache;
    const int32_t *pos0;        /* device */
    int32_t n, n_heads, n_kv, head_dim, window;
    int32_t t_off;              /* query t of this call is query t_off + t of the chunk (position *pos0 + t_off + t);
                                   q and out point at this call's first query, k_new/v_new at the chunk's first key */
    float scale, softcap;
    int32_t n_splits;           /* >= ceil((pos0 + n) / GP_CU_ATTN_SPLIT) */
    float *part;                /* [n, n_heads, n_splits, head_dim + 2] */
} gp_cu_attn;
int gp_cu_attention(gp_cu *d, const gp_cu_attn *a);

#ifdef __cplusplus
}
#endif

#endif
