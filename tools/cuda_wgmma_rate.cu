/* tools/cuda_wgmma_rate.cu — a probe of wgmma's rate on the GPU machine, the evidence for what bounds
 * wg_gemm_kernel's consumer loop (src/kernels/cuda/cuda_mma.cu): one block a multiprocessor, W consumer warpgroups,
 * each looping over stages of 4 wgmma m64nNk16 (64 columns) committed as one group, then wgmma.wait_group D, with
 * A (64 rows x 16) from registers refreshed from shared memory each stage (RS, as wg_gemm_kernel) or from shared
 * memory (SS); no copies from global memory, the operands zeros or random.  RING adds wg_gemm_kernel's handshake: a
 * full mbarrier a stage (marked by a producer warp) and an empty one freed a stage later.  Prints TFLOP/s.
 * Measured on an H200 (2026-11-28, BENCHMARKS.md): RS m64n128 with two warpgroups and one group in flight 969
 * (random operands 949, with the ring 856), SS n128 and n256 about the same (955, 953): the loop's instructions and
 * operand source are not what holds wg_gemm_kernel near half of that; the ring's handshake costs about 10%.
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o /tmp/wgrate tools/cuda_wgmma_rate.cu
 *   /tmp/wgrate
 */
#include "kernels/cuda/cuda_wgmma.cuh" /* wgmma_n128 (RS), wg_desc, the fences and mbarriers: the kernel's own */

#include <cstdint>
#include <cstdio>
#include <type_traits>

/* d += A * B, A and B from shared memory (descriptors) */
__device__ __forceinline__ void wg_ss_n128(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "%64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63])
                 : "l"(a), "l"(b)
                 : "memory");
}
__device__ __forceinline__ void wg_ss_n256(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
                 "%128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
                   "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                   "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
                   "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
                   "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
                   "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
                   "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
                   "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
                   "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
                   "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
                   "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
                   "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
                   "+f"(d[126]), "+f"(d[127])
                 : "l"(a), "l"(b)
                 : "memory");
}

__device__ __forceinline__ uint32_t mix(uint32_t x) { /* a hash: operands in [-1, 1) as bf16 pairs */
    x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU, x ^= x >> 16;
    return (x & 0x807f807fU) | 0x3f003f00U; /* sign, exponent 2^-1, 7 mantissa bits each half */
}

/* RAND: random operands (zeros otherwise); RING: each stage waits for a full mbarrier that a producer warp marks
 * and frees the stage before it through an empty mbarrier (wg_gemm_kernel's ring of S stages, without copies) */
template <int N, bool RS, int D, bool RAND = false, bool RING = false>
__global__ void __launch_bounds__(288, 1) rate_kernel(int iters, float *out, int wgs) {
    static_assert(!RS || N == 128, "A from registers: m64n128 (the kernel's)");
    constexpr int R = N / 2, S = 7;
    extern __shared__ __align__(1024) uint4 sm[]; /* [2][64 rows x 8 units] A, then [N x 8 units] B, barriers */
    for (int i = threadIdx.x; i < (2 * 64 + N) * 8; i += blockDim.x) {
        const uint32_t h = RAND ? 4 * i : 0;
        sm[i] = RAND ? make_uint4(mix(h), mix(h + 1), mix(h + 2), mix(h + 3)) : make_uint4(0, 0, 0, 0);
    }
    uint64_t *full = (uint64_t *)(sm + (2 * 64 + N) * 8), *empty = full + S;
    if (threadIdx.x == 0)
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 4 * wgs);
    __syncthreads();
    const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    if (__shfl_sync(~0u, threadIdx.x >> 7, 0) >= wgs) { /* the producer warp */
        if (RING && lane == 0)
            for (int i = 0; i < iters; i++) {
                if (i >= S) mbar_wait(&empty[i % S], ((i / S) & 1) ^ 1);
                mbar_arrive(&full[i % S]);
            }
        return;
    }
    const uint4 *A = sm + wg * 64 * 8, *B = sm + 2 * 64 * 8;
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; i++) acc[i] = 0.0f;
    uint4 a[2][2][2]; /* two stages' fragments: one may still be read by the group in flight */
    int i = 0; /* stages begun */
    auto stage = [&](auto par) {
        constexpr int pr = decltype(par)::value;
        (void)pr;
        if constexpr (RING) mbar_wait(&full[i % S], (i / S) & 1);
        if constexpr (RS)
#pragma unroll
            for (int h = 0; h < 2; h++) /* the fragments, as wg_gemm_kernel reads them */
                a[pr][h][0] = A[wg_unit(16 * warp + (lane >> 2), 4 * h + (lane & 3))],
                a[pr][h][1] = A[wg_unit(16 * warp + (lane >> 2) + 8, 4 * h + (lane & 3))];
        wg_fence();
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int p = 0; p < 2; p++) {
                if constexpr (RS) wgmma_n128(acc, a[pr][h][0], a[pr][h][1], p, wg_desc(B + 4 * h + 2 * p));
                else if constexpr (N == 128) wg_ss_n128(acc, wg_desc(A + 4 * h + 2 * p), wg_desc(B + 4 * h + 2 * p));
                else wg_ss_n256(acc, wg_desc(A + 4 * h + 2 * p), wg_desc(B + 4 * h + 2 * p));
            }
        wg_commit();
        wg_wait<D>();
        if (RING && i > 0 && lane == 0) mbar_arrive(&empty[(i - 1) % S]); /* the stage before: its group done */
        i++;
        if constexpr (RS) /* the last stage's fragments live until its group is done (here): not reused before */
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int r = 0; r < 2; r++)
                    asm volatile("" ::"r"(a[1 - pr][h][r].x), "r"(a[1 - pr][h][r].y), "r"(a[1 - pr][h][r].z),
                                 "r"(a[1 - pr][h][r].w));
    };
#pragma unroll 1
    for (int it = 0; it < iters; it += 2)
        stage(std::integral_constant<int, 0>()), stage(std::integral_constant<int, 1>());
    wg_wait<0>();
    wg_hold(acc); /* read only after the wait */
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < R; i++) s += acc[i];
    if (s != 0.0f) out[threadIdx.x] = s;
}

template <int N, bool RS, int D, bool RAND = false, bool RING = false>
static void run(const char *name, int wgs, int sms, float *out) {
    const size_t smem = (size_t)(2 * 64 + N) * 128 + 16 * 7;
    auto k = rate_kernel<N, RS, D, RAND, RING>;
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    const int iters = 20000;
    k<<<sms, 128 * wgs + 32, smem>>>(100, out, wgs);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0);
    k<<<sms, 128 * wgs + 32, smem>>>(iters, out, wgs);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    const double flop = 2.0 * 64 * N * 64 * (double)iters * wgs * sms;
    printf("%-3s n%d wait %d, %d warpgroup(s), %s operands%s: %6.1f TFLOP/s (%s)\n", name, N, D, wgs,
           RAND ? "random" : "zero", RING ? ", ring" : "", flop / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float *out;
    cudaMalloc(&out, 1024 * sizeof(float));
    for (int w = 1; w <= 2; w++) {
        run<128, true, 1>("RS", w, sms, out);
        run<128, true, 0>("RS", w, sms, out);
        run<128, false, 1>("SS", w, sms, out);
        run<256, false, 1>("SS", w, sms, out);
    }
    run<128, true, 1, true>("RS", 2, sms, out);
    run<128, true, 1, true, true>("RS", 2, sms, out);
    run<128, false, 1, true>("SS", 2, sms, out);
    run<256, false, 1, true>("SS", 2, sms, out);
    return 0;
}
