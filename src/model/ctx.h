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
    gp_backend *be;      /* the device the context runs on (the model's CPU backend or its device binding's) */
    const gp_bound *wb;  /* the model's weights on that backend */
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
    float *logits;       /* [logit_rows, n_vocab] when backend memory is not host memory (read back), else NULL */
    float *host_logits;  /* [n_vocab] host memory from be->ops->host_alloc (pinned on a device): gp_ctx_logits_buffer,
                          * and the staging of one row read back into a caller's buffer */
    int32_t logit_rows;  /* rows of logits one lm_head call computes (the chunk on the CPU; on a device as many as
                            fit in 64 MB) */
    uint64_t scratch_bytes;
    gp_steer_state steer; /* residual hooks, logit-bias vector, forward step counter */
    /* LoRA adapters (gp_ctx_set_adapters): the layers the forward reads are the model's, or with adapters a copy
     * whose linears list the context's low-rank terms */
    const gp_layer *layers;   /* [n_layers]: wb->layers or own_layers */
    gp_layer *own_layers;
    gp_lora *lora_terms;      /* storage of own_layers' gp_linear.lora arrays */
    int32_t ws_lora_rank;     /* the workspace's max_lora_rank */
    char lora_desc[512];      /* "none" or "id:scale,..." (cache files record it) */
};

static inline gp_cache *gp_ctx_cache(const gp_ctx *c) { return c->caches[c->cur]; }

/* The workspace parameters of context x (its threads, chunk, keys, compute mode, widest linear input) with LoRA
 * scratch for a sum of ranks of lora_rank. */
gp_ws_params gp_ctx_ws_params(const gp_ctx *x, int32_t lora_rank);

/* Runs one chunk of n tokens (ids, host memory) at the current cache's positions n_past.. through every layer and
 * advances the cache.  logits (host): [n, V] when all, else [V] of the last token, NULL for none.  Hidden states
 * requested by o are read back into o->hidden_out at token offset t0 of n_total.  The cache must have been
 * reserved and begun (gp_cache_reserve / gp_cache_begin).  Returns the backend's finish(): GP_OK, or a device
 * error (the CPU cannot fail). */
gp_status gp_forward_chunk(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0, int32_t n_total,
                      float *logits, int all);

/* One decode step of n sequences together (gp_generate_batch): row i is ids[i] on cs[i]'s current cache, at its
 * position, under its steering; every linear reads the weights once for the n rows; cs[0]'s workspace and buffers
 * (n <= its prefill_chunk).  logits (host) [n, V].  The caches must have been reserved and begun. */
gp_status gp_forward_batch(gp_ctx *const *cs, int32_t n, const int32_t *ids, float *logits);

/* One decode step of n sequences, each on its own context (distinct contexts of one model with equal gp_ctx_params;
 * n <= prefill_chunk): the same checks and bookkeeping as gp_ctx_eval of one id on each, then gp_forward_batch.
 * Every row's logits are bit-identical to gp_ctx_eval alone.  GP_ERR_RANGE (nothing evaluated) when one context is
 * full; GP_ERR_INVALID_ARG when the contexts cannot share a step (then evaluate them one by one). */
gp_status gp_ctx_eval_batch(gp_ctx *const *cs, int32_t n, const int32_t *ids, float *logits);

/* Rows one forward of the context can take (its prefill_chunk). */
static inline int32_t gp_ctx_max_rows(const gp_ctx *c) { return c->p.prefill_chunk; }

#endif
