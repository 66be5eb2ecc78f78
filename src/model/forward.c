/* forward.c — the one forward pass every architecture runs (gp_ctx_eval):
 *   x = embed(ids) (* sqrt(hidden) for Gemma)
 *   per layer: h = norm(x); q,k,v = proj(h) (+bias); [q,k per-head norm]; rope; attention (causal, sliding window);
 *              a = o_proj(attn) [+ post-attn norm]; x += a;  h = norm(x); m = down(act(gate(h)) * up(h))
 *              [+ post-ffn norm]; x += m
 *   logits = lm_head(norm(x)) [soft-capped]
 * What differs between families is data in gp_arch (config.h), never a branch per family name. */
#include "model/ctx.h"
#include "util/util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
    gp_cache *kc = gp_ctx_cache(c);
    const int32_t KV = nkv * hd, F = cfg->n_ff, pos0 = kc->n_past;
    const int po = a->norm_plus_one;

    be->embed(c->x, ids, n, &m->tok_embd, a->scale_embeddings ? (float)sqrt((double)E) : 1.0f);
    capture(o, 0, c->x, n, t0, n_total, E);

    for (int32_t l = 0; l < cfg->n_layers; l++) {
        const gp_layer *L = &m->layers[l];
        const gp_kv_layer *kv = &kc->L[l];
        const int32_t window = cfg->window[l]; /* the model's sliding window picks the rope base */

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
        gp_kv_view kview = gp_cache_view(kc, l, 0), vview = gp_cache_view(kc, l, 1);
        gp_attn_args args = {
            .out = c->att, .q = c->q, .k_new = c->k, .v_new = c->v, .kc = &kview, .vc = &vview, .cap = kv->cap,
            .keep = kv->keep, .n = n, .pos0 = pos0, .n_heads = nh, .n_kv = nkv, .head_dim = hd, .window = kv->window,
            .scale = a->attn_scale, .softcap = a->attn_softcap, .scratch = c->attn_scratch,
            .scratch_stride = c->scratch_stride,
        };
        be->attention(&args);
        /* the chunk's keys/values go into the ring (later positions overwrite earlier ones sharing a slot) */
        for (int32_t t = 0; t < n; t++) gp_cache_write(kc, l, pos0 + t, c->k + (int64_t)t * KV, c->v + (int64_t)t * KV);
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
    kc->n_past += n;
}

gp_status gp_ctx_eval(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *opts, float *logits) {
    if (!c || (!ids && n > 0) || n < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: bad arguments");
    if (n == 0) return GP_OK;
    const gp_config *cfg = &c->m->cfg;
    gp_cache *kc = gp_ctx_cache(c);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->n_vocab)
            return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: token id %d at index %d is outside the vocabulary [0, %d)",
                                ids[i], i, cfg->n_vocab);
    if (kc->p.max_kv_size == 0 && (int64_t)kc->n_past + n > c->p.n_ctx)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: %d cached + %d new positions exceed n_ctx = %d", kc->n_past, n,
                            c->p.n_ctx);
    if ((int64_t)kc->n_past + n > INT32_MAX / 2)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: position counter would overflow");
    if (opts && opts->n_hidden_layers > 0) {
        if (!opts->hidden_layers || !opts->hidden_out)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: hidden_layers and hidden_out are required");
        for (int32_t j = 0; j < opts->n_hidden_layers; j++)
            if (opts->hidden_layers[j] < 0 || opts->hidden_layers[j] > cfg->n_layers)
                return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: hidden layer index %d outside [0, %d]",
                                    opts->hidden_layers[j], cfg->n_layers);
    }
    gp_status s = gp_ctx_reserve(c, kc->n_past + n);
    if (s) return s;
    if ((s = gp_cache_push_ids(kc, ids, n))) return s;
    if (kc->n_past == 0) {
        kc->steer_epoch = c->steer.epoch;
        kc->steer_mixed = 0;
    } else if (kc->steer_epoch != c->steer.epoch) kc->steer_mixed = 1;
    omp_set_num_threads(c->p.n_threads);
    int all = opts && opts->all_logits;
    for (int32_t t0 = 0; t0 < n; t0 += c->p.prefill_chunk) {
        int32_t cn = n - t0 < c->p.prefill_chunk ? n - t0 : c->p.prefill_chunk;
        int last = t0 + cn == n;
        float *lg = NULL;
        if (logits && all) lg = logits + (size_t)t0 * cfg->n_vocab;
        else if (logits && last) lg = logits;
        if (c->cuda) {
            if ((s = gp_cuda_forward_chunk(c, ids + t0, cn, opts, t0, n, lg, all))) return s;
        } else forward_chunk(c, ids + t0, cn, opts, t0, n, lg, all);
    }
    c->steer.step++;
    return GP_OK;
}

