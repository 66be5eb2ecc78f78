/* forward.c — the one forward pass every architecture runs on every backend, as a sequence of backend ops (no host
 * work between them; gp_ctx_eval in context.c drives it chunk by chunk):
 *   x = embed(ids) (* sqrt(hidden) for Gemma)
 *   per layer: q,k,v = linears(norm(x)); rope(q, k) [after per-head norms] and attention over the cache's
 *              descriptor (one op storing k,v in the cache when its rows can take them now; else rope, staging,
 *              attention, commit k,v);
 *              x += linear_o(attn) [post-attn norm before the add];
 *              h = norm(x); x += down(act(gate(h)) * up(h)) [post-ffn norm before the add]; x += steering
 *   (each norm(x) before a projection is part of that composite op: a device may normalize inside the kernel)
 *   logits = lm_head(norm(x)) [soft-capped] [+ logit bias]
 * What differs between families is data in gp_arch (config.h), never a branch per family name; what differs
 * between weight formats and devices (CPU, CUDA) is behind backend.h: the context's backend and its binding of the
 * weights (gp_ctx.be, gp_ctx.wb). */
#include "model/ctx.h"

#include <math.h>
#include <string.h>

/* Reads x [n, E] back into the capture buffer slot j (hidden_out [n_hidden, n_total, E]) at token offset t0. */
static void capture(gp_ctx *c, const gp_eval_opts *o, int32_t idx, const float *x, int32_t n, int32_t t0,
                    int32_t n_total, int32_t E) {
    if (!o || !o->hidden_out) return;
    gp_backend *be = c->be;
    for (int32_t j = 0; j < o->n_hidden_layers; j++)
        if (o->hidden_layers[j] == idx && be->ops->finish(c->ws) == GP_OK)
            be->ops->download(be, o->hidden_out + ((size_t)j * n_total + t0) * E, x, (size_t)n * E * sizeof(float));
}

/* x += [post_norm](linear(in, L)): the residual add of a block's output projection (one fused op without the
 * sandwich norm, told the norm of the projection that follows: next). */
static void residual(gp_ctx *c, const gp_linear *L, const float *in, const gp_wt *post_norm, const gp_prenorm *next,
                     int32_t n) {
    const gp_config *cfg = &c->m->cfg;
    const gp_backend_ops *B = c->be->ops;
    const int32_t E = cfg->n_embd;
    if (!post_norm) {
        B->linear_add(c->ws, c->x, c->h, in, L, next, n);
        return;
    }
    B->linear(c->ws, c->h, in, L, n);
    B->rmsnorm(c->ws, c->h, c->h, post_norm, n, E, cfg->norm_eps, cfg->arch.norm_plus_one);
    B->add(c->ws, c->x, c->h, (int64_t)n * E);
}

/* The norm by w before a projection of x (its h: the context's scratch row) */
static gp_prenorm prenorm(const gp_ctx *c, const gp_wt *w) {
    return (gp_prenorm){w, c->h, c->m->cfg.norm_eps, c->m->cfg.arch.norm_plus_one};
}

/* The attention block of layer l: x += o_proj(attention(rope(q), rope(k), v over the cache)) [post-norm].  The n rows
 * of cs[0]'s buffers belong to n_seq contexts, n / n_seq consecutive rows each (one context's chunk, or one token of
 * each sequence of a batch): the projections run on all rows at once (one pass over the weights), rope and attention
 * per context at its own cache's position. */
static void attention_block(gp_ctx *const *cs, int32_t n_seq, int32_t l, int32_t n) {
    gp_ctx *c = cs[0];
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend_ops *B = c->be->ops;
    gp_ws *ws = c->ws;
    const gp_layer *L = &c->layers[l]; /* the model's, or the context's copy with LoRA terms */
    const int32_t hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads, r = n / n_seq;
    const int64_t Q = (int64_t)nh * hd, KV = (int64_t)nkv * hd;
    const int po = a->norm_plus_one;

    const gp_prenorm norm = prenorm(c, &L->attn_norm), next = prenorm(c, &L->ffn_norm);
    float *const qkv[3] = {c->q, c->k, c->v};
    const gp_linear *const proj[3] = {&L->q, &L->k, &L->v};
    B->linears(ws, 3, qkv, c->x, &norm, proj, n);
    const gp_wt *qn = a->qk_norm ? &L->q_norm : NULL, *kn = a->qk_norm ? &L->k_norm : NULL;
    /* the model's sliding window picks the rope base */
    const float *inv_freq = cfg->window[l] > 0 ? c->wb->inv_freq_sliding : c->wb->inv_freq_full;
    for (int32_t i = 0; i < n_seq; i++) {
        gp_cache *kc = gp_ctx_cache(cs[i]);
        const int32_t pos = gp_cache_n_past(kc);
        float *q = c->q + i * r * Q, *k = c->k + i * r * KV, *v = c->v + i * r * KV;
        /* float rows the ring can take now are stored by the attention op with the rope; others are rotated now,
         * staged, and committed after it */
        gp_kv_rows dk, dv;
        gp_kv_dst dst = {&dk, &dv, v, 0};
        const int early = gp_cache_early_rows(kc, l, r, &dk, &dv, &dst.r0);
        const gp_rope_args rope = {q, k, inv_freq, qn, kn, cfg->norm_eps, po, &dst};
        if (!early) B->rope_qk(ws, q, k, r, nh, nkv, hd, pos, inv_freq, qn, kn, cfg->norm_eps, po, NULL);
        gp_kv_desc kv;
        gp_cache_stage(kc, ws, l, k, v, r, early, &kv);
        const gp_attn_args args = {.out = c->att + i * r * Q, .q = q, .kv = &kv, .n = r, .pos0 = pos, .n_heads = nh,
                                   .n_kv = nkv, .head_dim = hd, .scale = a->attn_scale, .softcap = a->attn_softcap,
                                   .rope = early ? &rope : NULL};
        B->attention(ws, &args);
        gp_cache_commit(kc, ws, l, r, early);
    }
    residual(c, &L->o, c->att, a->sandwich_norms ? &L->attn_post_norm : NULL, &next, n);
}

/* The feed-forward block of layer l: x += down(act(gate(h)) * up(h)) [post-norm], h = norm(x). */
static void ffn_block(gp_ctx *c, int32_t l, int32_t n) {
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_layer *L = &c->layers[l]; /* the model's, or the context's copy with LoRA terms */

    const gp_prenorm norm = prenorm(c, &L->ffn_norm);
    c->be->ops->linear_glu(c->ws, c->gate, c->up, c->x, &norm, &L->gate, &L->up, n, a->act);
    /* the next layer's attention norm follows (a steering add between is another op: a device then drops what it
     * prepared for it) */
    const gp_prenorm next = prenorm(c, l + 1 < cfg->n_layers ? &c->layers[l + 1].attn_norm : NULL);
    residual(c, &L->down, c->gate, a->sandwich_norms ? &L->ffn_post_norm : NULL, next.w ? &next : NULL, n);
}

/* Reads rows [rows, V] of device logits back into dst: one row through the context's pinned buffer unless dst is
 * that buffer (a copy into pageable memory is staged by the driver anyway, at a fraction of the link's rate). */
static void download_logits(gp_ctx *c, float *dst, const float *src, int32_t rows) {
    const size_t bytes = (size_t)rows * (size_t)c->m->cfg.n_vocab * sizeof(float);
    if (rows != 1 || dst == c->host_logits) {
        c->be->ops->download(c->be, dst, src, bytes);
        return;
    }
    c->be->ops->download(c->be, c->host_logits, src, bytes);
    memcpy(dst, c->host_logits, bytes);
}

/* Where the lm_head of `rows` rows from t0 writes: in place in host memory (the CPU); one row with nothing after the
 * product, into the context's host buffer (a device writes it directly where be->host_out: no copy after the step);
 * else the context's device rows, read back. */
static float *head_out(gp_ctx *const *cs, int per_row, int32_t t0, int32_t rows, float *logits) {
    gp_ctx *c = cs[0];
    if (c->be->host_memory) return logits + (int64_t)t0 * c->m->cfg.n_vocab;
    if (c->be->host_out && rows == 1 && c->m->cfg.arch.final_softcap <= 0 && !cs[per_row ? t0 : 0]->steer.bias)
        return c->host_logits;
    return c->logits;
}

/* The lm_head of the rows [n, E] at x (soft-capped, + the logit bias of each row's context cs[t] or cs[0]) into host
 * logits [n, V], in blocks of the context's logit rows (on the CPU one block, written in place). */
static gp_status head(gp_ctx *const *cs, int per_row, const float *x, int32_t n, float *logits) {
    gp_ctx *c = cs[0];
    const gp_config *cfg = &c->m->cfg;
    gp_backend *be = c->be;
    const gp_backend_ops *B = be->ops;
    const int32_t V = cfg->n_vocab, E = cfg->n_embd;
    for (int32_t t0 = 0; t0 < n; t0 += c->logit_rows) {
        const int32_t rows = n - t0 < c->logit_rows ? n - t0 : c->logit_rows;
        float *out = head_out(cs, per_row, t0, rows, logits);
        B->linear(c->ws, out, x + (int64_t)t0 * E, &c->wb->lm_head, rows);
        if (cfg->arch.final_softcap > 0) B->softcap(c->ws, out, (int64_t)rows * V, cfg->arch.final_softcap);
        for (int32_t t = 0; t < rows; t++) {
            const float *bias = cs[per_row ? t0 + t : 0]->steer.bias;
            if (bias) B->add(c->ws, out + (int64_t)t * V, bias, V);
        }
        if (out == logits + (int64_t)t0 * V) continue; /* the caller's finish() completes it */
        gp_status s = B->finish(c->ws);
        if (s) return s;
        if (out == c->host_logits) memcpy(logits + (int64_t)t0 * V, out, (size_t)V * sizeof(float));
        else download_logits(c, logits + (int64_t)t0 * V, out, rows);
    }
    return GP_OK;
}

gp_status gp_forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0,
                           int32_t n_total, float *logits, int all) {
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend_ops *B = c->be->ops;
    gp_ws *ws = c->ws;
    const int32_t E = cfg->n_embd;

    B->embed(ws, c->x, ids, n, &c->wb->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    capture(c, o, 0, c->x, n, t0, n_total, E);
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        attention_block(&c, 1, l, n);
        ffn_block(c, l, n);
        gp_steer_apply(&c->steer, ws, l, c->x, n, E);
        if (l + 1 < cfg->n_layers) capture(c, o, l + 1, c->x, n, t0, n_total, E);
    }
    B->rmsnorm(ws, c->x, c->x, &c->wb->out_norm, n, E, cfg->norm_eps, a->norm_plus_one);
    capture(c, o, cfg->n_layers, c->x, n, t0, n_total, E);
    gp_status s = GP_OK;
    if (logits) s = head(&c, 0, c->x + (int64_t)(all ? 0 : n - 1) * E, all ? n : 1, logits);
    if (!s) s = B->finish(ws);
    if (!s) gp_cache_advance(gp_ctx_cache(c), n);
    return s;
}

gp_status gp_forward_batch(gp_ctx *const *cs, int32_t n, const int32_t *ids, float *logits) {
    gp_ctx *c = cs[0];
    const gp_config *cfg = &c->m->cfg;
    const gp_arch *a = &cfg->arch;
    const gp_backend_ops *B = c->be->ops;
    gp_ws *ws = c->ws;
    const int32_t E = cfg->n_embd;

    B->embed(ws, c->x, ids, n, &c->wb->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        attention_block(cs, n, l, n);
        ffn_block(c, l, n);
        for (int32_t i = 0; i < n; i++) gp_steer_apply(&cs[i]->steer, ws, l, c->x + (int64_t)i * E, 1, E);
    }
    B->rmsnorm(ws, c->x, c->x, &c->wb->out_norm, n, E, cfg->norm_eps, a->norm_plus_one);
    gp_status s = head(cs, 1, c->x, n, logits);
    if (!s) s = B->finish(ws);
    for (int32_t i = 0; i < n && !s; i++) gp_cache_advance(gp_ctx_cache(cs[i]), 1);
    return s;
}
