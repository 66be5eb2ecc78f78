/* cuda_ops.cu — the element-wise, normalization, embedding, rope, KV-store and attention ops of the CUDA backend
 * (cuda_ops.h).  Reductions (RMSNorm's sum of squares, softmax sums, attention's split combine) run in one fixed
 * order per output: per-thread strided partials, the warp's xor butterfly, then the warps in index order. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

extern "C" cudaStream_t gp_cu_stream(gp_cu *d);

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ float block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int i = 0; i < nw; i++) m = fmaxf(m, sh[i]);
    return m;
}

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
    const float inv = rms_inv(xr, dim, eps, sh, bf);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = rms_val(xr[i], inv, wt_at(w, dt, i), plus_one, bf);
}

extern "C" int gp_cu_rmsnorm(gp_cu *d, float *y, const float *x, const gp_cu_wt *w, int32_t n, int32_t dim, float eps,
                             int plus_one) {
    if (n <= 0) return 0;
    launch(rmsnorm_kernel, n, rms_threads(dim), 0, gp_cu_stream(d), y, x, w->data, w->dtype, dim, eps, plus_one,
           gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- rope: block per (token, head), thread per rotated pair ---- */
/* Rotates the pair (v[i], v[i + half]) of a head at position p; returns the new values in *a, *b too.  bf16 mode as
 * the CPU op: cos/sin cast to bf16, each product and the sum rounded. */
__device__ __forceinline__ void rotate_pair(float *v, int i, int half, float p, const float *inv_freq, float *a,
                                            float *b, int bf) {
    const float ang = p * inv_freq[i], x1 = v[i], x2 = v[i + half];
    float c = cosf(ang), s = sinf(ang);
    if (bf) {
        c = bf16r(c), s = bf16r(s);
        *a = bf16r(bf16r(x1 * c) - bf16r(x2 * s));
        *b = bf16r(bf16r(x2 * c) + bf16r(x1 * s));
    } else {
        *a = x1 * c - x2 * s;
        *b = x2 * c + x1 * s;
    }
    v[i] = *a;
    v[i + half] = *b;
}

__global__ void rope_kernel(float *x, int32_t heads, int32_t hd, const int32_t *pos0, const float *inv_freq, int bf) {
    pdl_enter();
    const int32_t t = blockIdx.x / heads, half = hd / 2;
    float *v = x + (size_t)blockIdx.x * hd;
    const float p = (float)(*pos0 + t);
    float a, b;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rotate_pair(v, i, half, p, inv_freq, &a, &b, bf);
}

__device__ __forceinline__ int32_t kv_slot(int32_t j, int32_t cap, int32_t keep) {
    return j < keep ? j : keep + (j - keep) % (cap - keep);
}

/* Block per head of q|k [nh + nkv, hd] (one token): RMS-normalized per head first when qn/kn are given (Qwen3's
 * q_norm/k_norm, gp_cu_rmsnorm's bits), then rotated; k heads and their v heads also go to the cache. */
__global__ void rope_store_kernel(float *qk, int32_t nh, int32_t hd, const int32_t *pos0, const float *inv_freq,
                                  const float *v, gp_cu_kv c, gp_cu_wt qn, gp_cu_wt kn, float eps, int plus_one,
                                  int bf) {
    pdl_enter();
    __shared__ float sh[32];
    const int32_t h = blockIdx.x, half = hd / 2, j = *pos0;
    float *x = qk + (size_t)h * hd;
    const gp_cu_wt *g = h < nh ? &qn : &kn;
    if (g->data) {
        const float inv = rms_inv(x, hd, eps, sh, bf);
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            x[i] = rms_val(x[i], inv, wt_at(g->data, g->dtype, i), plus_one, bf);
        __syncthreads();
    }
    float a, b;
    const size_t o = (size_t)kv_slot(j, c.cap, c.keep) * c.kvd + (size_t)(h - nh) * hd;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        rotate_pair(x, i, half, (float)j, inv_freq, &a, &b, bf);
        if (h >= nh) {
            c.k[o + i] = a;
            c.k[o + i + half] = b;
            c.v[o + i] = v[(size_t)(h - nh) * hd + i];
            c.v[o + i + half] = v[(size_t)(h - nh) * hd + i + half];
        }
    }
}

extern "C" int gp_cu_rope_store(gp_cu *d, float *qk, int32_t nh, int32_t nkv, int32_t hd, const int32_t *pos0,
                                const float *inv_freq, const float *v, const gp_cu_kv *c, const gp_cu_wt *qn,
                                const gp_cu_wt *kn, float eps, int plus_one) {
    if (nh + nkv <= 0 || hd < 2) return 0;
    const gp_cu_wt none = {NULL, 0, 0, 0};
    const int normed = qn && qn->data && kn && kn->data;
    /* with the norms: RMSNorm's own thread count, which rms_inv's summation order assumes */
    const int threads = normed ? rms_threads(hd) : hd / 2 >= 64 ? 64 : 32;
    launch(rope_store_kernel, nh + nkv, threads, 0, gp_cu_stream(d), qk, nh, hd, pos0, inv_freq, v, *c,
           normed ? *qn : none, normed ? *kn : none, eps, plus_one, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

extern "C" int gp_cu_rope(gp_cu *d, float *x, int32_t n, int32_t heads, int32_t hd, const int32_t *pos0,
                          const float *inv_freq) {
    if (n <= 0 || heads <= 0 || hd < 2) return 0;
    const int threads = hd / 2 >= 64 ? 64 : 32;
    launch(rope_kernel, n * heads, threads, 0, gp_cu_stream(d), x, heads, hd, pos0, inv_freq, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- embedding ---- */
/* bf16 mode as the CPU op: the row and the scale (Gemma's normalizer, a bf16 tensor) as bf16, the product rounded */
__global__ void embed_kernel(float *y, const int32_t *ids, const void *table, int dt, int64_t cols, float scale,
                             int bf) {
    pdl_enter();
    const int64_t row = ids[blockIdx.x];
    float *yr = y + (size_t)blockIdx.x * cols;
    if (bf) scale = bf16r(scale);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = wt_at(table, dt, row * cols + i);
        if (bf) v = bf16r(v);
        v = scale != 1.0f ? v * scale : v;
        yr[i] = bf ? bf16r(v) : v;
    }
}

extern "C" int gp_cu_embed(gp_cu *d, float *y, const int32_t *ids, int32_t n, const gp_cu_wt *table, float scale) {
    if (n <= 0) return 0;
    launch(embed_kernel, n, 256, 0, gp_cu_stream(d), y, ids, table->data, table->dtype, table->cols, scale,
           gp_cu_bf16(d));
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
    launch(glu_kernel, grid_for(n, 256), 256, 0, gp_cu_stream(d), gate, up, n, act, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

__global__ void add_kernel(float *y, const float *x, int64_t n, int bf) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = bf ? bf16r(y[i] + x[i]) : y[i] + x[i];
}

extern "C" int gp_cu_add(gp_cu *d, float *y, const float *x, int64_t n) {
    if (n <= 0) return 0;
    launch(add_kernel, grid_for(n, 256), 256, 0, gp_cu_stream(d), y, x, n, gp_cu_bf16(d));
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
    launch(add_rows_kernel, grid_for(total, 256), 256, 0, gp_cu_stream(d), y, v, alpha, dim, total);
    return (int)cudaGetLastError();
}

__global__ void softcap_kernel(float *x, int64_t n, float cap, int bf) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = bf ? bf16r(bf16r(tanhf(bf16r(x[i] / cap))) * cap) : tanhf(x[i] / cap) * cap;
}

extern "C" int gp_cu_softcap(gp_cu *d, float *x, int64_t n, float cap) {
    if (n <= 0) return 0;
    launch(softcap_kernel, grid_for(n, 256), 256, 0, gp_cu_stream(d), x, n, cap, gp_cu_bf16(d));
    return (int)cudaGetLastError();
}

/* ---- KV cache ---- */

__global__ void kv_store_kernel(float *kc, float *vc, const float *k, const float *v, int32_t n, int32_t kvd,
                                int32_t cap, int32_t keep, const int32_t *pos0) {
    pdl_enter();
    const int64_t total = (int64_t)n * kvd;
    const int32_t p0 = *pos0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t t = (int32_t)(i / kvd), e = (int32_t)(i % kvd), j = p0 + t;
        if (j >= keep && j + (cap - keep) < p0 + n) continue; /* a later position of the chunk takes this slot */
        const size_t o = (size_t)kv_slot(j, cap, keep) * kvd + e;
        kc[o] = k[i];
        vc[o] = v[i];
    }
}

extern "C" int gp_cu_kv_store(gp_cu *d, const gp_cu_kv *c, const float *k, const float *v, int32_t n,
                              const int32_t *pos0) {
    const int64_t total = (int64_t)n * c->kvd;
    if (total <= 0) return 0;
    launch(kv_store_kernel, grid_for(total, 256), 256, 0, gp_cu_stream(d), c->k, c->v, k, v, n, c->kvd, c->cap, c->keep,
                                                                       pos0);
    return (int)cudaGetLastError();
}

/* ---- attention ---- */
#define ATT_THREADS 128

/* Row of key (values: vals = 1) position j for kv head kvh: from the chunk when j >= p0, else from the cache. */
__device__ __forceinline__ const float *kv_row(const gp_cu_attn &a, const gp_cu_kv &c, int vals, int32_t j,
                                               int32_t p0, int32_t kvh) {
    const int32_t kvd = a.n_kv * a.head_dim;
    if (j >= p0) return (vals ? a.v_new : a.k_new) + (size_t)(j - p0) * kvd + (size_t)kvh * a.head_dim;
    return (vals ? c.v : c.k) + (size_t)kv_slot(j, c.cap, c.keep) * kvd + (size_t)kvh * a.head_dim;
}

/* Grid (n_splits, n_heads, n): the keys [s*SPLIT, (s+1)*SPLIT) of query t, head h.  Writes the split's max m, sum
 * l of exp(score - m) and unnormalized output acc [hd] to part (m = -inf, l = 0 when it sees no key).
 * Scores: 8 lanes per key, lane r taking float4s r, r+8, ... of the row, then the 8 lanes' xor butterfly.
 * Output: G = blockDim / hd groups of hd threads; group g sums keys g, g+G, ... (visible keys only: the others
 * have p = 0 and their rows, always finite, add exactly 0), then the groups' sums are added in order g = 0..G-1.
 * Every order is fixed by the call's shapes alone, so the bits do not depend on scheduling or chunking. */
/* 2^x as the GPU's ex2.approx.ftz (what flash attention's softmax evaluates) */
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__global__ void __launch_bounds__(ATT_THREADS) attn_split_kernel(gp_cu_attn a, gp_cu_kv c, int bf) {
    pdl_enter();
    extern __shared__ float sm[]; /* q [hd], scores [SPLIT], reduce [32], group sums [ATT_THREADS] */
    float *qs = sm, *sc = sm + a.head_dim, *red = sc + GP_CU_ATTN_SPLIT, *gs = red + 32;
    const int32_t s = blockIdx.x, h = blockIdx.y, t = blockIdx.z, hd = a.head_dim;
    const int32_t p0 = *a.pos0, p = p0 + a.t_off + t, kvh = h / (a.n_heads / a.n_kv);
    const int32_t lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    const int32_t pin = lo > c.keep ? c.keep : lo;
    const int32_t j0 = s * GP_CU_ATTN_SPLIT;
    if (j0 > p) return; /* past the query: the combine never reads this split */
    /* bf16 mode without soft-capping: sdpa's flash softmax, p = 2^(score * scale * log2 e - max * scale * log2 e) */
    const bool flash = bf && a.softcap <= 0;
    const float sl2 = a.scale * 1.4426950408889634f;
    float *part = a.part + (((size_t)t * a.n_heads + h) * a.n_splits + s) * (hd + 2);
    const float *q = a.q + ((size_t)t * a.n_heads + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) qs[i] = q[i];
    __syncthreads();
    const int32_t iend = p - j0 + 1 < GP_CU_ATTN_SPLIT ? p - j0 + 1 : GP_CU_ATTN_SPLIT;
    const int r8 = threadIdx.x & 7, nv = hd / 4;
    for (int i0 = 0; i0 < GP_CU_ATTN_SPLIT; i0 += ATT_THREADS / 8) {
        const int i = i0 + (threadIdx.x >> 3);
        const int32_t j = j0 + i;
        const bool vis = i < iend && (j < pin || j >= lo);
        float dot = 0.0f;
        if (vis) {
            const float *k = kv_row(a, c, 0, j, p0, kvh);
            if ((hd & 3) == 0)
                for (int f = r8; f < nv; f += 8) {
                    const float4 kv = *(const float4 *)(k + 4 * f);
                    const float4 qv = *(const float4 *)(qs + 4 * f);
                    dot = fmaf(qv.x, kv.x, dot);
                    dot = fmaf(qv.y, kv.y, dot);
                    dot = fmaf(qv.z, kv.z, dot);
                    dot = fmaf(qv.w, kv.w, dot);
                }
            else
                for (int e = r8; e < hd; e += 8) dot = fmaf(qs[e], k[e], dot);
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 4);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        if (r8 == 0) {
            float sv = -INFINITY;
            if (vis) {
                sv = flash ? dot : dot * a.scale; /* flash: the raw score, scaled inside the exponent */
                if (a.softcap > 0) sv = tanhf(sv / a.softcap) * a.softcap;
            }
            sc[i] = sv;
        }
    }
    __syncthreads();
    float m = -INFINITY;
    for (int i = threadIdx.x; i < GP_CU_ATTN_SPLIT; i += blockDim.x) m = fmaxf(m, sc[i]);
    m = block_max(m, red);
    if (m == -INFINITY) { /* no visible key in this split */
        for (int i = threadIdx.x; i < hd + 2; i += blockDim.x) part[i] = i == 0 ? -INFINITY : 0.0f;
        return;
    }
    float l = 0.0f;
    const float msl2 = m * sl2;
    for (int i = threadIdx.x; i < GP_CU_ATTN_SPLIT; i += blockDim.x) {
        const float e = sc[i] == -INFINITY ? 0.0f : flash ? ex2_approx(fmaf(sc[i], sl2, -msl2)) : expf(sc[i] - m);
        sc[i] = bf ? bf16r(e) : e; /* bf16 mode (sdpa): p rounded for p·v, the sum of the float32 values */
        l += e;
    }
    l = block_sum(l, red); /* ends with barriers: sc[] complete */
    const int G = hd <= ATT_THREADS ? ATT_THREADS / hd : 1;
    const int g = threadIdx.x / (hd <= ATT_THREADS ? hd : ATT_THREADS);
    for (int e = threadIdx.x % (hd <= ATT_THREADS ? hd : ATT_THREADS); e < hd && g < G; e += ATT_THREADS) {
        float acc0 = 0.0f, acc1 = 0.0f;
        int i = g;
        for (; i + G < iend; i += 2 * G) { /* two keys per step: two independent loads in flight */
            const float v0 = kv_row(a, c, 1, j0 + i, p0, kvh)[e], v1 = kv_row(a, c, 1, j0 + i + G, p0, kvh)[e];
            acc0 = fmaf(sc[i], v0, acc0);
            acc1 = fmaf(sc[i + G], v1, acc1);
        }
        if (i < iend) acc0 = fmaf(sc[i], kv_row(a, c, 1, j0 + i, p0, kvh)[e], acc0);
        if (G == 1) part[2 + e] = acc0 + acc1;
        else gs[g * hd + e] = acc0 + acc1;
    }
    if (G > 1) {
        __syncthreads();
        for (int e = threadIdx.x; e < hd; e += blockDim.x) {
            float o = 0.0f;
            for (int k = 0; k < G; k++) o += gs[k * hd + e];
            part[2 + e] = o;
        }
    }
    if (threadIdx.x == 0) {
        part[0] = flash ? m * a.scale : m; /* the combine works on scaled maxima */
        part[1] = l;
    }
}

/* Block per (query, head): combines the splits in order. */
__global__ void attn_combine_kernel(gp_cu_attn a, int bf) {
    pdl_enter();
    const int32_t th = blockIdx.x, t = th / a.n_heads, hd = a.head_dim;
    const int32_t p = *a.pos0 + a.t_off + t, ns = p / GP_CU_ATTN_SPLIT + 1;
    const float *part = a.part + (size_t)th * a.n_splits * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, part[(size_t)s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < ns; s++) {
        const float ms = part[(size_t)s * (hd + 2)];
        if (ms != -INFINITY) L += part[(size_t)s * (hd + 2) + 1] * expf(ms - M);
    }
    float *o = a.out + (size_t)th * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float ms = part[(size_t)s * (hd + 2)];
            if (ms != -INFINITY) acc += part[(size_t)s * (hd + 2) + 2 + e] * expf(ms - M);
        }
        o[e] = bf ? bf16r(acc / L) : acc / L;
    }
}

extern "C" int gp_cu_attention(gp_cu *d, const gp_cu_attn *a) {
    if (a->n <= 0) return 0;
    cudaStream_t s = gp_cu_stream(d);
    const size_t sh = (size_t)(a->head_dim + GP_CU_ATTN_SPLIT + 32 + ATT_THREADS) * sizeof(float);
    dim3 grid((unsigned)a->n_splits, (unsigned)a->n_heads, (unsigned)a->n);
    const int bf = gp_cu_bf16(d);
    launch(attn_split_kernel, grid, ATT_THREADS, sh, s, *a, *a->cache, bf);
    launch(attn_combine_kernel, a->n * a->n_heads, 64, 0, s, *a, bf);
    return (int)cudaGetLastError();
}
