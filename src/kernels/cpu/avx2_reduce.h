/* avx2_reduce.h — the one 16-lane reduction of the AVX2 kernels (simd.h: lanes 0-7 in lo, 8-15 in hi; the fixed tree
 * j += j+8, +4, +2, +1), shared by simd_avx2.c and qaffine_avx2.c.  Include after `#pragma GCC target("avx2,...")`
 * and <immintrin.h>. */
#ifndef GP_CPU_AVX2_REDUCE_H
#define GP_CPU_AVX2_REDUCE_H

static inline float reduce16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
    return _mm_cvtss_f32(d);
}

#endif
