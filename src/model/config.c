/* config.c — reads config.json (transformers-4 layout: rope_theta/rope_scaling/torch_dtype; transformers-5 layout:
 * rope_parameters, possibly per layer type, dtype) into gp_config, filling the architecture descriptor from the
 * family's table and checking every size before anything is allocated from it. */
#include "model/config.h"
#include "util/util.h"

#include <cJSON.h>
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

/* Reads an integer field; absent or null → *out = def.  Returns GP_OK or GP_ERR_FORMAT. */
static gp_status get_int(const char *path, const cJSON *o, const char *key, int64_t def, int64_t lo, int64_t hi,
                         int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return GP_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' must be an integer", path, key);
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' = %.0f is outside [%lld, %lld]", path, key, v->valuedouble,
                            (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return GP_OK;
}

static gp_status get_num(const char *path, const cJSON *o, const char *key, double def, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return GP_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' must be a finite number", path, key);
    *out = v->valuedouble;
    return GP_OK;
}

/* Reads a required positive integer. */
static gp_status need_int(const char *path, const cJSON *o, const char *key, int64_t hi, int32_t *out) {
    int64_t v;
    gp_status s = get_int(path, o, key, -1, INT64_MIN / 2, INT64_MAX / 2, &v);
    if (s) return s;
    if (v == -1 && !cJSON_GetObjectItemCaseSensitive(o, key))
        return gp_set_error(GP_ERR_MISSING, "%s: required field '%s' is missing", path, key);
    if (v <= 0) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' = %lld must be positive", path, key, (long long)v);
    if (v > hi)
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' = %lld is absurd (limit %lld)", path, key, (long long)v,
                            (long long)hi);
    *out = (int32_t)v;
    return GP_OK;
}

/* Parses one rope parameter object (v5 rope_parameters entry or v4 rope_scaling) onto *r. */
static gp_status parse_rope(const char *path, const char *field, const cJSON *o, gp_rope *r) {
    if (!o || cJSON_IsNull(o)) return GP_OK;
    if (!cJSON_IsObject(o)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s' must be an object", path, field);
    gp_status s;
    if ((s = get_num(path, o, "rope_theta", r->theta, &r->theta))) return s;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (t && !cJSON_IsString(t))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.rope_type' must be a string", path, field);
    const char *ty = t ? t->valuestring : "default";
    if (!strcmp(ty, "default")) r->type = GP_ROPE_DEFAULT;
    else if (!strcmp(ty, "linear")) r->type = GP_ROPE_LINEAR;
    else if (!strcmp(ty, "llama3")) r->type = GP_ROPE_LLAMA3;
    else
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s.rope_type' = '%s' is not supported (default, linear, llama3)",
                            path, field, ty);
    if ((s = get_num(path, o, "factor", 1.0, &r->factor))) return s;
    if ((s = get_num(path, o, "low_freq_factor", 1.0, &r->low_freq_factor))) return s;
    if ((s = get_num(path, o, "high_freq_factor", 4.0, &r->high_freq_factor))) return s;
    if ((s = get_num(path, o, "original_max_position_embeddings", 8192, &r->orig_max_pos))) return s;
    if (r->type != GP_ROPE_DEFAULT && !(r->factor > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.factor' must be positive", path, field);
    if (r->type == GP_ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor && r->low_freq_factor > 0 &&
                                       r->orig_max_pos > 0))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s': llama3 needs 0 < low_freq_factor < high_freq_factor", path,
                            field);
    if (!(r->theta > 0)) return gp_set_error(GP_ERR_FORMAT, "%s: field '%s.rope_theta' must be positive", path, field);
    return GP_OK;
}

/* eos_token_id: an integer or a list of integers. */
static gp_status parse_eos(const char *path, const cJSON *o, gp_config *c) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
    c->n_eos = 0;
    if (!e || cJSON_IsNull(e)) return GP_OK;
    if (cJSON_IsNumber(e)) {
        c->eos_ids[c->n_eos++] = (int32_t)e->valuedouble;
        return GP_OK;
    }
    if (!cJSON_IsArray(e)) return gp_set_error(GP_ERR_FORMAT, "%s: field 'eos_token_id' must be an int or a list", path);
    const cJSON *x;
    cJSON_ArrayForEach(x, e) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'eos_token_id' holds a non-id", path);
        if (c->n_eos == GP_MAX_EOS)
            return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'eos_token_id' has more than %d ids", path, GP_MAX_EOS);
        c->eos_ids[c->n_eos++] = (int32_t)x->valuedouble;
    }
    return GP_OK;
}

static gp_status parse(const char *path, const cJSON *o, gp_config *c) {
    gp_status s;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(o, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!a0 || !cJSON_IsString(a0))
        return gp_set_error(GP_ERR_MISSING, "%s: field 'architectures' is missing or not a list of strings", path);
    snprintf(c->arch_name, sizeof c->arch_name, "%s", a0->valuestring);
    const family *fam = find_family(a0->valuestring);
    if (!fam)
        return gp_set_error(GP_ERR_UNSUPPORTED,
                            "%s: field 'architectures': '%s' is not supported (LlamaForCausalLM, MistralForCausalLM, "
                            "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM)",
                            path, a0->valuestring);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    snprintf(c->model_type, sizeof c->model_type, "%s", cJSON_IsString(mt) ? mt->valuestring : "");

    if ((s = need_int(path, o, "vocab_size", 1 << 24, &c->n_vocab))) return s;
    if ((s = need_int(path, o, "hidden_size", 1 << 17, &c->n_embd))) return s;
    if ((s = need_int(path, o, "num_hidden_layers", GP_MAX_LAYERS, &c->n_layers))) return s;
    if ((s = need_int(path, o, "num_attention_heads", 4096, &c->n_heads))) return s;
    if ((s = need_int(path, o, "intermediate_size", 1 << 20, &c->n_ff))) return s;
    int64_t v;
    if ((s = get_int(path, o, "num_key_value_heads", c->n_heads, 1, 4096, &v))) return s;
    c->n_kv_heads = (int32_t)v;
    if (c->n_heads % c->n_kv_heads)
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'num_key_value_heads' = %d does not divide num_attention_heads = %d",
                            path, c->n_kv_heads, c->n_heads);
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(o, "head_dim");
    if (hd && !cJSON_IsNull(hd)) {
        if ((s = need_int(path, o, "head_dim", 1 << 14, &c->head_dim))) return s;
    } else {
        if (c->n_embd % c->n_heads)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'hidden_size' = %d is not divisible by num_attention_heads = %d",
                                path, c->n_embd, c->n_heads);
        c->head_dim = c->n_embd / c->n_heads;
    }
    if (c->head_dim % 2) return gp_set_error(GP_ERR_FORMAT, "%s: field 'head_dim' = %d must be even", path, c->head_dim);
    if ((s = get_int(path, o, "max_position_embeddings", 2048, 1, 1 << 24, &v))) return s;
    c->n_ctx_train = (int32_t)v;
    double eps;
    if ((s = get_num(path, o, "rms_norm_eps", 1e-6, &eps))) return s;
    if (!(eps > 0 && eps < 1)) return gp_set_error(GP_ERR_FORMAT, "%s: field 'rms_norm_eps' must be in (0, 1)", path);
    c->norm_eps = (float)eps;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(o, "tie_word_embeddings");
    c->tie_word_embeddings = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : -1;

    /* architecture descriptor */
    gp_arch *ar = &c->arch;
    ar->norm_plus_one = fam->norm_plus_one;
    ar->qk_norm = fam->qk_norm;
    ar->sandwich_norms = fam->sandwich_norms;
    ar->scale_embeddings = fam->scale_embeddings;
    ar->act = fam->act;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(o, "hidden_activation");
    if (!act || cJSON_IsNull(act)) act = cJSON_GetObjectItemCaseSensitive(o, "hidden_act");
    if (act && cJSON_IsString(act)) {
        const char *n = act->valuestring;
        if (!strcmp(n, "silu") || !strcmp(n, "swish")) ar->act = GP_ACT_SILU;
        else if (!strcmp(n, "gelu_pytorch_tanh") || !strcmp(n, "gelu_tanh")) ar->act = GP_ACT_GELU_TANH;
        else return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'hidden_act' = '%s' is not supported", path, n);
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(o, "attention_bias");
    int attn_bias = cJSON_IsTrue(ab);
    ar->qkv_bias = fam->qkv_bias || attn_bias;
    ar->o_bias = attn_bias;
    ar->mlp_bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "mlp_bias"));
    double cap;
    if ((s = get_num(path, o, "attn_logit_softcapping", 0, &cap))) return s;
    ar->attn_softcap = (float)cap;
    if ((s = get_num(path, o, "final_logit_softcapping", 0, &cap))) return s;
    ar->final_softcap = (float)cap;
    double qpas;
    if ((s = get_num(path, o, "query_pre_attn_scalar", 0, &qpas))) return s;
    if (qpas < 0) return gp_set_error(GP_ERR_FORMAT, "%s: field 'query_pre_attn_scalar' must be positive", path);
    ar->attn_scale = (float)pow(qpas > 0 ? qpas : (double)c->head_dim, -0.5);

    /* rope: v4 rope_theta + rope_scaling (+ Gemma3's rope_local_base_freq); v5 rope_parameters, flat or per type */
    double theta;
    if ((s = get_num(path, o, "rope_theta", 10000.0, &theta))) return s;
    c->rope_full = (gp_rope){GP_ROPE_DEFAULT, theta, 1, 1, 4, 8192};
    double local;
    if ((s = get_num(path, o, "rope_local_base_freq", 10000.0, &local))) return s;
    c->rope_sliding = (gp_rope){GP_ROPE_DEFAULT, fam->window_rule == 3 ? local : theta, 1, 1, 4, 8192};
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    if (rp && cJSON_IsObject(rp)) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        const cJSON *slid = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (full || slid) {
            if ((s = parse_rope(path, "rope_parameters.full_attention", full, &c->rope_full))) return s;
            if ((s = parse_rope(path, "rope_parameters.sliding_attention", slid, &c->rope_sliding))) return s;
        } else {
            if ((s = parse_rope(path, "rope_parameters", rp, &c->rope_full))) return s;
            c->rope_sliding = c->rope_full;
        }
    } else {
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
        if ((s = parse_rope(path, "rope_scaling", rs, &c->rope_full))) return s;
        if (fam->window_rule != 3) c->rope_sliding = c->rope_full; /* Gemma3 scales only global layers */
    }

    /* per-layer sliding windows */
    c->window = gp_calloc((size_t)c->n_layers, sizeof *c->window);
    if (!c->window) return GP_ERR_NOMEM;
    int64_t win;
    if ((s = get_int(path, o, "sliding_window", 0, 0, INT32_MAX, &win))) return s;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(o, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
            return gp_set_error(GP_ERR_FORMAT, "%s: field 'layer_types' must list num_hidden_layers = %d entries", path,
                                c->n_layers);
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, lt) {
            if (!cJSON_IsString(x))
                return gp_set_error(GP_ERR_FORMAT, "%s: field 'layer_types[%d]' must be a string", path, i);
            if (!strcmp(x->valuestring, "sliding_attention")) {
                if (win <= 0)
                    return gp_set_error(GP_ERR_FORMAT, "%s: field 'sliding_window' must be set for sliding layers", path);
                c->window[i] = (int32_t)win;
            } else if (strcmp(x->valuestring, "full_attention"))
                return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'layer_types[%d]' = '%s' is not supported", path, i,
                                    x->valuestring);
            i++;
        }
    } else if (win > 0) {
        int64_t pattern = 0, mwl = 0;
        if ((s = get_int(path, o, "sliding_window_pattern", 6, 1, GP_MAX_LAYERS, &pattern))) return s;
        if ((s = get_int(path, o, "max_window_layers", 0, 0, INT32_MAX, &mwl))) return s;
        int use = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "use_sliding_window"));
        for (int i = 0; i < c->n_layers; i++) {
            int sliding = 0;
            switch (fam->window_rule) {
            case 1: sliding = 1; break;
            case 2: sliding = (i + 1) % 2 != 0; break;
            case 3: sliding = (i + 1) % pattern != 0; break;
            case 4: sliding = use && i >= mwl; break;
            }
            c->window[i] = sliding ? (int32_t)win : 0;
        }
    }

    if ((s = get_int(path, o, "bos_token_id", -1, -1, INT32_MAX, &v))) return s;
    c->bos_id = (int32_t)v;
    return parse_eos(path, o, c);
}

gp_status gp_config_parse(const char *path, const char *text, gp_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_Parse(text);
    if (!root) return gp_set_error(GP_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", path,
                                   (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
    gp_status s = cJSON_IsObject(root) ? parse(path, root, cfg)
                                       : gp_set_error(GP_ERR_FORMAT, "%s: top level must be a JSON object", path);
    cJSON_Delete(root);
    if (s) gp_config_free(cfg);
    return s;
}

gp_status gp_config_load(const char *path, gp_config *cfg) {
    char *text;
    memset(cfg, 0, sizeof *cfg);
    gp_status s = gp_read_file(path, 16u << 20, &text, NULL);
    if (s) return s;
    s = gp_config_parse(path, text, cfg);
    free(text);
    return s;
}

void gp_config_free(gp_config *cfg) {
    if (!cfg) return;
    free(cfg->window);
    cfg->window = NULL;
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
