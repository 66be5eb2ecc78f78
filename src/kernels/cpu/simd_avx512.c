/* simd_avx512.c — AVX-512F/BW/VL/DQ + FMA + F16C kernels (see simd.h for the reduction every product follows).
 * Compiled for those instructions with a target pragma and only called after the CPU reports them (dispatch.c),
 * so the build needs no -march flag.  bf16 weights become float32 by a 16-bit shift and f16 weights by vcvtph2ps;
 * activations stay float32 (no vdpbf16ps here: it would round float32-mode activations; the bf16 mode, whose
 * activations are bf16 already, has its own vdpbf16ps kernels in simd_avx512bf16.c with these kernels' bits).
 * The exp and the lane structure match simd_avx2.c operation for operation, so both paths give the same bits. */
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include <immintrin.h>
#include "kernels/cpu/avx512_reduce.h" /* reduce16 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* 16 weights as float32 */
static inline __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 ld_bf16(const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m512 ld_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
/* the first popcount(m) of them, zeros elsewhere */
static inline __m512 ldm_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 ldm_bf16(const uint16_t *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline __m512 ldm_f16(const uint16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}


/* exp(x) for x in float32 (Cephes expf: range reduction by ln 2 in two parts, degree-5 polynomial);
 * x is clamped to [-87.3, 88.3] so 2^n stays a normal number.  Max error about 2 ulp. */
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

/* Matrix-vector for one dtype: 4 rows at a time (4 independent weight streams), one 16-lane accumulator per row. */
#define DEFINE_MATVEC(NAME, TYPE, LD, LDM)                                                                            \
    static void NAME(float *y, const TYPE *W, int64_t K, int64_t r0, int64_t r1, const float *x) {                    \
        const int64_t kf = K & ~(int64_t)15;                                                                          \
        const __mmask16 m = (__mmask16)((1u << (K & 15)) - 1u);                                                       \
        int64_t r = r0;                                                                                               \
        for (; r + 4 <= r1; r += 4) {                                                                                 \
            const TYPE *w0 = W + r * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;                                     \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                               \
            /* prefetch the next 4 rows, spread over this block's steps (rows are one page each: the hardware     \
             * prefetcher alone restarts at every row) */                                                           \
            const char *nx = (const char *)(w3 + K);                                                                  \
            const int pf = r + 8 <= r1;                                                                               \
            for (int64_t k = 0; k < kf; k += 16) {                                                                    \
                if (pf)                                                                                               \
                    for (int o = 0; o < 64 * (int)sizeof(TYPE); o += 64)                                              \
                        _mm_prefetch(nx + k * 4 * (int64_t)sizeof(TYPE) + o, _MM_HINT_T0);                            \
                __m512 xv = _mm512_loadu_ps(x + k);                                                                   \
                a0 = _mm512_fmadd_ps(LD(w0 + k), xv, a0);                                                             \
                a1 = _mm512_fmadd_ps(LD(w1 + k), xv, a1);                                                             \
                a2 = _mm512_fmadd_ps(LD(w2 + k), xv, a2);                                                             \
                a3 = _mm512_fmadd_ps(LD(w3 + k), xv, a3);                                                             \
            }                                                                                                         \
            if (m) {                                                                                                  \
                __m512 xv = _mm512_maskz_loadu_ps(m, x + kf);                                                         \
                a0 = _mm512_mask3_fmadd_ps(LDM(w0 + kf, m), xv, a0, m);                                               \
                a1 = _mm512_mask3_fmadd_ps(LDM(w1 + kf, m), xv, a1, m);                                               \
                a2 = _mm512_mask3_fmadd_ps(LDM(w2 + kf, m), xv, a2, m);                                               \
                a3 = _mm512_mask3_fmadd_ps(LDM(w3 + kf, m), xv, a3, m);                                               \
            }                                                                                                         \
            y[r] = reduce16(a0);                                                                                      \
            y[r + 1] = reduce16(a1);                                                                                  \
            y[r + 2] = reduce16(a2);                                                                                  \
            y[r + 3] = reduce16(a3);                                                                                  \
        }                                                                                                             \
        for (; r < r1; r++) {                                                                                         \
            const TYPE *w0 = W + r * K;                                                                               \
            __m512 a0 = _mm512_setzero_ps();                                                                          \
            for (int64_t k = 0; k < kf; k += 16) a0 = _mm512_fmadd_ps(LD(w0 + k), _mm512_loadu_ps(x + k), a0);       \
            if (m) a0 = _mm512_mask3_fmadd_ps(LDM(w0 + kf, m), _mm512_maskz_loadu_ps(m, x + kf), a0, m);              \
            y[r] = reduce16(a0);                                                                                      \
        }                                                                                                             \
    }
DEFINE_MATVEC(matvec_f32, float, ld_f32, ldm_f32)
DEFINE_MATVEC(matvec_bf16, uint16_t, ld_bf16, ldm_bf16)
DEFINE_MATVEC(matvec_f16, uint16_t, ld_f16, ldm_f16)

/* y[r] = W[r] · x, r in [r0, r1), per dense format (rows of formats.c) */
void gp_avx512_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f32(y, w->data, w->cols, r0, r1, x);
}
void gp_avx512_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_bf16(y, w->data, w->cols, r0, r1, x);
}
void gp_avx512_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    matvec_f16(y, w->data, w->cols, r0, r1, x);
}

/* a [n] · b [n] */
static float dot(const float *a, const float *b, int64_t n) {
    float y;
    matvec_f32(&y, a, n, 0, 1, b);
    return y;
}

#define MR 6 /* rows per register tile */
#define NR 4 /* tokens per register tile */

/* The register tile over one block of k: for MR rows (w [MR] float32 row pointers, already at the block's start)
 * × NR tokens (x at the block's start, rows ldx apart), 24 accumulators of the 16-lane dot product, k in steps of 16.
 * Blocks start at multiples of 16, so lane j still takes exactly the elements k ≡ j mod 16 in increasing k: the
 * same order as matvec.  first: start from zero, else from the partial sums P [MR*NR vectors]; last: reduce by the
 * fixed tree into y[t*ldy + i], else store the partial sums back to P.  Only the last block may have a tail. */
static void tile_6x4(float *y, int64_t ldy, const float *const *w, const float *x, int64_t ldx, int64_t kl,
                     __m512 *P, int first, int last) {
    const int64_t kf = kl & ~(int64_t)15;
    const __mmask16 m = (__mmask16)((1u << (kl & 15)) - 1u);
    __m512 c[MR][NR];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) c[i][j] = first ? _mm512_setzero_ps() : P[i * NR + j];
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    for (int64_t k = 0; k < kf; k += 16) {
        __m512 b0 = _mm512_loadu_ps(x0 + k), b1 = _mm512_loadu_ps(x1 + k);
        __m512 b2 = _mm512_loadu_ps(x2 + k), b3 = _mm512_loadu_ps(x3 + k);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_loadu_ps(w[i] + k);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
            c[i][2] = _mm512_fmadd_ps(a, b2, c[i][2]);
            c[i][3] = _mm512_fmadd_ps(a, b3, c[i][3]);
        }
    }
    if (m) {
        __m512 b0 = _mm512_maskz_loadu_ps(m, x0 + kf), b1 = _mm512_maskz_loadu_ps(m, x1 + kf);
        __m512 b2 = _mm512_maskz_loadu_ps(m, x2 + kf), b3 = _mm512_maskz_loadu_ps(m, x3 + kf);
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_maskz_loadu_ps(m, w[i] + kf);
            c[i][0] = _mm512_mask3_fmadd_ps(a, b0, c[i][0], m);
            c[i][1] = _mm512_mask3_fmadd_ps(a, b1, c[i][1], m);
            c[i][2] = _mm512_mask3_fmadd_ps(a, b2, c[i][2], m);
            c[i][3] = _mm512_mask3_fmadd_ps(a, b3, c[i][3], m);
        }
    }
    if (last) {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) y[j * ldy + i] = reduce16(c[i][j]);
    } else {
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) P[i * NR + j] = c[i][j];
    }
}

/* Converts columns [k0, k0 + kl) of rows [r, r + MR) of w to float32 into buf [MR, ld] (one per 16-bit format). */
typedef void (*tile_fn)(const gp_wt *w, int64_t r, int64_t k0, int64_t kl, int64_t ld, float *buf);
#define DEFINE_TILE(NAME, LD, LDM)                                                                                    \
    static void NAME(const gp_wt *w, int64_t r, int64_t k0, int64_t kl, int64_t ld, float *buf) {                     \
        const int64_t K = w->cols, kf = kl & ~(int64_t)15;                                                            \
        const __mmask16 m = (__mmask16)((1u << (kl & 15)) - 1u);                                                      \
        for (int i = 0; i < MR; i++) {                                                                                \
            const uint16_t *s = (const uint16_t *)w->data + (r + i) * K + k0;                                         \
            float *d = buf + (int64_t)i * ld;                                                                         \
            for (int64_t k = 0; k < kf; k += 16) _mm512_storeu_ps(d + k, LD(s + k));                                  \
            if (m) _mm512_mask_storeu_ps(d + kf, m, LDM(s + kf, m));                                                  \
        }                                                                                                             \
    }
DEFINE_TILE(tile_bf16, ld_bf16, ldm_bf16)
DEFINE_TILE(tile_f16, ld_f16, ldm_f16)

/* 64-byte aligned memory of at least bytes (aligned_alloc wants a multiple of the alignment). */
static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) & ~(size_t)63); }

#define KB 1024 /* k-block (elements) when K > KB: the weight tile rows of one block stay in L1 */
#define RB 8    /* row tiles per row block (their partial sums stay in L2 across k-blocks) */
#define PAD 16  /* floats of padding per packed row, so rows 4 KiB apart do not share cache sets */

/* y[t*ldy + r] = W[r] · x[t], r in [r0, r1), t in [0, n).  Blocked for the caches: for each block of tokens (copied
 * with a padded row stride when its rows would fight for cache sets), then per row block and
 * k-block, each tile of MR weight rows is converted to float32 once into a padded buffer (L1) and computes MR×NR
 * outputs in registers, carrying 16-lane partial sums across k-blocks.  Rows and tokens left over at the edges go through matvec (same bits). */
static void gemm(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n,
                 tile_fn tile, gp_matvec_fn matvec) {
    const int64_t K = w->cols;
    const int64_t kb = K <= KB ? K : KB, nk = (K + kb - 1) / kb, lw = kb + PAD;
    /* rows 16 KiB apart (K a multiple of 4096) fold a token block's k-slices onto a few L2 sets: copy them with a
     * padded stride; other widths spread over the sets and are read in place */
    const int pack = nk > 1 && K % 4096 == 0;
    const int64_t ld = pack ? K + PAD : K;
    int64_t tb = (512 * 1024) / (lw * (int64_t)sizeof(float));
    tb = nk > 1 ? 64 : tb < NR ? NR : tb > 256 ? 256 : tb - tb % NR;
    const int64_t rfull = r0 + (r1 - r0) / MR * MR, nfull = (int64_t)n / NR * NR;
    float *buf = NULL, *xp = NULL;
    __m512 *P = NULL;
    if (rfull > r0 && nfull > 0) {
        buf = alloc64((size_t)MR * (size_t)lw * sizeof(float));
        if (pack) xp = alloc64((size_t)tb * (size_t)ld * sizeof(float));
        if (nk > 1) P = alloc64(sizeof(__m512) * MR * NR * RB * (size_t)(tb / NR));
        if (!buf || (pack && !xp) || (nk > 1 && !P)) { /* no memory for the buffers: the same products, token by token */
            free(buf);
            free(xp);
            free(P);
            for (int32_t t = 0; t < n; t++) matvec(y + t * ldy, w, r0, r1, x + (int64_t)t * K);
            return;
        }
    }
    for (int64_t t0 = 0; t0 < nfull; t0 += tb) {
        const int64_t t1 = t0 + tb < nfull ? t0 + tb : nfull;
        if (pack)
            for (int64_t t = t0; t < t1; t++) memcpy(xp + (t - t0) * ld, x + t * K, (size_t)K * sizeof(float));
        const float *xb = pack ? xp : x + t0 * K;
        for (int64_t rb = r0; rb < rfull; rb += (int64_t)RB * MR) {
            const int64_t rbe = rb + (int64_t)RB * MR < rfull ? rb + (int64_t)RB * MR : rfull;
            for (int64_t kbi = 0; kbi < nk; kbi++) {
                const int64_t k0 = kbi * kb, kl = K - k0 < kb ? K - k0 : kb;
                for (int64_t r = rb; r < rbe; r += MR) {
                    const float *rows[MR];
                    if (!tile) {
                        for (int i = 0; i < MR; i++) rows[i] = (const float *)w->data + (r + i) * K + k0;
                    } else {
                        tile(w, r, k0, kl, lw, buf);
                        for (int i = 0; i < MR; i++) rows[i] = buf + (int64_t)i * lw;
                    }
                    __m512 *Pr = P ? P + (size_t)((r - rb) / MR) * (size_t)(tb / NR) * MR * NR : NULL;
                    for (int64_t t = t0; t < t1; t += NR)
                        tile_6x4(y + t * ldy + r, ldy, rows, xb + (t - t0) * ld + k0, ld, kl,
                                 Pr ? Pr + (size_t)((t - t0) / NR) * MR * NR : NULL, kbi == 0, kbi == nk - 1);
                }
            }
        }
    }
    free(buf);
    free(xp);
    free(P);
    /* edges: rows past the last full tile for every token, tokens past the last full tile for every row */
    if (rfull < r1)
        for (int64_t t = 0; t < nfull; t++) matvec(y + t * ldy, w, rfull, r1, x + t * K);
    for (int64_t t = nfull; t < n; t++) matvec(y + t * ldy, w, r0, r1, x + t * K);
}

/* per dense format (rows of formats.c): f32 rows are read in place, 16-bit ones converted tile by tile */
void gp_avx512_gemm_f32(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gemm(y, ldy, w, r0, r1, x, n, NULL, gp_avx512_matvec_f32);
}
void gp_avx512_gemm_bf16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gemm(y, ldy, w, r0, r1, x, n, tile_bf16, gp_avx512_matvec_bf16);
}
void gp_avx512_gemm_f16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n) {
    gemm(y, ldy, w, r0, r1, x, n, tile_f16, gp_avx512_matvec_f16);
}

/* s[j] = exp(s[j] - mx); returns their sum over 16 lanes reduced by the fixed tree */
static float exp_sum(float *s, int64_t n, float mx) {
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vm));
        _mm512_mask_storeu_ps(s + j, m, e);
        acc = _mm512_mask_add_ps(acc, m, acc, e);
    }
    return reduce16(acc);
}

/* o [n] += a * v [n] (fused, element by element) */
static void axpy(float *o, float a, const float *v, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(v + i), _mm512_loadu_ps(o + i)));
    for (; i < n; i++) o[i] = fmaf(a, v[i], o[i]);
}

#define MAXQ 16 /* head_dim up to 256 is held in registers */

/* s[j] = q · k_j: q held in registers, 4 keys at a time (4 independent 16-lane chains), each reduced by the fixed
 * tree; the same operations, in the same order per key, as dot(q, k_j, hd).  hd a multiple of 16 up to 16 MAXQ;
 * LD widens 16 of a key's elements (float32 rows, or bfloat16 rows: scores16). */
#define DEFINE_SCORES(NAME, TYPE, LD)                                                                                 \
    static void NAME(float *s, const float *q, const TYPE *k, int64_t stride, int64_t count, int64_t hd) {            \
        const int nv = (int)(hd / 16);                                                                                \
        __m512 qv[MAXQ];                                                                                              \
        for (int v = 0; v < nv; v++) qv[v] = _mm512_loadu_ps(q + 16 * v);                                             \
        int64_t j = 0;                                                                                                \
        for (; j + 4 <= count; j += 4) {                                                                              \
            const TYPE *k0 = k + j * stride, *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;                 \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                               \
            for (int v = 0; v < nv; v++) {                                                                           \
                a0 = _mm512_fmadd_ps(qv[v], LD(k0 + 16 * v), a0);                                                    \
                a1 = _mm512_fmadd_ps(qv[v], LD(k1 + 16 * v), a1);                                                    \
                a2 = _mm512_fmadd_ps(qv[v], LD(k2 + 16 * v), a2);                                                    \
                a3 = _mm512_fmadd_ps(qv[v], LD(k3 + 16 * v), a3);                                                    \
            }                                                                                                         \
            s[j] = reduce16(a0);                                                                                      \
            s[j + 1] = reduce16(a1);                                                                                  \
            s[j + 2] = reduce16(a2);                                                                                  \
            s[j + 3] = reduce16(a3);                                                                                  \
        }                                                                                                             \
        for (; j < count; j++) {                                                                                      \
            const TYPE *k0 = k + j * stride;                                                                          \
            __m512 a0 = _mm512_setzero_ps();                                                                          \
            for (int v = 0; v < nv; v++) a0 = _mm512_fmadd_ps(qv[v], LD(k0 + 16 * v), a0);                            \
            s[j] = reduce16(a0);                                                                                      \
        }                                                                                                             \
    }
DEFINE_SCORES(scores_regs, float, ld_f32)
DEFINE_SCORES(scores16, uint16_t, ld_bf16)
static void scores(float *s, const float *q, const float *k, int64_t stride, int64_t count, int64_t hd) {
    if (hd % 16 || hd > 16 * MAXQ)
        for (int64_t j = 0; j < count; j++) s[j] = dot(q, k + j * stride, hd);
    else scores_regs(s, q, k, stride, count, hd);
}

/* o += (p[j] / sum) * v_j key by key, with o held in registers: the same fused operations, in the same order per
 * element, as axpy called key by key (hd a multiple of 16 up to 16 MAXQ; LD as above: pv16 over bfloat16 rows). */
#define DEFINE_PV(NAME, TYPE, LD)                                                                                     \
    static void NAME(float *o, const float *p, float sum, const TYPE *v, int64_t stride, int64_t count, int64_t hd) { \
        const int nv = (int)(hd / 16);                                                                                \
        __m512 ov[MAXQ];                                                                                              \
        for (int i = 0; i < nv; i++) ov[i] = _mm512_loadu_ps(o + 16 * i);                                             \
        for (int64_t j = 0; j < count; j++) {                                                                         \
            const __m512 w = _mm512_set1_ps(p[j] / sum);                                                              \
            const TYPE *vj = v + j * stride;                                                                          \
            for (int i = 0; i < nv; i++) ov[i] = _mm512_fmadd_ps(w, LD(vj + 16 * i), ov[i]);                          \
        }                                                                                                             \
        for (int i = 0; i < nv; i++) _mm512_storeu_ps(o + 16 * i, ov[i]);                                             \
    }
DEFINE_PV(pv_regs, float, ld_f32)
DEFINE_PV(pv16, uint16_t, ld_bf16)
static void pv(float *o, const float *p, float sum, const float *v, int64_t stride, int64_t count, int64_t hd) {
    if (hd % 16 || hd > 16 * MAXQ)
        for (int64_t j = 0; j < count; j++) axpy(o, p[j] / sum, v + j * stride, hd);
    else pv_regs(o, p, sum, v, stride, count, hd);
}

/* g [n] = g / (1 + exp(-g)) * u [n] */
static void silu_mul(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x)));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, d), _mm512_loadu_ps(u + i)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x)));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(x, d), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

static const gp_simd_kernels AVX512 = {
    .name = "avx512", .id = GP_SIMD_AVX512, .dot = dot, .exp_sum = exp_sum, .axpy = axpy, .scores = scores, .pv = pv,
    .scores16 = scores16, .pv16 = pv16, .silu_mul = silu_mul,
};

#pragma GCC pop_options

const gp_simd_kernels *gp_simd_avx512(void) { return &AVX512; }
#else
const gp_simd_kernels *gp_simd_avx512(void) { return 0; }
#endif
