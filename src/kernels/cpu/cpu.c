/* cpu.c — the CPU backend: reference implementations of every op in backend.h, parallel with OpenMP.
 * Each output element is computed by exactly one thread in a fixed order, so results depend neither on the thread
 * count nor on how a prompt is chunked. */
#include "kernels/backend.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* Converts row r of w to float32 into dst [w->cols]. */
static void row_to_f32(const gp_wt *w, int64_t r, float *dst) {
    int64_t k = w->cols;
    switch (w->dtype) {
    case GP_DTYPE_F32: memcpy(dst, (const float *)w->data + r * k, (size_t)k * sizeof(float)); break;
    case GP_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)w->data + r * k;
        for (int64_t i = 0; i < k; i++) dst[i] = gp_bf16_to_f32(s[i]);
        break;
    }
    case GP_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)w->data + r * k;
        for (int64_t i = 0; i < k; i++) dst[i] = gp_f16_to_f32(s[i]);
        break;
    }
    default: memset(dst, 0, (size_t)k * sizeof(float)); break; /* loader admits only the three above */
    }
}

/* Element i of a vector weight. */
static inline float wt_at(const gp_wt *w, int64_t i) {
    switch (w->dtype) {
    case GP_DTYPE_F32: return ((const float *)w->data)[i];
    case GP_DTYPE_BF16: return gp_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case GP_DTYPE_F16: return gp_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: return 0;
    }
}

/* The one dot product every matmul and attention uses: 16 partial sums over the stored dtype converted to float32,
 * reduced in a fixed tree.  LOAD(i) yields element i of the weight row as float32. */
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

/* W row r · x [W.cols] */
static inline float dot_row(const gp_wt *w, int64_t r, const float *x) {
    int64_t k = w->cols;
    switch (w->dtype) {
    case GP_DTYPE_F32: return dot_f32((const float *)w->data + r * k, x, k);
    case GP_DTYPE_BF16: return dot_bf16((const uint16_t *)w->data + r * k, x, k);
    case GP_DTYPE_F16: return dot_f16((const uint16_t *)w->data + r * k, x, k);
    default: return 0.0f; /* loader admits only the three above */
    }
}

#define ROW_BLOCK 16

/* y [n, d] = x [n, k] @ W[d, k]^T + b */
static void cpu_matmul(float *y, const float *x, const gp_wt *w, const gp_wt *bias, int32_t n) {
    const int64_t d = w->rows, k = w->cols;
    const int64_t nblocks = (d + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        for (int64_t r = b * ROW_BLOCK; r < d && r < (b + 1) * ROW_BLOCK; r++) {
            float bv = bias && bias->data ? wt_at(bias, r) : 0.0f;
            for (int32_t t = 0; t < n; t++) y[(int64_t)t * d + r] = dot_row(w, r, x + (int64_t)t * k) + bv;
        }
    }
}

/* y [n, d] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w) */
static void cpu_rmsnorm(float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps, int plus_one) {
    for (int32_t t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * d;
        float *yt = y + (int64_t)t * d;
        float ss = 0.0f;
        for (int32_t i = 0; i < d; i++) ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)d + eps);
        for (int32_t i = 0; i < d; i++) {
            float g = wt_at(w, i);
            yt[i] = plus_one ? (xt[i] * inv) * (1.0f + g) : g * (xt[i] * inv);
        }
    }
}

/* x [n, heads, hd]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) over the two halves */
static void cpu_rope(float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0, const float *inv_freq) {
    int32_t half = hd / 2;
    for (int32_t t = 0; t < n; t++) {
        float c[half > 0 ? half : 1], s[half > 0 ? half : 1];
        float p = (float)(pos0 + t);
        for (int32_t i = 0; i < half; i++) {
            float a = p * inv_freq[i];
            c[i] = cosf(a);
            s[i] = sinf(a);
        }
        for (int32_t h = 0; h < heads; h++) {
            float *v = x + ((int64_t)t * heads + h) * hd;
            for (int32_t i = 0; i < half; i++) {
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c[i] - x2 * s[i];
                v[i + half] = x2 * c[i] + x1 * s[i];
            }
        }
    }
}

/* Visits the keys query position p sees, in increasing position order: [0, keep) then [max(keep, lo), p]. */
static void cpu_attention(const gp_attn_args *a) {
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv;
    const int64_t kv_stride = (int64_t)a->n_kv * hd;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t th = 0; th < (int64_t)a->n * a->n_heads; th++) {
        int32_t t = (int32_t)(th / a->n_heads), h = (int32_t)(th % a->n_heads), kvh = h / group;
        int32_t p = a->pos0 + t;
        int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        int32_t pin = lo > a->keep ? a->keep : lo; /* positions [0, pin) are pinned and visible */
        float *sc = a->scratch + (int64_t)omp_get_thread_num() * a->scratch_stride;
        float *tmp = sc + (a->scratch_stride - 2 * hd);
        const float *q = a->q + ((int64_t)t * a->n_heads + h) * hd;
        float mx = -INFINITY;
        int32_t cnt = 0;
        for (int32_t j = 0; j <= p; j++) {
            if (j == pin) j = lo;
            const float *k;
            if (j >= a->pos0) k = a->k_new + (int64_t)(j - a->pos0) * kv_stride + (int64_t)kvh * hd;
            else {
                int32_t slot = j < a->keep ? j : a->keep + (j - a->keep) % (a->cap - a->keep);
                if (j < a->kc->q_start) k = a->kc->f + (int64_t)slot * kv_stride + (int64_t)kvh * hd;
                else {
                    gp_kv_read(a->kc, slot, j, kvh * hd, hd, tmp);
                    k = tmp;
                }
            }
            float s = dot_f32(q, k, hd) * a->scale;
            if (a->softcap > 0) s = tanhf(s / a->softcap) * a->softcap;
            sc[cnt++] = s;
            if (s > mx) mx = s;
        }
        float sum = 0.0f;
        for (int32_t i = 0; i < cnt; i++) {
            float e = expf(sc[i] - mx);
            sc[i] = e;
            sum += e;
        }
        float *o = a->out + ((int64_t)t * a->n_heads + h) * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        cnt = 0;
        for (int32_t j = 0; j <= p; j++) {
            if (j == pin) j = lo;
            const float *v;
            if (j >= a->pos0) v = a->v_new + (int64_t)(j - a->pos0) * kv_stride + (int64_t)kvh * hd;
            else {
                int32_t slot = j < a->keep ? j : a->keep + (j - a->keep) % (a->cap - a->keep);
                if (j < a->vc->q_start) v = a->vc->f + (int64_t)slot * kv_stride + (int64_t)kvh * hd;
                else {
                    gp_kv_read(a->vc, slot, j, kvh * hd, hd, tmp + hd);
                    v = tmp + hd;
                }
            }
            float w = sc[cnt++] / sum;
            for (int32_t i = 0; i < hd; i++) o[i] += w * v[i];
        }
    }
}

static void cpu_embed(float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale) {
    for (int32_t t = 0; t < n; t++) {
        float *yt = y + (int64_t)t * table->cols;
        row_to_f32(table, ids[t], yt);
        if (scale != 1.0f)
            for (int64_t i = 0; i < table->cols; i++) yt[i] *= scale;
    }
}

static void cpu_glu(float *gate, const float *up, int64_t n, gp_act act) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i], g;
        if (act == GP_ACT_SILU) g = x / (1.0f + expf(-x));
        else {
            const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
            float inner = beta * (x + kappa * x * x * x);
            g = 0.5f * x * (1.0f + tanhf(inner));
        }
        gate[i] = g * up[i];
    }
}

static void cpu_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void cpu_softcap(float *x, int64_t n, float cap) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

static const gp_backend CPU = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .embed = cpu_embed,
    .glu = cpu_glu,
    .add = cpu_add,
    .softcap = cpu_softcap,
};

const gp_backend *gp_backend_cpu(void) { return &CPU; }
