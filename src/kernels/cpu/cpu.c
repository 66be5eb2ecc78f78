/* cpu.c — the CPU backend: reference implementations of every op in backend.h, parallel with OpenMP.
 * Each output element is computed by exactly one thread in a fixed order, so results depend neither on the thread
 * count nor on how a prompt is chunked. */
#include "kernels/backend.h"
#include "kernels/cpu/simd.h"

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

/* y [n, d] = x [n, k] @ W[d, k]^T + b.  The rows are cut into contiguous chunks handed out dynamically (a thread
 * that the OS runs late does less of the work instead of holding everyone up); one token goes through the
 * matrix-vector kernel, several through the blocked matrix-matrix kernel.  Both compute every element as the same
 * dot product (simd.h), so neither the thread count, the chunking nor the number of tokens changes a bit.  The bias
 * is added after the dot product, as in every path. */
static void cpu_matmul(float *y, const float *x, const gp_wt *w, const gp_wt *bias, int32_t n) {
    const gp_simd_kernels *K = gp_cpu_kernels();
    const int64_t d = w->rows;
    const int64_t nt = omp_get_max_threads();
    /* decode: 128-row chunks (a few hundred KB of weights each); prefill: about 4 chunks per thread, whole tiles */
    int64_t chunk = n == 1 ? 128 : (d + 4 * nt - 1) / (4 * nt);
    if (n > 1) chunk = chunk < 96 ? 96 : (chunk + 47) / 48 * 48;
    const int64_t nc = (d + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1)
    for (int64_t c = 0; c < nc; c++) {
        const int64_t r0 = c * chunk, r1 = r0 + chunk < d ? r0 + chunk : d;
        if (n == 1) K->matvec(y, w, r0, r1, x);
        else K->gemm(y, d, w, r0, r1, x, n);
        if (bias && bias->data)
            for (int32_t t = 0; t < n; t++)
                for (int64_t r = r0; r < r1; r++) y[(int64_t)t * d + r] += wt_at(bias, r);
    }
}

/* y [n, d] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w) */
static void cpu_rmsnorm(float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps, int plus_one) {
#pragma omp parallel for schedule(static) if ((int64_t)n * d >= 16384)
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
#pragma omp parallel for schedule(static) if (n > 1)
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

/* Key or value row of cached position j < pos0 for kv head kvh: a pointer into the float cache, or dequantized into
 * tmp [hd] for quantized rows. */
static inline const float *cached_row(const gp_attn_args *a, const gp_kv_view *v, int32_t j, int32_t kvh, float *tmp) {
    const int32_t hd = a->head_dim;
    const int32_t slot = j < a->keep ? j : a->keep + (j - a->keep) % (a->cap - a->keep);
    if (j < v->q_start) return v->f + (int64_t)slot * v->kvd + (int64_t)kvh * hd;
    gp_kv_read(v, slot, j, kvh * hd, hd, tmp);
    return tmp;
}

/* out [n, n_heads, hd] = softmax(q k^T * scale [soft-capped]) v over the visible keys (causal, sliding window,
 * pinned positions).  Keys of query position p, in increasing position order: [0, keep) then [max(keep, lo), p].
 * One work item is (token, kv head): its query heads run one after the other on one thread, so the keys and values
 * of that kv head are read from memory once per token and from cache for the other heads of the group.  Each
 * (token, head) is computed in one fixed order: scores by the shared dot product, exp and sum by exp_sum, then
 * the values accumulated key by key. */
static void cpu_attention(const gp_attn_args *a) {
    const gp_simd_kernels *K = gp_cpu_kernels();
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv;
    const int64_t kv_stride = (int64_t)a->n_kv * hd;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t tk = 0; tk < (int64_t)a->n * a->n_kv; tk++) {
        const int32_t t = (int32_t)(tk / a->n_kv), kvh = (int32_t)(tk % a->n_kv);
        const int32_t p = a->pos0 + t;
        const int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        const int32_t pin = lo > a->keep ? a->keep : lo; /* positions [0, pin) are pinned and visible */
        float *sc = a->scratch + (int64_t)omp_get_thread_num() * a->scratch_stride;
        float *tmp = sc + (a->scratch_stride - 2 * hd);
        for (int32_t h = kvh * group; h < (kvh + 1) * group; h++) {
            const float *q = a->q + ((int64_t)t * a->n_heads + h) * hd;
            float mx = -INFINITY;
            int32_t cnt = 0;
            for (int32_t j = 0; j <= p; j++) {
                if (j == pin) j = lo;
                const float *k = j >= a->pos0 ? a->k_new + (int64_t)(j - a->pos0) * kv_stride + (int64_t)kvh * hd
                                              : cached_row(a, a->kc, j, kvh, tmp);
                float s = K->dot(q, k, hd) * a->scale;
                if (a->softcap > 0) s = tanhf(s / a->softcap) * a->softcap;
                sc[cnt++] = s;
                if (s > mx) mx = s;
            }
            const float sum = K->exp_sum(sc, cnt, mx);
            float *o = a->out + ((int64_t)t * a->n_heads + h) * hd;
            memset(o, 0, (size_t)hd * sizeof(float));
            cnt = 0;
            for (int32_t j = 0; j <= p; j++) {
                if (j == pin) j = lo;
                const float *v = j >= a->pos0 ? a->v_new + (int64_t)(j - a->pos0) * kv_stride + (int64_t)kvh * hd
                                              : cached_row(a, a->vc, j, kvh, tmp + hd);
                K->axpy(o, sc[cnt++] / sum, v, hd);
            }
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
    if (act == GP_ACT_SILU) { /* element-wise: any split over threads gives the same bits */
        const gp_simd_kernels *K = gp_cpu_kernels();
#pragma omp parallel
        {
            const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
            const int64_t per = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
            const int64_t i0 = id * per < n ? id * per : n, i1 = i0 + per < n ? i0 + per : n;
            if (i0 < i1) K->silu_mul(gate + i0, up + i0, i1 - i0);
        }
        return;
    }
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
