/* tools/cuda_mma_bits.cu — a probe of the tensor cores' bf16 sums on the GPU machine (the evidence for
 * wg_gemm_kernel's operand order in src/kernels/cuda/cuda_mma.cu): for 4096 random 64 x 16 by 16 x 8 products plus
 * a float32 accumulator (narrow and wide exponents, large and zero accumulators) it compares, bit for bit, mma.sync
 * m16n8k16 with its k positions reversed, two m16n8k8 halves, and wgmma m64n8k16 from shared memory (no swizzle;
 * leading and stride offsets both ways, and reversed k), and prints each one's max error against float64.
 * Measured on an H100 (2026-11-26): reversed k and wgmma give mma.sync's bits in every case (one rounding of the 16
 * products and the accumulator, whatever their order); the k8 halves differ; only lbo = k-direction offset is right.
 *   nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a -o /tmp/mma_bits tools/cuda_mma_bits.cu && /tmp/mma_bits
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#define NT 4096
__device__ __forceinline__ void mma16816(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma1688(float *d, uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}
__device__ __forceinline__ uint64_t desc(const void *p, int lbo, int sbo) {
    uint64_t a = (uint64_t)((__cvta_generic_to_shared(p) >> 4) & 0x3FFF);
    return a | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32);
}
__device__ __forceinline__ void wg(float *d, uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db));
}
__device__ __forceinline__ uint32_t pk(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}
// out[trial][variant][64][8]; variants: 0 mma natural, 1 mma reversed k, 2 mma k8 x2, 3 wgmma natural (lbo=K,sbo=MN), 4
// wgmma swapped, 5 wgmma reversed
__global__ void k(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C, float *out, int perm_mode) {
    const int t = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const __nv_bfloat16 *a = A + (size_t)t * 64 * 16, *b = B + (size_t)t * 8 * 16;
    const float *cc = C + (size_t)t * 64 * 8;
    float *o = out + (size_t)t * 6 * 512;
    __shared__ __align__(128) __nv_bfloat16 sa[2][64 * 16], sb[2][8 * 16];
    auto pos = [&](int kk, int rev) { return rev ? 15 - kk : kk; };
    // smem core-matrix layout: element (row m, k) at core (m/8, k/8): offset ((m/8)*2 + k/8)*64 + (m%8)*8 + k%8
    // (elements)
    for (int i = tid; i < 64 * 16; i += 128) {
        int m = i / 16, kk = i % 16;
        for (int rev = 0; rev < 2; rev++)
            sa[rev][((m / 8) * 2 + kk / 8) * 64 + (m % 8) * 8 + kk % 8] = a[m * 16 + pos(kk, rev)];
    }
    for (int i = tid; i < 8 * 16; i += 128) {
        int n = i / 16, kk = i % 16;
        for (int rev = 0; rev < 2; rev++)
            sb[rev][(kk / 8) * 64 + n * 8 + kk % 8] = b[n * 16 + pos(kk, rev)];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int r0 = warp * 16;
    for (int rev = 0; rev < 2; rev++) {
        auto A_ = [&](int m, int kk) { return a[m * 16 + pos(kk, rev)]; };
        auto B_ = [&](int n, int kk) { return b[n * 16 + pos(kk, rev)]; };
        float d[4] = {cc[(r0 + g) * 8 + 2 * c], cc[(r0 + g) * 8 + 2 * c + 1], cc[(r0 + g + 8) * 8 + 2 * c],
                      cc[(r0 + g + 8) * 8 + 2 * c + 1]};
        mma16816(d, pk(A_(r0 + g, 2 * c), A_(r0 + g, 2 * c + 1)), pk(A_(r0 + g + 8, 2 * c), A_(r0 + g + 8, 2 * c + 1)),
                 pk(A_(r0 + g, 2 * c + 8), A_(r0 + g, 2 * c + 9)),
                 pk(A_(r0 + g + 8, 2 * c + 8), A_(r0 + g + 8, 2 * c + 9)), pk(B_(g, 2 * c), B_(g, 2 * c + 1)),
                 pk(B_(g, 2 * c + 8), B_(g, 2 * c + 9)));
        float *ov = o + rev * 512;
        ov[(r0 + g) * 8 + 2 * c] = d[0], ov[(r0 + g) * 8 + 2 * c + 1] = d[1], ov[(r0 + g + 8) * 8 + 2 * c] = d[2],
                              ov[(r0 + g + 8) * 8 + 2 * c + 1] = d[3];
    }
    {
        auto A_ = [&](int m, int kk) { return a[m * 16 + kk]; };
        auto B_ = [&](int n, int kk) { return b[n * 16 + kk]; };
        float d[4] = {cc[(r0 + g) * 8 + 2 * c], cc[(r0 + g) * 8 + 2 * c + 1], cc[(r0 + g + 8) * 8 + 2 * c],
                      cc[(r0 + g + 8) * 8 + 2 * c + 1]};
        for (int h = 0; h < 2; h++)
            mma1688(d, pk(A_(r0 + g, 8 * h + 2 * c), A_(r0 + g, 8 * h + 2 * c + 1)),
                    pk(A_(r0 + g + 8, 8 * h + 2 * c), A_(r0 + g + 8, 8 * h + 2 * c + 1)),
                    pk(B_(g, 8 * h + 2 * c), B_(g, 8 * h + 2 * c + 1)));
        float *ov = o + 2 * 512;
        ov[(r0 + g) * 8 + 2 * c] = d[0], ov[(r0 + g) * 8 + 2 * c + 1] = d[1], ov[(r0 + g + 8) * 8 + 2 * c] = d[2],
                              ov[(r0 + g + 8) * 8 + 2 * c + 1] = d[3];
    }
    for (int v = 0; v < 3; v++) {
        const int rev = v == 2;
        const int lbo = v == 1 ? 256 : 128,
                  sbo = v == 1 ? 128 : 256;              // A: K-adjacent cores 128 B apart, M-adjacent 256 B
        const int lbob = v == 1 ? 128 : 128, sbob = 128; // B: one core along N; K-adjacent 128 B apart
        float d[4] = {cc[(r0 + g) * 8 + 2 * c], cc[(r0 + g) * 8 + 2 * c + 1], cc[(r0 + g + 8) * 8 + 2 * c],
                      cc[(r0 + g + 8) * 8 + 2 * c + 1]};
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        wg(d, desc(sa[rev], lbo, sbo), desc(sb[rev], lbob, sbob));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        float *ov = o + (3 + v) * 512;
        ov[(r0 + g) * 8 + 2 * c] = d[0], ov[(r0 + g) * 8 + 2 * c + 1] = d[1], ov[(r0 + g + 8) * 8 + 2 * c] = d[2],
                              ov[(r0 + g + 8) * 8 + 2 * c + 1] = d[3];
    }
}
static uint32_t rs = 12345;
static uint32_t rnd() {
    rs ^= rs << 13;
    rs ^= rs >> 17;
    rs ^= rs << 5;
    return rs;
}
static float rbf(int emin, int emax) {
    float m = 1.0f + (rnd() % 128) / 128.0f;
    int e = emin + (int)(rnd() % (uint32_t)(emax - emin + 1));
    return (rnd() & 1 ? -1 : 1) * ldexpf(m, e);
}
int main() {
    size_t na = (size_t)NT * 64 * 16, nb = (size_t)NT * 8 * 16, nc = (size_t)NT * 512;
    __nv_bfloat16 *hA = (__nv_bfloat16 *)malloc(na * 2), *hB = (__nv_bfloat16 *)malloc(nb * 2);
    float *hC = (float *)malloc(nc * 4), *hO = (float *)malloc(nc * 6 * 4);
    for (int t = 0; t < NT; t++) {
        int wide = t % 4; // 0: narrow, 1: wide exponents, 2: C large, 3: C zero
        for (int i = 0; i < 1024; i++)
            hA[(size_t)t * 1024 + i] = __float2bfloat16(wide == 1 ? rbf(-12, 12) : rbf(-2, 2));
        for (int i = 0; i < 128; i++)
            hB[(size_t)t * 128 + i] = __float2bfloat16(wide == 1 ? rbf(-12, 12) : rbf(-2, 2));
        for (int i = 0; i < 512; i++)
            hC[(size_t)t * 512 + i] = wide == 3   ? 0.0f
                                      : wide == 2 ? rbf(4, 12) * (1 + (rnd() % 1000) / 1e4f)
                                                  : rbf(-3, 3) * (1 + (rnd() % 1000) / 1e4f);
    }
    __nv_bfloat16 *dA, *dB;
    float *dC, *dO;
    cudaMalloc(&dA, na * 2);
    cudaMalloc(&dB, nb * 2);
    cudaMalloc(&dC, nc * 4);
    cudaMalloc(&dO, nc * 6 * 4);
    cudaMemcpy(dA, hA, na * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB, nb * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, hC, nc * 4, cudaMemcpyHostToDevice);
    k<<<NT, 128>>>(dA, dB, dC, dO, 0);
    cudaError_t e = cudaDeviceSynchronize();
    printf("kernel: %s\n", cudaGetErrorString(e));
    cudaMemcpy(hO, dO, nc * 6 * 4, cudaMemcpyDeviceToHost);
    const char *nm[6] = {"mma", "mma_rev", "mma_k8x2", "wg", "wg_swapLS", "wg_rev"};
    for (int v = 0; v < 6; v++) {
        long diff[4] = {0};
        double maxrel = 0;
        for (int t = 0; t < NT; t++)
            for (int i = 0; i < 512; i++) {
                int m = i / 8, n = i % 8;
                double ref = hC[(size_t)t * 512 + i];
                for (int kk = 0; kk < 16; kk++)
                    ref += (double)__bfloat162float(hA[(size_t)t * 1024 + m * 16 + kk]) *
                           (double)__bfloat162float(hB[(size_t)t * 128 + n * 16 + kk]);
                float x = hO[((size_t)t * 6 + v) * 512 + i], y = hO[((size_t)t * 6 + 0) * 512 + i];
                if (memcmp(&x, &y, 4))
                    diff[t % 4]++;
                double sc = fabs(ref) > 1e-30 ? fabs(ref) : 1;
                double r = fabs(x - ref) / sc;
                if (r > maxrel && t % 4 != 1)
                    maxrel = r;
            }
        printf("%-10s differs from mma in %ld/%ld/%ld/%ld (narrow/wide/Cbig/C0) of %d; max rel err vs f64 (not wide) "
               "%.3g\n",
               nm[v], diff[0], diff[1], diff[2], diff[3], NT / 4 * 512, maxrel);
    }
    return 0;
}
