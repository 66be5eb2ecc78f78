/* tools/cuda_kv_copy.cu — how fast decode attention's bf16 keys and values can reach shared memory on the GPU
 * machine, by the cache's layout (the evidence for keeping [position][kv head][head_dim]).  The 8B-class shape at
 * 8,192 held tokens: 8 kv heads x 128, 33.5 MB of keys and values a layer, staged by cp.async in splits of 64 rows
 * with attn_split16_kernel's grid (33 x 8 blocks of 256 threads, 2 a multiprocessor by their shared memory, each
 * taking splits 127 - b, 94 - b, ... in turn) and nothing computed:
 *   LAY 0  the cache's layout, a split's rows 256 bytes each, 2 KB apart;  LAY 1  a kv head's rows together;
 *   NB     splits in flight a block (1, or 2 by two buffers);
 * then a plain streaming read of the same bytes.  Six layers' rows in turn (201 MB, past the 50 MB L2), 60 launches
 * after 12 warm-ups; prints µs a launch and TB/s.  Measured on an H200 (2026-11-29, BENCHMARKS.md): 10.5-10.9 µs,
 * 3.1-3.2 TB/s in both layouts, the plain read 3.3 TB/s.
 * Build and run:
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -o /tmp/kv_copy tools/cuda_kv_copy.cu && /tmp/kv_copy */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#define HD 128
#define NKV 8
#define NPOS 8192
#define SPLIT 64

__device__ __forceinline__ void cp16(void *s, const void *g) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

/* Split s of kv head h into ks, vs, one cp.async group: padded rows, keys hd + 32 as split_decode16's, values hd + 16
 * (split_decode16's are hd + 8: 272 bytes apart, not 288). */
template <int LAY>
__device__ __forceinline__ void stage(const uint16_t *K, const uint16_t *V, int s, int h, uint16_t *ks, uint16_t *vs) {
    for (int t = threadIdx.x; t < SPLIT * HD / 8; t += blockDim.x) {
        const int i = t / (HD / 8), f = t % (HD / 8), j = s * SPLIT + i;
        const size_t r = LAY == 0 ? ((size_t)j * NKV + h) : ((size_t)h * NPOS + j);
        cp16(ks + i * (HD + 32) + 8 * f, K + r * HD + 8 * f);
        cp16(vs + i * (HD + 16) + 8 * f, V + r * HD + 8 * f);
    }
    commit();
}

template <int LAY, int NB>
__global__ void __launch_bounds__(256, 2) kv_copy(const uint16_t *K, const uint16_t *V, float *sink) {
    extern __shared__ uint16_t sm[];
    const int tb = SPLIT * (2 * HD + 48), vo = SPLIT * (HD + 32); /* a buffer; its values after its keys */
    const int nb = gridDim.x, h = blockIdx.y, ns = NPOS / SPLIT;
    int idx = ns - 1 - blockIdx.x, issued = idx, b = 0, inflight = 0;
    for (int k = 0; k < NB && issued >= 0; k++, issued -= nb, inflight++)
        stage<LAY>(K, V, issued, h, sm + k * tb, sm + k * tb + vo);
    float acc = 0;
    for (; idx >= 0; idx -= nb) {
        if (inflight >= 2) wait<1>();
        else wait<0>();
        inflight--;
        __syncthreads();
        acc += __uint_as_float((unsigned)sm[b * tb + threadIdx.x] << 16);
        __syncthreads();
        if (issued >= 0) {
            stage<LAY>(K, V, issued, h, sm + b * tb, sm + b * tb + vo);
            issued -= nb, inflight++;
        }
        b = (b + 1) % NB;
    }
    wait<0>();
    if (acc == 12345.f) sink[0] = acc;
}

__global__ void plain_read(const uint4 *p, size_t n, float *sink) {
    unsigned x = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x12345) sink[0] = x;
}

typedef void (*copy_kernel)(const uint16_t *, const uint16_t *, float *);

int main() {
    const size_t half = (size_t)NPOS * NKV * HD * 2, L = 6; /* bytes of a layer's keys; 6 layers: 201 MB > L2 */
    uint16_t *buf;
    float *sink;
    cudaMalloc(&buf, 2 * half * L);
    cudaMalloc(&sink, 4);
    cudaMemset(buf, 0, 2 * half * L);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int dev, nsm;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
    const int nb = nsm * 2 / NKV;
    const size_t smb = 2 * (size_t)SPLIT * (2 * HD + 48) * 2;
    const copy_kernel ks[4] = {kv_copy<0, 1>, kv_copy<0, 2>, kv_copy<1, 1>, kv_copy<1, 2>};
    const char *nm[4] = {"cache layout, 1 in flight", "cache layout, 2 in flight", "head-major, 1 in flight",
                         "head-major, 2 in flight"};
    for (int i = 0; i < 4; i++) cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smb);
    const auto layer = [&](int w) { return buf + (w % L) * half; }; /* layer w's keys, then its values */
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < 4; i++) {
            const int R = 60;
            for (int w = 0; w < 12; w++) ks[i]<<<dim3(nb, NKV), 256, smb>>>(layer(w), layer(w) + half / 2, sink);
            cudaEventRecord(e0);
            for (int w = 0; w < R; w++) ks[i]<<<dim3(nb, NKV), 256, smb>>>(layer(w), layer(w) + half / 2, sink);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            printf("%-28s %6.2f us a launch, %5.2f TB/s (grid %d x %d, %zu B smem)\n", nm[i], 1000 * ms / R,
                   2.0 * half / (ms / R * 1e-3) / 1e12, nb, NKV, smb);
        }
        for (int w = 0; w < 3; w++) plain_read<<<nsm * 8, 512>>>((const uint4 *)buf, 2 * half / 16, sink);
        cudaEventRecord(e0);
        for (int w = 0; w < 60; w++) plain_read<<<nsm * 8, 512>>>((const uint4 *)layer(w), 2 * half / 16, sink);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("%-28s %6.2f us a launch, %5.2f TB/s\n", "plain streaming read", 1000 * ms / 60,
               2.0 * half / (ms / 60 * 1e-3) / 1e12);
    }
    printf("%s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
