/* formats.c — the CPU per-format traits table (formats.h): rows for f32, bf16 and f16, and the generic kernels a
 * row without its own SIMD kernel uses (widen each weight row to float32 once, then the path's dot product). */
#include "kernels/cpu/formats.h"
#include "kernels/cpu/qaffine.h"

#include <stdlib.h>
#include <string.h>

static void widen_f32(const gp_wt *w, int64_t r, float *dst) {
    memcpy(dst, (const float *)w->data + r * w->cols, (size_t)w->cols * sizeof(float));
}
static void widen_bf16(const gp_wt *w, int64_t r, float *dst) {
    const uint16_t *s = (const uint16_t *)w->data + r * w->cols;
    for (int64_t i = 0; i < w->cols; i++) dst[i] = gp_bf16_to_f32(s[i]);
}
static void widen_f16(const gp_wt *w, int64_t r, float *dst) {
    const uint16_t *s = (const uint16_t *)w->data + r * w->cols;
    for (int64_t i = 0; i < w->cols; i++) dst[i] = gp_f16_to_f32(s[i]);
}
/* A scale or bias of a quantized weight (element i of the aux tensor) as float32. */
static float aux_at(const gp_wt_aux *a, int64_t i) {
    if (a->dtype == GP_DTYPE_BF16) return gp_bf16_to_f32(((const uint16_t *)a->data)[i]);
    if (a->dtype == GP_DTYPE_F16) return gp_f16_to_f32(((const uint16_t *)a->data)[i]);
    return ((const float *)a->data)[i];
}

/* Unsigned value i of a little-endian bit stream of `bits`-bit values (bits <= 8). */
static inline uint32_t qbits_at(const uint8_t *p, int64_t i, int bits, int64_t nbytes) {
    const int64_t off = i * bits, byte = off >> 3;
    const int sh = (int)(off & 7);
    uint32_t v = p[byte];
    if (sh + bits > 8 && byte + 1 < nbytes) v |= (uint32_t)p[byte + 1] << 8;
    return (v >> sh) & ((1u << bits) - 1);
}

/* MLX affine: dst[i] = scale * q + bias (two float32 operations; scale * q is exact for bf16/f16 scales). */
static void widen_qaffine(const gp_wt *w, int64_t r, float *dst) {
    const int64_t C = w->cols, gs = w->group_size, G = C / gs, nb = C * w->bits / 8;
    const uint8_t *p = (const uint8_t *)w->data + r * nb;
    for (int64_t g = 0; g < G; g++) {
        const float s = aux_at(&w->scales, r * G + g), b = aux_at(&w->biases, r * G + g);
        float *d = dst + g * gs;
        const int64_t i0 = g * gs;
        if (w->bits == 4)
            for (int64_t i = 0; i < gs; i++) d[i] = s * (float)((p[(i0 + i) >> 1] >> (((i0 + i) & 1) * 4)) & 15) + b;
        else if (w->bits == 8)
            for (int64_t i = 0; i < gs; i++) d[i] = s * (float)p[i0 + i] + b;
        else
            for (int64_t i = 0; i < gs; i++) d[i] = s * (float)qbits_at(p, i0 + i, w->bits, nb) + b;
    }
}

static float at_f32(const gp_wt *w, int64_t i) { return ((const float *)w->data)[i]; }
static float at_bf16(const gp_wt *w, int64_t i) { return gp_bf16_to_f32(((const uint16_t *)w->data)[i]); }
static float at_f16(const gp_wt *w, int64_t i) { return gp_f16_to_f32(((const uint16_t *)w->data)[i]); }
static float at_qaffine(const gp_wt *w, int64_t i) {
    const int64_t g = i / w->group_size, nb = w->cols * w->bits / 8;
    return aux_at(&w->scales, g) * (float)qbits_at((const uint8_t *)w->data, i, w->bits, nb) + aux_at(&w->biases, g);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define X86(...) __VA_ARGS__
#else
#define X86(...) {NULL, NULL}
#endif

static const gp_cpu_format FORMATS[GP_WFMT_COUNT] = {
    [GP_WFMT_F32] = {"f32", widen_f32, at_f32, NULL,
                     {[GP_SIMD_SCALAR] = {gp_scalar_matvec_f32, NULL},
                      [GP_SIMD_AVX2] = X86({gp_avx2_matvec_f32, gp_avx2_gemm_f32}),
                      [GP_SIMD_AVX512] = X86({gp_avx512_matvec_f32, gp_avx512_gemm_f32})}},
    [GP_WFMT_BF16] = {"bf16", widen_bf16, at_bf16, NULL,
                      {[GP_SIMD_SCALAR] = {gp_scalar_matvec_bf16, NULL},
                       [GP_SIMD_AVX2] = X86({gp_avx2_matvec_bf16, gp_avx2_gemm_bf16}),
                       [GP_SIMD_AVX512] = X86({gp_avx512_matvec_bf16, gp_avx512_gemm_bf16})}},
    [GP_WFMT_F16] = {"f16", widen_f16, at_f16, NULL,
                     {[GP_SIMD_SCALAR] = {gp_scalar_matvec_f16, NULL},
                      [GP_SIMD_AVX2] = X86({gp_avx2_matvec_f16, gp_avx2_gemm_f16}),
                      [GP_SIMD_AVX512] = X86({gp_avx512_matvec_f16, gp_avx512_gemm_f16})}},
    [GP_WFMT_QAFFINE] = {"qaffine", widen_qaffine, at_qaffine, gp_cpu_qaffine_fast,
                         {[GP_SIMD_SCALAR] = {NULL, NULL},
                          [GP_SIMD_AVX2] = X86({gp_avx2_matvec_qaffine, gp_avx2_gemm_qaffine}),
                          [GP_SIMD_AVX512] = X86({gp_avx2_matvec_qaffine, gp_avx2_gemm_qaffine})}},
};

const gp_cpu_format *gp_cpu_format_of(gp_wfmt f) {
    return (unsigned)f < GP_WFMT_COUNT && FORMATS[f].widen ? &FORMATS[f] : NULL;
}

#define WIDEN_STACK 4096 /* rows up to this many columns are widened on the stack */

/* Generic matrix-vector: each row widened to float32, then the path's dot product. */
static void matvec_generic(const gp_simd_kernels *K, const gp_cpu_format *F, float *y, const gp_wt *w, int64_t r0,
                           int64_t r1, const float *x) {
    float stack[WIDEN_STACK], *buf = w->cols <= WIDEN_STACK ? stack : malloc((size_t)w->cols * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        if (!buf) { /* no memory for a wide row: element by element through a one-row stack window is not exact
                     * for every format, so leave the row at zero (never happens for the dense formats) */
            y[r] = 0.0f;
            continue;
        }
        F->widen(w, r, buf);
        y[r] = K->dot(buf, x, w->cols);
    }
    if (buf != stack) free(buf);
}

void gp_cpu_matvec(const gp_simd_kernels *K, float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {
    const gp_cpu_format *F = gp_cpu_format_of(w->format);
    if (!F) return; /* the binder admits only formats of this table */
    if (F->path[K->id].matvec && (!F->fast || F->fast(w))) F->path[K->id].matvec(y, w, r0, r1, x);
    else matvec_generic(K, F, y, w, r0, r1, x);
}

/* Generic matrix-matrix: per block of tokens (about 512 KiB of activations), each weight row is widened once and
 * dotted with every token of the block: the same products as the format's matvec on this path. */
void gp_cpu_gemm(const gp_simd_kernels *K, float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1,
                 const float *x, int32_t n) {
    const gp_cpu_format *F = gp_cpu_format_of(w->format);
    if (!F) return;
    if (F->path[K->id].gemm && (!F->fast || F->fast(w))) {
        F->path[K->id].gemm(y, ldy, w, r0, r1, x, n);
        return;
    }
    const int64_t Kc = w->cols;
    int64_t tb = (512 * 1024) / (Kc * (int64_t)sizeof(float));
    tb = tb < 1 ? 1 : tb > 256 ? 256 : tb;
    const int f32 = w->format == GP_WFMT_F32;
    float stack[WIDEN_STACK], *buf = f32 || Kc <= WIDEN_STACK ? stack : malloc((size_t)Kc * sizeof(float));
    if (!buf) {
        for (int32_t t = 0; t < n; t++) gp_cpu_matvec(K, y + t * ldy, w, r0, r1, x + (int64_t)t * Kc);
        return;
    }
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        const int64_t t1 = t0 + tb < n ? t0 + tb : n;
        for (int64_t r = r0; r < r1; r++) {
            const float *row = buf;
            if (f32) row = (const float *)w->data + r * Kc;
            else F->widen(w, r, buf);
            for (int64_t t = t0; t < t1; t++) y[t * ldy + r] = K->dot(row, x + t * Kc, Kc);
        }
    }
    if (buf != stack) free(buf);
}
