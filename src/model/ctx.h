/* ctx.h — the context (gp_ctx): the model it runs, its named KV caches, activation scratch and steering state.
 * Shared by forward.c (the forward pass) and context.c (lifecycle, caches, files, accounting). */
#ifndef GP_CTX_H
#define GP_CTX_H

#include "cache/kvcache.h"
#include "model/model.h"
#include "steer/steer.h"

struct gp_ctx {
    const gp_model *m;
    gp_ctx_params p;
    gp_kv_params kvp;
    gp_cache **caches;   /* named caches; caches[cur] is the one gp_ctx_eval uses */
    int32_t n_caches, cur;
    /* scratch for one chunk of p.prefill_chunk tokens */
    float *x;            /* [chunk, n_embd] residual stream */
    float *h;            /* [chunk, max(n_embd, n_heads*head_dim)] normed input / projections out */
    float *q;            /* [chunk, n_heads*head_dim] */
    float *k;            /* [chunk, n_kv*head_dim] */
    float *v;            /* [chunk, n_kv*head_dim] */
    float *att;          /* [chunk, n_heads*head_dim] */
    float *gate, *up;    /* [chunk, n_ff] */
    float *attn_scratch; /* [n_threads, scratch_stride] attention scores + dequantized rows */
    int32_t scratch_stride;
    uint64_t scratch_bytes;
    gp_steer_state steer; /* residual hooks, logit-bias vector, forward step counter */
    gp_cuda_ctx *cuda;    /* device KV cache and scratch (p.device == GP_DEVICE_CUDA), else NULL */
};

static inline gp_cache *gp_ctx_cache(const gp_ctx *c) { return c->caches[c->cur]; }

/* Makes the current cache ready to take positions up to n_total - 1: grows its rings, gives it its own copy of
 * buffers shared with a fork, and enforces mem_limit_bytes.  After GP_OK, writes to the cache cannot fail. */
gp_status gp_ctx_reserve(gp_ctx *c, int32_t n_total);

#endif
