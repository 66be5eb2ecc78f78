/* dispatch.c — picks the CPU kernel table once per process: GENPARITY_SIMD=scalar|avx2|avx512 when set and the CPU
 * supports it, else the best path the CPU reports (__builtin_cpu_supports).  The choice is the one piece of
 * process-wide state besides the thread pool; tests switch it with gp_cpu_force_simd. */
#include "kernels/cpu/simd.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(const gp_simd_kernels *) g_kernels;

int gp_cpu_simd_supported(const char *name) {
    if (!name) return 0;
    if (!strcmp(name, "scalar")) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!strcmp(name, "avx2"))
        return gp_simd_avx2() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    if (!strcmp(name, "avx512"))
        return gp_simd_avx512() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
#endif
    return 0;
}

static const gp_simd_kernels *by_name(const char *name) {
    if (!gp_cpu_simd_supported(name)) return NULL;
    if (!strcmp(name, "avx512")) return gp_simd_avx512();
    if (!strcmp(name, "avx2")) return gp_simd_avx2();
    return gp_simd_scalar();
}

static const gp_simd_kernels *best(void) {
    const char *e = getenv("GENPARITY_SIMD");
    const gp_simd_kernels *k = e && *e ? by_name(e) : NULL;
    if (!k) k = by_name("avx512");
    if (!k) k = by_name("avx2");
    return k ? k : gp_simd_scalar();
}

const gp_simd_kernels *gp_cpu_kernels(void) {
    const gp_simd_kernels *k = atomic_load_explicit(&g_kernels, memory_order_acquire);
    if (!k) { /* first use: resolve (idempotent if two threads race) */
        k = best();
        atomic_store_explicit(&g_kernels, k, memory_order_release);
    }
    return k;
}

int gp_cpu_force_simd(const char *name) {
    const gp_simd_kernels *k = !name || !strcmp(name, "auto") ? best() : by_name(name);
    if (!k) return -1;
    atomic_store_explicit(&g_kernels, k, memory_order_release);
    return 0;
}

const gp_dpbf16_kernels *gp_cpu_dpbf16(void) {
    if (gp_cpu_kernels()->id != GP_SIMD_AVX512) return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx512bf16")) return gp_simd_avx512bf16();
#endif
    return NULL;
}

const char *gp_cpu_simd(void) { return gp_cpu_kernels()->name; }

int gp_cpu_bf16_dot(void) { return gp_cpu_dpbf16() != NULL; }
