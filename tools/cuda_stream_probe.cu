/* tools/cuda_stream_probe.cu — how fast one-token bf16 projections can stream their weights on the GPU machine,
 * by the map of weight bytes to lanes (the evidence for keeping mma_decode_kernel's register loads in
 * src/kernels/cuda/cuda_mma.cu).  Each kernel reads a bf16 matrix [rows][cols] once per launch (20 launches, after
 * one warm-up; shapes larger than the 50 MB L2) and, with MMA=1, multiplies it by a staged bf16 token as decode does
 * (four chains of mma.sync m16n8k16); it prints µs a launch and GB/s:
 *   frag<U>  4 warps per 8 rows, warp = chain, lane (g, c) 16 bytes of row g per chunk: the decode kernel's map (each
 *            load instruction reads 64 bytes of each of 8 rows), two register buffers of U chunks;
 *   rowc<U>  (loads only) 4 warps per 8 rows, a warp 2 rows, each load instruction 512 bytes of one row;
 *   ring<W,S> W warps per block, a warp all four chains of 8 rows, its rows copied by cp.async in 512-byte runs into
 *            a ring of S stages of shared memory (8 rows x 256 columns a stage), fragments read from there.
 * Measured on an H100 (2026-11-27, BENCHMARKS.md): 512-byte runs stream 3-7% faster than frag8's pieces when only
 * loading, 1-4% (ring) with the products; in the decode step itself the ring kernel was slower (fewer warps a row).
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe tools/cuda_stream_probe.cu && /tmp/probe
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

template <bool MMA, int U>
__global__ void __launch_bounds__(128) frag(const uint16_t *W, int64_t cols, float *out) {
    extern __shared__ uint4 xs[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int64_t kmax = cols / 32 / CHAINS;
    const uint16_t *row = W + ((int64_t)blockIdx.x * 8 + g) * cols + 8 * c;
    float acc[4] = {0, 0, 0, 0};
    uint4 b[2][U];
    auto load = [&](int h, int64_t k0) {
#pragma unroll
        for (int u = 0; u < U; u++) b[h][u] = __ldcs((const uint4 *)(row + chain_chunk(w, k0 + u) * 32));
    };
    auto mul = [&](int h, int64_t k0) {
#pragma unroll
        for (int u = 0; u < U; u++) eat<MMA>(acc, xs[chain_chunk(w, k0 + u) * 4 + c], b[h][u]);
    };
    load(0, 0), load(1, U);
    stage(xs, cols);
    for (int64_t k = 0; k < kmax; k += 2 * U) {
        mul(0, k);
        if (k + 2 * U < kmax) load(0, k + 2 * U);
        mul(1, k + U);
        if (k + 3 * U < kmax) load(1, k + 3 * U);
    }
    keep(out, acc);
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

int main() {
    const int64_t shapes[][2] = {{28672, 4096}, {4096, 14336}, {6144, 4096}, {128256, 4096}, {16384, 2048}};
    uint16_t *W;
    float *out;
    if (cudaMalloc(&W, (size_t)128256 * 4096 * 2) != cudaSuccess || cudaMalloc(&out, 4) != cudaSuccess) return 1;
    cudaMemset(W, 0, (size_t)128256 * 4096 * 2);
    for (const auto &sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1];
        const size_t xb = cols * 2;
        run("frag4", frag<false, 4>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("frag8", frag<false, 8>, 128, 8, xb, 32 * CHAINS * 16, W, rows, cols, out);
        run("rowc8", rowc<8>, 128, 8, 0, 256 * 8, W, rows, cols, out);
        run("ring2x4", ring<false, 2, 4>, 64, 16, xb + 2 * 4 * 4096, 256, W, rows, cols, out);
        run("mma frag4", frag<true, 4>, 128, 8, xb, 32 * CHAINS * 8, W, rows, cols, out);
        run("mma frag8", frag<true, 8>, 128, 8, xb, 32 * CHAINS * 16, W, rows, cols, out);
        run("mma ring2x4", ring<true, 2, 4>, 64, 16, xb + 2 * 4 * 4096, 256, W, rows, cols, out);
        run("mma ring1x8", ring<true, 1, 8>, 32, 8, xb + 8 * 4096, 256, W, rows, cols, out);
    }
    return 0;
}
