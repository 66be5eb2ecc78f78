/* model.c — gp_model_load: reads config.json and generation_config.json, maps the safetensors weights, binds every
 * tensor the architecture needs (checking name, dtype and shape), loads the tokenizer.  All or nothing: on any
 * error everything is released and the message names the file and the field or tensor. */
#include "model/model.h"
#include "model/gen_config.h"
#include "util/util.h"

#include <cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

gp_model_params gp_model_default_params(void) {
    gp_model_params p = {0};
    p.load_tokenizer = 1;
    return p;
}

/* ---- the weight list ---- */

/* Dimensions a table entry refers to. */
enum { D_NONE, D_EMBD, D_Q, D_KV, D_HEAD, D_FF, D_VOCAB };
/* When an entry is bound: always, or under one of the architecture's flags (required then), or optionally. */
enum { W_ALWAYS, W_QKV_BIAS, W_O_BIAS, W_MLP_BIAS, W_QK_NORM, W_SANDWICH, W_PLAIN };

typedef struct wt_entry {
    const char *key;     /* checkpoint key under model.layers.{i}. (per layer) or the full key (global) */
    size_t off;          /* offset of the gp_wt in gp_layer / gp_model */
    uint8_t rows, cols;  /* D_*: cols D_NONE = a vector of `rows` */
    uint8_t when;        /* W_* */
} wt_entry;

#define LW(f) offsetof(gp_layer, f)
/* Every per-layer tensor, in checkpoint order: binding, unbinding and gp_model_decode_bytes iterate this list. */
static const wt_entry LAYER_WEIGHTS[] = {
    {"input_layernorm.weight", LW(attn_norm), D_EMBD, D_NONE, W_ALWAYS},
    {"self_attn.q_proj.weight", LW(q.w), D_Q, D_EMBD, W_ALWAYS},
    {"self_attn.k_proj.weight", LW(k.w), D_KV, D_EMBD, W_ALWAYS},
    {"self_attn.v_proj.weight", LW(v.w), D_KV, D_EMBD, W_ALWAYS},
    {"self_attn.o_proj.weight", LW(o.w), D_EMBD, D_Q, W_ALWAYS},
    {"self_attn.q_proj.bias", LW(q.bias), D_Q, D_NONE, W_QKV_BIAS},
    {"self_attn.k_proj.bias", LW(k.bias), D_KV, D_NONE, W_QKV_BIAS},
    {"self_attn.v_proj.bias", LW(v.bias), D_KV, D_NONE, W_QKV_BIAS},
    {"self_attn.o_proj.bias", LW(o.bias), D_EMBD, D_NONE, W_O_BIAS},
    {"self_attn.q_norm.weight", LW(q_norm), D_HEAD, D_NONE, W_QK_NORM},
    {"self_attn.k_norm.weight", LW(k_norm), D_HEAD, D_NONE, W_QK_NORM},
    {"post_attention_layernorm.weight", LW(attn_post_norm), D_EMBD, D_NONE, W_SANDWICH},
    {"pre_feedforward_layernorm.weight", LW(ffn_norm), D_EMBD, D_NONE, W_SANDWICH},
    {"post_feedforward_layernorm.weight", LW(ffn_post_norm), D_EMBD, D_NONE, W_SANDWICH},
    {"post_attention_layernorm.weight", LW(ffn_norm), D_EMBD, D_NONE, W_PLAIN},
    {"mlp.gate_proj.weight", LW(gate.w), D_FF, D_EMBD, W_ALWAYS},
    {"mlp.up_proj.weight", LW(up.w), D_FF, D_EMBD, W_ALWAYS},
    {"mlp.down_proj.weight", LW(down.w), D_EMBD, D_FF, W_ALWAYS},
    {"mlp.gate_proj.bias", LW(gate.bias), D_FF, D_NONE, W_MLP_BIAS},
    {"mlp.up_proj.bias", LW(up.bias), D_FF, D_NONE, W_MLP_BIAS},
    {"mlp.down_proj.bias", LW(down.bias), D_EMBD, D_NONE, W_MLP_BIAS},
};
#undef LW
#define N_LAYER_WEIGHTS (sizeof LAYER_WEIGHTS / sizeof LAYER_WEIGHTS[0])

/* The model-level tensors (lm_head is bound separately: it may be tied to the embeddings). */
static const wt_entry MODEL_WEIGHTS[] = {
    {"model.embed_tokens.weight", offsetof(gp_model, tok_embd), D_VOCAB, D_EMBD, W_ALWAYS},
    {"model.norm.weight", offsetof(gp_model, out_norm), D_EMBD, D_NONE, W_ALWAYS},
};
#define N_MODEL_WEIGHTS (sizeof MODEL_WEIGHTS / sizeof MODEL_WEIGHTS[0])

static int64_t dim(const gp_config *c, int d) {
    switch (d) {
    case D_EMBD: return c->n_embd;
    case D_Q: return (int64_t)c->n_heads * c->head_dim;
    case D_KV: return (int64_t)c->n_kv_heads * c->head_dim;
    case D_HEAD: return c->head_dim;
    case D_FF: return c->n_ff;
    case D_VOCAB: return c->n_vocab;
    default: return 0;
    }
}

/* 1 when entry e applies to this architecture; *required says whether an absent tensor is an error. */
static int applies(const gp_arch *a, const wt_entry *e, int *required) {
    *required = 1;
    switch (e->when) {
    case W_QKV_BIAS: return a->qkv_bias;
    case W_O_BIAS: return a->o_bias;
    case W_MLP_BIAS: return a->mlp_bias;
    case W_QK_NORM: return a->qk_norm;
    case W_SANDWICH: return a->sandwich_norms;
    case W_PLAIN: return !a->sandwich_norms;
    default: return 1;
    }
}

/* Binds tensor `name` to *w through the model's backend after checking dtype and shape [rows, cols] (cols = 0: a
 * vector of rows).  required = 0: an absent tensor leaves w->data NULL. */
/* The checkpoint's name of canonical tensor `canon` ("model.layers.0....", "lm_head.weight"): a multimodal Gemma 3
 * nests the language model under "model.language_model." (transformers 5) or "language_model." (transformers 4,
 * mlx-vlm / mlx-community). */
const char *gp_model_tensor_name(const gp_model *m, const char *canon, char *buf, size_t cap) {
    if (m->layout == GP_LAYOUT_V5 && !strncmp(canon, "model.", 6))
        snprintf(buf, cap, "model.language_model.%s", canon + 6);
    else if (m->layout == GP_LAYOUT_LEGACY) snprintf(buf, cap, "language_model.%s", canon);
    else return canon;
    return buf;
}

/* Which nesting a multimodal checkpoint uses (the embedding's name tells); plain models keep GP_LAYOUT_PLAIN. */
static gp_status detect_layout(gp_model *m) {
    if (!m->cfg.multimodal) return GP_OK;
    if (gp_st_find(m->st, "model.language_model.embed_tokens.weight")) m->layout = GP_LAYOUT_V5;
    else if (gp_st_find(m->st, "language_model.model.embed_tokens.weight")) m->layout = GP_LAYOUT_LEGACY;
    else
        return gp_set_error(GP_ERR_MISSING, "%s: %s: no language model embedding (looked for "
                            "'model.language_model.embed_tokens.weight' and 'language_model.model.embed_tokens.weight')",
                            m->dir, m->cfg.arch_name);
    return GP_OK;
}

static gp_status bind(gp_model *m, gp_wt *w, const char *canon, int64_t rows, int64_t cols, int required) {
    char nbuf[320];
    const char *name = gp_model_tensor_name(m, canon, nbuf, sizeof nbuf);
    const gp_tensor_view *t = gp_st_find(m->st, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return GP_OK;
        return gp_set_error(GP_ERR_MISSING, "%s: tensor '%s' is missing (%s needs it)", m->dir, name,
                            m->cfg.arch_name);
    }
    if (t->dtype == GP_DTYPE_U32 && cols) {
        gp_wt view;
        gp_status s = gp_quant_view(m->st, &m->cfg.quant, name, t, rows, cols, &view);
        return s ? s : m->be->ops->bind_weight(m->be, &view, w);
    }
    const int fmt = gp_wfmt_of_dtype(t->dtype);
    if (fmt < 0)
        return gp_set_error(GP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype %s is not supported (F32, BF16, F16; U32 for MLX-quantized weights)",
                            t->file,
                            name, gp_dtype_name(t->dtype));
    int ok = cols ? (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols) : (t->ndim == 1 && t->shape[0] == rows);
    if (!ok) {
        char got[128] = "";
        size_t k = 0;
        for (int i = 0; i < t->ndim && k < sizeof got - 24; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (cols)
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': shape [%s], config.json implies [%lld, %lld]", t->file,
                                name, got, (long long)rows, (long long)cols);
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': shape [%s], config.json implies [%lld]", t->file, name, got,
                            (long long)rows);
    }
    const gp_wt view = gp_wt_dense((gp_wfmt)fmt, t->data, cols ? rows : 1, cols ? cols : rows);
    return m->be->ops->bind_weight(m->be, &view, w);
}

/* Binds the table entries of one object (a layer: prefix "model.layers.{i}.", or the model: prefix ""). */
static gp_status bind_entries(gp_model *m, void *obj, const wt_entry *tab, size_t n, const char *prefix) {
    char name[256];
    for (size_t i = 0; i < n; i++) {
        int req;
        if (!applies(&m->cfg.arch, &tab[i], &req)) continue;
        snprintf(name, sizeof name, "%s%s", prefix, tab[i].key);
        gp_status s = bind(m, (gp_wt *)((char *)obj + tab[i].off), name, dim(&m->cfg, tab[i].rows),
                           dim(&m->cfg, tab[i].cols), req);
        if (s) return s;
    }
    return GP_OK;
}

static gp_status bind_layer(gp_model *m, int i) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "model.layers.%d.", i);
    return bind_entries(m, &m->layers[i], LAYER_WEIGHTS, N_LAYER_WEIGHTS, prefix);
}

/* Calls fn on every bound weight of the model that the table lists (each once; a tied lm_head is tok_embd). */
static void each_weight(gp_model *m, void (*fn)(gp_model *m, gp_wt *w, void *ud), void *ud) {
    for (size_t i = 0; i < N_MODEL_WEIGHTS; i++) fn(m, (gp_wt *)((char *)m + MODEL_WEIGHTS[i].off), ud);
    if (!m->lm_head_tied) fn(m, &m->lm_head.w, ud);
    for (int32_t l = 0; m->layers && l < m->cfg.n_layers; l++) {
        int req;
        for (size_t i = 0; i < N_LAYER_WEIGHTS; i++)
            if (applies(&m->cfg.arch, &LAYER_WEIGHTS[i], &req))
                fn(m, (gp_wt *)((char *)&m->layers[l] + LAYER_WEIGHTS[i].off), ud);
    }
}

/* transformers' defaults < generation_config.json (parsed once, with its EOS ids overriding config.json's) and the
 * BOS id (generation_config.json, else config.json); every id is checked against the vocabulary. */
static gp_status read_generation_config(gp_model *m) {
    m->gen = gp_gen_config_default();
    m->gen.n_eos = m->cfg.n_eos;
    memcpy(m->gen.eos_ids, m->cfg.eos_ids, sizeof m->gen.eos_ids);
    m->gen_bos = m->cfg.bos_id;
    char *path = gp_path_join(m->dir, "generation_config.json");
    if (!path) return GP_ERR_NOMEM;
    if (!gp_file_exists(path)) {
        free(path);
        return GP_OK;
    }
    m->gen_config_path = path;
    return gp_gen_config_load_json(&m->gen, path, m->cfg.n_vocab, &m->gen_bos);
}

/* config.json must be a regular file: say what it is when it is not (absent, a FIFO — which would block a read —,
 * a directory, a symlink loop or a dangling link). */
static gp_status check_config_path(const char *dir, const char *path) {
    struct stat st, lst;
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode)) return GP_OK;
        const char *what = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory"
                           : S_ISSOCK(st.st_mode) ? "a socket" : "a device";
        return gp_set_error(GP_ERR_IO, "%s: is %s, not a regular file", path, what);
    }
    int err = errno;
    if (err == ENOENT && lstat(path, &lst) == 0)
        return gp_set_error(GP_ERR_IO, "%s: is a symbolic link to a file that does not exist", path);
    if (err == ENOENT || err == ENOTDIR)
        return gp_set_error(GP_ERR_MISSING, "%s: no config.json in the model folder", dir);
    return gp_set_error(GP_ERR_IO, "%s: cannot be read: %s", path, strerror(err));
}

static void progress(const gp_model_params *p, float f) {
    if (p && p->progress) p->progress(f, p->progress_user_data);
}

gp_status gp_model_load(const char *dir, const gp_model_params *params, gp_model **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_load: out is NULL");
    *out = NULL;
    if (!dir) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_load: dir is NULL");
    gp_model_params defaults = gp_model_default_params();
    if (!params) params = &defaults;
    gp_model *m = gp_calloc(1, sizeof *m);
    if (!m) return GP_ERR_NOMEM;
    gp_status s = GP_ERR_NOMEM;
    pthread_mutex_init(&m->fp_lock, NULL);
    if ((s = gp_backend_cpu_init(NULL, &m->be))) goto fail;
    s = GP_ERR_NOMEM;
    if (!(m->dir = gp_strdup(dir))) goto fail;
    char *cfg_path = gp_path_join(dir, "config.json");
    if (!cfg_path) goto fail;
    if ((s = check_config_path(dir, cfg_path))) {
        free(cfg_path);
        goto fail;
    }
    s = gp_config_load(cfg_path, &m->cfg);
    free(cfg_path);
    if (s) goto fail;
    progress(params, 0.05f);
    if ((s = read_generation_config(m))) goto fail;
    if ((s = gp_st_open_dir(dir, &m->st))) goto fail;
    if ((s = detect_layout(m))) goto fail;
    progress(params, 0.3f);

    const gp_config *c = &m->cfg;
    if ((s = bind_entries(m, m, MODEL_WEIGHTS, N_MODEL_WEIGHTS, ""))) goto fail;
    int tied = c->tie_word_embeddings;
    if (tied != 1 && (s = bind(m, &m->lm_head.w, "lm_head.weight", c->n_vocab, c->n_embd, tied == 0))) goto fail;
    if (!m->lm_head.w.data) {
        m->lm_head.w = m->tok_embd;
        m->lm_head_tied = 1;
    }
    s = GP_ERR_NOMEM;
    if (!(m->layers = gp_calloc((size_t)c->n_layers, sizeof *m->layers))) goto fail;
    for (int i = 0; i < c->n_layers; i++) {
        if ((s = bind_layer(m, i))) goto fail;
        progress(params, 0.3f + 0.5f * (float)(i + 1) / (float)c->n_layers);
    }
    s = GP_ERR_NOMEM;
    if (!(m->inv_freq_full = gp_malloc((size_t)c->head_dim / 2, sizeof(float)))) goto fail;
    if (!(m->inv_freq_sliding = gp_malloc((size_t)c->head_dim / 2, sizeof(float)))) goto fail;
    gp_rope_inv_freq(&c->rope_full, c->head_dim, m->inv_freq_full);
    gp_rope_inv_freq(&c->rope_sliding, c->head_dim, m->inv_freq_sliding);
    m->host = (gp_bound){m->be, m->tok_embd, m->out_norm, m->lm_head, m->layers, m->inv_freq_full,
                         m->inv_freq_sliding, 0};

    if (params->load_tokenizer) {
        char *tp = gp_path_join(dir, "tokenizer.json");
        if (!tp) goto fail;
        int has = gp_file_exists(tp);
        free(tp);
        if (has && (s = gp_tokenizer_load_dir(dir, &m->tok))) goto fail;
    }
    progress(params, 1.0f);
    *out = m;
    return GP_OK;
fail:
    gp_model_free(m);
    return s;
}

static void unbind_one(gp_model *m, gp_wt *w, void *ud) {
    if (w->data) m->be->ops->unbind_weight(m->be, w);
}

/* ---- the weights on a device ---- */

/* Calls fn(src, dst) on every weight of the host binding and its place in b (each once; a tied lm_head is
 * tok_embd). */
static gp_status each_pair(const gp_model *m, gp_bound *b, gp_status (*fn)(gp_bound *b, const gp_wt *src, gp_wt *dst)) {
    gp_status s = fn(b, &m->tok_embd, &b->tok_embd);
    if (!s) s = fn(b, &m->out_norm, &b->out_norm);
    if (!s && !m->lm_head_tied) s = fn(b, &m->lm_head.w, &b->lm_head.w);
    for (int32_t l = 0; l < m->cfg.n_layers && !s && b->layers; l++) {
        int req;
        for (size_t i = 0; i < N_LAYER_WEIGHTS && !s; i++)
            if (applies(&m->cfg.arch, &LAYER_WEIGHTS[i], &req))
                s = fn(b, (const gp_wt *)((const char *)&m->layers[l] + LAYER_WEIGHTS[i].off),
                       (gp_wt *)((char *)&b->layers[l] + LAYER_WEIGHTS[i].off));
    }
    return s;
}

static gp_status bind_pair(gp_bound *b, const gp_wt *src, gp_wt *dst) {
    if (!src->data) return GP_OK;
    gp_status s = b->be->ops->bind_weight(b->be, src, dst);
    if (!s) b->bytes += gp_wt_bytes(src);
    return s;
}

static gp_status unbind_pair(gp_bound *b, const gp_wt *src, gp_wt *dst) {
    if (dst->data) b->be->ops->unbind_weight(b->be, dst);
    return GP_OK;
}

static gp_status count_pair(gp_bound *b, const gp_wt *src, gp_wt *dst) {
    b->bytes += gp_wt_bytes(src);
    return GP_OK;
}

static void bound_free(gp_model *m, gp_bound *b) {
    if (!b) return;
    if (b->be) {
        each_pair(m, b, unbind_pair);
        b->be->ops->dealloc(b->be, (void *)b->inv_freq_full);
        b->be->ops->dealloc(b->be, (void *)b->inv_freq_sliding);
    }
    gp_backend_free(b->be);
    free(b->layers);
    free(b);
}

/* The rope tables of b in its backend's memory. */
static gp_status bind_rope(const gp_model *m, gp_bound *b) {
    const size_t bytes = (size_t)m->cfg.head_dim / 2 * sizeof(float);
    float *f = b->be->ops->alloc(b->be, bytes), *sl = b->be->ops->alloc(b->be, bytes);
    b->inv_freq_full = f;
    b->inv_freq_sliding = sl;
    if (!f || !sl) return gp_set_error(GP_ERR_NOMEM, "%s: device %s: out of memory for the rope tables", m->dir,
                                       b->be->name);
    b->be->ops->upload(b->be, f, m->inv_freq_full, bytes);
    b->be->ops->upload(b->be, sl, m->inv_freq_sliding, bytes);
    return GP_OK;
}

/* A new binding of m's weights on the CUDA device: refused before anything is copied when they do not fit. */
static gp_status bind_device(const gp_model *m, gp_bound **out) {
    gp_bound *b = gp_calloc(1, sizeof *b);
    if (!b) return GP_ERR_NOMEM;
    gp_status s = gp_backend_cuda_init(0, &b->be);
    if (!s && !(b->layers = gp_calloc((size_t)m->cfg.n_layers, sizeof *b->layers))) s = GP_ERR_NOMEM;
    uint64_t total = 0, free_b = s ? 0 : b->be->ops->mem_free ? b->be->ops->mem_free(b->be, &total) : UINT64_MAX;
    if (!s) each_pair(m, b, count_pair);
    if (!s && b->bytes + (256u << 20) > free_b)
        s = gp_set_error(GP_ERR_NOMEM, "%s: device %s: the weights need %.2f GB, the device has %.2f of %.2f GB free",
                         m->dir, b->be->name, (double)b->bytes / 1e9, (double)free_b / 1e9, (double)total / 1e9);
    b->bytes = 0;
    if (!s) s = each_pair(m, b, bind_pair);
    if (!s) s = bind_rope(m, b);
    if (s) {
        bound_free((gp_model *)m, b);
        return s;
    }
    b->lm_head.w = m->lm_head_tied ? b->tok_embd : b->lm_head.w; /* the head has no bias and no LoRA terms */
    *out = b;
    return GP_OK;
}

gp_status gp_model_bound(const gp_model *cm, int32_t device, const gp_bound **out) {
    gp_model *m = (gp_model *)cm; /* the device copy is a lazily built, immutable property of the model */
    *out = NULL;
    if (device == GP_DEVICE_CPU) {
        *out = &m->host;
        return GP_OK;
    }
    gp_status s = GP_OK;
    pthread_mutex_lock(&m->fp_lock);
    if (!m->dev) s = bind_device(m, &m->dev);
    *out = m->dev;
    pthread_mutex_unlock(&m->fp_lock);
    return s;
}

void gp_model_free(gp_model *m) {
    if (!m) return;
    bound_free(m, m->dev);
    if (m->be) each_weight(m, unbind_one, NULL);
    gp_backend_free(m->be);
    gp_gen_config_free_owned(&m->gen);
    gp_tokenizer_free(m->tok);
    gp_st_close(m->st);
    gp_config_free(&m->cfg);
    free(m->layers);
    free(m->inv_freq_full);
    free(m->inv_freq_sliding);
    free(m->gen_config_path);
    free(m->dir);
    pthread_mutex_destroy(&m->fp_lock);
    free(m);
}

/* getters: a NULL model gives the neutral value (NULL, 0, -1) stated in genparity.h */
const char *gp_model_arch(const gp_model *m) { return m ? m->cfg.arch_name : NULL; }
int32_t gp_model_n_vocab(const gp_model *m) { return m ? m->cfg.n_vocab : 0; }
int32_t gp_model_n_layers(const gp_model *m) { return m ? m->cfg.n_layers : 0; }
int32_t gp_model_n_embd(const gp_model *m) { return m ? m->cfg.n_embd : 0; }
int32_t gp_model_n_ctx_train(const gp_model *m) { return m ? m->cfg.n_ctx_train : 0; }
int32_t gp_model_bos_id(const gp_model *m) { return m ? m->gen_bos : -1; }
const gp_tokenizer *gp_model_tokenizer(const gp_model *m) { return m ? m->tok : NULL; }
uint64_t gp_model_weight_bytes(const gp_model *m) { return m ? gp_st_total_bytes(m->st) : 0; }

static void add_bytes(gp_model *m, gp_wt *w, void *ud) {
    if (w != &m->tok_embd) *(uint64_t *)ud += gp_wt_bytes(w);
}

uint64_t gp_model_decode_bytes(const gp_model *m) {
    if (!m) return 0;
    /* every weight once, except the embeddings: one row per token */
    uint64_t b = m->tok_embd.rows ? gp_wt_bytes(&m->tok_embd) / (uint64_t)m->tok_embd.rows : 0;
    each_weight((gp_model *)m, add_bytes, &b);
    if (m->lm_head_tied) b += gp_wt_bytes(&m->tok_embd);
    return b;
}

int32_t gp_model_eos_ids(const gp_model *m, int32_t *ids, int32_t cap) {
    if (!m) return 0;
    for (int32_t i = 0; ids && i < m->gen.n_eos && i < cap; i++) ids[i] = m->gen.eos_ids[i];
    return m->gen.n_eos;
}
