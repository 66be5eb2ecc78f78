/* cpu.c — the CPU backend: every op in backend.h, split into independent items run on the thread pool (pool.h) with
 * the inner loops in the SIMD kernel table (simd.h).  Each output element is computed by exactly one thread in a
 * fixed order, so results depend neither on the thread count nor on how a prompt is chunked.  The thread count is
 * OpenMP's current setting (gp_ctx_eval sets it from the context). */
#include "kernels/backend.h"
#include "kernels/cpu/pool.h"
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

/* Threads of the running forward (gp_ctx_eval sets OpenMP's count from the context). */
static int n_threads(void) { return omp_get_max_threads(); }

typedef struct matmul_job {
    const gp_simd_kernels *K;
    float *y;
    const float *x;
    const gp_wt *w, *bias;
    int32_t n;
    int64_t chunk;
} matmul_job;

/* Item c of a matmul: rows [c*chunk, (c+1)*chunk) for every token. */
static void matmul_item(void *arg, int64_t c, int thread) {
    const matmul_job *j = arg;
    const int64_t d = j->w->rows, r0 = c * j->chunk, r1 = r0 + j->chunk < d ? r0 + j->chunk : d;
    if (j->n == 1) j->K->matvec(j->y, j->w, r0, r1, j->x);
    else j->K->gemm(j->y, d, j->w, r0, r1, j->x, j->n);
    if (j->bias && j->bias->data)
        for (int32_t t = 0; t < j->n; t++)
            for (int64_t r = r0; r < r1; r++) j->y[(int64_t)t * d + r] += wt_at(j->bias, r);
}

/* y [n, d] = x [n, k] @ W[d, k]^T + b.  The rows are cut into contiguous chunks claimed one at a time by the pool's
 * threads (a thread that the OS runs late does less of the work instead of holding everyone up); one token goes
 * through the matrix-vector kernel, several through the blocked matrix-matrix kernel.  Both compute every element
 * as the same dot product (simd.h), so neither the thread count, the chunking nor the number of tokens changes a
 * bit.  The bias is added after the dot product, as in every path. */
static void cpu_matmul(float *y, const float *x, const gp_wt *w, const gp_wt *bias, int32_t n) {
    const int64_t d = w->rows, nt = n_threads();
    /* decode: 128-row chunks (a few hundred KB of weights each); prefill: about 4 chunks per thread, whole tiles */
    int64_t chunk = n == 1 ? 128 : (d + 4 * nt - 1) / (4 * nt);
    if (n > 1) chunk = chunk < 96 ? 96 : (chunk + 47) / 48 * 48;
    matmul_job j = {gp_cpu_kernels(), y, x, w, bias, n, chunk};
    gp_pool_run((int)nt, (d + chunk - 1) / chunk, matmul_item, &j);
}

typedef struct norm_job {
    float *y;
    const float *x;
    const gp_wt *w;
    int32_t d, per;
    int32_t n;
    float eps;
    int plus_one;
} norm_job;

/* Item i of rmsnorm: tokens [i*per, (i+1)*per). */
static void rmsnorm_item(void *arg, int64_t it, int thread) {
    const norm_job *j = arg;
    const int32_t d = j->d;
    for (int64_t t = it * j->per; t < (it + 1) * j->per && t < j->n; t++) {
        const float *xt = j->x + t * d;
        float *yt = j->y + t * d;
        float ss = 0.0f;
        for (int32_t i = 0; i < d; i++) ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)d + j->eps);
        for (int32_t i = 0; i < d; i++) {
            float g = wt_at(j->w, i);
            yt[i] = j->plus_one ? (xt[i] * inv) * (1.0f + g) : g * (xt[i] * inv);
        }
    }
}

/* y [n, d] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w) */
static void cpu_rmsnorm(float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps, int plus_one) {
    int32_t per = 16384 / (d > 0 ? d : 1);
    per = per < 1 ? 1 : per;
    norm_job j = {y, x, w, d, per, n, eps, plus_one};
    gp_pool_run(n_threads(), (n + per - 1) / per, rmsnorm_item, &j);
}

typedef struct rope_job {
    float *x;
    int32_t heads, hd, pos0;
    const float *inv_freq;
} rope_job;

/* Item t of rope: every head of token t. */
static void rope_item(void *arg, int64_t t, int thread) {
    const rope_job *j = arg;
    const int32_t half = j->hd / 2;
    float c[half > 0 ? half : 1], s[half > 0 ? half : 1];
    float p = (float)(j->pos0 + t);
    for (int32_t i = 0; i < half; i++) {
        float a = p * j->inv_freq[i];
        c[i] = cosf(a);
        s[i] = sinf(a);
    }
    for (int32_t h = 0; h < j->heads; h++) {
        float *v = j->x + (t * j->heads + h) * j->hd;
        for (int32_t i = 0; i < half; i++) {
            float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * c[i] - x2 * s[i];
            v[i + half] = x2 * c[i] + x1 * s[i];
        }
    }
}

/* x [n, heads, hd]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) over the two halves */
static void cpu_rope(float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0, const float *inv_freq) {
    rope_job j = {x, heads, hd, pos0, inv_freq};
    gp_pool_run(n_threads(), n, rope_item, &j);
}

typedef struct attn_job {
    const gp_attn_args *a;
    const gp_simd_kernels *K;
} attn_job;

/* Key or value row of cached position j < pos0 for kv head kvh: a pointer into the float cache, or dequantized into
 * tmp [hd] for quantized rows. */
static inline const float *cached_row(const gp_attn_args *a, const gp_kv_view *v, int32_t j, int32_t kvh, float *tmp) {
    const int32_t hd = a->head_dim;
    const int32_t slot = j < a->keep ? j : a->keep + (j - a->keep) % (a->cap - a->keep);
    if (j < v->q_start) return v->f + (int64_t)slot * v->kvd + (int64_t)kvh * hd;
    gp_kv_read(v, slot, j, kvh * hd, hd, tmp);
    return tmp;
}

/* The longest run of positions j.. end-1 whose rows (of view v, or of the chunk's new rows xn) lie evenly spaced
 * n_kv*head_dim floats apart: new rows, or float cache rows until the pinned part ends or the ring wraps; a
 * quantized row is a run of one, dequantized into tmp.  Returns the run's length and its first row in *row. */
static int32_t kv_run(const gp_attn_args *a, const gp_kv_view *v, const float *xn, int32_t j, int32_t end,
                      int32_t kvh, float *tmp, const float **row) {
    const int32_t hd = a->head_dim;
    if (j >= a->pos0) {
        *row = xn + (int64_t)(j - a->pos0) * v->kvd + (int64_t)kvh * hd;
        return end - j;
    }
    *row = cached_row(a, v, j, kvh, tmp);
    if (j >= v->q_start) return 1;
    int32_t e = end < a->pos0 ? end : a->pos0;
    e = e < v->q_start ? e : v->q_start;
    if (j < a->keep) e = e < a->keep ? e : a->keep;
    else {
        const int32_t slot = a->keep + (j - a->keep) % (a->cap - a->keep);
        e = e < j + (a->cap - slot) ? e : j + (a->cap - slot);
    }
    return e - j;
}

/* Item (token, kv head) of attention: the group's query heads one after the other on one thread, so the keys and
 * values of that kv head are read from memory once per token and from cache for the other heads of the group.
 * Keys of query position p, in increasing position order: [0, keep) then [max(keep, lo), p], taken in runs of
 * evenly spaced rows by the score and value kernels (the same bits as one dot / axpy per key). */
static void attn_item(void *arg, int64_t tk, int thread) {
    const gp_attn_args *a = ((const attn_job *)arg)->a;
    const gp_simd_kernels *K = ((const attn_job *)arg)->K;
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv;
    const int64_t kv_stride = (int64_t)a->n_kv * hd;
    const int32_t t = (int32_t)(tk / a->n_kv), kvh = (int32_t)(tk % a->n_kv);
    const int32_t p = a->pos0 + t;
    const int32_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
    const int32_t pin = lo > a->keep ? a->keep : lo; /* positions [0, pin) are pinned and visible */
    const int32_t rb[2] = {0, lo}, re[2] = {pin, p + 1}; /* the two ranges of visible positions */
    float *sc = a->scratch + (int64_t)thread * a->scratch_stride;
    float *tmp = sc + (a->scratch_stride - 2 * hd);
    for (int32_t h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *q = a->q + ((int64_t)t * a->n_heads + h) * hd, *row;
        int32_t cnt = 0;
        for (int g = 0; g < 2; g++)
            for (int32_t j = rb[g], c; j < re[g]; j += c, cnt += c) {
                c = kv_run(a, a->kc, a->k_new, j, re[g], kvh, tmp, &row);
                K->scores(sc + cnt, q, row, kv_stride, c, hd);
            }
        float mx = -INFINITY;
        for (int32_t i = 0; i < cnt; i++) {
            float s = sc[i] * a->scale;
            if (a->softcap > 0) s = tanhf(s / a->softcap) * a->softcap;
            sc[i] = s;
            if (s > mx) mx = s;
        }
        const float sum = K->exp_sum(sc, cnt, mx);
        float *o = a->out + ((int64_t)t * a->n_heads + h) * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        cnt = 0;
        for (int g = 0; g < 2; g++)
            for (int32_t j = rb[g], c; j < re[g]; j += c, cnt += c) {
                c = kv_run(a, a->vc, a->v_new, j, re[g], kvh, tmp + hd, &row);
                K->pv(o, sc + cnt, sum, row, kv_stride, c, hd);
            }
    }
}

/* out [n, n_heads, hd] = softmax(q k^T * scale [soft-capped]) v over the visible keys (causal, sliding window,
 * pinned positions).  Items are (token, kv head); each (token, head) is computed in one fixed order: scores by the
 * shared dot product, exp and sum by exp_sum, then the values accumulated key by key.  The scratch row is the
 * running thread's. */
static void cpu_attention(const gp_attn_args *a) {
    attn_job j = {a, gp_cpu_kernels()};
    gp_pool_run(n_threads(), (int64_t)a->n * a->n_kv, attn_item, &j);
}

static void cpu_embed(float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale) {
    for (int32_t t = 0; t < n; t++) {
        float *yt = y + (int64_t)t * table->cols;
        row_to_f32(table, ids[t], yt);
        if (scale != 1.0f)
            for (int64_t i = 0; i < table->cols; i++) yt[i] *= scale;
    }
}

#define EW_CHUNK 8192 /* elements per item of the element-wise ops */

typedef struct ew_job {
    const gp_simd_kernels *K;
    float *x;
    const float *u;
    int64_t n;
    gp_act act;
    float cap;
} ew_job;

/* Item i of glu: elements [i*EW_CHUNK, ...) (element-wise: any split gives the same bits). */
static void glu_item(void *arg, int64_t it, int thread) {
    const ew_job *j = arg;
    const int64_t i0 = it * EW_CHUNK, i1 = i0 + EW_CHUNK < j->n ? i0 + EW_CHUNK : j->n;
    if (j->act == GP_ACT_SILU) {
        j->K->silu_mul(j->x + i0, j->u + i0, i1 - i0);
        return;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float x = j->x[i], beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
        float inner = beta * (x + kappa * x * x * x);
        j->x[i] = 0.5f * x * (1.0f + tanhf(inner)) * j->u[i];
    }
}

/* gate [n] = act(gate) * up [n] */
static void cpu_glu(float *gate, const float *up, int64_t n, gp_act act) {
    ew_job j = {gp_cpu_kernels(), gate, up, n, act, 0};
    gp_pool_run(n_threads(), (n + EW_CHUNK - 1) / EW_CHUNK, glu_item, &j);
}

static void cpu_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* Item i of softcap: elements [i*EW_CHUNK, ...). */
static void softcap_item(void *arg, int64_t it, int thread) {
    const ew_job *j = arg;
    const int64_t i0 = it * EW_CHUNK, i1 = i0 + EW_CHUNK < j->n ? i0 + EW_CHUNK : j->n;
    for (int64_t i = i0; i < i1; i++) j->x[i] = tanhf(j->x[i] / j->cap) * j->cap;
}

/* x [n] = cap * tanh(x / cap) */
static void cpu_softcap(float *x, int64_t n, float cap) {
    ew_job j = {NULL, x, NULL, n, GP_ACT_SILU, cap};
    gp_pool_run(n_threads(), (n + EW_CHUNK - 1) / EW_CHUNK, softcap_item, &j);
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
