/* simd.h — the CPU backend's inner kernels, one table per instruction set (scalar, AVX2+FMA+F16C, AVX-512), chosen
 * once at run time from the CPU's features (or forced by GENPARITY_SIMD / gp_cpu_force_simd).
 *
 * The one reduction every product uses: 16 partial sums over k (lane j takes the elements k ≡ j mod 16; a tail of
 * K mod 16 elements goes to lanes 0..tail-1), reduced in the fixed tree j += j+8, j += j+4, j += j+2, j += j+1.
 * Weights are converted to float32 exactly (bf16 by shifting, f16 by F16C); activations stay float32.  The matrix-
 * vector kernel (decode) and the matrix-matrix kernel (prefill) run this same arithmetic for every output element,
 * so an element's bits depend neither on how many tokens are in the call nor on which thread computes it.
 * Within one table results are bit-identical; across tables they differ in rounding (the scalar path multiplies
 * and adds separately, the SIMD paths fuse), always within the parity tolerance. */
#ifndef GP_CPU_SIMD_H
#define GP_CPU_SIMD_H

#include "kernels/backend.h"

#include <stdint.h>

/* The SIMD paths (index of a path's column in the per-format traits table, formats.h). */
typedef enum gp_simd_id { GP_SIMD_SCALAR = 0, GP_SIMD_AVX2 = 1, GP_SIMD_AVX512 = 2, GP_SIMD_N } gp_simd_id;

/* y[r] = W[r] · x for r in [r0, r1); W [rows, K] in its format, x [K] */
typedef void (*gp_matvec_fn)(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
/* y[t*ldy + r] = W[r] · x[t] for r in [r0, r1), t in [0, n); x [n, K].  Same bits as matvec per element. */
typedef void (*gp_gemm_fn)(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);

/* The format-independent kernels of one SIMD path (the weight kernels are in the traits table, formats.h). */
typedef struct gp_simd_kernels {
    const char *name; /* "scalar", "avx2", "avx512" */
    gp_simd_id id;
    /* a [n] · b [n], both float32 */
    float (*dot)(const float *a, const float *b, int64_t n);
    /* s[j] = exp(s[j] - mx) for j in [0, n); returns the sum of the new s in a fixed order */
    float (*exp_sum)(float *s, int64_t n, float mx);
    /* o [n] += a * v [n] */
    void (*axpy)(float *o, float a, const float *v, int64_t n);
    /* s[j] = q [hd] · k_j [hd], k_j = k + j*stride, j in [0, count): the same bits as dot(q, k_j, hd) */
    void (*scores)(float *s, const float *q, const float *k, int64_t stride, int64_t count, int64_t hd);
    /* for j in [0, count) in order: o [hd] += (p[j] / sum) * v_j [hd], v_j = v + j*stride: the same bits as
     * axpy(o, p[j] / sum, v_j, hd) called key by key */
    void (*pv)(float *o, const float *p, float sum, const float *v, int64_t stride, int64_t count, int64_t hd);
    /* scores and pv over bfloat16 rows (a cache's `kv_bits 16` rows, widened as they are read; hd a multiple of 16,
     * at most 256): the bits scores and pv give on the rows widened to float32 */
    void (*scores16)(float *s, const float *q, const uint16_t *k, int64_t stride, int64_t count, int64_t hd);
    void (*pv16)(float *o, const float *p, float sum, const uint16_t *v, int64_t stride, int64_t count, int64_t hd);
    /* g [n] = silu(g) * u [n] */
    void (*silu_mul)(float *g, const float *u, int64_t n);
} gp_simd_kernels;

/* The weight kernels each path exports for the dense formats (rows of formats.c). */
void gp_scalar_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_scalar_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_scalar_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
#if defined(__x86_64__) && defined(__GNUC__)
void gp_avx2_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx2_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx2_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx2_gemm_f32(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
void gp_avx2_gemm_bf16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
void gp_avx2_gemm_f16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
/* The AVX2 matrix-matrix driver shared by every format: blocks of 4 rows x 3 tokens over float32 panels of the
 * weights (panel widens nk elements of row r from column k0, nk a multiple of 16, exactly as the format's
 * matrix-vector kernel sees them; NULL: the weights are float32 and used in place), remainders through matvec.  Every
 * output has the bits of matvec. */
typedef void (*gp_avx2_panel_fn)(const gp_wt *w, int64_t r, int64_t k0, int64_t nk, float *out);
void gp_avx2_gemm_blocked(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n,
                          gp_avx2_panel_fn panel, gp_matvec_fn matvec);
void gp_avx512_matvec_f32(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx512_matvec_bf16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx512_matvec_f16(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
void gp_avx512_gemm_f32(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
void gp_avx512_gemm_bf16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
void gp_avx512_gemm_f16(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
#endif

/* The bf16 compute mode's weight products on CPUs with AVX512_BF16 (simd_avx512bf16.c): activations packed to bf16
 * once per linear, then y[t*ldy + r] = W[r] · x[t] (r in [r0, r1), t in [0, n)) over bf16 W by vdpbf16ps with
 * float32 accumulation in the reduction above (lane j: k = j mod 16, in increasing k; then the fixed tree), so the
 * bits of the float32 kernels on the same bf16 values (denormals aside: vdpbf16ps flushes them). */
typedef struct gp_dpbf16_kernels {
    /* dst [n, (k + 31) / 32 * 32] = bf16(src [n, k]) (ties to even) in the kernel's lane order, zero-padded */
    void (*pack)(uint16_t *dst, const float *src, int32_t n, int64_t k);
    /* x: pack's output for W's k = w->cols */
    void (*gemm)(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const uint16_t *x, int32_t n);
} gp_dpbf16_kernels;
const gp_dpbf16_kernels *gp_simd_avx512bf16(void); /* NULL when not compiled in */
/* The bf16-mode kernels in use: those above when the path in use is AVX-512 and the CPU has AVX512_BF16, else NULL
 * (the bf16 mode then runs the path's float32 kernels on the bf16 values). */
const gp_dpbf16_kernels *gp_cpu_dpbf16(void);

const gp_simd_kernels *gp_simd_scalar(void);
const gp_simd_kernels *gp_simd_avx2(void);   /* NULL when not compiled in */
const gp_simd_kernels *gp_simd_avx512(void); /* NULL when not compiled in */

/* The table in use (resolved once: GENPARITY_SIMD if set and supported, else the best the CPU has). */
const gp_simd_kernels *gp_cpu_kernels(void);

/* Test hook: forces the table "scalar" | "avx2" | "avx512", or the automatic choice for NULL/"auto".  Returns 0, or
 * -1 when the CPU (or build) lacks that path (nothing changes).  Not thread-safe with running forwards. */
int gp_cpu_force_simd(const char *name);

/* 1 when the CPU (and build) can run the named path. */
int gp_cpu_simd_supported(const char *name);

#endif
