/* simd_scalar.c — the portable reference kernels (see simd.h): plain C, multiply and add rounded separately
 * (the build uses -std=c11, so the compiler does not contract them into FMAs). */
#include "kernels/cpu/simd.h"

#include <math.h>
#include <string.h>

/* The reference dot product: 16 partial sums, fixed tree.  LOAD(i) yields element i of a as float32. */
#define DEFINE_DOT(NAME, TYPE, LOAD)                                                                                  \
    static float NAME(const TYPE *a, const float *b, int64_t n) {                                                     \
        float acc[16] = {0};                                                                                          \
        int64_t i = 0;                                                                                                \
        for (; i + 16 <= n; i += 16)                                                                                  \
            for (int j = 0; j < 16; j++) acc[j] += LOAD(a, i + j) * b[i + j];                                         \
        for (int j = 0; i < n; i++, j++) acc[j] += LOAD(a, i) * b[i];                                                 \
        for (int w = 8; w >= 1; w /= 2)                                                                               \
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];                                                         \
        return acc[0];                                                                                                \
    }
#define LOAD_F32(a, i) ((a)[i])
#define LOAD_BF16(a, i) gp_bf16_to_f32((a)[i])
#define LOAD_F16(a, i) gp_f16_to_f32((a)[i])
DEFINE_DOT(dot_f32, float, LOAD_F32)
DEFINE_DOT(dot_bf16, uint16_t, LOAD_BF16)
DEFINE_DOT(dot_f16, uint16_t, LOAD_F16)

/* y[r] = W[r] · x, r in [r0, r1), one function per dense format (rows of formats.c) */
#define DEFINE_MATVEC(NAME, TYPE, DOT)                                                                                \
    void NAME(float *y, const gp_wt *w, int64_t r0, int64_t r1, const float *x) {                                     \
        for (int64_t r = r0; r < r1; r++) y[r] = DOT((const TYPE *)w->data + r * w->cols, x, w->cols);                \
    }
DEFINE_MATVEC(gp_scalar_matvec_f32, float, dot_f32)
DEFINE_MATVEC(gp_scalar_matvec_bf16, uint16_t, dot_bf16)
DEFINE_MATVEC(gp_scalar_matvec_f16, uint16_t, dot_f16)

/* s[j] = exp(s[j] - mx), summed in order */
static float exp_sum(float *s, int64_t n, float mx) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float e = expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* o [n] += a * v [n] */
static void axpy(float *o, float a, const float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] += a * v[i];
}


/* s[j] = q · k_j, key by key */
static void scores(float *s, const float *q, const float *k, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) s[j] = dot_f32(q, k + j * stride, hd);
}

/* o += (p[j] / sum) * v_j, key by key */
static void pv(float *o, const float *p, float sum, const float *v, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) axpy(o, p[j] / sum, v + j * stride, hd);
}

/* scores and pv over bfloat16 rows: the same products and sums on the widened values (q k = k q, rounded once) */
static void scores16(float *s, const float *q, const uint16_t *k, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) s[j] = dot_bf16(k + j * stride, q, hd);
}
static void pv16(float *o, const float *p, float sum, const uint16_t *v, int64_t stride, int64_t count, int64_t hd) {
    for (int64_t j = 0; j < count; j++) {
        const float a = p[j] / sum;
        const uint16_t *vj = v + j * stride;
        for (int64_t i = 0; i < hd; i++) o[i] += a * gp_bf16_to_f32(vj[i]);
    }
}

/* g [n] = silu(g) * u [n] */
static void silu_mul(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

static const gp_simd_kernels SCALAR = {
    .name = "scalar", .id = GP_SIMD_SCALAR, .dot = dot_f32, .exp_sum = exp_sum, .axpy = axpy, .scores = scores, .pv = pv,
    .scores16 = scores16, .pv16 = pv16, .silu_mul = silu_mul,
};

const gp_simd_kernels *gp_simd_scalar(void) { return &SCALAR; }
