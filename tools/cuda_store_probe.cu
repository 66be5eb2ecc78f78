/* tools/cuda_store_probe.cu — a probe of a GEMM epilogue's writes on the GPU machine (the evidence for what bounds
 * wg_gemm_kernel's stores, src/kernels/cuda/cuda_mma.cu): a grid of one 256-thread block a multiprocessor, each
 * writing a tile of 128 tokens x 128 float32 outputs into y [512][R] as the whole GEMMs do (a warp 32 adjacent
 * outputs of one token an instruction, 64 a thread), for row strides R = the bench shapes' output widths and the
 * same plus 4 floats; then the same bytes as one contiguous 64 KB run a block, and empty blocks (the launches' own
 * time); again with 256 MB written before each launch (a cold L2).  Prints µs a launch (the mean of 50 after a
 * warm-up, each timed alone) and GB/s.  `store_probe carveout`: the tiles (R 4,096, cold L2) by the shared memory
 * each block holds (0 to 224 KB: L1 gets what shared memory leaves of 256 KB) and 256 or 384 threads (the GEMM's).
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/store_probe tools/cuda_store_probe.cu
 *   /tmp/store_probe [carveout]
 */
#include <cstdint>
#include <cstdio>

/* block b: token tile b % 4, row tile b / 4 of y [512][R] (R >= 128 * row tiles); or a contiguous run (R == 0) */
__global__ void __launch_bounds__(384, 1) tile_store(float *y, int64_t R) {
    const int b = blockIdx.x;
    if (R < 0 || threadIdx.x >= 256) return; /* the launch alone; a GEMM block's producer warps */
    if (R == 0) {
        float4 *o = (float4 *)(y + (size_t)b * 128 * 128);
        for (int i = threadIdx.x; i < 128 * 128 / 4; i += 256) o[i] = make_float4((float)i, 1.0f, 2.0f, 3.0f);
        return;
    }
    const int64_t t0 = (b % 4) * 128, r0 = (b / 4) * 128;
#pragma unroll 1
    for (int k = threadIdx.x; k < 128 * 128; k += 256) y[(size_t)(t0 + (k >> 7)) * R + r0 + (k & 127)] = (float)k;
}

int main(int argc, char **argv) {
    (void)argv;
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int blocks = sms / 4 * 4;
    const int64_t widths[] = {1024, 2048, 4096, 6144, 14336};
    float *y;
    if (cudaMalloc(&y, (size_t)512 * (14336 + 4) * 4 + (size_t)blocks * 65536) != cudaSuccess) return 1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    void *big = NULL; /* written between launches in the cold runs: L2 (50-60 MB) holds none of y then */
    if (cudaMalloc(&big, (size_t)256 << 20) != cudaSuccess) return 1;
    cudaFuncSetAttribute(tile_store, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 << 10);
    int threads = 256, smem = 0; /* the launch's shape: a GEMM block's with 384 and its ring's shared memory */
    auto run = [&](int64_t R, const char *what, bool cold = false) {
        const int nb = R > 0 ? (int)(R / 128 * 4 < blocks ? R / 128 * 4 : blocks) : blocks;
        tile_store<<<nb, threads, smem>>>(y, R);
        float ms = 0;
        for (int i = 0; i < 50; i++) {
            float one = 0;
            if (cold) cudaMemsetAsync(big, i, (size_t)256 << 20);
            cudaEventRecord(e0);
            tile_store<<<nb, threads, smem>>>(y, R);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&one, e0, e1);
            ms += one;
        }
        const double us = ms * 1e3 / 50, bytes = (double)nb * 65536;
        printf("%-28s R %6lld, %3d blocks%s, %d threads, %3d KB shared: %7.2f us a launch, %7.1f GB/s (%s)\n", what,
               (long long)R, nb, cold ? ", cold L2" : "", threads, smem >> 10, us, bytes / us / 1e3,
               cudaGetErrorString(cudaGetLastError()));
    };
    if (argc > 1) { /* "carveout": a tile's writes by the shared memory a block holds (L1 is the rest of 256 KB) */
        for (int sm : {0, 96, 160, 192, 224})
            for (int th : {256, 384}) {
                smem = sm << 10, threads = th;
                run(4096, "tiles, the shape's width", true);
                run(-1, "empty blocks (the launches)", true);
            }
        return 0;
    }
    for (int64_t w : widths) run(w, "tiles, the shape's width");
    for (int64_t w : widths) run(w + 4, "tiles, width + 4 floats");
    run(0, "contiguous 64 KB a block");
    run(-1, "empty blocks (the launches)");
    for (int64_t w : widths) run(w, "tiles, the shape's width", true);
    run(0, "contiguous 64 KB a block", true);
    run(-1, "empty blocks (the launches)", true);
    return 0;
}
