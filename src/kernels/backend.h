/* backend.h — the seam between the model and the compute devices.  The forward pass (model/forward.c) and the KV
 * cache (cache/) talk to a device only through this header:
 *   - a backend INSTANCE per model (gp_backend: gp_backend_cpu_init(&params, &be), freed by gp_backend_free), which
 *     owns device memory (buffers, bound weights);
 *   - a WORKSPACE per context (gp_ws: be->ops->ws_init), which carries the thread count (passed down explicitly),
 *     per-thread scratch and, on a GPU, the stream; every compute op takes the workspace as its first argument;
 *   - weights described by gp_wt {format, rows, cols, data, aux scales/biases, group_size, bits} and bound through
 *     the backend (CPU: a view of the mmap, no copy; a GPU backend uploads);
 *   - one linear(): y [n, out] = x [n, in] W^T + bias + sum_i scale_i * (x A_i^T) B_i^T for any storage format of W
 *     and an optional list of low-rank (LoRA) terms;
 *   - buffers allocated through the backend (be->ops->alloc): activations, KV storage, steering vectors.  A pointer
 *     returned by alloc is addressable by that backend's ops only; the host reads and writes it through upload /
 *     download / copy unless be->host_memory says that backend memory is host memory (CPU);
 *   - the KV cache is opaque to the model: attention receives a gp_kv_desc (storage + the runs of held positions)
 *     built by the cache; cache stores (quantization included) are ops.
 * Every op is one function pointer; shapes are in the comments; all compute is float32.  The CPU backend
 * (kernels/cpu) is the reference every other backend is checked against (tests/unit/test_backend_ops.c loops over
 * the backends available).  Numerics contract for every backend: each output element is computed by one thread in
 * a fixed order, so results depend neither on the thread count nor on how a prompt is chunked. */
#ifndef GP_BACKEND_H
#define GP_BACKEND_H

#include "genparity.h"
#include "io/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* ---- weights ---- */

/* Storage format of a weight: one row of the CPU's per-format traits table (kernels/cpu/formats.h).  Append-only;
 * quantized formats (issue 11: MLX affine, 2-8 bits) are added as new values with their traits rows, without
 * touching the forward pass. */
typedef enum gp_wfmt {
    GP_WFMT_F32 = 0,  /* float32 [rows, cols] */
    GP_WFMT_BF16 = 1, /* bfloat16 [rows, cols] */
    GP_WFMT_F16 = 2,  /* IEEE half [rows, cols] */
    GP_WFMT_QAFFINE = 3, /* MLX affine, `bits` (2,3,4,5,6,8) per value: row r is a little-endian bit stream of cols
                          * unsigned q (value i at bits i*bits.., so 4-bit value j of a uint32 word at bits 4j..);
                          * w = scale * q + bias (float32: scale*q, then + bias) with scale and bias of group
                          * i / group_size of the row, scales/biases [rows, cols / group_size] */
    GP_WFMT_COUNT     /* number of formats (keep last) */
} gp_wfmt;

/* An auxiliary tensor of a quantized weight (per-group scales or biases), dense in a float dtype. */
typedef struct gp_wt_aux {
    const void *data; /* NULL = absent */
    gp_dtype dtype;   /* GP_DTYPE_F32, GP_DTYPE_BF16 or GP_DTYPE_F16 */
} gp_wt_aux;

/* A weight matrix or vector in backend memory.  rows x cols is the LOGICAL float shape (y = x W^T maps x [.., cols]
 * to y [.., rows]; a vector is rows = 1, cols = length); data holds it in `format` (a quantized format packs several
 * values per byte and needs scales/biases [rows, cols / group_size] and bits).  data == NULL: the weight is absent
 * (optional biases and norms). */
typedef struct gp_wt {
    gp_wfmt format;
    int64_t rows, cols;
    const void *data;
    gp_wt_aux scales, biases; /* quantized formats only */
    int32_t group_size, bits; /* quantized formats only (0 for dense ones) */
} gp_wt;

/* A dense weight view (no aux tensors). */
static inline gp_wt gp_wt_dense(gp_wfmt f, const void *data, int64_t rows, int64_t cols) {
    gp_wt w = {f, rows, cols, data, {NULL, GP_DTYPE_F32}, {NULL, GP_DTYPE_F32}, 0, 0};
    return w;
}

/* The weight format of a safetensors dtype (F32, BF16, F16); -1 for others. */
static inline int gp_wfmt_of_dtype(gp_dtype d) {
    return d == GP_DTYPE_F32 ? GP_WFMT_F32 : d == GP_DTYPE_BF16 ? GP_WFMT_BF16 : d == GP_DTYPE_F16 ? GP_WFMT_F16 : -1;
}

/* Bytes a weight occupies: packed data plus aux tensors (0 when absent). */
static inline uint64_t gp_wt_bytes(const gp_wt *w) {
    if (!w->data) return 0;
    const uint64_t n = (uint64_t)w->rows * (uint64_t)w->cols;
    uint64_t b = w->format == GP_WFMT_F32 ? 4 * n : w->format == GP_WFMT_BF16 || w->format == GP_WFMT_F16 ? 2 * n
                                                                                  : (n * (uint64_t)w->bits + 7) / 8;
    /* quantized: rows * cols * bits / 8 packed bytes (cols * bits is a multiple of 32) */
    if (w->group_size > 0) {
        const uint64_t g = (uint64_t)w->rows * (uint64_t)((w->cols + w->group_size - 1) / w->group_size);
        if (w->scales.data) b += g * gp_dtype_size(w->scales.dtype);
        if (w->biases.data) b += g * gp_dtype_size(w->biases.dtype);
    }
    return b;
}

/* One low-rank term of a linear layer: adds scale * (x A^T) B^T.  A [rank, in] and B [out, rank] are dense weights
 * (float32 today; any dense format works).  mlx-lm's lora_a [in, rank] / lora_b [rank, out] are their transposes. */
typedef struct gp_lora {
    gp_wt a; /* [rank, in] */
    gp_wt b; /* [out, rank] */
    float scale;
} gp_lora;

/* A linear layer: y [n, out] = x [n, in] W^T (+ bias) (+ the low-rank terms in order).  Rounding order per output
 * element: the dot product x·W[o] (simd.h's reduction), then + bias[o], then for each term i in order
 * + scale_i * (z_i · B_i[o]) with z_i = x A_i^T computed in float32 by the same dot product. */
typedef struct gp_linear {
    gp_wt w;              /* [out, in], any format */
    gp_wt bias;           /* [out] dense vector, data NULL = none */
    const gp_lora *lora;  /* [n_lora], NULL when none (borrowed: owned by the model / adapter) */
    int32_t n_lora;
} gp_linear;

/* ---- KV storage and the attention descriptor (layouts are src/cache's; ops only see these views) ---- */

/* Key or value rows of one layer in backend memory.  Row r is float32 at f + r*kvd, or (the quantized rows of a
 * descriptor's runs) at q + r*row_bytes: bits 16, kvd bfloat16 values (x[i] = the i-th, widened; stored rounded to
 * nearest even); bits 4 or 8, affine-quantized with per-group scale/min [n_groups] at scale + r*n_groups,
 * minv + r*n_groups: x[i] = q[i] * scale[i / group] + minv[i / group], 8-bit one per byte, 4-bit two per byte (low
 * nibble first). */
typedef struct gp_kv_rows {
    float *f;
    uint8_t *q;
    float *scale, *minv;
    int32_t kvd, bits, group, n_groups, row_bytes;
} gp_kv_rows;

/* A run of positions [p0, p1) whose rows are consecutive rows r0.. of storage `src` (0 = the cache's, 1 = the
 * chunk's staged rows), quantized rows when quant. */
typedef struct gp_kv_seg {
    int32_t p0, p1, r0;
    uint8_t src, quant;
} gp_kv_seg;

#define GP_KV_MAX_SEGS 8

/* Everything attention needs about one layer's keys and values: the storages, the held positions as runs in
 * increasing position order, and the visibility rule: query position p sees held position j iff j <= p and
 * (window == 0 or p - j < window or j < pinned). */
typedef struct gp_kv_desc {
    gp_kv_rows k[2], v[2]; /* [0] the cache, [1] the chunk's staged rows */
    gp_kv_seg seg[GP_KV_MAX_SEGS];
    int32_t n_seg;
    int32_t window, pinned;
} gp_kv_desc;

/* Where rope_qk also stores a chunk's keys (after rope) and values: float rows [r0, r0 + n) of k and v. */
typedef struct gp_kv_dst {
    const gp_kv_rows *k, *v;
    const float *vals; /* [n, kvd] the chunk's values */
    int32_t r0;
} gp_kv_dst;

/* rope_qk's operands other than the shapes and positions (which an attention call has), for an attention call that
 * runs it first (gp_attn_args.rope). */
typedef struct gp_rope_args {
    float *q, *k;                /* [n, n_heads, head_dim] (the call's q), [n, n_kv, head_dim]: before rope */
    const float *inv_freq;       /* [head_dim / 2] */
    const gp_wt *q_norm, *k_norm; /* per-head norm weights, NULL = none */
    float eps;
    int plus_one;
    const gp_kv_dst *dst;        /* where the rotated keys and the values go: the rows kv names for the chunk */
} gp_rope_args;

/* One attention call: out [n, n_heads, head_dim] = softmax(q k^T * scale [soft-capped]) v over the visible keys of
 * query t at position pos0 + t.  q has rope applied, or rope says how: the call then runs rope_qk(q, k, ..., dst)
 * first (a device may do it inside its attention kernel; q and k are unspecified afterwards).  The keys/values of
 * the chunk itself are in kv (staged, or stored at rope->dst). */
typedef struct gp_attn_args {
    float *out;          /* [n, n_heads, head_dim] */
    const float *q;      /* [n, n_heads, head_dim] */
    const gp_kv_desc *kv;
    int32_t n, pos0, n_heads, n_kv, head_dim;
    float scale;         /* multiplier of q·k */
    float softcap;       /* 0 = none */
    const gp_rope_args *rope; /* NULL: q is rotated already */
} gp_attn_args;

/* ---- instance, workspace, ops ---- */

typedef enum gp_act { GP_ACT_SILU = 0, GP_ACT_GELU_TANH = 1 } gp_act;

typedef struct gp_backend_params {
    int32_t n_threads; /* default thread count of this instance's workspaces; 0 = online CPUs */
} gp_backend_params;

/* Per-context workspace parameters (sizes of the scratch it preallocates; ops never allocate). */
typedef struct gp_ws_params {
    int32_t n_threads;     /* threads the ops of this workspace use; 0 = the backend's default */
    int32_t max_tokens;    /* most rows (tokens) one op call takes: the prefill chunk */
    int32_t max_keys;      /* most keys one query sees (attention scratch) */
    int32_t head_dim;
    int32_t max_lora_rank; /* largest sum of LoRA ranks of one linear (0 = no LoRA) */
    int32_t compute;       /* gp_compute: GP_COMPUTE_BF16 makes the ops round their outputs to bfloat16 where
                              transformers' bf16 forward does (each op's comment says where) */
    int32_t max_cols;      /* widest input of a linear (in features); with GP_COMPUTE_BF16 the CPU backend packs
                              linear inputs [max_tokens, max_cols] to bf16 for vdpbf16ps (0: it never packs) */
    int32_t n_heads;       /* most query heads of one attention call (a device's attention scratch; 0 = head_dim
                              sized calls only) */
    int32_t n_kv;          /* most kv heads of one attention call (a device's copy of a chunk's keys; 0 = n_heads) */
} gp_ws_params;

typedef struct gp_backend gp_backend;

/* A workspace (one per context; created by ops->ws_init, freed by ops->ws_free). */
typedef struct gp_ws {
    gp_backend *be;
    int32_t n_threads;   /* threads its ops use (CPU) */
    gp_ws_params p;
    void *impl;          /* backend-private: scratch, streams */
} gp_ws;

/* An RMSNorm of a composite op's input (linears, linear_glu): the products read h = rmsnorm(x, w, d = the weights'
 * columns, eps, plus_one) with rmsnorm()'s bits; h [n, d] is scratch the op may use (a device that normalizes
 * inside its projection kernel does not write it).  NULL: the products read x. */
typedef struct gp_prenorm {
    const gp_wt *w;
    float *h;
    float eps;
    int plus_one;
} gp_prenorm;

typedef struct gp_backend_ops {
    /* -- instance and workspace -- */
    void (*free)(gp_backend *be);
    gp_status (*ws_init)(gp_backend *be, const gp_ws_params *p, gp_ws **out);
    void (*ws_free)(gp_ws *ws); /* NULL = no-op */

    /* -- memory (synchronous) -- */
    void *(*alloc)(gp_backend *be, size_t bytes); /* NULL when out of memory; zero bytes gives a valid pointer */
    void (*dealloc)(gp_backend *be, void *p);     /* NULL is a no-op */
    void (*upload)(gp_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(gp_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(gp_backend *be, void *dst, const void *src, size_t bytes);
    /* Host memory that upload/download move at the link's full rate (CUDA: pinned; CPU: malloc); NULL when out of
     * memory.  Where be->host_out is set, an op may also take it as its output y (a kernel writes it directly; the
     * host reads it once finish() returned).  host_free(NULL) is a no-op. */
    void *(*host_alloc)(gp_backend *be, size_t bytes);
    void (*host_free)(gp_backend *be, void *p);
    /* Binds a weight given as a host view (the mmap) into *out, usable by ops (CPU: *out = *view, no copy). */
    gp_status (*bind_weight)(gp_backend *be, const gp_wt *view, gp_wt *out);
    void (*unbind_weight)(gp_backend *be, gp_wt *w); /* releases what bind_weight allocated (CPU: nothing) */
    /* Free bytes of backend memory now (*total: its size); NULL when the backend does not know (host memory). */
    uint64_t (*mem_free)(gp_backend *be, uint64_t *total);

    /* -- compute (all float32; y may alias x only where said).  Ops are enqueued in order on the workspace and
     *    never fail one by one: finish() waits for them and returns the first error (CPU: they run at once). -- */
    /* y [n, L->w.rows] = x [n, L->w.cols] W^T + bias + LoRA terms (see gp_linear); y must not alias x; with LoRA
     * terms n <= the workspace's max_tokens and the ranks sum to <= its max_lora_rank (its scratch) */
    void (*linear)(gp_ws *ws, float *y, const float *x, const gp_linear *L, int32_t n);
    /* ys[i] = linear(x, Ls[i]) for i < m (m <= 4): several projections of one input (q, k, v) in one pass where the
     * device can, of x normalized first when pn is given; every output has [rmsnorm(),] linear()'s bits */
    void (*linears)(gp_ws *ws, int32_t m, float *const *ys, const float *x, const gp_prenorm *pn,
                    const gp_linear *const *Ls, int32_t n);
    /* y [n, F] = act(linear(x, gate)) * linear(x, up) of x normalized first when pn is given: [rmsnorm,] linear,
     * linear, glu with their bits; tmp [n, F] is scratch the op may use (the up projection) */
    void (*linear_glu)(gp_ws *ws, float *y, float *tmp, const float *x, const gp_prenorm *pn, const gp_linear *gate,
                       const gp_linear *up, int32_t n, gp_act act);
    /* y [n, L->w.rows] += linear(x, L): linear then add, with their bits (the residual add); tmp [n, L->w.rows] is
     * scratch the op may use; next (or NULL): the norm of the projection that follows (the next linears' or
     * linear_glu's pn), whose normalized input of y a device may prepare here (outputs unchanged) */
    void (*linear_add)(gp_ws *ws, float *y, float *tmp, const float *x, const gp_linear *L, const gp_prenorm *next,
                       int32_t n);
    /* y [n, d] = x [n, d] * rsqrt(mean(x^2) + eps) * (w or 1 + w), w [d] dense; y may alias x */
    void (*rmsnorm)(gp_ws *ws, float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps,
                    int plus_one);
    /* x [n, heads, hd] rotated in place (rotate_half convention) at positions pos0..pos0+n-1; inv_freq [hd/2]
     * (backend memory) */
    void (*rope)(gp_ws *ws, float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0, const float *inv_freq);
    /* q [n, nh, hd] and k [n, nkv, hd]: every head RMS-normalized by qn / kn first when they are given (data != NULL;
     * Qwen3 / Gemma 3 q_norm, k_norm: rmsnorm's bits), then rotated as rope() at positions pos0..; with dst, the
     * rotated k and dst->vals are then stored as kv_store(float rows) does (the cache's early rows) */
    void (*rope_qk)(gp_ws *ws, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                    const float *inv_freq, const gp_wt *qn, const gp_wt *kn, float eps, int plus_one,
                    const gp_kv_dst *dst);
    /* scaled dot-product attention (gp_attn_args) */
    void (*attention)(gp_ws *ws, const gp_attn_args *a);
    /* y [n, table.cols] = table[ids[i]] * scale (scale 1 = none); ids are host memory */
    void (*embed)(gp_ws *ws, float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale);
    /* gate [n] = act(gate) * up [n] */
    void (*glu)(gp_ws *ws, float *gate, const float *up, int64_t n, gp_act act);
    /* y [n] += x [n] */
    void (*add)(gp_ws *ws, float *y, const float *x, int64_t n);
    /* x [n, d] += c * v [d] for every row (steering add) */
    void (*add_row)(gp_ws *ws, float *x, const float *v, float c, int32_t n, int32_t d);
    /* x [n] = cap * tanh(x / cap) */
    void (*softcap)(gp_ws *ws, float *x, int64_t n, float cap);
    /* rows [r0, r0+n) of dk and dv = k, v [n, kvd] (keys and values of the same positions), stored quantized
     * (q/scale/minv) when quant, else float32 (f) */
    void (*kv_store)(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t r0, const float *k,
                     const float *v, int32_t n, int quant);
    /* rows [d0, d0+n) of dk, dv = rows [s0, s0+n) of sk, sv (same layout), quantized or float32 rows */
    void (*kv_copy)(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t d0, const gp_kv_rows *sk,
                    const gp_kv_rows *sv, int32_t s0, int32_t n, int quant);
    /* Waits until the workspace's ops have run; returns GP_OK or the first error among them, with gp_errmsg()
     * naming it (the error is then cleared).  Memory ops (download, copy, ...) of data that ops write must come
     * after it. */
    gp_status (*finish)(gp_ws *ws);
} gp_backend_ops;

/* A backend instance (one per model). */
struct gp_backend {
    const char *name;          /* "cpu", "cuda" */
    const gp_backend_ops *ops;
    int host_memory;           /* 1: backend memory is host memory (host pointers may be passed to ops) */
    int host_out;              /* 1: host_alloc memory may be an op's output (CUDA: pinned, mapped memory) */
    gp_backend_params p;
    void *impl;                /* backend-private state */
};

/* Creates the CPU backend (reference).  *out is freed by gp_backend_free. */
gp_status gp_backend_cpu_init(const gp_backend_params *p, gp_backend **out);

/* Creates the CUDA backend on device dev (a `make cuda` build): GP_ERR_UNSUPPORTED with the reason when this build
 * has no CUDA or there is no usable device.  *out is freed by gp_backend_free. */
gp_status gp_backend_cuda_init(int32_t dev, gp_backend **out);

/* Decode steps of a workspace: out[0] replayed as CUDA graphs, out[1] graphs built, out[2] launched kernel by kernel
 * after being recorded (all 0 for a workspace of another backend or a build without CUDA). */
void gp_backend_cuda_graph_stats(const gp_ws *ws, uint64_t out[3]);

/* Frees a backend instance (NULL = no-op).  Its buffers and workspaces must be freed first. */
void gp_backend_free(gp_backend *be);

#endif
