/* cuda_wgmma.cuh — Hopper's warpgroup MMA (wgmma) and shared-memory mbarrier primitives, shared by the bf16 mode's
 * prefill GEMM (cuda_mma.cu: wg_gemm_kernel) and the probe of their rate (tools/cuda_wgmma_rate.cu): the m64n128k16
 * product with its A fragments in registers, the shared-memory descriptor and swizzle of its operands, the group
 * fences and waits, and the ring's full/empty barriers. */
#ifndef GP_CUDA_WGMMA_CUH
#define GP_CUDA_WGMMA_CUH

#include <cuda_runtime.h>
#include <stdint.h>

/* d (64 weight rows x 128 tokens: this thread's fragments, wg_frag's order) += A (16 columns of the warpgroup's 64
 * weight rows, each warp's 16 as mma16816's A fragment, in registers: a, a8 hold both products of a chunk, h picks
 * one) * B (the same 16 columns of 128 tokens: shared memory, descriptor b).  Asynchronous: d is ready after
 * wg_wait<0>. */
__device__ __forceinline__ void wgmma_n128(float (&d)[64], uint4 a, uint4 a8, int h, uint64_t b) {
    const uint32_t a0 = h ? a.z : a.x, a1 = h ? a8.z : a8.x, a2 = h ? a.w : a.y, a3 = h ? a8.w : a8.y;
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "{%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                   "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
                   "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
                   "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
                   "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b)
                 : "memory");
}

/* wgmma's shared-memory descriptor of a K-major operand in 128-byte swizzled rows (8-row atoms of 1024 bytes, the
 * 16-byte unit u of row t stored at u ^ (t & 7): the reads of a product spread over the banks), from s (the
 * product's first column in its atom's first row; atoms 1024-byte aligned, 1024 bytes apart). */
__device__ __forceinline__ uint64_t wg_desc(const void *s) {
    const uint64_t a = (__cvta_generic_to_shared(s) >> 4) & 0x3FFF;
    return a | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
}
/* where 16-byte unit u (0..7) of row t of a stage's region lives: 128-byte rows, TMA's 128-byte swizzle */
__device__ __forceinline__ int wg_unit(int t, int u) { return t * 8 + (u ^ (t & 7)); }
/* wg_fence: registers written since (A fragments, cleared accumulators) are seen by the next wgmma; wg_commit closes
 * a group of wgmmas; wg_wait<N>: at most N groups in flight; proxy_fence: this thread's cp.async writes are seen by
 * wgmma's reads (async proxy) after the next barrier. */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* keeps the compiler from moving accesses of v across a wgmma (its registers change asynchronously) */
template <int F>
__device__ __forceinline__ void wg_hold(float (&v)[F]) {
#pragma unroll
    for (int i = 0; i < F; i++) asm volatile("" : "+f"(v[i])::"memory");
}

/* mbarriers in shared memory: init with the arrivals a phase takes; arrive (release); wait until the phase of the
 * given parity has completed (acquire; the phase before the first counts as completed). */
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
    asm volatile("{\n.reg .pred P;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n@!P bra WAIT;\n}\n" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
/* mbar_arrive by the warp's lane 0 (predicated, not a branch: a divergent path near wgmmas serializes them) */
__device__ __forceinline__ void mbar_arrive_lane0(uint64_t *b, int lane) {
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(
                     smem_u32(b)),
                 "r"(lane)
                 : "memory");
}

#endif
