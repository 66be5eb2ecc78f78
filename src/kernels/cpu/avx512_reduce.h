/* avx512_reduce.h — the one 16-lane reduction of the AVX-512 kernels (simd.h: the fixed tree j += j+8, +4, +2, +1),
 * shared by simd_avx512.c and simd_avx512bf16.c.  Include after `#pragma GCC target("avx512f,avx512dq,...")` and
 * <immintrin.h>. */
#ifndef GP_CPU_AVX512_REDUCE_H
#define GP_CPU_AVX512_REDUCE_H

/* The fixed tree: lane j += lane j+8, then +4, +2, +1; returns lane 0. */
static inline float reduce16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
    return _mm_cvtss_f32(d);
}

#endif
