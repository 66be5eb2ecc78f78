/* model.c — gp_model_load: reads config.json and generation_config.json, maps the safetensors weights, binds every
 * tensor the architecture needs (checking name, dtype and shape), loads the tokenizer.  All or nothing: on any
 * error everything is released and the message names the file and the field or tensor. */
#include "model/model.h"
#include "model/gen_config.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gp_model_params gp_model_default_params(void) {
    gp_model_params p = {0};
    p.load_tokenizer = 1;
    return p;
}

/* Binds tensor `name` to *w after checking dtype and shape [rows, cols] (cols = 0: a vector of rows).
 * required = 0: an absent tensor leaves w->data NULL. */
static gp_status bind(gp_model *m, gp_wt *w, const char *name, int64_t rows, int64_t cols, int required) {
    const gp_tensor_view *t = gp_st_find(m->st, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return GP_OK;
        return gp_set_error(GP_ERR_MISSING, "%s: tensor '%s' is missing (%s needs it)", m->dir, name,
                            m->cfg.arch_name);
    }
    if (t->dtype != GP_DTYPE_F32 && t->dtype != GP_DTYPE_BF16 && t->dtype != GP_DTYPE_F16)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported (F32, BF16, F16)", t->file,
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
    w->data = t->data;
    w->dtype = t->dtype;
    w->rows = cols ? rows : 1;
    w->cols = cols ? cols : rows;
    return GP_OK;
}

static gp_status bind_layer(gp_model *m, int i) {
    const gp_config *c = &m->cfg;
    const gp_arch *a = &c->arch;
    gp_layer *L = &m->layers[i];
    int64_t E = c->n_embd, Q = (int64_t)c->n_heads * c->head_dim, KV = (int64_t)c->n_kv_heads * c->head_dim;
    char n[256];
    gp_status s;
#define B(field, suffix, rows, cols, req)                                                                            \
    do {                                                                                                             \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                                                      \
        if ((s = bind(m, &L->field, n, rows, cols, req))) return s;                                                  \
    } while (0)
    B(attn_norm, "input_layernorm.weight", E, 0, 1);
    B(wq, "self_attn.q_proj.weight", Q, E, 1);
    B(wk, "self_attn.k_proj.weight", KV, E, 1);
    B(wv, "self_attn.v_proj.weight", KV, E, 1);
    B(wo, "self_attn.o_proj.weight", E, Q, 1);
    B(bq, "self_attn.q_proj.bias", Q, 0, a->qkv_bias);
    B(bk, "self_attn.k_proj.bias", KV, 0, a->qkv_bias);
    B(bv, "self_attn.v_proj.bias", KV, 0, a->qkv_bias);
    B(bo, "self_attn.o_proj.bias", E, 0, a->o_bias);
    B(q_norm, "self_attn.q_norm.weight", c->head_dim, 0, a->qk_norm);
    B(k_norm, "self_attn.k_norm.weight", c->head_dim, 0, a->qk_norm);
    if (a->sandwich_norms) {
        B(attn_post_norm, "post_attention_layernorm.weight", E, 0, 1);
        B(ffn_norm, "pre_feedforward_layernorm.weight", E, 0, 1);
        B(ffn_post_norm, "post_feedforward_layernorm.weight", E, 0, 1);
    } else {
        B(ffn_norm, "post_attention_layernorm.weight", E, 0, 1);
    }
    B(w_gate, "mlp.gate_proj.weight", c->n_ff, E, 1);
    B(w_up, "mlp.up_proj.weight", c->n_ff, E, 1);
    B(w_down, "mlp.down_proj.weight", E, c->n_ff, 1);
    B(b_gate, "mlp.gate_proj.bias", c->n_ff, 0, a->mlp_bias);
    B(b_up, "mlp.up_proj.bias", c->n_ff, 0, a->mlp_bias);
    B(b_down, "mlp.down_proj.bias", E, 0, a->mlp_bias);
#undef B
    return GP_OK;
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
    m->be = gp_backend_cpu();
    pthread_mutex_init(&m->fp_lock, NULL);
    if (!(m->dir = gp_strdup(dir))) goto fail;
    char *cfg_path = gp_path_join(dir, "config.json");
    if (!cfg_path) goto fail;
    if (!gp_file_exists(cfg_path)) {
        s = gp_set_error(GP_ERR_MISSING, "%s: no config.json in the model folder", dir);
        free(cfg_path);
        goto fail;
    }
    s = gp_config_load(cfg_path, &m->cfg);
    free(cfg_path);
    if (s) goto fail;
    progress(params, 0.05f);
    if ((s = read_generation_config(m))) goto fail;
    if ((s = gp_st_open_dir(dir, &m->st))) goto fail;
    progress(params, 0.3f);

    const gp_config *c = &m->cfg;
    if ((s = bind(m, &m->tok_embd, "model.embed_tokens.weight", c->n_vocab, c->n_embd, 1))) goto fail;
    if ((s = bind(m, &m->out_norm, "model.norm.weight", c->n_embd, 0, 1))) goto fail;
    int tied = c->tie_word_embeddings;
    if ((s = bind(m, &m->lm_head, "lm_head.weight", c->n_vocab, c->n_embd, tied == 0))) goto fail;
    if (!m->lm_head.data || tied == 1) m->lm_head = m->tok_embd;
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

void gp_model_free(gp_model *m) {
    if (!m) return;
    gp_gen_config_free_owned(&m->gen);
    gp_tokenizer_free(m->tok);
    gp_st_close(m->st);
    gp_config_free(&m->cfg);
    gp_cuda_model_free(m->cuda);
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

/* Bytes of one bound weight (0 when absent). */
static uint64_t wt_bytes(const gp_wt *w) {
    return w->data ? (uint64_t)w->rows * (uint64_t)w->cols * gp_dtype_size(w->dtype) : 0;
}

uint64_t gp_model_decode_bytes(const gp_model *m) {
    if (!m) return 0;
    const gp_wt *e = &m->tok_embd;
    uint64_t b = wt_bytes(&m->out_norm) + wt_bytes(&m->lm_head) + (uint64_t)e->cols * gp_dtype_size(e->dtype);
    for (int32_t l = 0; l < m->cfg.n_layers; l++) {
        const gp_layer *L = &m->layers[l];
        const gp_wt *w[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv, &L->bo,
                            &L->q_norm, &L->k_norm, &L->attn_post_norm, &L->ffn_norm, &L->ffn_post_norm,
                            &L->w_gate, &L->w_up, &L->w_down, &L->b_gate, &L->b_up, &L->b_down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) b += wt_bytes(w[i]);
    }
    return b;
}

int32_t gp_model_eos_ids(const gp_model *m, int32_t *ids, int32_t cap) {
    if (!m) return 0;
    for (int32_t i = 0; ids && i < m->gen.n_eos && i < cap; i++) ids[i] = m->gen.eos_ids[i];
    return m->gen.n_eos;
}
