/* cuda_matmul.cu — the projections of the CUDA backend: y [n, rows] = x [n, cols] @ W^T (+ bias).
 * gp_cu_matmul: one warp per weight row (PREFILL_ROWS rows for a chunk of tokens) streams the row once per tile of
 * up to 8 tokens with 16-byte loads (8 bf16/f16 or 4 f32 weights), widening to float32 in registers; lane l takes
 * vectors l, l+32, ... and the warp sums its lanes by the xor butterfly, so an element's bits depend on nothing but
 * its row and its token (the same for decode and every prefill chunking).  gp_cu_matmul_cublas: float32 SGEMM
 * through cuBLAS for long prefills. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" cudaStream_t gp_cu_stream(gp_cu *d);
extern "C" cublasHandle_t gp_cu_blas(gp_cu *d);

/* mode bits of the kernels: MODE_ACC adds the result to y (the residual add, one rounding as a separate add);
 * MODE_BF16 rounds as the bf16 mode's linear: the sum + bf16(bias), rounded (and the residual sum rounded) */
enum { MODE_ACC = 1, MODE_BF16 = 2 };

/* bf16 mode, float32/float16 weights: transformers loads them as bf16, so each weight is rounded (compiled out for
 * bf16 weights and never taken in the float32 mode). */
template <int DT, int E>
__device__ __forceinline__ void wt_mode(float *f, int bf) {
    if (DT != GP_CU_BF16 && bf)
#pragma unroll
        for (int e = 0; e < E; e++) f[e] = bf16r(f[e]);
}

/* The output of one product s (+ bias b) stored at o under mode. */
__device__ __forceinline__ float mm_val(float s, bool has_b, float b, int mode) {
    if (mode & MODE_BF16) return bf16r(has_b ? s + bf16r(b) : s);
    return has_b ? s + b : s;
}
__device__ __forceinline__ void mm_store(float *o, float v, int mode) {
    *o = !(mode & MODE_ACC) ? v : (mode & MODE_BF16) ? bf16r(*o + v) : *o + v;
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
template <int DT, int T, bool VEC, bool GLU>
__device__ __forceinline__ void row_dot(float *__restrict__ acc, const void *__restrict__ W, int64_t r,
                                        const float *__restrict__ x, int64_t cols, int32_t t0, int nt, int lane,
                                        int act, int bf) {
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
                wt_mode<DT, V::E>(wf, bf);
#pragma unroll
                for (int t = 0; t < T; t++) {
                    if (t < nt) {
                        const float4 *xv = (const float4 *)(x + (size_t)(t0 + t) * cols * (GLU ? 2 : 1) + v * V::E);
#pragma unroll
                        for (int q = 0; q < V::E / 4; q++) {
                            float4 a = __ldg(xv + q);
                            if (GLU) {
                                const float4 u = __ldg((const float4 *)((const float *)xv + cols) + q);
                                a.x = glu_val(a.x, u.x, act, bf);
                                a.y = glu_val(a.y, u.y, act, bf);
                                a.z = glu_val(a.z, u.z, act, bf);
                                a.w = glu_val(a.w, u.w, act, bf);
                            }
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
            wt_mode<DT, 1>(&wk, bf);
#pragma unroll
            for (int t = 0; t < T; t++)
                if (t < nt) {
                    const float *xr = x + (size_t)(t0 + t) * cols * (GLU ? 2 : 1);
                    acc[t] = fmaf(wk, GLU ? glu_val(xr[k], xr[cols + k], act, bf) : xr[k], acc[t]);
                }
        }
    }
}

/* Grid (ceil(rows / WARPS_PER_BLOCK), ceil(n / T)); warp = row, blockIdx.y = tile of T tokens.  VEC: the 16-byte
 * path (cols a multiple of the vector width, rows 16-byte aligned), else one element per lane per step.
 * GLU: the input row t is act(x[t, k]) * x[t, cols + k] (rows of 2 cols: gate then up), computed on the fly with
 * glu_val, the GLU op's own expression (so the bits of glu followed by the plain product).
 * GLUO (one token): W stacks `rows` gate rows then `rows` up rows and y[r] = glu_val(gate_r, up_r): the warp runs
 * both rows' dot products (each the plain product's bits), so the bits of the stacked product then the GLU op. */
template <int DT, int T, bool VEC, bool GLU, bool GLUO = false>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                  int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, int act) {
    pdl_enter();
    const int lane = threadIdx.x & 31, bf = (mode & MODE_BF16) != 0;
    const int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int32_t t0 = blockIdx.y * T;
    const int nt = n - t0 < T ? n - t0 : T;
    float acc[T], acc2[GLUO ? T : 1];
    row_dot<DT, T, VEC, GLU>(acc, W, r, x, cols, t0, nt, lane, act, bf);
    if (GLUO) row_dot<DT, T, VEC, GLU>(acc2, W, r + rows, x, cols, t0, nt, lane, act, bf);
    const float b = bias ? wt_at(bias, bias_dt, r) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; t++) {
        float v = mm_val(warp_sum(acc[t]), bias != NULL, b, mode);
        if (GLUO) {
            const float u = mm_val(warp_sum(acc2[t]), bias != NULL, bias ? wt_at(bias, bias_dt, r + rows) : 0.0f, mode);
            v = glu_val(v, u, act, bf);
        }
        if (lane == 0 && t < nt) mm_store(y + (size_t)(t0 + t) * rows + r, v, mode);
    }
}

/* Prefill tiles (VEC path, no GLU input): a warp takes ROWS weight rows x T tokens, so each token vector it loads
 * serves ROWS rows and each weight vector T tokens.  Every output's sum is still lane l's vectors l, l+32, ... in
 * order (the elements of a vector in order), then the xor butterfly: the bits of matmul_kernel. */
template <int DT, int T, int ROWS>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32)
    matmul_rows_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                       int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode) {
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
                wt_mode<DT, V::E>(wf[i], (mode & MODE_BF16) != 0);
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
                mm_store(y + (size_t)(t0 + t) * rows + r, mm_val(sum, bias != NULL, b, mode), mode);
        }
    }
}

#define PREFILL_ROWS 4

template <int DT>
static void launch_rows(cudaStream_t s, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                        int acc) {
    const int64_t per_block = (int64_t)WARPS_PER_BLOCK * PREFILL_ROWS;
    const dim3 grid((unsigned)((w->rows + per_block - 1) / per_block), (unsigned)((n + TOK_TILE - 1) / TOK_TILE));
    launch(matmul_rows_kernel<DT, TOK_TILE, PREFILL_ROWS>, grid, dim3(WARPS_PER_BLOCK * 32), 0, s, y, x, w->data,
           w->rows, w->cols, b, bdt, n, acc);
}

template <int DT, int T>
static void launch_dt(cudaStream_t s, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                      bool vec, int acc, int act) {
    dim3 grid((unsigned)((w->rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), (unsigned)((n + T - 1) / T));
    const dim3 blk(WARPS_PER_BLOCK * 32);
    if (act >= 0 && vec)
        launch(matmul_kernel<DT, T, true, true>, grid, blk, 0, s, y, x, w->data, w->rows, w->cols, b, bdt, n, acc, act);
    else if (act >= 0)
        launch(matmul_kernel<DT, T, false, true>, grid, blk, 0, s, y, x, w->data, w->rows, w->cols, b, bdt, n, acc, act);
    else if (vec)
        launch(matmul_kernel<DT, T, true, false>, grid, blk, 0, s, y, x, w->data, w->rows, w->cols, b, bdt, n, acc, act);
    else
        launch(matmul_kernel<DT, T, false, false>, grid, blk, 0, s, y, x, w->data, w->rows, w->cols, b, bdt, n, acc, act);
}

template <int T>
static void launch_t(cudaStream_t s, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                     bool vec, int acc, int act) {
    if (w->dtype == GP_CU_F32) launch_dt<GP_CU_F32, T>(s, y, x, w, b, bdt, n, vec, acc, act);
    else if (w->dtype == GP_CU_BF16) launch_dt<GP_CU_BF16, T>(s, y, x, w, b, bdt, n, vec, acc, act);
    else launch_dt<GP_CU_F16, T>(s, y, x, w, b, bdt, n, vec, acc, act);
}

/* One token through the stacked gate|up rows W [2 rows, cols], the GLU applied to the pair (matmul_kernel's GLUO). */
template <int DT>
static void launch_gluo(cudaStream_t s, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, bool vec,
                        int act, int mode) {
    const int64_t rows = w->rows / 2;
    const dim3 grid((unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK)), blk(WARPS_PER_BLOCK * 32);
    auto k = vec ? matmul_kernel<DT, 1, true, false, true> : matmul_kernel<DT, 1, false, false, true>;
    launch(k, grid, blk, 0, s, y, x, w->data, rows, w->cols, b, bdt, 1, mode, act);
}

/* The 16-byte path applies: whole vectors per row, rows and x 16-byte aligned. */
static bool vec_ok(const gp_cu_wt *w, const float *x) {
    const int E = w->dtype == GP_CU_F32 ? 4 : 8;
    const size_t esz = w->dtype == GP_CU_F32 ? 4 : 2;
    return w->cols % E == 0 && ((uintptr_t)w->data & 15) == 0 && ((uintptr_t)x & 15) == 0 && (w->cols * esz) % 16 == 0;
}

/* act < 0: plain product; else the GLU input rows [n, 2 cols] (matmul_kernel's GLU). */
static int matmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n, int acc,
                  int act) {
    if (n <= 0 || w->rows <= 0) return 0;
    const bool vec = vec_ok(w, x);
    const void *b = bias && bias->data ? bias->data : NULL;
    const int bdt = b ? bias->dtype : 0;
    cudaStream_t s = gp_cu_stream(d);
    const int mode = (acc ? MODE_ACC : 0) | (gp_cu_bf16(d) ? MODE_BF16 : 0);
    if (n == 1) launch_t<1>(s, y, x, w, b, bdt, n, vec, mode, act);
    else if (vec && act < 0) { /* prefill: PREFILL_ROWS rows per warp */
        if (w->dtype == GP_CU_F32) launch_rows<GP_CU_F32>(s, y, x, w, b, bdt, n, mode);
        else if (w->dtype == GP_CU_BF16) launch_rows<GP_CU_BF16>(s, y, x, w, b, bdt, n, mode);
        else launch_rows<GP_CU_F16>(s, y, x, w, b, bdt, n, mode);
    } else launch_t<TOK_TILE>(s, y, x, w, b, bdt, n, vec, mode, act);
    return (int)cudaGetLastError();
}

extern "C" int gp_cu_matmul_gluo(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias,
                                 int32_t act) {
    if (w->rows <= 0) return 0;
    if (w->rows % 2) return (int)cudaErrorInvalidValue;
    const bool vec = vec_ok(w, x);
    const void *b = bias && bias->data ? bias->data : NULL;
    const int bdt = b ? bias->dtype : 0;
    cudaStream_t s = gp_cu_stream(d);
    const int mode = gp_cu_bf16(d) ? MODE_BF16 : 0;
    if (w->dtype == GP_CU_F32) launch_gluo<GP_CU_F32>(s, y, x, w, b, bdt, vec, act, mode);
    else if (w->dtype == GP_CU_BF16) launch_gluo<GP_CU_BF16>(s, y, x, w, b, bdt, vec, act, mode);
    else launch_gluo<GP_CU_F16>(s, y, x, w, b, bdt, vec, act, mode);
    return (int)cudaGetLastError();
}

extern "C" int gp_cu_matmul(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias, int32_t n) {
    return matmul(d, y, x, w, bias, n, 0, -1);
}

extern "C" int gp_cu_matmul_add(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias,
                                int32_t n) {
    return matmul(d, y, x, w, bias, n, 1, -1);
}

extern "C" int gp_cu_matmul_glu(gp_cu *d, float *y, const float *gu, const gp_cu_wt *w, const gp_cu_wt *bias,
                                int32_t n, int32_t act, int accum) {
    return matmul(d, y, gu, w, bias, n, accum, act);
}

/* wide [rows*cols] = W widened to float32 */
template <int DT>
__global__ void widen_kernel(float *__restrict__ out, const void *__restrict__ W, int64_t n) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = vec_traits<DT>::one(W, i);
}

/* y [n, rows] += bias [rows] */
__global__ void bias_kernel(float *__restrict__ y, const void *__restrict__ b, int dt, int64_t rows, int64_t total) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += wt_at(b, dt, i % rows);
}

extern "C" int gp_cu_matmul_cublas(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *bias,
                                   int32_t n, float *wide) {
    if (n <= 0 || w->rows <= 0) return 0;
    cudaStream_t s = gp_cu_stream(d);
    const float *A = (const float *)w->data;
    const int64_t total = w->rows * w->cols;
    if (w->dtype != GP_CU_F32) {
        const int blocks = (int)((total + 255) / 256 < 65536 ? (total + 255) / 256 : 65536);
        if (w->dtype == GP_CU_BF16) launch(widen_kernel<GP_CU_BF16>, blocks, 256, 0, s, wide, w->data, total);
        else launch(widen_kernel<GP_CU_F16>, blocks, 256, 0, s, wide, w->data, total);
        A = wide;
    }
    /* column-major view: Y^T [rows, n] = (W^T)^T [rows, cols] @ X^T [cols, n] */
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(gp_cu_blas(d), CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)w->cols, &one, A,
                                     CUDA_R_32F, (int)w->cols, x, CUDA_R_32F, (int)w->cols, &zero, y, CUDA_R_32F,
                                     (int)w->rows, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return 100000 + (int)st;
    if (bias && bias->data) {
        const int64_t t = w->rows * (int64_t)n;
        const int blocks = (int)((t + 255) / 256 < 65536 ? (t + 255) / 256 : 65536);
        launch(bias_kernel, blocks, 256, 0, s, y, bias->data, bias->dtype, w->rows, t);
    }
    return (int)cudaGetLastError();
}
