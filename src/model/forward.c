/* forward.c — the one forward pass every architecture runs, as a sequence of backend ops (no host work between
 * them; gp_ctx_eval in context.c drives it chunk by chunk):
 *   x = embed(ids) (* sqrt(hidden) for Gemma)
 *   per layer: h = norm(x); q,k,v = linear(h); [q,k per-head norm]; rope; stage k,v in the cache; attention over the
 *              cache's descriptor; commit k,v; a = linear_o(attn) [+ post-attn norm]; x += a;
 *              h = norm(x); m = down(act(gate(h)) * up(h)) [+ post-ffn norm]; x += m; x += steering
 *   logits = lm_head(norm(x)) [soft-capped] [+ logit bias]
 * What differs between families is data in gp_arch (config.h), never a branch per family name; what differs
 * between weight formats and devices is behind backend.h. */
#include "model/ctx.h"

#include <math.h>

/* Reads x [n, E] back into the capture buffer slot j (hidden_out [n_hidden, n_total, E]) at token offset t0. */
static void capture(gp_ctx *c, const gp_eval_opts *o, int32_t idx, const float *x, int32_t n, int32_t t0,
                    int32_t n_total, int32_t E) {
    if (!o || !o->hidden_out) return;
    gp_backend *be = c->m->be;
    for (int32_t j = 0; j < o->n_hidden_layers; j++)
        if (o->hidden_layers[j] == idx)
            be->ops->download(be, o->hidden_out + ((size_t)j * n_total + t0) * E, x, (size_t)n * E * sizeof(float));
}

/* The attention block of layer l: x += o_proj(attention(rope(q), rope(k), v over the cache)) [post-norm].  The n rows
 * of cs[0]'s buffers belong to n_seq contexts, n / n_seq consecutive rows each (one context's chunk, or one token of
 * each sequence of a batch): the projections run on all rows at once (one pass over the weights), rope and attention
 * per context at its own cache's position. */
static void attention_block(gp_ctx *const *cs, int32_t n_seq, int32_t l, int32_t n) {
    gp_ctx *c = cs[0];
    const gp_model *m = c->m;
    const gp_config *cfg = &m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend_ops *B = m->be->ops;
    gp_ws *ws = c->ws;
    const gp_layer *L = &c->layers[l]; /* the model's, or the context's copy with LoRA terms */
    const int32_t E = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads, r = n / n_seq;
    const int64_t Q = (int64_t)nh * hd, KV = (int64_t)nkv * hd;
    const int po = a->norm_plus_one;

    B->rmsnorm(ws, c->h, c->x, &L->attn_norm, n, E, cfg->norm_eps, po);
    B->linear(ws, c->q, c->h, &L->q, n);
    B->linear(ws, c->k, c->h, &L->k, n);
    B->linear(ws, c->v, c->h, &L->v, n);
    if (a->qk_norm) {
        B->rmsnorm(ws, c->q, c->q, &L->q_norm, n * nh, hd, cfg->norm_eps, po);
        B->rmsnorm(ws, c->k, c->k, &L->k_norm, n * nkv, hd, cfg->norm_eps, po);
    }
    /* the model's sliding window picks the rope base */
    const float *inv_freq = cfg->window[l] > 0 ? m->inv_freq_sliding : m->inv_freq_full;
    for (int32_t i = 0; i < n_seq; i++) {
        gp_cache *kc = gp_ctx_cache(cs[i]);
        const int32_t pos = gp_cache_n_past(kc);
        float *q = c->q + i * r * Q, *k = c->k + i * r * KV, *v = c->v + i * r * KV;
        B->rope(ws, q, r, nh, hd, pos, inv_freq);
        B->rope(ws, k, r, nkv, hd, pos, inv_freq);
        gp_kv_desc kv;
        gp_cache_stage(kc, ws, l, k, v, r, &kv);
        const gp_attn_args args = {.out = c->att + i * r * Q, .q = q, .kv = &kv, .n = r, .pos0 = pos, .n_heads = nh,
                                   .n_kv = nkv, .head_dim = hd, .scale = a->attn_scale, .softcap = a->attn_softcap};
        B->attention(ws, &args);
        gp_cache_commit(kc, ws, l, r);
    }
    B->linear(ws, c->h, c->att, &L->o, n);
    if (a->sandwich_norms) B->rmsnorm(ws, c->h, c->h, &L->attn_post_norm, n, E, cfg->norm_eps, po);
    B->add(ws, c->x, c->h, (int64_t)n * E);
}

/* The feed-forward block of layer l: x += down(act(gate(h)) * up(h)) [post-norm], h = norm(x). */
static void ffn_block(gp_ctx *c, int32_t l, int32_t n) {
    const gp_model *m = c->m;
    const gp_config *cfg = &m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend_ops *B = m->be->ops;
    gp_ws *ws = c->ws;
    const gp_layer *L = &c->layers[l]; /* the model's, or the context's copy with LoRA terms */
    const int32_t E = cfg->n_embd;
    const int po = a->norm_plus_one;

    B->rmsnorm(ws, c->h, c->x, &L->ffn_norm, n, E, cfg->norm_eps, po);
    B->linear(ws, c->gate, c->h, &L->gate, n);
    B->linear(ws, c->up, c->h, &L->up, n);
    B->glu(ws, c->gate, c->up, (int64_t)n * cfg->n_ff, a->act);
    B->linear(ws, c->h, c->gate, &L->down, n);
    if (a->sandwich_norms) B->rmsnorm(ws, c->h, c->h, &L->ffn_post_norm, n, E, cfg->norm_eps, po);
    B->add(ws, c->x, c->h, (int64_t)n * E);
}

void gp_forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0, int32_t n_total,
                      float *logits, int all) {
    const gp_model *m = c->m;
    const gp_config *cfg = &m->cfg;
    const gp_arch *a = &cfg->arch;
    gp_backend *be = m->be;
    const gp_backend_ops *B = be->ops;
    gp_ws *ws = c->ws;
    const int32_t E = cfg->n_embd;

    B->embed(ws, c->x, ids, n, &m->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    capture(c, o, 0, c->x, n, t0, n_total, E);
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        attention_block(&c, 1, l, n);
        ffn_block(c, l, n);
        gp_steer_apply(&c->steer, ws, l, c->x, n, E);
        if (l + 1 < cfg->n_layers) capture(c, o, l + 1, c->x, n, t0, n_total, E);
    }
    B->rmsnorm(ws, c->x, c->x, &m->out_norm, n, E, cfg->norm_eps, a->norm_plus_one);
    capture(c, o, cfg->n_layers, c->x, n, t0, n_total, E);
    if (logits) {
        const int32_t V = cfg->n_vocab, rows = all ? n : 1;
        float *out = be->host_memory ? logits : c->logits; /* backend memory is host memory: write in place */
        B->linear(ws, out, c->x + (int64_t)(n - rows) * E, &m->lm_head, rows);
        if (a->final_softcap > 0) B->softcap(ws, out, (int64_t)rows * V, a->final_softcap);
        if (c->steer.bias)
            for (int32_t t = 0; t < rows; t++) B->add(ws, out + (int64_t)t * V, c->steer.bias, V);
        if (out != logits) B->download(be, logits, out, (size_t)rows * V * sizeof(float));
    }
    gp_cache_advance(gp_ctx_cache(c), n);
}

void gp_forward_batch(gp_ctx *const *cs, int32_t n, const int32_t *ids, float *logits) {
    gp_ctx *c = cs[0];
    const gp_model *m = c->m;
    const gp_config *cfg = &m->cfg;
    const gp_arch *a = &cfg->arch;
    gp_backend *be = m->be;
    const gp_backend_ops *B = be->ops;
    gp_ws *ws = c->ws;
    const int32_t E = cfg->n_embd, V = cfg->n_vocab;

    B->embed(ws, c->x, ids, n, &m->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        attention_block(cs, n, l, n);
        ffn_block(c, l, n);
        for (int32_t i = 0; i < n; i++) gp_steer_apply(&cs[i]->steer, ws, l, c->x + (int64_t)i * E, 1, E);
    }
    B->rmsnorm(ws, c->x, c->x, &m->out_norm, n, E, cfg->norm_eps, a->norm_plus_one);
    float *out = be->host_memory ? logits : c->logits;
    B->linear(ws, out, c->x, &m->lm_head, n);
    if (a->final_softcap > 0) B->softcap(ws, out, (int64_t)n * V, a->final_softcap);
    for (int32_t i = 0; i < n; i++)
        if (cs[i]->steer.bias) B->add(ws, out + (int64_t)i * V, cs[i]->steer.bias, V);
    if (out != logits) B->download(be, logits, out, (size_t)n * V * sizeof(float));
    for (int32_t i = 0; i < n; i++) gp_cache_advance(gp_ctx_cache(cs[i]), 1);
}
