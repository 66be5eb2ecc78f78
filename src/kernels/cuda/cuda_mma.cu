/* cuda_mma.cu — the bf16 compute mode's projections on tensor cores: y [n, rows] (+)= x [n, cols] @ W^T (+ bias)
 * with bf16 operands (the mode's activations are bf16 values; bf16 weights as stored, f16/f32 ones rounded to bf16
 * as transformers loads them) and float32 accumulation, through mma.sync m16n8k16 (tokens are M, weight rows N).
 *
 * One order for every token count, so one token alone gives the bits it has inside a chunk:
 *   - the columns are taken in chunks of 32; within a chunk, a fragment row's lane c (0..3) holds the 8 stored
 *     elements [8c, 8c + 8): elements 0..3 are the first 16-column block's k = 2c, 2c+1, 2c+8, 2c+9 and elements
 *     4..7 the second block's (operands and weights use the same map, so each product pairs the right elements);
 *   - chunk j is summed into chain j mod 4, each chain by one mma per 16-column block in increasing order, and the
 *     chains are added in order ((c0 + c1) + c2) + c3;
 *   - then mm_val's bias and rounding and mm_store's residual add (cuda_launch.cuh), as the other kernels.
 * An output's bits depend on its row, its token and the shape alone: the decode kernels (n <= 16: one M tile, zero
 * rows beyond n, a warp per chain of 8 weight rows; q|k|v in one launch, gate|up with the GLU in one launch) and the
 * prefill kernels (64 or 32 x 128 tiles through shared memory, chain after chain: mma_gemm_kernel's cp.async pipeline
 * for bf16 weights, mma_prefill_kernel's register staging for f16/f32 ones, which it rounds as it reads; where the
 * tiles are too few to fill the GPU, blocks of 1 or 2 chains whose sums gemm_fold_kernel adds in chain order) give
 * the same numbers. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>


/* Two floats as one bf16x2 register (lo in the low half: the smaller column). */
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Eight consecutive floats (a, then b) as four bf16x2 words in column order. */
__device__ __forceinline__ uint4 pack8(const float4 &a, const float4 &b) {
    return make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
}

/* d += a (16x16, row) * b (16x8, col), bf16 in, float32 accumulators */
__device__ __forceinline__ void mma16816(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The 8 stored weights [k, k + 8) of a row as four bf16x2 words (rounded to bf16 unless stored as bf16); zeros past
 * cols (cols % 8 == 0). */
template <int DT>
__device__ __forceinline__ uint4 w8(const void *W, int64_t r, int64_t cols, int64_t k) {
    if (k >= cols) return make_uint4(0, 0, 0, 0);
    if (DT == GP_CU_BF16) return __ldcs((const uint4 *)((const uint16_t *)W + r * cols + k));
    float f[8];
    if (DT == GP_CU_F32) {
        const float4 *p = (const float4 *)((const float *)W + r * cols + k);
        const float4 a = __ldcs(p), b = __ldcs(p + 1);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        const uint4 u = __ldcs((const uint4 *)((const __half *)W + r * cols + k));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 v = __half22float2(*(const __half2 *)&w[i]);
            f[2 * i] = v.x, f[2 * i + 1] = v.y;
        }
    }
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

/* Where the decode kernels read the input: global memory (float32), shared memory (float32: the RMSNorm's output)
 * or shared memory already as bf16 (stage_x). */
enum { X_GLOBAL, X_SHARED, X_PACKED };

/* The 8 activations [k, k + 8) of token row t as four bf16x2 words; zeros past cols or for t >= n. */
template <int XIN = X_GLOBAL>
__device__ __forceinline__ uint4 x8(const float *x, int32_t t, int32_t n, int64_t cols, int64_t k) {
    if (t >= n || k >= cols) return make_uint4(0, 0, 0, 0);
    if (XIN == X_PACKED) return *(const uint4 *)((const uint16_t *)x + (size_t)t * cols + k);
    const float4 *p = (const float4 *)(x + (size_t)t * cols + k);
    const float4 a = XIN == X_SHARED ? p[0] : __ldg(p), b = XIN == X_SHARED ? p[1] : __ldg(p + 1);
    return pack8(a, b);
}

/* One token's input x [cols] (cols % 8 == 0) copied by the block into xs as bf16 (x8's words, in column order), 8
 * vectors per thread in flight; returns xs.  (Read from global memory chunk by chunk, x was the decode kernels'
 * longest stall: one memory latency per chunk of a chain.) */
__device__ __forceinline__ const float *stage_x(const float *__restrict__ x, uint4 *xs, int64_t cols) {
    const int64_t n8 = cols / 8;
    for (int64_t i0 = threadIdx.x; i0 < n8; i0 += 8 * (int64_t)blockDim.x) {
        float4 v[8][2];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int64_t i = i0 + (int64_t)u * blockDim.x;
            if (i < n8) v[u][0] = __ldg((const float4 *)x + 2 * i), v[u][1] = __ldg((const float4 *)x + 2 * i + 1);
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int64_t i = i0 + (int64_t)u * blockDim.x;
            if (i < n8) xs[i] = pack8(v[u][0], v[u][1]);
        }
    }
    __syncthreads();
    return (const float *)xs;
}

/* The two 16-column blocks of one 32-column chunk: acc (rows g, g+8 of the token tile x cols 2c, 2c+1 of the 8
 * weight rows) += A (token rows g: a, g + 8: a8) * W (b). */
__device__ __forceinline__ void chunk_mma(float *acc, const uint4 &a, const uint4 &a8, const uint4 &b) {
    mma16816(acc, a.x, a8.x, a.y, a8.y, b.x, b.y);
    mma16816(acc, a.z, a8.z, a.w, a8.w, b.z, b.w);
}

/* A warp tile's fragments through one chunk, chunk_mma for each (i, q): the first 16-column block for every fragment,
 * then the second, so each accumulator takes its two products in chunk_mma's order with MI QN - 1 independent ones
 * between them (its pairs back to back left the tensor pipe waiting on each first product). */
template <int MI, int QN>
__device__ __forceinline__ void tile_mma(float (&acc)[MI][QN][4], const uint4 (&a)[MI], const uint4 (&a8)[MI],
                                         const uint4 (&b)[QN]) {
#pragma unroll
    for (int q = 0; q < QN; q++)
#pragma unroll
        for (int i = 0; i < MI; i++) mma16816(acc[i][q], a[i].x, a8[i].x, a[i].y, a8[i].y, b[q].x, b[q].y);
#pragma unroll
    for (int q = 0; q < QN; q++)
#pragma unroll
        for (int i = 0; i < MI; i++) mma16816(acc[i][q], a[i].z, a8[i].z, a[i].w, a8[i].w, b[q].z, b[q].w);
}

/* Chains of every weight: chunk j of the columns adds into chain j mod CHAINS (the decode kernel runs a warp per chain,
 * which gives it four times the loads in flight of one warp per 8 rows). */
#define CHAINS 4
#ifndef GP_CU_DEC_UNR
#define GP_CU_DEC_UNR 4 /* chunks of a chain in flight per lane (decode) */
#endif
#define DEC_UNR GP_CU_DEC_UNR

/* Up to 3 weights of one dtype and column count, rows stacked (q|k|v in one launch, or one weight).  For the decode
 * kernel every part but the last has a multiple of 8 rows, so an 8-row group never straddles two; the prefill GEMM
 * maps each row to its part (part_row). */
struct mma_parts {
    const void *W[3], *B[3];
    float *Y[3];
    int64_t rows[3];
    int bdt[3];
    int m;
};

/* chain `chain` of 8 weight rows from wr0 (rows >= rows read the last row; never stored): acc (tokens g, g + 8 x
 * rows 2c, 2c + 1) over chunks chain, chain + CHAINS, ... in order.  The first weights are loaded before
 * pdl_enter() (they stream while the previous kernel, which writes the input, finishes); then every thread calls
 * prep(), which may synchronize the block and returns the input x (read as XIN says). */
template <int DT, int XIN, typename Prep>
__device__ __forceinline__ void decode_chain(float *acc, const void *__restrict__ W, int64_t wr, int64_t cols,
                                             int32_t n, int chain, int g, int c, Prep prep, bool early = false) {
    const int64_t nch = (cols + 31) / 32;
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    uint4 b[DEC_UNR], a[DEC_UNR], a8[DEC_UNR];
    auto load_w = [&](int64_t j0) {
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++) {
            const int64_t j = j0 + (int64_t)u * CHAINS;
            b[u] = j < nch ? w8<DT>(W, wr, cols, j * 32 + 8 * c) : make_uint4(0, 0, 0, 0);
        }
    };
    load_w(chain);
    pdl_enter(early);
    const float *x = prep();
    for (int64_t j0 = chain; j0 < nch; j0 += (int64_t)CHAINS * DEC_UNR) {
        if (j0 != chain) load_w(j0);
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++) {
            const int64_t k = (j0 + (int64_t)u * CHAINS) * 32 + 8 * c;
            a[u] = x8<XIN>(x, g, n, cols, k);
            a8[u] = x8<XIN>(x, g + 8, n, cols, k);
        }
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++)
            if (j0 + (int64_t)u * CHAINS < nch) chunk_mma(acc, a[u], a8[u], b[u]);
    }
}

/* The chains of a block's warps (warp = chain) summed in order ((c0 + c1) + c2) + c3 into warp 0's acc; part is
 * [CHAINS][32][4] shared.  Returns 1 in warp 0. */
__device__ __forceinline__ int sum_chains(float *acc, float (*part)[32][4], int warp, int lane) {
#pragma unroll
    for (int i = 0; i < 4; i++) part[warp][lane][i] = acc[i];
    __syncthreads();
    if (warp) return 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float v = part[0][lane][i];
#pragma unroll
        for (int k = 1; k < CHAINS; k++) v += part[k][lane][i];
        acc[i] = v;
    }
    return 1;
}

/* Decode (n <= 16 tokens): a block of CHAINS warps per 8 weight rows of the parts, warp w running chain w; lane (g, c)
 * loads 16 bytes of weight row g per chunk and multiplies the token tile (zero rows beyond n).  STAGE (one token):
 * the block first copies x into dynamic shared memory as bf16 (stage_x; 2 cols bytes). */
template <int DT, bool STAGE>
__global__ void __launch_bounds__(32 * CHAINS)
    mma_decode_kernel(mma_parts p, const float *__restrict__ x, int64_t cols, int32_t n, int mode, float alpha) {
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[CHAINS][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    int64_t r0 = (int64_t)blockIdx.x * 8;
    /* the part of this group, chosen with constant indices (a parameter array indexed at run time would be copied
     * to local memory) */
    const void *W = p.W[0], *B = p.B[0];
    float *Y = p.Y[0];
    int64_t rows = p.rows[0];
    int bdt = p.bdt[0];
#pragma unroll
    for (int k = 1; k < 3; k++)
        if (k < p.m && r0 >= rows) r0 -= rows, W = p.W[k], B = p.B[k], Y = p.Y[k], rows = p.rows[k], bdt = p.bdt[k];
    if (r0 >= rows) { /* the whole block: past the last part */
        pdl_enter((mode & GP_CU_EARLY) != 0);
        return;
    }
    float acc[4];
    decode_chain<DT, STAGE ? X_PACKED : X_GLOBAL>(acc, W, r0 + g < rows ? r0 + g : rows - 1, cols, n, warp, g, c,
                                                  [&] { return STAGE ? stage_x(x, (uint4 *)xs, cols) : x; },
                                                  (mode & GP_CU_EARLY) != 0);
    if (!sum_chains(acc, part, warp, lane)) return;
    if (n == 1) { /* lane l < 8 stores row r0 + l (lane l / 2's acc[l & 1]): one 32-byte write, also to pinned memory */
        const float v0 = __shfl_sync(0xffffffffu, acc[0], lane >> 1), v1 = __shfl_sync(0xffffffffu, acc[1], lane >> 1);
        const int64_t r = r0 + lane;
        if (lane < 8 && r < rows)
            mm_store(Y + r, mm_val(lane & 1 ? v1 : v0, B != NULL, B ? wt_at(B, bdt, r) : 0.0f, mode, alpha), mode);
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; i++) { /* acc[i]: token g (i < 2) or g + 8, weight row r0 + 2c + (i & 1) */
        const int32_t t = g + (i >> 1) * 8;
        const int64_t r = r0 + 2 * c + (i & 1);
        if (t < n && r < rows)
            mm_store(Y + (size_t)t * rows + r, mm_val(acc[i], B != NULL, B ? wt_at(B, bdt, r) : 0.0f, mode, alpha),
                      mode);
    }
}

/* One token through gate and up (same shape): a block of 2 CHAINS warps per 8 rows (warps 0..CHAINS-1 the gate's chains,
 * CHAINS..2 CHAINS-1 the up's), then y[r] = act(gate) * up with the GLU op's expression: the bits of the two products (the
 * decode kernel's) and glu_kernel; under NORM of the input's RMSNorm (input_of; dynamic shared memory [cols]). */
template <int DT, bool NORM>
__global__ void __launch_bounds__(64 * CHAINS)
    mma_decode_glu_kernel(float *__restrict__ y, const float *__restrict__ x, norm_args nm, const void *__restrict__ G,
                          const void *__restrict__ U, int64_t rows, int64_t cols, const void *bg, const void *bu,
                          int bdt, int act, int mode) {
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[2][CHAINS][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int which = warp / CHAINS, chain = warp % CHAINS;
    const int64_t r0 = (int64_t)blockIdx.x * 8;
    float acc[4];
    decode_chain<DT, NORM ? X_SHARED : X_GLOBAL>(acc, which ? U : G, r0 + g < rows ? r0 + g : rows - 1, cols, 1, chain,
                                                 g, c, [&] { return input_of<NORM>(x, xs, cols, nm); },
                                                 (mode & GP_CU_EARLY) != 0);
#pragma unroll
    for (int i = 0; i < 4; i++) part[which][chain][lane][i] = acc[i];
    __syncthreads();
    if (warp) return;
    float v[2][2]; /* [gate, up][row 2c, 2c + 1] of token 0 (acc[0], acc[1]) */
#pragma unroll
    for (int w = 0; w < 2; w++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float s = part[w][0][lane][i];
#pragma unroll
            for (int k = 1; k < CHAINS; k++) s += part[w][k][lane][i];
            v[w][i] = s;
        }
    if (g) return; /* token 0 lives in lanes g = 0 */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int64_t r = r0 + 2 * c + i;
        if (r >= rows) continue;
        const float gv = mm_val(v[0][i], bg != NULL, bg ? wt_at(bg, bdt, r) : 0.0f, mode, 1.0f);
        const float uv = mm_val(v[1][i], bu != NULL, bu ? wt_at(bu, bdt, r) : 0.0f, mode, 1.0f);
        y[r] = glu_val(gv, uv, act, (mode & GP_CU_ROUND) != 0);
    }
}

/* The chunk after j in the chain-major order of nch chunks (chain 0's chunks 0, 4, 8, ..., then chain 1's, ...):
 * the next of its chain, else the first of the next chain (below chain cend), else -1 (mma_prefill_kernel's
 * order). */
__device__ __forceinline__ int next_chunk(int j, int nch, int cend = CHAINS) {
    if (j + CHAINS < nch) return j + CHAINS;
    const int c1 = j % CHAINS + 1;
    return c1 < cend && c1 < nch ? c1 : -1;
}

/* The prefill kernels' chain step: adds a finished chain's acc to the total (the first chain is the total) and clears
 * acc. */
template <int MI>
__device__ __forceinline__ void fold_chain(float (&tot)[MI][4][4], float (&acc)[MI][4][4], int &chain) {
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                tot[i][q][e] = chain ? tot[i][q][e] + acc[i][q][e] : acc[i][q][e];
                acc[i][q][e] = 0.0f;
            }
    chain++;
}

/* Prefill: a block of 8 warps computes 64 tokens x 128 weight rows; warp (wm, wn) 32 x 32 of them.  Each 32-column
 * chunk of both operands goes through shared memory as bf16 (64-byte rows: the fragment loads are conflict-free),
 * the next chunk loading into registers while this one is multiplied.  The chunks are taken chain by chain (0, 4,
 * 8, ..., then 1, 5, ...): each chain sums into acc, which is then added to the total in chain order, the decode
 * kernels' ((c0 + c1) + c2) + c3 with two register sets instead of four. */
template <int DT>
__global__ void __launch_bounds__(256)
    mma_prefill_kernel(float *__restrict__ y, const float *__restrict__ x, const void *__restrict__ W, int64_t rows,
                       int64_t cols, const void *__restrict__ bias, int bias_dt, int32_t n, int mode, float alpha) {
    pdl_enter();
    __shared__ uint4 sa[2][64][4], sb[2][128][4]; /* [buffer][row][16-byte part] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;
    const int32_t t0 = blockIdx.y * 64;
    const int64_t r0 = (int64_t)blockIdx.x * 128;
    const int64_t nch = (cols + 31) / 32;
    /* loader: thread tid fills part tid & 3 of token row tid / 4 and of weight rows tid / 4 and tid / 4 + 64 */
    const int lrow = tid >> 2, lpart = tid & 3;
    const int64_t lw0 = r0 + lrow < rows ? r0 + lrow : rows - 1, lw1 = r0 + lrow + 64 < rows ? r0 + lrow + 64 : rows - 1;
    uint4 ra, rb0, rb1;
    auto load = [&](int64_t j) {
        const int64_t k = j * 32 + 8 * lpart;
        ra = x8(x, t0 + lrow, n, cols, k);
        rb0 = w8<DT>(W, lw0, cols, k);
        rb1 = w8<DT>(W, lw1, cols, k);
    };
    auto stash = [&](int buf) { sa[buf][lrow][lpart] = ra, sb[buf][lrow][lpart] = rb0, sb[buf][lrow + 64][lpart] = rb1; };
    float acc[2][4][4], tot[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][q][e] = tot[i][q][e] = 0.0f;
    int chain = 0, buf = 0;
    load(0);
    stash(0);
    __syncthreads();
    for (int64_t j = 0; j >= 0;) {
        const int64_t jn = next_chunk((int)j, (int)nch);
        if (jn >= 0) load(jn);
        uint4 a[2], a8[2], b[4];
#pragma unroll
        for (int i = 0; i < 2; i++) a[i] = sa[buf][wm * 32 + i * 16 + g][c], a8[i] = sa[buf][wm * 32 + i * 16 + g + 8][c];
#pragma unroll
        for (int q = 0; q < 4; q++) b[q] = sb[buf][wn * 32 + q * 8 + g][c];
        tile_mma<2, 4>(acc, a, a8, b);
        if (jn < 0 || jn % CHAINS != j % CHAINS) fold_chain(tot, acc, chain); /* j was its chain's last chunk */
        if (jn >= 0) stash(buf ^ 1);
        __syncthreads();
        buf ^= 1;
        j = jn;
    }
    while (chain < CHAINS) fold_chain(tot, acc, chain); /* chains with no chunk (cols < 32 CHAINS) add zeros, as in decode */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int32_t t = t0 + wm * 32 + i * 16 + g + (e >> 1) * 8;
                const int64_t r = r0 + wn * 32 + q * 8 + 2 * c + (e & 1);
                if (t < n && r < rows)
                    mm_store(y + (size_t)t * rows + r,
                              mm_val(tot[i][q][e], bias != NULL, bias ? wt_at(bias, bias_dt, r) : 0.0f, mode, alpha),
                              mode);
            }
}

/* ---- prefill with bf16 weights: the same chunk order and bits, through a cp.async pipeline ---- */

/* x [n, cols] (float32, cols % 8 == 0) as bf16 pairs, pack2's rounding: the GEMM's operand copy. */
__global__ void to_bf16_kernel(uint4 *__restrict__ xb, const float4 *__restrict__ x, int64_t n8) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 a = x[2 * i], b = x[2 * i + 1];
        xb[i] = pack8(a, b);
    }
}

#ifndef GEMM_ST
#define GEMM_ST 4 /* pipeline stages */
#endif
#ifndef GEMM_U
#define GEMM_U 2 /* chunks per stage */
#endif
#define GEMM_BM 64 /* token rows per tile (128, with 64 x 32 per warp, measured slower: BENCHMARKS.md) */
#ifndef GEMM_ST32
#define GEMM_ST32 3 /* stages of the 32-token tiles: three blocks a multiprocessor (measured: BENCHMARKS.md) */
#endif
#define GEMM_STAGES(BM) ((BM) == 32 ? GEMM_ST32 : GEMM_ST)
/* Dynamic shared memory of a BM x 128 tile: GEMM_STAGES(BM) stages of GEMM_U chunks of BM token rows and 128 weight
 * rows, 64 bytes each. */
#define GEMM_SMEM(BM) ((size_t)GEMM_STAGES(BM) * GEMM_U * ((BM) + 128) * 64)

/* Row r (< the parts' total) of up to 3 stacked weights (q|k|v in one launch): its part k and row in the part lr,
 * chosen with constant indices (a parameter array indexed at run time would go to local memory). */
__device__ __forceinline__ int part_row(const mma_parts &p, int64_t r, int64_t *lr) {
    if (p.m < 2 || r < p.rows[0]) return *lr = r, 0;
    r -= p.rows[0];
    if (p.m < 3 || r < p.rows[1]) return *lr = r, 1;
    return *lr = r - p.rows[1], 2;
}

/* Output (t, r) of the stacked parts: v (the chains' total) through mm_val (the part's bias, rounding) and mm_store. */
__device__ __forceinline__ void store_out(const mma_parts &P, float v, int32_t t, int64_t r, int mode, float alpha) {
    int64_t lr;
    const int k = part_row(P, r, &lr);
    const void *B = k == 0 ? P.B[0] : k == 1 ? P.B[1] : P.B[2];
    const int64_t pr = k == 0 ? P.rows[0] : k == 1 ? P.rows[1] : P.rows[2];
    float *Y = k == 0 ? P.Y[0] : k == 1 ? P.Y[1] : P.Y[2];
    const int bdt = k == 0 ? P.bdt[0] : k == 1 ? P.bdt[1] : P.bdt[2];
    mm_store(Y + (size_t)t * pr + lr, mm_val(v, B != NULL, B ? wt_at(B, bdt, lr) : 0.0f, mode, alpha), mode);
}

/* The GLU tile's outputs: warps 2, 3 of each row of warps hold the up products of the rows whose gate products warps
 * 0, 1 hold; they pass them (mm_val'd) through shared memory ub [BM][64] (the stage buffers, free once every warp is
 * done), and y [n, rows] = glu_val(gate, up): the bits of the two products stored, then the GLU op. */
template <int BM>
__device__ __forceinline__ void store_glu(const mma_parts &P, float *ub, float (&tot)[BM / 32][4][4], int32_t t0,
                                          int64_t r0, int64_t rows, int32_t n, int mode, int act) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3, up = wn >= 2;
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) __syncthreads();
        if (pass != (up ? 0 : 1)) continue;
#pragma unroll
        for (int i = 0; i < BM / 32; i++)
#pragma unroll
            for (int q = 0; q < 4; q++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int tl = wm * (BM / 2) + i * 16 + g + (e >> 1) * 8; /* token in the tile */
                    const int j = (wn & 1) * 32 + q * 8 + 2 * c + (e & 1);     /* gate (and up) row in the tile */
                    const int64_t r = r0 + j;
                    if (t0 + tl >= n || r >= rows) continue;
                    const void *B = up ? P.B[1] : P.B[0];
                    const int bdt = up ? P.bdt[1] : P.bdt[0];
                    const float v = mm_val(tot[i][q][e], B != NULL, B ? wt_at(B, bdt, r) : 0.0f, mode, 1.0f);
                    const int bf = (mode & GP_CU_ROUND) != 0;
                    if (up) ub[tl * 64 + j] = v;
                    else P.Y[0][(size_t)(t0 + tl) * rows + r] = glu_val(v, ub[tl * 64 + j], act, bf);
                }
    }
}

/* f(v, t, r) for each of this thread's fragments v of a tile's sums (warp (wm, wn) holds tokens t0 + wm BM/2 ..,
 * weight rows r0 + 32 wn ..): token t, weight row r. */
template <int BM, typename F>
__device__ __forceinline__ void each_frag(float (&v)[BM / 32][4][4], int32_t t0, int64_t r0, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;
#pragma unroll
    for (int i = 0; i < BM / 32; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                f(v[i][q][e], t0 + wm * (BM / 2) + i * 16 + g + (e >> 1) * 8, r0 + wn * 32 + q * 8 + 2 * c + (e & 1));
}

/* A tile's totals (tot: warp (wm, wn)'s fragments) into y: the GLU's (store_glu) or the parts' (store_out). */
template <int BM, bool GLU>
__device__ __forceinline__ void store_tile(const mma_parts &P, float *smem, float (&tot)[BM / 32][4][4], int32_t t0,
                                           int64_t r0, int64_t rows, int32_t n, int mode, float alpha, int act) {
    if constexpr (GLU) store_glu<BM>(P, smem, tot, t0, r0, rows, n, mode, act);
    else each_frag<BM>(tot, t0, r0, [&](float &v, int32_t t, int64_t r) {
        if (t < n && r < rows) store_out(P, v, t, r, mode, alpha);
    });
}

/* Prefill through bf16 weights: a block of 8 warps computes BM tokens x 128 weight rows, warp (wm, wn) BM/2 x 32 of
 * them, over the chunks in mma_prefill_kernel's order (chain after chain, each chain into acc, added to the total in
 * chain order) with its fragments (16-byte rows of 64-byte shared rows), so the same bits.  Operands: xb, the input
 * already in bf16 (to_bf16_kernel), and the weights, copied GEMM_U chunks per stage by cp.async, ST - 1 stages
 * (GEMM_STAGES) ahead; the first stages' weights before pdl_enter().  Blocks of one weight tile are adjacent in the grid (x: token
 * tiles), so a weight tile is read from memory once and from L2 by the others.  CH < CHAINS (grids too small to fill
 * the GPU): block z of the grid's z runs chains z CH .. z CH + CH - 1 only and stores each chain's sums in part
 * [CHAINS][n][rows] (zeros for a chain with no chunk); gemm_fold_kernel adds them in chain order. */
#if GEMM_ST32 < GEMM_ST /* fewer stages for the 32-token tiles: three blocks a multiprocessor (registers capped) */
#define GEMM_BOUNDS(BM) __launch_bounds__(256, (BM) == 32 ? 3 : 2)
#else
#define GEMM_BOUNDS(BM) __launch_bounds__(256)
#endif
template <int BM, bool GLU, int CH = CHAINS>
__global__ void GEMM_BOUNDS(BM)
    mma_gemm_kernel(mma_parts P, const uint16_t *__restrict__ xb, int64_t rows, int64_t cols, int32_t n, int mode,
                    float alpha, int act, float *__restrict__ part) {
    constexpr int MI = BM / 32; /* 16-token fragments per warp */
    constexpr int ST = GEMM_STAGES(BM);
    constexpr int TR = BM + 128; /* shared rows per chunk: tokens, then weights */
    extern __shared__ uint4 gsm[];
    uint4(*T)[4] = (uint4(*)[4])gsm; /* [stage][chunk][TR rows][4 parts] */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int wm = warp >> 2, wn = warp & 3;
    const int32_t t0 = blockIdx.x * BM;
    const int64_t r0 = (int64_t)blockIdx.y * (GLU ? 64 : 128);
    const int nch = (int)((cols + 31) / 32);
    /* this block's chains [c0, cend) (compile-time for the whole GEMM) */
    const int c0 = CH < CHAINS ? (int)blockIdx.z * CH : 0, cend = CH < CHAINS ? c0 + CH : CHAINS;
    /* a thread copies part lpart (8 columns) of token rows lrow + 64 i and weight rows lrow, lrow + 64 */
    const int lrow = tid >> 2, lpart = tid & 3;
    constexpr int XI = (BM + 63) / 64; /* token rows a thread copies (BM 32: threads of rows 0..31 only) */
    const uint16_t *wp[2], *xp[XI];
    bool wok[2], xok[XI];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t lr;
        const int64_t r = GLU ? r0 + lrow : r0 + lrow + 64 * i; /* GLU: the gate's rows r0.., then the up's */
        const int k = GLU ? (lr = r < rows ? r : 0, i) : part_row(P, r < rows ? r : 0, &lr);
        const uint16_t *W = (const uint16_t *)(k == 0 ? P.W[0] : k == 1 ? P.W[1] : P.W[2]);
        wok[i] = r < rows, wp[i] = W + lr * cols + 8 * lpart;
    }
#pragma unroll
    for (int i = 0; i < XI; i++) {
        const int32_t t = t0 + lrow + 64 * i;
        xok[i] = t < n, xp[i] = xb + (int64_t)(xok[i] ? t : 0) * cols + 8 * lpart;
    }
    /* copies the next GEMM_U chunks from *j on (weights, tokens or both) into stage st; advances *j */
    auto load = [&](int st, int *j, bool wts, bool tok) {
#pragma unroll
        for (int h = 0; h < GEMM_U; h++) {
            if (*j < 0) break;
            const int k = *j * 32;
            const bool kok = k + 8 * lpart < cols;
            const int b = (st * GEMM_U + h) * TR;
            if (wts)
#pragma unroll
                for (int i = 0; i < 2; i++) cp16(&T[b + BM + lrow + 64 * i][lpart], wp[i] + k, wok[i] && kok);
            if (tok)
#pragma unroll
                for (int i = 0; i < XI; i++)
                    if (lrow + 64 * i < BM) cp16(&T[b + lrow + 64 * i][lpart], xp[i] + k, xok[i] && kok);
            *j = next_chunk(*j, nch, cend);
        }
    };
    const int j0 = CH == CHAINS || c0 < nch ? c0 : -1; /* the block's first chunk (none: its chains are empty) */
    int jw = j0, jx = j0;
    for (int st = 0; st < ST - 1; st++) load(st, &jw, true, false);
    pdl_enter();
    for (int st = 0; st < ST - 1; st++) {
        load(st, &jx, false, true);
        cp_commit();
    }
    float acc[MI][4][4], tot[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int q = 0; q < 4; q++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][q][e] = tot[i][q][e] = 0.0f;
    int chain = 0;
    /* CH < CHAINS: the sums of chain c0 + done go to part; then acc is cleared */
    auto store_chain = [&](int done) {
        float *pc = part + (size_t)(c0 + done) * n * rows;
        each_frag<BM>(acc, t0, r0, [&](float &v, int32_t t, int64_t r) {
            if (t < n && r < rows) pc[(size_t)t * rows + r] = v;
            v = 0.0f;
        });
    };
    int jc = j0, st = 0, stl = ST - 1; /* the chunk to multiply, its stage, the stage to fill */
    while (jc >= 0) {
        cp_wait<ST - 2>(); /* stage st has landed (this thread's copies) */
        __syncthreads();        /* everyone's, and the previous stage is free */
        load(stl, &jx, true, true);
        cp_commit();
        stl = stl + 1 == ST ? 0 : stl + 1;
#pragma unroll
        for (int h = 0; h < GEMM_U; h++) {
            if (jc < 0) break;
            const int b = (st * GEMM_U + h) * TR;
            uint4 a[MI], a8[MI], bw[4];
#pragma unroll
            for (int i = 0; i < MI; i++)
                a[i] = T[b + wm * (BM / 2) + i * 16 + g][c], a8[i] = T[b + wm * (BM / 2) + i * 16 + g + 8][c];
#pragma unroll
            for (int q = 0; q < 4; q++) bw[q] = T[b + BM + wn * 32 + q * 8 + g][c];
            tile_mma<MI, 4>(acc, a, a8, bw);
            if (jc + CHAINS >= nch) { /* jc was its chain's last chunk */
                if constexpr (CH < CHAINS) store_chain(chain++);
                else fold_chain(tot, acc, chain);
            }
            jc = next_chunk(jc, nch, cend);
        }
        st = st + 1 == ST ? 0 : st + 1;
    }
    cp_wait<0>();
    if constexpr (CH < CHAINS) {
        while (chain < CH) store_chain(chain++); /* chains with no chunk: zeros */
    } else {
        while (chain < CHAINS) fold_chain(tot, acc, chain); /* chains with no chunk (cols < 32 CHAINS) add zeros, as in decode */
        store_tile<BM, GLU>(P, (float *)gsm, tot, t0, r0, rows, n, mode, alpha, act);
    }
}

/* The chains' sums of a split GEMM (part [CHAINS][n][rows], rows % 4 == 0) added in chain order, ((c0 + c1) + c2) +
 * c3 as fold_chain adds them, and stored as mma_gemm_kernel stores its totals: the same bits.  Grid (rows / 4 / 256
 * blocks, n tokens); a thread folds 4 adjacent outputs. */
__global__ void gemm_fold_kernel(mma_parts P, const float *__restrict__ part, int64_t rows, int32_t n, int mode,
                                 float alpha) {
    pdl_enter();
    const int32_t t = blockIdx.y;
    const int64_t r = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (r >= rows) return;
    const size_t total = (size_t)n * (size_t)rows, i = (size_t)t * rows + r;
    float4 v = __ldcg((const float4 *)(part + i));
#pragma unroll
    for (int k = 1; k < CHAINS; k++) {
        const float4 c = __ldcg((const float4 *)(part + k * total + i));
        v.x += c.x, v.y += c.y, v.z += c.z, v.w += c.w;
    }
    store_out(P, v.x, t, r, mode, alpha), store_out(P, v.y, t, r + 1, mode, alpha);
    store_out(P, v.z, t, r + 2, mode, alpha), store_out(P, v.w, t, r + 3, mode, alpha);
}

/* Chain groups for a GEMM of `tiles` 64-token tiles over cols columns (each block runs CHAINS / groups chains; 1: no
 * split): none where the tiles give two blocks a multiprocessor; 2 or 4 where tiles of 32 tokens would not give one
 * either; else (32-token tiles) none, unless each of 2 groups keeps 64 chunks or more, where the 64-token tiles'
 * fewer shared-memory reads a product outweigh the fold (measured: BENCHMARKS.md).  GP_CU_GEMM_SPLIT=1, 2 or 4 in
 * the environment sets the groups of every GEMM that may split (tests, measurements). */
static int chain_groups(int64_t tiles, int64_t cols, int64_t sms) {
    static const int force = getenv("GP_CU_GEMM_SPLIT") ? atoi(getenv("GP_CU_GEMM_SPLIT")) : 0;
    if (force == 1 || force == 2 || force == 4) return force;
    if (tiles >= 2 * sms) return 1;
    if (2 * tiles < sms) return 4 * tiles < 2 * sms ? 4 : 2;
    return cols >= 2 * 64 * 32 ? 2 : 1;
}

/* Bytes of d's scratch for the GEMMs of up to max_tokens tokens and max_cols columns: the bf16 copy of the input,
 * then the chains' sums of a split GEMM (at most CHAINS floats for each output of a grid under two blocks a
 * multiprocessor). */
extern "C" size_t gp_cu_gemm_scratch_bytes(int64_t max_tokens, int64_t max_cols) {
    const size_t copy = ((size_t)max_tokens * (size_t)max_cols * 2 + 255) / 256 * 256;
    const size_t split = (size_t)CHAINS * 4 * 2 * (size_t)gp_cu_sm_count() * GEMM_BM * 128;
    const size_t need = (size_t)CHAINS * 4 * (size_t)max_tokens * (size_t)max_cols;
    return copy + (need < split ? need : split);
}

/* The pipelined GEMM of the parts (bf16 weights of x's column count, rows stacked; with act >= 0 the gate and the up
 * of a GLU, y = act(gate) * up) when d's scratch holds the input's bf16 copy; else 0 (nothing launched). */
static int launch_gemm(gp_cu *d, const mma_parts &p, const float *x, int64_t cols, int32_t n, int mode, float alpha,
                       int act = -1) {
    size_t cap = 0;
    uint16_t *xb = (uint16_t *)gp_cu_scratch(d, &cap);
    const bool glu = act >= 0;
    int64_t rows = 0;
    for (int i = 0; i < (glu ? 1 : p.m); i++) rows += p.rows[i];
    const int64_t tile_rows = glu ? 64 : 128, row_tiles = (rows + tile_rows - 1) / tile_rows;
    const size_t copy = ((size_t)n * (size_t)cols * 2 + 255) / 256 * 256;
    if (!xb || copy > cap || row_tiles > 65535) return 0;
    const int64_t n8 = (int64_t)n * cols / 8;
    launch(to_bf16_kernel, dim3((unsigned)((n8 + 255) / 256 < 1024 ? (n8 + 255) / 256 : 1024)), dim3(256), 0, d,
           (uint4 *)xb, (const float4 *)x, n8);
    /* a grid of fewer 64-token tiles than two a multiprocessor: chain groups (chain_groups; their sums through the
     * scratch, then gemm_fold_kernel) or tiles of half as many tokens (a GLU, no room, or no split chosen) */
    static const int64_t sms = gp_cu_sm_count();
    const int64_t tiles = (n + GEMM_BM - 1) / GEMM_BM * row_tiles;
    const bool can = !glu && rows % 4 == 0 && n <= 65535 && copy + (size_t)CHAINS * 4 * n * rows <= cap;
    const int groups = can ? chain_groups(tiles, cols, sms) : 1;
    const int bm = tiles < 2 * sms && groups == 1 ? GEMM_BM / 2 : GEMM_BM;
    const dim3 grid((unsigned)((n + bm - 1) / bm), (unsigned)row_tiles, (unsigned)groups);
    float *part = (float *)((char *)xb + copy);
    if (groups > 1) {
        launch(groups == 2 ? mma_gemm_kernel<GEMM_BM, false, 2> : mma_gemm_kernel<GEMM_BM, false, 1>, grid,
               dim3(256), GEMM_SMEM(GEMM_BM), d, p, xb, rows, cols, n, mode, alpha, act, part);
        launch(gemm_fold_kernel, dim3((unsigned)((rows / 4 + 255) / 256), (unsigned)n), dim3(256), 0, d, p,
               (const float *)part, rows, n, mode, alpha);
    } else if (bm == GEMM_BM)
        launch(glu ? mma_gemm_kernel<GEMM_BM, true> : mma_gemm_kernel<GEMM_BM, false>, grid, dim3(256),
               GEMM_SMEM(GEMM_BM), d, p, xb, rows, cols, n, mode, alpha, act, part);
    else
        launch(glu ? mma_gemm_kernel<GEMM_BM / 2, true> : mma_gemm_kernel<GEMM_BM / 2, false>, grid, dim3(256),
               GEMM_SMEM(GEMM_BM / 2), d, p, xb, rows, cols, n, mode, alpha, act, part);
    return 1;
}

/* Largest input a decode kernel stages (stage_x: 2 bytes a column); wider ones are read from global memory. */
#define STAGE_X_MAX (96 * 1024)

extern "C" int gp_cu_mma_prepare(void) {
    const void *gemms[] = {(const void *)mma_gemm_kernel<GEMM_BM, false>, (const void *)mma_gemm_kernel<GEMM_BM, true>,
                           (const void *)mma_gemm_kernel<GEMM_BM, false, 2>,
                           (const void *)mma_gemm_kernel<GEMM_BM, false, 1>,
                           (const void *)mma_gemm_kernel<GEMM_BM / 2, false>,
                           (const void *)mma_gemm_kernel<GEMM_BM / 2, true>};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 6 && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(gemms[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(i < 4 ? GEMM_SMEM(GEMM_BM) : GEMM_SMEM(GEMM_BM / 2)));
    const void *ks[] = {(const void *)mma_decode_kernel<GP_CU_F32, true>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true>};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, STAGE_X_MAX);
    return (int)e;
}

/* The decode kernel for n tokens of cols columns: one token whose bf16 copy fits STAGE_X_MAX is staged. */
template <int DT>
static void launch_decode(gp_cu *d, const mma_parts &p, dim3 grid, const float *x, int64_t cols, int32_t n, int mode,
                          float alpha) {
    const size_t xs = (size_t)cols * 2;
    if (n == 1 && xs <= STAGE_X_MAX)
        launch(mma_decode_kernel<DT, true>, grid, dim3(32 * CHAINS), xs, d, p, x, cols, n, mode, alpha);
    else launch(mma_decode_kernel<DT, false>, grid, dim3(32 * CHAINS), 0, d, p, x, cols, n, mode, alpha);
}

/* One weight as the kernels' parts (bias b of dtype bdt or NULL). */
static mma_parts one_part(float *y, const gp_cu_wt *w, const void *b, int bdt) {
    mma_parts p = {};
    p.W[0] = w->data, p.B[0] = b, p.Y[0] = y, p.rows[0] = w->rows, p.bdt[0] = bdt, p.m = 1;
    return p;
}

template <int DT>
static void launch_mma(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt, int32_t n,
                       int mode, float alpha) {
    if (n <= 16) {
        launch_decode<DT>(d, one_part(y, w, b, bdt), dim3((unsigned)((w->rows + 7) / 8)), x, w->cols, n, mode, alpha);
    } else {
        const dim3 grid((unsigned)((w->rows + 127) / 128), (unsigned)((n + 63) / 64));
        launch(mma_prefill_kernel<DT>, grid, dim3(256), 0, d, y, x, w->data, w->rows, w->cols, b, bdt, n, mode, alpha);
    }
}

extern "C" int gp_cu_mma_ok(const gp_cu_wt *w, const float *x) {
    const size_t es = w->dtype == GP_CU_F32 ? 4 : 2;
    return w->dtype != GP_CU_QAFFINE && w->cols % 8 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0 &&
           (w->cols * es) % 16 == 0;
}

extern "C" int gp_cu_matmul_mma(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt,
                                int32_t n, int mode, float alpha) {
    if (n > 16 && w->dtype == GP_CU_BF16) {
        if (launch_gemm(d, one_part(y, w, b, bdt), x, w->cols, n, mode, alpha)) return (int)cudaGetLastError();
    }
    by_dtype(w->dtype, [&](auto dt) { launch_mma<dt>(d, y, x, w, b, bdt, n, mode, alpha); });
    return (int)cudaGetLastError();
}

/* One token through m <= 3 weights of one dtype and column count (q|k|v): one launch, each part the bits of
 * gp_cu_matmul_mma. */
extern "C" int gp_cu_matmul_mma_multi(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                                      const gp_cu_wt *ws, const gp_cu_wt *bs, int mode) {
    if (m < 1 || m > 3 || nm) return (int)cudaErrorNotSupported;
    mma_parts p = {};
    int64_t groups = 0;
    for (int32_t i = 0; i < m; i++) {
        if (ws[i].dtype != ws[0].dtype || ws[i].cols != ws[0].cols || !gp_cu_mma_ok(&ws[i], x) ||
            (i + 1 < m && ws[i].rows % 8))
            return (int)cudaErrorNotSupported;
        p.W[i] = ws[i].data, p.B[i] = bs[i].data, p.Y[i] = ys[i], p.rows[i] = ws[i].rows;
        p.bdt[i] = bs[i].data ? bs[i].dtype : 0;
        groups += (ws[i].rows + 7) / 8;
    }
    p.m = m;
    by_dtype(ws[0].dtype,
             [&](auto dt) { launch_decode<dt>(d, p, dim3((unsigned)groups), x, ws[0].cols, 1, mode, 1.0f); });
    return (int)cudaGetLastError();
}

/* A chunk (n > 16 tokens) through m <= 3 bf16 weights of one column count (q|k|v): one bf16 copy of x, one GEMM
 * launch over the stacked rows, each part the bits of gp_cu_matmul_mma.  cudaErrorNotSupported (nothing enqueued)
 * when they do not qualify. */
extern "C" int gp_cu_matmul_mma_parts(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_wt *ws,
                                      const gp_cu_wt *bs, int32_t n, int mode) {
    if (m < 1 || m > 3 || n <= 16) return (int)cudaErrorNotSupported;
    mma_parts p = {};
    for (int32_t i = 0; i < m; i++) {
        if (ws[i].dtype != GP_CU_BF16 || ws[i].cols != ws[0].cols || !gp_cu_mma_ok(&ws[i], x))
            return (int)cudaErrorNotSupported;
        p.W[i] = ws[i].data, p.B[i] = bs[i].data, p.Y[i] = ys[i], p.rows[i] = ws[i].rows;
        p.bdt[i] = bs[i].data ? bs[i].dtype : 0;
    }
    p.m = m;
    if (!launch_gemm(d, p, x, ws[0].cols, n, mode, 1.0f)) return (int)cudaErrorNotSupported;
    return (int)cudaGetLastError();
}

/* A chunk (n > 16 tokens, bf16 weights): y [n, rows] = act(x G^T + bg) * (x U^T + bu) in one pipelined GEMM whose
 * tiles pair 64 gate rows with the same 64 up rows (the bits of gp_cu_matmul_mma_parts, then gp_cu_glu). */
extern "C" int gp_cu_matmul_mma_glu_chunk(gp_cu *d, float *y, const float *x, const gp_cu_wt *g, const gp_cu_wt *bg,
                                          const gp_cu_wt *u, const gp_cu_wt *bu, int32_t n, int32_t act, int mode) {
    const bool biased = bg->data != NULL;
    if (n <= 16 || g->dtype != GP_CU_BF16 || u->dtype != GP_CU_BF16 || g->rows != u->rows || g->cols != u->cols ||
        !gp_cu_mma_ok(g, x) || !gp_cu_mma_ok(u, x) || biased != (bu->data != NULL) ||
        (biased && bg->dtype != bu->dtype))
        return (int)cudaErrorNotSupported;
    if (g->rows <= 0) return 0;
    mma_parts p = {};
    p.W[0] = g->data, p.W[1] = u->data, p.B[0] = bg->data, p.B[1] = bu->data, p.Y[0] = y;
    p.rows[0] = p.rows[1] = g->rows, p.bdt[0] = p.bdt[1] = biased ? bg->dtype : 0, p.m = 2;
    if (!launch_gemm(d, p, x, g->cols, n, mode, 1.0f, act)) return (int)cudaErrorNotSupported;
    return (int)cudaGetLastError();
}

/* One token: y = act(h G^T + bg) * (h U^T + bu) on tensor cores, h = x or its RMSNorm by nm ([gp_cu_rmsnorm,]
 * gp_cu_matmul_mma twice, then the GLU op's bits). */
extern "C" int gp_cu_matmul_mma_glu(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const gp_cu_wt *g,
                                    const gp_cu_wt *bg, const gp_cu_wt *u, const gp_cu_wt *bu, int32_t act, int mode) {
    const bool biased = bg->data != NULL;
    if (g->dtype != u->dtype || g->rows != u->rows || g->cols != u->cols || !gp_cu_mma_ok(g, x) ||
        !gp_cu_mma_ok(u, x) || biased != (bu->data != NULL) || (biased && bg->dtype != bu->dtype) ||
        (nm && !gp_cu_norm_fits(nm, g->cols, 64 * CHAINS)))
        return (int)cudaErrorNotSupported;
    if (g->rows <= 0) return 0;
    const dim3 grid((unsigned)((g->rows + 7) / 8)), blk(64 * CHAINS);
    const int bdt = biased ? bg->dtype : 0;
    const norm_args na = nm ? norm_args{nm->w.data, nm->w.dtype, nm->eps, nm->plus_one, gp_cu_bf16(d)} : norm_args{};
    by_dtype(g->dtype, [&](auto dt) {
        if (nm) launch(mma_decode_glu_kernel<dt, true>, grid, blk, (size_t)g->cols * 4, d, y, x, na, g->data, u->data,
                       g->rows, g->cols, bg->data, bu->data, bdt, act, mode);
        else launch(mma_decode_glu_kernel<dt, false>, grid, blk, 0, d, y, x, na, g->data, u->data, g->rows, g->cols,
                    bg->data, bu->data, bdt, act, mode);
    });
    return (int)cudaGetLastError();
}
