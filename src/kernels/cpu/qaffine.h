/* qaffine.h — the SIMD kernels of the MLX affine quantized format (GP_WFMT_QAFFINE): which weights they take
 * (4- and 8-bit; other widths use formats.c's generic kernels) and the kernels of each path. */
#ifndef GP_CPU_QAFFINE_H
#define GP_CPU_QAFFINE_H

#include "io/safetensors.h"
#include "kernels/cpu/simd.h"

/* 1 when the SIMD kernels of the qaffine row apply to w (bits 4 or 8). */
static inline int gp_cpu_qaffine_fast(const gp_wt *w) { return w->bits == 4 || w->bits == 8; }

#if defined(__x86_64__) && defined(__GNUC__)
/* y[r] = W[r] · x, r in [r0, r1): the bits of the generic widen + AVX2 dot. */
void gp_avx2_matvec_qaffine(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x);
/* y[t*ldy + r] = W[r] · x[t]: the blocked driver of simd.h over dequantized panels, the bits of the matrix-vector
 * kernel per element. */
void gp_avx2_gemm_qaffine(float *y, int64_t ldy, const gp_wt *w, int64_t r0, int64_t r1, const float *x, int32_t n);
#endif

#endif
