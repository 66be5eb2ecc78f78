/* simd_avx2.c — AVX2 + FMA + F16C kernels (see simd.h).  The 16 lanes of the reference reduction are two 8-lane
 * registers (lanes 0-7 and 8-15); every operation matches simd_avx512.c one for one (same FMAs, same exp, same
 * tree), so this path gives the same bits as the AVX-512 one.  Compiled with a target pragma, called only after
 * the CPU reports AVX2, FMA and F16C (dispatch.c). */
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "kernels/cpu/avx2_reduce.h" /* reduce16 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 16 weights as float32 in two registers */
static inline void ld_f32(const float *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_loadu_ps(p);
    *hi = _mm256_loadu_ps(p + 8);
}
static inline void ld_bf16(const uint16_t *p, __m256 *lo, __m256 *hi) {
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 8));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16));
    *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
static inline void ld_f16(const uint16_t *p, __m256 *lo, __m256 *hi) {
    *lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    *hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)));
}

/* lane masks for a tail of n < 16 elements: lanes 0..n-1 set */
static inline void tail_mask(int64_t n, __m256 *lo, __m256 *hi) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    *lo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
    *hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n - 8), idx));
}


/* exp(x): the same operations as exp16 in simd_avx512.c */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* Matrix-vector for one dtype: 4 rows at a time; the tail goes through a zero-padded copy and a lane blend so
 * lanes past the tail keep their value exactly as the AVX-512 masked FMA does. */
#define DEFINE_MATVEC(NAME, TYPE, LD)                                                                                 \
    static void NAME(float *y, const TYPE *W, int64_t K, int64_t r0, int64_t r1, const float *x) {                    \
        const int64_t kf = K & ~(int64_t)15, rem = K & 15;                                                            \
        float xt[16] = {0};                                                                                           \
        __m256 ml = _mm256_setzero_ps(), mh = ml;                                                                     \
        if (rem) {                                                                                                    \
            memcpy(xt, x + kf, (size_t)rem * sizeof(float));                                                          \
            tail_mask(rem, &ml, &mh);                                                                                 \
        }                                                                                                             \
        for (int64_t r = r0; r < r1; r += 4) {                                                                        \
            const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;                                                            \
            __m256 al[4], ah[4];                                                                                      \
            const TYPE *w[4];                                                                                         \
            for (int i = 0; i < 4; i++) {                                                                             \
                al[i] = ah[i] = _mm256_setzero_ps();                                                                  \
                w[i] = W + (r + (i < nr ? i : 0)) * K;                                                                \
            }                                                                                                         \
            for (int64_t k = 0; k < kf; k += 16) {                                                                    \
                __m256 xl = _mm256_loadu_ps(x + k), xh = _mm256_loadu_ps(x + k + 8), wl, wh;                          \
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {                                                 \
                    LD(w[i] + k, &wl, &wh);                                                                           \
                    al[i] = _mm256_fmadd_ps(wl, xl, al[i]);                                                           \
                    ah[i] = _mm256_fmadd_ps(wh, xh, ah[i]);                                                           \
                }                                                                                                     \
            }                                                                                                         \
            if (rem) {                                                                                                \
                __m256 xl = _mm256_loadu_ps(xt), xh = _mm256_loadu_ps(xt + 8), wl, wh;                                \
                for (int i = 0; i < nr; i++) {                                                                        \
                    TYPE wt[16] = {0};                                                                                \
                    memcpy(wt, w[i] + kf, (size_t)rem * sizeof(TYPE));                                                \
                    LD(wt, &wl, &wh);                                                                                 \
                    al[i] = _mm256_blendv_ps(al[i], _mm256_fmadd_ps(wl, xl, al[i]), ml);                              \
                    ah[i] = _mm256_blendv_ps(ah[i], _mm256_fmadd_ps(wh, xh, ah[i]), mh);                              \
                }                                                                                                     \
            }                                                                                                         \
            for (int i = 0; i < nr; i++) y[r + i] = reduce16(al[i], ah[i]);                                           \
        }                                                                                                             \
    }
DEFINE_MATVEC(matvec_f32, float, ld_f32)
DEFINE_MATVEC(matvec_bf16, uint16_t, ld_bf16)
DEFINE_MATVEC(matvec_f16, uint16_t, ld_f16)

/* 8 weights (lanes of one half) as float32 */
static inline __m256 h8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 h8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256 h8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Matrix-matrix tiles of 2 rows x 3 tokens: every output runs exactly the matrix-vector kernel's arithmetic (its
 * 16 lanes accumulate w[k] * x[k] for k = lane mod 16 in increasing k, a tail lane-blended after a zero-padded FMA,
 * then reduce16), so gemm == matvec bit for bit; the tile loads each weight half once for 3 tokens and each
 * activation half once for 2 rows (12 accumulators).  Tokens are taken in blocks of GEMM_TB so their activations stay
 * in L2 while every row pair streams past (read from memory once per block: a batch step of up to 24 sequences reads
 * the weights once); leftover tokens (while the row pair is in L1) and the leftover row go through the
 * matrix-vector kernel. */
#define GEMM_TB 24
#define DEFINE_GEMM(NAME, MATVEC, TYPE, H8)                                                                           \
    static void NAME##_tile(float *y, int64_t ldy, const TYPE *w0, const TYPE *w1, int64_t K, const float *x,       \
                            int64_t r) {                                                                              \
        const int64_t kf = K & ~(int64_t)15, rem = K & 15;                                                            \
        __m256 a[2][3][2];                                                                                            \
        for (int i = 0; i < 2; i++)                                                                                   \
            for (int t = 0; t < 3; t++) a[i][t][0] = a[i][t][1] = _mm256_setzero_ps();                                \
        for (int64_t k = 0; k < kf; k += 16)                                                                          \
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                                                     \
                const __m256 x0 = _mm256_loadu_ps(x + k + 8 * h), x1 = _mm256_loadu_ps(x + K + k + 8 * h),            \
                             x2 = _mm256_loadu_ps(x + 2 * K + k + 8 * h);                                             \
                __m256 wv = H8(w0 + k + 8 * h);                                                                       \
                a[0][0][h] = _mm256_fmadd_ps(wv, x0, a[0][0][h]);                                                     \
                a[0][1][h] = _mm256_fmadd_ps(wv, x1, a[0][1][h]);                                                     \
                a[0][2][h] = _mm256_fmadd_ps(wv, x2, a[0][2][h]);                                                     \
                wv = H8(w1 + k + 8 * h);                                                                              \
                a[1][0][h] = _mm256_fmadd_ps(wv, x0, a[1][0][h]);                                                     \
                a[1][1][h] = _mm256_fmadd_ps(wv, x1, a[1][1][h]);                                                     \
                a[1][2][h] = _mm256_fmadd_ps(wv, x2, a[1][2][h]);                                                     \
            }                                                                                                         \
        if (rem) {                                                                                                    \
            __m256 m[2];                                                                                              \
            tail_mask(rem, &m[0], &m[1]);                                                                             \
            for (int i = 0; i < 2; i++) {                                                                             \
                TYPE wt[16] = {0};                                                                                    \
                memcpy(wt, (i ? w1 : w0) + kf, (size_t)rem * sizeof(TYPE));                                           \
                for (int t = 0; t < 3; t++) {                                                                         \
                    float xt[16] = {0};                                                                               \
                    memcpy(xt, x + t * K + kf, (size_t)rem * sizeof(float));                                          \
                    for (int h = 0; h < 2; h++)                                                                       \
                        a[i][t][h] = _mm256_blendv_ps(                                                                \
                            a[i][t][h], _mm256_fmadd_ps(H8(wt + 8 * h), _mm256_loadu_ps(xt + 8 * h), a[i][t][h]), m[h]); \
                }                                                                                                     \
            }                                                                                                         \
        }                                                                                                             \
        for (int i = 0; i < 2; i++)                                                                                   \
            for (int t = 0; t < 3; t++) y[t * ldy + r + i] = reduce16(a[i][t][0], a[i][t][1]);                       \
    }                                                                                                                 \
    void NAME(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {             \
        const TYPE *W = w->data;                                                                                      \
        const int64_t K = w->cols, rp = r0 + ((r1 - r0) & ~(int64_t)1);                                               \
        for (int32_t t0 = 0; t0 < n; t0 += GEMM_TB) {                                                                 \
            const int32_t t1 = t0 + GEMM_TB < n ? t0 + GEMM_TB : n, t3 = t0 + (t1 - t0) / 3 * 3;                      \
            for (int64_t r4 = r0; r4 < rp; r4 += 4) { /* 4 rows: two tile pairs, then the matvec's 4-row pass */      \
                const int64_t re = r4 + 4 < rp ? r4 + 4 : rp;                                                         \
                for (int64_t r = r4; r < re; r += 2)                                                                  \
                    for (int32_t t = t0; t < t3; t += 3)                                                              \
                        NAME##_tile(y + (int64_t)t * ldy, ldy, W + r * K, W + (r + 1) * K, K, x + (int64_t)t * K, r); \
                for (int32_t t = t3; t < t1; t++) /* 1-2 leftover tokens while these rows are in L1 */                \
                    MATVEC(y + (int64_t)t * ldy, W, K, r4, re, x + (int64_t)t * K);                                   \
            }                                                                                                         \
            for (int32_t t = t0; rp < r1 && t < t1; t++) /* the leftover row */                                      \
                MATVEC(y + (int64_t)t * ldy, W, K, rp, r1, x + (int64_t)t * K);                                       \
        }                                                                                                             \
    }
DEFINE_GEMM(gp_avx2_gemm_f32, matvec_f32, float, h8_f32)
DEFINE_GEMM(gp_avx2_gemm_bf16, matvec_bf16, uint16_t, h8_bf16)
DEFINE_GEMM(gp_avx2_gemm_f16, matvec_f16, uint16_t, h8_f16)

/* y[r] = W[r] · x, r in [r0, r1), per dense format (rows of formats.c; gemm is formats.c's generic one) */
void gp_avx2_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f32(y, w->data, w->cols, r0, r1, x);
}
void gp_avx2_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_bf16(y, w->data, w->cols, r0, r1, x);
}
void gp_avx2_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f16(y, w->data, w->cols, r0, r1, x);
}

/* a [n] · b [n] */
static float dot(const float *a, const float *b, int64_t n) {
    float y;
    matvec_f32(&y, a, n, 0, 1, b);
    return y;
}

/* s[j] = exp(s[j] - mx); returns the 16-lane sum reduced by the fixed tree */
static float exp_sum(float *s, int64_t n, float mx) {
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 al = _mm256_setzero_ps(), ah = al;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 el = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        __m256 eh = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vm));
        _mm256_storeu_ps(s + j, el);
        _mm256_storeu_ps(s + j + 8, eh);
        al = _mm256_add_ps(al, el);
        ah = _mm256_add_ps(ah, eh);
    }
    if (j < n) {
        float t[16] = {0};
        memcpy(t, s + j, (size_t)(n - j) * sizeof(float));
        __m256 ml, mh;
        tail_mask(n - j, &ml, &mh);
        __m256 el = exp8(_mm256_sub_ps(_mm256_loadu_ps(t), vm)), eh = exp8(_mm256_sub_ps(_mm256_loadu_ps(t + 8), vm));
        _mm256_storeu_ps(t, el);
        _mm256_storeu_ps(t + 8, eh);
        memcpy(s + j, t, (size_t)(n - j) * sizeof(float));
        al = _mm256_blendv_ps(al, _mm256_add_ps(al, el), ml);
        ah = _mm256_blendv_ps(ah, _mm256_add_ps(ah, eh), mh);
    }
    return reduce16(al, ah);
}

/* o [n] += a * v [n] (fused, element by element) */
static void axpy(float *o, float a, const float *v, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(v + i), _mm256_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = fmaf(a, v[i], o[i]);
}


/* s[j] = q · k_j, key by key */
static void scores(float *s, const float *q, const float *k, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) s[j] = dot(q, k + j * stride, hd);
}

/* o += (p[j] / sum) * v_j, key by key */
static void pv(float *o, const float *p, float sum, const float *v, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) axpy(o, p[j] / sum, v + j * stride, hd);
}

/* g [n] = g / (1 + exp(-g)) * u [n] */
static void silu_mul(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x)));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float xt[8] = {0}, ut[8] = {0};
        memcpy(xt, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(ut, u + i, (size_t)(n - i) * sizeof(float));
        __m256 x = _mm256_loadu_ps(xt);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x)));
        _mm256_storeu_ps(xt, _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_loadu_ps(ut)));
        memcpy(g + i, xt, (size_t)(n - i) * sizeof(float));
    }
}

static const gp_simd_kernels AVX2 = {
    .name = "avx2", .id = GP_SIMD_AVX2, .dot = dot, .exp_sum = exp_sum, .axpy = axpy, .scores = scores, .pv = pv,
    .silu_mul = silu_mul,
};

#pragma GCC pop_options

const gp_simd_kernels *gp_simd_avx2(void) { return &AVX2; }
#else
const gp_simd_kernels *gp_simd_avx2(void) { return 0; }
#endif
