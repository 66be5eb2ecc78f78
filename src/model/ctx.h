/* ctx.h — the context (gp_ctx): the model it runs, its backend workspace, named KV caches, activation buffers and
 * steering state.  Shared by context.c (lifecycle, gp_ctx_eval, caches, files, accounting) and forward.c (the math
 * of one chunk). */
#ifndef GP_CTX_H
#define GP_CTX_H

#include "cache/kvcache.h"
#include "model/model.h"
#include "steer/steer.h"

struct gp_ctx {
    const gp_model *m;
    gp_ctx_params p;
    gp_kv_params kvp;
    gp_ws *ws;           /* the backend workspace: thread count, per-thread scratch */
    gp_cache **caches;   /* named caches; caches[cur] is the one gp_ctx_eval uses */
    int32_t n_caches, cur;
    /* activations for one chunk of p.prefill_chunk tokens, in backend memory */
    float *x;            /* [chunk, n_embd] residual stream */
    float *h;            /* [chunk, max(n_embd, n_heads*head_dim)] normed input / projections out */
    float *q;            /* [chunk, n_heads*head_dim] */
    float *k;            /* [chunk, n_kv*head_dim] */
    float *v;            /* [chunk, n_kv*head_dim] */
    float *att;          /* [chunk, n_heads*head_dim] */
    float *gate, *up;    /* [chunk, n_ff] */
    float *logits;       /* [chunk, n_vocab] when backend memory is not host memory (read back), else NULL */
    uint64_t scratch_bytes;
    gp_steer_state steer; /* residual hooks, logit-bias vector, forward step counter */
    gp_cuda_ctx *cuda;    /* device KV cache and scratch (p.device == GP_DEVICE_CUDA), else NULL */
};

static inline gp_cache *gp_ctx_cache(const gp_ctx *c) { return c->caches[c->cur]; }

/* Runs one chunk of n tokens (ids, host memory) at the current cache's positions n_past.. through every layer and
 * advances the cache.  logits (host): [n, V] when all, else [V] of the last token, NULL for none.  Hidden states
 * requested by o are read back into o->hidden_out at token offset t0 of n_total.  The cache must have been
 * reserved and begun (gp_cache_reserve / gp_cache_begin); nothing here can fail. */
void gp_forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0, int32_t n_total,
                      float *logits, int all);

#endif
