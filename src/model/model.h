/* model.h — the loaded model (gp_model): config, mapped weights bound to the architecture's tensors, tokenizer and
 * generation defaults.  Immutable after gp_model_load. */
#ifndef GP_MODEL_H
#define GP_MODEL_H

#include "genparity.h"
#include "io/safetensors.h"
#include "kernels/backend.h"
#include "model/config.h"

#include <pthread.h>

/* One decoder layer's weights, bound through the model's backend.  The checkpoint keys, shapes and conditions are
 * the table in model.c (WEIGHTS), the one list that binding, unbinding and gp_model_decode_bytes iterate. */
typedef struct gp_layer {
    gp_wt attn_norm;                 /* input_layernorm                                  [n_embd] */
    gp_linear q, k, v, o;            /* self_attn.{q,k,v,o}_proj (+ bias: qkv_bias / o_bias) */
    gp_wt q_norm, k_norm;            /* self_attn.{q,k}_norm (qk_norm)                   [head_dim] */
    gp_wt attn_post_norm;            /* post_attention_layernorm (sandwich norms)        [n_embd] */
    gp_wt ffn_norm;                  /* post_attention_layernorm, or pre_feedforward_layernorm (sandwich) */
    gp_wt ffn_post_norm;             /* post_feedforward_layernorm (sandwich norms)      [n_embd] */
    gp_linear gate, up, down;        /* mlp.{gate,up,down}_proj (+ bias: mlp_bias) */
} gp_layer;

/* The model's weights bound through one backend (what a context's forward reads, gp_ctx.wb): the CPU backend's
 * views of the mapped files (m->host, bound at load), or a device backend's copies (bound by gp_model_bound when a
 * context first asks for that device; immutable afterwards, shared by every context on it). */
typedef struct gp_bound {
    gp_backend *be;
    gp_wt tok_embd, out_norm;
    gp_linear lm_head;       /* lm_head.w is tok_embd when tied */
    gp_layer *layers;        /* [n_layers] */
    const float *inv_freq_full, *inv_freq_sliding; /* [head_dim/2] in backend memory */
    uint64_t bytes;          /* backend memory the weights occupy (0 for views) */
} gp_bound;

/* Tensor name layouts: plain (model.layers...), a multimodal Gemma 3 in transformers 5 (model.language_model.layers...)
 * or in transformers 4 / mlx-vlm (language_model.model.layers..., language_model.lm_head.weight). */
enum { GP_LAYOUT_PLAIN = 0, GP_LAYOUT_V5 = 1, GP_LAYOUT_LEGACY = 2 };

struct gp_model {
    char *dir;
    gp_config cfg;
    gp_st_set *st;          /* the mapped safetensors files */
    gp_wt tok_embd;         /* model.embed_tokens.weight  [n_vocab, n_embd] */
    gp_wt out_norm;         /* model.norm.weight          [n_embd] */
    gp_linear lm_head;      /* lm_head.weight             [n_vocab, n_embd], or tok_embd when tied */
    int lm_head_tied;       /* lm_head.w is tok_embd (bound once) */
    gp_layer *layers;       /* [n_layers] */
    float *inv_freq_full;   /* [head_dim/2] rope frequencies of full-attention layers */
    float *inv_freq_sliding;/* [head_dim/2] of sliding-window layers */
    gp_tokenizer *tok;      /* NULL when the folder has none */
    char *gen_config_path;  /* DIR/generation_config.json if present, else NULL */
    int32_t gen_bos;
    gp_gen_config gen;      /* transformers' defaults < generation_config.json (owns its arrays, gen._owned) */
    gp_backend *be;         /* the backend instance the weights are bound to (owned) */
    int32_t max_lora_rank;  /* largest sum of LoRA ranks of one linear (workspace scratch); 0 = no adapter */
    int layout;             /* GP_LAYOUT_*: where the language model's tensors are in the checkpoint */
    pthread_mutex_t fp_lock; /* guards the lazily computed fingerprint and the lazily bound device copy */
    uint64_t fingerprint;    /* hash of config.json + every tensor (0 = not computed yet) */
    gp_bound host;           /* the weights above as the forward reads them on the CPU */
    gp_bound *dev;           /* the weights on the CUDA device (first GP_DEVICE_CUDA context), else NULL */
};

/* The model's weights on device (GP_DEVICE_CPU: m->host; GP_DEVICE_CUDA: bound on the first call, which creates the
 * device backend and refuses a model that does not fit in its free memory, naming the sizes).  *out is owned by the
 * model. */
gp_status gp_model_bound(const gp_model *m, int32_t device, const gp_bound **out);

/* The checkpoint's name of canonical tensor name canon ("model.layers.0.self_attn.q_proj.weight", "lm_head.weight"):
 * canon itself, or its nested form in buf [cap] for a multimodal checkpoint. */
const char *gp_model_tensor_name(const gp_model *m, const char *canon, char *buf, size_t cap);

/* The model a context runs (internal). */
const gp_model *gp_ctx_model(const gp_ctx *c);
/* Slots allocated in layer l's KV ring of the current cache (internal). */
int32_t gp_ctx_layer_cap(const gp_ctx *c, int32_t l);

#endif
