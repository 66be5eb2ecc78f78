/* synth.c — synthetic model folders for tests (see synth.h). */
#include "synth.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *synth_llama_config(const char *field, const char *value) {
    static char buf[2048];
    const char *keys[] = {"architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "vocab_size", "rms_norm_eps",
                          "max_position_embeddings", "rope_theta", "tie_word_embeddings", "eos_token_id"};
    const char *vals[] = {"[\"LlamaForCausalLM\"]", "16", "32", "2", "4", "2", "64", "1e-5", "128", "10000.0",
                          "false", "2"};
    size_t k = (size_t)snprintf(buf, sizeof buf, "{");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = field && !strcmp(field, keys[i]) ? value : vals[i];
        if (!v) continue; /* value NULL: drop the field */
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s\": %s", i ? ", " : "", keys[i], v);
    }
    if (field && value) {
        int known = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) known |= !strcmp(field, keys[i]);
        if (!known) k += (size_t)snprintf(buf + k, sizeof buf - k, ", \"%s\": %s", field, value);
    }
    snprintf(buf + k, sizeof buf - k, "}");
    return buf;
}

typedef struct {
    gp_st_write_tensor *t;
    float **data;
    int n, cap;
} tlist;

static void add(tlist *l, const char *name, int64_t rows, int64_t cols, const char *skip, const char *bad) {
    if (skip && !strcmp(name, skip)) return;
    if (bad && !strcmp(name, bad)) rows++;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->t = realloc(l->t, (size_t)l->cap * sizeof *l->t);
        l->data = realloc(l->data, (size_t)l->cap * sizeof *l->data);
    }
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    float *d = malloc(n * sizeof *d);
    uint32_t s = 2166136261u;
    for (const char *c = name; *c; c++) s = (s ^ (uint8_t)*c) * 16777619u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        d[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f + (cols ? 0.0f : 1.0f);
    }
    gp_st_write_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->dtype = GP_DTYPE_F32;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->data = d;
    l->data[l->n++] = d;
}

int synth_model(const char *dir, const char *config_json, const char *skip, const char *bad_shape) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(config_json, f);
    fclose(f);
    gp_config c;
    if (gp_config_parse(path, config_json, &c) != GP_OK) return 0; /* bad config: no weights needed */
    tlist l = {0};
    int64_t E = c.n_embd, Q = (int64_t)c.n_heads * c.head_dim, KV = (int64_t)c.n_kv_heads * c.head_dim;
    add(&l, "model.embed_tokens.weight", c.n_vocab, E, skip, bad_shape);
    add(&l, "model.norm.weight", E, 0, skip, bad_shape);
    if (c.tie_word_embeddings != 1) add(&l, "lm_head.weight", c.n_vocab, E, skip, bad_shape);
    char n[256];
    for (int i = 0; i < c.n_layers; i++) {
#define A(suffix, r, k)                                                                                              \
    snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                                                          \
    add(&l, n, r, k, skip, bad_shape)
        A("input_layernorm.weight", E, 0);
        A("post_attention_layernorm.weight", E, 0);
        A("self_attn.q_proj.weight", Q, E);
        A("self_attn.k_proj.weight", KV, E);
        A("self_attn.v_proj.weight", KV, E);
        A("self_attn.o_proj.weight", E, Q);
        A("mlp.gate_proj.weight", c.n_ff, E);
        A("mlp.up_proj.weight", c.n_ff, E);
        A("mlp.down_proj.weight", E, c.n_ff);
#undef A
    }
    gp_config_free(&c);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = gp_st_write(path, l.t, l.n, NULL, NULL, 0) == GP_OK ? 0 : -1;
    for (int i = 0; i < l.n; i++) {
        free((void *)l.t[i].name);
        free(l.data[i]);
    }
    free(l.t);
    free(l.data);
    return rc;
}
