/* cuda_matmul.cu — the projections of the CUDA backend: y [n, rows] (+)= alpha * (x [n, cols] @ W^T) (+ bias).
 * Dense weights (f32/bf16/f16), one token: one warp per weight row streams it with 16-byte loads (8 bf16/f16 or 4
 * f32 weights), widening to float32 in registers; lane l takes vectors l, l+32, ... and the warp sums its lanes by
 * the xor butterfly, so an element's bits depend on nothing but its row and its token.  Several tokens (prefill):
 * a block stages tiles of tokens and rows in shared memory and each thread keeps one lane's sums for 8 x 8
 * outputs (matmul_tiled_kernel), the same operations in the same order, so the bits are decode's for every prefill
 * chunking.  MLX affine weights: lane l takes 32-value units l, l+32, ..., each value dequantized as scale * q +
 * bias in float32.  gp_cu_matmul_multi (q|k|v) and gp_cu_matmul_glu (gate|up + GLU) run one token through several
 * weights in one launch with the bits of the separate calls. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>


/* bf16 mode (ROUNDW), float32/float16 weights: transformers loads them as bf16, so each weight is rounded (compiled
 * out for bf16 weights). */
template <int DT, int E>
__device__ __forceinline__ void wt_mode(float *f, int roundw) {
    if (DT != GP_CU_BF16 && roundw)
#pragma unroll
        for (int e = 0; e < E; e++) f[e] = bf16r(f[e]);
}

#define WARPS_PER_BLOCK 8
#define TOK_TILE 8

/* Widens the 16-byte vector u (E elements of the stored dtype) into f[E]. */
template <int DT> struct vec_traits;
template <> struct vec_traits<GP_CU_F32> {
    enum { E = 4 };
    static __device__ __forceinline__ void widen(const uint4 &u, float *f) {
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ float one(const void *p, int64_t i) { return ((const float *)p)[i]; }
};
template <> struct vec_traits<GP_CU_BF16> {
    enum { E = 8 };
    static __device__ __forceinline__ void widen(const uint4 &u, float *f) {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
    static __device__ __forceinline__ float one(const void *p, int64_t i) {
        return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    }
};
template <> struct vec_traits<GP_CU_F16> {
    enum { E = 8 };
    static __device__ __forceinline__ void widen(const uint4 &u, float *f) {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __half2 h = *(const __half2 *)&w[i];
            float2 v = __half22float2(h);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
    static __device__ __forceinline__ float one(const void *p, int64_t i) {
        return __half2float(((const __half *)p)[i]);
    }
};

/* acc[t] = row r of W . input row t0 + t (t < nt), in the fixed order of the header comment. */
template <int DT, int T, bool VEC>
__device__ __forceinline__ void row_dot(float *__restrict__ acc, const void *__restrict__ W, int64_t r,
                                        const float *__restrict__ x, int64_t cols, int32_t t0, int nt, int lane,
                                        int roundw) {
    typedef vec_traits<DT> V;
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    if (VEC) {
        const uint4 *wrow = (const uint4 *)((const char *)W + (size_t)r * cols * (DT == GP_CU_F32 ? 4 : 2));
        const int64_t nv = cols / V::E;
        /* UNR 16-byte weight loads in flight per lane before any arithmetic (weights are read once: streaming) */
        enum { UNR = 4 };
        for (int64_t v0 = lane; v0 < nv; v0 += 32 * UNR) {
            uint4 wv[UNR];
#pragma unroll
            for (int u = 0; u < UNR; u++)
                if (v0 + 32 * u < nv) wv[u] = __ldcs(wrow + v0 + 32 * u);
#pragma unroll
            for (int u = 0; u < UNR; u++) {
                const int64_t v = v0 + 32 * u;
                if (v >= nv) break;
                float wf[V::E];
                V::widen(wv[u], wf);
                wt_mode<DT, V::E>(wf, roundw);
#pragma unroll
                for (int t = 0; t < T; t++) {
                    if (t < nt) {
                        const float4 *xv = (const float4 *)(x + (size_t)(t0 + t) * cols + v * V::E);
#pragma unroll
                        for (int q = 0; q < V::E / 4; q++) {
                            const float4 a = __ldg(xv + q);
                            acc[t] = fmaf(wf[4 * q], a.x, acc[t]);
                            acc[t] = fmaf(wf[4 * q + 1], a.y, acc[t]);
                            acc[t] = fmaf(wf[4 * q + 2], a.z, acc[t]);
                            acc[t] = fmaf(wf[4 * q + 3], a.w, acc[t]);
                        }
                    }
                }
            }
        }
    } else {
        for (int64_t k = lane; k < cols; k += 32) {
            float wk = V::one(W, r * cols + k);
            wt_mode<DT, 1>(&wk, roundw);
#pragma unroll
            for (int t = 0; t < T; t++)
                if (t < nt) acc[t] = fmaf(wk, x[(size_t)(t0 + t) * cols + k], acc[t]);
        }
    }
}

/* acc[i] = row r of W[i] . x for one token, i < R: row_dot's order.  The weights stream through two register
 * buffers of U vectors per row and lane: the next buffer's loads are in flight while the current one is multiplied,
 * so a warp never waits for its loads with none pending (decode streams each weight once: the more loads in flight,
 * the nearer the memory's rate; deeper buffers cost registers, hence blocks per SM, and were no faster:
 * BENCHMARKS.md).  Both buffers are loaded before pdl_enter(), so the kernel streams while the previous one, which
 * writes the input, finishes; then every thread of the block (active or not: prep may synchronize the block) calls
 * prep(), which returns the input x. */
template <int DT, int R, typename Prep>
__device__ __forceinline__ void dot1(float *__restrict__ acc, const void *const *W, int64_t r, bool active,
                                     int64_t cols, int lane, int roundw, Prep prep, bool early = false) {
    typedef vec_traits<DT> V;
    enum { U = 4 / R };
    const int64_t nv = cols / V::E;
    const uint4 *wrow[R];
    uint4 wa[R][U], wb[R][U];
#pragma unroll
    for (int i = 0; i < R; i++) {
        acc[i] = 0.0f;
        wrow[i] = (const uint4 *)((const char *)W[i] + (size_t)(active ? r : 0) * cols * (DT == GP_CU_F32 ? 4 : 2));
    }
    auto load = [&](uint4 (*w)[U], int64_t v0) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int i = 0; i < R; i++)
                if (v0 + 32 * u < nv) w[i][u] = __ldcs(wrow[i] + v0 + 32 * u);
    };
    auto mul = [&](uint4 (*w)[U], int64_t v0, const float *x) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t v = v0 + 32 * u;
            if (v >= nv) break;
            const float4 *xv = (const float4 *)(x + v * V::E);
#pragma unroll
            for (int i = 0; i < R; i++) {
                float wf[V::E];
                V::widen(w[i][u], wf);
                wt_mode<DT, V::E>(wf, roundw);
#pragma unroll
                for (int q = 0; q < V::E / 4; q++) {
                    const float4 a = xv[q];
                    acc[i] = fmaf(wf[4 * q], a.x, acc[i]);
                    acc[i] = fmaf(wf[4 * q + 1], a.y, acc[i]);
                    acc[i] = fmaf(wf[4 * q + 2], a.z, acc[i]);
                    acc[i] = fmaf(wf[4 * q + 3], a.w, acc[i]);
                }
            }
        }
    };
    enum { STEP = 32 * U };
    if (active) load(wa, lane), load(wb, lane + STEP);
    pdl_enter(early);
    const float *x = prep();
    if (!active) return;
    for (int64_t v0 = lane; v0 < nv; v0 += 2 * STEP) {
        mul(wa, v0, x);
        if (v0 + 2 * STEP < nv) load(wa, v0 + 2 * STEP);
        if (v0 + STEP >= nv) break;
        mul(wb, v0 + STEP, x);
        if (v0 + 3 * STEP < nv) load(wb, v0 + 3 * STEP);
    }
}

/* One token: warp w of the block computes row r0 + w (dot1), and the block's first lanes store its WARPS_PER_BLOCK
 * outputs together (one 32-byte write, also where y is pinned host memory: the lm_head's logits).  A storing thread
 * reads its output's bias first and its residual (GP_CU_ACC) once the previous kernel is done, before the products:
 * read after them, they were a memory latency at the kernel's end. */
template <int DT>
__device__ __forceinline__ void matmul_one(float *__restrict__ y, const float *__restrict__ x, const void *W,
                                           int64_t rows, int64_t cols, const void *bias, int bias_dt, int mode,
                                           float alpha) {
    __shared__ float ys[WARPS_PER_BLOCK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * WARPS_PER_BLOCK, r = r0 + warp, rs = r0 + threadIdx.x;
    const bool st = threadIdx.x < WARPS_PER_BLOCK && rs < rows; /* this thread stores row rs */
    const float b = st && bias ? wt_at(bias, bias_dt, rs) : 0.0f;
    float old = 0.0f, acc[1];
    const void *const W1[1] = {W};
    auto prep = [&] {
        if (st && (mode & GP_CU_ACC)) old = y[rs];
        return x;
    };
    dot1<DT, 1>(acc, W1, r, r < rows, cols, lane, mode & GP_CU_ROUNDW, prep, (mode & GP_CU_EARLY) != 0);
    if (r < rows) {
        const float s = warp_sum(acc[0]);
        if (lane == 0) ys[warp] = s;
    }
    __syncthreads();
    if (st) y[rs] = mm_out(old, mm_val(ys[threadIdx.x], bias != NULL, b, mode, alpha), mode);
}

/* Grid (ceil(rows / WARPS_PER_BLOCK), ceil(n / T)); warp = row, blockIdx.y = tile of T tokens.  VEC: the 16-byte
 * path (cols a multiple of the vector width, rows 16-byte aligned), else one element per lane per step. */
template <int DT, int T, bool VEC>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                  int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, float alpha) {
    if (T == 1 && VEC) { /* (dot1 calls pdl_enter after its first weight loads) */
        matmul_one<DT>(y, x, W, rows, cols, bias, bias_dt, mode, alpha);
        return;
    }
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int32_t t0 = blockIdx.y * T;
    const int nt = n - t0 < T ? n - t0 : T;
    float acc[T];
    row_dot<DT, T, VEC>(acc, W, r, x, cols, t0, nt, lane, mode & GP_CU_ROUNDW);
    const float b = bias ? wt_at(bias, bias_dt, r) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float v = mm_val(warp_sum(acc[t]), bias != NULL, b, mode, alpha);
        if (lane == 0 && t < nt) mm_store(y + (size_t)(t0 + t) * rows + r, v, mode);
    }
}


/* ---- prefill tiled through shared memory ---- */

/* A block computes PT tokens x PR weight rows of y.  The columns go by rounds of 32 vectors (32 E columns: round j
 * holds vector 32 j + l of every row at slot l, the vector lane l takes in matmul_kernel), through PSTAGES shared
 * buffers filled by cp.async.  Thread (warp w, lane l) keeps slot l's partial sums of a TT x TR sub-tile of the
 * block's outputs, each in row_dot's order (vectors in increasing order, a vector's elements in order); at the end
 * the warp adds its 32 slots by the xor butterfly, done as a reduce-scatter (each stage exchanges half the values,
 * each sum is the butterfly's): the bits of matmul_kernel, with each weight and input read once per block. */
#define PT 16
#define PR 32
#define PSTAGES 3
#define PTHREADS 256
#define TT 8 /* a thread's tokens */
#define TR 8 /* a thread's rows */
/* bytes of one stage: the input [PT][8 E chunks of 16 bytes], the weights [PR][32 vectors] */
#define PSTAGE_BYTES(E) (PT * 8 * (E) * 16 + PR * 32 * 16)
#define PSMEM(E) (PSTAGES * PSTAGE_BYTES(E))

/* The loads of one round into a stage buffer by cp.async: input chunk c (4 floats) of token t at [t][q * 32 + c / Q]
 * with q = c % Q, Q = E / 4 (slot-major, so lane l's float4 reads are conflict-free), weight vector l of row i at
 * [i][l].  Thread tid takes input chunks tid + u PTHREADS (chunk c of tokens tx + u XT) and weight vectors tid + u
 * PTHREADS (vector lw of rows rw + 8 u); only the column moves from round to round, so the addresses are set up
 * once.  Tokens, rows and vectors past the end are zeros (the sums of the first two are never stored; a lane
 * without a vector in the round skips the round: matmul_tiled_kernel). */
template <int E, int ESZ>
struct ploader {
    enum { Q = E / 4, XCH = PT * 8 * E, XT = PTHREADS / (8 * E), XU = XCH / PTHREADS, WU = PR * 32 / PTHREADS };
    static_assert(XCH % PTHREADS == 0 && (PR * 32) % PTHREADS == 0 && PTHREADS % 32 == 0, "whole steps");
    const char *xp, *wp; /* the thread's first chunks at round 0 */
    int32_t xdst, xcol, xtok, wrow, wvec;

    __device__ ploader(const float *x, const void *W, int64_t rows, int64_t cols, int32_t n, int32_t t0, int64_t r0) {
        const int tid = threadIdx.x, tx = tid / (8 * E), cx = tid % (8 * E), rw = tid / 32, lw = tid % 32;
        xp = (const char *)x + ((int64_t)(t0 + tx) * cols + 4 * cx) * 4;
        wp = (const char *)W + ((r0 + rw) * cols + (int64_t)lw * E) * ESZ;
        xdst = (tx * 8 * E + (cx % Q) * 32 + cx / Q) * 16;
        xcol = 4 * cx, xtok = n - t0 - tx, wvec = lw;
        wrow = (int32_t)(rows - r0 - rw < 1 << 30 ? rows - r0 - rw : 1 << 30);
    }
    /* issues round j's loads into sb and commits them as one group (x, W: the kernel's, mapped addresses for the
     * zero fills) */
    __device__ __forceinline__ void load(char *sb, int64_t j, const float *x, const void *W, int64_t cols) const {
        const int64_t c0 = j * 32 * E;
        const bool xin = c0 + xcol < cols, win = j * 32 + wvec < cols / E;
#pragma unroll
        for (int u = 0; u < XU; u++) {
            const bool ok = xin && u * XT < xtok;
            cp16(sb + xdst + u * PTHREADS * 16, ok ? xp + (u * XT * cols + c0) * 4 : (const char *)x, ok);
        }
#pragma unroll
        for (int u = 0; u < WU; u++) {
            const bool ok = win && 8 * u < wrow;
            const char *src = ok ? wp + (8 * u * cols + c0) * ESZ : (const char *)W;
            cp16(sb + XCH * 16 + (threadIdx.x + u * PTHREADS) * 16, src, ok);
        }
        cp_commit();
    }
};

/* acc[t][i] += slot lane's vector of round sb for tokens wt TT + t and rows wr TR + i, in row_dot's order: by
 * halves of 4 elements for 8-element vectors (the input's registers for one half) */
template <int DT>
__device__ __forceinline__ void pround(float (&acc)[TT][TR], const char *sb, int wt, int wr, int lane, int roundw) {
    typedef vec_traits<DT> V;
    enum { E = V::E, Q = E / 4 };
    const float4 *xs = (const float4 *)sb;
    const char *ws = sb + PT * 8 * E * 16;
    /* (bf16 weights: the halves as a loop; unrolled, the compiler spilled and the kernel was 10% slower, while f16
     * weights, with their conversions, lose 7% from the loop: BENCHMARKS.md) */
#pragma unroll(DT == GP_CU_BF16 ? 1 : Q)
    for (int q = 0; q < Q; q++) {
        float4 xr[TT];
#pragma unroll
        for (int t = 0; t < TT; t++) xr[t] = xs[(wt * TT + t) * 8 * E + q * 32 + lane];
#pragma unroll
        for (int i = 0; i < TR; i++) {
            float wf[4];
            if (E == 4) V::widen(*(const uint4 *)(ws + ((wr * TR + i) * 32 + lane) * 16), wf);
            else {
                const uint2 h = *(const uint2 *)(ws + ((wr * TR + i) * 32 + lane) * 16 + 8 * q);
                float w8[8];
                V::widen(make_uint4(h.x, h.y, 0u, 0u), w8); /* (the half's 4 elements) */
                wf[0] = w8[0], wf[1] = w8[1], wf[2] = w8[2], wf[3] = w8[3];
            }
            wt_mode<DT, 4>(wf, roundw);
#pragma unroll
            for (int t = 0; t < TT; t++) {
                acc[t][i] = fmaf(wf[0], xr[t].x, acc[t][i]);
                acc[t][i] = fmaf(wf[1], xr[t].y, acc[t][i]);
                acc[t][i] = fmaf(wf[2], xr[t].z, acc[t][i]);
                acc[t][i] = fmaf(wf[3], xr[t].w, acc[t][i]);
            }
        }
    }
}

/* The warp's butterfly over its 32 slots for the N values of v, as a reduce-scatter: at the stage of offset O the
 * lane keeps the half of its C values that its bit O selects and receives the partner's copy of them, so every sum
 * is the butterfly's v[l] + v[l ^ O].  Lane l ends with the sums of values 2 l and 2 l + 1 (N = 64) in v[0], v[1]. */
template <int O, int C>
__device__ __forceinline__ void scatter_stage(float *v, int lane) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int k = 0; k < C / 2; k++) {
        const float keep = hi ? v[k + C / 2] : v[k], give = hi ? v[k] : v[k + C / 2];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, give, O);
    }
    if constexpr (O > 1) scatter_stage<O / 2, C / 2>(v, lane);
}

/* Grid (ceil(n / PT), ceil(rows / PR)), PTHREADS threads, PSMEM(E) dynamic shared bytes: see PT above. */
template <int DT>
__global__ void __launch_bounds__(PTHREADS, 2)
    matmul_tiled_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                        int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, float alpha) {
    enum { E = vec_traits<DT>::E, ESZ = DT == GP_CU_F32 ? 4 : 2 };
    static_assert((PT / TT) * (PR / TR) == PTHREADS / 32, "one sub-tile per warp");
    extern __shared__ __align__(16) char psm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wt = warp / (PR / TR), wr = warp % (PR / TR);
    const int32_t t0 = blockIdx.x * PT;
    const int64_t r0 = (int64_t)blockIdx.y * PR, nr = (cols / E + 31) / 32;
    pdl_enter();
    const ploader<E, ESZ> ld(x, W, rows, cols, n, t0, r0);
    float acc[TT][TR];
#pragma unroll
    for (int t = 0; t < TT; t++)
#pragma unroll
        for (int i = 0; i < TR; i++) acc[t][i] = 0.0f;
    for (int s = 0; s < PSTAGES - 1; s++)
        if (s < nr) ld.load(psm + s * PSTAGE_BYTES(E), s, x, W, cols);
        else cp_commit();
    for (int64_t j = 0; j < nr; j++) {
        cp_wait<PSTAGES - 2>();
        __syncthreads(); /* round j is in; every warp is done with round j - 1, whose buffer is refilled next */
        const int64_t jn = j + PSTAGES - 1;
        if (jn < nr) ld.load(psm + (jn % PSTAGES) * PSTAGE_BYTES(E), jn, x, W, cols);
        else cp_commit();
        if (j * 32 + lane < cols / E) /* (a lane past the last vector adds nothing, as in decode: not even zeros) */
            pround<DT>(acc, psm + (j % PSTAGES) * PSTAGE_BYTES(E), wt, wr, lane, mode & GP_CU_ROUNDW);
    }
    float v[TT * TR];
#pragma unroll
    for (int f = 0; f < TT * TR; f++) v[f] = acc[f / TR][f % TR];
    scatter_stage<16, TT * TR>(v, lane);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int f = 2 * lane + k, t = t0 + wt * TT + f / TR;
        const int64_t r = r0 + wr * TR + f % TR;
        if (t < n && r < rows)
            mm_store(y + (size_t)t * rows + r,
                     mm_val(v[k], bias != NULL, bias ? wt_at(bias, bias_dt, r) : 0.0f, mode, alpha), mode);
    }
}

extern "C" int gp_cu_matmul_prepare(void) {
    const void *ks[] = {(const void *)matmul_tiled_kernel<GP_CU_F32>, (const void *)matmul_tiled_kernel<GP_CU_BF16>,
                        (const void *)matmul_tiled_kernel<GP_CU_F16>};
    const int sz[] = {PSMEM(4), PSMEM(8), PSMEM(8)};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 3 && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, sz[i]);
    return (int)e;
}

/* ---- MLX affine weights ---- */

/* Value i (a compile-time constant after unrolling) of a 32-value unit held in words wd[BITS]. */
template <int BITS>
__device__ __forceinline__ uint32_t q_at(const uint32_t *wd, int i) {
    const int bit = i * BITS, wi = bit >> 5, sh = bit & 31;
    uint32_t v = wd[wi] >> sh;
    if (sh + BITS > 32) v |= wd[wi + 1] << (32 - sh);
    return v & ((1u << BITS) - 1u);
}

/* Loads the BITS words of unit u of a row (valid values: 32, or 16 for a last half unit; missing words are 0);
 * vec: rows are 16-byte aligned (4- and 8-bit units load as 16-byte vectors). */
template <int BITS>
__device__ __forceinline__ void load_unit(uint32_t *wd, const uint32_t *row, int64_t u, int valid, bool vec) {
    const uint32_t *p = row + u * BITS;
    if (vec && valid == 32 && BITS == 4) {
        const uint4 a = __ldcs((const uint4 *)p);
        wd[0] = a.x, wd[1] = a.y, wd[2] = a.z, wd[3] = a.w;
    } else if (vec && valid == 32 && BITS == 8) {
        const uint4 a = __ldcs((const uint4 *)p), b = __ldcs((const uint4 *)p + 1);
        wd[0] = a.x, wd[1] = a.y, wd[2] = a.z, wd[3] = a.w, wd[4] = b.x, wd[5] = b.y, wd[6] = b.z, wd[7] = b.w;
    } else {
        const int nw = (valid * BITS + 31) / 32;
#pragma unroll
        for (int k = 0; k < BITS; k++) wd[k] = k < nw ? __ldcs(p + k) : 0u;
    }
}

/* acc[t] = row r of the quantized W . input row t0 + t: lane l takes 32-value units l, l+32, ..., each value
 * w = scale * q + bias (two float32 roundings, the CPU format's widen) times x in order. */
template <int BITS, int T>
__device__ __forceinline__ void row_dot_q(float *__restrict__ acc, const gp_cu_wt &w, int64_t r,
                                          const float *__restrict__ x, int32_t t0, int nt, int lane) {
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.0f;
    const int64_t cols = w.cols, units = (cols + 31) / 32, ng = (cols + w.group - 1) / w.group;
    const uint32_t *row = (const uint32_t *)w.data + r * (cols * BITS / 32);
    const bool vec = (cols * BITS / 8) % 16 == 0;
    for (int64_t u = lane; u < units; u += 32) {
        const int valid = cols - 32 * u < 32 ? (int)(cols - 32 * u) : 32;
        uint32_t wd[BITS];
        load_unit<BITS>(wd, row, u, valid, vec);
        const int64_t g0 = r * ng + (32 * u) / w.group, g1 = valid > 16 ? r * ng + (32 * u + 16) / w.group : g0;
        const float s0 = wt_at(w.scales, w.sdt, g0), b0 = w.biases ? wt_at(w.biases, w.bdt, g0) : 0.0f;
        const float s1 = wt_at(w.scales, w.sdt, g1), b1 = w.biases ? wt_at(w.biases, w.bdt, g1) : 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (h * 16 >= valid) break;
            float wf[16];
#pragma unroll
            for (int i = 0; i < 16; i++)
                wf[i] = __fadd_rn(__fmul_rn(h ? s1 : s0, (float)q_at<BITS>(wd, h * 16 + i)), h ? b1 : b0);
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (t >= nt) continue;
                const float4 *xv = (const float4 *)(x + (size_t)(t0 + t) * cols + 32 * u + 16 * h);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float4 a = __ldg(xv + q);
                    acc[t] = fmaf(wf[4 * q], a.x, acc[t]);
                    acc[t] = fmaf(wf[4 * q + 1], a.y, acc[t]);
                    acc[t] = fmaf(wf[4 * q + 2], a.z, acc[t]);
                    acc[t] = fmaf(wf[4 * q + 3], a.w, acc[t]);
                }
            }
        }
    }
}

template <int BITS, int T>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    qmatmul_kernel(float *__restrict__ y, const float *__restrict__ x, gp_cu_wt w, const void *__restrict__ bias,
                   int bias_dt, int32_t n, int mode, float alpha) {
    pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= w.rows) return;
    const int32_t t0 = blockIdx.y * T;
    const int nt = n - t0 < T ? n - t0 : T;
    float acc[T];
    row_dot_q<BITS, T>(acc, w, r, x, t0, nt, lane);
    const float b = bias ? wt_at(bias, bias_dt, r) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float v = mm_val(warp_sum(acc[t]), bias != NULL, b, mode, alpha);
        if (lane == 0 && t < nt) mm_store(y + (size_t)(t0 + t) * w.rows + r, v, mode);
    }
}

template <int BITS>
static void launch_q(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                     int mode, float alpha) {
    const unsigned gx = (unsigned)((w->rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
    const dim3 blk(WARPS_PER_BLOCK * 32);
    if (n == 1) launch(qmatmul_kernel<BITS, 1>, dim3(gx, 1), blk, 0, d, y, x, *w, b, bdt, n, mode, alpha);
    else launch(qmatmul_kernel<BITS, TOK_TILE>, dim3(gx, (unsigned)((n + TOK_TILE - 1) / TOK_TILE)), blk, 0, d, y,
                x, *w, b, bdt, n, mode, alpha);
}

static int qmatmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                   int mode, float alpha) {
    if ((uintptr_t)x & 15 || w->cols % 16 || w->group % 16 || (w->cols * w->bits) % 32)
        return (int)cudaErrorNotSupported;
    switch (w->bits) {
    case 2: launch_q<2>(d, y, x, w, b, bdt, n, mode, alpha); break;
    case 3: launch_q<3>(d, y, x, w, b, bdt, n, mode, alpha); break;
    case 4: launch_q<4>(d, y, x, w, b, bdt, n, mode, alpha); break;
    case 5: launch_q<5>(d, y, x, w, b, bdt, n, mode, alpha); break;
    case 6: launch_q<6>(d, y, x, w, b, bdt, n, mode, alpha); break;
    case 8: launch_q<8>(d, y, x, w, b, bdt, n, mode, alpha); break;
    default: return (int)cudaErrorNotSupported;
    }
    return (int)cudaGetLastError();
}

/* ---- dense launches ---- */

/* Prefill (n > 1, the 16-byte path): the tiled kernel, PT tokens x PR rows a block. */
template <int DT>
static void launch_tiled(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                         int mode, float alpha) {
    const dim3 grid((unsigned)((n + PT - 1) / PT), (unsigned)((w->rows + PR - 1) / PR));
    launch(matmul_tiled_kernel<DT>, grid, dim3(PTHREADS), PSMEM(vec_traits<DT>::E), d, y, x, w->data, w->rows, w->cols,
           b, bdt, n, mode, alpha);
}

template <int DT, int T>
static void launch_dt(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                      bool vec, int mode, float alpha) {
    const dim3 grid((unsigned)((w->rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), (unsigned)((n + T - 1) / T));
    const dim3 blk(WARPS_PER_BLOCK * 32);
    if (vec)
        launch(matmul_kernel<DT, T, true>, grid, blk, 0, d, y, x, w->data, w->rows, w->cols, b, bdt, n, mode, alpha);
    else launch(matmul_kernel<DT, T, false>, grid, blk, 0, d, y, x, w->data, w->rows, w->cols, b, bdt, n, mode, alpha);
}

template <int DT>
static void launch_dense(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt,
                         int32_t n, bool vec, int mode, float alpha) {
    if (n == 1) launch_dt<DT, 1>(d, y, x, w, b, bdt, n, vec, mode, alpha);
    else if (vec) launch_tiled<DT>(d, y, x, w, b, bdt, n, mode, alpha);
    else launch_dt<DT, TOK_TILE>(d, y, x, w, b, bdt, n, vec, mode, alpha);
}

/* The 16-byte path applies: whole vectors per row, rows and x 16-byte aligned. */
static bool vec_ok(const gp_cu_wt *w, const float *x) {
    const int E = w->dtype == GP_CU_F32 ? 4 : 8;
    const size_t esz = w->dtype == GP_CU_F32 ? 4 : 2;
    return w->cols % E == 0 && ((uintptr_t)w->data & 15) == 0 && ((uintptr_t)x & 15) == 0 && (w->cols * esz) % 16 == 0;
}

extern "C" int gp_cu_matmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n,
                            int mode, float alpha) {
    if (n <= 0 || w->rows <= 0) return 0;
    const void *b = bias && bias->data ? bias->data : NULL;
    const int bdt = b ? bias->dtype : 0;
    if (w->dtype == GP_CU_QAFFINE) return qmatmul(d, y, x, w, b, bdt, n, mode, alpha);
    if ((mode & GP_CU_MMA) && gp_cu_mma_ok(w, x)) return gp_cu_matmul_mma(d, y, x, w, b, bdt, n, mode, alpha);
    const bool vec = vec_ok(w, x);
    by_dtype(w->dtype, [&](auto dt) { launch_dense<dt>(d, y, x, w, b, bdt, n, vec, mode, alpha); });
    return (int)cudaGetLastError();
}

/* ---- one token through several weights ---- */

#define MULTI_MAX 4
struct multi_args {
    const void *W[MULTI_MAX], *B[MULTI_MAX];
    float *Y[MULTI_MAX];
    int64_t rows[MULTI_MAX];
    int bdt[MULTI_MAX];
    int m, pad; /* (no padding bytes: see GP_CU_NO_PADDING) */
};
GP_CU_NO_PADDING(multi_args, MULTI_MAX * 4 * 8 + MULTI_MAX * 4 + 2 * 4);

/* Warp = row of the concatenated outputs: part i's row r gets matmul_kernel<DT, 1, true>'s value (of the input
 * normalized first under NORM; dynamic shared memory [cols] floats). */
template <int DT, bool NORM>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_multi_kernel(multi_args a, const float *__restrict__ x, norm_args nm, int64_t cols, int mode) {
    extern __shared__ float xs[];
    const int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    /* the part holding row r, chosen with constant indices (a parameter array indexed at run time would be copied
     * to local memory) */
    const void *W = a.W[0], *B = a.B[0];
    float *Y = a.Y[0];
    int bdt = a.bdt[0];
    bool in = r < a.rows[0];
#pragma unroll
    for (int k = 1; k < MULTI_MAX; k++)
        if (!in && k < a.m) {
            r -= a.rows[k - 1];
            W = a.W[k], B = a.B[k], Y = a.Y[k], bdt = a.bdt[k];
            in = r < a.rows[k];
        }
    float acc[1];
    const void *const W1[1] = {W};
    norm_early ne;
    norm_prefetch<NORM>(ne, nm, cols);
    dot1<DT, 1>(acc, W1, r, in, cols, lane, mode & GP_CU_ROUNDW, [&] { return input_of<NORM>(x, xs, cols, nm, ne); });
    if (!in) return;
    const float v = mm_val(warp_sum(acc[0]), B != NULL, B ? wt_at(B, bdt, r) : 0.0f, mode, 1.0f);
    if (lane == 0) mm_store(Y + r, v, mode);
}

/* 1 when every weight of ws [m] is dense of dtype ws[0].dtype, has cols columns and takes the 16-byte path. */
static bool same_dense(int32_t m, const gp_cu_wt *ws, const float *x) {
    for (int32_t i = 0; i < m; i++)
        if (ws[i].dtype != ws[0].dtype || ws[i].dtype == GP_CU_QAFFINE || ws[i].cols != ws[0].cols || !ws[i].data ||
            !vec_ok(&ws[i], x))
            return false;
    return true;
}

extern "C" int gp_cu_norm_fits(const gp_cu_norm *nm, int64_t cols, int threads) {
    return rms_threads((int32_t)cols) == threads && cols <= 8192 && nm->w.dtype != GP_CU_QAFFINE && nm->w.data;
}

/* The kernels' norm arguments; false when nm (non-NULL) cannot be fused into a block of WARPS_PER_BLOCK warps. */
static bool norm_of(const gp_cu_norm *nm, int64_t cols, norm_args *out) {
    *out = norm_args_of(nm, 0);
    return !nm || gp_cu_norm_fits(nm, cols, WARPS_PER_BLOCK * 32);
}

extern "C" int gp_cu_matmul_multi(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                                  const gp_cu_wt *ws, const gp_cu_wt *bs, int mode) {
    norm_args na;
    if (m < 1 || m > MULTI_MAX || !same_dense(m, ws, x) || (mode & (GP_CU_ACC | GP_CU_MMA)) ||
        !norm_of(nm, ws[0].cols, &na))
        return (int)cudaErrorNotSupported;
    multi_args a = {};
    int64_t total = 0;
    for (int32_t i = 0; i < m; i++) {
        a.W[i] = ws[i].data;
        a.B[i] = bs[i].data;
        a.bdt[i] = bs[i].data ? bs[i].dtype : 0;
        a.Y[i] = ys[i];
        a.rows[i] = ws[i].rows;
        total += ws[i].rows;
    }
    a.m = m;
    const dim3 grid((unsigned)((total + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK)), blk(WARPS_PER_BLOCK * 32);
    const int64_t cols = ws[0].cols;
    by_dtype(ws[0].dtype, [&](auto dt) {
        if (nm) launch(matmul_multi_kernel<dt, true>, grid, blk, (size_t)cols * 4, d, a, x, na, cols, mode);
        else launch(matmul_multi_kernel<dt, false>, grid, blk, 0, d, a, x, na, cols, mode);
    });
    return (int)cudaGetLastError();
}

/* Warp = row r: the gate and the up product (each matmul_kernel<DT, 1, true>'s value, of the input normalized
 * first under NORM), then glu_val. */
template <int DT, bool NORM>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_glu_kernel(float *__restrict__ y, const float *__restrict__ x, norm_args nm, const void *__restrict__ G,
                      const void *__restrict__ U, int64_t rows, int64_t cols, const void *bg, const void *bu, int bdt,
                      int act, int mode) {
    extern __shared__ float xs[];
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    float gu[2];
    const void *const W[2] = {G, U};
    norm_early ne;
    norm_prefetch<NORM>(ne, nm, cols);
    /* the gate's and the up row's loads together */
    dot1<DT, 2>(gu, W, r, r < rows, cols, lane, mode & GP_CU_ROUNDW,
                [&] { return input_of<NORM>(x, xs, cols, nm, ne); }, (mode & GP_CU_EARLY) != 0);
    if (r >= rows) return;
    const float gv = mm_val(warp_sum(gu[0]), bg != NULL, bg ? wt_at(bg, bdt, r) : 0.0f, mode, 1.0f);
    const float uv = mm_val(warp_sum(gu[1]), bu != NULL, bu ? wt_at(bu, bdt, r) : 0.0f, mode, 1.0f);
    if (lane == 0) y[r] = glu_val(gv, uv, act, (mode & GP_CU_ROUND) != 0);
}

extern "C" int gp_cu_matmul_glu(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const gp_cu_wt *g,
                                const gp_cu_wt *bg, const gp_cu_wt *u, const gp_cu_wt *bu, int32_t act, int mode) {
    const gp_cu_wt two[2] = {*g, *u};
    const bool biased = bg->data != NULL;
    norm_args na;
    if (!same_dense(2, two, x) || g->rows != u->rows || biased != (bu->data != NULL) ||
        (biased && bg->dtype != bu->dtype) || (mode & (GP_CU_ACC | GP_CU_MMA)) || !norm_of(nm, g->cols, &na))
        return (int)cudaErrorNotSupported;
    if (g->rows <= 0) return 0;
    const dim3 grid((unsigned)((g->rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK)), blk(WARPS_PER_BLOCK * 32);
    const int bdt = biased ? bg->dtype : 0;
    by_dtype(g->dtype, [&](auto dt) {
        if (nm) launch(matmul_glu_kernel<dt, true>, grid, blk, (size_t)g->cols * 4, d, y, x, na, g->data, u->data,
                       g->rows, g->cols, bg->data, bu->data, bdt, act, mode);
        else launch(matmul_glu_kernel<dt, false>, grid, blk, 0, d, y, x, na, g->data, u->data, g->rows, g->cols,
                    bg->data, bu->data, bdt, act, mode);
    });
    return (int)cudaGetLastError();
}
