/* forward_cuda.c — the forward pass of forward.c on the CUDA backend (kernels/cuda/cuda_ops.h), op for op:
 * the model's weights are uploaded once in their stored dtype (tied lm_head shared), each CUDA context has its own
 * stream, device KV cache (float32, one ring per layer laid out like the host cache's: plain, sliding window or
 * rotating with pinned positions) and scratch for one prefill chunk; logits (and captured hidden states) are copied
 * back once per call.  The host cache keeps the bookkeeping (n_past, token ids) so trim/reset/prefix reuse work.
 * Interim until the backend-instance seam (issue 10) lands: then these ops plug into the backend instance. */
#include "model/forward_cuda.h"
#include "model/ctx.h"
#include "util/util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifndef GP_CUDA

gp_status gp_cuda_ctx_init(struct gp_ctx *c) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: this genparity was built without the CUDA "
                                            "backend (build it with `make cuda`; backends here: %s)", gp_backends());
}
void gp_cuda_ctx_free(gp_cuda_ctx *x) { (void)x; }
void gp_cuda_model_free(gp_cuda_model *dm) { (void)dm; }
gp_status gp_cuda_forward_chunk(struct gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0,
                                int32_t n_total, float *logits, int all) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_eval: no CUDA backend in this build");
}

#else
#include "kernels/cuda/cuda_ops.h"

/* One layer's weights on the device (gp_layer's, by name). */
typedef struct cu_layer {
    gp_cu_wt attn_norm, q_norm, k_norm, attn_post_norm, ffn_norm, ffn_post_norm;
    gp_cu_wt wq, wk, wv, wo, wg, wu, wd; /* projections */
    gp_cu_wt bq, bk, bv, bo, bg, bu, bd; /* their biases (data NULL = none) */
    gp_cu_wt qkv, qkv_b, gu, gu_b;       /* q|k|v and gate|up rows stacked, with their biases (data NULL when not
                                            stacked); wq.. wu are views into these */
} cu_layer;

struct gp_cuda_model {
    gp_cu *d;               /* the uploading handle (each context has its own stream) */
    gp_cu_wt tok_embd, out_norm, lm_head;
    cu_layer *layers;       /* [n_layers] */
    float *inv_full, *inv_sliding;
    void **allocs;
    int32_t n_allocs;
    uint64_t bytes;
};

struct gp_cuda_ctx {
    gp_cu *d;
    const gp_cuda_model *dm;
    float *x, *h, *q, *k, *v, *att, *gate, *up, *logits, *part, *steer;
    float *qkv, *gu;        /* decode: the fused projections' outputs [Q + 2 KV], [F] (after the GLU) */
    int32_t *ids, *pos;
    gp_cu_kv *kv;           /* [n_layers] */
    int32_t *window;        /* [n_layers] the layer's visibility window (0 = all earlier positions) */
    int32_t C, ns, qb, lb;  /* chunk, attention splits, queries per attention call, logit rows per matmul */
    void *graph;            /* the decode step captured as a CUDA graph, for graph_ns attention splits */
    int32_t graph_ns;
    void **allocs;
    int32_t n_allocs;
    uint64_t bytes;
};

static gp_status cu_fail(const char *what, int e) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "device cuda: %s: %s", what, gp_cu_errstr(e));
}

/* Allocates bytes on the device and records the pointer in *list (freed together). */
static int dev_alloc(gp_cu *d, void ***list, int32_t *n, uint64_t *total, size_t bytes, void **p) {
    void **l = realloc(*list, sizeof(void *) * (size_t)(*n + 1));
    if (!l) return 2; /* cudaErrorMemoryAllocation */
    *list = l;
    int e = gp_cu_alloc(d, p, bytes);
    if (e) return e;
    l[(*n)++] = *p;
    *total += bytes;
    return 0;
}

static gp_cu_wt cu_wt_shape(const gp_wt *w) {
    gp_cu_wt o = {NULL, w->format == GP_WFMT_F32 ? GP_CU_F32 : w->format == GP_WFMT_BF16 ? GP_CU_BF16 : GP_CU_F16,
                  w->rows, w->cols};
    return o;
}

static size_t wt_bytes(const gp_wt *w) { return (size_t)gp_wt_bytes(w); }

static int upload(gp_cuda_model *dm, const gp_wt *w, gp_cu_wt *o) {
    *o = cu_wt_shape(w);
    if (!w->data) return 0;
    void *p;
    int e = dev_alloc(dm->d, &dm->allocs, &dm->n_allocs, &dm->bytes, wt_bytes(w), &p);
    if (!e) e = gp_cu_h2d(dm->d, p, w->data, wt_bytes(w));
    o->data = p;
    return e;
}

/* Uploads the np weight parts (same dtype; matrices: same columns, rows stacked; vectors (vec): concatenated) as
 * one tensor *cat; outs[i] become views of it.  Returns 0 with cat->data NULL (nothing uploaded) when the parts
 * cannot be stacked. */
static int upload_cat(gp_cuda_model *dm, const gp_wt *const *parts, int np, int vec, gp_cu_wt **outs,
                      gp_cu_wt *cat) {
    memset(cat, 0, sizeof *cat);
    int64_t rows = 0, cols = 0;
    size_t bytes = 0;
    for (int i = 0; i < np; i++) {
        if (!parts[i]->data || parts[i]->format != parts[0]->format || (!vec && parts[i]->cols != parts[0]->cols))
            return 0;
        rows += parts[i]->rows;
        cols += parts[i]->cols;
        bytes += wt_bytes(parts[i]);
    }
    *cat = cu_wt_shape(parts[0]);
    if (vec) cat->cols = cols;
    else cat->rows = rows;
    void *p;
    size_t off = 0;
    int e = dev_alloc(dm->d, &dm->allocs, &dm->n_allocs, &dm->bytes, bytes, &p);
    for (int i = 0; i < np && !e; i++) {
        e = gp_cu_h2d(dm->d, (char *)p + off, parts[i]->data, wt_bytes(parts[i]));
        *outs[i] = cu_wt_shape(parts[i]);
        outs[i]->data = (char *)p + off;
        off += wt_bytes(parts[i]);
    }
    cat->data = p;
    return e;
}

/* Layer L's weights: q|k|v and gate|up stacked (with their biases when all are present), the rest one by one. */
static int upload_layer(gp_cuda_model *dm, const gp_layer *L, cu_layer *W) {
    const gp_wt *qkv[] = {&L->q.w, &L->k.w, &L->v.w}, *qkvb[] = {&L->q.bias, &L->k.bias, &L->v.bias};
    const gp_wt *gu[] = {&L->gate.w, &L->up.w}, *gub[] = {&L->gate.bias, &L->up.bias};
    gp_cu_wt *oq[] = {&W->wq, &W->wk, &W->wv}, *oqb[] = {&W->bq, &W->bk, &W->bv};
    gp_cu_wt *og[] = {&W->wg, &W->wu}, *ogb[] = {&W->bg, &W->bu};
    int e = upload_cat(dm, qkv, 3, 0, oq, &W->qkv);
    if (!e && W->qkv.data && L->q.bias.data) e = upload_cat(dm, qkvb, 3, 1, oqb, &W->qkv_b);
    if (!e && W->qkv.data && !!L->q.bias.data != !!W->qkv_b.data) W->qkv.data = NULL; /* biases not stackable */
    if (!e) e = upload_cat(dm, gu, 2, 0, og, &W->gu);
    if (!e && W->gu.data && L->gate.bias.data) e = upload_cat(dm, gub, 2, 1, ogb, &W->gu_b);
    if (!e && W->gu.data && !!L->gate.bias.data != !!W->gu_b.data) W->gu.data = NULL;
    struct { const gp_wt *h; gp_cu_wt *d; } one[] = {
        {&L->attn_norm, &W->attn_norm}, {&L->q_norm, &W->q_norm}, {&L->k_norm, &W->k_norm},
        {&L->attn_post_norm, &W->attn_post_norm}, {&L->ffn_norm, &W->ffn_norm}, {&L->ffn_post_norm, &W->ffn_post_norm},
        {&L->q.w, &W->wq}, {&L->k.w, &W->wk}, {&L->v.w, &W->wv}, {&L->o.w, &W->wo}, {&L->gate.w, &W->wg},
        {&L->up.w, &W->wu}, {&L->down.w, &W->wd}, {&L->q.bias, &W->bq}, {&L->k.bias, &W->bk}, {&L->v.bias, &W->bv},
        {&L->o.bias, &W->bo}, {&L->gate.bias, &W->bg}, {&L->up.bias, &W->bu}, {&L->down.bias, &W->bd},
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0] && !e; i++)
        if (!one[i].d->data) e = upload(dm, one[i].h, one[i].d);
    return e;
}

/* GP_OK when every weight of m is in a format the CUDA kernels read (f32, bf16, f16) and no linear has LoRA terms. */
static gp_status check_formats(const gp_model *m) {
    const gp_config *cfg = &m->cfg;
    if (m->max_lora_rank > 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: LoRA adapters are CPU-only for now");
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        const gp_linear *P[] = {&m->layers[l].q, &m->layers[l].k, &m->layers[l].v, &m->layers[l].o,
                                &m->layers[l].gate, &m->layers[l].up, &m->layers[l].down};
        for (int i = 0; i < 7; i++)
            if (P[i]->w.format > GP_WFMT_F16 || P[i]->n_lora > 0)
                return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: layer %d: weight format %d or "
                                                        "LoRA terms are CPU-only for now", l, (int)P[i]->w.format);
    }
    if (m->lm_head.w.format > GP_WFMT_F16 || m->tok_embd.format > GP_WFMT_F16)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: quantized embeddings are CPU-only for now");
    return GP_OK;
}

/* Bytes of the weights of layer L (as uploaded). */
static uint64_t layer_bytes(const gp_layer *L) {
    const gp_wt *w[] = {&L->attn_norm, &L->q_norm, &L->k_norm, &L->attn_post_norm, &L->ffn_norm, &L->ffn_post_norm,
                        &L->q.w, &L->k.w, &L->v.w, &L->o.w, &L->gate.w, &L->up.w, &L->down.w, &L->q.bias,
                        &L->k.bias, &L->v.bias, &L->o.bias, &L->gate.bias, &L->up.bias, &L->down.bias};
    uint64_t b = 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) b += gp_wt_bytes(w[i]);
    return b;
}

void gp_cuda_model_free(gp_cuda_model *dm) {
    if (!dm) return;
    for (int32_t i = 0; i < dm->n_allocs; i++) gp_cu_release(dm->d, dm->allocs[i]);
    free(dm->allocs);
    free(dm->layers);
    gp_cu_close(dm->d);
    free(dm);
}

/* Uploads m's weights (refusing, before any copy, a model that does not fit). */
static gp_status model_upload(const gp_model *m, gp_cuda_model **out) {
    char msg[256] = "";
    gp_cuda_model *dm = calloc(1, sizeof *dm);
    if (!dm) return GP_ERR_NOMEM;
    const gp_config *cfg = &m->cfg;
    int e = gp_cu_open(0, &dm->d, msg, sizeof msg);
    if (e) {
        free(dm);
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: %s", msg);
    }
    uint64_t need = gp_wt_bytes(&m->tok_embd) + gp_wt_bytes(&m->out_norm), fb = 0, tb = 0;
    if (!m->lm_head_tied) need += gp_wt_bytes(&m->lm_head.w);
    for (int32_t l = 0; l < cfg->n_layers; l++) need += layer_bytes(&m->layers[l]);
    gp_cu_mem(dm->d, msg, sizeof msg, &fb, &tb);
    if (need + (256u << 20) > fb) {
        gp_status s = gp_set_error(GP_ERR_NOMEM, "gp_ctx_init: device cuda: %s: the weights need %.2f GB, the device "
                                                 "has %.2f of %.2f GB free", m->dir, need / 1e9, fb / 1e9, tb / 1e9);
        gp_cuda_model_free(dm);
        return s;
    }
    if (!(dm->layers = calloc((size_t)cfg->n_layers, sizeof *dm->layers))) {
        gp_cuda_model_free(dm);
        return GP_ERR_NOMEM;
    }
    e = upload(dm, &m->tok_embd, &dm->tok_embd);
    if (!e) e = upload(dm, &m->out_norm, &dm->out_norm);
    if (!e && !m->lm_head_tied) e = upload(dm, &m->lm_head.w, &dm->lm_head);
    else dm->lm_head = dm->tok_embd;
    for (int32_t l = 0; l < cfg->n_layers && !e; l++) e = upload_layer(dm, &m->layers[l], &dm->layers[l]);
    size_t fb2 = (size_t)cfg->head_dim / 2 * sizeof(float);
    if (!e) e = dev_alloc(dm->d, &dm->allocs, &dm->n_allocs, &dm->bytes, fb2, (void **)&dm->inv_full);
    if (!e) e = dev_alloc(dm->d, &dm->allocs, &dm->n_allocs, &dm->bytes, fb2, (void **)&dm->inv_sliding);
    if (!e) e = gp_cu_h2d(dm->d, dm->inv_full, m->inv_freq_full, fb2);
    if (!e) e = gp_cu_h2d(dm->d, dm->inv_sliding, m->inv_freq_sliding, fb2);
    if (e) {
        gp_status s = cu_fail("uploading the weights", e);
        gp_cuda_model_free(dm);
        return s;
    }
    *out = dm;
    return GP_OK;
}

void gp_cuda_ctx_free(gp_cuda_ctx *x) {
    if (!x) return;
    gp_cu_graph_free(x->graph);
    for (int32_t i = 0; i < x->n_allocs; i++) gp_cu_release(x->d, x->allocs[i]);
    free(x->allocs);
    free(x->kv);
    free(x->window);
    gp_cu_close(x->d);
    free(x);
}

/* Device scratch and KV cache of context c (sizes as gp_ctx_init's host scratch). */
static gp_status ctx_alloc(gp_ctx *c, gp_cuda_ctx *x) {
    const gp_config *g = &c->m->cfg;
    const size_t C = (size_t)c->p.prefill_chunk, E = (size_t)g->n_embd, Q = (size_t)g->n_heads * g->head_dim;
    const size_t KV = (size_t)g->n_kv_heads * g->head_dim, F = (size_t)g->n_ff, H = E > Q ? E : Q;
    const size_t V = (size_t)g->n_vocab, hd = (size_t)g->head_dim;
    const int32_t seen = c->p.n_ctx > c->p.max_kv_size ? c->p.n_ctx : c->p.max_kv_size;
    x->C = (int32_t)C;
    x->ns = (seen + c->p.prefill_chunk + GP_CU_ATTN_SPLIT - 1) / GP_CU_ATTN_SPLIT;
    size_t per_q = (size_t)g->n_heads * x->ns * (hd + 2) * sizeof(float);
    x->qb = (int32_t)((64u << 20) / per_q);
    x->qb = x->qb < 1 ? 1 : x->qb > (int32_t)C ? (int32_t)C : x->qb;
    x->lb = (int32_t)((64u << 20) / (V * sizeof(float)));
    x->lb = x->lb < 1 ? 1 : x->lb > (int32_t)C ? (int32_t)C : x->lb;
    struct { void **p; size_t bytes; } a[] = {
        {(void **)&x->x, C * E * 4}, {(void **)&x->h, C * H * 4}, {(void **)&x->q, C * Q * 4},
        {(void **)&x->k, C * KV * 4}, {(void **)&x->v, C * KV * 4}, {(void **)&x->att, C * Q * 4},
        {(void **)&x->gate, C * F * 4}, {(void **)&x->up, C * F * 4}, {(void **)&x->logits, (size_t)x->lb * V * 4},
        {(void **)&x->part, (size_t)x->qb * per_q}, {(void **)&x->steer, E * 4}, {(void **)&x->ids, C * 4},
        {(void **)&x->pos, 4}, {(void **)&x->qkv, (Q + 2 * KV) * 4}, {(void **)&x->gu, F * 4},
    };
    int e = 0;
    for (size_t i = 0; i < sizeof a / sizeof a[0] && !e; i++)
        e = dev_alloc(x->d, &x->allocs, &x->n_allocs, &x->bytes, a[i].bytes, a[i].p);
    if (!(x->kv = calloc((size_t)g->n_layers, sizeof *x->kv))) return GP_ERR_NOMEM;
    if (!(x->window = calloc((size_t)g->n_layers, sizeof *x->window))) return GP_ERR_NOMEM;
    const gp_kv_params *kp = &c->kvp;
    for (int32_t l = 0; l < g->n_layers && !e; l++) {
        /* the ring geometry kvcache.c gives this layer: rotating (max_kv_size, keep pinned) or the model's sliding
         * window, else every position up to n_ctx; allocated whole (slot = f(position) never changes) */
        gp_cu_kv *kv = &x->kv[l];
        const int32_t w = g->window[l];
        if (kp->max_kv_size > 0 && (w == 0 || w > kp->max_kv_size - kp->keep)) {
            kv->keep = kp->keep;
            kv->cap = kp->max_kv_size;
            x->window[l] = kp->max_kv_size - kp->keep;
        } else {
            kv->keep = 0;
            kv->cap = w > 0 && w < kp->n_ctx ? w : kp->n_ctx;
            x->window[l] = w;
        }
        kv->kvd = (int32_t)KV;
        e = dev_alloc(x->d, &x->allocs, &x->n_allocs, &x->bytes, (size_t)kv->cap * KV * 4, (void **)&kv->k);
        if (!e) e = dev_alloc(x->d, &x->allocs, &x->n_allocs, &x->bytes, (size_t)kv->cap * KV * 4, (void **)&kv->v);
    }
    if (e == 2)
        return gp_set_error(GP_ERR_NOMEM, "gp_ctx_init: device cuda: out of device memory for the KV cache and "
                                          "scratch (n_ctx %d, prefill_chunk %d): lower --n-ctx", c->p.n_ctx,
                            c->p.prefill_chunk);
    return e ? cu_fail("allocating the context", e) : GP_OK;
}

gp_status gp_cuda_ctx_init(gp_ctx *c) {
    if (c->p.kv_bits)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: quantized KV caches (kv_bits %d) are "
                                                "CPU-only for now", c->p.kv_bits);
    gp_model *m = (gp_model *)c->m; /* the device copy is a lazily built cache of immutable data, like the fingerprint */
    const int bf16 = c->p.compute == GP_COMPUTE_BF16;
    gp_status s = check_formats(m);
    if (s) return s;
    pthread_mutex_lock(&m->fp_lock);
    if (!m->cuda) s = model_upload(m, &m->cuda);
    pthread_mutex_unlock(&m->fp_lock);
    if (s) return s;
    gp_cuda_ctx *x = calloc(1, sizeof *x);
    if (!x) return GP_ERR_NOMEM;
    char msg[256] = "";
    int e = gp_cu_open(0, &x->d, msg, sizeof msg);
    if (e) {
        free(x);
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: %s", msg);
    }
    x->dm = m->cuda;
    gp_cu_set_bf16(x->d, bf16); /* every op of this context's handle rounds as the bf16 mode (cuda_ops.h) */
    if ((s = ctx_alloc(c, x))) {
        gp_cuda_ctx_free(x);
        return s;
    }
    c->cuda = x;
    return GP_OK;
}

#define CK(call)                                                                                                    \
    do {                                                                                                            \
        int e_ = (call);                                                                                            \
        if (e_) return cu_fail(#call, e_);                                                                          \
    } while (0)

/* Attention of the chunk's n queries for layer l, in calls of at most qb queries (same bits for any split), then
 * (unless already stored) the chunk's keys and values into the cache.  q [n, nh, hd], k, v [n, KV]. */
static gp_status attention(gp_ctx *c, gp_cuda_ctx *x, int32_t l, int32_t n, int32_t pos0, const float *q,
                           const float *k, const float *v, int stored) {
    const gp_config *g = &c->m->cfg;
    const int32_t nh = g->n_heads, hd = g->head_dim;
    for (int32_t t = 0; t < n; t += x->qb) {
        const int32_t cnt = n - t < x->qb ? n - t : x->qb;
        gp_cu_attn a = {
            .out = x->att + (size_t)t * nh * hd, .q = q + (size_t)t * nh * hd, .k_new = k, .v_new = v,
            .cache = &x->kv[l], .pos0 = x->pos, .n = cnt, .n_heads = nh, .n_kv = g->n_kv_heads, .head_dim = hd,
            .window = x->window[l], .t_off = t, .scale = g->arch.attn_scale, .softcap = g->arch.attn_softcap,
            .n_splits = (pos0 + t + cnt + GP_CU_ATTN_SPLIT - 1) / GP_CU_ATTN_SPLIT, .part = x->part,
        };
        CK(gp_cu_attention(x->d, &a));
    }
    if (!stored) CK(gp_cu_kv_store(x->d, &x->kv[l], k, v, n, x->pos));
    return GP_OK;
}

/* Copies x [n, E] to the capture buffer when layer index idx is requested (see forward.c's capture). */
static gp_status capture(gp_cuda_ctx *x, const gp_eval_opts *o, int32_t idx, int32_t n, int32_t t0, int32_t n_total,
                         int32_t E) {
    if (!o || !o->hidden_out) return GP_OK;
    for (int32_t j = 0; j < o->n_hidden_layers; j++)
        if (o->hidden_layers[j] == idx)
            CK(gp_cu_d2h(x->d, o->hidden_out + ((size_t)j * n_total + t0) * E, x->x, (size_t)n * E * sizeof(float)));
    return GP_OK;
}

/* The attention block of one layer: x += o_proj(attention(rope(q, k), v)) [post-norm before the add].  A decode step
 * (n = 1) runs q|k|v as one stacked projection, then q/k norms, rope and the KV store as one kernel; every element
 * is the same computation as the separate ops (same expressions, same summation orders), so the bits do not change. */
static gp_status attn_block(gp_ctx *c, gp_cuda_ctx *x, int32_t l, int32_t n, int32_t pos0) {
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const cu_layer *W = &x->dm->layers[l];
    const int32_t E = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int po = a->norm_plus_one;
    const float eps = cfg->norm_eps;
    gp_cu *d = x->d;
    float *q = x->q, *k = x->k, *v = x->v;
    CK(gp_cu_rmsnorm(d, x->h, x->x, &W->attn_norm, n, E, eps, po));
    const int one = n == 1 && W->qkv.data;
    if (one) {
        q = x->qkv, k = q + (size_t)nh * hd, v = k + (size_t)nkv * hd;
        CK(gp_cu_matmul(d, q, x->h, &W->qkv, &W->qkv_b, 1));
    } else {
        CK(gp_cu_matmul(d, q, x->h, &W->wq, &W->bq, n));
        CK(gp_cu_matmul(d, k, x->h, &W->wk, &W->bk, n));
        CK(gp_cu_matmul(d, v, x->h, &W->wv, &W->bv, n));
    }
    if (a->qk_norm && !one) {
        CK(gp_cu_rmsnorm(d, q, q, &W->q_norm, n * nh, hd, eps, po));
        CK(gp_cu_rmsnorm(d, k, k, &W->k_norm, n * nkv, hd, eps, po));
    }
    const float *inv_freq = cfg->window[l] > 0 ? x->dm->inv_sliding : x->dm->inv_full;
    /* decode: q/k norms, rope of q and k and the cache store in one kernel (storing before attention is safe for one
     * token: the slot it overwrites holds a position the query no longer sees) */
    if (one) {
        const gp_cu_wt *qn = a->qk_norm ? &W->q_norm : NULL, *kn = a->qk_norm ? &W->k_norm : NULL;
        CK(gp_cu_rope_store(d, q, nh, nkv, hd, x->pos, inv_freq, v, &x->kv[l], qn, kn, eps, po));
    } else {
        CK(gp_cu_rope(d, q, n, nh, hd, x->pos, inv_freq));
        CK(gp_cu_rope(d, k, n, nkv, hd, x->pos, inv_freq));
    }
    gp_status s = attention(c, x, l, n, pos0, q, k, v, one);
    if (s) return s;
    if (a->sandwich_norms) {
        CK(gp_cu_matmul(d, x->h, x->att, &W->wo, &W->bo, n));
        CK(gp_cu_rmsnorm(d, x->h, x->h, &W->attn_post_norm, n, E, eps, po));
        CK(gp_cu_add(d, x->x, x->h, (int64_t)n * E));
    } else CK(gp_cu_matmul_add(d, x->x, x->att, &W->wo, &W->bo, n));
    return GP_OK;
}

/* One decoder layer on the chunk (forward.c's loop body): attention block, feed-forward block, steering hooks. */
static gp_status layer(gp_ctx *c, gp_cuda_ctx *x, int32_t l, int32_t n, int32_t pos0) {
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const cu_layer *W = &x->dm->layers[l];
    const int32_t E = cfg->n_embd, FF = cfg->n_ff;
    const int po = a->norm_plus_one;
    const float eps = cfg->norm_eps;
    const int act = a->act == GP_ACT_SILU ? GP_CU_ACT_SILU : GP_CU_ACT_GELU_TANH;
    gp_cu *d = x->d;
    gp_status s = attn_block(c, x, l, n, pos0);
    if (s) return s;
    CK(gp_cu_rmsnorm(d, x->h, x->x, &W->ffn_norm, n, E, eps, po));
    const int sw = a->sandwich_norms;
    if (n == 1 && W->gu.data) { /* decode: gate|up stacked into one projection, the GLU applied to each pair */
        CK(gp_cu_matmul_gluo(d, x->gu, x->h, &W->gu, &W->gu_b, act));
        if (sw) CK(gp_cu_matmul(d, x->h, x->gu, &W->wd, &W->bd, 1));
        else CK(gp_cu_matmul_add(d, x->x, x->gu, &W->wd, &W->bd, 1));
    } else {
        CK(gp_cu_matmul(d, x->gate, x->h, &W->wg, &W->bg, n));
        CK(gp_cu_matmul(d, x->up, x->h, &W->wu, &W->bu, n));
        CK(gp_cu_glu(d, x->gate, x->up, (int64_t)n * FF, act));
        if (sw) CK(gp_cu_matmul(d, x->h, x->gate, &W->wd, &W->bd, n));
        else CK(gp_cu_matmul_add(d, x->x, x->gate, &W->wd, &W->bd, n));
    }
    if (sw) {
        CK(gp_cu_rmsnorm(d, x->h, x->h, &W->ffn_post_norm, n, E, eps, po));
        CK(gp_cu_add(d, x->x, x->h, (int64_t)n * E));
    }
    const gp_steer_state *st = &c->steer; /* residual hooks: a * vector added on the device */
    for (int32_t k = 0; k < st->n_hooks; k++) {
        const gp_steer_active *h = &st->hooks[k];
        const float co = h->h.layer == l ? gp_steer_coef(&h->h, st->step) : 0.0f;
        if (co == 0.0f) continue;
        CK(gp_cu_h2d_async(d, x->steer, h->vec, (size_t)E * sizeof(float)));
        CK(gp_cu_add_rows(d, x->x, x->steer, co, n, E));
    }
    return GP_OK;
}

/* lm_head (+ final soft-cap) of the chunk's rows [t, t + cnt) into the device logits buffer. */
static gp_status lm_head(gp_ctx *c, gp_cuda_ctx *x, int32_t t, int32_t cnt) {
    const gp_config *cfg = &c->m->cfg;
    CK(gp_cu_matmul(x->d, x->logits, x->x + (size_t)t * cfg->n_embd, &x->dm->lm_head, NULL, cnt));
    if (cfg->arch.final_softcap > 0)
        CK(gp_cu_softcap(x->d, x->logits, (int64_t)cnt * cfg->n_vocab, cfg->arch.final_softcap));
    return GP_OK;
}

/* Adds the logit-bias vector to the rows of logits [rows, V] on the host (as forward.c does after the lm_head). */
static void logit_bias(const gp_ctx *c, float *logits, int32_t rows) {
    const int32_t V = c->m->cfg.n_vocab;
    if (c->steer.bias)
        for (int32_t t = 0; t < rows; t++) {
            float *y = logits + (size_t)t * V;
            for (int32_t i = 0; i < V; i++) y[i] += c->steer.bias[i];
        }
}

/* Logits of the chunk ([n, V] when all, else [V] of the last token) computed and copied back, then the logit bias. */
static gp_status logits_out(gp_ctx *c, gp_cuda_ctx *x, int32_t n, float *logits, int all) {
    const int32_t V = c->m->cfg.n_vocab, first = all ? 0 : n - 1;
    gp_status s;
    for (int32_t t = first; t < n; t += x->lb) {
        const int32_t cnt = n - t < x->lb ? n - t : x->lb;
        if ((s = lm_head(c, x, t, cnt))) return s;
        CK(gp_cu_d2h(x->d, logits + (size_t)(t - first) * V, x->logits, (size_t)cnt * V * sizeof(float)));
    }
    logit_bias(c, logits, all ? n : 1);
    return GP_OK;
}

/* Enqueues the chunk's embedding, layers and final norm (ids and position already on the device). */
static gp_status enqueue(gp_ctx *c, gp_cuda_ctx *x, int32_t n, int32_t pos0, const gp_eval_opts *o, int32_t t0,
                         int32_t n_total) {
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const int32_t E = cfg->n_embd;
    CK(gp_cu_embed(x->d, x->x, x->ids, n, &x->dm->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f));
    gp_status s = capture(x, o, 0, n, t0, n_total, E);
    for (int32_t l = 0; l < cfg->n_layers && !s; l++) {
        s = layer(c, x, l, n, pos0);
        if (!s && l + 1 < cfg->n_layers) s = capture(x, o, l + 1, n, t0, n_total, E);
    }
    if (s) return s;
    CK(gp_cu_rmsnorm(x->d, x->x, x->x, &x->dm->out_norm, n, E, cfg->norm_eps, a->norm_plus_one));
    return capture(x, o, cfg->n_layers, n, t0, n_total, E);
}

/* A decode step through the captured graph (captured again when the number of attention splits changes, every
 * GP_CU_ATTN_SPLIT positions): the same kernels with the same arguments as the direct path, so the same bits. */
static gp_status decode_graph(gp_ctx *c, gp_cuda_ctx *x, int32_t pos0, float *logits) {
    const int32_t ns = pos0 / GP_CU_ATTN_SPLIT + 1;
    if (!x->graph || x->graph_ns != ns) {
        gp_cu_graph_free(x->graph);
        x->graph = NULL;
        CK(gp_cu_capture_begin(x->d));
        gp_status s = enqueue(c, x, 1, pos0, NULL, 0, 1);
        if (!s) s = lm_head(c, x, 0, 1);
        void *g = NULL;
        int e = gp_cu_capture_end(x->d, &g);
        if (s || e) {
            gp_cu_graph_free(g);
            return s ? s : cu_fail("capturing the decode step", e);
        }
        x->graph = g;
        x->graph_ns = ns;
    }
    CK(gp_cu_graph_launch(x->d, x->graph));
    CK(gp_cu_d2h(x->d, logits, x->logits, (size_t)c->m->cfg.n_vocab * sizeof(float)));
    logit_bias(c, logits, 1);
    return GP_OK;
}

gp_status gp_cuda_forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0,
                                int32_t n_total, float *logits, int all) {
    gp_cuda_ctx *x = c->cuda;
    gp_cache *kc = gp_ctx_cache(c);
    const int32_t pos0 = gp_cache_n_past(kc);
    if (c->cur != 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_eval: device cuda: named caches other than the first are "
                                                "CPU-only for now");
    CK(gp_cu_h2d_async(x->d, x->ids, ids, (size_t)n * sizeof(int32_t)));
    CK(gp_cu_h2d_async(x->d, x->pos, &pos0, sizeof pos0));
    const int graph = n == 1 && logits && c->steer.n_hooks == 0 && !(o && o->hidden_out && o->n_hidden_layers > 0) &&
                      !getenv("GENPARITY_CUDA_NO_GRAPH");
    gp_status s;
    if (graph) s = decode_graph(c, x, pos0, logits);
    else {
        s = enqueue(c, x, n, pos0, o, t0, n_total);
        if (!s && logits) s = logits_out(c, x, n, logits, all);
    }
    if (s) return s;
    CK(gp_cu_sync(x->d));
    gp_cache_advance(kc, n);
    return GP_OK;
}

#endif
