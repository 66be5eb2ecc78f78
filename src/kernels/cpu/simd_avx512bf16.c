/* simd_avx512bf16.c — the bf16 compute mode's weight products on CPUs with AVX512_BF16 (vdpbf16ps): bf16 weights
 * times activations packed to bf16 (exact there: in that mode every linear's input is already a bf16 value), with
 * float32 accumulation, as torch's bf16 matmul does.  Used only by the bf16 mode (GP_COMPUTE_BF16) on the AVX-512
 * path; the float32 default never rounds an activation.
 *
 * Same bits as the float32 kernels (simd.h's reduction): vdpbf16ps adds to each float32 lane the exact product of
 * the high bf16 pair, rounded, then that of the low pair, rounded, which is two FMAs.  So both operands are laid out
 * with lane j of a block of 32 elements holding element j in the high half and element 16 + j in the low half:
 * lane j then accumulates k = j, j + 16, j + 32, ... in increasing k, the float32 path's lane j (a tail is zero-
 * padded: + 0 changes nothing).  Then simd.h's fixed tree over the 16 lanes.  Weights are permuted in registers as
 * they are loaded; activations are packed once per linear in that layout.  Differences from the float32 kernels:
 * vdpbf16ps treats denormal inputs and results as zero (tests/unit/test_kernels.c compares the bits). */
#include "kernels/cpu/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#include <immintrin.h>
#include "kernels/cpu/avx512_reduce.h" /* reduce16 */

/* vpermw indices: lane j of 32 bf16 = (low: element 16 + j, high: element j) */
static inline __m512i lane_order(void) {
    return _mm512_set_epi16(15, 31, 14, 30, 13, 29, 12, 28, 11, 27, 10, 26, 9, 25, 8, 24, 7, 23, 6, 22, 5, 21, 4, 20,
                            3, 19, 2, 18, 1, 17, 0, 16);
}
/* 32 weights in lane order (the first popcount(m) of them when masked, zeros elsewhere) */
static inline __m512bh ldw(const uint16_t *p, __m512i idx) {
    return (__m512bh)_mm512_permutexvar_epi16(idx, _mm512_loadu_si512(p));
}
static inline __m512bh ldwm(const uint16_t *p, __mmask32 m, __m512i idx) {
    return (__m512bh)_mm512_permutexvar_epi16(idx, _mm512_maskz_loadu_epi16(m, p));
}
/* 32 packed activations (already in lane order, zero-padded) */
static inline __m512bh ldxp(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512(p); }

/* Packed row length: K rounded up to a block of 32. */
static inline int64_t packed_cols(int64_t K) { return (K + 31) & ~(int64_t)31; }

/* A register tile: rows w[0..R) × tokens x[0..T) (R, T <= 6; bf16 rows of K), R*T accumulators, k in blocks of 32
 * then the masked tail; y[j*ldy + i] = the reduced sum.  R and T are constants at each call, so the loops unroll. */
static inline __attribute__((always_inline)) void tile(float *y, int64_t ldy, const uint16_t *w, int64_t K, int R,
                                                       const uint16_t *x, int64_t ldx, int T) {
    __m512 acc[6][6];
    #pragma GCC unroll 6
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 6
        for (int j = 0; j < T; j++) acc[i][j] = _mm512_setzero_ps();
    const __m512i idx = lane_order();
    const int64_t kf = K & ~(int64_t)31;
    for (int64_t k = 0; k < kf; k += 32) {
        __m512bh wv[6];
        #pragma GCC unroll 6
        for (int i = 0; i < R; i++) wv[i] = ldw(w + i * K + k, idx);
        #pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            const __m512bh xv = ldxp(x + j * ldx + k);
            #pragma GCC unroll 6
            for (int i = 0; i < R; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[i], xv);
        }
    }
    if (kf < K) {
        const __mmask32 m = (__mmask32)((1u << (K - kf)) - 1u);
        __m512bh wv[6];
        #pragma GCC unroll 6
        for (int i = 0; i < R; i++) wv[i] = ldwm(w + i * K + kf, m, idx);
        #pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            const __m512bh xv = ldxp(x + j * ldx + kf);
            #pragma GCC unroll 6
            for (int i = 0; i < R; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv[i], xv);
        }
    }
    #pragma GCC unroll 6
    for (int i = 0; i < R; i++)
        #pragma GCC unroll 6
        for (int j = 0; j < T; j++) y[j * ldy + i] = reduce16(acc[i][j]);
}

#define TB 48 /* tokens per block: their packed rows stay in L2 while the item's weight rows pass over them (48: +3-4%
               * over 24, 96 and 192 on Llama-3.2-1B bf16 pp512; token groups outside the row blocks: -4%) */

/* y[t*ldy + r] = W[r] · x[t] for r in [r0, r1), t in [0, n): W bf16 [rows, K], x [n, packed_cols(K)] (pack's).
 * Tiles of 6 rows × 4 tokens (4 × 6 and 8 × 3 measured 4% and 13% slower), then 6 × 1 and 1 × 4 / 1 × 1 for the
 * remainders; fewer than 4 tokens: 4 × 1.  The same bits for every element. */
static void dpbf16_gemm(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const uint16_t *x,
                        int32_t n) {
    const uint16_t *W = w->data;
    const int64_t K = w->cols, P = packed_cols(K);
    if (n < 4) { /* decode: 4 weight rows streamed at a time (6 measured 3.5% slower) */
        for (int32_t t = 0; t < n; t++) {
            int64_t r = r0;
            for (; r + 4 <= r1; r += 4) tile(y + t * ldy + r, ldy, W + r * K, K, 4, x + t * P, P, 1);
            for (; r < r1; r++) tile(y + t * ldy + r, ldy, W + r * K, K, 1, x + t * P, P, 1);
        }
        return;
    }
    for (int32_t t0 = 0; t0 < n; t0 += TB) {
        const int32_t t1 = n - t0 < TB ? n : t0 + TB;
        int64_t r = r0;
        for (; r + 6 <= r1; r += 6) {
            int32_t t = t0;
            for (; t + 4 <= t1; t += 4) tile(y + t * ldy + r, ldy, W + r * K, K, 6, x + t * P, P, 4);
            for (; t < t1; t++) tile(y + t * ldy + r, ldy, W + r * K, K, 6, x + t * P, P, 1);
        }
        for (; r < r1; r++) {
            int32_t t = t0;
            for (; t + 4 <= t1; t += 4) tile(y + t * ldy + r, ldy, W + r * K, K, 1, x + t * P, P, 4);
            for (; t < t1; t++) tile(y + t * ldy + r, ldy, W + r * K, K, 1, x + t * P, P, 1);
        }
    }
}

/* dst [n, packed_cols(k)] = src [n, k] rounded to bf16 (ties to even; exact for values that are already bf16), each
 * block of 32 in lane order, zero-padded. */
static void pack(uint16_t *dst, const float *src, int32_t n, int64_t k) {
    const __m512i idx = lane_order();
    const int64_t P = packed_cols(k);
    for (int32_t t = 0; t < n; t++)
        for (int64_t b = 0; b < P; b += 32) {
            const float *s = src + t * k + b;
            const int64_t left = k - b;
            const __mmask16 lo = left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1u);
            const __mmask16 hi = left >= 32 ? 0xFFFF : left <= 16 ? 0 : (__mmask16)((1u << (left - 16)) - 1u);
            const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + 16), _mm512_maskz_loadu_ps(lo, s));
            _mm512_storeu_si512(dst + t * P + b, _mm512_permutexvar_epi16(idx, (__m512i)v));
        }
}

static const gp_dpbf16_kernels DPBF16 = {.pack = pack, .gemm = dpbf16_gemm};

#pragma GCC pop_options

const gp_dpbf16_kernels *gp_simd_avx512bf16(void) { return &DPBF16; }
#else
const gp_dpbf16_kernels *gp_simd_avx512bf16(void) { return 0; }
#endif
