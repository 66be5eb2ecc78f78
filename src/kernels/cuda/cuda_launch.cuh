/* cuda_launch.cuh — shared by the CUDA kernel files: kernel launches with programmatic dependent launch (the next
 * kernel of the stream is scheduled while this one runs and waits in pdl_wait() until it has finished and its
 * writes are visible, which hides launch gaps between the many small kernels of a decode step), and the
 * expressions that fused kernels must share with the ops they replace (one expression, one rounding): the GLU
 * activation, RMSNorm's fixed-order sum of squares and its scaling, a stored-dtype element read. */
#ifndef GP_CUDA_LAUNCH_CUH
#define GP_CUDA_LAUNCH_CUH

#include "kernels/cuda/cuda_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <type_traits>

/* The handle's recorder (cuda_rt.cu): a decode step's launches recorded and replayed as a CUDA graph. */
extern "C" {
int gp_cu_recording(gp_cu *d);
int gp_cu_rec_begin(gp_cu *d, const void *func, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, size_t shmem, size_t arg_bytes, unsigned nparams);
void gp_cu_rec_arg(gp_cu *d, const void *v, size_t size, size_t align);
}
/* kernel func<<<grid, block, shmem, d's stream>>> with the parameters at args[i], programmatic stream serialization
 * allowed (the one launch every kernel goes through, recorded steps' included); returns the CUDA error. */
cudaError_t gp_cu_launch(gp_cu *d, const void *func, dim3 grid, dim3 block, size_t shmem, void **args);

#ifdef GP_CU_TRACE
/* Diagnostic builds only (make cuda CUDA_ARCH="-arch=sm_90 -DGP_CU_TRACE", tools/cuda_timeline.py): every block's
 * thread 0 takes a ticket after its wait and stores the global timer at it.  Kernels pass their waits in launch
 * order, so one launch's tickets are contiguous; the runtime maps them back with its launch log, written at exit. */
#define GP_TRACE_CAP (1u << 22)
extern "C" void gp_cu_trace_register(void (*set)(unsigned long long *));
static __device__ unsigned long long *g_trace;
static void trace_set(unsigned long long *p) { cudaMemcpyToSymbol(g_trace, &p, sizeof p); }
namespace {
struct trace_reg {
    trace_reg() { gp_cu_trace_register(trace_set); }
} trace_reg_inst;
}
__device__ __forceinline__ void trace_mark() {
    if (threadIdx.x || !g_trace) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    const unsigned i = atomicAdd((unsigned *)g_trace, 1u);
    if (i < GP_TRACE_CAP) g_trace[1 + i] = t;
}
/* A kernel file's stamps at exit: the records (w stamps each, at most cap) in device symbol rec, their count in
 * device symbol cnt (both of the calling file), written to $GP_CU_TRACE_FILE<suffix>, a record a line. */
#include <stdio.h>
static inline void stamps_dump(const char *suffix, const void *rec, const void *cnt, unsigned cap, int w) {
    const char *fn = getenv("GP_CU_TRACE_FILE");
    unsigned n = 0;
    if (!fn || cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(&n, cnt, sizeof n) != cudaSuccess)
        return;
    n = n < cap ? n : cap;
    unsigned long long *h = (unsigned long long *)malloc((size_t)n * w * 8 + 8);
    char path[4096];
    snprintf(path, sizeof path, "%s%s", fn, suffix);
    FILE *f = h && cudaMemcpyFromSymbol(h, rec, (size_t)n * w * 8) == cudaSuccess ? fopen(path, "w") : NULL;
    for (unsigned i = 0; f && i < n; i++) {
        for (int k = 0; k < w; k++) fprintf(f, "%llu ", h[(size_t)i * w + k]);
        fprintf(f, "\n");
    }
    if (f) fclose(f);
    free(h);
}
#else
__device__ __forceinline__ void trace_mark() {}
#endif

/* First statements of every kernel: wait for the previous kernel of the stream, then let the next one be scheduled.
 * Both are no-ops for a kernel launched without the programmatic attribute.  Reads of what no kernel writes (the
 * weights) may come before it: the decode projections load their first weights, then call it.  early: the next
 * kernel is let in before the wait (GP_CU_EARLY), so its blocks can be resident and loading their weights when this
 * one's wait returns.  The default keeps a guarantee the decode attention's early staging relies on: a kernel's code
 * before its wait runs only once every kernel before its predecessor has finished (completion implies the wait, so
 * the guarantee holds as long as the predecessor of a kernel that reads cached rows early is not an early one). */
__device__ __forceinline__ void pdl_enter(bool early = false) {
    if (early) asm volatile("griddepcontrol.launch_dependents;" :::);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    trace_mark();
    if (!early) asm volatile("griddepcontrol.launch_dependents;" :::);
}

/* The integer in environment variable `name` (a test or measurement knob: GP_CU_*), or dflt where it is unset. */
static inline int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v ? atoi(v) : dflt;
}

/* kernel<<<grid, block, shmem, d's stream>>>(args...) with programmatic stream serialization allowed; while d records
 * a decode step (gp_cu_record), the launch is appended to the recording instead (its argument values copied, each
 * at its type's alignment) and runs when the step is flushed. */
template <typename T>
static inline void rec_arg(gp_cu *d, const T &v) {
    gp_cu_rec_arg(d, &v, sizeof(T), alignof(T));
}
template <typename... KArgs, typename... Args>
static inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem, gp_cu *d, Args... args) {
    constexpr size_t arg_bytes = (0 + ... + (sizeof(KArgs) + alignof(KArgs)));
    if (gp_cu_recording(d) && !gp_cu_rec_begin(d, (const void *)kernel, grid.x, grid.y, grid.z, block.x, block.y,
                                               block.z, shmem, arg_bytes, (unsigned)sizeof...(KArgs))) {
        (rec_arg<KArgs>(d, static_cast<KArgs>(args)), ...);
        return;
    }
    auto go = [&](auto... v) {
        void *p[] = {(void *)&v...};
        gp_cu_launch(d, (const void *)kernel, grid, block, shmem, p);
    };
    go(static_cast<KArgs>(args)...);
}

/* Calls f(std::integral_constant<int, DT>()) for the dense dtype dt (GP_CU_F32, BF16, F16): one dispatch from a
 * run-time dtype to the kernels' template argument. */
template <typename F>
static inline void by_dtype(int dt, F f) {
    if (dt == GP_CU_F32) f(std::integral_constant<int, GP_CU_F32>());
    else if (dt == GP_CU_BF16) f(std::integral_constant<int, GP_CU_BF16>());
    else f(std::integral_constant<int, GP_CU_F16>());
}

/* x rounded to the nearest bfloat16 (ties to even), as a float: what a torch bf16 tensor holds (the bf16 mode). */
__device__ __forceinline__ float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/* Element i of a cache row store: float32, or (b16: bfloat16 rows, gp_cu_kv_rows bits 16) x rounded to bfloat16. */
__device__ __forceinline__ void kv_put(float *base, bool b16, int64_t i, float x) {
    if (b16) reinterpret_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(x);
    else base[i] = x;
}

/* A projection's output: the product s (times alpha, the LoRA scale) + bias b, rounded as the bf16 mode's linear
 * under GP_CU_ROUND (the sum + bf16(b) rounded once); mm_store writes it, or adds it to *o under GP_CU_ACC (the
 * residual add: y + v rounded again in the bf16 mode).  Every projection kernel ends with these two. */
__device__ __forceinline__ float mm_val(float s, bool has_b, float b, int mode, float alpha) {
    s = alpha == 1.0f ? s : alpha * s;
    if (mode & GP_CU_ROUND) return bf16r(has_b ? s + bf16r(b) : s);
    return has_b ? s + b : s;
}
/* what mm_store leaves at an output whose value was old (read only under GP_CU_ACC) */
__device__ __forceinline__ float mm_out(float old, float v, int mode) {
    return !(mode & GP_CU_ACC) ? v : (mode & GP_CU_ROUND) ? bf16r(old + v) : old + v;
}
__device__ __forceinline__ void mm_store(float *o, float v, int mode) {
    *o = mm_out(mode & GP_CU_ACC ? *o : 0.0f, v, mode);
}

/* act(x): SiLU or the tanh approximation of GELU */
__device__ __forceinline__ float act_val(float x, int act) {
    if (act == GP_CU_ACT_SILU) return x / (1.0f + expf(-x));
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    const float inner = beta * (x + kappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

/* act(g) * u; bf16 mode: act(g) rounded, then the product rounded (as the CPU op) */
__device__ __forceinline__ float glu_val(float x, float u, int act, int bf = 0) {
    return bf ? bf16r(bf16r(act_val(x, act)) * u) : act_val(x, act) * u;
}

/* Element i of a vector or matrix stored in dtype dt (GP_CU_*), widened to float32. */
__device__ __forceinline__ float wt_at(const void *p, int dt, int64_t i) {
    if (dt == GP_CU_F32) return ((const float *)p)[i];
    if (dt == GP_CU_BF16) return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    return __half2float(((const __half *)p)[i]);
}

/* Element (r, i) of an MLX affine matrix: scale * q + bias of its group, two float32 roundings (the CPU's widen). */
__device__ __forceinline__ float qa_at(const gp_cu_wt &w, int64_t r, int64_t i) {
    const uint32_t *row = (const uint32_t *)w.data + r * (w.cols * w.bits / 32);
    const int64_t bit = i * w.bits, wi = bit >> 5;
    const int sh = (int)(bit & 31);
    uint32_t v = row[wi] >> sh;
    if (sh + w.bits > 32) v |= row[wi + 1] << (32 - sh);
    v &= (1u << w.bits) - 1u;
    const int64_t g = r * ((w.cols + w.group - 1) / w.group) + i / w.group;
    return __fadd_rn(__fmul_rn(wt_at(w.scales, w.sdt, g), (float)v), w.biases ? wt_at(w.biases, w.bdt, g) : 0.0f);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024) in a fixed order; every thread gets the result. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

/* RMSNorm's thread count for a row of dim elements: its sum of squares is summed by that many strided partials. */
__host__ __device__ __forceinline__ constexpr int rms_threads(int32_t dim) {
    return dim >= 1024 ? 256 : dim >= 128 ? 128 : 32;
}

/* RMSNorm's partial sum of squares of thread t of nb: elements t, t + nb, ... of x [dim] in order. */
#define RMS_BATCH 8 /* a thread's loads issued together (one at a time, their latency was most of a decode norm) */
__device__ __forceinline__ float rms_partial(const float *x, int32_t dim, int t, int nb) {
    float ss = 0.0f;
    int i = t;
    for (; i + (RMS_BATCH - 1) * nb < dim; i += RMS_BATCH * nb) {
        float v[RMS_BATCH];
#pragma unroll
        for (int k = 0; k < RMS_BATCH; k++) v[k] = x[i + k * nb];
#pragma unroll
        for (int k = 0; k < RMS_BATCH; k++) ss += v[k] * v[k];
    }
    for (; i < dim; i += nb) ss += x[i] * x[i];
    return ss;
}

/* 1 / sqrt(mean + eps) of the sum of squares ss of dim elements; bf16 mode: torch's CUDA expression, mean as
 * sum * (1 / dim), then rsqrt. */
__device__ __forceinline__ float rms_scale(float ss, int32_t dim, float eps, int bf) {
    return bf ? rsqrtf(ss * (1.0f / (float)dim) + eps) : 1.0f / sqrtf(ss / (float)dim + eps);
}

/* 1 / sqrt(mean(x^2) + eps) of x [dim] for the whole block, whose blockDim.x must be rms_threads(dim): thread i's
 * rms_partial, then block_sum (one fixed order, RMSNorm's everywhere it is fused). */
__device__ __forceinline__ float rms_inv(const float *x, int32_t dim, float eps, float *sh, int bf = 0) {
    return rms_scale(block_sum(rms_partial(x, dim, threadIdx.x, blockDim.x), sh), dim, eps, bf);
}

/* rms_inv's value by one warp, for a block of nb threads (a multiple of 32): lane l takes threads l, l + 32, ...,
 * each virtual warp summed by the butterfly, the warps' sums added in order. */
__device__ __forceinline__ float rms_inv_warp(const float *x, int32_t dim, int nb, float eps, int bf) {
    const int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int w = 0; w < nb / 32; w++) s += warp_sum(rms_partial(x, dim, lane + 32 * w, nb));
    return rms_scale(s, dim, eps, bf);
}

/* RMSNorm's output element: v * inv scaled by g (or by 1 + g, Gemma); bf16 mode as the CPU op: Llama/Qwen round
 * v * inv, then multiply by the bf16 weight and round; Gemma multiplies by (1 + w) in float32 and rounds. */
__device__ __forceinline__ float rms_val(float v, float inv, float g, int plus_one, int bf = 0) {
    if (bf) return plus_one ? bf16r((v * inv) * (1.0f + bf16r(g))) : bf16r(bf16r(g) * bf16r(v * inv));
    return plus_one ? (v * inv) * (1.0f + g) : g * (v * inv);
}

/* y [dim] = RMSNorm of x [dim] given inv = rms_inv(x): the whole block, RMS_BATCH elements' loads in flight per
 * thread; y may alias x. */
__device__ __forceinline__ void rms_apply(float *y, const float *x, float inv, const void *w, int dt, int32_t dim,
                                          int plus_one, int bf) {
    const int nb = blockDim.x;
    int i = threadIdx.x;
    for (; i + (RMS_BATCH - 1) * nb < dim; i += RMS_BATCH * nb) {
        float v[RMS_BATCH], g[RMS_BATCH];
#pragma unroll
        for (int k = 0; k < RMS_BATCH; k++) v[k] = x[i + k * nb], g[k] = wt_at(w, dt, i + k * nb);
#pragma unroll
        for (int k = 0; k < RMS_BATCH; k++) y[i + k * nb] = rms_val(v[k], inv, g[k], plus_one, bf);
    }
    for (; i < dim; i += nb) y[i] = rms_val(x[i], inv, wt_at(w, dt, i), plus_one, bf);
}

/* ---- bf16 tensor-core fragments (cuda_mma.cu's projections, cuda_attn.cu's bf16-mode attention) ---- */

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

/* The two 16-column blocks of one 32-column chunk: acc (rows g, g+8 of the token tile x cols 2c, 2c+1 of the 8
 * weight rows) += A (token rows g: a, g + 8: a8) * W (b). */
__device__ __forceinline__ void chunk_mma(float *acc, const uint4 &a, const uint4 &a8, const uint4 &b) {
    mma16816(acc, a.x, a8.x, a.y, a8.y, b.x, b.y);
    mma16816(acc, a.z, a8.z, a.w, a8.w, b.z, b.w);
}

/* 16 bytes global -> shared without registers (cp.async); zeros when !ok (nothing is read then; g must still be a
 * mapped address).  cp_commit closes a group of them; cp_wait<N> waits until at most N of this thread's groups are
 * in flight (cp_wait<0>: all its copies have landed). */
__device__ __forceinline__ void cp16(void *sm, const void *g, bool ok) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(sm);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(g), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* cos and sin of the rope's angle i at position p (bf16 mode as the CPU op: cast to bf16). */
__device__ __forceinline__ float2 rope_cs(int i, float p, const float *inv_freq, int bf) {
    const float ang = p * inv_freq[i];
    const float c = cosf(ang), s = sinf(ang);
    return bf ? make_float2(bf16r(c), bf16r(s)) : make_float2(c, s);
}

/* cs [half] = rope_cs of every angle at position p, by the block's threads (the caller synchronizes the block). */
__device__ __forceinline__ void rope_angles(float2 *cs, int half, float p, const float *inv_freq, int bf) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) cs[i] = rope_cs(i, p, inv_freq, bf);
}

/* Rotates the pair (a, b) = (v[i], v[i + half]) of a head by cs = rope_cs(i, ..): each product and the sum rounded
 * apart, as the CPU's ISO C (no fused multiply-add, so the bits do not depend on where the compiler finds cs); bf16
 * mode as the CPU op: each product and the sum rounded to bf16. */
__device__ __forceinline__ void rotate_vals(float &a, float &b, float2 cs, int bf) {
    const float x1 = a, x2 = b;
    if (bf) {
        a = bf16r(bf16r(x1 * cs.x) - bf16r(x2 * cs.y));
        b = bf16r(bf16r(x2 * cs.x) + bf16r(x1 * cs.y));
    } else {
        a = __fsub_rn(__fmul_rn(x1, cs.x), __fmul_rn(x2, cs.y));
        b = __fadd_rn(__fmul_rn(x2, cs.x), __fmul_rn(x1, cs.y));
    }
}
__device__ __forceinline__ void rotate_pair(float *v, int i, int half, float2 cs, int bf) {
    rotate_vals(v[i], v[i + half], cs, bf);
}

/* One head x [hd] by one warp, as gp_cu_rope_qk does it: RMS-normalized by the weight g when given (with the order of
 * a block of rms_threads(hd) threads: rmsnorm's bits), then rotated by cs (rope_angles at its position).  F32: g is
 * stored as float32, whatever g.dtype says (one load path in the code). */
template <bool F32 = false>
__device__ __forceinline__ void rope_head_warp(float *x, int32_t hd, const gp_cu_wt &g, float eps, int plus_one,
                                               int bf, const float2 *cs) {
    const int lane = threadIdx.x & 31;
    __syncwarp();
    if (g.data) {
        const float inv = rms_inv_warp(x, hd, rms_threads(hd), eps, bf);
        for (int i = lane; i < hd; i += 32)
            x[i] = rms_val(x[i], inv, wt_at(g.data, F32 ? (int)GP_CU_F32 : g.dtype, i), plus_one, bf);
        __syncwarp();
    }
    for (int i = lane; i < hd / 2; i += 32) rotate_pair(x, i, hd / 2, cs[i], bf);
    __syncwarp();
}

/* rope_head_warp's bits with the head in registers: lane l holds v[j] = x[l + 32 j] of a head of hd = 32 J elements,
 * J even (each rotated pair (i, i + hd / 2) in one lane) and at most 8.  The sum of squares in rms_inv_warp's order:
 * virtual thread l + 32 w of rms_threads(hd) takes elements j = w, w + W, ... in order.  F32 as rope_head_warp's. */
template <int J, bool F32 = false>
__device__ __forceinline__ void rope_head_regs(float (&v)[J], const gp_cu_wt &g, float eps, int plus_one, int bf,
                                               const float2 *cs) {
    static_assert(J % 2 == 0 && J <= 8, "a head of 64, 128, 192 or 256 elements");
    constexpr int hd = 32 * J, W = rms_threads(hd) / 32;
    const int lane = threadIdx.x & 31;
    if (g.data) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) {
            float ss = 0.0f;
#pragma unroll
            for (int m = w; m < J; m += W) ss += v[m] * v[m];
            s += warp_sum(ss);
        }
        const float inv = rms_scale(s, hd, eps, bf);
#pragma unroll
        for (int j = 0; j < J; j++)
            v[j] = rms_val(v[j], inv, wt_at(g.data, F32 ? (int)GP_CU_F32 : g.dtype, lane + 32 * j), plus_one, bf);
    }
#pragma unroll
    for (int j = 0; j < J / 2; j++) rotate_vals(v[j], v[j + J / 2], cs[lane + 32 * j], bf);
}

/* The decode projections' input: x, or (NORM) its RMSNorm computed by the whole block into xs [cols] (shared), with
 * rmsnorm_kernel's bits (bf: the bf16 mode's; blockDim.x = rms_threads(cols): the launches check it). */
struct norm_args {
    const void *w;
    int dt;
    float eps;
    int plus_one, bf;
};
/* the kernels' norm arguments of nm (zeros where NULL); bf: the bf16 mode's arithmetic */
static inline norm_args norm_args_of(const gp_cu_norm *nm, int bf) {
    return nm ? norm_args{nm->w.data, nm->w.dtype, nm->eps, nm->plus_one, bf} : norm_args{};
}
template <bool NORM>
__device__ __forceinline__ const float *input_of(const float *x, float *xs, int64_t cols, const norm_args &nm) {
    if (!NORM) return x;
    __shared__ float sh[32];
    rms_apply(xs, x, rms_inv(x, (int32_t)cols, nm.eps, sh, nm.bf), nm.w, nm.dt, (int32_t)cols, nm.plus_one, nm.bf);
    __syncthreads();
    return xs;
}

/* input_of for rows of up to NORM_REGS elements per thread (wider ones go through input_of): the norm weights read
 * before the wait (norm_prefetch, called before pdl_enter: nothing writes them) and each thread's elements of x read
 * once, held in registers from the sum of squares to the scaling; rms_partial's and rms_apply's elements and order,
 * so input_of's bits.  (Measured on the H100, float32 mode: Qwen3-0.6B's 1024-wide rows, 4 per thread, decode 6-9%
 * faster; with 8 per thread, Llama-3.2-1B's 2048 rows were 1-2% slower, so those keep input_of.  The bf16 mode's
 * tensor-core GLU kernel does not use it: Llama-3.2-1B 3% slower there, Qwen3-0.6B 1-3% faster.  The bf16 mode's
 * looping GLU takes 8 per thread, NR = GLU_NORM_REGS: Llama-3.2-1B 1.3-3.5% faster on an H200.) */
#define NORM_REGS 4
template <int NR = NORM_REGS>
struct norm_early_t {
    float g[NR];
};
typedef norm_early_t<> norm_early;
template <bool NORM, int NR = NORM_REGS>
__device__ __forceinline__ void norm_prefetch(norm_early_t<NR> &ne, const norm_args &nm, int64_t cols) {
#pragma unroll
    for (int k = 0; k < NR; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        ne.g[k] = NORM && i < cols && cols <= NR * (int64_t)blockDim.x ? wt_at(nm.w, nm.dt, i) : 0.0f;
    }
}
/* The register path's first half: this thread's elements v[k] = x[threadIdx.x + k blockDim.x] (zeros past cols)
 * read once; returns rms_inv's value (rms_partial's elements and order). */
template <int NR>
__device__ __forceinline__ float rms_inv_regs(const float *x, int64_t cols, const norm_args &nm, float (&v)[NR]) {
    __shared__ float sh[32];
    const int nb = blockDim.x;
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NR; k++) v[k] = threadIdx.x + k * nb < cols ? x[threadIdx.x + k * nb] : 0.0f;
#pragma unroll
    for (int k = 0; k < NR; k++)
        if (threadIdx.x + k * nb < cols) ss += v[k] * v[k];
    return rms_scale(block_sum(ss, sh), (int32_t)cols, nm.eps, nm.bf);
}
template <bool NORM>
__device__ __forceinline__ const float *input_of(const float *x, float *xs, int64_t cols, const norm_args &nm,
                                                 const norm_early &ne) {
    if (!NORM) return x;
    if (cols > NORM_REGS * (int64_t)blockDim.x) return input_of<NORM>(x, xs, cols, nm);
    const int nb = blockDim.x;
    float v[NORM_REGS];
    const float inv = rms_inv_regs(x, cols, nm, v);
#pragma unroll
    for (int k = 0; k < NORM_REGS; k++)
        if (threadIdx.x + k * nb < cols) xs[threadIdx.x + k * nb] = rms_val(v[k], inv, ne.g[k], nm.plus_one, nm.bf);
    __syncthreads();
    return xs;
}

#endif
