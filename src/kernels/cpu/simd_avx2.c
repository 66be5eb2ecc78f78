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
#include "io/safetensors.h"            /* gp_bf16_to_f32, gp_f16_to_f32 */
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

/* A matrix-vector product's tail of K % 16 columns: xt = those columns of x zero-padded, ml|mh = their lane masks
 * (zero when there is no tail).  Returns the number of columns handled by whole 16-lane steps. */
static inline int64_t tail_prep(const float *x, int64_t K, float xt[16], __m256 *ml, __m256 *mh) {
    const int64_t kf = K & ~(int64_t)15, rem = K & 15;
    memset(xt, 0, 16 * sizeof(float));
    *ml = *mh = _mm256_setzero_ps();
    if (rem) {
        memcpy(xt, x + kf, (size_t)rem * sizeof(float));
        tail_mask(rem, ml, mh);
    }
    return kf;
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
        float xt[16];                                                                                                 \
        __m256 ml, mh;                                                                                                \
        const int64_t kf = tail_prep(x, K, xt, &ml, &mh), rem = K & 15;                                               \
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

/* The same product one row at a time, for decode's weights streamed from memory: one sequential stream per thread
 * (plus a software prefetch MV_PF elements ahead) keeps the DRAM and the prefetchers busier than four interleaved
 * rows (measured 28-34 GB/s against 21-25 GB/s with 2 threads on a memory-mapped checkpoint), while the two FMA
 * chains still run faster than memory.  Same lanes, same order, same bits as the 4-row kernel. */
#define MV_PF 512
#define DEFINE_MATVEC1(NAME, TYPE, LD)                                                                                \
    static void NAME(float *y, const TYPE *W, int64_t K, int64_t r0, int64_t r1, const float *x) {                    \
        float xt[16];                                                                                                 \
        __m256 ml, mh;                                                                                                \
        const int64_t kf = tail_prep(x, K, xt, &ml, &mh), rem = K & 15;                                               \
        for (int64_t r = r0; r < r1; r++) {                                                                           \
            const TYPE *w = W + r * K;                                                                                \
            __m256 al = _mm256_setzero_ps(), ah = al, wl, wh;                                                         \
            for (int64_t k = 0; k < kf; k += 16) {                                                                    \
                _mm_prefetch((const char *)(w + k + MV_PF), _MM_HINT_T0);                                             \
                LD(w + k, &wl, &wh);                                                                                  \
                al = _mm256_fmadd_ps(wl, _mm256_loadu_ps(x + k), al);                                                 \
                ah = _mm256_fmadd_ps(wh, _mm256_loadu_ps(x + k + 8), ah);                                             \
            }                                                                                                         \
            if (rem) {                                                                                                \
                TYPE wt[16] = {0};                                                                                    \
                memcpy(wt, w + kf, (size_t)rem * sizeof(TYPE));                                                       \
                LD(wt, &wl, &wh);                                                                                     \
                al = _mm256_blendv_ps(al, _mm256_fmadd_ps(wl, _mm256_loadu_ps(xt), al), ml);                          \
                ah = _mm256_blendv_ps(ah, _mm256_fmadd_ps(wh, _mm256_loadu_ps(xt + 8), ah), mh);                      \
            }                                                                                                         \
            y[r] = reduce16(al, ah);                                                                                  \
        }                                                                                                             \
    }
DEFINE_MATVEC1(stream_f32, float, ld_f32)
DEFINE_MATVEC1(stream_bf16, uint16_t, ld_bf16)
DEFINE_MATVEC1(stream_f16, uint16_t, ld_f16)

/* 8 weights (lanes of one half) as float32 */
static inline __m256 h8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 h8_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256 h8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Matrix-matrix kernel.  Every output runs exactly the matrix-vector kernel's arithmetic: its 16 lanes accumulate
 * w[k] * x[k] for k = lane mod 16 in increasing k (lanes 0-7 and 8-15 are two independent chains, the "halves"),
 * a tail lane-blended after a zero-padded FMA, then reduce16 — so gemm == matvec bit for bit.  The work is blocked
 * so the FMAs, not the loads, set the pace:
 *   - a tile is 4 weight rows x 3 tokens of ONE half (12 accumulators, 3 activation registers, 1 weight register);
 *     it runs over a block of columns for half 0, then again for half 1, each half's accumulators kept in memory
 *     between blocks (the chains only ever see their own lanes in increasing k, so the order is unchanged);
 *   - the 4 rows of a column block of GEMM_KB are widened once to a float32 panel (in L1) and reused by every token
 *     tile of a GEMM_TB block (float32 weights are their own panel);
 *   - leftover tokens (1-2 per block) and leftover rows (1-3) go through the matrix-vector kernel. */
#define GEMM_TB 24
#define GEMM_KB 512
typedef struct gemm_acc {
    __m256 a[GEMM_TB / 3][2][12]; /* [token tile][half][row * 3 + token] */
} gemm_acc;

/* one half (h) of a 4 x 3 tile over panel columns [0, nk), nk a multiple of 16; p: 4 rows of stride ldp; x: 3
 * tokens of stride K, already offset to the block */
static inline void tile43(__m256 *acc, const float *p, int64_t ldp, const float *x, int64_t K, int64_t nk, int h) {
    __m256 a[12];
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = acc[i];
    for (int64_t k = 8 * h; k < nk; k += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + K + k), x2 = _mm256_loadu_ps(x + 2 * K + k);
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
            const __m256 wv = _mm256_loadu_ps(p + r * ldp + k);
            a[3 * r] = _mm256_fmadd_ps(wv, x0, a[3 * r]);
            a[3 * r + 1] = _mm256_fmadd_ps(wv, x1, a[3 * r + 1]);
            a[3 * r + 2] = _mm256_fmadd_ps(wv, x2, a[3 * r + 2]);
        }
    }
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) acc[i] = a[i];
}

/* the tail columns [kf, kf + rem) of a 4 x 3 tile (both halves), as the matrix-vector kernel does them; wt: the 4
 * rows' tails widened and zero-padded to 16 */
static void tile43_tail(gemm_acc *A, int i, const float *wt, const float *x, int64_t K, int64_t kf, int64_t rem) {
    __m256 m[2];
    tail_mask(rem, &m[0], &m[1]);
    for (int t = 0; t < 3; t++) {
        float xt[16] = {0};
        memcpy(xt, x + t * K + kf, (size_t)rem * sizeof(float));
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 4; r++) {
                __m256 *a = &A->a[i][h][3 * r + t];
                *a = _mm256_blendv_ps(*a, _mm256_fmadd_ps(_mm256_loadu_ps(wt + 16 * r + 8 * h),
                                                          _mm256_loadu_ps(xt + 8 * h), *a), m[h]);
            }
    }
}

/* float32 element k of row r (the tails) */
static float elem(const gp_wt *w, int64_t r, int64_t k) {
    const int64_t i = r * w->cols + k;
    if (w->format == GP_WFMT_BF16) return gp_bf16_to_f32(((const uint16_t *)w->data)[i]);
    if (w->format == GP_WFMT_F16) return gp_f16_to_f32(((const uint16_t *)w->data)[i]);
    return ((const float *)w->data)[i];
}

/* rows [r, r + 4) x the nt tiles of 3 tokens at x (stride K): y[t * ldy + r + i] */
static void rows4(float *y, int64_t ldy, const gp_wt *w, int64_t r, const float *x, int nt, gp_avx2_panel_fn panel) {
    const int64_t K = w->cols, kf = K & ~(int64_t)15, rem = K & 15;
    _Alignas(32) float buf[4 * GEMM_KB];
    gemm_acc A;
    memset(A.a, 0, sizeof A.a[0] * (size_t)nt);
    for (int64_t k0 = 0; k0 < kf; k0 += GEMM_KB) {
        const int64_t nk = kf - k0 < GEMM_KB ? kf - k0 : GEMM_KB;
        const float *p = buf;
        int64_t ldp = GEMM_KB;
        if (panel)
            for (int i = 0; i < 4; i++) panel(w, r + i, k0, nk, buf + i * GEMM_KB);
        else /* float32 weights are their own panel */
            p = (const float *)w->data + r * K + k0, ldp = K;
        for (int i = 0; i < nt; i++)
            for (int h = 0; h < 2; h++) tile43(A.a[i][h], p, ldp, x + 3 * i * K + k0, K, nk, h);
    }
    if (rem) {
        float wt[4 * 16] = {0};
        for (int i = 0; i < 4; i++)
            for (int64_t k = 0; k < rem; k++) wt[16 * i + k] = elem(w, r + i, kf + k);
        for (int i = 0; i < nt; i++) tile43_tail(&A, i, wt, x + 3 * i * K, K, kf, rem);
    }
    for (int i = 0; i < nt; i++)
        for (int q = 0; q < 12; q++) y[(3 * i + q % 3) * ldy + r + q / 3] = reduce16(A.a[i][0][q], A.a[i][1][q]);
}

void gp_avx2_gemm_blocked(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n,
                          gp_avx2_panel_fn panel, gp_matvec_fn matvec) {
    const int64_t K = w->cols, rp = r0 + ((r1 - r0) & ~(int64_t)3);
    for (int32_t t0 = 0; t0 < n; t0 += GEMM_TB) {
        const int32_t t1 = t0 + GEMM_TB < n ? t0 + GEMM_TB : n, nt = (t1 - t0) / 3, t3 = t0 + 3 * nt;
        for (int64_t r = r0; r < rp; r += 4) {
            if (nt) rows4(y + (int64_t)t0 * ldy, ldy, w, r, x + (int64_t)t0 * K, nt, panel);
            for (int32_t t = t3; t < t1; t++) /* 1-2 leftover tokens while these rows are in cache */
                matvec(y + (int64_t)t * ldy, w, r, r + 4, x + (int64_t)t * K);
        }
        for (int32_t t = t0; rp < r1 && t < t1; t++) /* the 1-3 leftover rows */
            matvec(y + (int64_t)t * ldy, w, rp, r1, x + (int64_t)t * K);
    }
}

/* panels of the 16-bit formats: nk (a multiple of 16) elements of row r from column k0, widened */
static void panel_bf16(const gp_wt *w, int64_t r, int64_t k0, int64_t nk, float *out) {
    const uint16_t *p = (const uint16_t *)w->data + r * w->cols + k0;
    for (int64_t k = 0; k < nk; k += 8) _mm256_store_ps(out + k, h8_bf16(p + k));
}
static void panel_f16(const gp_wt *w, int64_t r, int64_t k0, int64_t nk, float *out) {
    const uint16_t *p = (const uint16_t *)w->data + r * w->cols + k0;
    for (int64_t k = 0; k < nk; k += 8) _mm256_store_ps(out + k, h8_f16(p + k));
}
/* the GEMM's leftovers run over rows already in cache: the 4-row kernels */
static void rows_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f32(y, w->data, w->cols, r0, r1, x);
}
static void rows_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_bf16(y, w->data, w->cols, r0, r1, x);
}
static void rows_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f16(y, w->data, w->cols, r0, r1, x);
}
void gp_avx2_gemm_f32(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gp_avx2_gemm_blocked(y, ldy, w, r0, r1, x, n, NULL, rows_f32);
}
void gp_avx2_gemm_bf16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gp_avx2_gemm_blocked(y, ldy, w, r0, r1, x, n, panel_bf16, rows_bf16);
}
void gp_avx2_gemm_f16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gp_avx2_gemm_blocked(y, ldy, w, r0, r1, x, n, panel_f16, rows_f16);
}

/* y[r] = W[r] · x, r in [r0, r1), per dense format (rows of formats.c; gemm is formats.c's generic one) */
void gp_avx2_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    stream_f32(y, w->data, w->cols, r0, r1, x);
}
void gp_avx2_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    stream_bf16(y, w->data, w->cols, r0, r1, x);
}
void gp_avx2_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    stream_f16(y, w->data, w->cols, r0, r1, x);
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

/* scores and pv over bfloat16 rows (hd a multiple of 16): dot's lanes and tree with the key as the weight row (an
 * FMA's product does not depend on its operands' order), and axpy's FMAs on the widened values */
static void scores16(float *s, const float *q, const uint16_t *k, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) matvec_bf16(s + j, k + j * stride, hd, 0, 1, q);
}
static void pv16(float *o, const float *p, float sum, const uint16_t *v, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) {
        const __m256 va = _mm256_set1_ps(p[j] / sum);
        for (int64_t i = 0; i < hd; i += 16) {
            __m256 lo, hi;
            ld_bf16(v + j * stride + i, &lo, &hi);
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(va, lo, _mm256_loadu_ps(o + i)));
            _mm256_storeu_ps(o + i + 8, _mm256_fmadd_ps(va, hi, _mm256_loadu_ps(o + i + 8)));
        }
    }
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
    .scores16 = scores16, .pv16 = pv16, .silu_mul = silu_mul,
};

#pragma GCC pop_options

const gp_simd_kernels *gp_simd_avx2(void) { return &AVX2; }
#else
const gp_simd_kernels *gp_simd_avx2(void) { return 0; }
#endif
