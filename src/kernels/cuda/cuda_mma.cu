/* cuda_mma.cu — the bf16 compute mode's projections on tensor cores: y [n, rows] (+)= x [n, cols] @ W^T (+ bias)
 * with bf16 operands (the mode's activations are bf16 values; bf16 weights as stored, f16/f32 ones rounded to bf16
 * as transformers loads them) and float32 accumulation, through mma.sync m16n8k16 (tokens are M, weight rows N) and,
 * on Hopper, wgmma m64n128k16 (weight rows M, tokens N) for most prefill GEMMs.
 *
 * One order for every token count, so one token alone gives the bits it has inside a chunk:
 *   - the columns are taken in chunks of 32; within a chunk, a fragment row's lane c (0..3) holds the 8 stored
 *     elements [8c, 8c + 8): elements 0..3 are the first 16-column block's k = 2c, 2c+1, 2c+8, 2c+9 and elements
 *     4..7 the second block's (operands and weights use the same map, so each product pairs the right elements);
 *   - the chunks are taken in pairs (2m, 2m + 1: 64 columns, a 128-byte row of bf16 weights), pair m summed into
 *     chain m mod 4, each chain by one mma per 16-column block in increasing order, and the chains are added in order
 *     ((c0 + c1) + c2) + c3;
 *   - then mm_val's bias and rounding and mm_store's residual add (cuda_launch.cuh), as the other kernels.
 * An output's bits depend on its row, its token and the shape alone: the decode kernels (n <= 16: one M tile, zero
 * rows beyond n, a warp per chain of 8 weight rows; q|k|v in one launch, gate|up with the GLU in one launch; one
 * token's 1,024-wide rows in more groups than fit at once, the lm_head's, and a normed GLU's rows in more groups than
 * fit at once, on looping blocks) and the
 * prefill kernels (64 or 32 x 128 tiles through shared memory, chain after chain: mma_gemm_kernel's cp.async pipeline
 * for bf16 weights, mma_prefill_kernel's register staging for f16/f32 ones, which it rounds as it reads; on Hopper's
 * wgmma, wg_gemm_kernel: the GLUs and the large grids whole, and where the tiles are too few to fill the GPU in blocks
 * of 1 or 2 chains, whose sums gemm_fold_kernel adds in chain order) give the same numbers. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_wgmma.cuh"

#include <cuda.h> /* CUtensorMap (the encoder is reached through the runtime: no libcuda link) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <type_traits>


/* 16 bytes of bf16 (or f16) weights, streamed (evict-first), asking L2 to fetch the whole 128-byte line from memory
 * (.L2::128B): a warp's load takes 64 bytes of each of 8 rows (the fragment map) and the line's other half comes with
 * the chain's next chunk, which L2 then already holds (measured on an H200: the 8B shape's bf16 decode +8%, the
 * 256-byte hint +4%: BENCHMARKS.md). */
__device__ __forceinline__ uint4 ld_w16(const void *p) {
    uint4 u;
    asm volatile("ld.global.cs.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    return u;
}

/* The 8 stored weights [k, k + 8) of a row as four bf16x2 words (rounded to bf16 unless stored as bf16); zeros past
 * cols (cols % 8 == 0). */
template <int DT>
__device__ __forceinline__ uint4 w8(const void *W, int64_t r, int64_t cols, int64_t k) {
    if (k >= cols) return make_uint4(0, 0, 0, 0);
    if (DT == GP_CU_BF16) return ld_w16((const uint16_t *)W + r * cols + k);
    float f[8];
    if (DT == GP_CU_F32) {
        const float4 *p = (const float4 *)((const float *)W + r * cols + k);
        const float4 a = __ldcs(p), b = __ldcs(p + 1);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        const uint4 u = ld_w16((const __half *)W + r * cols + k);
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

/* One token's input x [cols] (cols % 8 == 0) copied by the block into xs as bf16 (x8's words, in column order), SU
 * vectors per thread in flight; returns xs.  (Read from global memory chunk by chunk, x was the decode kernels'
 * longest stall: one memory latency per chunk of a chain.)  SU = 8, held with the weights' first buffers, gives the
 * staged one-token kernel 128 registers (4 blocks a multiprocessor); STAGE_LIGHT = 2 stages rows of up to LIGHT_COLS
 * columns with the one-token kernel's 32 CHAINS threads in one round as well, in 64 registers (8 blocks). */
#define STAGE_LIGHT 2
#define LIGHT_COLS (STAGE_LIGHT * 8 * 32 * CHAINS)
template <int SU = 8>
__device__ __forceinline__ const float *stage_x(const float *__restrict__ x, uint4 *xs, int64_t cols) {
    const int64_t n8 = cols / 8;
    for (int64_t i0 = threadIdx.x; i0 < n8; i0 += SU * (int64_t)blockDim.x) {
        float4 v[SU][2];
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int64_t i = i0 + (int64_t)u * blockDim.x;
            if (i < n8) v[u][0] = __ldg((const float4 *)x + 2 * i), v[u][1] = __ldg((const float4 *)x + 2 * i + 1);
        }
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int64_t i = i0 + (int64_t)u * blockDim.x;
            if (i < n8) xs[i] = pack8(v[u][0], v[u][1]);
        }
    }
    __syncthreads();
    return (const float *)xs;
}

/* One token's RMSNorm by nm (input_of's bits: the block is rms_threads(cols) threads) straight into xs as stage_x
 * writes x (bf16 pairs in column order; the values are bf16 already in the bf16 mode, so the packing is exact);
 * returns xs. */
__device__ __forceinline__ const float *norm_x(const float *__restrict__ x, uint4 *xs, int64_t cols,
                                               const norm_args &nm) {
    __shared__ float sh[32];
    const float inv = rms_inv(x, (int32_t)cols, nm.eps, sh, nm.bf);
    for (int64_t i = threadIdx.x; i < cols / 8; i += blockDim.x) {
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            f[k] = rms_val(x[8 * i + k], inv, wt_at(nm.w, nm.dt, 8 * i + k), nm.plus_one, nm.bf);
        xs[i] = make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
    }
    __syncthreads();
    return (const float *)xs;
}

/* norm_x's bits with the norm weights read before the wait (ne: norm_prefetch's) and each thread's elements of x
 * read once, held in registers from the sum of squares to the scaling (input_of's register path, rows of up to NR
 * elements a thread: NORM_REGS, the looping GLU's GLU_NORM_REGS), each output stored as its bf16 half-word (pack2
 * rounds each half alone). */
template <int NR = NORM_REGS>
__device__ __forceinline__ const float *norm_x_regs(const float *__restrict__ x, uint4 *xs, int64_t cols,
                                                    const norm_args &nm, const norm_early_t<NR> &ne) {
    const int nb = blockDim.x;
    float v[NR];
    const float inv = rms_inv_regs(x, cols, nm, v);
    __nv_bfloat16 *xh = (__nv_bfloat16 *)xs;
#pragma unroll
    for (int k = 0; k < NR; k++)
        if (threadIdx.x + k * nb < cols)
            xh[threadIdx.x + k * nb] = __float2bfloat16_rn(rms_val(v[k], inv, ne.g[k], nm.plus_one, nm.bf));
    __syncthreads();
    return (const float *)xs;
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

/* Chains of every weight: pair m of the columns' 32-column chunks (2m, 2m + 1) adds into chain m mod CHAINS (the
 * decode kernel runs a warp per chain, which gives it four times the loads in flight of one warp per 8 rows; pairs,
 * not single chunks, give the wgmma GEMM's copies 128-byte rows: BENCHMARKS.md). */
#define CHAINS 4
/* the chain of chunk j; the k-th chunk of chain ch (k = 0, 1, ..); the chunk after j in its chain (>= nch: none) */
__device__ __forceinline__ int chunk_chain(int64_t j) { return (int)((j >> 1) % CHAINS); }
__device__ __forceinline__ int64_t chain_chunk(int ch, int64_t k) { return 2 * (ch + CHAINS * (k >> 1)) + (k & 1); }
__device__ __forceinline__ int64_t chain_next(int64_t j) { return j & 1 ? j + 2 * CHAINS - 1 : j + 1; }
#define DEC_UNR 4  /* chunks of a chain a lane has in flight per buffer (decode) */
#define DEC_DEEP 8 /* the same for one token where a chain fills two such buffers and the grid fits one wave */
#define GLU_UNR 2  /* the GLU kernel's (8-warp blocks) */

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
 * rows 2c, 2c + 1) over the chain's chunks (chain_chunk) in order.  The weights stream through two register
 * buffers of UNR chunks, the next one's loads in flight while the current one is multiplied (as dot1's), both loaded
 * before pdl_enter() (they stream while the previous kernel, which writes the input, finishes; wait = false: a
 * looping block's later chains, past its wait already); then every thread calls prep(), which may synchronize the
 * block and returns the input x (read as XIN says).  (Measured: mma_decode_kernel UNR = DEC_UNR, or DEC_DEEP as
 * decode_depth chooses; the GLU kernel's 8-warp blocks GLU_UNR = 2: one buffer of 4 or 8, or two of 3 or 4, were
 * slower on Llama-3.2-1B: BENCHMARKS.md.) */
template <int DT, int XIN, int UNR, typename Prep>
__device__ __forceinline__ void decode_chain(float *acc, const void *__restrict__ W, int64_t wr, int64_t cols,
                                             int32_t n, int chain, int g, int c, Prep prep, bool early = false,
                                             bool wait = true) {
    static_assert(UNR % 2 == 0, "a buffer holds whole pairs");
    const int64_t nch = (cols + 31) / 32, step = UNR;
    auto has = [&](int64_t k) { return chain_chunk(chain, k) < nch; }; /* the chain's k-th chunk exists */
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    uint4 wa[UNR], wb[UNR];
    auto load_w = [&](uint4 *b, int64_t k0) {
#pragma unroll
        for (int u = 0; u < UNR; u++)
            b[u] = has(k0 + u) ? w8<DT>(W, wr, cols, chain_chunk(chain, k0 + u) * 32 + 8 * c) : make_uint4(0, 0, 0, 0);
    };
    const float *x = NULL;
    auto mul = [&](const uint4 *b, int64_t k0) {
        uint4 a[UNR], a8[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int64_t k = chain_chunk(chain, k0 + u) * 32 + 8 * c;
            a[u] = x8<XIN>(x, g, n, cols, k);
            a8[u] = XIN == X_PACKED ? make_uint4(0, 0, 0, 0) : x8<XIN>(x, g + 8, n, cols, k); /* (one token) */
        }
#pragma unroll
        for (int u = 0; u < UNR; u++)
            if (has(k0 + u)) chunk_mma(acc, a[u], a8[u], b[u]);
    };
    load_w(wa, 0);
    if (has(step)) load_w(wb, step);
    if (wait) pdl_enter(early);
    x = prep();
    for (int64_t k0 = 0; has(k0); k0 += 2 * step) {
        mul(wa, k0);
        if (has(k0 + 2 * step)) load_w(wa, k0 + 2 * step);
        if (!has(k0 + step)) break;
        mul(wb, k0 + step);
        if (has(k0 + 3 * step)) load_w(wb, k0 + 3 * step);
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

/* The part that holds group row r0 of the parts (r0 made relative to it), chosen with constant indices (a parameter
 * array indexed at run time would be copied to local memory). */
struct dec_part {
    const void *W, *B;
    float *Y;
    int64_t rows;
    int bdt;
};
__device__ __forceinline__ dec_part part_at(const mma_parts &p, int64_t &r0) {
    dec_part q = {p.W[0], p.B[0], p.Y[0], p.rows[0], p.bdt[0]};
#pragma unroll
    for (int k = 1; k < 3; k++)
        if (k < p.m && r0 >= q.rows) r0 -= q.rows, q = {p.W[k], p.B[k], p.Y[k], p.rows[k], p.bdt[k]};
    return q;
}

/* One token's outputs of a group (warp 0's summed acc): lane l < 8 stores row r0 + l (lane l / 2's acc[l & 1]), one
 * 32-byte write, also to pinned memory. */
__device__ __forceinline__ void store_token(const float *acc, int lane, int64_t r0, const dec_part &q, int mode,
                                            float alpha) {
    const float v0 = __shfl_sync(0xffffffffu, acc[0], lane >> 1), v1 = __shfl_sync(0xffffffffu, acc[1], lane >> 1);
    const int64_t r = r0 + lane;
    if (lane < 8 && r < q.rows)
        mm_store(q.Y + r, mm_val(lane & 1 ? v1 : v0, q.B != NULL, q.B ? wt_at(q.B, q.bdt, r) : 0.0f, mode, alpha),
                 mode);
}

/* Decode (n <= 16 tokens): a block of CHAINS warps per 8 weight rows of the parts, warp w running chain w; lane (g, c)
 * loads 16 bytes of weight row g per chunk (UNR chunks a buffer) and multiplies the token tile (zero rows beyond n).
 * STAGE (one token): the block first copies x into dynamic shared memory as bf16 (stage_x<SXU>; 2 cols bytes).
 * NORM (one token, staged): x's RMSNorm by nm instead (norm_x; norm_x_regs, its weights read before the wait, for
 * rows of up to NORM_REGS elements a thread), the block rms_threads(cols) = 128 or 256 threads: one or two groups of
 * 8 rows (warps CHAINS q .. for group q; a group past the parts computes nothing it stores).  (8 elements a thread in
 * the deep kernel, as the looping GLU's, kept 2 blocks a multiprocessor at 126 registers, but Llama-3.2-1B's 2,048
 * columns decoded 0.7-1.2% slower on an H200: BENCHMARKS.md, forty-sixth session.) */
template <int DT, bool STAGE, bool NORM = false, int UNR = DEC_UNR, int SXU = 8>
__global__ void __launch_bounds__(NORM ? 64 * CHAINS : 32 * CHAINS)
    mma_decode_kernel(mma_parts p, const float *__restrict__ x, int64_t cols, int32_t n, int mode, float alpha,
                      norm_args nm) {
    static_assert(STAGE || !NORM, "the norm goes into the staged copy");
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[NORM ? 2 : 1][CHAINS][32][4];
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % CHAINS, g = lane >> 2, c = lane & 3;
    const int grp = NORM ? (threadIdx.x >> 5) / CHAINS : 0;
    int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x / (32 * CHAINS)) + grp) * 8;
    const dec_part q = part_at(p, r0); /* (this group's) */
    const int64_t rows = q.rows;
    if (!NORM && r0 >= rows) { /* the whole block: past the last part */
        pdl_enter((mode & GP_CU_EARLY) != 0);
        return;
    }
    float acc[4];
    const int64_t wr = r0 + g < rows ? r0 + g : rows - 1;
    norm_early ne;
    norm_prefetch<NORM>(ne, nm, cols); /* (before decode_chain's wait: nothing writes the norm weights) */
    const bool regs = NORM && cols <= NORM_REGS * (int64_t)blockDim.x;
    auto prep = [&] {
        if (NORM) return regs ? norm_x_regs(x, (uint4 *)xs, cols, nm, ne) : norm_x(x, (uint4 *)xs, cols, nm);
        return STAGE ? stage_x<SXU>(x, (uint4 *)xs, cols) : x;
    };
    decode_chain<DT, STAGE ? X_PACKED : X_GLOBAL, UNR>(acc, q.W, wr, cols, n, warp, g, c, prep,
                                                       (mode & GP_CU_EARLY) != 0);
    if (!sum_chains(acc, part[grp], warp, lane) || r0 >= rows) return;
    if (n == 1) {
        store_token(acc, lane, r0, q, mode, alpha);
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; i++) { /* acc[i]: token g (i < 2) or g + 8, weight row r0 + 2c + (i & 1) */
        const int32_t t = g + (i >> 1) * 8;
        const int64_t r = r0 + 2 * c + (i & 1);
        if (t < n && r < rows)
            mm_store(q.Y + (size_t)t * rows + r,
                     mm_val(acc[i], q.B != NULL, q.B ? wt_at(q.B, q.bdt, r) : 0.0f, mode, alpha), mode);
    }
}

/* One token, staged, no norm (mma_decode_kernel<DT, true>'s bits): blocks of CHAINS warps, each staging x once and
 * taking the groups of 8 rows blockIdx.x, + gridDim.x, .. of the parts (a grid of as many blocks as the GPU holds
 * at once: no block turnover, one staging a block); 5 blocks a multiprocessor (91 registers with the light staging,
 * where stage_x's default gave 128 and 4 blocks). */
template <int DT>
__global__ void __launch_bounds__(32 * CHAINS, 5)
    mma_decode_loop_kernel(mma_parts p, const float *__restrict__ x, int64_t cols, int mode, float alpha) {
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[CHAINS][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    int64_t groups = 0;
#pragma unroll
    for (int k = 0; k < 3; k++)
        if (k < p.m) groups += (p.rows[k] + 7) / 8;
    const float *xin = NULL;
    for (int64_t gi = blockIdx.x; gi < groups; gi += gridDim.x) {
        int64_t r0 = gi * 8;
        const dec_part q = part_at(p, r0);
        float acc[4];
        const int64_t wr = r0 + g < q.rows ? r0 + g : q.rows - 1;
        auto prep = [&] { return xin ? xin : (xin = stage_x<STAGE_LIGHT>(x, (uint4 *)xs, cols)); };
        decode_chain<DT, X_PACKED, DEC_UNR>(acc, q.W, wr, cols, 1, warp, g, c, prep, (mode & GP_CU_EARLY) != 0,
                                            gi == blockIdx.x);
        if (sum_chains(acc, part, warp, lane)) store_token(acc, lane, r0, q, mode, alpha);
        __syncthreads(); /* warp 0 has read part: the next group may write it */
    }
}

/* The one-token GLU kernels' outputs: lane l (< 4) of warp 0 stores rows r and r + 1 (< rows) of y from part [gate,
 * up][chain][lane][acc]: each product's chains summed in order, then act(gate) * up with the GLU op's expression. */
__device__ __forceinline__ void glu_store(float *y, const float (*part)[CHAINS][32][4], int lane, int64_t r,
                                          int64_t rows, const void *bg, const void *bu, int bdt, int act, int mode) {
#pragma unroll
    for (int i = 0; i < 2; i++, r++) {
        float v[2];
#pragma unroll
        for (int w = 0; w < 2; w++) {
            v[w] = part[w][0][lane][i];
#pragma unroll
            for (int k = 1; k < CHAINS; k++) v[w] += part[w][k][lane][i];
        }
        if (r >= rows) continue;
        const float gv = mm_val(v[0], bg != NULL, bg ? wt_at(bg, bdt, r) : 0.0f, mode, 1.0f);
        const float uv = mm_val(v[1], bu != NULL, bu ? wt_at(bu, bdt, r) : 0.0f, mode, 1.0f);
        y[r] = glu_val(gv, uv, act, (mode & GP_CU_ROUND) != 0);
    }
}

/* One token through gate and up (same shape): a block of 2 CHAINS warps per 8 rows (warps 0..CHAINS-1 the gate's
 * chains, CHAINS..2 CHAINS-1 the up's), then y[r] = act(gate) * up with the GLU op's expression: the bits of the two
 * products (the decode kernel's) and glu_kernel; under NORM of the input's RMSNorm (input_of; dynamic shared memory
 * [cols]), or with PACKED staged as bf16 (norm_x_regs, its weights read before the wait, for rows of up to NORM_REGS
 * elements a thread: measured on the H100, Qwen3-0.6B's 1024-wide rows 3-6% faster decode staged, 1-3% more with the
 * weights early and x in registers, Llama-3.2-1B's 2048 3-4% slower staged; BENCHMARKS.md). */
template <int DT, bool NORM, bool PACKED = false>
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
    const int64_t wr = r0 + g < rows ? r0 + g : rows - 1;
    norm_early ne;
    norm_prefetch<PACKED>(ne, nm, cols); /* (before decode_chain's wait: nothing writes the norm weights) */
    auto prep = [&] { return PACKED ? norm_x_regs(x, (uint4 *)xs, cols, nm, ne) : input_of<NORM>(x, xs, cols, nm); };
    constexpr int XIN = PACKED ? X_PACKED : NORM ? X_SHARED : X_GLOBAL;
    decode_chain<DT, XIN, GLU_UNR>(acc, which ? U : G, wr, cols, 1, chain, g, c, prep, (mode & GP_CU_EARLY) != 0);
#pragma unroll
    for (int i = 0; i < 4; i++) part[which][chain][lane][i] = acc[i];
    __syncthreads();
    if (warp || g) return; /* token 0 lives in warp 0's lanes g = 0 */
    glu_store(y, part, lane, r0 + 2 * c, rows, bg, bu, bdt, act, mode);
}

/* The looping GLU's register path for the norm: up to 8 elements a thread (80 registers, 3 blocks a multiprocessor as
 * before).  Llama-3.2-1B's 2,048 columns went through norm_x, which reads x twice and the norm weights after the
 * wait, 2.1-2.4 us from a block's wait to its input on an H200; tg128 +1.3-3.5% since (BENCHMARKS.md). */
#define GLU_NORM_REGS 8

/* One token through gate and up after the input's RMSNorm, on looping blocks, with mma_decode_glu_kernel's bits: for
 * rows in more groups of 8 than fit at once and columns a multiple of 2 DEC_UNR 32 CHAINS (each chain K = cols / (32
 * CHAINS) chunks, whole pairs of buffers).  With ctr (gp_cu_counters), each block claims its groups one at a time from
 * ctr[0] (the first two before its wait: the kernel after it, which it lets in early, must not use ctr), two ahead of
 * the one it multiplies, and the last block out sets the counters to zero again; without, block b takes the groups
 * b, b + gridDim.x, ..  (A group's numbers do not depend on the block that computes it.  The grid's blocks sit unevenly
 * on the multiprocessors, 1 to 3 each when the previous kernel still holds some, and a block streams slower the more
 * blocks share its multiprocessor: with fixed groups Llama-3.2-1B's blocks ended 8.3 us apart on an H200, with claimed
 * ones on every block that fits 5.1 us; the 8B shape's decode 1.4-2.0% faster.)  The warps' loads are one stream across
 * the block's groups, DEC_UNR chunks a buffer (twice the GLU kernel's: 80 registers, 3 blocks a multiprocessor): the
 * next group's first chunks are in flight while this group's last ones are multiplied, and every block's first loads go
 * out before the wait, where a second wave of blocks waited for its first loads again.  The norm is computed once a
 * block, straight into a bf16 copy (norm_x_regs up to GLU_NORM_REGS elements a thread, or norm_x for wider rows: a
 * chunk's input is then one 16-byte read of shared memory, not 32 bytes to round).  A group's sums pass through
 * part[group & 1]: one barrier a group.  (Measured on an H200, alone: Llama-3.2-1B's gate|up 24.0 -> 23.6 us, the 8B
 * shape's 68.4 -> 66.1; decoding, where the first loads overlap the previous kernel, tg +0.5-3.5%.  The same loop with
 * 2 chunks a buffer and float32 input was slower than separate blocks, 8 chunks at 116 registers no better on
 * Llama-3.2-1B: BENCHMARKS.md.) */
template <int DT>
__global__ void __launch_bounds__(64 * CHAINS, 3)
    mma_decode_glu_loop_kernel(float *__restrict__ y, const float *__restrict__ x, norm_args nm,
                               const void *__restrict__ G, const void *__restrict__ U, int64_t rows, int64_t cols,
                               const void *bg, const void *bu, int bdt, int act, int mode, unsigned *ctr) {
    extern __shared__ __align__(16) float xs[];
    __shared__ float part[2][2][CHAINS][32][4];
    __shared__ int64_t s_grp[4]; /* the block's j-th group at [j & 3] (claimed two ahead; >= groups: none) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int which = warp / CHAINS, chain = warp % CHAINS;
    const int64_t groups = (rows + 7) / 8;
    const int K = (int)(cols / (32 * CHAINS));
    const void *__restrict__ W = which ? U : G;
    /* ctr: groups claimed from ctr[0] one at a time (the blocks on the least busy multiprocessors take more); else
     * block b's groups b, b + gridDim.x, .. */
    auto claim = [&](int j) {
        return ctr ? (int64_t)atomicAdd(ctr, 1u) : (int64_t)blockIdx.x + (int64_t)j * gridDim.x;
    };
    if (threadIdx.x == 0) s_grp[0] = claim(0), s_grp[1] = claim(1);
    __syncthreads();
    auto r0_of = [&](int j) { return s_grp[j & 3] * 8; };
    uint4 wa[DEC_UNR], wb[DEC_UNR];
    int lj = 0, lk = 0; /* the next load's group and chunk of the chain */
    auto load_next = [&](uint4 *b) {
        if (s_grp[lj & 3] >= groups) return;
        const int64_t r0 = r0_of(lj), wr = r0 + g < rows ? r0 + g : rows - 1;
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++) b[u] = w8<DT>(W, wr, cols, chain_chunk(chain, lk + u) * 32 + 8 * c);
        if ((lk += DEC_UNR) == K) lk = 0, lj++;
    };
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float *xin = NULL;
    auto mul = [&](const uint4 *b, int k0) {
        uint4 a[DEC_UNR];
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++) a[u] = x8<X_PACKED>(xin, g, 1, cols, chain_chunk(chain, k0 + u) * 32 + 8 * c);
#pragma unroll
        for (int u = 0; u < DEC_UNR; u++) chunk_mma(acc, a[u], make_uint4(0, 0, 0, 0), b[u]);
    };
    auto finish = [&](int j) { /* group j's chains summed, then act(gate) * up as mma_decode_glu_kernel */
#pragma unroll
        for (int i = 0; i < 4; i++) part[j & 1][which][chain][lane][i] = acc[i], acc[i] = 0.0f;
        if (threadIdx.x == 0) s_grp[(j + 2) & 3] = s_grp[(j + 1) & 3] < groups ? claim(j + 2) : groups;
        __syncthreads();
        if (!warp && !g) glu_store(y, part[j & 1], lane, r0_of(j) + 2 * c, rows, bg, bu, bdt, act, mode);
    };
    norm_early_t<GLU_NORM_REGS> ne;
    norm_prefetch<true, GLU_NORM_REGS>(ne, nm, cols); /* (before the wait: nothing writes the norm weights) */
    load_next(wa);
    load_next(wb);
    pdl_enter((mode & GP_CU_EARLY) != 0);
    const bool regs = cols <= GLU_NORM_REGS * 64 * CHAINS;
    xin = regs ? norm_x_regs(x, (uint4 *)xs, cols, nm, ne) : norm_x(x, (uint4 *)xs, cols, nm);
    for (int j = 0; s_grp[j & 3] < groups; j++) {
        for (int k0 = 0; k0 < K; k0 += 2 * DEC_UNR) {
            mul(wa, k0);
            load_next(wa);
            mul(wb, k0 + DEC_UNR);
            load_next(wb);
        }
        finish(j);
    }
    if (ctr && threadIdx.x == 0) { /* the last block out sets the counters to zero for the next launch */
        __threadfence();
        if (atomicAdd(ctr + 1, 1u) == gridDim.x - 1) ctr[0] = 0, ctr[1] = 0;
    }
}

/* The chunk after j in the chain-major order of nch chunks (chain 0's chunks 0, 1, 8, 9, 16, ..., then chain 1's 2,
 * 3, 10, ...): the next of its chain, else the first of the next chain (below chain cend), else -1
 * (mma_prefill_kernel's order). */
__device__ __forceinline__ int next_chunk(int j, int nch, int cend = CHAINS) {
    const int jn = (int)chain_next(j);
    if (jn < nch) return jn;
    const int c1 = chunk_chain(j) + 1;
    return c1 < cend && 2 * c1 < nch ? 2 * c1 : -1;
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
 * the next chunk loading into registers while this one is multiplied.  The chunks are taken chain by chain (0, 1,
 * 8, 9, ..., then 2, 3, 10, ...): each chain sums into acc, which is then added to the total in chain order, the decode
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
    const int64_t lw0 = r0 + lrow < rows ? r0 + lrow : rows - 1;
    const int64_t lw1 = r0 + lrow + 64 < rows ? r0 + lrow + 64 : rows - 1;
    uint4 ra, rb0, rb1;
    auto load = [&](int64_t j) {
        const int64_t k = j * 32 + 8 * lpart;
        ra = x8(x, t0 + lrow, n, cols, k);
        rb0 = w8<DT>(W, lw0, cols, k);
        rb1 = w8<DT>(W, lw1, cols, k);
    };
    auto stash = [&](int buf) {
        sa[buf][lrow][lpart] = ra, sb[buf][lrow][lpart] = rb0, sb[buf][lrow + 64][lpart] = rb1;
    };
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
        for (int i = 0; i < 2; i++)
            a[i] = sa[buf][wm * 32 + i * 16 + g][c], a8[i] = sa[buf][wm * 32 + i * 16 + g + 8][c];
#pragma unroll
        for (int q = 0; q < 4; q++) b[q] = sb[buf][wn * 32 + q * 8 + g][c];
        tile_mma<2, 4>(acc, a, a8, b);
        if (jn < 0 || chunk_chain(jn) != chunk_chain(j)) fold_chain(tot, acc, chain); /* j ended its chain */
        if (jn >= 0) stash(buf ^ 1);
        __syncthreads();
        buf ^= 1;
        j = jn;
    }
    /* chains with no chunk (cols <= 64 (CHAINS - 1)) add zeros, as in decode */
    while (chain < CHAINS) fold_chain(tot, acc, chain);
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

/* a[k] of a parts' array, k < 3, chosen with constant indices (as part_row: no local-memory copy of the array) */
template <typename T>
__device__ __forceinline__ T part_of(const T (&a)[3], int k) {
    return k == 0 ? a[0] : k == 1 ? a[1] : a[2];
}

/* Output (t, r) of the stacked parts: v (the chains' total) through mm_val (the part's bias, rounding) and mm_store. */
__device__ __forceinline__ float *out_at(const mma_parts &P, float v, int32_t t, int64_t r, int mode, float alpha,
                                         float *val) {
    int64_t lr;
    const int k = part_row(P, r, &lr);
    const void *B = part_of(P.B, k);
    const int bdt = part_of(P.bdt, k);
    *val = mm_val(v, B != NULL, B ? wt_at(B, bdt, lr) : 0.0f, mode, alpha);
    return part_of(P.Y, k) + (size_t)t * part_of(P.rows, k) + lr;
}
__device__ __forceinline__ void store_out(const mma_parts &P, float v, int32_t t, int64_t r, int mode, float alpha) {
    float val;
    float *o = out_at(P, v, t, r, mode, alpha, &val);
    mm_store(o, val, mode);
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
 * (GEMM_STAGES) ahead; the first stages' weights before pdl_enter().  Blocks of one weight tile are adjacent in the
 * grid (x: token tiles), so a weight tile is read from memory once and from L2 by the others.  (A grid too small to
 * fill the GPU splits its chains instead: wg_gemm_kernel.) */
#if GEMM_ST32 < GEMM_ST /* fewer stages for the 32-token tiles: three blocks a multiprocessor (registers capped) */
#define GEMM_BOUNDS(BM) __launch_bounds__(256, (BM) == 32 ? 3 : 2)
#else
#define GEMM_BOUNDS(BM) __launch_bounds__(256)
#endif
template <int BM, bool GLU>
__global__ void GEMM_BOUNDS(BM)
    mma_gemm_kernel(mma_parts P, const uint16_t *__restrict__ xb, int64_t rows, int64_t cols, int32_t n, int mode,
                    float alpha, int act) {
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
        const uint16_t *W = (const uint16_t *)part_of(P.W, k);
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
            *j = next_chunk(*j, nch);
        }
    };
    int jw = 0, jx = 0;
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
    int jc = 0, st = 0, stl = ST - 1; /* the chunk to multiply, its stage, the stage to fill */
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
            if (chain_next(jc) >= nch) fold_chain(tot, acc, chain); /* jc was its chain's last chunk */
            jc = next_chunk(jc, nch);
        }
        st = st + 1 == ST ? 0 : st + 1;
    }
    cp_wait<0>();
    /* chains with no chunk (cols <= 64 (CHAINS - 1)) add zeros, as in decode */
    while (chain < CHAINS) fold_chain(tot, acc, chain);
    store_tile<BM, GLU>(P, (float *)gsm, tot, t0, r0, rows, n, mode, alpha, act);
}

/* ---- GEMMs on Hopper's warpgroup MMA (wgmma): the same chunk order and bits ---- */

/* The wgmma GEMM's operand copy of x [n, cols] (float32, cols % 8 == 0): bf16 (pack2's rounding), each token row
 * padded with zeros to whole 32-column chunks (xb_cols), and each chunk's 64 bytes ordered as wgmma takes them: four
 * 16-byte units q = 2h + s holding columns 8c + 4h + 2s + {0, 1} for c = 0..3 (h: the chunk's first or second
 * product).  A 16-column product sums its 16 pairs in one rounding whatever their order (measured: mma.sync and
 * wgmma give the same bits in any k order, BENCHMARKS.md), so product h needs the columns mma16816's A fragment gives
 * it, lane c's 8c + 4h .. 8c + 4h + 3: units 2h, 2h + 1 are its k = 0..7 and 8..15, paired with the fragment's
 * k = 2c + {0, 1} (columns 8c + 4h + {0, 1}) and 2c + 8 + {0, 1} (8c + 4h + {2, 3}). */
__host__ __device__ __forceinline__ int64_t xb_cols(int64_t cols) { return (cols + 31) / 32 * 32; }

/* 16-byte unit u of a token row xr [cols] in that layout */
__device__ __forceinline__ uint4 xb_unit(const float *xr, int64_t cols, int64_t u) {
    const int64_t q = u & 3, k0 = (u >> 2) * 32 + 4 * (q >> 1) + 2 * (q & 1);
    uint32_t w[4];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int64_t k = k0 + 8 * c;
        const float2 v = k < cols ? *(const float2 *)(xr + k) : make_float2(0.0f, 0.0f);
        w[c] = pack2(v.x, v.y);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void to_bf16_wg_kernel(uint4 *__restrict__ xb, const float *__restrict__ x, int64_t cols, int64_t n16) {
    pdl_enter();
    const int64_t rq = xb_cols(cols) / 8; /* 16-byte rows per token */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (int64_t)gridDim.x * blockDim.x)
        xb[i] = xb_unit(x + i / rq * cols, cols, i % rq);
}

/* A chunk's RMSNorm straight into the GEMM's operand copy (the bits of gp_cu_rmsnorm, then to_bf16_kernel's or, WG,
 * to_bf16_wg_kernel's copy): a block of rms_threads(cols) threads a token, normalized into shared memory [cols]. */
template <bool WG>
__device__ __forceinline__ void rmsnorm_row_xb(uint4 *xb, const float *x, float *xs, int32_t cols,
                                               const norm_args &nm) {
    input_of<true>(x, xs, cols, nm); /* the token normalized into xs */
    const int64_t rq = WG ? xb_cols(cols) / 8 : cols / 8;
    for (int64_t u = threadIdx.x; u < rq; u += blockDim.x) {
        const float4 *v = (const float4 *)(xs + 8 * u);
        xb[u] = WG ? xb_unit(xs, cols, u) : pack8(v[0], v[1]);
    }
}
template <bool WG>
__global__ void rmsnorm_xb_kernel(uint4 *__restrict__ xb, const float *__restrict__ x, norm_args nm, int32_t cols) {
    pdl_enter();
    extern __shared__ float xs[];
    const int64_t rq = WG ? xb_cols(cols) / 8 : cols / 8;
    rmsnorm_row_xb<WG>(xb + blockIdx.x * rq, x + (size_t)blockIdx.x * cols, xs, cols, nm);
}

#define WG_BN 128 /* tokens per tile */
#ifndef WG_S
#define WG_S 6 /* stages in the ring of buffers: whole GEMMs (7, all their shared memory: 1-5% slower; BENCHMARKS.md) */
#endif
#ifndef WG_S_SPLIT
#define WG_S_SPLIT 5 /* the same, split GEMMs (7: q|k|v 4-8% slower) */
#endif
#define WG_U 2 /* chunks a stage: a chain's pair, 128-byte rows */
#ifndef WG_LAG
#define WG_LAG 2 /* stages the producer keeps in flight before it marks one full */
#endif
/* Dynamic shared memory: S stages of a pair's WG_BN token rows and 128 weight rows, 128 bytes each (wg_unit's
 * swizzle), then the ring's 2 S mbarriers. */
#define WG_SMEM_S(S) ((size_t)(S) * (WG_BN + 128) * 128 + 16 * (S))
#define WG_SMEM WG_SMEM_S(WG_S_SPLIT)
static_assert(WG_SMEM <= 232448, "a split GEMM's stages exceed a block's shared memory");

#define WG_SQ ((WG_BN + 128) * 8) /* 16-byte units a stage: WG_BN token rows, then 128 weight rows */
#define WG_WQ (WG_BN * 8)         /* where a stage's weight rows start */

/* f(stage buffer, h, chunk) for the chunks of stage s from *j on, its pair's first (h 0) and second (h 1; none where
 * the pair ends at nch): a stage is a pair, which ends with its chain, so the producers' stages and the consumers'
 * agree; *j moves past them. */
template <typename F>
__device__ __forceinline__ void wg_stage(uint4 *gsm, int s, int *j, int nch, int cend, F f) {
    for (int h = 0; h < WG_U && *j >= 0; h++) {
        f(gsm + s * WG_SQ, h, *j);
        const bool last = chain_next(*j) >= nch;
        *j = next_chunk(*j, nch, cend);
        if (last) break;
    }
}

/* f(v, t, r) for each of this thread's fragments v of a tile's sums: warpgroup wg holds weight rows r0 + 64 wg ..,
 * its warp w rows 16 w + g, 16 w + g + 8; fragment 4 j + e token t0 + 8 j + 2 c + (e & 1), row + 8 (e >> 1). */
template <int BN, typename F>
__device__ __forceinline__ void wg_frag(float (&v)[BN / 2], int32_t t0, int64_t r0, F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int64_t r = r0 + 16 * warp + g; /* warp = 4 wg + w */
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(v[4 * j + e], t0 + 8 * j + 2 * c + (e & 1), r + 8 * (e >> 1));
}

/* A GEMM through bf16 weights on wgmma: a block of 2 consumer warpgroups and a producer warpgroup computes chains
 * z CH .. z CH + CH - 1 (grid z) of 128 weight rows (a GLU: 64 gate rows, then the same 64 up rows) x WG_BN tokens,
 * over the chunks in mma_prefill_kernel's order.  Split (CH < CHAINS, chain_groups): each chain's sums go to part
 * [CHAINS][n][rows] (zeros for a chain with no chunk) for gemm_fold_kernel; whole (CH == CHAINS): they are added in
 * chain order into a total in registers (the consumers take the producer warpgroup's spare registers), staged through
 * the ring (wg_stage_out) and stored as mma_gemm_kernel stores its totals (a GLU as store_glu).  The producer copies
 * the chunks a pair a stage (a stage ends with its chain) into a ring of S stage buffers (WG_S whole, WG_S_SPLIT; WG_BN
 * token rows of xb, then 128 weight rows, 128 bytes each in TMA's 128-byte swizzle), waiting for a buffer's empty
 * mbarrier: by TMA where the tensor maps could be made (one thread; the copies complete the full mbarrier), else by
 * cp.async (the warpgroup, marking the full mbarrier once its copies have landed, WG_LAG stages later).  Consumer
 * warpgroup wg multiplies weight rows 64 wg .. with one wgmma m64n128k16 per 16-column product (A: the weights'
 * fragments read as mma16816's; B: the tokens), keeps one stage's products in flight and frees a buffer when its
 * products are done.  Blocks of one weight tile are adjacent in the grid (x: token tiles), so a weight tile is read
 * from memory once and from L2 by the others.  FULL (no pair cut short: cols a multiple of 64, wg_kernel): a
 * stage's wgmmas without a branch between them or before their commit (the chain's next chunk is found first); with
 * one, ptxas closes a wgmma group before it and commits with an extra wgmma after it, so wg_wait<1> then waited for
 * the stage's own products (ncu on the H100: the whole GEMMs 1-3% faster without the branches between the wgmmas,
 * 4-7% more without the one before the commit; BENCHMARKS.md). */
template <bool GLU, int S>
__device__ __forceinline__ void wg_producer(const mma_parts &P, const uint16_t *__restrict__ xb, int64_t rows,
                                              int64_t cols, int32_t n, uint4 *gsm, uint64_t *full, uint64_t *empty,
                                              int j0, int cend, int pw) {
    constexpr int BN = WG_BN, WU = 4, XU = BN / 32; /* copies a lane and chunk: weights, tokens */
    const int lane = threadIdx.x & 31, nch = (int)((cols + 31) / 32);
    const int32_t t0 = blockIdx.x * BN;
    const int64_t r0 = (int64_t)blockIdx.y * (GLU ? 64 : 128), xc = xb_cols(cols);
    /* warp pw: weights: part lane & 3 of tile rows 32 pw + lane / 4 + 8 u (GLU: the gate's rows r0.., then the
     * up's); tokens: unit lane / 8 of tokens 8 (XU pw + u) + lane % 8 */
    const uint16_t *wp[WU];
    uint32_t wok = 0;
#pragma unroll
    for (int u = 0; u < WU; u++) {
        int64_t lr;
        const int tr = 32 * pw + (lane >> 2) + 8 * u;
        const int64_t r = GLU ? r0 + (tr & 63) : r0 + tr;
        const int k = GLU ? (lr = r < rows ? r : 0, tr >> 6) : part_row(P, r < rows ? r : 0, &lr);
        const uint16_t *W = (const uint16_t *)part_of(P.W, k);
        wok |= (uint32_t)(r < rows) << u, wp[u] = W + lr * cols + 8 * (lane & 3);
    }
    const int q = lane >> 3, tl = lane & 7;
    const uint16_t *xp = xb + (int64_t)t0 * xc + (int64_t)tl * xc + 8 * q;
    auto load_w = [&](uint4 *b, int h, int j) {
        const int k = j * 32;
        const bool kok = k + 8 * (lane & 3) < cols;
#pragma unroll
        for (int u = 0; u < WU; u++)
            cp16(b + WG_WQ + wg_unit(32 * pw + (lane >> 2) + 8 * u, 4 * h + (lane & 3)), wp[u] + k,
                 (wok >> u & 1) && kok);
    };
    auto load_x = [&](uint4 *b, int h, int j) {
#pragma unroll
        for (int u = 0; u < XU; u++) {
            const int t = tl + 8 * (XU * pw + u);
            const bool ok = t0 + t < n;
            cp16(b + wg_unit(t, 4 * h + q), ok ? xp + (int64_t)8 * (XU * pw + u) * xc + j * 32 : xb, ok);
        }
    };
    auto each_chunk = [&](int s, int *j, auto f) { wg_stage(gsm, s, j, nch, cend, f); };
    /* the first S stages' weights before the wait for the previous kernel (they do not depend on it) */
    int j = j0;
    for (int s = 0; s < S && j >= 0; s++) each_chunk(s, &j, load_w);
    pdl_enter();
    int i = 0;
    for (j = j0; j >= 0; i++) {
        const int s = i % S;
        if (i >= S) mbar_wait(&empty[s], ((i / S) & 1) ^ 1);
        each_chunk(s, &j, [&](uint4 *b, int h, int jj) {
            if (i >= S) load_w(b, h, jj);
            load_x(b, h, jj);
        });
        cp_commit();
        if (i >= WG_LAG) {
            cp_wait<WG_LAG>();
            proxy_fence();
            mbar_arrive(&full[(i - WG_LAG) % S]);
        }
    }
    cp_wait<0>();
    proxy_fence();
    for (int m = i > WG_LAG ? i - WG_LAG : 0; m < i; m++) mbar_arrive(&full[m % S]);
}

/* ---- wg_gemm_kernel's copies by the Tensor Memory Accelerator (TMA) ---- */

/* Tensor maps of a wgmma GEMM's operands: x, the input's copy (to_bf16_wg_kernel's [n][xb_cols], boxes of a pair's
 * 64 columns x WG_BN tokens: wgmma's B rows), and w[k], the weights of part k (GLU: gate and up), boxes of 64 columns
 * x 128 rows (GLU: 64; the consumers' fragment reads), both in 128-byte swizzled rows (wg_unit).  Rows, columns and
 * tokens past the end read as zeros (a pair cut short at the end: its second chunk's columns). */
struct wg_maps {
    CUtensorMap x, w[3];
};

/* mbarrier b expects `bytes` more (the TMA copies of a stage) and takes this thread's arrival */
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
/* copies the box at (column x, row y) of map m into shared memory at dst; completes its bytes on mbarrier b */
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *m, int32_t x, int32_t y, uint64_t *b) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];" ::"r"(smem_u32(dst)),
                 "l"(m), "r"(x), "r"(y), "r"(smem_u32(b))
                 : "memory");
}

/* wg_gemm_kernel's producer by TMA (one thread): a stage's pair in one box of each operand, its bytes announced on
 * the stage's full mbarrier, which the copies complete; a stage's buffers reused once its empty mbarrier has
 * completed.  The first S stages' weights before the wait for the previous kernel. */
template <bool GLU, int S>
__device__ __forceinline__ void wg_producer_tma(const wg_maps &M, const mma_parts &P, int64_t cols, uint4 *gsm,
                                                uint64_t *full, uint64_t *empty, int j0, int cend) {
    const int nch = (int)((cols + 31) / 32);
    const int32_t t0 = blockIdx.x * WG_BN;
    int64_t lr = (int64_t)blockIdx.y * (GLU ? 64 : 128);
    const int k = GLU ? 0 : part_row(P, lr, &lr);
    const CUtensorMap *mw = k == 0 ? &M.w[0] : k == 1 ? &M.w[1] : &M.w[2];
    auto past = [&](int s, int *j) { wg_stage(gsm, s, j, nch, cend, [](uint4 *, int, int) {}); };
    auto load_w = [&](int s, int j) { /* stage s's pair from chunk j: the weights' box(es) */
        uint4 *b = gsm + s * WG_SQ + WG_WQ;
        tma_load(b, GLU ? &M.w[0] : mw, j * 32, (int32_t)lr, &full[s]);
        if (GLU) tma_load(b + 64 * 8, &M.w[1], j * 32, (int32_t)lr, &full[s]);
    };
    int j = j0, i = 0;
    for (; i < S && j >= 0; i++) {
        mbar_expect(&full[i], WG_SQ * 16); /* the boxes' bytes, zeros past the end included */
        load_w(i, j);
        past(i, &j);
    }
    pdl_enter();
    for (i = 0, j = j0; j >= 0; i++) {
        const int s = i % S;
        if (i >= S) {
            mbar_wait(&empty[s], ((i / S) & 1) ^ 1);
            mbar_expect(&full[s], WG_SQ * 16);
            load_w(s, j);
        }
        tma_load(gsm + s * WG_SQ, &M.x, j * 32, t0, &full[s]);
        past(s, &j);
    }
}

/* The residual tile a whole GEMM adding to it (GP_CU_ACC) reads in its epilogue, requested into L2 by the TMA
 * producer once its copies are issued, while the consumers' last stages run: each of the tile's tokens' run of rows,
 * where the tile's rows are one part's and the runs are 16-byte units.  (The residual was written a GEMM or more
 * before, whose weights have pushed it out of L2: the epilogue's batches of reads each waited on memory, 9-10 µs a
 * block for the 8B shape's o and down, 7.3-7.4 with this; BENCHMARKS.md.) */
__device__ __forceinline__ void wg_res_prefetch(const mma_parts &P, int64_t r0, int64_t rows, int32_t t0, int32_t n) {
    int64_t lr0, lr1;
    const int k = part_row(P, r0, &lr0);
    if (part_row(P, min(r0 + 128, rows) - 1, &lr1) != k) return;
    const size_t pr = (size_t)part_of(P.rows, k);
    const uint32_t bytes = (uint32_t)(lr1 - lr0 + 1) * 4;
    const float *y = part_of(P.Y, k) + (size_t)t0 * pr + lr0;
    if (bytes % 16 || pr % 4 || (uintptr_t)y % 16) return;
    for (int t = 0; t < WG_BN && t0 + t < n; t++)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(y + (size_t)t * pr), "r"(bytes) : "memory");
}

#define WG_SMEM_WHOLE WG_SMEM_S(WG_S)
static_assert(WG_SMEM_WHOLE <= 232448, "a whole GEMM's stages exceed a block's shared memory");

/* this warpgroup's registers a thread from here on: N (a multiple of 8) */
template <int N>
__device__ __forceinline__ void wg_regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void wg_regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }

#define WG_ES 68 /* floats a row of the outputs' staging: a token's 64 sums of a warpgroup, padded (see below) */
static_assert((size_t)2 * WG_BN * WG_ES * 4 <= WG_SMEM_WHOLE, "the outputs' staging exceeds the ring");

/* A whole GEMM's totals tot (this consumer thread's fragments) into the ring's shared memory es [2][WG_BN][WG_ES]
 * (warpgroup, token, its 64 rows), once both consumer warpgroups' products are done; returns es when every consumer
 * thread has written.  (A warp's writes of one fragment: 8 c + g + const mod 32, conflict-free.  The outputs are then
 * stored by a loop over adjacent rows: stored from the fragments, 64 times unrolled with the GLU's expression, the
 * kernel was 173,000 instructions, its epilogue waiting on instruction fetch.) */
__device__ __forceinline__ const float *wg_stage_out(float (&tot)[WG_BN / 2], float *es) {
    asm volatile("bar.sync 1, 256;" ::: "memory"); /* every product done: the ring is free */
    wg_frag<WG_BN>(tot, 0, 0, [&](float &v, int32_t t, int64_t r) { /* r: warpgroup r / 64, its row r % 64 */
        es[((r >> 6) * WG_BN + t) * WG_ES + (r & 63)] = v;
    });
    asm volatile("bar.sync 1, 256;" ::: "memory");
    return es;
}

/* The biases (gate, up; 0 where none) of GLU output row r (< rows) */
struct glu_bias {
    float g, u;
};
__device__ __forceinline__ glu_bias wg_glu_bias(const mma_parts &P, int64_t r) {
    return {P.B[0] ? wt_at(P.B[0], P.bdt[0], r) : 0.0f, P.B[1] ? wt_at(P.B[1], P.bdt[1], r) : 0.0f};
}

/* Output (token tl of the tile, row r) of a GLU tile from the staged totals es (consumer warpgroup 0's: the gate
 * rows' sums, 1's: the same rows' up sums) and the row's biases b: glu_val of the two mm_val'd, store_glu's bits. */
__device__ __forceinline__ float wg_glu_out(const mma_parts &P, const float *es, int tl, int r, glu_bias b, int mode,
                                            int act) {
    const float *e = es + tl * WG_ES + r;
    const float gv = mm_val(e[0], P.B[0] != NULL, b.g, mode, 1.0f);
    const float uv = mm_val(e[WG_BN * WG_ES], P.B[1] != NULL, b.u, mode, 1.0f);
    return glu_val(gv, uv, act, (mode & GP_CU_ROUND) != 0);
}

/* The GLU tile's outputs y [n, rows] (wg_glu_out), a token's 64 rows by adjacent consumer threads; with xo (rows %
 * 32 == 0) also the next GEMM's input copy of y (to_bf16_wg_kernel's bits), a thread an xo unit: its 8 outputs
 * (columns k0 + 8 c + {0, 1}) stored as 4 pairs and one 16-byte unit (one output at a time, the copy's 2-byte stores
 * cost the GLU more than half of the copy kernel they saved, BENCHMARKS.md).  A thread's rows are the same for
 * every token: their biases and addresses found once (found for each output, the loop was about 90 instructions an
 * output, most waiting on the one before, and the stores took 7 µs a block; BENCHMARKS.md). */
__device__ __forceinline__ void wg_store_glu(const mma_parts &P, const float *es, int32_t t0, int64_t r0, int64_t rows,
                                             int32_t n, int mode, int act, uint16_t *xo) {
    const int tn = min(WG_BN, n - t0);
    if (!xo) {
        const int rl = threadIdx.x & 63;
        if (r0 + rl >= rows) return;
        const glu_bias b = wg_glu_bias(P, r0 + rl);
        float *y = P.Y[0] + (size_t)t0 * rows + r0 + rl;
#pragma unroll 4
        for (int tl = threadIdx.x >> 6; tl < tn; tl += 4)
            y[(size_t)tl * rows] = wg_glu_out(P, es, tl, rl, b, mode, act);
        return;
    }
    const int u = threadIdx.x & 7, q = u & 3, k0 = (u >> 2) * 32 + 4 * (q >> 1) + 2 * (q & 1);
    if (r0 + k0 >= rows) return; /* (rows % 32 == 0: then all 8 of its rows are in range) */
    glu_bias b[8];
#pragma unroll
    for (int c = 0; c < 8; c++) b[c] = wg_glu_bias(P, r0 + k0 + 8 * (c >> 1) + (c & 1));
    float *y0 = P.Y[0] + (size_t)t0 * rows + r0 + k0;
    uint16_t *x0 = xo + (size_t)t0 * rows + r0 + 8 * u;
#pragma unroll 1
    for (int tl = threadIdx.x >> 3; tl < tn; tl += 32) {
        float *y = y0 + (size_t)tl * rows;
        uint32_t w[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float lo = wg_glu_out(P, es, tl, k0 + 8 * c, b[2 * c], mode, act);
            const float hi = wg_glu_out(P, es, tl, k0 + 8 * c + 1, b[2 * c + 1], mode, act);
            *(float2 *)(y + 8 * c) = make_float2(lo, hi);
            w[c] = pack2(lo, hi);
        }
        *(uint4 *)(x0 + (size_t)tl * rows) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* A whole GEMM's outputs from the staged totals es: rows r0 + 64 h .. of warpgroup h, as store_out stores them, a
 * token's 64 rows by adjacent threads.  A thread's two rows are the same for every token: their part, bias and
 * address found once (found for each output as store_out does, the loop was about 90 instructions an output, most
 * waiting on the one before, and the stores took 14-17 µs a block; BENCHMARKS.md).  Adding to the residual
 * (GP_CU_ACC), WG_OUTB of a thread's outputs at a time, their reads issued together before any store (one at a time,
 * the 8B shape's o and down waited a memory latency per output: 29% and 14% slower; BENCHMARKS.md). */
#define WG_OUTB 8
__device__ __forceinline__ void wg_store_whole(const mma_parts &P, const float *es, int32_t t0, int64_t r0,
                                               int64_t rows, int32_t n, int mode, float alpha) {
    const int rl = threadIdx.x & 63, tn = min(WG_BN, n - t0);
#pragma unroll 1
    for (int h = 0; h < 2; h++) {
        const int64_t r = r0 + 64 * h + rl;
        if (r >= rows) return;
        int64_t lr;
        const int k = part_row(P, r, &lr);
        const void *B = part_of(P.B, k);
        const float b = B ? wt_at(B, part_of(P.bdt, k), lr) : 0.0f;
        const size_t pr = (size_t)part_of(P.rows, k);
        float *y = part_of(P.Y, k) + (size_t)t0 * pr + lr;
        const float *e = es + h * WG_BN * WG_ES + rl;
        if (!(mode & GP_CU_ACC)) {
#pragma unroll 4
            for (int tl = threadIdx.x >> 6; tl < tn; tl += 4)
                y[tl * pr] = mm_val(e[tl * WG_ES], B != NULL, b, mode, alpha);
            continue;
        }
#pragma unroll 1
        for (int tb = threadIdx.x >> 6; tb < tn; tb += 4 * WG_OUTB) {
            float old[WG_OUTB];
#pragma unroll
            for (int u = 0; u < WG_OUTB; u++) old[u] = tb + 4 * u < tn ? y[(tb + 4 * u) * pr] : 0.0f;
#pragma unroll
            for (int u = 0; u < WG_OUTB; u++) {
                const int tl = tb + 4 * u;
                if (tl < tn) y[tl * pr] = mm_out(old[u], mm_val(e[tl * WG_ES], B != NULL, b, mode, alpha), mode);
            }
        }
    }
}

#ifdef GP_CU_TRACE
/* Diagnostic builds only: each wg_gemm_kernel block's thread 0 stores the SM clock where wg_stamp(k) names it (0
 * start, 1 its first stage full, 2 its main loop's end, 3 the totals staged, 4 the end), the global timer at 0 and 4,
 * its block, SM, rows and columns; written to $GP_CU_TRACE_FILE.gemm at exit (tools/cuda_gemm_stamps.py). */
#define WG_STAMPS 10
#define WG_STAMP_CAP (1u << 18)
static __device__ unsigned long long g_wg_stamp[WG_STAMP_CAP * WG_STAMPS];
static __device__ unsigned g_wg_n;
static void wg_stamp_dump(void) { stamps_dump(".gemm", g_wg_stamp, &g_wg_n, WG_STAMP_CAP, WG_STAMPS); }
static void wg_stamp_set(unsigned long long *) { atexit(wg_stamp_dump); }
namespace {
struct wg_stamp_reg {
    wg_stamp_reg() { gp_cu_trace_register(wg_stamp_set); }
} wg_stamp_reg_inst;
}
static __shared__ unsigned s_wg_rec;
__device__ __forceinline__ void wg_stamp(int k, int64_t rows = 0, int64_t cols = 0) {
    if (threadIdx.x) return;
    unsigned long long t, g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    t = clock64();
    if (k == 0) s_wg_rec = atomicAdd(&g_wg_n, 1u);
    if (s_wg_rec >= WG_STAMP_CAP) return;
    unsigned long long *r = g_wg_stamp + (size_t)s_wg_rec * WG_STAMPS;
    r[k] = t;
    if (k == 0) {
        unsigned sm;
        asm("mov.u32 %0, %%smid;" : "=r"(sm));
        r[5] = g, r[8] = (unsigned long long)rows, r[9] = (unsigned long long)cols;
        r[7] = blockIdx.x | (unsigned long long)blockIdx.y << 16 | (unsigned long long)blockIdx.z << 32 |
               (unsigned long long)sm << 40;
    }
    if (k == 4) r[6] = g;
}
#else
__device__ __forceinline__ void wg_stamp(int, int64_t = 0, int64_t = 0) {}
#endif

template <int CH, bool GLU, bool TMA, bool FULL>
__global__ void __launch_bounds__(384, 1)
    wg_gemm_kernel(const __grid_constant__ wg_maps M, mma_parts P, const uint16_t *__restrict__ xb, int64_t rows,
                   int64_t cols, int32_t n, float *__restrict__ part, uint16_t *__restrict__ xo, int mode,
                   float alpha, int act) {
    static_assert(!GLU || CH == CHAINS, "a GLU needs its whole sums");
    constexpr int BN = WG_BN, NF = BN / 2, SQ = WG_SQ; /* accumulators a thread; 16-byte units a stage */
    constexpr bool WHOLE = CH == CHAINS;           /* every chain here: their total (tot), then stored */
    constexpr int S = WHOLE ? WG_S : WG_S_SPLIT;   /* stages */
    extern __shared__ __align__(1024) uint4 gsm[]; /* [S][SQ], then the mbarriers */
    uint64_t *full = (uint64_t *)(gsm + S * SQ), *empty = full + S;
    /* warp through a shuffle: the compiler then knows it is the same in every lane (a role branch it cannot prove
     * uniform makes it serialize the wgmmas) */
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(~0u, tid >> 5, 0), g = lane >> 2, c = lane & 3;
    const int32_t t0 = blockIdx.x * BN;
    const int64_t r0 = (int64_t)blockIdx.y * (GLU ? 64 : 128);
    const int nch = (int)((cols + 31) / 32), c0 = (int)blockIdx.z * CH, cend = c0 + CH;
    const int j0 = 2 * c0 < nch ? 2 * c0 : -1; /* the block's first chunk (none: its chains are empty) */
    wg_stamp(0, rows, cols | (int64_t)GLU << 32);
    if (tid == 0)
        for (int s = 0; s < S; s++) mbar_init(&full[s], TMA ? 1 : 128), mbar_init(&empty[s], 8);
    __syncthreads();
    if (warp >= 8) {
        if constexpr (WHOLE) wg_regs_dec<72>(); /* 128 x 72 + 256 x 216 registers: the 384 x 168 allotted */
        if constexpr (TMA) {
            if (warp == 8 && lane == 0) {
                wg_producer_tma<GLU, S>(M, P, cols, gsm, full, empty, j0, cend);
                if (WHOLE && !GLU && (mode & GP_CU_ACC)) wg_res_prefetch(P, r0, rows, t0, n);
            }
        } else wg_producer<GLU, S>(P, xb, rows, cols, n, gsm, full, empty, j0, cend, warp - 8);
        return;
    }
    if constexpr (WHOLE) wg_regs_inc<216>(); /* the total beside the chain's sums */
    pdl_enter();
    float acc[NF], tot[WHOLE ? NF : 1];
#pragma unroll
    for (int i = 0; i < NF; i++) acc[i] = 0.0f;
    int chain = 0, freed = 0; /* chains done; stages whose buffers were freed */
    auto free_to = [&](int end) { /* frees the buffers of stages [freed, end): their products are done */
        for (; freed < end; freed++) mbar_arrive_lane0(&empty[freed % S], lane);
    };
    auto end_chain = [&]() { /* a finished chain's sums to the total (fold_chain's order) or to part */
        if constexpr (WHOLE) {
#pragma unroll
            for (int i = 0; i < NF; i++) tot[i] = chain ? tot[i] + acc[i] : acc[i], acc[i] = 0.0f;
            chain++;
        } else {
            float *pc = part + (size_t)(c0 + chain++) * n * rows;
            wg_frag<BN>(acc, t0, r0, [&](float &v, int32_t t, int64_t r) {
                if (t < n && r < rows) pc[(size_t)t * rows + r] = v;
                v = 0.0f;
            });
        }
    };
    const int wr = 16 * warp + g; /* this thread's fragment rows wr, wr + 8 of a stage's weights */
    uint4 a[2][WG_U][2];           /* two stages' fragments: one may still be read by the wgmmas in flight */
    int jc = j0;
    auto stage = [&](auto par, int i) {
        constexpr int pr = decltype(par)::value;
        const uint4 *b = gsm + (i % S) * SQ;
        mbar_wait(&full[i % S], (i / S) & 1);
        if (i == 0) wg_stamp(1);
#pragma unroll
        for (int h = 0; h < WG_U; h++) /* all before the first wgmma: one written between two serializes them */
            a[pr][h][0] = b[WG_WQ + wg_unit(wr, 4 * h + c)], a[pr][h][1] = b[WG_WQ + wg_unit(wr + 8, 4 * h + c)];
        bool last = false; /* the stage ends its chain (the producer's stages do) */
        auto next = [&]() { last = chain_next(jc) >= nch, jc = next_chunk(jc, nch, cend); };
        if constexpr (FULL) /* every stage WG_U chunks: no branch between its wgmmas and their commit (see above) */
            for (int h = 0; h < WG_U; h++) next();
        wg_fence();
#pragma unroll
        for (int h = 0; h < WG_U && (FULL || !last); h++) {
#pragma unroll
            for (int p = 0; p < 2; p++) wgmma_n128(acc, a[pr][h][0], a[pr][h][1], p, wg_desc(b + 4 * h + 2 * p));
            if constexpr (!FULL) next();
        }
        wg_commit();
        if (last) {
            wg_wait<0>();
            wg_hold(acc);
            free_to(i + 1);
            end_chain();
        } else {
            wg_wait<1>();
            free_to(i);
        }
    };
    for (int i = 0; jc >= 0;) {
        stage(std::integral_constant<int, 0>(), i++);
        if (jc < 0) break;
        stage(std::integral_constant<int, 1>(), i++);
    }
    wg_wait<0>();
    wg_hold(acc);
    wg_stamp(2);
    while (chain < CH) end_chain(); /* chains with no chunk: zeros (as in decode) */
    if constexpr (WHOLE) {
        const float *es = wg_stage_out(tot, (float *)gsm);
        wg_stamp(3);
        if constexpr (GLU) wg_store_glu(P, es, t0, r0, rows, n, mode, act, xo);
        else wg_store_whole(P, es, t0, r0, rows, n, mode, alpha);
    }
    wg_stamp(4);
}

/* The chains' sums of a split GEMM (part [CHAINS][n][rows], rows % 4 == 0) added in chain order, ((c0 + c1) + c2) +
 * c3 as fold_chain adds them, and stored as mma_gemm_kernel stores its totals: the same bits.  Outputs r .. r + 3 of
 * token t (one vector access where they share a part and no bias). */
__device__ __forceinline__ void fold4(const mma_parts &P, const float *__restrict__ part, int64_t rows, int32_t n,
                                      int32_t t, int64_t r, int mode, float alpha) {
    const size_t total = (size_t)n * (size_t)rows, i = (size_t)t * rows + r;
    float4 v = __ldcg((const float4 *)(part + i));
#pragma unroll
    for (int k = 1; k < CHAINS; k++) {
        const float4 c = __ldcg((const float4 *)(part + k * total + i));
        v.x += c.x, v.y += c.y, v.z += c.z, v.w += c.w;
    }
    int64_t lr;
    const int k = part_row(P, r, &lr);
    const int64_t pr = part_of(P.rows, k);
    float *Y = part_of(P.Y, k) + (size_t)t * pr + lr;
    if (pr % 4 == 0 && lr % 4 == 0 && ((uintptr_t)Y & 15) == 0 && !part_of(P.B, k)) {
        float4 y = mode & GP_CU_ACC ? *(const float4 *)Y : make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* one vector */
        mm_store(&y.x, mm_val(v.x, false, 0.0f, mode, alpha), mode);
        mm_store(&y.y, mm_val(v.y, false, 0.0f, mode, alpha), mode);
        mm_store(&y.z, mm_val(v.z, false, 0.0f, mode, alpha), mode);
        mm_store(&y.w, mm_val(v.w, false, 0.0f, mode, alpha), mode);
        *(float4 *)Y = y;
        return;
    }
    store_out(P, v.x, t, r, mode, alpha), store_out(P, v.y, t, r + 1, mode, alpha);
    store_out(P, v.z, t, r + 2, mode, alpha), store_out(P, v.w, t, r + 3, mode, alpha);
}

/* fold4 over grid (rows / 4 / 256 blocks, n tokens), a thread 4 adjacent outputs. */
__global__ void gemm_fold_kernel(mma_parts P, const float *__restrict__ part, int64_t rows, int32_t n, int mode,
                                 float alpha) {
    pdl_enter();
    const int64_t r = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (r < rows) fold4(P, part, rows, n, blockIdx.y, r, mode, alpha);
}

/* gemm_fold_kernel's outputs of token blockIdx.x (one part, y [n, rows]), then the next GEMM's input copy xb of their
 * RMSNorm by nm (rmsnorm_xb_kernel<true>'s bits): a block of rms_threads(rows) threads a token, the row read back
 * after the barrier. */
__global__ void gemm_fold_norm_kernel(mma_parts P, const float *__restrict__ part, int64_t rows, int32_t n, int mode,
                                      float alpha, uint4 *__restrict__ xb, norm_args nm) {
    pdl_enter();
    extern __shared__ float xs[];
    for (int64_t r = 4 * (int64_t)threadIdx.x; r < rows; r += 4 * (int64_t)blockDim.x)
        fold4(P, part, rows, n, blockIdx.x, r, mode, alpha);
    __syncthreads(); /* the token's outputs are written and visible to the block */
    rmsnorm_row_xb<true>(xb + blockIdx.x * (xb_cols(rows) / 8), P.Y[0] + (size_t)blockIdx.x * rows, xs,
                         (int32_t)rows, nm);
}

/* GP_CU_GEMM_SPLIT=1, 2 or 4 in the environment: the chain groups of every GEMM that may split (1: none, and
 * 64-token tiles however few; tests, measurements); else 0. */
static int gemm_force(void) {
    static const int force = env_int("GP_CU_GEMM_SPLIT", 0);
    return force == 1 || force == 2 || force == 4 ? force : 0;
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (NULL where the driver lacks it). */
typedef CUresult (*tma_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static tma_encode_fn tma_encoder(void) {
    static const tma_encode_fn f = [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
                            cudaSuccess && q == cudaDriverEntryPointSuccess;
        if (!ok) cudaGetLastError();
        return ok ? (tma_encode_fn)p : (tma_encode_fn)NULL;
    }();
    return f;
}

/* m: a bf16 matrix [rows][cols] (row pitch `pitch` bytes) in boxes of 64 columns x box_rows rows, 128-byte
 * swizzled; false where it cannot be encoded. */
static bool tma_map(CUtensorMap *m, const void *base, int64_t cols, int64_t rows, int64_t pitch, uint32_t box_rows) {
    const tma_encode_fn f = tma_encoder();
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)pitch};
    const cuuint32_t box[2] = {64, box_rows}, step[2] = {1, 1};
    return f && f(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dim, stride, box, step,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* A wgmma GEMM's tensor maps (wg_maps) of the parts and the input's copy xb; false (the copies by cp.async then)
 * where a block's weight rows could straddle two parts, the maps cannot be encoded, or GP_CU_TMA=0 is in the
 * environment (measurements). */
static bool wg_tma_maps(wg_maps *M, const mma_parts &p, bool glu, const uint16_t *xb, int64_t cols, int32_t n) {
    static const bool off = env_int("GP_CU_TMA", 1) == 0;
    const int m = glu ? 2 : p.m;
    for (int i = 0; i + 1 < m && !glu; i++)
        if (p.rows[i] % 128) return false;
    bool ok = !off && tma_map(&M->x, xb, xb_cols(cols), n, xb_cols(cols) * 2, WG_BN);
    for (int i = 0; i < m && ok; i++) ok = tma_map(&M->w[i], p.W[i], cols, p.rows[i], cols * 2, glu ? 64 : 128);
    return ok;
}

/* Whether a GEMM runs whole on wgmma (wg_gemm_kernel<CHAINS, ...>) rather than split into chain groups or on
 * mma_gemm_kernel: its blocks of WG_BN tokens fill the multiprocessors once or more (a GLU), 0.9 times or more
 * (another GEMM).  Measured at 512 tokens (BENCHMARKS.md): whole wins for every GLU of the three bench shapes, for
 * the 8B shape's q|k|v, o and down (192 and 128 blocks; 3% of the prefill against their chain groups) and for
 * Qwen3-0.6B's q|k|v (128 blocks, 37 µs against 30 + a 14 µs fold); Llama-3.2-1B's q|k|v (96 blocks: 46 against 32 +
 * 12) and o and down (64) lose whole.  GP_CU_WG_WHOLE=1 or 0 in the environment forces it (tests, measurements). */
static bool wg_whole(bool glu, int32_t n, int64_t row_tiles, int64_t sms) {
    static const int force = env_int("GP_CU_WG_WHOLE", -1);
    if (force == 0 || force == 1) return force == 1;
    const int64_t blocks = (n + WG_BN - 1) / WG_BN * row_tiles;
    return blocks * 10 >= (glu ? 10 : 9) * sms;
}

/* Chain groups for a GEMM of `tiles` 64-token tiles (each block of wg_gemm_kernel runs CHAINS / groups chains; 1: no
 * split, mma_gemm_kernel): none where the tiles give two blocks a multiprocessor, else 4 (measured against 2 and the
 * 32-token tiles: BENCHMARKS.md; Llama-3.2-1B's 8192-column down 2% faster in 4 groups than in 2 once the whole
 * GEMMs took 7 stages). */
static int chain_groups(int64_t tiles, int64_t sms) {
    if (gemm_force()) return gemm_force();
    return tiles >= 2 * sms ? 1 : CHAINS;
}

/* wg_gemm_kernel<CH, GLU> by its copies (TMA or cp.async) and whether every stage is full (cols a multiple of 64;
 * with the TMA copies only: the cp.async path keeps the general stages) */
template <int CH, bool GLU>
static auto wg_kernel(bool tma, bool full) {
    return !tma ? wg_gemm_kernel<CH, GLU, false, false>
                : full ? wg_gemm_kernel<CH, GLU, true, true> : wg_gemm_kernel<CH, GLU, true, false>;
}
/* GP_CU_WG_FULL=0 in the environment: the general stages everywhere (tests, measurements) */
static bool wg_full_off(void) {
    static const bool off = env_int("GP_CU_WG_FULL", 1) == 0;
    return off;
}

/* Bytes of d's scratch for the GEMMs of up to max_tokens tokens and max_cols columns: room for two bf16 copies of an
 * input (a whole GLU's input and the copy of its output it hands over to down), then the chains' sums of a split
 * GEMM (CHAINS floats an output: at most those of a grid under two blocks a multiprocessor, and of 3 max_cols rows,
 * q|k|v's stacked at most; with max_cols alone Qwen3-0.6B's q|k|v, 4096 rows of 3072 at most, could not split). */
extern "C" size_t gp_cu_gemm_scratch_bytes(int64_t max_tokens, int64_t max_cols) {
    const size_t copy = 2 * (((size_t)max_tokens * (size_t)xb_cols(max_cols) * 2 + 255) / 256 * 256);
    const size_t split = (size_t)CHAINS * 4 * 2 * (size_t)gp_cu_sm_count() * GEMM_BM * 128;
    const size_t need = (size_t)CHAINS * 4 * (size_t)max_tokens * 3 * (size_t)max_cols;
    return copy + (need < split ? need : split);
}

/* The GEMM's operand copy xb of x [n, cols] (WG: wgmma's layout), of its RMSNorm by nm when given. */
static void launch_copy(gp_cu *d, uint16_t *xb, const float *x, const gp_cu_norm *nm, int64_t cols, int32_t n,
                        bool wg) {
    if (nm) {
        const norm_args na = norm_args_of(nm, gp_cu_bf16(d));
        const size_t sh = (size_t)cols * 4;
        launch(wg ? rmsnorm_xb_kernel<true> : rmsnorm_xb_kernel<false>, dim3((unsigned)n),
               dim3(rms_threads((int32_t)cols)), sh, d, (uint4 *)xb, x, na, (int32_t)cols);
        return;
    }
    const int64_t units = (int64_t)n * (wg ? xb_cols(cols) : cols) / 8, cvb = (units + 255) / 256;
    const dim3 grid((unsigned)(cvb < 1024 ? cvb : 1024));
    if (wg) launch(to_bf16_wg_kernel, grid, dim3(256), 0, d, (uint4 *)xb, x, cols, units);
    else launch(to_bf16_kernel, grid, dim3(256), 0, d, (uint4 *)xb, (const float4 *)x, units);
}

/* wg_gemm_kernel over the input's copy xb: whole (groups 1; a GLU's output also copied to xo when given) or in chain
 * groups, their sums in part, then gemm_fold_kernel (with xo, gemm_fold_norm_kernel: the copy of the outputs'
 * RMSNorm by next to xo). */
static void launch_wg(gp_cu *d, const mma_parts &p, const uint16_t *xb, float *part, uint16_t *xo,
                      const gp_cu_norm *next, int64_t rows, int64_t cols, int32_t n, int groups, bool glu, int mode,
                      float alpha, int act) {
    const int64_t row_tiles = (rows + (glu ? 63 : 127)) / (glu ? 64 : 128);
    const dim3 grid((unsigned)((n + WG_BN - 1) / WG_BN), (unsigned)row_tiles, (unsigned)groups);
    wg_maps M = {};
    const bool tma = wg_tma_maps(&M, p, glu, xb, cols, n);
    const bool full = cols % (32 * WG_U) == 0 && !wg_full_off();
    if (groups == 1) {
        auto k = glu ? wg_kernel<CHAINS, true>(tma, full) : wg_kernel<CHAINS, false>(tma, full);
        launch(k, grid, dim3(384), WG_SMEM_WHOLE, d, M, p, xb, rows, cols, n, part, xo, mode, alpha, act);
        return;
    }
    auto k = groups == 2 ? wg_kernel<2, false>(tma, full) : wg_kernel<1, false>(tma, full);
    launch(k, grid, dim3(384), WG_SMEM, d, M, p, xb, rows, cols, n, part, (uint16_t *)NULL, mode, alpha, act);
    if (xo)
        launch(gemm_fold_norm_kernel, dim3((unsigned)n), dim3(rms_threads((int32_t)rows)), (size_t)rows * 4, d, p,
               (const float *)part, rows, n, mode, alpha, (uint4 *)xo, norm_args_of(next, gp_cu_bf16(d)));
    else
        launch(gemm_fold_kernel, dim3((unsigned)((rows / 4 + 255) / 256), (unsigned)n), dim3(256), 0, d, p,
               (const float *)part, rows, n, mode, alpha);
}

/* Where in the scratch a GEMM's hand-over goes (its input's copy at [in, at), a split's sums at [at, end)), or
 * SIZE_MAX for none: a whole GLU's output's copy after the input's; a split GEMM of one part with a next norm, the
 * copy of its outputs' RMSNorm where the input's was (used by then) or after the sums. */
static size_t hand_at(const mma_parts &p, const gp_cu_norm *next, bool glu, int groups, int64_t rows, int32_t n,
                      size_t at, size_t end, size_t cap) {
    const size_t out = ((size_t)n * (size_t)xb_cols(rows) * 2 + 255) / 256 * 256;
    if (glu) return rows % 32 == 0 && at + out <= cap ? at : SIZE_MAX;
    if (!next || groups == 1 || p.m != 1 || !gp_cu_norm_fits(next, rows, rms_threads((int32_t)rows))) return SIZE_MAX;
    return out <= at ? 0 : end + out <= cap ? end : SIZE_MAX;
}

/* The pipelined GEMM of the parts (bf16 weights of x's column count, rows stacked; with act >= 0 the gate and the up
 * of a GLU, y = act(gate) * up) of x or its RMSNorm by nm, when d's scratch holds the input's bf16 copy and nm fits a
 * block's shared memory (and its weight is dense); else 0 (nothing launched).  The input's copy is the kernel
 * before's hand-over where it left one (gp_cu_hand_set: a whole GLU leaves its output's, which down takes; a split
 * GEMM given the next projection's norm (next) leaves the copy of its outputs' RMSNorm, made in its fold). */
static int launch_gemm(gp_cu *d, const mma_parts &p, const float *x, const gp_cu_norm *nm, int64_t cols, int32_t n,
                       int mode, float alpha, int act = -1, const gp_cu_norm *next = NULL) {
    size_t cap = 0, off = 0;
    uint16_t *xb = (uint16_t *)gp_cu_scratch(d, &cap);
    const bool handed = gp_cu_hand_take(d, x, cols, n, nm, &off);
    const bool glu = act >= 0;
    int64_t rows = 0;
    for (int i = 0; i < (glu ? 1 : p.m); i++) rows += p.rows[i];
    const int64_t tile_rows = glu ? 64 : 128, row_tiles = (rows + tile_rows - 1) / tile_rows;
    const size_t copy = ((size_t)n * (size_t)xb_cols(cols) * 2 + 255) / 256 * 256; /* either copy fits this */
    if (!xb || copy > cap || row_tiles > 65535) return 0;
    if (nm && !gp_cu_norm_fits(nm, cols, rms_threads((int32_t)cols))) return 0;
    /* whole on wgmma where its blocks fill the GPU (wg_whole); else a grid of fewer 64-token tiles than two a
     * multiprocessor: chain groups (chain_groups; wg_gemm_kernel, then gemm_fold_kernel) or tiles of half as many
     * tokens (a GLU, no room, or no split chosen) */
    static const int64_t sms = gp_cu_sm_count();
    const int64_t tiles = (n + GEMM_BM - 1) / GEMM_BM * row_tiles;
    const size_t sums = (size_t)CHAINS * 4 * n * rows; /* a split's part */
    const bool can = !glu && rows % 4 == 0 && n <= 65535 && copy + sums <= cap;
    const bool whole = wg_whole(glu, n, row_tiles, sms);
    const int groups = can && (!whole || gemm_force()) ? chain_groups(tiles, sms) : 1;
    if (groups > 1 || whole) {
        const bool take = handed && off + copy + (groups > 1 ? sums : 0) <= cap;
        if (!take) {
            launch_copy(d, xb, x, nm, cols, n, true);
            off = 0;
        }
        const size_t at = off + copy, ho = hand_at(p, next, glu, groups, rows, n, at, at + sums, cap);
        uint16_t *xo = ho == SIZE_MAX ? NULL : (uint16_t *)((char *)xb + ho);
        launch_wg(d, p, (uint16_t *)((char *)xb + off), (float *)((char *)xb + at), xo, next, rows, cols, n, groups,
                  glu, mode, alpha, act);
        if (xo) gp_cu_hand_set(d, p.Y[0], rows, n, glu ? NULL : next, ho);
        return 1;
    }
    launch_copy(d, xb, x, nm, cols, n, false);
    const int bm = tiles < 2 * sms && gemm_force() != 1 ? GEMM_BM / 2 : GEMM_BM;
    const dim3 grid((unsigned)((n + bm - 1) / bm), (unsigned)row_tiles);
    if (bm == GEMM_BM)
        launch(glu ? mma_gemm_kernel<GEMM_BM, true> : mma_gemm_kernel<GEMM_BM, false>, grid, dim3(256),
               GEMM_SMEM(GEMM_BM), d, p, xb, rows, cols, n, mode, alpha, act);
    else
        launch(glu ? mma_gemm_kernel<GEMM_BM / 2, true> : mma_gemm_kernel<GEMM_BM / 2, false>, grid, dim3(256),
               GEMM_SMEM(GEMM_BM / 2), d, p, xb, rows, cols, n, mode, alpha, act);
    return 1;
}

/* Largest input a decode kernel stages (stage_x: 2 bytes a column); wider ones are read from global memory. */
#define STAGE_X_MAX (96 * 1024)

extern "C" int gp_cu_mma_prepare(void) {
    const struct { const void *k; size_t smem; } gemms[] = {
        {(const void *)mma_gemm_kernel<GEMM_BM, false>, GEMM_SMEM(GEMM_BM)},
        {(const void *)mma_gemm_kernel<GEMM_BM, true>, GEMM_SMEM(GEMM_BM)},
        {(const void *)mma_gemm_kernel<GEMM_BM / 2, false>, GEMM_SMEM(GEMM_BM / 2)},
        {(const void *)mma_gemm_kernel<GEMM_BM / 2, true>, GEMM_SMEM(GEMM_BM / 2)}};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(gemms[i].k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemms[i].smem);
    for (int v = 0; v < 3 && e == cudaSuccess; v++) { /* cp.async; TMA; TMA with full stages */
        const void *split[] = {(const void *)wg_kernel<2, false>(v > 0, v > 1),
                               (const void *)wg_kernel<1, false>(v > 0, v > 1)};
        const void *whole[] = {(const void *)wg_kernel<CHAINS, false>(v > 0, v > 1),
                               (const void *)wg_kernel<CHAINS, true>(v > 0, v > 1)};
        for (int i = 0; i < 2 && e == cudaSuccess; i++)
            e = cudaFuncSetAttribute(split[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM);
        for (int i = 0; i < 2 && e == cudaSuccess; i++)
            e = cudaFuncSetAttribute(whole[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WG_SMEM_WHOLE);
    }
    const void *ks[] = {(const void *)mma_decode_kernel<GP_CU_F32, true>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true>,
                        (const void *)mma_decode_kernel<GP_CU_F32, true, true>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true, true>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true, true>,
                        (const void *)mma_decode_kernel<GP_CU_F32, true, false, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true, false, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true, false, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_F32, true, true, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true, true, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true, true, DEC_DEEP>,
                        (const void *)mma_decode_kernel<GP_CU_F32, true, false, DEC_UNR, STAGE_LIGHT>,
                        (const void *)mma_decode_kernel<GP_CU_BF16, true, false, DEC_UNR, STAGE_LIGHT>,
                        (const void *)mma_decode_kernel<GP_CU_F16, true, false, DEC_UNR, STAGE_LIGHT>,
                        (const void *)mma_decode_loop_kernel<GP_CU_F32>,
                        (const void *)mma_decode_loop_kernel<GP_CU_BF16>,
                        (const void *)mma_decode_loop_kernel<GP_CU_F16>};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, STAGE_X_MAX);
    return (int)e;
}

/* The blocks of kernel k (threads and smem bytes each) resident at once on the GPU; 0 where the occupancy API fails
 * (mma_decode_loop_kernel's grid, decode_depth's test). */
static int64_t resident(gp_cu *d, const void *k, int threads, size_t smem) {
    static const int64_t sms = gp_cu_sm_count();
    return gp_cu_occupancy(d, k, threads, smem) * sms;
}

/* mma_decode_loop_kernel's grid for `blocks` blocks of kernel k: as many as fit at once where fewer than blocks, else
 * 0 (launch them all); GP_CU_DEC_LOOP=0 in the environment: always 0; GP_CU_DEC_LOOP_CAP=N: at most N blocks (the
 * tests of small shapes). */
static int64_t loop_grid(gp_cu *d, const void *k, int threads, size_t smem, int64_t blocks) {
    static const int loop = env_int("GP_CU_DEC_LOOP", 1);
    static const int64_t force = env_int("GP_CU_DEC_LOOP_CAP", 0);
    const int64_t cap = !loop ? 0 : force > 0 ? force : resident(d, k, threads, smem);
    return cap > 0 && blocks > cap ? cap : 0;
}

/* Whether the one-token kernel `deep` (UNR = DEC_DEEP) fits: a chain of cols is longer than two DEC_UNR buffers, and
 * the grid's blocks (threads and smem bytes each) are resident at once, so the loads issued before the wait request
 * every chain's first 2 DEC_DEEP chunks (measured on the H100: Llama-3.2-1B's 2048- and 8192-wide projections 4-7%
 * faster decode; no gain at 1024 columns, and a loss on the lm_head's waves: BENCHMARKS.md). */
static bool decode_depth(gp_cu *d, const void *deep, int threads, size_t smem, int64_t cols, int64_t blocks) {
    if (cols <= 2 * DEC_UNR * 32 * CHAINS) return false;
    const int64_t cap = resident(d, deep, threads, smem);
    return cap > 0 && blocks <= cap;
}

/* One token through the staged decode kernel (NORM: its RMSNorm by nm), blocks of `threads`, as deep as decode_depth
 * allows.  Without a norm, rows of at most LOOP_COLS columns in more groups than the GPU holds blocks at once run on
 * that many looping blocks (mma_decode_loop_kernel, loop_grid).  Measured on an H200 (BENCHMARKS.md): Qwen3-0.6B's
 * lm_head (151,936 x 1,024) 98.4 -> 86.4 us alone; Llama-3.2-1B's (2,048 columns: a block's chains twice as long)
 * 133.7 -> 134.7.  (The float32 mode's one-token rows looping alike were no faster: 1,024 columns within the noise,
 * 2,048 1-2% slower.)  Other rows of up to LIGHT_COLS columns (not deep, no norm) stage lightly
 * (STAGE_LIGHT: 64 registers, 8 blocks a multiprocessor: Llama-3.2-1B's lm_head 135.3 -> 120.7 us alone on an H200;
 * the looping kernel's 5 blocks, Qwen3-0.6B's 85.9 -> 77.2); wider rows keep 8 vectors a thread (the 8B shape's
 * 4,096- and 14,336-column rows staged 2 at a time decoded 13% slower). */
#define LOOP_COLS 1024
static_assert(LOOP_COLS <= LIGHT_COLS, "the looping kernel stages its rows in one round of loads");
template <int DT, bool NORM>
static void launch_staged(gp_cu *d, const mma_parts &p, dim3 grid, int threads, const float *x, int64_t cols, int mode,
                          float alpha, const norm_args &nm) {
    const size_t xs = (size_t)cols * 2;
    if (!NORM && cols <= LOOP_COLS) {
        const int64_t lg = loop_grid(d, (const void *)mma_decode_loop_kernel<DT>, threads, xs, grid.x);
        if (lg) {
            launch(mma_decode_loop_kernel<DT>, dim3((unsigned)lg), dim3(threads), xs, d, p, x, cols, mode, alpha);
            return;
        }
    }
    if (decode_depth(d, (const void *)mma_decode_kernel<DT, true, NORM, DEC_DEEP>, threads, xs, cols, grid.x))
        launch(mma_decode_kernel<DT, true, NORM, DEC_DEEP>, grid, dim3(threads), xs, d, p, x, cols, 1, mode, alpha, nm);
    else if (!NORM && cols <= LIGHT_COLS)
        launch(mma_decode_kernel<DT, true, false, DEC_UNR, STAGE_LIGHT>, grid, dim3(threads), xs, d, p, x, cols, 1,
               mode, alpha, nm);
    else launch(mma_decode_kernel<DT, true, NORM>, grid, dim3(threads), xs, d, p, x, cols, 1, mode, alpha, nm);
}

/* The decode kernel for n tokens of cols columns: one token whose bf16 copy fits STAGE_X_MAX is staged. */
template <int DT>
static void launch_decode(gp_cu *d, const mma_parts &p, dim3 grid, const float *x, int64_t cols, int32_t n, int mode,
                          float alpha) {
    const norm_args none = {};
    if (n == 1 && (size_t)cols * 2 <= STAGE_X_MAX)
        launch_staged<DT, false>(d, p, grid, 32 * CHAINS, x, cols, mode, alpha, none);
    else launch(mma_decode_kernel<DT, false>, grid, dim3(32 * CHAINS), 0, d, p, x, cols, n, mode, alpha, none);
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
    return w->dtype != GP_CU_QAFFINE && w->cols % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
           ((uintptr_t)w->data & 15) == 0 && (w->cols * es) % 16 == 0;
}

extern "C" int gp_cu_matmul_mma(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const void *b, int bdt,
                                int32_t n, int mode, float alpha) {
    if (n > 16 && w->dtype == GP_CU_BF16) {
        if (launch_gemm(d, one_part(y, w, b, bdt), x, NULL, w->cols, n, mode, alpha)) return (int)cudaGetLastError();
    }
    by_dtype(w->dtype, [&](auto dt) { launch_mma<dt>(d, y, x, w, b, bdt, n, mode, alpha); });
    return (int)cudaGetLastError();
}

/* One token through m <= 3 weights of one dtype and column count (q|k|v): one launch, each part the bits of
 * gp_cu_matmul_mma. */
extern "C" int gp_cu_matmul_mma_multi(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                                      const gp_cu_wt *ws, const gp_cu_wt *bs, int mode) {
    if (m < 1 || m > 3) return (int)cudaErrorNotSupported;
    const int threads = nm ? rms_threads((int32_t)ws[0].cols) : 32 * CHAINS; /* (NORM: a group or two a block) */
    if (nm && (threads < 32 * CHAINS || !gp_cu_norm_fits(nm, ws[0].cols, threads) || ws[0].cols * 2 > STAGE_X_MAX))
        return (int)cudaErrorNotSupported;
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
    if (nm) { /* x's RMSNorm inside: the bits of gp_cu_rmsnorm, then the kernel below */
        const norm_args na = norm_args_of(nm, gp_cu_bf16(d));
        const int gr = threads / (32 * CHAINS);
        const dim3 grid((unsigned)((groups + gr - 1) / gr));
        by_dtype(ws[0].dtype,
                 [&](auto dt) { launch_staged<dt, true>(d, p, grid, threads, x, ws[0].cols, mode, 1.0f, na); });
        return (int)cudaGetLastError();
    }
    by_dtype(ws[0].dtype,
             [&](auto dt) { launch_decode<dt>(d, p, dim3((unsigned)groups), x, ws[0].cols, 1, mode, 1.0f); });
    return (int)cudaGetLastError();
}

/* A chunk (n > 16 tokens) through m <= 3 bf16 weights of one column count (q|k|v): one bf16 copy of x (or of its
 * RMSNorm by nm), one GEMM launch over the stacked rows, each part the bits of [gp_cu_rmsnorm, then]
 * gp_cu_matmul_mma.  cudaErrorNotSupported (nothing enqueued) when they do not qualify. */
extern "C" int gp_cu_matmul_mma_parts(gp_cu *d, int32_t m, float *const *ys, const float *x, const gp_cu_norm *nm,
                                      const gp_cu_wt *ws, const gp_cu_wt *bs, int32_t n, int mode) {
    if (m < 1 || m > 3 || n <= 16) return (int)cudaErrorNotSupported;
    mma_parts p = {};
    for (int32_t i = 0; i < m; i++) {
        if (ws[i].dtype != GP_CU_BF16 || ws[i].cols != ws[0].cols || !gp_cu_mma_ok(&ws[i], x))
            return (int)cudaErrorNotSupported;
        p.W[i] = ws[i].data, p.B[i] = bs[i].data, p.Y[i] = ys[i], p.rows[i] = ws[i].rows;
        p.bdt[i] = bs[i].data ? bs[i].dtype : 0;
    }
    p.m = m;
    if (!launch_gemm(d, p, x, nm, ws[0].cols, n, mode, 1.0f)) return (int)cudaErrorNotSupported;
    return (int)cudaGetLastError();
}

/* A chunk (n > 16 tokens, bf16 weights): y [n, rows] = act(h G^T + bg) * (h U^T + bu), h = x or its RMSNorm by nm,
 * in one pipelined GEMM whose tiles pair 64 gate rows with the same 64 up rows (the bits of gp_cu_matmul_mma_parts,
 * then gp_cu_glu). */
extern "C" int gp_cu_matmul_mma_glu_chunk(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm,
                                          const gp_cu_wt *g, const gp_cu_wt *bg, const gp_cu_wt *u, const gp_cu_wt *bu,
                                          int32_t n, int32_t act, int mode) {
    const bool biased = bg->data != NULL;
    if (n <= 16 || g->dtype != GP_CU_BF16 || u->dtype != GP_CU_BF16 || g->rows != u->rows || g->cols != u->cols ||
        !gp_cu_mma_ok(g, x) || !gp_cu_mma_ok(u, x) || biased != (bu->data != NULL) ||
        (biased && bg->dtype != bu->dtype))
        return (int)cudaErrorNotSupported;
    if (g->rows <= 0) return 0;
    mma_parts p = {};
    p.W[0] = g->data, p.W[1] = u->data, p.B[0] = bg->data, p.B[1] = bu->data, p.Y[0] = y;
    p.rows[0] = p.rows[1] = g->rows, p.bdt[0] = p.bdt[1] = biased ? bg->dtype : 0, p.m = 2;
    if (!launch_gemm(d, p, x, nm, g->cols, n, mode, 1.0f, act)) return (int)cudaErrorNotSupported;
    return (int)cudaGetLastError();
}

/* A chunk (n > 16 tokens, a bf16 weight): y [n, w.rows] += x W^T (+ b) under mode (GP_CU_ACC: gp_cu_matmul_mma's
 * bits), leaving the next GEMM the copy of next's RMSNorm of y where its fold can make it (gp_cu_hand_set);
 * cudaErrorNotSupported (nothing enqueued) when it does not qualify. */
extern "C" int gp_cu_matmul_mma_add_chunk(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, const gp_cu_wt *b,
                                          int32_t n, int mode, const gp_cu_norm *next) {
    if (n <= 16 || w->dtype != GP_CU_BF16 || !gp_cu_mma_ok(w, x) || !(mode & GP_CU_ACC))
        return (int)cudaErrorNotSupported;
    const mma_parts p = one_part(y, w, b->data, b->data ? b->dtype : 0);
    if (!launch_gemm(d, p, x, NULL, w->cols, n, mode, 1.0f, -1, next)) return (int)cudaErrorNotSupported;
    return (int)cudaGetLastError();
}

/* gp_cu_matmul_mma_glu's looping form (mma_decode_glu_loop_kernel) where the norm is fused, the columns are a
 * multiple of 2 DEC_UNR 32 CHAINS and the groups of 8 rows outnumber the blocks that fit at once (loop_grid;
 * GP_CU_GLU_LOOP=0: never): as many blocks as fit, claiming their groups (GP_CU_GLU_DYN=0: fixed groups, ceil(groups /
 * blocks) a block, spread evenly).  Returns whether it launched. */
template <int DT>
static bool launch_glu_loop(gp_cu *d, float *y, const float *x, const gp_cu_norm *nm, const norm_args &na,
                            const gp_cu_wt *g, const gp_cu_wt *u, const void *bg, const void *bu, int bdt, int act,
                            int mode) {
    static const int on = env_int("GP_CU_GLU_LOOP", 1);
    const size_t xs = (size_t)g->cols * 2;
    const int64_t groups = (g->rows + 7) / 8;
    const bool fits = on && nm && g->cols % (64 * CHAINS * DEC_UNR) == 0;
    const int64_t lg = fits ? loop_grid(d, (const void *)mma_decode_glu_loop_kernel<DT>, 64 * CHAINS, xs, groups) : 0;
    if (!lg) return false;
    static const int dyn = env_int("GP_CU_GLU_DYN", 1);
    const int64_t per = (groups + lg - 1) / lg, grid = dyn ? lg : (groups + per - 1) / per;
    launch(mma_decode_glu_loop_kernel<DT>, dim3((unsigned)grid), dim3(64 * CHAINS), xs, d, y, x, na, g->data, u->data,
           g->rows, g->cols, bg, bu, bdt, act, mode, dyn ? gp_cu_counters(d) : (unsigned *)NULL);
    return true;
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
    const norm_args na = norm_args_of(nm, gp_cu_bf16(d));
    by_dtype(g->dtype, [&](auto dt) {
        if (launch_glu_loop<dt>(d, y, x, nm, na, g, u, bg->data, bu->data, bdt, act, mode)) return;
        if (nm && g->cols <= NORM_REGS * 64 * CHAINS)
            launch(mma_decode_glu_kernel<dt, true, true>, grid, blk, (size_t)g->cols * 2, d, y, x, na, g->data,
                   u->data, g->rows, g->cols, bg->data, bu->data, bdt, act, mode);
        else if (nm) launch(mma_decode_glu_kernel<dt, true>, grid, blk, (size_t)g->cols * 4, d, y, x, na, g->data,
                            u->data, g->rows, g->cols, bg->data, bu->data, bdt, act, mode);
        else launch(mma_decode_glu_kernel<dt, false>, grid, blk, 0, d, y, x, na, g->data, u->data, g->rows, g->cols,
                    bg->data, bu->data, bdt, act, mode);
    });
    return (int)cudaGetLastError();
}
