/* forward.c — gp_ctx (KV cache + scratch) and the one forward pass every architecture runs:
 *   x = embed(ids) (* sqrt(hidden) for Gemma)
 *   per layer: h = norm(x); q,k,v = proj(h) (+bias); [q,k per-head norm]; rope; attention (causal, sliding window);
 *              a = o_proj(attn) [+ post-attn norm]; x += a;  h = norm(x); m = down(act(gate(h)) * up(h))
 *              [+ post-ffn norm]; x += m
 *   logits = lm_head(norm(x)) [soft-capped]
 * What differs between families is data in gp_arch (config.h), never a branch per family name. */
#include "model/model.h"
#include "steer/steer.h"
#include "util/util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One layer's KV cache: a ring of cap slots, position j at slot j % cap; grows up to cap_max. */
typedef struct kv_layer {
    float *k, *v;      /* [cap, n_kv, head_dim] */
    int32_t cap;       /* slots allocated */
    int32_t cap_max;   /* sliding window, or n_ctx for full attention */
} kv_layer;

struct gp_ctx {
    const gp_model *m;
    gp_ctx_params p;
    int32_t n_past;
    kv_layer *kv;      /* [n_layers] */
    /* scratch for one chunk of p.prefill_chunk tokens */
    float *x;          /* [chunk, n_embd] residual stream */
    float *h;          /* [chunk, max(n_embd, n_heads*head_dim)] normed input / projections out */
    float *q;          /* [chunk, n_heads*head_dim] */
    float *k;          /* [chunk, n_kv*head_dim] */
    float *v;          /* [chunk, n_kv*head_dim] */
    float *att;        /* [chunk, n_heads*head_dim] */
    float *gate, *up;  /* [chunk, n_ff] */
    float *attn_scratch; /* [n_threads, n_ctx] attention scores */
    gp_steer_state steer; /* residual hooks, logit-bias vector, forward step counter */
};

gp_ctx_params gp_ctx_default_params(void) {
    gp_ctx_params p = {0};
    p.prefill_chunk = 512;
    return p;
}

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

gp_status gp_ctx_init(const gp_model *m, const gp_ctx_params *params, gp_ctx **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: out is NULL");
    *out = NULL;
    if (!m) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: model is NULL");
    gp_ctx_params p = params ? *params : gp_ctx_default_params();
    const gp_config *c = &m->cfg;
    if (p.n_ctx < 0 || p.n_threads < 0 || p.prefill_chunk < 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: n_ctx, n_threads and prefill_chunk must be >= 0");
    if (p.n_ctx == 0) p.n_ctx = c->n_ctx_train;
    if (p.n_threads == 0) p.n_threads = online_cpus();
    if (p.prefill_chunk == 0) p.prefill_chunk = 512;
    if (p.prefill_chunk > p.n_ctx) p.prefill_chunk = p.n_ctx;
    gp_ctx *x = gp_calloc(1, sizeof *x);
    if (!x) return GP_ERR_NOMEM;
    x->m = m;
    x->p = p;
    size_t C = (size_t)p.prefill_chunk, E = (size_t)c->n_embd, Q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t KV = (size_t)c->n_kv_heads * (size_t)c->head_dim, F = (size_t)c->n_ff;
    size_t H = E > Q ? E : Q;
    x->kv = gp_calloc((size_t)c->n_layers, sizeof *x->kv);
    x->x = gp_malloc(C * E, sizeof(float));
    x->h = gp_malloc(C * H, sizeof(float));
    x->q = gp_malloc(C * Q, sizeof(float));
    x->k = gp_malloc(C * KV, sizeof(float));
    x->v = gp_malloc(C * KV, sizeof(float));
    x->att = gp_malloc(C * Q, sizeof(float));
    x->gate = gp_malloc(C * F, sizeof(float));
    x->up = gp_malloc(C * F, sizeof(float));
    x->attn_scratch = gp_malloc((size_t)p.n_threads * (size_t)p.n_ctx, sizeof(float));
    if (!x->kv || !x->x || !x->h || !x->q || !x->k || !x->v || !x->att || !x->gate || !x->up || !x->attn_scratch) {
        gp_ctx_free(x);
        return gp_set_error(GP_ERR_NOMEM, "gp_ctx_init: out of memory for scratch (prefill_chunk %d, n_ctx %d)",
                            p.prefill_chunk, p.n_ctx);
    }
    for (int i = 0; i < c->n_layers; i++)
        x->kv[i].cap_max = c->window[i] > 0 && c->window[i] < p.n_ctx ? c->window[i] : p.n_ctx;
    *out = x;
    return GP_OK;
}

void gp_ctx_free(gp_ctx *c) {
    if (!c) return;
    if (c->kv)
        for (int i = 0; i < c->m->cfg.n_layers; i++) {
            free(c->kv[i].k);
            free(c->kv[i].v);
        }
    free(c->kv);
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->att);
    free(c->gate);
    free(c->up);
    free(c->attn_scratch);
    gp_steer_state_clear(&c->steer);
    free(c);
}

void gp_ctx_reset(gp_ctx *c) {
    c->n_past = 0;
    c->steer.step = 0;
}
int32_t gp_ctx_n_past(const gp_ctx *c) { return c->n_past; }

uint64_t gp_ctx_kv_bytes(const gp_ctx *c) {
    uint64_t kvd = (uint64_t)c->m->cfg.n_kv_heads * (uint64_t)c->m->cfg.head_dim, b = 0;
    for (int i = 0; i < c->m->cfg.n_layers; i++) b += 2 * (uint64_t)c->kv[i].cap * kvd * sizeof(float);
    return b;
}

/* Grows every layer's ring so that positions up to n_total - 1 fit.  Before a ring reaches cap_max it has never
 * wrapped (cap >= n_past), so growing keeps every position at its slot. */
static gp_status kv_reserve(gp_ctx *c, int32_t n_total) {
    const gp_config *cfg = &c->m->cfg;
    size_t kvd = (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim;
    for (int i = 0; i < cfg->n_layers; i++) {
        kv_layer *L = &c->kv[i];
        int32_t need = n_total < L->cap_max ? n_total : L->cap_max;
        if (L->cap >= need) continue;
        int64_t grow = (int64_t)L->cap * 2;
        int32_t cap = (int32_t)(grow > need ? (grow < L->cap_max ? grow : L->cap_max) : need);
        float *k = gp_realloc(L->k, (size_t)cap * kvd, sizeof(float));
        if (!k) return gp_set_error(GP_ERR_NOMEM, "KV cache: out of memory growing layer %d to %d positions", i, cap);
        L->k = k;
        float *v = gp_realloc(L->v, (size_t)cap * kvd, sizeof(float));
        if (!v) return gp_set_error(GP_ERR_NOMEM, "KV cache: out of memory growing layer %d to %d positions", i, cap);
        L->v = v;
        L->cap = cap;
    }
    return GP_OK;
}

/* Copies x [n, E] into the capture buffer slot j (hidden_out [n_hidden, n_total, E]) at token offset t0. */
static void capture(const gp_eval_opts *o, int32_t idx, const float *x, int32_t n, int32_t t0, int32_t n_total,
                    int32_t E) {
    if (!o || !o->hidden_out) return;
    for (int32_t j = 0; j < o->n_hidden_layers; j++)
        if (o->hidden_layers[j] == idx)
            memcpy(o->hidden_out + ((size_t)j * n_total + t0) * E, x, (size_t)n * E * sizeof(float));
}

/* Runs one chunk of n tokens at positions c->n_past.. through every layer. logits: [n, V] when all, else [V] of the
 * last token (only when last_chunk), NULL for none. */
static void forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0, int32_t n_total,
                          float *logits, int all) {
    const gp_model *m = c->m;
    const gp_config *cfg = &m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend *be = m->be;
    const int32_t E = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int32_t KV = nkv * hd, F = cfg->n_ff, pos0 = c->n_past;
    const int po = a->norm_plus_one;

    be->embed(c->x, ids, n, &m->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    capture(o, 0, c->x, n, t0, n_total, E);

    for (int32_t l = 0; l < cfg->n_layers; l++) {
        const gp_layer *L = &m->layers[l];
        kv_layer *kv = &c->kv[l];
        const int32_t window = cfg->window[l];

        /* attention block */
        be->rmsnorm(c->h, c->x, &L->attn_norm, n, E, cfg->norm_eps, po);
        be->matmul(c->q, c->h, &L->wq, &L->bq, n);
        be->matmul(c->k, c->h, &L->wk, &L->bk, n);
        be->matmul(c->v, c->h, &L->wv, &L->bv, n);
        if (a->qk_norm) {
            be->rmsnorm(c->q, c->q, &L->q_norm, n * nh, hd, cfg->norm_eps, po);
            be->rmsnorm(c->k, c->k, &L->k_norm, n * nkv, hd, cfg->norm_eps, po);
        }
        const float *inv_freq = window > 0 ? m->inv_freq_sliding : m->inv_freq_full;
        be->rope(c->q, n, nh, hd, pos0, inv_freq);
        be->rope(c->k, n, nkv, hd, pos0, inv_freq);
        gp_attn_args args = {
            .out = c->att, .q = c->q, .k_new = c->k, .v_new = c->v, .k_cache = kv->k, .v_cache = kv->v,
            .cap = kv->cap, .n = n, .pos0 = pos0, .n_heads = nh, .n_kv = nkv, .head_dim = hd, .window = window,
            .scale = a->attn_scale, .softcap = a->attn_softcap, .scratch = c->attn_scratch,
            .scratch_stride = c->p.n_ctx,
        };
        be->attention(&args);
        /* the last min(n, cap) keys/values of the chunk go into the ring */
        for (int32_t t = n > kv->cap ? n - kv->cap : 0; t < n; t++) {
            int64_t slot = (int64_t)((pos0 + t) % kv->cap);
            memcpy(kv->k + slot * KV, c->k + (int64_t)t * KV, (size_t)KV * sizeof(float));
            memcpy(kv->v + slot * KV, c->v + (int64_t)t * KV, (size_t)KV * sizeof(float));
        }
        be->matmul(c->h, c->att, &L->wo, &L->bo, n);
        if (a->sandwich_norms) be->rmsnorm(c->h, c->h, &L->attn_post_norm, n, E, cfg->norm_eps, po);
        be->add(c->x, c->h, (int64_t)n * E);

        /* feed-forward block */
        be->rmsnorm(c->h, c->x, &L->ffn_norm, n, E, cfg->norm_eps, po);
        be->matmul(c->gate, c->h, &L->w_gate, &L->b_gate, n);
        be->matmul(c->up, c->h, &L->w_up, &L->b_up, n);
        be->glu(c->gate, c->up, (int64_t)n * F, a->act);
        be->matmul(c->h, c->gate, &L->w_down, &L->b_down, n);
        if (a->sandwich_norms) be->rmsnorm(c->h, c->h, &L->ffn_post_norm, n, E, cfg->norm_eps, po);
        be->add(c->x, c->h, (int64_t)n * E);
        gp_steer_apply(&c->steer, l, c->x, n, E);
        if (l + 1 < cfg->n_layers) capture(o, l + 1, c->x, n, t0, n_total, E);
    }
    be->rmsnorm(c->x, c->x, &m->out_norm, n, E, cfg->norm_eps, po);
    capture(o, cfg->n_layers, c->x, n, t0, n_total, E);
    if (logits) {
        const int32_t V = cfg->n_vocab;
        if (all) {
            be->matmul(logits, c->x, &m->lm_head, NULL, n);
            if (a->final_softcap > 0) be->softcap(logits, (int64_t)n * V, a->final_softcap);
        } else {
            be->matmul(logits, c->x + (int64_t)(n - 1) * E, &m->lm_head, NULL, 1);
            if (a->final_softcap > 0) be->softcap(logits, V, a->final_softcap);
        }
        if (c->steer.bias)
            for (int32_t t = 0; t < (all ? n : 1); t++) be->add(logits + (int64_t)t * V, c->steer.bias, V);
    }
    c->n_past += n;
}

gp_status gp_ctx_eval(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *opts, float *logits) {
    if (!c || (!ids && n > 0) || n < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: bad arguments");
    if (n == 0) return GP_OK;
    const gp_config *cfg = &c->m->cfg;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->n_vocab)
            return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: token id %d at index %d is outside the vocabulary [0, %d)",
                                ids[i], i, cfg->n_vocab);
    if ((int64_t)c->n_past + n > c->p.n_ctx)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: %d cached + %d new positions exceed n_ctx = %d", c->n_past, n,
                            c->p.n_ctx);
    if (opts && opts->n_hidden_layers > 0) {
        if (!opts->hidden_layers || !opts->hidden_out)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: hidden_layers and hidden_out are required");
        for (int32_t j = 0; j < opts->n_hidden_layers; j++)
            if (opts->hidden_layers[j] < 0 || opts->hidden_layers[j] > cfg->n_layers)
                return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: hidden layer index %d outside [0, %d]",
                                    opts->hidden_layers[j], cfg->n_layers);
    }
    gp_status s = kv_reserve(c, c->n_past + n);
    if (s) return s;
    omp_set_num_threads(c->p.n_threads);
    int all = opts && opts->all_logits;
    for (int32_t t0 = 0; t0 < n; t0 += c->p.prefill_chunk) {
        int32_t cn = n - t0 < c->p.prefill_chunk ? n - t0 : c->p.prefill_chunk;
        int last = t0 + cn == n;
        float *lg = NULL;
        if (logits && all) lg = logits + (size_t)t0 * cfg->n_vocab;
        else if (logits && last) lg = logits;
        forward_chunk(c, ids + t0, cn, opts, t0, n, lg, all);
    }
    c->steer.step++;
    return GP_OK;
}

/* Internal: the model a context runs (used by the generation loop). */
const gp_model *gp_ctx_model(const gp_ctx *c) { return c->m; }

/* Internal: slots allocated in layer l's KV ring (tests check sliding layers keep no more than the window). */
int32_t gp_ctx_layer_cap(const gp_ctx *c, int32_t l) { return c->kv[l].cap; }

gp_status gp_ctx_steer_add(gp_ctx *c, const gp_steer_hook *hook) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: ctx is NULL");
    return gp_steer_state_add(&c->steer, hook, c->m->cfg.n_layers, c->m->cfg.n_embd);
}

void gp_ctx_steer_clear(gp_ctx *c) {
    if (c) gp_steer_state_clear(&c->steer);
}

gp_status gp_ctx_logit_bias_vector(gp_ctx *c, const float *vector, float alpha) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_logit_bias_vector: ctx is NULL");
    free(c->steer.bias);
    c->steer.bias = NULL;
    if (!vector) return GP_OK;
    const int32_t V = c->m->cfg.n_vocab;
    float *b = gp_malloc((size_t)V, sizeof(float));
    if (!b) return GP_ERR_NOMEM;
    omp_set_num_threads(c->p.n_threads);
    c->m->be->matmul(b, vector, &c->m->lm_head, NULL, 1); /* W [V, E] @ v [E] */
    for (int32_t i = 0; i < V; i++) b[i] *= alpha;
    c->steer.bias = b;
    return GP_OK;
}
