/* model.h — the loaded model (gp_model): config, mapped weights bound to the architecture's tensors, tokenizer and
 * generation defaults.  Immutable after gp_model_load. */
#ifndef GP_MODEL_H
#define GP_MODEL_H

#include "genparity.h"
#include "io/safetensors.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/forward_cuda.h"

#include <pthread.h>

/* One decoder layer's weights; each comment gives the checkpoint key (under model.layers.{i}.) and the shape. */
typedef struct gp_layer {
    gp_wt attn_norm;      /* input_layernorm.weight                              [n_embd] */
    gp_wt wq;             /* self_attn.q_proj.weight                             [n_heads*head_dim, n_embd] */
    gp_wt wk;             /* self_attn.k_proj.weight                             [n_kv*head_dim, n_embd] */
    gp_wt wv;             /* self_attn.v_proj.weight                             [n_kv*head_dim, n_embd] */
    gp_wt wo;             /* self_attn.o_proj.weight                             [n_embd, n_heads*head_dim] */
    gp_wt bq, bk, bv, bo; /* self_attn.{q,k,v,o}_proj.bias (qkv_bias / o_bias)   [rows of the projection] */
    gp_wt q_norm;         /* self_attn.q_norm.weight (qk_norm)                   [head_dim] */
    gp_wt k_norm;         /* self_attn.k_norm.weight (qk_norm)                   [head_dim] */
    gp_wt attn_post_norm; /* post_attention_layernorm.weight (sandwich norms)    [n_embd] */
    gp_wt ffn_norm;       /* post_attention_layernorm.weight, or pre_feedforward_layernorm.weight (sandwich) [n_embd] */
    gp_wt ffn_post_norm;  /* post_feedforward_layernorm.weight (sandwich norms)  [n_embd] */
    gp_wt w_gate;         /* mlp.gate_proj.weight                                [n_ff, n_embd] */
    gp_wt w_up;           /* mlp.up_proj.weight                                  [n_ff, n_embd] */
    gp_wt w_down;         /* mlp.down_proj.weight                                [n_embd, n_ff] */
    gp_wt b_gate, b_up, b_down; /* mlp.*.bias (mlp_bias) */
} gp_layer;

struct gp_model {
    char *dir;
    gp_config cfg;
    gp_st_set *st;          /* the mapped safetensors files */
    gp_wt tok_embd;         /* model.embed_tokens.weight  [n_vocab, n_embd] */
    gp_wt out_norm;         /* model.norm.weight          [n_embd] */
    gp_wt lm_head;          /* lm_head.weight             [n_vocab, n_embd], or tok_embd when tied */
    gp_layer *layers;       /* [n_layers] */
    float *inv_freq_full;   /* [head_dim/2] rope frequencies of full-attention layers */
    float *inv_freq_sliding;/* [head_dim/2] of sliding-window layers */
    gp_tokenizer *tok;      /* NULL when the folder has none */
    char *gen_config_path;  /* DIR/generation_config.json if present, else NULL */
    int32_t gen_bos;
    gp_gen_config gen;      /* transformers' defaults < generation_config.json (owns its arrays, gen._owned) */
    const gp_backend *be;
    pthread_mutex_t fp_lock; /* guards the lazily computed fingerprint and the lazily uploaded device copy */
    uint64_t fingerprint;    /* hash of config.json + every tensor (0 = not computed yet) */
    gp_cuda_model *cuda;     /* the weights on the GPU (first GP_DEVICE_CUDA context), else NULL */
};

/* The model a context runs (internal). */
const gp_model *gp_ctx_model(const gp_ctx *c);
/* Slots allocated in layer l's KV ring (internal). */
int32_t gp_ctx_layer_cap(const gp_ctx *c, int32_t l);

#endif
