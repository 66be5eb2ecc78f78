/* tools/cuda_stream_probe.cu — how fast one-token bf16 projections can stream their weights on the GPU machine,
 * by the map of weight bytes to lanes (the evidence for keeping mma_decode_kernel's register loads in
 * src/kernels/cuda/cuda_mma.cu).  Each kernel reads a bf16 matrix [rows][cols] once per launch (20 launches, after
 * one warm-up; shapes larger than the 50 MB L2) and, with MMA=1, multiplies it by a staged bf16 token as decode does
 * (four chains of mma.sync m16n8k16); it prints µs a launch and GB/s:
 *   frag<U>  4 warps per 8 rows, warp = chain, lane (g, c) 16 bytes of row g per chunk: the decode kernel's map (each
 *            load instruction reads 64 bytes of each of 8 rows), two register buffers of U chunks;
 *   rowc<U>  (loads only) 4 warps per 8 rows, a warp 2 rows, each load instruction 512 bytes of one row;
 *   ring<W,S> W warps per block, a warp all four chains of 8 rows, its rows copied by cp.async in 512-byte runs into
 *            a ring of S stages of shared memory (8 rows x 256 columns a stage), fragments read from there;
 *   "L2"     frag with the decode kernel's loads (ld_w16: L2 asked for the whole 128-byte line);
 *   lin<U>   (loads only) the block's 8 adjacent rows as one region read in order (the pure stream);
 * first the device copy bandwidth (bytes read + written a second, as `genparity bench` reports against), then, the
 * lm_head's shapes, fragy: frag4 "L2" with the decode kernel's sum of chains and 32-byte store, to device memory or
 * pinned host memory (the logits), and on looping blocks ("loop": as many as fit at once, or 4 a multiprocessor).
 * Measured on an H100 (2026-11-27, BENCHMARKS.md): 512-byte runs stream 3-7% faster than frag8's pieces when only
 * loading, 1-4% (ring) with the products; in the decode step itself the ring kernel was slower (fewer warps a row).
 * On an H200 (2026-11-29): the copy 4.1 TB/s; the lm_heads' shapes 4.4-4.6 TB/s in every map, pinned or device
 * outputs alike; 1,024-column rows 2.6-2.8 TB/s at 6,144 rows, 1.3-1.4 at 1,024 (too few bytes to ramp up).
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe tools/cuda_stream_probe.cu && /tmp/probe
 *   (/tmp/probe y: the lm_head's outputs only)
 */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>
#define CHAINS 4
__device__ __forceinline__ int64_t chain_chunk(int ch, int64_t k) { return 2 * (ch + CHAINS * (k >> 1)) + (k & 1); }
__device__ __forceinline__ void mma16816(float *d, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}
/* one chunk's two products (token rows past 0 zero), or, without MMA, a cheap use of the loaded bytes */
template <bool MMA>
__device__ __forceinline__ void eat(float *acc, uint4 a, uint4 b) {
    if (MMA) mma16816(acc, a.x, a.y, b.x, b.y), mma16816(acc, a.z, a.w, b.z, b.w);
    else acc[0] += __uint_as_float((b.x ^ b.y ^ b.z ^ b.w) & 0x3f800000u);
}
__device__ __forceinline__ void stage(uint4 *xs, int64_t cols) {
    for (int64_t i = threadIdx.x; i < cols / 8; i += blockDim.x) xs[i] = make_uint4(0x3f803f80u, 0, 0, 0x3f80u);
    __syncthreads();
}
__device__ __forceinline__ void keep(float *out, const float *acc) {
    if (acc[0] == 12345.0f) out[0] = acc[1];
}

/* 16 bytes streamed (evict-first); L2 = true also asks L2 for the whole 128-byte line (ld_w16 in cuda_mma.cu) */
template <bool L2>
__device__ __forceinline__ uint4 ldw(const void *p) {
    if (!L2) return __ldcs((const uint4 *)p);
    uint4 u;
    asm volatile("ld.global.cs.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    return u;
}

/* chain w of the 8 rows at row (lane (g, c)'s 16 bytes a chunk) into acc: two register buffers of U chunks, the
 * next one's loads in flight while this one's are eaten; between the first loads and the first products, before()
 * (frag stages the token there, so that the first loads stream meanwhile; fragy's later groups do nothing) */
template <bool MMA, int U, bool L2, typename Before>
__device__ __forceinline__ void chain_frag(float *acc, const uint16_t *row, const uint4 *xs, int w, int c,
                                           int64_t kmax, Before before) {
    uint4 b[2][U];
    auto load = [&](int h, int64_t k0) {
#pragma unroll
        for (int u = 0; u < U; u++) b[h][u] = ldw<L2>(row + chain_chunk(w, k0 + u) * 32);
    };
    auto mul = [&](int h, int64_t k0) {
#pragma unroll
        for (int u = 0; u < U; u++) eat<MMA>(acc, xs[chain_chunk(w, k0 + u) * 4 + c], b[h][u]);
    };
    load(0, 0), load(1, U);
    before();
    for (int64_t k = 0; k < kmax; k += 2 * U) {
        mul(0, k);
        if (k + 2 * U < kmax) load(0, k + 2 * U);
        mul(1, k + U);
        if (k + 3 * U < kmax) load(1, k + 3 * U);
    }
}

template <bool MMA, int U, bool L2 = false>
__global__ void __launch_bounds__(128) frag(const uint16_t *W, int64_t cols, float *out) {
    extern __shared__ uint4 xs[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const uint16_t *row = W + ((int64_t)blockIdx.x * 8 + g) * cols + 8 * c;
    float acc[4] = {0, 0, 0, 0};
    chain_frag<MMA, U, L2>(acc, row, xs, w, c, cols / 32 / CHAINS, [&] { stage(xs, cols); });
    keep(out, acc);
}

/* (loads only) the block's 8 rows (adjacent, so one contiguous region) read in order: each load instruction of the
 * block's 4 warps 2 KB in a row, U a thread in flight in each of two buffers */
template <int U>
__global__ void __launch_bounds__(128) lin(const uint16_t *W, int64_t cols, float *out) {
    const uint4 *p = (const uint4 *)(W + (int64_t)blockIdx.x * 8 * cols) + threadIdx.x;
    const int64_t n = cols / 128; /* the 8 rows are cols 16-byte units: cols / 128 loads a thread */
    float acc[4] = {0, 0, 0, 0};
    uint4 b[2][U];
    auto load = [&](int h, int64_t s0) {
#pragma unroll
        for (int u = 0; u < U; u++) b[h][u] = __ldcs(p + (s0 + u) * 128);
    };
    auto mul = [&](int h) {
#pragma unroll
        for (int u = 0; u < U; u++) eat<false>(acc, b[h][u], b[h][u]);
    };
    load(0, 0), load(1, U);
    for (int64_t s = 0; s < n; s += 2 * U) {
        mul(0);
        if (s + 2 * U < n) load(0, s + 2 * U);
        mul(1);
        if (s + 3 * U < n) load(1, s + 3 * U);
    }
    keep(out, acc);
}

/* frag4 with the L2 hint and the decode kernel's epilogue: the 4 chains summed through shared memory, then lanes 0..7
 * of warp 0 store the block's 8 outputs in one 32-byte write to y (device memory, or pinned host memory as the
 * lm_head's logits); PERSIST: a grid of fewer blocks, each taking groups of 8 rows blockIdx.x, + gridDim.x, .. */
template <bool PERSIST>
__global__ void __launch_bounds__(128) fragy(const uint16_t *W, int64_t cols, float *y, int64_t groups) {
    constexpr int U = 4;
    extern __shared__ uint4 xs[];
    __shared__ float part[CHAINS][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int64_t kmax = cols / 32 / CHAINS;
    stage(xs, cols);
    for (int64_t grp = blockIdx.x; grp < groups; grp += PERSIST ? gridDim.x : groups) {
        const uint16_t *row = W + (grp * 8 + g) * cols + 8 * c;
        float acc[4] = {0, 0, 0, 0};
        chain_frag<true, U, true>(acc, row, xs, w, c, kmax, [] {});
        part[w][lane] = acc[0] + acc[1];
        __syncthreads();
        if (w == 0) {
            const float v = ((part[0][lane] + part[1][lane]) + part[2][lane]) + part[3][lane];
            const float o = __shfl_sync(~0u, v, 4 * lane);
            if (lane < 8) y[grp * 8 + lane] = o;
        }
        __syncthreads();
    }
}

template <int U>
__global__ void __launch_bounds__(128) rowc(const uint16_t *W, int64_t cols, float *out) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t steps = cols / 256;
    const uint16_t *p0 = W + ((int64_t)blockIdx.x * 8 + 2 * w) * cols + 8 * lane, *p1 = p0 + cols;
    float acc[4] = {0, 0, 0, 0};
    uint4 b[2][U];
    auto load = [&](int h, int64_t s0) {
#pragma unroll
        for (int u = 0; u < U; u++) b[h][u] = __ldcs((const uint4 *)((u & 1 ? p1 : p0) + (s0 + u / 2) * 256));
    };
    auto mul = [&](int h) {
#pragma unroll
        for (int u = 0; u < U; u++) eat<false>(acc, b[h][u], b[h][u]);
    };
    load(0, 0), load(1, U / 2);
    for (int64_t s = 0; s < steps; s += U) {
        mul(0);
        if (s + U < steps) load(0, s + U);
        mul(1);
        if (s + 3 * U / 2 < steps) load(1, s + 3 * U / 2);
    }
    keep(out, acc);
}

template <bool MMA, int WPB, int S>
__global__ void __launch_bounds__(32 * WPB) ring(const uint16_t *W, int64_t cols, float *out) {
    extern __shared__ uint4 dyn[];
    uint4 *xs = dyn + (size_t)WPB * S * 256;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    uint4 *rb = dyn + (size_t)w * S * 256;
    const int64_t segs = cols / 256;
    const uint16_t *p = W + ((int64_t)blockIdx.x * WPB + w) * 8 * cols + 8 * lane;
    float acc[4][4] = {};
    auto issue = [&](int64_t s) {
        if (s < segs)
#pragma unroll
            for (int i = 0; i < 8; i++) {
                uint4 *dst = rb + ((s % S) * 8 + i) * 32 + (lane ^ ((i & 1) << 2));
                const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(p + i * cols + s * 256));
            }
        asm volatile("cp.async.commit_group;");
    };
    for (int s = 0; s < S - 1; s++) issue(s);
    stage(xs, cols);
    for (int64_t s = 0; s < segs; s++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 2));
        __syncwarp();
        issue(s + S - 1);
        const uint4 *t = rb + (s % S) * 256 + g * 32;
#pragma unroll
        for (int j = 0; j < 8; j++)
            eat<MMA>(acc[j >> 1], xs[(s * 256 + j * 32) / 8 + c], t[(4 * j + c) ^ ((g & 1) << 2)]);
    }
    float sum[4];
    for (int e = 0; e < 4; e++) sum[e] = ((acc[0][e] + acc[1][e]) + acc[2][e]) + acc[3][e];
    keep(out, sum);
}

/* times kernel k over [rows][cols] (skipped when the shape is not a whole number of its steps: `step` columns) */
template <typename K>
static void run(const char *name, K k, int threads, int rows_per_block, size_t smem, int64_t step,
                const uint16_t *W, int64_t rows, int64_t cols, float *out) {
    if (cols % step || rows % rows_per_block) return;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    const int grid = (int)(rows / rows_per_block), reps = 20;
    k<<<grid, threads, smem>>>(W, cols, out);
    cudaEventRecord(e0);
    for (int i = 0; i < reps; i++) k<<<grid, threads, smem>>>(W, cols, out);
    cudaEventRecord(e1), cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("%-12s %6lld x %-6lld %8.1f us %6.0f GB/s  %s\n", name, (long long)rows, (long long)cols, ms * 1e3 / reps,
           (double)rows * cols * 2 * reps / (ms * 1e6), cudaGetErrorString(cudaGetLastError()));
}

/* fragy over [rows][cols] into y: one block a group of 8 rows, or `grid` blocks looping over them */
static void run_y(const char *name, bool persist, int grid, const uint16_t *W, int64_t rows, int64_t cols, float *y) {
    if (cols % 1024 || rows % 8) return;
    const size_t smem = cols * 2;
    auto k = persist ? fragy<true> : fragy<false>;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    const int64_t groups = rows / 8;
    const int g = persist ? grid : (int)groups, reps = 20;
    k<<<g, 128, smem>>>(W, cols, y, groups);
    cudaEventRecord(e0);
    for (int i = 0; i < reps; i++) k<<<g, 128, smem>>>(W, cols, y, groups);
    cudaEventRecord(e1), cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("%-16s %6lld x %-6lld grid %6d %8.1f us %6.0f GB/s  %s\n", name, (long long)rows, (long long)cols, g,
           ms * 1e3 / reps, (double)rows * cols * 2 * reps / (ms * 1e6), cudaGetErrorString(cudaGetLastError()));
}

int main(int argc, char **argv) {
    const int64_t shapes[][2] = {{28672, 4096}, {4096, 14336}, {6144, 4096}, {128256, 4096}, {16384, 2048},
                                 {2048, 8192},  {128256, 2048}, {6144, 1024}, {1024, 3072}, {151936, 1024}};
    uint16_t *W;
    float *out;
    if (cudaMalloc(&W, (size_t)128256 * 4096 * 2) != cudaSuccess || cudaMalloc(&out, 4) != cudaSuccess) return 1;
    cudaMemset(W, 0, (size_t)128256 * 4096 * 2);
    { /* the copy bandwidth genparity bench reports against: bytes read + written a second, 1 GiB, best of 5 */
        const size_t half = (size_t)128256 * 4096;
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        float best = 1e30f;
        for (int i = 0; i < 6; i++) {
            float ms = 0;
            cudaEventRecord(e0);
            cudaMemcpy((char *)W + half, W, half, cudaMemcpyDeviceToDevice);
            cudaEventRecord(e1), cudaEventSynchronize(e1), cudaEventElapsedTime(&ms, e0, e1);
            if (i && ms < best) best = ms;
        }
        printf("copy %zu MB: %.0f GB/s (read + written)\n", half >> 20, 2.0 * half / (best * 1e6));
    }
    { /* the lm_head's outputs: to device memory, to pinned host memory, and with fewer blocks that loop */
        float *yd, *yh;
        int sms = 0, per = 0;
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
        if (cudaMalloc(&yd, 160000 * 4) != cudaSuccess || cudaMallocHost(&yh, 160000 * 4) != cudaSuccess) return 1;
        const int64_t heads[][2] = {{151936, 1024}, {128256, 2048}, {128256, 4096}};
        for (const auto &sh : heads)
            for (int rep = 0; rep < 2; rep++) {
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fragy<true>, 128, sh[1] * 2);
                run_y("y device", false, 0, W, sh[0], sh[1], yd);
                run_y("y host", false, 0, W, sh[0], sh[1], yh);
                run_y("y host loop", true, per * sms, W, sh[0], sh[1], yh);
                run_y("y host loop 4/SM", true, 4 * sms, W, sh[0], sh[1], yh);
                run_y("y device loop", true, per * sms, W, sh[0], sh[1], yd);
            }
        if (argc > 1) return 0;
    }
    for (const auto &sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1];
        const size_t xb = cols * 2;
        run("frag4", frag<false, 4>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("frag8", frag<false, 8>, 128, 8, xb, 32 * CHAINS * 16, W, rows, cols, out);
        run("frag4 L2", frag<false, 4, true>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("frag8 L2", frag<false, 8, true>, 128, 8, xb, 32 * CHAINS * 16, W, rows, cols, out);
        run("lin4", lin<4>, 128, 8, 0, 1024, W, rows, cols, out);
        run("lin8", lin<8>, 128, 8, 0, 2048, W, rows, cols, out);
        run("rowc8", rowc<8>, 128, 8, 0, 256 * 8, W, rows, cols, out);
        run("ring2x4", ring<false, 2, 4>, 64, 16, xb + 2 * 4 * 4096, 256, W, rows, cols, out);
        run("mma frag4", frag<true, 4>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("mma frag8", frag<true, 8>, 128, 8, xb, 32 * CHAINS * 16, W, rows, cols, out);
        run("mma frag4 L2", frag<true, 4, true>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("mma ring2x4", ring<true, 2, 4>, 64, 16, xb + 2 * 4 * 4096, 256, W, rows, cols, out);
        run("mma ring1x8", ring<true, 1, 8>, 32, 8, xb + 8 * 4096, 256, W, rows, cols, out);
    }
    return 0;
}
