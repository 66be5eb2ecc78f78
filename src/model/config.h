/* config.h — a model's config.json normalised into one struct (transformers-4 and -5 layouts alike), with the
 * architecture descriptor that tells the single forward pass what differs between families. */
#ifndef GP_CONFIG_H
#define GP_CONFIG_H

#include "genparity.h"
#include "kernels/backend.h" /* gp_act */
#include "model/quant.h"

#include <stdint.h>

typedef enum { GP_ROPE_DEFAULT = 0, GP_ROPE_LINEAR = 1, GP_ROPE_LLAMA3 = 2 } gp_rope_type;

/* Rotary embedding parameters of one layer type. */
typedef struct gp_rope {
    gp_rope_type type;
    double theta;            /* rope_theta */
    double factor;           /* linear / llama3 */
    double low_freq_factor;  /* llama3 */
    double high_freq_factor; /* llama3 */
    double orig_max_pos;     /* llama3: original_max_position_embeddings */
} gp_rope;

/* What differs between families, as data (filled from config.json). */
typedef struct gp_arch {
    int norm_plus_one;     /* RMSNorm multiplies by (1 + w) (Gemma) instead of w */
    gp_act act;            /* MLP activation of the gate */
    int qkv_bias;          /* q/k/v projections have biases (Qwen2, attention_bias) */
    int o_bias;            /* o_proj has a bias (attention_bias) */
    int mlp_bias;          /* gate/up/down have biases (mlp_bias) */
    int qk_norm;           /* per-head RMSNorm on q and k before rope (Qwen3, Gemma3) */
    int sandwich_norms;    /* post-attention and pre/post-feedforward norms (Gemma 2/3) */
    int scale_embeddings;  /* embeddings multiplied by sqrt(hidden) (Gemma) */
    float attn_softcap;    /* 0 = none; else scores = cap*tanh(scores/cap) (Gemma2) */
    float final_softcap;   /* 0 = none; same on the logits */
    float attn_scale;      /* multiplier of q·k: query_pre_attn_scalar^-0.5 or head_dim^-0.5 */
} gp_arch;

#define GP_MAX_LAYERS 4096

typedef struct gp_config {
    char arch_name[96];    /* architectures[0] */
    char model_type[48];
    int32_t n_vocab, n_embd, n_layers, n_heads, n_kv_heads, head_dim, n_ff, n_ctx_train;
    float norm_eps;
    int tie_word_embeddings; /* -1 when config.json does not say */
    gp_arch arch;
    gp_rope rope_full;       /* full-attention layers */
    gp_rope rope_sliding;    /* sliding-window layers */
    int32_t *window;         /* [n_layers]: sliding window size, 0 = full attention */
    int32_t bos_id;
    int32_t eos_ids[GP_MAX_EOS];
    int32_t n_eos;
    gp_quant quant;          /* MLX affine quantization ("quantization"); bits 0 = none */
    int multimodal;          /* Gemma3ForConditionalGeneration: text_config read; vision weights are not loaded */
} gp_config;

/* Parses DIR/config.json into *cfg.  Errors name the file and the field.  Free with gp_config_free. */
gp_status gp_config_load(const char *path, gp_config *cfg);

/* Parses config.json text (path used in messages). */
gp_status gp_config_parse(const char *path, const char *text, gp_config *cfg);

void gp_config_free(gp_config *cfg);

/* Largest n_ctx / max_kv_size / prefill_chunk / keep / quantized_kv_start a context accepts: sums and products of
 * these with head sizes stay far from INT32_MAX and SIZE_MAX (a position count, not a memory promise). */
#define GP_MAX_CTX (1 << 28)

/* Checks context parameters at the API boundary (gp_ctx_init), before any arithmetic on them: every size in
 * [0, GP_MAX_CTX], n_threads in [0, 4096], kv_bits 0/4/8/16/32, kv_group_size 0/32/64/128.  GP_OK or
 * GP_ERR_INVALID_ARG naming the field. */
gp_status gp_ctx_params_check(const gp_ctx_params *p);

/* inv_freq[head_dim/2] for a rope, as transformers computes it (float32). */
void gp_rope_inv_freq(const gp_rope *r, int32_t head_dim, float *inv_freq);

#endif
