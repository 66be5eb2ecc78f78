/* cuda_ops.cu — the element-wise, normalization, embedding, rope and KV-store ops of the CUDA backend (cuda_ops.h;
 * attention is cuda_attn.cu).  Reductions (RMSNorm's sum of squares, the KV quantizer's min/max) run in one fixed
 * order per output: per-thread strided partials, the warp's xor butterfly, then the warps in index order. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>


static inline int grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    return (int)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

/* ---- RMSNorm: block per row ---- */
__global__ void rmsnorm_kernel(float *y, const float *x, const void *w, int dt, int32_t dim, float eps, int plus_one,
                               int bf) {
    pdl_enter();
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    rms_apply(yr, xr, rms_inv(xr, dim, eps, sh, bf), w, dt, dim, plus_one, bf);
}

extern "C" int gp_cu_rmsnorm(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, int32_t n, int32_t dim, float eps,
                             int plus_one) {
    if (n <= 0) return 0;
    launch(rmsnorm_kernel, n, rms_threads(dim), 0, d, y, x, w->data, w->dtype, dim, eps, plus_one,
           gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- rope: block per token, warp per head ---- */
/* head h of token t: q [n, nh, hd]'s heads, then k [n, nkv, hd]'s */
__device__ __forceinline__ float *qk_head(float *q, float *k, int32_t t, int32_t nh, int32_t nkv, int32_t hd,
                                          int32_t h) {
    return h < nh ? q + ((size_t)t * nh + h) * hd : k + ((size_t)t * nkv + (h - nh)) * hd;
}
/* rope_qk_kernel with its heads in registers, ROPE_HB a warp at a time, one read and one write of each: the angles'
 * cos and sin and the head norms' weights (widened to float32: the same values) go to shared memory before the wait
 * for the previous kernel (nothing writes them), the heads' reads are issued before the block synchronizes
 * (rope_head_warp's reads and writes in place, and a read of the norm's weights after each head's sum, each a
 * memory latency: BENCHMARKS.md) */
#define ROPE_HB 8
template <int J>
__device__ __forceinline__ void rope_qk_regs(float *q, float *k, int32_t nh, int32_t nkv, int32_t hd, float2 *cs,
                                             float p, const float *inv_freq, const gp_cu_wt &qn, const gp_cu_wt &kn,
                                             float eps, int plus_one, int bf, float *kf, float *vf, const float *v,
                                             int32_t r0, int kb) {
    float *gw = (float *)(cs + hd / 2); /* [2][hd]: q's norm weights, k's */
    rope_angles(cs, hd / 2, p, inv_freq, bf);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        gw[i] = qn.data ? wt_at(qn.data, qn.dtype, i) : 0.0f;
        gw[hd + i] = kn.data ? wt_at(kn.data, kn.dtype, i) : 0.0f;
    }
    gp_cu_wt gq = qn, gk = kn;
    gq.data = qn.data ? gw : NULL, gk.data = kn.data ? gw + hd : NULL, gq.dtype = gk.dtype = GP_CU_F32;
    pdl_enter();
    const int32_t t = blockIdx.x, lane = threadIdx.x & 31, nw = blockDim.x >> 5, w = threadIdx.x >> 5, H = nh + nkv;
    const size_t kvd = (size_t)nkv * hd;
    auto head = [&](int32_t h) { return qk_head(q, k, t, nh, nkv, hd, h); };
    float r[ROPE_HB][J];
    auto load = [&](int32_t base) {
#pragma unroll
        for (int b = 0; b < ROPE_HB; b++) {
            const int32_t h = base + w + nw * b;
            if (h < H)
#pragma unroll
                for (int j = 0; j < J; j++) r[b][j] = head(h)[lane + 32 * j];
        }
    };
    load(0);
    __syncthreads();
    for (int32_t base = 0; base < H; base += nw * ROPE_HB) {
        if (base) load(base);
#pragma unroll
        for (int b = 0; b < ROPE_HB; b++) {
            const int32_t h = base + w + nw * b;
            if (h >= H) continue;
            rope_head_regs<J>(r[b], h < nh ? gq : gk, eps, plus_one, bf, cs);
            float *x = head(h);
#pragma unroll
            for (int j = 0; j < J; j++) x[lane + 32 * j] = r[b][j];
            if (!kf || h < nh) continue;
            const size_t o = (size_t)(r0 + t) * kvd + (size_t)(h - nh) * hd + lane;
            const size_t src = (size_t)t * kvd + (size_t)(h - nh) * hd + lane;
#pragma unroll
            for (int j = 0; j < J; j++)
                kv_put(kf, kb, o + 32 * j, r[b][j]), kv_put(vf, kb, o + 32 * j, v[src + 32 * j]);
        }
    }
}

/* Block per token t of q [n, nh, hd] and k [n, nkv, hd]: the angles' cos and sin once into shared memory, then warp w
 * takes heads w, w + warps, ... (q's, then k's) as rope_head_warp does (RMS-normalized by the head's norm weight when
 * given, with rmsnorm_kernel's bits; rotated at position pos0 + t); with kf, a k head and its v head also go to row
 * r0 + t of the cache's rows (kb: bfloat16 rows, kv_put).  J > 0 (hd = 32 J): rope_qk_regs. */
template <int J>
__device__ __forceinline__ void rope_qk_block(float *q, float *k, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                                              const float *inv_freq, const gp_cu_wt &qn, const gp_cu_wt &kn, float eps,
                                              int plus_one, int bf, float *kf, float *vf, const float *v, int32_t r0,
                                              int kb) {
    extern __shared__ float2 cs[]; /* [hd / 2] (J > 0: then the norms' weights, rope_qk_regs) */
    const int32_t t = blockIdx.x, half = hd / 2, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const float p = (float)(pos0 + t);
    if constexpr (J > 0) {
        rope_qk_regs<J>(q, k, nh, nkv, hd, cs, p, inv_freq, qn, kn, eps, plus_one, bf, kf, vf, v, r0, kb);
        return;
    }
    pdl_enter();
    rope_angles(cs, half, p, inv_freq, bf);
    __syncthreads();
    const size_t kvd = (size_t)nkv * hd;
    for (int32_t h = threadIdx.x >> 5; h < nh + nkv; h += nw) {
        float *x = qk_head(q, k, t, nh, nkv, hd, h);
        rope_head_warp(x, hd, h < nh ? qn : kn, eps, plus_one, bf, cs);
        if (!kf || h < nh) continue;
        const size_t o = (size_t)(r0 + t) * kvd + (size_t)(h - nh) * hd, src = (size_t)t * kvd + (size_t)(h - nh) * hd;
        for (int i = lane; i < hd; i += 32) kv_put(kf, kb, o + i, x[i]), kv_put(vf, kb, o + i, v[src + i]);
    }
}

template <int J>
__global__ void rope_qk_kernel(float *q, float *k, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                               const float *inv_freq, gp_cu_wt qn, gp_cu_wt kn, float eps, int plus_one, int bf,
                               float *kf, float *vf, const float *v, int32_t r0, int kb) {
    rope_qk_block<J>(q, k, nh, nkv, hd, pos0, inv_freq, qn, kn, eps, plus_one, bf, kf, vf, v, r0, kb);
}
/* rope_qk_kernel<4> (heads of 128) held to 4 blocks a multiprocessor: 64 registers, no spill (69 left to itself, 3
 * blocks), so a 512-token chunk's blocks run in one wave (Qwen3-0.6B's pp512 +1.4-3.6% on an H200: BENCHMARKS.md) */
__global__ void __launch_bounds__(256, 4)
    rope_qk128_kernel(float *q, float *k, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0, const float *inv_freq,
                      gp_cu_wt qn, gp_cu_wt kn, float eps, int plus_one, int bf, float *kf, float *vf, const float *v,
                      int32_t r0, int kb) {
    rope_qk_block<4>(q, k, nh, nkv, hd, pos0, inv_freq, qn, kn, eps, plus_one, bf, kf, vf, v, r0, kb);
}

/* rope_qk_kernel<J> for a head of hd elements: in registers where hd is 64, 128 (rope_qk128_kernel), 192 or 256,
 * else in place; 256 threads a token */
static void launch_rope_qk(gp_cu *d, int32_t n, int32_t hd, float *q, float *k, int32_t nh, int32_t nkv, int32_t pos0,
                           const float *inv_freq, const gp_cu_wt &gq, const gp_cu_wt &gk, float eps, int plus_one,
                           float *kf, float *vf, const float *v, int32_t r0, int kb) {
    const int J = hd % 64 == 0 && hd <= 256 ? hd / 32 : 0, bf = gp_cu_bf16(d);
    const size_t sh = (size_t)(hd / 2) * sizeof(float2) + (J ? (size_t)2 * hd * sizeof(float) : 0);
    auto kern = J == 2 ? rope_qk_kernel<2> : J == 4 ? rope_qk128_kernel : J == 6 ? rope_qk_kernel<6>
              : J == 8 ? rope_qk_kernel<8> : rope_qk_kernel<0>;
    launch(kern, n, 256, sh, d, q, k, nh, nkv, hd, pos0, inv_freq, gq, gk, eps, plus_one, bf, kf, vf, v, r0, kb);
}

extern "C" int gp_cu_rope_qk(gp_cu *d, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd,
                             int32_t pos0, const float *inv_freq, const gp_cu_wt *qn, const gp_cu_wt *kn, float eps,
                             int plus_one, float *kf, float *vf, const float *v, int32_t r0, int kb) {
    if (n <= 0 || nh + nkv <= 0 || hd < 2) return 0;
    const gp_cu_wt none = {};
    const gp_cu_wt gq = qn && qn->data ? *qn : none, gk = kn && kn->data ? *kn : none;
    launch_rope_qk(d, n, hd, q, k, nh, nkv, pos0, inv_freq, gq, gk, eps, plus_one, kf, vf, v, r0, kb);
    return (int)cudaGetLastError();
}

/* ---- embedding ---- */
/* bf16 mode as the CPU op: the row and the scale (Gemma's normalizer, a bf16 tensor) as bf16, the product rounded.
 * (Each thread's loads batched before its stores: the embedding 0.9-2.4 us shorter on an H200, the q|k|v launch after
 * it, whose weights stream from the step's start either way, 1.1-1.4 us longer; decode level: BENCHMARKS.md.) */
__global__ void embed_kernel(float *y, const int32_t *ids, gp_cu_wt table, float scale, int bf) {
    pdl_enter();
    const int64_t row = ids[blockIdx.x], cols = table.cols;
    float *yr = y + (size_t)blockIdx.x * cols;
    if (bf) scale = bf16r(scale);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = table.dtype == GP_CU_QAFFINE ? qa_at(table, row, i) : wt_at(table.data, table.dtype, row * cols + i);
        if (bf) v = bf16r(v);
        v = scale != 1.0f ? v * scale : v;
        yr[i] = bf ? bf16r(v) : v;
    }
}

extern "C" int gp_cu_embed(gp_cu *d, float *y, const int32_t *ids, int32_t n, const gp_cu_wt *table, float scale) {
    if (n <= 0) return 0;
    launch(embed_kernel, n, 256, 0, d, y, ids, *table, scale, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- element-wise ---- */
__global__ void glu_kernel(float *g, const float *u, int64_t n, int act, int bf) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] = glu_val(g[i], u[i], act, bf);
}

extern "C" int gp_cu_glu(gp_cu *d, float *gate, const float *up, int64_t n, int32_t act) {
    if (n <= 0) return 0;
    launch(glu_kernel, grid_for(n, 256), 256, 0, d, gate, up, n, act, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

__global__ void add_kernel(float *y, const float *x, int64_t n, int bf) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bf ? bf16r(y[i] + x[i]) : y[i] + x[i];
}

extern "C" int gp_cu_add(gp_cu *d, float *y, const float *x, int64_t n) {
    if (n <= 0) return 0;
    launch(add_kernel, grid_for(n, 256), 256, 0, d, y, x, n, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

__global__ void add_rows_kernel(float *y, const float *v, float alpha, int32_t dim, int64_t total) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += alpha * v[i % dim];
}

extern "C" int gp_cu_add_rows(gp_cu *d, float *y, const float *v, float alpha, int32_t n, int32_t dim) {
    const int64_t total = (int64_t)n * dim;
    if (total <= 0) return 0;
    launch(add_rows_kernel, grid_for(total, 256), 256, 0, d, y, v, alpha, dim, total);
    return (int)cudaGetLastError();
}

__global__ void softcap_kernel(float *x, int64_t n, float cap, int bf) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = bf ? bf16r(bf16r(tanhf(bf16r(x[i] / cap))) * cap) : tanhf(x[i] / cap) * cap;
}

extern "C" int gp_cu_softcap(gp_cu *d, float *x, int64_t n, float cap) {
    if (n <= 0) return 0;
    launch(softcap_kernel, grid_for(n, 256), 256, 0, d, x, n, cap, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- KV cache ---- */

/* Warp per (row t, group g, storage: blockIdx.y 0 = keys, 1 = values): the group's min and max by the warp's
 * butterfly, scale = (max - min) / (2^bits - 1), q = rint((x - min) / scale) clamped (the CPU quantizer's float
 * expressions), 4-bit values packed two per byte (low nibble first). */
__global__ void kv_quant_kernel(gp_cu_kv_rows dk, gp_cu_kv_rows dv, int32_t r0, const float *k, const float *v) {
    pdl_enter();
    const gp_cu_kv_rows &s = blockIdx.y ? dv : dk;
    const int32_t ng = dk.n_groups > dv.n_groups ? dk.n_groups : dv.n_groups; /* the grid's groups per row */
    if ((int32_t)(blockIdx.x % ng) >= s.n_groups) return;
    const float *x = (blockIdx.y ? v : k) + (size_t)(blockIdx.x / ng) * s.kvd;
    const int64_t r = r0 + blockIdx.x / ng;
    const int32_t g = blockIdx.x % ng, a = g * s.group, b = a + s.group < s.kvd ? a + s.group : s.kvd;
    const int lane = threadIdx.x, qmax = (1 << s.bits) - 1;
    float lo = x[a], hi = x[a];
    for (int32_t i = a + lane; i < b; i += 32) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    const float sc = __fdiv_rn(hi - lo, (float)qmax);
    if (lane == 0) {
        s.scale[r * s.n_groups + g] = sc;
        s.minv[r * s.n_groups + g] = lo;
    }
    uint8_t *q = s.q + r * s.row_bytes;
    for (int32_t i = a + lane; i - lane < b; i += 32) { /* every lane runs each step (the pair shuffle) */
        int32_t val = 0;
        if (i < b && sc > 0) val = (int32_t)rintf(__fdiv_rn(x[i] - lo, sc));
        val = val < 0 ? 0 : val > qmax ? qmax : val;
        const int32_t hi_val = __shfl_down_sync(0xffffffffu, val, 1); /* the odd neighbour of an even lane */
        if (i >= b) continue;
        if (s.bits == 8) q[i] = (uint8_t)val;
        else if (!(i & 1)) q[i / 2] = (uint8_t)(val | (i + 1 < b ? hi_val << 4 : 0));
    }
}

/* y[i] = x[i] for the float rows of keys and values (blockIdx.y 0 / 1), grid-stride. */
__global__ void kv_copy_f_kernel(float *dk, float *dv, const float *sk, const float *sv, int64_t n) {
    pdl_enter();
    float *y = blockIdx.y ? dv : dk;
    const float *x = blockIdx.y ? sv : sk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}

/* y[i] = x[i] rounded to bfloat16 for the keys and values (blockIdx.y 0 / 1): bfloat16 rows, grid-stride. */
__global__ void kv_bf16_kernel(float *dk, float *dv, const float *k, const float *v, int64_t n) {
    pdl_enter();
    float *y = blockIdx.y ? dv : dk;
    const float *x = blockIdx.y ? v : k;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        kv_put(y, true, i, x[i]);
}

/* One byte range of a quantized-row copy (blockIdx.y picks the range). */
struct copy_ranges {
    uint8_t *dst[6];
    const uint8_t *src[6];
    int64_t bytes[6];
};

__global__ void kv_copy_q_kernel(copy_ranges c) {
    pdl_enter();
    const int k = blockIdx.y;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < c.bytes[k]; i += step)
        c.dst[k][i] = c.src[k][i];
}

extern "C" int gp_cu_kv_store(gp_cu *d, const gp_cu_kv_rows *dk, const gp_cu_kv_rows *dv, int32_t r0, const float *k,
                              const float *v, int32_t n, int quant) {
    if (n <= 0) return 0;
    if (quant && dk->bits == 16) {
        const int64_t total = (int64_t)n * dk->kvd, o = (int64_t)r0 * dk->kvd * 2; /* (bytes) */
        launch(kv_bf16_kernel, dim3((unsigned)grid_for(total, 256), 2), 256, 0, d, (float *)(void *)(dk->q + o),
               (float *)(void *)(dv->q + o), k, v, total);
    } else if (quant) {
        const int32_t ng = dk->n_groups > dv->n_groups ? dk->n_groups : dv->n_groups;
        launch(kv_quant_kernel, dim3((unsigned)(n * ng), 2), 32, 0, d, *dk, *dv, r0, k, v);
    } else {
        const int64_t total = (int64_t)n * dk->kvd;
        launch(kv_copy_f_kernel, dim3((unsigned)grid_for(total, 256), 2), 256, 0, d, dk->f + (size_t)r0 * dk->kvd,
               dv->f + (size_t)r0 * dv->kvd, k, v, total);
    }
    return (int)cudaGetLastError();
}

extern "C" int gp_cu_kv_copy(gp_cu *d, const gp_cu_kv_rows *dk, const gp_cu_kv_rows *dv, int32_t d0,
                             const gp_cu_kv_rows *sk, const gp_cu_kv_rows *sv, int32_t s0, int32_t n, int quant) {
    if (n <= 0) return 0;
    if (!quant) {
        const int64_t total = (int64_t)n * dk->kvd;
        launch(kv_copy_f_kernel, dim3((unsigned)grid_for(total, 256), 2), 256, 0, d, dk->f + (size_t)d0 * dk->kvd,
               dv->f + (size_t)d0 * dv->kvd, sk->f + (size_t)s0 * sk->kvd, sv->f + (size_t)s0 * sv->kvd, total);
        return (int)cudaGetLastError();
    }
    copy_ranges c;
    const gp_cu_kv_rows *dst[2] = {dk, dv}, *src[2] = {sk, sv};
    int64_t most = 0;
    for (int i = 0; i < 2; i++) {
        const int64_t rb = dst[i]->row_bytes, gb = (int64_t)dst[i]->n_groups * 4;
        c.dst[3 * i] = dst[i]->q + d0 * rb, c.src[3 * i] = src[i]->q + s0 * rb, c.bytes[3 * i] = n * rb;
        c.dst[3 * i + 1] = (uint8_t *)(dst[i]->scale) + d0 * gb;
        c.src[3 * i + 1] = (const uint8_t *)src[i]->scale + s0 * gb;
        c.dst[3 * i + 2] = (uint8_t *)(dst[i]->minv) + d0 * gb;
        c.src[3 * i + 2] = (const uint8_t *)src[i]->minv + s0 * gb;
        c.bytes[3 * i + 1] = c.bytes[3 * i + 2] = n * gb;
        most = n * rb > most ? n * rb : most;
        most = n * gb > most ? n * gb : most;
    }
    launch(kv_copy_q_kernel, dim3((unsigned)grid_for(most, 256), 6), 256, 0, d, c);
    return (int)cudaGetLastError();
}
