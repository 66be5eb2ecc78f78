/* cuda_ops.h — the CUDA kernels as plain C calls on device pointers (compiled by nvcc in cuda_*.cu, linked only in
 * the `make cuda` build), driven by the CUDA backend (cuda_backend.c, the gp_backend_ops table of backend.h).
 * Every op is enqueued on its handle's stream and returns 0 or a CUDA error code (gp_cu_errstr names it); nothing
 * here prints, exits or allocates behind the caller's back.
 *
 * Numerics: float32 activations and accumulation; weights are read in their stored format (f32, bf16, f16, MLX
 * affine) and widened in registers.  Every reduction has one fixed order that depends neither on the number of
 * tokens of a call nor on the device's scheduling (no atomics): a weight row's dot product is one warp's, lane l
 * taking 16-byte vectors (or 32-value units of a quantized row) l, l+32, ... in order and the warp summing its lanes
 * by the xor butterfly, the same for 1 or 512 tokens; attention splits the keys at fixed absolute positions
 * (GP_CU_ATTN_SPLIT) and combines the splits in order, in two levels: the splits of each span of GP_CU_ATTN_SPAN
 * (fixed absolute boundaries too), then the spans.  So results are bit-identical run to run and for every prefill
 * chunking. */
#ifndef GP_CUDA_OPS_H
#define GP_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { GP_CU_F32 = 0, GP_CU_BF16 = 1, GP_CU_F16 = 2, GP_CU_QAFFINE = 3 };
enum { GP_CU_ACT_SILU = 0, GP_CU_ACT_GELU_TANH = 1 };
/* gp_cu_matmul's mode bits: ACC adds the product to y (the residual add, or a LoRA term: a separate rounding);
 * ROUND rounds the output to bf16 (the bf16 mode's linear: sum + bf16(bias) rounded, and y + that rounded with ACC);
 * ROUNDW rounds f32/f16 weights to bf16 as they are read (the bf16 mode loads checkpoints as transformers does);
 * MMA multiplies bf16 operands on tensor cores (cuda_mma.cu: the bf16 mode, dense weights whose rows are 16-byte
 * multiples; other shapes keep the float32 kernels); EARLY (one token) lets the next kernel be scheduled before this
 * one's wait, for a caller whose next op reads only weights before its own wait (pdl_enter) */
enum { GP_CU_ACC = 1, GP_CU_ROUND = 2, GP_CU_ROUNDW = 4, GP_CU_MMA = 8, GP_CU_EARLY = 16 };
#define GP_CU_ATTN_SPLIT 64 /* keys per attention split (fixed absolute boundaries) */
#ifndef GP_CU_ATTN_SPAN
#define GP_CU_ATTN_SPAN 32 /* splits per span (2,048 keys): a chunk's blocks take a span of a tile's splits each */
#endif

typedef struct gp_cu gp_cu; /* one stream on one device, and the bf16 mode of the ops enqueued through it */

/* The structs that kernels take by value have no padding bytes (explicit `pad` fields, checked below): a recorded
 * decode step is compared with the last one byte for byte, kernel arguments included (gp_cu_record). */
#ifdef __cplusplus
#define GP_CU_NO_PADDING(T, bytes) static_assert(sizeof(T) == (bytes), #T " has padding bytes")
#else
#define GP_CU_NO_PADDING(T, bytes) _Static_assert(sizeof(T) == (bytes), #T " has padding bytes")
#endif

/* A weight matrix (or vector: rows = 1) in device memory, row-major.  Dense: dtype GP_CU_F32/BF16/F16.  GP_CU_QAFFINE
 * (MLX affine): row r is a little-endian bit stream of cols values of `bits` bits, w = scale * q + bias with scale,
 * bias [rows, cols / group] of dtypes sdt, bdt (biases NULL = 0). */
typedef struct gp_cu_wt {
    const void *data; /* NULL = absent */
    int64_t rows, cols;
    const void *scales, *biases;
    int32_t dtype, sdt, bdt, group, bits, pad;
} gp_cu_wt;
GP_CU_NO_PADDING(gp_cu_wt, 5 * 8 + 6 * 4);

/* Returns the number of usable devices (>= 1), or 0 with a reason in msg (no driver, no device, ...). */
int gp_cu_device_count(char *msg, size_t cap);
/* Opens device dev: a stream.  Returns 0 and *out, else a CUDA error with a reason in msg. */
int gp_cu_open(int32_t dev, gp_cu **out, char *msg, size_t cap);
/* Closes a handle (after its stream's work); NULL is a no-op. */
void gp_cu_close(gp_cu *d);
/* Device name and memory (free, total bytes) of the handle's device. */
int gp_cu_mem(gp_cu *d, char *name, size_t cap, uint64_t *free_b, uint64_t *total_b);
/* Static description of a CUDA error code. */
const char *gp_cu_errstr(int e);

/* Device memory (cudaMalloc; never managed memory).  *p = NULL for bytes = 0. */
int gp_cu_alloc(gp_cu *d, void **p, size_t bytes);
void gp_cu_release(gp_cu *d, void *p);
/* Copies on d's stream, synchronous with respect to the host (when they return, dst holds the data). */
int gp_cu_h2d(gp_cu *d, void *dst, const void *src, size_t bytes);
int gp_cu_d2h(gp_cu *d, void *dst, const void *src, size_t bytes);
int gp_cu_d2d(gp_cu *d, void *dst, const void *src, size_t bytes);
/* Host-to-device copy enqueued on the stream (from pageable memory src may be reused when it returns). */
int gp_cu_h2d_async(gp_cu *d, void *dst, const void *src, size_t bytes);
/* The bf16 compute mode of the ops enqueued through d from now on (GP_COMPUTE_BF16): each op rounds its outputs to
 * bfloat16 where transformers' bf16 forward does (the CPU backend's bf16 mode, op for op), except attention, which
 * follows sdpa's numerics on the GPU (float32 scores and softmax, the probabilities rounded to bf16 before p·v,
 * the output rounded).  on = 0: float32. */
void gp_cu_set_bf16(gp_cu *d, int on);
int gp_cu_bf16(gp_cu *d);
/* Device scratch of at least `bytes` owned by d (freed by gp_cu_close): the tensor-core prefill GEMM's bf16 copy of
 * its input [n, cols], then a split GEMM's chain sums; between GEMMs, a chunk attention's bf16 copy of its keys and
 * values (reserved at workspace creation, gp_cu_gemm_scratch_bytes and gp_cu_attn_copy_bytes; a product or a chunk
 * that does not fit takes the kernel without it).  gp_cu_scratch returns it (NULL, *cap = 0: none). */
int gp_cu_reserve(gp_cu *d, size_t bytes);
void *gp_cu_scratch(gp_cu *d, size_t *cap);
/* The scratch bytes the GEMMs of up to max_tokens tokens and max_cols columns use. */
size_t gp_cu_gemm_scratch_bytes(int64_t max_tokens, int64_t max_cols);
/* The scratch bytes of a chunk attention's bf16 copy of `positions` positions of n_kv heads of head_dim. */
size_t gp_cu_attn_copy_bytes(int64_t n_kv, int64_t positions, int64_t head_dim);

/* Waits for the stream (after running a recorded step); returns the first error of the work enqueued. */
int gp_cu_sync(gp_cu *d);
/* Decode steps as CUDA graphs (cuda_rt.cu): gp_cu_graphs(d, mode) sets how d runs them (0 or a CUDA error: its
 * buffers): OFF kernel by kernel, ON recorded and replayed, AUTO whichever of the two its timed steps ran faster
 * (re-timed every 1024 steps).  gp_cu_record(d) begins a step: the launches enqueued through d from now until
 * gp_cu_sync are recorded, and the sync replays the step as a graph when it repeats the last step's launches and
 * argument bytes, else launches it kernel by kernel (a copy on d's stream meanwhile runs what was recorded first).
 * While recording, gp_cu_var copies bytes that change every step (positions, the cache descriptor) to d's per-step
 * block and returns their device address, which a kernel takes instead of the values (the block is uploaded before
 * the launches that follow; the same bytes again in a step get the same address); NULL when not recording or full.
 * gp_cu_graph_stats: steps replayed, graphs built, steps launched kernel by kernel. */
enum { GP_CU_GRAPHS_OFF = 0, GP_CU_GRAPHS_ON = 1, GP_CU_GRAPHS_AUTO = 2 };
int gp_cu_graphs(gp_cu *d, int mode);
void gp_cu_record(gp_cu *d);
void *gp_cu_var(gp_cu *d, const void *src, size_t bytes);
void gp_cu_graph_stats(gp_cu *d, uint64_t out[3]);

/* Multiprocessors of the current device (132 on an H100 SXM); 0 when the runtime cannot tell. */
int gp_cu_sm_count(void);
/* Blocks of kernel k (threads and smem bytes each) resident at once on one multiprocessor, 0 where the occupancy API
 * fails; remembered by d for the first 16 shapes it is asked (the API takes 0.25-0.39 us of the host's time a query
 * on the H200 machine, and a decode step asks for most of its staged projections: about 50 a step). */
int gp_cu_occupancy(gp_cu *d, const void *k, int threads, size_t smem);
/* d's work counters in device memory (zeros, 2 unsigned): the looping GLU's blocks claim their groups from them, from
 * before their wait, and the last block to finish sets them to zero again; d owns them.  One launch uses them at a
 * time: the kernel after a looping GLU, which it lets in early, must not use them (in a decode step it is the down
 * projection). */
unsigned *gp_cu_counters(gp_cu *d);

/* Pinned host memory (copies from it run asynchronously). */
int gp_cu_host_alloc(void **p, size_t bytes);
void gp_cu_host_free(void *p);

/* --- ops (device pointers; shapes in the comment) --- */

/* y [n, w.rows] (+)= alpha * (x [n, w.cols] @ W^T) (+ bias [w.rows]) under mode (GP_CU_ACC, ROUND, ROUNDW): one warp
 * per row (4 rows x 8 tokens per warp for dense prefill tiles), fixed order (header comment). */
int gp_cu_matmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n, int mode,
                 float alpha);
/* The tensor-core product of gp_cu_matmul (GP_CU_MMA; b: bias data of dtype bdt or NULL), and whether a weight and
 * input qualify (dense, cols % 8 == 0, 16-byte aligned). */
int gp_cu_matmul_mma(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                     int mode, float alpha);
int gp_cu_mma_ok(const gp_cu_wt *w, const float *x);
/* Lets the tensor-core GEMM use its shared memory (once per process; 0 or a CUDA error). */
int gp_cu_mma_prepare(void);
/* Allows the tiled prefill kernels their shared memory (once per process, before any projection); the CUDA error. */
int gp_cu_matmul_prepare(void);
/* An RMSNorm that the decode projections (gp_cu_matmul_multi, gp_cu_matmul_glu, gp_cu_matmul_mma_glu) apply to their
 * input first, with gp_cu_rmsnorm's bits (every block normalizes the token into shared memory). */
typedef struct gp_cu_norm {
    gp_cu_wt w;
    float eps;
    int plus_one;
} gp_cu_norm;
/* 1 when a block of `threads` threads can apply nm to a token of cols columns (rms_threads(cols) = threads, at most
 * 8192 columns, a dense weight). */
int gp_cu_norm_fits(const gp_cu_norm *nm, int64_t cols, int threads);
/* A hand-over in the scratch: the kernel just enqueued also wrote the next GEMM's input copy of x [n, cols], or of
 * its RMSNorm by nm (the wgmma layout: to_bf16_wg_kernel's, rmsnorm_xb_kernel's bits), at byte off of the scratch.
 * gp_cu_hand_take returns 1 and that offset when x, cols, n and the norm match and nothing else was enqueued or
 * recorded since (the copy is still x's); either way the hand-over is then spent. */
void gp_cu_hand_set(gp_cu *d, const float *x, int64_t cols, int32_t n, const gp_cu_norm *nm, size_t off);
int gp_cu_hand_take(gp_cu *d, const float *x, int64_t cols, int32_t n, const gp_cu_norm *nm, size_t *off);
/* One token on tensor cores: m <= 3 weights of one dtype and column count in one launch (each part's bits those of
 * gp_cu_matmul_mma), and gate|up with the GLU (gp_cu_matmul_mma twice then gp_cu_glu's bits); gate|up of the
 * input's RMSNorm by nm when given (q|k|v's blocks of 4 warps cannot apply one: nm must be NULL there).  Both
 * return cudaErrorNotSupported (nothing enqueued) when the weights or the norm do not qualify. */
int gp_cu_matmul_mma_multi(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                           const gp_cu_wt *ws, const gp_cu_wt *bs, int mode);
int gp_cu_matmul_mma_glu(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const gp_cu_wt *g,
                         const gp_cu_wt *bg, const gp_cu_wt *u, const gp_cu_wt *bu, int32_t act, int mode);
/* A chunk of n > 16 tokens through m <= 3 bf16 weights of one column count (q|k|v) on tensor cores in one launch,
 * of x or its RMSNorm by nm (normalized into the GEMM's bf16 copy of its input), each part the bits of
 * [gp_cu_rmsnorm then] gp_cu_matmul_mma; cudaErrorNotSupported (nothing enqueued) when they do not qualify. */
int gp_cu_matmul_mma_parts(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                           const gp_cu_wt *ws, const gp_cu_wt *bs, int32_t n, int mode);
/* A chunk of n > 16 tokens through a GLU's bf16 gate and up in one launch: y [n, g.rows] = act(gate) * up of x or
 * its RMSNorm by nm, with the bits of gp_cu_matmul_mma_parts then gp_cu_glu; cudaErrorNotSupported (nothing
 * enqueued) when they do not qualify. */
int gp_cu_matmul_mma_glu_chunk(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const gp_cu_wt *g,
                               const gp_cu_wt *bg, const gp_cu_wt *u, const gp_cu_wt *bu, int32_t n, int32_t act,
                               int mode);
/* A chunk (n > 16 tokens) through a bf16 weight added to y (GP_CU_ACC in mode): y [n, w.rows] += x W^T (+ b), the
 * bits of gp_cu_matmul_mma; next (or NULL): the RMSNorm of the projection that follows, whose input copy of y the
 * GEMM may leave it (gp_cu_hand_set).  cudaErrorNotSupported (nothing enqueued) when they do not qualify. */
int gp_cu_matmul_mma_add_chunk(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *b, int32_t n,
                               int mode, const gp_cu_norm *next);
/* One token (decode) through m <= 4 dense weights of one dtype in one launch: ys[i] [w[i].rows] = h @ W_i^T (+ b_i),
 * h = x or its RMSNorm by nm; each [gp_cu_rmsnorm then] gp_cu_matmul's bits.  Returns cudaErrorNotSupported
 * (nothing enqueued) when the weights or the norm do not qualify (other dtypes, unaligned, GP_CU_MMA; a norm of
 * fewer than 1024 or more than 8192 columns); then normalize and call gp_cu_matmul per weight. */
int gp_cu_matmul_multi(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                       const gp_cu_wt *ws, const gp_cu_wt *bs, int mode);
/* One token: y [g.rows] = act(h @ G^T + bg) * (h @ U^T + bu), h as gp_cu_matmul_multi's: a warp runs a gate row and
 * its up row, then the GLU ([gp_cu_rmsnorm,] gp_cu_matmul twice then gp_cu_glu, with their bits).
 * cudaErrorNotSupported as gp_cu_matmul_multi. */
int gp_cu_matmul_glu(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const gp_cu_wt *g, const gp_cu_wt *bg,
                     const gp_cu_wt *u, const gp_cu_wt *bu, int32_t act, int mode);
/* y [n, dim] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w); y may alias x. */
int gp_cu_rmsnorm(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, int32_t n, int32_t dim, float eps,
                  int plus_one);
/* q [n, nh, hd] and k [n, nkv, hd] (k may be NULL with nkv 0): each head RMS-normalized by qn / kn first when they
 * are given (data != NULL; gp_cu_rmsnorm's bits), then rotated in place (rotate_half) at positions pos0 + t;
 * inv_freq [hd/2] (device).  With kf (not NULL): the rotated keys and v [n, nkv * hd] are also written to the rows
 * r0 + t of kf and vf ([rows, nkv * hd]: float32, or kb: bfloat16, rounded to nearest even). */
int gp_cu_rope_qk(gp_cu *d, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                  const float *inv_freq, const gp_cu_wt *qn, const gp_cu_wt *kn, float eps, int plus_one, float *kf,
                  float *vf, const float *v, int32_t r0, int kb);
/* y [n, table.cols] = table[ids[t]] * scale; ids [n] on the device; any weight format. */
int gp_cu_embed(gp_cu *d, float *y, const int32_t *ids, int32_t n, const gp_cu_wt *table, float scale);
/* gate [n] = act(gate) * up [n] */
int gp_cu_glu(gp_cu *d, float *gate, const float *up, int64_t n, int32_t act);
/* y [n] += x [n] */
int gp_cu_add(gp_cu *d, float *y, const float *x, int64_t n);
/* y [n, dim] += alpha * v [dim] for every row (steering) */
int gp_cu_add_rows(gp_cu *d, float *y, const float *v, float alpha, int32_t n, int32_t dim);
/* x [n] = cap * tanh(x / cap) */
int gp_cu_softcap(gp_cu *d, float *x, int64_t n, float cap);

/* Key or value rows of one layer (gp_kv_rows of backend.h): float32 rows at f + r*kvd, or at q + r*row_bytes bfloat16
 * rows (bits 16) or affine-quantized ones with per-group scale/min [n_groups] (8-bit one per byte, 4-bit two per byte,
 * low nibble first). */
typedef struct gp_cu_kv_rows {
    float *f;
    uint8_t *q;
    float *scale, *minv;
    int32_t kvd, bits, group, n_groups, row_bytes, pad;
} gp_cu_kv_rows;
GP_CU_NO_PADDING(gp_cu_kv_rows, 4 * 8 + 6 * 4);

/* rows [r0, r0+n) of dk and dv = k, v [n, kvd], quantized (per group: scale = (max - min) / (2^bits - 1), q =
 * round((x - min) / scale); bits 16: rounded to bfloat16) when quant, else copied. */
int gp_cu_kv_store(gp_cu *d, const gp_cu_kv_rows *dk, const gp_cu_kv_rows *dv, int32_t r0, const float *k,
                   const float *v, int32_t n, int quant);
/* rows [d0, d0+n) of dk, dv = rows [s0, s0+n) of sk, sv (same layout; regions may not overlap). */
int gp_cu_kv_copy(gp_cu *d, const gp_cu_kv_rows *dk, const gp_cu_kv_rows *dv, int32_t d0, const gp_cu_kv_rows *sk,
                  const gp_cu_kv_rows *sv, int32_t s0, int32_t n, int quant);

/* A run of held positions [p0, p1) at consecutive rows r0.. of storage src (0 the cache, 1 the chunk's staged rows),
 * quantized rows when quant (gp_kv_seg). */
typedef struct gp_cu_kv_seg {
    int32_t p0, p1, r0;
    uint8_t src, quant, pad[2];
} gp_cu_kv_seg;
GP_CU_NO_PADDING(gp_cu_kv_seg, 16);

#define GP_CU_KV_MAX_SEGS 8

/* Attention of n queries at positions pos0 + t over the held keys (gp_kv_desc): query p sees held key j iff j <= p
 * and (window == 0 or p - j < window or j < pinned). */
typedef struct gp_cu_attn {
    float *out;                  /* [n, n_heads, head_dim] */
    const float *q;              /* [n, n_heads, head_dim] */
    gp_cu_kv_rows k[2], v[2];    /* [0] the cache, [1] the chunk's staged rows */
    gp_cu_kv_seg seg[GP_CU_KV_MAX_SEGS];
    int32_t n_seg, window, pinned;
    int32_t pos0, n, n_heads, n_kv, head_dim;
    float scale, softcap;
    float *part;                 /* scratch, gp_cu_attn_part_floats(...) floats */
    /* decode with the rope inside (rk != NULL, n == 1): q and the keys rk [n_kv, head_dim] are rotated at pos0 after
     * the per-head norms qn, kn (data NULL: none), and the rotated keys and the values rv go to row r0 of kf, vf
     * (the cache rows the descriptor reads for pos0; kb: bfloat16 rows): gp_cu_rope_qk's bits */
    float *rk, *kf, *vf;
    const float *rv, *inv_freq;
    gp_cu_wt qn, kn;
    float eps;
    int32_t plus_one, r0, kb;
} gp_cu_attn;
GP_CU_NO_PADDING(gp_cu_attn, 2 * 8 + 4 * sizeof(gp_cu_kv_rows) + GP_CU_KV_MAX_SEGS * 16 + 8 * 4 + 2 * 4 + 6 * 8 +
                                 2 * sizeof(gp_cu_wt) + 4 * 4);
#define GP_CU_ATTN_MAX_KV 1024
/* Floats of gp_cu_attn.part one call needs. */
size_t gp_cu_attn_part_floats(const gp_cu_attn *a);
/* Lets the attention kernels take their shared memory (above 48 KB): once before any attention. */
int gp_cu_attn_prepare(void);
int gp_cu_attention(gp_cu *d, const gp_cu_attn *a);

#ifdef __cplusplus
}
#endif

#endif
