/* qaffine_avx2.c — AVX2 matrix-vector kernel of the MLX affine 4- and 8-bit formats (GP_WFMT_QAFFINE, formats.c):
 * each block of 16 packed values is dequantized in registers exactly as formats.c's widen does (scale * q, then
 * + bias: two roundings, no FMA) and fused into the path's 16 lane accumulators in the same order as the AVX2 dot
 * product (simd_avx2.c), so every output has the bits of the generic widen-then-dot kernel while reading only the
 * packed bytes (no float row is written).  Rows go one at a time (one sequential stream per thread reads memory
 * faster than interleaved rows: 4-bit decode 17.4 -> 19.4 tokens/s, 8-bit 17.2 -> 22.1 on Qwen3-0.6B).  The
 * quantized columns are a multiple of the group size (>= 16), so there is no tail. */
#include "kernels/cpu/qaffine.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "kernels/cpu/avx2_reduce.h" /* reduce16 */

static inline float aux(const gp_wt_aux *a, int64_t i) {
    if (a->dtype == GP_DTYPE_BF16) return gp_bf16_to_f32(((const uint16_t *)a->data)[i]);
    if (a->dtype == GP_DTYPE_F16) return gp_f16_to_f32(((const uint16_t *)a->data)[i]);
    return ((const float *)a->data)[i];
}

/* 16 unsigned values (as int32 in two registers) from 8 bytes of 4-bit pairs (low nibble first) or 16 bytes. */
static inline void ld_q4(const uint8_t *p, __m256i *lo, __m256i *hi) {
    const __m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(15);
    const __m128i v = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
    *lo = _mm256_cvtepu8_epi32(v);
    *hi = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
}
static inline void ld_q8(const uint8_t *p, __m256i *lo, __m256i *hi) {
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    *lo = _mm256_cvtepu8_epi32(v);
    *hi = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
}

static inline __m256 deq(__m256i q, __m256 s, __m256 b) { return _mm256_add_ps(_mm256_mul_ps(s, _mm256_cvtepi32_ps(q)), b); }


#define QROWS 1 /* rows per pass */
/* y[r] = W[r] · x for r in [r0, r1); bits 4 or 8 (gp_cpu_qaffine_fast). */
void gp_avx2_matvec_qaffine(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    const int64_t K = w->cols, gs = w->group_size, G = K / gs, rb = K * w->bits / 8, bb = 16 * w->bits / 8;
    const int four = w->bits == 4;
    for (int64_t r = r0; r < r1; r += QROWS) {
        const int nr = r1 - r < QROWS ? (int)(r1 - r) : QROWS;
        __m256 al[QROWS], ah[QROWS];
        const uint8_t *p[QROWS];
        int64_t row[QROWS];
        for (int i = 0; i < QROWS; i++) {
            al[i] = ah[i] = _mm256_setzero_ps();
            row[i] = r + (i < nr ? i : 0);
            p[i] = (const uint8_t *)w->data + row[i] * rb;
        }
        for (int64_t g = 0; g < G; g++) {
            __m256 s[QROWS], b[QROWS];
            for (int i = 0; i < QROWS; i++) {
                s[i] = _mm256_set1_ps(aux(&w->scales, row[i] * G + g));
                b[i] = _mm256_set1_ps(aux(&w->biases, row[i] * G + g));
            }
            for (int64_t k = g * gs; k < (g + 1) * gs; k += 16) {
                const __m256 xl = _mm256_loadu_ps(x + k), xh = _mm256_loadu_ps(x + k + 8);
                const int64_t off = k / 16 * bb;
                _Pragma("GCC unroll 2") for (int i = 0; i < QROWS; i++) {
                    __m256i ql, qh;
                    if (four) ld_q4(p[i] + off, &ql, &qh);
                    else ld_q8(p[i] + off, &ql, &qh);
                    al[i] = _mm256_fmadd_ps(deq(ql, s[i], b[i]), xl, al[i]);
                    ah[i] = _mm256_fmadd_ps(deq(qh, s[i], b[i]), xh, ah[i]);
                }
            }
        }
        for (int i = 0; i < nr; i++) y[r + i] = reduce16(al[i], ah[i]);
    }
}

/* Panel of the blocked matrix-matrix driver (simd.h): nk values of row r from column k0, dequantized exactly as
 * widen (and as the matrix-vector kernel above feeds them to its FMAs).  k0 and nk are multiples of 16 and the group
 * size is a multiple of 16, so a block of 16 never straddles two groups. */
static void panel_qaffine(const gp_wt *w, int64_t r, int64_t k0, int64_t nk, float *out) {
    const int64_t K = w->cols, gs = w->group_size, G = K / gs, bb = 16 * w->bits / 8;
    const uint8_t *p = (const uint8_t *)w->data + r * (K * w->bits / 8);
    for (int64_t k = k0; k < k0 + nk; k += 16) {
        const int64_t g = r * G + k / gs;
        const __m256 s = _mm256_set1_ps(aux(&w->scales, g)), b = _mm256_set1_ps(aux(&w->biases, g));
        __m256i ql, qh;
        if (w->bits == 4) ld_q4(p + k / 16 * bb, &ql, &qh);
        else ld_q8(p + k / 16 * bb, &ql, &qh);
        _mm256_storeu_ps(out + (k - k0), deq(ql, s, b));
        _mm256_storeu_ps(out + (k - k0) + 8, deq(qh, s, b));
    }
}

void gp_avx2_gemm_qaffine(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gp_avx2_gemm_blocked(y, ldy, w, r0, r1, x, n, panel_qaffine, gp_avx2_matvec_qaffine);
}

#pragma GCC pop_options
#endif
