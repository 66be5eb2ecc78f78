/* formats.h — the CPU backend's per-format traits table: one row per weight format (gp_wfmt), with what every
 * kernel needs to read that format: widen a row to float32, read one element of a vector, and per SIMD path the
 * matrix-vector and matrix-matrix kernels.  A new format (MLX affine q2..q8, issue 11) is one new row in formats.c
 * (widen + at, optionally SIMD kernels); a NULL kernel falls back to the generic ones below (widen each row to
 * float32 once, then the path's float32 dot product), which give the same bits as any kernel of that path must.
 * Nothing outside kernels/cpu switches on a weight's format. */
#ifndef GP_CPU_FORMATS_H
#define GP_CPU_FORMATS_H

#include "kernels/cpu/simd.h"

typedef struct gp_cpu_format {
    const char *name;
    /* dst [w->cols] = row r of w as float32 (exactly the values every kernel multiplies) */
    void (*widen)(const gp_wt *w, int64_t r, float *dst);
    /* element i of row 0 (vector weights: norms, biases) */
    float (*at)(const gp_wt *w, int64_t i);
    /* 1 when the path kernels below take this weight (NULL = always; e.g. quantized: only 4 and 8 bits) */
    int (*fast)(const gp_wt *w);
    /* per SIMD path (gp_simd_id); NULL = the generic kernels below */
    struct {
        gp_matvec_fn matvec;
        gp_gemm_fn gemm;
    } path[GP_SIMD_N];
} gp_cpu_format;

/* The row of format f (NULL when f is not a format of this build). */
const gp_cpu_format *gp_cpu_format_of(gp_wfmt f);

/* y[r] = W[r] · x, r in [r0, r1), on path K: the format's kernel or the generic one. */
void gp_cpu_matvec(const gp_simd_kernels *K, float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);

/* y[t*ldy + r] = W[r] · x[t], r in [r0, r1), t in [0, n), on path K: the same bits as gp_cpu_matvec per element. */
void gp_cpu_gemm(const gp_simd_kernels *K, float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1,
                 const float *x, int32_t n);

#endif
