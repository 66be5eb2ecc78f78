/* cpu.c — the CPU backend: every op of backend.h, split into independent items run on the thread pool (pool.h) with
 * the inner loops in the SIMD kernel table (simd.h) and the per-format weight kernels (formats.h).  Each output
 * element is computed by exactly one thread in a fixed order, so results depend neither on the thread count nor on
 * how a prompt is chunked.  The thread count is the workspace's (gp_ws.n_threads), passed to every pool job. */
#include "kernels/backend.h"
#include "kernels/cpu/formats.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/simd.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The CPU workspace's scratch. */
typedef struct cpu_ws {
    float *attn;         /* [n_threads, attn_stride] attention scores + two dequantized rows */
    int64_t attn_stride; /* max_keys + 2 * head_dim */
    float *lora;         /* [max_lora_rank * max_tokens] x A^T of every term of one linear */
    uint16_t *xb;        /* bf16 mode with vdpbf16ps: a linear's input packed to bf16 [max_tokens, max_cols
                            rounded up to 32] */
    int64_t xb_cap;      /* its elements (0: no packing) */
} cpu_ws;

/* Element i of a vector weight. */
static inline float wt_at(const gp_wt *w, int64_t i) { return gp_cpu_format_of(w->format)->at(w, i); }

typedef struct linear_job {
    const gp_simd_kernels *K;
    float *y;
    const float *x;
    const gp_linear *L;
    const float *z; /* the low-rank terms' x A_i^T, term i at z + n * (sum of earlier ranks), [n, rank_i] */
    const gp_dpbf16_kernels *D; /* bf16 mode, bf16 weights, AVX512_BF16: the products from xb (else NULL) */
    const uint16_t *xb;         /* x [n, in] packed to bf16 */
    int32_t n;
    int64_t chunk;
    int bf16;       /* GP_COMPUTE_BF16: bf16 weights (float16/32 ones rounded), x W^T + bias rounded once (torch's
                       bf16 addmm accumulates in float32) */
} linear_job;

/* A view of rows [r0, r0 + n) of a dense weight (LoRA B). */
static gp_wt dense_rows(const gp_wt *w, int64_t r0, int64_t n) {
    const size_t es = w->format == GP_WFMT_F32 ? 4 : 2;
    return gp_wt_dense(w->format, (const char *)w->data + (size_t)r0 * (size_t)w->cols * es, n, w->cols);
}

/* x rounded to the nearest bfloat16 (ties to even), as a float: what a torch bf16 tensor holds (gp_f32_to_bf16's
 * rounding, inline and branch-free so loops of it vectorize; a NaN stays a quiet NaN). */
static inline float bf16r(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u, q = (u | 0x00400000u) & 0xffff0000u;
    u = (u & 0x7fffffffu) > 0x7f800000u ? q : r;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Rounds x [n] to bfloat16 in place (GP_COMPUTE_BF16: an op's output as torch stores it). */
static void round_all(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = bf16r(x[i]);
}

static inline int is_bf16(const gp_ws *ws) { return ws->p.compute == GP_COMPUTE_BF16; }

/* GP_COMPUTE_BF16 with float32/float16 weights: transformers loads them as bf16, so each row is rounded to bf16
 * before the same dot product (a slow path: bf16 mode is for parity, bf16 checkpoints take the fast kernels). */
static void bf16_rows(const struct linear_job *j, int64_t r0, int64_t r1);

/* Item c of a linear: rows [c*chunk, (c+1)*chunk) for every token: the dot products, then the bias, then each
 * low-rank term's scale * (z_i · B_i[r]) in order. */
static void linear_item(void *arg, int64_t c, int thread) {
    const linear_job *j = arg;
    const gp_linear *L = j->L;
    const int64_t d = L->w.rows, r0 = c * j->chunk, r1 = r0 + j->chunk < d ? r0 + j->chunk : d;
    if (j->D) j->D->gemm(j->y, d, &L->w, r0, r1, j->xb, j->n);
    else if (j->bf16 && (L->w.format == GP_WFMT_F32 || L->w.format == GP_WFMT_F16)) bf16_rows(j, r0, r1);
    else if (j->n == 1) gp_cpu_matvec(j->K, j->y, &L->w, r0, r1, j->x);
    else gp_cpu_gemm(j->K, j->y, d, &L->w, r0, r1, j->x, j->n);
    if (L->bias.data)
        for (int32_t t = 0; t < j->n; t++)
            for (int64_t r = r0; r < r1; r++) {
                float *yr = &j->y[(int64_t)t * d + r];
                *yr = j->bf16 ? bf16r(*yr + bf16r(wt_at(&L->bias, r))) : *yr + wt_at(&L->bias, r);
            }
    const float *z = j->z;
    for (int32_t i = 0; i < L->n_lora; i++) {
        const gp_lora *lo = &L->lora[i];
        const int64_t rank = lo->a.rows;
        for (int64_t rb = r0; rb < r1; rb += 64) {
            const int64_t nb = r1 - rb < 64 ? r1 - rb : 64;
            const gp_wt bv = dense_rows(&lo->b, rb, nb);
            float zz[64];
            for (int32_t t = 0; t < j->n; t++) {
                gp_cpu_matvec(j->K, zz, &bv, 0, nb, z + (int64_t)t * rank);
                float *yt = j->y + (int64_t)t * d + rb;
                for (int64_t q = 0; q < nb; q++) yt[q] += lo->scale * zz[q];
            }
        }
        z += (int64_t)j->n * rank;
    }
    if (j->bf16) /* float32 accumulation, the output rounded once (after bias and low-rank terms) */
        for (int32_t t = 0; t < j->n; t++) round_all(j->y + (int64_t)t * d + r0, r1 - r0);
}

typedef struct lora_a_job {
    const gp_simd_kernels *K;
    const gp_linear *L;
    const float *x;
    float *z;
    int32_t n;
} lora_a_job;

/* Item i: z_i [n, rank_i] = x [n, in] A_i^T. */
static void lora_a_item(void *arg, int64_t i, int thread) {
    const lora_a_job *j = arg;
    float *z = j->z;
    for (int64_t k = 0; k < i; k++) z += (int64_t)j->n * j->L->lora[k].a.rows;
    const gp_wt *a = &j->L->lora[i].a;
    if (j->n == 1) gp_cpu_matvec(j->K, z, a, 0, a->rows, j->x);
    else gp_cpu_gemm(j->K, z, a->rows, a, 0, a->rows, j->x, j->n);
}

/* y [n, d] = x [n, k] W[d, k]^T + b + sum_i scale_i (x A_i^T) B_i^T.  The rows are cut into contiguous chunks
 * claimed one at a time by the pool's threads (a thread that the OS runs late does less of the work instead of
 * holding everyone up); one token goes through the matrix-vector kernel, several through the blocked matrix-matrix
 * kernel.  Both compute every element as the same dot product (simd.h), so neither the thread count, the chunking
 * nor the number of tokens changes a bit.  The bias and the low-rank terms are added after the dot product, in
 * that order, as in every path.  Low-rank terms need the workspace's LoRA scratch (n * sum of ranks floats). */
static void cpu_linear(gp_ws *ws, float *y, const float *x, const gp_linear *L, int32_t n) {
    const gp_simd_kernels *K = gp_cpu_kernels();
    const int64_t d = L->w.rows, nt = ws->n_threads;
    cpu_ws *cw = ws->impl;
    float *z = cw->lora;
    if (L->n_lora > 0) {
        lora_a_job a = {K, L, x, z, n};
        gp_pool_run((int)nt, L->n_lora, lora_a_item, &a);
    }
    /* decode: 128-row chunks (a few hundred KB of weights each); prefill: about 4 chunks per thread, whole tiles */
    int64_t chunk = n == 1 ? 128 : (d + 4 * nt - 1) / (4 * nt);
    if (n > 1) chunk = chunk < 96 ? 96 : (chunk + 47) / 48 * 48;
    /* bf16 mode: bf16 weights take vdpbf16ps where the CPU has it, on the input packed to bf16 once */
    const int64_t packed = (int64_t)n * ((L->w.cols + 31) / 32 * 32);
    const gp_dpbf16_kernels *D = is_bf16(ws) && L->w.format == GP_WFMT_BF16 && packed <= cw->xb_cap
                                     ? gp_cpu_dpbf16() : NULL;
    if (D) D->pack(cw->xb, x, n, L->w.cols);
    linear_job j = {K, y, x, L, z, D, cw->xb, n, chunk, is_bf16(ws)};
    gp_pool_run((int)nt, (d + chunk - 1) / chunk, linear_item, &j);
}

static void bf16_rows(const linear_job *j, int64_t r0, int64_t r1) {
    const gp_wt *w = &j->L->w;
    float *row = malloc((size_t)w->cols * sizeof(float));
    if (!row) return; /* (no memory for one row: the rows stay unwritten, as the generic kernel does) */
    for (int64_t r = r0; r < r1; r++) {
        gp_cpu_format_of(w->format)->widen(w, r, row);
        round_all(row, w->cols);
        for (int32_t t = 0; t < j->n; t++) j->y[(int64_t)t * w->rows + r] = j->K->dot(row, j->x + (int64_t)t * w->cols, w->cols);
    }
    free(row);
}

typedef struct norm_job {
    float *y;
    const float *x;
    const gp_wt *w;
    int32_t d, per;
    int32_t n;
    float eps;
    int plus_one, bf16;
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
            float g = j->bf16 ? bf16r(wt_at(j->w, i)) : wt_at(j->w, i); /* bf16: the weight as a bf16 tensor */
            if (!j->bf16) yt[i] = j->plus_one ? (xt[i] * inv) * (1.0f + g) : g * (xt[i] * inv);
            /* bf16: Llama/Qwen round x * inv to bf16, then multiply by the bf16 weight; Gemma multiplies by
             * (1 + w) in float32 and rounds the product */
            else yt[i] = j->plus_one ? bf16r((xt[i] * inv) * (1.0f + g)) : bf16r(g * bf16r(xt[i] * inv));
        }
    }
}

/* y [n, d] = x * rsqrt(mean(x^2) + eps) * (w | 1 + w) */
static void cpu_rmsnorm(gp_ws *ws, float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps,
                        int plus_one) {
    int32_t per = 16384 / (d > 0 ? d : 1);
    per = per < 1 ? 1 : per;
    norm_job j = {y, x, w, d, per, n, eps, plus_one, is_bf16(ws)};
    gp_pool_run(ws->n_threads, (n + per - 1) / per, rmsnorm_item, &j);
}

typedef struct rope_job {
    float *x;
    int32_t heads, hd, pos0;
    const float *inv_freq;
    int bf16;
} rope_job;

/* Item t of rope: every head of token t. */
static void rope_item(void *arg, int64_t t, int thread) {
    const rope_job *j = arg;
    const int32_t half = j->hd / 2;
    float c[half > 0 ? half : 1], s[half > 0 ? half : 1];
    float p = (float)(j->pos0 + t);
    for (int32_t i = 0; i < half; i++) {
        float a = p * j->inv_freq[i];
        c[i] = j->bf16 ? bf16r(cosf(a)) : cosf(a); /* bf16: cos/sin cast to the activations' dtype */
        s[i] = j->bf16 ? bf16r(sinf(a)) : sinf(a);
    }
    for (int32_t h = 0; h < j->heads; h++) {
        float *v = j->x + (t * j->heads + h) * j->hd;
        for (int32_t i = 0; i < half; i++) {
            float x1 = v[i], x2 = v[i + half];
            if (j->bf16) { /* q * cos + rotate_half(q) * sin, each product and the sum rounded */
                v[i] = bf16r(bf16r(x1 * c[i]) - bf16r(x2 * s[i]));
                v[i + half] = bf16r(bf16r(x2 * c[i]) + bf16r(x1 * s[i]));
                continue;
            }
            v[i] = x1 * c[i] - x2 * s[i];
            v[i + half] = x2 * c[i] + x1 * s[i];
        }
    }
}

/* x [n, heads, hd]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) over the two halves */
static void cpu_rope(gp_ws *ws, float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0,
                     const float *inv_freq) {
    rope_job j = {x, heads, hd, pos0, inv_freq, is_bf16(ws)};
    gp_pool_run(ws->n_threads, n, rope_item, &j);
}

typedef struct attn_job {
    const gp_attn_args *a;
    const gp_simd_kernels *K;
    float *scratch;  /* [n_threads, stride] */
    int64_t stride;
    int bf16;
} attn_job;

/* out [len] = elements [off, off+len) of quantized row r of s (x = q * scale[g] + min[g], g = i / group; bits 16:
 * the bfloat16 values widened). */
static void kv_dequant(const gp_kv_rows *s, int64_t r, int32_t off, int32_t len, float *out) {
    const uint8_t *q = s->q + r * s->row_bytes;
    if (s->bits == 16) {
        for (int32_t i = 0; i < len; i++) {
            uint16_t h;
            memcpy(&h, q + 2 * ((int64_t)off + i), 2);
            out[i] = gp_bf16_to_f32(h);
        }
        return;
    }
    const float *sc = s->scale + r * s->n_groups, *mn = s->minv + r * s->n_groups;
    for (int32_t i = off; i < off + len; i++) {
        const int32_t g = i / s->group;
        const int32_t x = s->bits == 8 ? q[i] : (q[i / 2] >> ((i & 1) * 4)) & 15;
        out[i - off] = (float)x * sc[g] + mn[g];
    }
}

/* Runs f over the visible held positions of query position p in increasing order, as runs of rows evenly spaced
 * kvd floats apart (float rows: CALL with row), runs of bfloat16 rows ld16 elements apart where the kernels take
 * them (CALL16 with row16: head_dim a multiple of 16 up to 256), or single dequantized rows (other quantized rows,
 * into tmp [hd]: CALL).  values: read the value storages, else the keys.  CALL gets (first row, count c, keys done
 * so far cnt). */
typedef struct attn_walk {
    const gp_attn_args *a;
    int32_t kvh, p;
    float *tmp;
} attn_walk;

#define WALK(W, VALUES, CALL, CALL16)                                                                                 \
    do {                                                                                                              \
        const gp_kv_desc *d_ = (W)->a->kv;                                                                            \
        const int32_t hd_ = (W)->a->head_dim, p_ = (W)->p;                                                            \
        const int32_t lo_ = d_->window > 0 && p_ - d_->window + 1 > 0 ? p_ - d_->window + 1 : 0;                      \
        const int32_t pin_ = lo_ > d_->pinned ? d_->pinned : lo_;                                                     \
        const int32_t rb_[2] = {0, lo_}, re_[2] = {pin_, p_ + 1};                                                     \
        int32_t cnt = 0;                                                                                              \
        for (int g_ = 0; g_ < 2; g_++)                                                                                \
            for (int32_t s_ = 0; s_ < d_->n_seg; s_++) {                                                              \
                const gp_kv_seg *sg_ = &d_->seg[s_];                                                                  \
                const int32_t j0_ = sg_->p0 > rb_[g_] ? sg_->p0 : rb_[g_], j1_ = sg_->p1 < re_[g_] ? sg_->p1 : re_[g_]; \
                if (j0_ >= j1_) continue;                                                                             \
                const gp_kv_rows *st_ = VALUES ? &d_->v[sg_->src] : &d_->k[sg_->src];                                 \
                const int64_t r_ = sg_->r0 + (int64_t)(j0_ - sg_->p0);                                                \
                if (!sg_->quant) {                                                                                    \
                    const float *row = st_->f + r_ * st_->kvd + (int64_t)(W)->kvh * hd_;                             \
                    const int32_t c = j1_ - j0_;                                                                      \
                    CALL;                                                                                             \
                    cnt += c;                                                                                         \
                } else if (st_->bits == 16 && hd_ % 16 == 0 && hd_ <= 256) {                                          \
                    const uint16_t *row16 = (const uint16_t *)(st_->q + r_ * st_->row_bytes) + (W)->kvh * hd_;    \
                    const int64_t ld16 = st_->row_bytes / 2;                                                          \
                    const int32_t c = j1_ - j0_;                                                                      \
                    CALL16;                                                                                           \
                    cnt += c;                                                                                         \
                } else                                                                                                \
                    for (int32_t j_ = j0_; j_ < j1_; j_++) {                                                          \
                        kv_dequant(st_, r_ + (j_ - j0_), (W)->kvh * hd_, hd_, (W)->tmp);                              \
                        const float *row = (W)->tmp;                                                                  \
                        const int32_t c = 1;                                                                          \
                        CALL;                                                                                         \
                        cnt += 1;                                                                                     \
                    }                                                                                                 \
            }                                                                                                         \
    } while (0)

/* Item (token, kv head) of attention: the group's query heads one after the other on one thread, so the keys and
 * values of that kv head are read from memory once per token and from cache for the other heads of the group.
 * Keys of query position p in increasing position order: the pinned ones [0, pin) then [lo, p], taken in runs of
 * evenly spaced rows by the score and value kernels (the same bits as one dot / axpy per key). */
static void attn_item(void *arg, int64_t tk, int thread) {
    const attn_job *J = arg;
    const gp_attn_args *a = J->a;
    const gp_simd_kernels *K = J->K;
    const int32_t hd = a->head_dim, group = a->n_heads / a->n_kv;
    const int64_t kv_stride = (int64_t)a->n_kv * hd;
    const int32_t t = (int32_t)(tk / a->n_kv), kvh = (int32_t)(tk % a->n_kv);
    float *sc = J->scratch + (int64_t)thread * J->stride;
    attn_walk w = {a, kvh, a->pos0 + t, sc + (J->stride - 2 * hd)};
    for (int32_t h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *q = a->q + ((int64_t)t * a->n_heads + h) * hd;
        int32_t n_keys = 0;
        WALK(&w, 0, (K->scores(sc + cnt, q, row, kv_stride, c, hd), n_keys = cnt + c),
             (K->scores16(sc + cnt, q, row16, ld16, c, hd), n_keys = cnt + c));
        float mx = -INFINITY;
        for (int32_t i = 0; i < n_keys; i++) {
            float s = J->bf16 ? bf16r(bf16r(sc[i]) * a->scale) : sc[i] * a->scale;
            if (a->softcap > 0)
                s = J->bf16 ? bf16r(bf16r(tanhf(bf16r(s / a->softcap))) * a->softcap) : tanhf(s / a->softcap) * a->softcap;
            sc[i] = s;
            if (s > mx) mx = s;
        }
        float sum = K->exp_sum(sc, n_keys, mx);
        if (J->bf16) { /* softmax in float32, probabilities cast to bf16, then p @ v */
            for (int32_t i = 0; i < n_keys; i++) sc[i] = bf16r(sc[i] / sum);
            sum = 1.0f;
        }
        float *o = a->out + ((int64_t)t * a->n_heads + h) * hd;
        memset(o, 0, (size_t)hd * sizeof(float));
        w.tmp = sc + (J->stride - hd);
        WALK(&w, 1, K->pv(o, sc + cnt, sum, row, kv_stride, c, hd), K->pv16(o, sc + cnt, sum, row16, ld16, c, hd));
        w.tmp = sc + (J->stride - 2 * hd);
        if (J->bf16) round_all(o, hd);
    }
}

static void cpu_rope_qk(gp_ws *ws, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                        const float *inv_freq, const gp_wt *qn, const gp_wt *kn, float eps, int plus_one,
                        const gp_kv_dst *dst);

/* out [n, n_heads, hd] = softmax(q k^T * scale [soft-capped]) v over the visible keys (gp_kv_desc), after rope_qk
 * when a->rope says so.  Items are (token, kv head); each (token, head) is computed in one fixed order: scores by
 * the shared dot product, exp and sum by exp_sum, then the values accumulated key by key.  The scratch row is the
 * running thread's. */
static void cpu_attention(gp_ws *ws, const gp_attn_args *a) {
    const cpu_ws *cw = ws->impl;
    const gp_rope_args *r = a->rope;
    if (r) cpu_rope_qk(ws, r->q, r->k, a->n, a->n_heads, a->n_kv, a->head_dim, a->pos0, r->inv_freq, r->q_norm,
                       r->k_norm, r->eps, r->plus_one, r->dst);
    attn_job j = {a, gp_cpu_kernels(), cw->attn, cw->attn_stride, is_bf16(ws)};
    gp_pool_run(ws->n_threads, (int64_t)a->n * a->n_kv, attn_item, &j);
}

static void cpu_embed(gp_ws *ws, float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale) {
    const gp_cpu_format *F = gp_cpu_format_of(table->format);
    const int bf = is_bf16(ws);
    if (bf) scale = bf16r(scale); /* Gemma's normalizer is a tensor of the activations' dtype */
    for (int32_t t = 0; t < n; t++) {
        float *yt = y + (int64_t)t * table->cols;
        F->widen(table, ids[t], yt);
        if (bf) round_all(yt, table->cols); /* a float16/float32 table loaded as bf16 */
        if (scale != 1.0f)
            for (int64_t i = 0; i < table->cols; i++) yt[i] *= scale;
        if (bf) round_all(yt, table->cols);
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
    int bf16;
} ew_job;

/* act(x) in float32 (bf16 mode: torch computes the activation of a bf16 tensor in float and rounds it). */
static float act_one(gp_act act, float x) {
    if (act == GP_ACT_SILU) return x / (1.0f + expf(-x));
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(beta * (x + kappa * x * x * x)));
}

/* Item i of glu: elements [i*EW_CHUNK, ...) (element-wise: any split gives the same bits). */
static void glu_item(void *arg, int64_t it, int thread) {
    const ew_job *j = arg;
    const int64_t i0 = it * EW_CHUNK, i1 = i0 + EW_CHUNK < j->n ? i0 + EW_CHUNK : j->n;
    if (j->bf16) { /* act(gate) rounded, then the product rounded */
        for (int64_t i = i0; i < i1; i++) j->x[i] = bf16r(bf16r(act_one(j->act, j->x[i])) * j->u[i]);
        return;
    }
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
static void cpu_glu(gp_ws *ws, float *gate, const float *up, int64_t n, gp_act act) {
    ew_job j = {gp_cpu_kernels(), gate, up, n, act, 0, is_bf16(ws)};
    gp_pool_run(ws->n_threads, (n + EW_CHUNK - 1) / EW_CHUNK, glu_item, &j);
}

/* y [n] += x [n] */
static void cpu_add(gp_ws *ws, float *y, const float *x, int64_t n) {
    if (is_bf16(ws))
        for (int64_t i = 0; i < n; i++) y[i] = bf16r(y[i] + x[i]); /* bf16: the sum rounded */
    else
        for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* x [n, d] += c * v [d] per row */
static void cpu_add_row(gp_ws *ws, float *x, const float *v, float c, int32_t n, int32_t d) {
    for (int32_t t = 0; t < n; t++) {
        float *xt = x + (int64_t)t * d;
        for (int32_t i = 0; i < d; i++) xt[i] += c * v[i];
    }
}

/* Item i of softcap: elements [i*EW_CHUNK, ...). */
static void softcap_item(void *arg, int64_t it, int thread) {
    const ew_job *j = arg;
    const int64_t i0 = it * EW_CHUNK, i1 = i0 + EW_CHUNK < j->n ? i0 + EW_CHUNK : j->n;
    if (j->bf16) /* logits / cap, tanh, * cap: each rounded */
        for (int64_t i = i0; i < i1; i++) j->x[i] = bf16r(bf16r(tanhf(bf16r(j->x[i] / j->cap))) * j->cap);
    else
        for (int64_t i = i0; i < i1; i++) j->x[i] = tanhf(j->x[i] / j->cap) * j->cap;
}

/* x [n] = cap * tanh(x / cap) */
static void cpu_softcap(gp_ws *ws, float *x, int64_t n, float cap) {
    ew_job j = {NULL, x, NULL, n, GP_ACT_SILU, cap, is_bf16(ws)};
    gp_pool_run(ws->n_threads, (n + EW_CHUNK - 1) / EW_CHUNK, softcap_item, &j);
}

/* Affine quantization of x [kvd] into row r of s: per group, scale = (max - min) / (2^bits - 1),
 * q = round((x - min) / scale) clamped to [0, 2^bits - 1]; bits 16: x rounded to bfloat16. */
static void quantize_row(const gp_kv_rows *s, int64_t r, const float *x) {
    const int32_t G = s->group, qmax = (1 << s->bits) - 1;
    uint8_t *q = s->q + r * s->row_bytes;
    if (s->bits == 16) {
        for (int32_t i = 0; i < s->kvd; i++) {
            const uint16_t h = gp_f32_to_bf16(x[i]);
            memcpy(q + 2 * (int64_t)i, &h, 2);
        }
        return;
    }
    float *scale = s->scale + r * s->n_groups, *minv = s->minv + r * s->n_groups;
    memset(q, 0, (size_t)s->row_bytes);
    for (int32_t g = 0; g < s->n_groups; g++) {
        int32_t a = g * G, b = a + G < s->kvd ? a + G : s->kvd;
        float lo = x[a], hi = x[a];
        for (int32_t i = a + 1; i < b; i++) {
            lo = x[i] < lo ? x[i] : lo;
            hi = x[i] > hi ? x[i] : hi;
        }
        float sc = (hi - lo) / (float)qmax;
        scale[g] = sc;
        minv[g] = lo;
        for (int32_t i = a; i < b; i++) {
            int32_t v = sc > 0 ? (int32_t)lrintf((x[i] - lo) / sc) : 0;
            v = v < 0 ? 0 : v > qmax ? qmax : v;
            if (s->bits == 8) q[i] = (uint8_t)v;
            else q[i / 2] |= (uint8_t)(v << ((i & 1) * 4));
        }
    }
}

/* rows [r0, r0+n) of dst = x [n, kvd], quantized or float32 */
static void store_rows(const gp_kv_rows *dst, int32_t r0, const float *x, int32_t n, int quant) {
    for (int32_t t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * dst->kvd;
        if (quant) quantize_row(dst, (int64_t)r0 + t, xt);
        else memcpy(dst->f + ((int64_t)r0 + t) * dst->kvd, xt, (size_t)dst->kvd * sizeof(float));
    }
}

static void cpu_kv_store(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t r0, const float *k,
                         const float *v, int32_t n, int quant) {
    store_rows(dk, r0, k, n, quant);
    store_rows(dv, r0, v, n, quant);
}

/* rows [d0, d0+n) of dst = rows [s0, s0+n) of src */
static void copy_rows(const gp_kv_rows *dst, int32_t d0, const gp_kv_rows *src, int32_t s0, int32_t n, int quant) {
    if (n <= 0) return;
    if (!quant) {
        memmove(dst->f + (int64_t)d0 * dst->kvd, src->f + (int64_t)s0 * src->kvd, (size_t)n * dst->kvd * sizeof(float));
        return;
    }
    memmove(dst->q + (int64_t)d0 * dst->row_bytes, src->q + (int64_t)s0 * src->row_bytes, (size_t)n * dst->row_bytes);
    memmove(dst->scale + (int64_t)d0 * dst->n_groups, src->scale + (int64_t)s0 * src->n_groups,
            (size_t)n * dst->n_groups * sizeof(float));
    memmove(dst->minv + (int64_t)d0 * dst->n_groups, src->minv + (int64_t)s0 * src->n_groups,
            (size_t)n * dst->n_groups * sizeof(float));
}

static void cpu_kv_copy(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t d0, const gp_kv_rows *sk,
                        const gp_kv_rows *sv, int32_t s0, int32_t n, int quant) {
    copy_rows(dk, d0, sk, s0, n, quant);
    copy_rows(dv, d0, sv, s0, n, quant);
}

/* The composite ops: what a device backend may fuse, the CPU runs as the ops they are made of (the same bits by
 * definition; backend.h states each). */
/* The products' input: x, or h = rmsnorm(x) written to pn->h. */
static const float *prenorm(gp_ws *ws, const float *x, const gp_prenorm *pn, int32_t n, int64_t d) {
    if (!pn) return x;
    cpu_rmsnorm(ws, pn->h, x, pn->w, n, (int32_t)d, pn->eps, pn->plus_one);
    return pn->h;
}

static void cpu_linears(gp_ws *ws, int32_t m, float *const *ys, const float *x, const gp_prenorm *pn,
                        const gp_linear *const *Ls, int32_t n) {
    x = prenorm(ws, x, pn, n, Ls[0]->w.cols);
    for (int32_t i = 0; i < m; i++) cpu_linear(ws, ys[i], x, Ls[i], n);
}

static void cpu_linear_glu(gp_ws *ws, float *y, float *tmp, const float *x, const gp_prenorm *pn,
                           const gp_linear *gate, const gp_linear *up, int32_t n, gp_act act) {
    x = prenorm(ws, x, pn, n, gate->w.cols);
    cpu_linear(ws, y, x, gate, n);
    cpu_linear(ws, tmp, x, up, n);
    cpu_glu(ws, y, tmp, (int64_t)n * gate->w.rows, act);
}

static void cpu_linear_add(gp_ws *ws, float *y, float *tmp, const float *x, const gp_linear *L,
                           const gp_prenorm *next, int32_t n) {
    cpu_linear(ws, tmp, x, L, n);
    cpu_add(ws, y, tmp, (int64_t)n * L->w.rows);
}

static void cpu_rope_qk(gp_ws *ws, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                        const float *inv_freq, const gp_wt *qn, const gp_wt *kn, float eps, int plus_one,
                        const gp_kv_dst *dst) {
    if (qn && qn->data) cpu_rmsnorm(ws, q, q, qn, n * nh, hd, eps, plus_one);
    if (kn && kn->data) cpu_rmsnorm(ws, k, k, kn, n * nkv, hd, eps, plus_one);
    cpu_rope(ws, q, n, nh, hd, pos0, inv_freq);
    cpu_rope(ws, k, n, nkv, hd, pos0, inv_freq);
    if (dst) cpu_kv_store(ws, dst->k, dst->v, dst->r0, k, dst->vals, n, dst->k->bits == 16);
}


static gp_status cpu_finish(gp_ws *ws) { return GP_OK; } /* every op has run when it returns */

/* ---- instance, workspace, memory ---- */

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

static gp_status cpu_ws_init(gp_backend *be, const gp_ws_params *p, gp_ws **out) {
    *out = NULL;
    if (p->n_threads < 0 || p->max_tokens < 0 || p->max_keys < 0 || p->head_dim < 0 || p->max_lora_rank < 0 ||
        p->max_cols < 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "cpu backend: workspace sizes must be >= 0");
    gp_ws *ws = gp_calloc(1, sizeof *ws);
    cpu_ws *cw = gp_calloc(1, sizeof *cw);
    if (!ws || !cw) {
        free(ws);
        free(cw);
        return GP_ERR_NOMEM;
    }
    ws->be = be;
    ws->p = *p;
    ws->n_threads = p->n_threads > 0 ? p->n_threads : be->p.n_threads;
    ws->impl = cw;
    cw->attn_stride = (int64_t)p->max_keys + 2 * (int64_t)p->head_dim;
    cw->attn = gp_malloc((size_t)ws->n_threads * (size_t)cw->attn_stride, sizeof(float));
    cw->lora = gp_malloc((size_t)p->max_lora_rank * (size_t)p->max_tokens + 1, sizeof(float));
    if (p->compute == GP_COMPUTE_BF16 && p->max_cols > 0 && gp_cpu_dpbf16()) {
        cw->xb_cap = (int64_t)p->max_tokens * ((p->max_cols + 31) / 32 * 32);
        cw->xb = gp_malloc((size_t)cw->xb_cap, sizeof(uint16_t));
    }
    if (!cw->attn || !cw->lora || (cw->xb_cap && !cw->xb)) {
        free(cw->attn);
        free(cw->lora);
        free(cw->xb);
        free(cw);
        free(ws);
        return gp_set_error(GP_ERR_NOMEM, "cpu backend: out of memory for a workspace (%d threads x %d keys)",
                            p->n_threads, p->max_keys);
    }
    *out = ws;
    return GP_OK;
}

static void cpu_ws_free(gp_ws *ws) {
    if (!ws) return;
    cpu_ws *cw = ws->impl;
    free(cw->attn);
    free(cw->lora);
    free(cw->xb);
    free(cw);
    free(ws);
}

static void *cpu_alloc(gp_backend *be, size_t bytes) { return malloc(bytes ? bytes : 1); }
static void cpu_dealloc(gp_backend *be, void *p) { free(p); }
static void cpu_memcpy(gp_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}
static gp_status cpu_bind_weight(gp_backend *be, const gp_wt *view, gp_wt *out) {
    if (view->data && !gp_cpu_format_of(view->format))
        return gp_set_error(GP_ERR_UNSUPPORTED, "cpu backend: weight format %d has no kernels", (int)view->format);
    *out = *view; /* the mmap is host memory: a view, no copy */
    return GP_OK;
}
static void cpu_unbind_weight(gp_backend *be, gp_wt *w) {}
static void cpu_free(gp_backend *be) { free(be); }

static const gp_backend_ops CPU_OPS = {
    .free = cpu_free,
    .ws_init = cpu_ws_init,
    .ws_free = cpu_ws_free,
    .alloc = cpu_alloc,
    .dealloc = cpu_dealloc,
    .host_alloc = cpu_alloc,
    .host_free = cpu_dealloc,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .bind_weight = cpu_bind_weight,
    .unbind_weight = cpu_unbind_weight,
    .linear = cpu_linear,
    .linears = cpu_linears,
    .linear_glu = cpu_linear_glu,
    .linear_add = cpu_linear_add,
    .rope_qk = cpu_rope_qk,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .embed = cpu_embed,
    .glu = cpu_glu,
    .add = cpu_add,
    .add_row = cpu_add_row,
    .softcap = cpu_softcap,
    .kv_store = cpu_kv_store,
    .kv_copy = cpu_kv_copy,
    .finish = cpu_finish,
};

gp_status gp_backend_cpu_init(const gp_backend_params *p, gp_backend **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_backend_cpu_init: out is NULL");
    *out = NULL;
    if (p && p->n_threads < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_backend_cpu_init: n_threads < 0");
    gp_backend *be = gp_calloc(1, sizeof *be);
    if (!be) return GP_ERR_NOMEM;
    be->name = "cpu";
    be->ops = &CPU_OPS;
    be->host_memory = 1;
    if (p) be->p = *p;
    if (be->p.n_threads == 0) be->p.n_threads = online_cpus();
    *out = be;
    return GP_OK;
}

void gp_backend_free(gp_backend *be) {
    if (be) be->ops->free(be);
}
