/* config.c — reads config.json (transformers-4 layout: rope_theta/rope_scaling/torch_dtype; transformers-5 layout:
 * rope_parameters, possibly per layer type, dtype) into gp_config, filling the architecture descriptor from the
 * family's table and checking every size before anything is allocated from it. */
#include "model/config.h"
#include "io/json.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row per supported family: what its config implies before per-model fields are applied. */
typedef struct family {
    const char *arch;       /* architectures[0] */
    int norm_plus_one, qkv_bias, qk_norm, sandwich_norms, scale_embeddings;
    gp_act act;
    int window_rule;        /* 0 none, 1 every layer (Mistral), 2 alternate from layer 0 (Gemma2), 3 pattern (Gemma3),
                               4 layers >= max_window_layers when use_sliding_window (Qwen2/3) */
} family;

static const family FAMILIES[] = {
    {"LlamaForCausalLM", 0, 0, 0, 0, 0, GP_ACT_SILU, 0},
    {"MistralForCausalLM", 0, 0, 0, 0, 0, GP_ACT_SILU, 1},
    {"Qwen2ForCausalLM", 0, 1, 0, 0, 0, GP_ACT_SILU, 4},
    {"Qwen3ForCausalLM", 0, 0, 1, 0, 0, GP_ACT_SILU, 4},
    {"Gemma2ForCausalLM", 1, 0, 0, 1, 1, GP_ACT_GELU_TANH, 2},
    {"Gemma3ForCausalLM", 1, 0, 1, 1, 1, GP_ACT_GELU_TANH, 3},
};

static const family *find_family(const char *arch) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (!strcmp(FAMILIES[i].arch, arch)) return &FAMILIES[i];
    return NULL;
}

/* Parses one rope parameter object (v5 rope_parameters entry or v4 rope_scaling) onto *r. */
static gp_status parse_rope(const gp_jobj *parent, const char *field, gp_rope *r) {
    char pre[96];
    gp_jobj o;
    gp_status s = gp_json_obj(parent, field, &o, pre, sizeof pre);
    if (s || !o.o) return s;
    const double H = HUGE_VAL;
    if ((s = gp_json_num(&o, "rope_theta", -H, H, &r->theta))) return s;
    const char *ty = "default";
    if ((s = gp_json_str(&o, gp_json_has(&o, "rope_type") ? "rope_type" : "type", &ty))) return s;
    if (!strcmp(ty, "default")) r->type = GP_ROPE_DEFAULT;
    else if (!strcmp(ty, "linear")) r->type = GP_ROPE_LINEAR;
    else if (!strcmp(ty, "llama3")) r->type = GP_ROPE_LLAMA3;
    else
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%srope_type' = '%s' is not supported (default, linear, llama3)",
                            o.path, pre, ty);
    r->factor = 1.0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    r->orig_max_pos = 8192;
    if ((s = gp_json_num(&o, "factor", -H, H, &r->factor))) return s;
    if ((s = gp_json_num(&o, "low_freq_factor", -H, H, &r->low_freq_factor))) return s;
    if ((s = gp_json_num(&o, "high_freq_factor", -H, H, &r->high_freq_factor))) return s;
    if ((s = gp_json_num(&o, "original_max_position_embeddings", -H, H, &r->orig_max_pos))) return s;
    if (r->type != GP_ROPE_DEFAULT && !(r->factor > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%sfactor' must be positive", o.path, pre);
    if (r->type == GP_ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor && r->low_freq_factor > 0 &&
                                       r->orig_max_pos > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': llama3 needs 0 < low_freq_factor < high_freq_factor", o.path,
                            field);
    if (!(r->theta > 0)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%srope_theta' must be positive", o.path, pre);
    return GP_OK;
}

/* architectures[0] and model_type. */
static gp_status parse_family(const gp_jobj *o, gp_config *c, const family **fam) {
    const cJSON *archs = gp_json_get(o, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!a0 || !cJSON_IsString(a0))
        return gp_set_error(GP_ERR_MISSING, "%s: field 'architectures' is missing or not a list of strings", o->path);
    snprintf(c->arch_name, sizeof c->arch_name, "%s", a0->valuestring);
    *fam = find_family(a0->valuestring);
    if (!*fam)
        return gp_set_error(GP_ERR_UNSUPPORTED,
                            "%s: field 'architectures': '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, "
                            "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM)",
                            o->path, a0->valuestring);
    const char *mt = "";
    gp_status s = gp_json_str(o, "model_type", &mt);
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    return s;
}

/* Sizes: every one checked against an absurdity limit before anything is allocated from it. */
static gp_status parse_sizes(const gp_jobj *o, gp_config *c) {
    gp_status s;
    if ((s = gp_json_need_i32(o, "vocab_size", 1, 1 << 24, &c->n_vocab))) return s;
    if ((s = gp_json_need_i32(o, "hidden_size", 1, 1 << 17, &c->n_embd))) return s;
    if ((s = gp_json_need_i32(o, "num_hidden_layers", 1, GP_MAX_LAYERS, &c->n_layers))) return s;
    if ((s = gp_json_need_i32(o, "num_attention_heads", 1, 4096, &c->n_heads))) return s;
    if ((s = gp_json_need_i32(o, "intermediate_size", 1, 1 << 20, &c->n_ff))) return s;
    c->n_kv_heads = c->n_heads;
    if ((s = gp_json_i32(o, "num_key_value_heads", 1, 4096, &c->n_kv_heads))) return s;
    if (c->n_heads % c->n_kv_heads)
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'num_key_value_heads' = %d does not divide num_attention_heads = %d",
                            o->path, c->n_kv_heads, c->n_heads);
    if (gp_json_has(o, "head_dim")) {
        if ((s = gp_json_i32(o, "head_dim", 1, 1 << 14, &c->head_dim))) return s;
    } else {
        if (c->n_embd % c->n_heads)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'hidden_size' = %d is not divisible by num_attention_heads = %d",
                                o->path, c->n_embd, c->n_heads);
        c->head_dim = c->n_embd / c->n_heads;
    }
    if (c->head_dim % 2) return gp_set_error(GP_ERR_FORMAT, "%s: field 'head_dim' = %d must be even", o->path, c->head_dim);
    c->n_ctx_train = 2048;
    if ((s = gp_json_i32(o, "max_position_embeddings", 1, 1 << 24, &c->n_ctx_train))) return s;
    double eps = 1e-6;
    if ((s = gp_json_num(o, "rms_norm_eps", -HUGE_VAL, HUGE_VAL, &eps))) return s;
    if (!(eps > 0 && eps < 1)) return gp_set_error(GP_ERR_FORMAT, "%s: field 'rms_norm_eps' must be in (0, 1)", o->path);
    c->norm_eps = (float)eps;
    c->tie_word_embeddings = -1;
    return gp_json_bool(o, "tie_word_embeddings", &c->tie_word_embeddings);
}

/* A soft-cap: absent, null or 0 = none; else a positive number whose float32 is finite. */
static gp_status parse_softcap(const gp_jobj *o, const char *key, float *out) {
    double cap = 0;
    gp_status s = gp_json_num(o, key, 0, FLT_MAX, &cap);
    if (s) return s;
    *out = (float)cap;
    return GP_OK;
}

/* The architecture descriptor: the family's row, then what the config overrides. */
static gp_status parse_arch(const gp_jobj *o, const family *fam, gp_config *c) {
    gp_arch *ar = &c->arch;
    ar->norm_plus_one = fam->norm_plus_one;
    ar->qk_norm = fam->qk_norm;
    ar->sandwich_norms = fam->sandwich_norms;
    ar->scale_embeddings = fam->scale_embeddings;
    ar->act = fam->act;
    gp_status s;
    const char *key = gp_json_has(o, "hidden_activation") ? "hidden_activation" : "hidden_act", *n = NULL;
    if ((s = gp_json_str(o, key, &n))) return s;
    if (n) {
        if (!strcmp(n, "silu") || !strcmp(n, "swish")) ar->act = GP_ACT_SILU;
        else if (!strcmp(n, "gelu_pytorch_tanh") || !strcmp(n, "gelu_tanh")) ar->act = GP_ACT_GELU_TANH;
        else return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s' = '%s' is not supported", o->path, key, n);
    }
    int attn_bias = 0, mlp_bias = 0;
    if ((s = gp_json_bool(o, "attention_bias", &attn_bias))) return s;
    if ((s = gp_json_bool(o, "mlp_bias", &mlp_bias))) return s;
    ar->qkv_bias = fam->qkv_bias || attn_bias;
    ar->o_bias = attn_bias;
    ar->mlp_bias = mlp_bias;
    if ((s = parse_softcap(o, "attn_logit_softcapping", &ar->attn_softcap))) return s;
    if ((s = parse_softcap(o, "final_logit_softcapping", &ar->final_softcap))) return s;
    double qpas = 0;
    if ((s = gp_json_num(o, "query_pre_attn_scalar", -HUGE_VAL, HUGE_VAL, &qpas))) return s;
    if (gp_json_has(o, "query_pre_attn_scalar") && !(qpas > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'query_pre_attn_scalar' = %g must be positive", o->path, qpas);
    ar->attn_scale = (float)pow(qpas > 0 ? qpas : (double)c->head_dim, -0.5);
    if (!isfinite(ar->attn_scale) || !(ar->attn_scale > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'query_pre_attn_scalar' = %g makes the attention scale %g "
                            "(not a finite positive float32)", o->path, qpas, (double)ar->attn_scale);
    return GP_OK;
}

/* rope: v4 rope_theta + rope_scaling (+ Gemma3's rope_local_base_freq); v5 rope_parameters, flat or per type. */
static gp_status parse_ropes(const gp_jobj *o, const family *fam, gp_config *c) {
    double theta = 10000.0, local = 10000.0;
    gp_status s;
    if ((s = gp_json_num(o, "rope_theta", -HUGE_VAL, HUGE_VAL, &theta))) return s;
    if (!(theta > 0)) return gp_set_error(GP_ERR_FORMAT, "%s: field 'rope_theta' = %g must be positive", o->path, theta);
    if ((s = gp_json_num(o, "rope_local_base_freq", -HUGE_VAL, HUGE_VAL, &local))) return s;
    if (!(local > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'rope_local_base_freq' = %g must be positive", o->path, local);
    c->rope_full = (gp_rope){GP_ROPE_DEFAULT, theta, 1, 1, 4, 8192};
    c->rope_sliding = (gp_rope){GP_ROPE_DEFAULT, fam->window_rule == 3 ? local : theta, 1, 1, 4, 8192};
    const cJSON *rp = gp_json_get(o, "rope_parameters");
    if (rp && cJSON_IsObject(rp)) {
        char pre[64];
        gp_jobj r;
        gp_json_obj(o, "rope_parameters", &r, pre, sizeof pre);
        if (gp_json_has(&r, "full_attention") || gp_json_has(&r, "sliding_attention")) {
            if ((s = parse_rope(&r, "full_attention", &c->rope_full))) return s;
            return parse_rope(&r, "sliding_attention", &c->rope_sliding);
        }
        if ((s = parse_rope(o, "rope_parameters", &c->rope_full))) return s;
        c->rope_sliding = c->rope_full;
        return GP_OK;
    }
    if ((s = parse_rope(o, "rope_scaling", &c->rope_full))) return s;
    if (fam->window_rule != 3) c->rope_sliding = c->rope_full; /* Gemma3 scales only global layers */
    return GP_OK;
}

/* Per-layer sliding windows: layer_types when given, else the family's rule. */
static gp_status parse_windows(const gp_jobj *o, const family *fam, gp_config *c) {
    c->window = gp_calloc((size_t)c->n_layers, sizeof *c->window);
    if (!c->window) return GP_ERR_NOMEM;
    int32_t win = 0;
    gp_status s;
    if ((s = gp_json_i32(o, "sliding_window", 0, INT32_MAX, &win))) return s;
    const cJSON *lt = gp_json_get(o, "layer_types");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'layer_types' must list num_hidden_layers = %d entries", o->path,
                                c->n_layers);
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, lt) {
            if (!cJSON_IsString(x))
                return gp_set_error(GP_ERR_FORMAT, "%s: field 'layer_types[%d]' must be a string", o->path, i);
            if (!strcmp(x->valuestring, "sliding_attention")) {
                if (win <= 0)
                    return gp_set_error(GP_ERR_FORMAT, "%s: field 'sliding_window' must be set for sliding layers",
                                        o->path);
                c->window[i] = win;
            } else if (strcmp(x->valuestring, "full_attention"))
                return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'layer_types[%d]' = '%s' is not supported", o->path,
                                    i, x->valuestring);
            i++;
        }
        return GP_OK;
    }
    if (win <= 0) return GP_OK;
    int32_t pattern = 6, mwl = 0;
    int use = 0;
    if ((s = gp_json_i32(o, "sliding_window_pattern", 1, GP_MAX_LAYERS, &pattern))) return s;
    if ((s = gp_json_i32(o, "max_window_layers", 0, INT32_MAX, &mwl))) return s;
    if ((s = gp_json_bool(o, "use_sliding_window", &use))) return s;
    for (int i = 0; i < c->n_layers; i++) {
        int sliding = 0;
        switch (fam->window_rule) {
        case 1: sliding = 1; break;
        case 2: sliding = (i + 1) % 2 != 0; break;
        case 3: sliding = (i + 1) % pattern != 0; break;
        case 4: sliding = use && i >= mwl; break;
        }
        c->window[i] = sliding ? win : 0;
    }
    return GP_OK;
}

/* Gemma3ForConditionalGeneration (multimodal): the language model's settings are under "text_config" and are read as
 * a Gemma3ForCausalLM's; *text is that object, *fam its family.  0 when root is another architecture. */
static int conditional(const gp_jobj *root, gp_config *c, gp_jobj *text, char *buf, size_t cap, const family **fam,
                       gp_status *s) {
    const cJSON *archs = gp_json_get(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a0) || strcmp(a0->valuestring, "Gemma3ForConditionalGeneration")) return 0;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", a0->valuestring);
    c->multimodal = 1;
    *fam = find_family("Gemma3ForCausalLM");
    *s = gp_json_obj(root, "text_config", text, buf, cap);
    if (!*s && !text->o)
        *s = gp_set_error(GP_ERR_MISSING, "%s: field 'text_config' is missing (Gemma3ForConditionalGeneration keeps "
                          "the language model's settings there)", root->path);
    const char *mt = "";
    if (!*s) *s = gp_json_str(text, "model_type", &mt);
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    return 1;
}

static gp_status parse(const gp_jobj *root, gp_config *c) {
    const family *fam = NULL;
    gp_status s = GP_OK;
    char buf[32];
    gp_jobj text;
    const gp_jobj *o = root;
    if (conditional(root, c, &text, buf, sizeof buf, &fam, &s)) {
        if (s) return s;
        o = &text;
    } else if ((s = parse_family(o, c, &fam))) return s;
    if ((s = parse_sizes(o, c))) return s;
    if ((s = parse_arch(o, fam, c))) return s;
    if ((s = parse_ropes(o, fam, c))) return s;
    if ((s = parse_windows(o, fam, c))) return s;
    /* special ids: token ids of this vocabulary */
    c->bos_id = -1;
    c->n_eos = 0;
    if ((s = gp_json_i32(o, "bos_token_id", 0, c->n_vocab - 1, &c->bos_id))) return s;
    if ((s = gp_json_ids(o, "eos_token_id", c->n_vocab - 1, c->eos_ids, GP_MAX_EOS, &c->n_eos))) return s;
    if (o != root) { /* a multimodal config's top-level ids and tying override text_config's */
        if ((s = gp_json_i32(root, "bos_token_id", 0, c->n_vocab - 1, &c->bos_id))) return s;
        if ((s = gp_json_ids(root, "eos_token_id", c->n_vocab - 1, c->eos_ids, GP_MAX_EOS, &c->n_eos))) return s;
        if (gp_json_has(root, "tie_word_embeddings") && (s = gp_json_bool(root, "tie_word_embeddings",
                                                                          &c->tie_word_embeddings)))
            return s;
    }
    return gp_quant_parse(root, &c->quant);
}

gp_status gp_config_parse(const char *path, const char *text, gp_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root;
    gp_status s = gp_json_parse(path, text, text ? strlen(text) : 0, GP_JSON_CONFIG_TREE, GP_JSON_NO_DUP_KEYS, &root);
    if (s) return s;
    gp_jobj o = gp_jobj_root(path, root);
    s = cJSON_IsObject(root) ? parse(&o, cfg) : gp_set_error(GP_ERR_FORMAT, "%s: top level must be a JSON object", path);
    cJSON_Delete(root);
    if (s) gp_config_free(cfg);
    return s;
}

gp_status gp_config_load(const char *path, gp_config *cfg) {
    char *text;
    memset(cfg, 0, sizeof *cfg);
    gp_status s = gp_read_file(path, GP_JSON_CONFIG_BYTES, &text, NULL);
    if (s) return s;
    s = gp_config_parse(path, text, cfg);
    free(text);
    return s;
}

gp_status gp_ctx_params_check(const gp_ctx_params *p) {
    const struct {
        const char *name;
        int32_t v, hi;
    } f[] = {{"n_ctx", p->n_ctx, GP_MAX_CTX},
             {"max_kv_size", p->max_kv_size, GP_MAX_CTX},
             {"prefill_chunk", p->prefill_chunk, GP_MAX_CTX},
             {"keep", p->keep, GP_MAX_CTX},
             {"quantized_kv_start", p->quantized_kv_start, GP_MAX_CTX},
             {"n_threads", p->n_threads, 4096}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 0 || f[i].v > f[i].hi)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: field '%s' = %d must be in [0, %d]", f[i].name,
                                (int)f[i].v, (int)f[i].hi);
    if (p->kv_bits != 0 && p->kv_bits != 4 && p->kv_bits != 8 && p->kv_bits != 16 && p->kv_bits != 32)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: field 'kv_bits' = %d must be 0, 4, 8, 16 or 32",
                            (int)p->kv_bits);
    if (p->kv_group_size != 0 && p->kv_group_size != 32 && p->kv_group_size != 64 && p->kv_group_size != 128)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: field 'kv_group_size' = %d must be 0, 32, 64 or 128",
                            (int)p->kv_group_size);
    return GP_OK;
}

void gp_config_free(gp_config *cfg) {
    if (!cfg) return;
    free(cfg->window);
    cfg->window = NULL;
    gp_quant_free(&cfg->quant);
}

void gp_rope_inv_freq(const gp_rope *r, int32_t head_dim, float *inv_freq) {
    int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        /* torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32 */
        float e = (float)(2 * i) / (float)head_dim;
        float f = 1.0f / powf((float)r->theta, e);
        if (r->type == GP_ROPE_LINEAR) f = f / (float)r->factor;
        if (r->type == GP_ROPE_LLAMA3) {
            float factor = (float)r->factor, lo = (float)r->low_freq_factor, hi = (float)r->high_freq_factor;
            float old = (float)r->orig_max_pos;
            float low_wavelen = old / lo, high_wavelen = old / hi;
            float wavelen = 2.0f * (float)M_PI / f;
            float g = wavelen > low_wavelen ? f / factor : f;
            float smooth = (old / wavelen - lo) / (hi - lo);
            float smoothed = (1.0f - smooth) * g / factor + smooth * g;
            int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            f = medium ? smoothed : g;
        }
        inv_freq[i] = f;
    }
}
