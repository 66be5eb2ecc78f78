/* cuda_matmul.cu — the projections of the CUDA backend: y [n, rows] (+)= alpha * (x [n, cols] @ W^T) (+ bias).
 * Dense weights (f32/bf16/f16): one warp per weight row (4 rows for a chunk of tokens) streams the row once per tile
 * of up to 8 tokens with 16-byte loads (8 bf16/f16 or 4 f32 weights), widening to float32 in registers; lane l takes
 * vectors l, l+32, ... and the warp sums its lanes by the xor butterfly, so an element's bits depend on nothing but
 * its row and its token (the same for decode and every prefill chunking).  MLX affine weights: the same with
 * 32-value units (lane l takes units l, l+32, ...), each value dequantized as scale * q + bias in float32.
 * gp_cu_matmul_multi (q|k|v) and gp_cu_matmul_glu (gate|up + GLU) run one token through several weights in one
 * launch with the bits of the separate calls. */
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
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y); f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
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
                                     int64_t cols, int lane, int roundw, Prep prep) {
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
    pdl_enter();
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

/* Grid (ceil(rows / WARPS_PER_BLOCK), ceil(n / T)); warp = row, blockIdx.y = tile of T tokens.  VEC: the 16-byte
 * path (cols a multiple of the vector width, rows 16-byte aligned), else one element per lane per step. */
template <int DT, int T, bool VEC>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                  int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, float alpha) {
    if (!(T == 1 && VEC)) pdl_enter(); /* (dot1 calls it after its first weight loads) */
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows) {
        if (T == 1 && VEC) pdl_enter();
        return;
    }
    const int32_t t0 = blockIdx.y * T;
    const int nt = n - t0 < T ? n - t0 : T;
    float acc[T];
    const void *const W1[1] = {W};
    if (T == 1 && VEC) dot1<DT, 1>(acc, W1, r, true, cols, lane, mode & GP_CU_ROUNDW, [&] { return x; });
    else row_dot<DT, T, VEC>(acc, W, r, x, cols, t0, nt, lane, mode & GP_CU_ROUNDW);
    const float b = bias ? wt_at(bias, bias_dt, r) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float v = mm_val(warp_sum(acc[t]), bias != NULL, b, mode, alpha);
        if (lane == 0 && t < nt) mm_store(y + (size_t)(t0 + t) * rows + r, v, mode);
    }
}

/* Prefill tiles (VEC path): a warp takes ROWS weight rows x T tokens, so each token vector it loads serves ROWS rows
 * and each weight vector T tokens.  Every output's sum is still lane l's vectors l, l+32, ... in order (the elements
 * of a vector in order), then the xor butterfly: the bits of matmul_kernel. */
template <int DT, int T, int ROWS>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_rows_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                       int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, float alpha) {
    pdl_enter();
    typedef vec_traits<DT> V;
    enum { UNR = 2 };
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5)) * ROWS;
    if (r0 >= rows) return;
    const int32_t t0 = blockIdx.y * T;
    const int nt = n - t0 < T ? n - t0 : T;
    const int64_t nv = cols / V::E;
    const uint4 *wr[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) /* rows past the end read the last row; their sums are not stored */
        wr[i] = (const uint4 *)((const char *)W + (size_t)(r0 + i < rows ? r0 + i : rows - 1) * cols *
                                                     (DT == GP_CU_F32 ? 4 : 2));
    float acc[ROWS][T];
#pragma unroll
    for (int i = 0; i < ROWS; i++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[i][t] = 0.0f;
    for (int64_t v0 = lane; v0 < nv; v0 += 32 * UNR) {
        uint4 wv[ROWS][UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++)
#pragma unroll
            for (int i = 0; i < ROWS; i++)
                if (v0 + 32 * u < nv) wv[i][u] = __ldcs(wr[i] + v0 + 32 * u);
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t v = v0 + 32 * u;
            if (v >= nv) break;
            float wf[ROWS][V::E];
#pragma unroll
            for (int i = 0; i < ROWS; i++) {
                V::widen(wv[i][u], wf[i]);
                wt_mode<DT, V::E>(wf[i], mode & GP_CU_ROUNDW);
            }
#pragma unroll
            for (int t = 0; t < T; t++) {
                if (t >= nt) continue;
                const float4 *xv = (const float4 *)(x + (size_t)(t0 + t) * cols + v * V::E);
#pragma unroll
                for (int q = 0; q < V::E / 4; q++) {
                    const float4 a = __ldg(xv + q);
#pragma unroll
                    for (int i = 0; i < ROWS; i++) {
                        acc[i][t] = fmaf(wf[i][4 * q], a.x, acc[i][t]);
                        acc[i][t] = fmaf(wf[i][4 * q + 1], a.y, acc[i][t]);
                        acc[i][t] = fmaf(wf[i][4 * q + 2], a.z, acc[i][t]);
                        acc[i][t] = fmaf(wf[i][4 * q + 3], a.w, acc[i][t]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int64_t r = r0 + i;
        const float b = bias && r < rows ? wt_at(bias, bias_dt, r) : 0.0f;
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float sum = warp_sum(acc[i][t]);
            if (lane == 0 && t < nt && r < rows)
                mm_store(y + (size_t)(t0 + t) * rows + r, mm_val(sum, bias != NULL, b, mode, alpha), mode);
        }
    }
}

#define PREFILL_ROWS 4

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
    if ((uintptr_t)x & 15 || w->cols % 16 || w->group % 16 || (w->cols * w->bits) % 32) return (int)cudaErrorNotSupported;
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

template <int DT>
static void launch_rows(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                        int mode, float alpha) {
    const int64_t per_block = (int64_t)WARPS_PER_BLOCK * PREFILL_ROWS;
    const dim3 grid((unsigned)((w->rows + per_block - 1) / per_block), (unsigned)((n + TOK_TILE - 1) / TOK_TILE));
    launch(matmul_rows_kernel<DT, TOK_TILE, PREFILL_ROWS>, grid, dim3(WARPS_PER_BLOCK * 32), 0, d, y, x, w->data,
           w->rows, w->cols, b, bdt, n, mode, alpha);
}

template <int DT, int T>
static void launch_dt(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                      bool vec, int mode, float alpha) {
    const dim3 grid((unsigned)((w->rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), (unsigned)((n + T - 1) / T));
    const dim3 blk(WARPS_PER_BLOCK * 32);
    if (vec) launch(matmul_kernel<DT, T, true>, grid, blk, 0, d, y, x, w->data, w->rows, w->cols, b, bdt, n, mode, alpha);
    else launch(matmul_kernel<DT, T, false>, grid, blk, 0, d, y, x, w->data, w->rows, w->cols, b, bdt, n, mode, alpha);
}

template <int DT>
static void launch_dense(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt,
                         int32_t n, bool vec, int mode, float alpha) {
    if (n == 1) launch_dt<DT, 1>(d, y, x, w, b, bdt, n, vec, mode, alpha);
    else if (vec) launch_rows<DT>(d, y, x, w, b, bdt, n, mode, alpha); /* prefill: PREFILL_ROWS rows per warp */
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
    *out = norm_args{};
    if (!nm) return true;
    if (!gp_cu_norm_fits(nm, cols, WARPS_PER_BLOCK * 32)) return false;
    *out = norm_args{nm->w.data, nm->w.dtype, nm->eps, nm->plus_one, 0};
    return true;
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
                [&] { return input_of<NORM>(x, xs, cols, nm, ne); });
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
