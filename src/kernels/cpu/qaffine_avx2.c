/* qaffine_avx2.c — AVX2 matrix-vector kernel of the MLX affine 4- and 8-bit formats (GP_WFMT_QAFFINE, formats.c):
 * each block of 16 packed values is dequantized in registers exactly as formats.c's widen does (scale * q, then
 * + bias: two roundings, no FMA) and fused into the path's 16 lane accumulators in the same order as the AVX2 dot
 * product (simd_avx2.c), so every output has the bits of the generic widen-then-dot kernel while reading only the
 * packed bytes (no float row is written).  Rows go 4 at a time so each activation block is loaded once.  The
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


#define QROWS 2
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

/* Dequantized half h (8 lanes) of block k / 16 of row p (scale s, bias b), exactly as widen. */
static inline __m256 deq_half(const uint8_t *p, int64_t k, int h, int four, int64_t bb, __m256 s, __m256 b) {
    __m256i ql, qh;
    if (four) ld_q4(p + k / 16 * bb, &ql, &qh);
    else ld_q8(p + k / 16 * bb, &ql, &qh);
    return deq(h ? qh : ql, s, b);
}

/* A 2 rows x 3 tokens tile: each output accumulates exactly as the matrix-vector kernel above (the same dequantized
 * values, the same lanes and order, the same reduction), each dequantized half used for 3 tokens. */
static void tile(float *y, int64_t ldy, const gp_wt *w, int64_t r, const float *x) {
    const int64_t K = w->cols, gs = w->group_size, G = K / gs, rb = K * w->bits / 8, bb = 16 * w->bits / 8;
    const int four = w->bits == 4;
    const uint8_t *p[2] = {(const uint8_t *)w->data + r * rb, (const uint8_t *)w->data + (r + 1) * rb};
    __m256 a[2][3][2];
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 3; t++) a[i][t][0] = a[i][t][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        __m256 s[2], b[2];
        for (int i = 0; i < 2; i++) {
            s[i] = _mm256_set1_ps(aux(&w->scales, (r + i) * G + g));
            b[i] = _mm256_set1_ps(aux(&w->biases, (r + i) * G + g));
        }
        for (int64_t k = g * gs; k < (g + 1) * gs; k += 16)
            for (int h = 0; h < 2; h++) {
                const __m256 x0 = _mm256_loadu_ps(x + k + 8 * h), x1 = _mm256_loadu_ps(x + K + k + 8 * h),
                             x2 = _mm256_loadu_ps(x + 2 * K + k + 8 * h);
                for (int i = 0; i < 2; i++) {
                    const __m256 wv = deq_half(p[i], k, h, four, bb, s[i], b[i]);
                    a[i][0][h] = _mm256_fmadd_ps(wv, x0, a[i][0][h]);
                    a[i][1][h] = _mm256_fmadd_ps(wv, x1, a[i][1][h]);
                    a[i][2][h] = _mm256_fmadd_ps(wv, x2, a[i][2][h]);
                }
            }
    }
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 3; t++) y[t * ldy + r + i] = reduce16(a[i][t][0], a[i][t][1]);
}

#define QTB 24 /* tokens per block (their activations stay in L2 while the rows stream past) */
void gp_avx2_gemm_qaffine(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    const int64_t K = w->cols, rp = r0 + ((r1 - r0) & ~(int64_t)1);
    for (int32_t t0 = 0; t0 < n; t0 += QTB) {
        const int32_t t1 = t0 + QTB < n ? t0 + QTB : n, t3 = t0 + (t1 - t0) / 3 * 3;
        for (int64_t r = r0; r < rp; r += 2) {
            for (int32_t t = t0; t < t3; t += 3) tile(y + (int64_t)t * ldy, ldy, w, r, x + (int64_t)t * K);
            for (int32_t t = t3; t < t1; t++) /* 1-2 leftover tokens while the row pair is in cache */
                gp_avx2_matvec_qaffine(y + (int64_t)t * ldy, w, r, r + 2, x + (int64_t)t * K);
        }
        for (int32_t t = t0; rp < r1 && t < t1; t++) /* the leftover row */
            gp_avx2_matvec_qaffine(y + (int64_t)t * ldy, w, rp, r1, x + (int64_t)t * K);
    }
}

#pragma GCC pop_options
#endif
