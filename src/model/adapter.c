/* adapter.c — gp_adapter_load: LoRA adapters in mlx-lm's layout (adapters.safetensors, lora_a [in, r] / lora_b
 * [r, out]) and PEFT's (adapter_model.safetensors, lora_A.weight [r, in] / lora_B.weight [out, r]), checked against
 * the model (every tensor must target a linear that exists, with its shapes) and against adapter_config.json (rank,
 * targeted modules and layers), kept as float32 A [r, in] and B [out, r].  All or nothing. */
#include "model/adapter.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "util/util.h"

#include <cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const gp_adapter_module GP_ADAPTER_MODULES[GP_ADAPTER_N_MODULES] = {
    {"self_attn.q_proj", offsetof(gp_layer, q)},  {"self_attn.k_proj", offsetof(gp_layer, k)},
    {"self_attn.v_proj", offsetof(gp_layer, v)},  {"self_attn.o_proj", offsetof(gp_layer, o)},
    {"mlp.gate_proj", offsetof(gp_layer, gate)}, {"mlp.up_proj", offsetof(gp_layer, up)},
    {"mlp.down_proj", offsetof(gp_layer, down)},
};

/* What adapter_config.json says, in one shape for both layouts. */
typedef struct acfg {
    int peft;
    int32_t rank;
    float scale;
    int32_t first_layer;      /* targets must be in layers >= this (mlx-lm num_layers: the last N) */
    const cJSON *keys;        /* mlx-lm lora_parameters.keys / PEFT target_modules (array) or NULL = any */
    const cJSON *layers;      /* PEFT layers_to_transform (array or number) or NULL = any */
    char path[1024];
} acfg;

static gp_status refuse(const acfg *c, const char *field, const char *why) {
    return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%s': %s", c->path, field, why);
}

/* 1 when field is present and neither null, false, "" nor an empty list/object. */
static int nonempty(const gp_jobj *o, const char *key) {
    const cJSON *v = gp_json_get(o, key);
    if (!v || cJSON_IsFalse(v)) return 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0 && strcmp(v->valuestring, "none") != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return cJSON_GetArraySize(v) > 0;
    return 1;
}

static gp_status parse_peft(const gp_jobj *o, acfg *c) {
    const char *type = NULL;
    int rs = 0, dora = 0;
    double alpha = 8.0;
    gp_status s;
    if ((s = gp_json_str(o, "peft_type", &type))) return s;
    if (type && strcmp(type, "LORA")) return refuse(c, "peft_type", "only LORA adapters are supported");
    if ((s = gp_json_bool(o, "use_dora", &dora))) return s;
    if (dora) return refuse(c, "use_dora", "DoRA adapters are not supported (LoRA only)");
    if (nonempty(o, "bias")) return refuse(c, "bias", "adapters with trained biases are not supported");
    if (nonempty(o, "modules_to_save")) return refuse(c, "modules_to_save", "fully trained modules are not supported");
    if (nonempty(o, "rank_pattern")) return refuse(c, "rank_pattern", "per-module ranks are not supported");
    if (nonempty(o, "alpha_pattern")) return refuse(c, "alpha_pattern", "per-module alphas are not supported");
    if ((s = gp_json_need_i32(o, "r", 1, 1 << 16, &c->rank))) return s;
    if ((s = gp_json_num(o, "lora_alpha", -1e6, 1e6, &alpha))) return s;
    if ((s = gp_json_bool(o, "use_rslora", &rs))) return s;
    c->scale = (float)(rs ? alpha / sqrt((double)c->rank) : alpha / c->rank);
    const cJSON *t = gp_json_get(o, "target_modules");
    c->keys = cJSON_IsArray(t) ? t : NULL; /* a string is a regex over module paths: the tensors decide */
    c->layers = gp_json_get(o, "layers_to_transform");
    return GP_OK;
}

static gp_status parse_mlx(const gp_jobj *o, acfg *c, int32_t n_layers) {
    const char *type = NULL;
    gp_status s;
    if ((s = gp_json_str(o, "fine_tune_type", &type))) return s;
    if (type && !strcmp(type, "dora")) return refuse(c, "fine_tune_type", "DoRA adapters are not supported (LoRA only)");
    if (type && strcmp(type, "lora")) return refuse(c, "fine_tune_type", "only \"lora\" adapters are supported");
    char buf[64];
    gp_jobj lp;
    double scale = 20.0; /* mlx-lm's defaults: rank 8, scale 20 */
    c->rank = 8;
    if ((s = gp_json_obj(o, "lora_parameters", &lp, buf, sizeof buf))) return s;
    if ((s = gp_json_i32(&lp, "rank", 1, 1 << 16, &c->rank))) return s;
    if ((s = gp_json_num(&lp, "scale", -1e6, 1e6, &scale))) return s;
    c->scale = (float)scale;
    const cJSON *k = gp_json_get(&lp, "keys");
    c->keys = cJSON_IsArray(k) ? k : NULL;
    int32_t nl = -1;
    if ((s = gp_json_i32(o, "num_layers", -1, 1 << 20, &nl))) return s;
    c->first_layer = nl < 0 || nl > n_layers ? 0 : n_layers - nl;
    return GP_OK;
}

static int in_list(const cJSON *list, int32_t layer, const char *module) {
    if (!list) return 1;
    if (cJSON_IsNumber(list)) return module ? 1 : list->valuedouble == layer;
    for (const cJSON *e = list->child; e; e = e->next) {
        if (!module && cJSON_IsNumber(e) && e->valuedouble == layer) return 1;
        if (module && cJSON_IsString(e)) { /* PEFT names the last part ("q_proj"), mlx-lm the path in the layer */
            const char *dot = strrchr(module, '.');
            if (!strcmp(e->valuestring, module) || (dot && !strcmp(e->valuestring, dot + 1))) return 1;
        }
    }
    return 0;
}

/* Parses "<prefix>layers.{i}.<module>.<suffix>" where suffix is lora_a / lora_b (mlx) or lora_A.weight /
 * lora_B.weight (PEFT): *layer, *which, *is_b.  0 when the name is not such a tensor. */
static int parse_name(const char *name, int peft, int32_t *layer, int32_t *which, int *is_b) {
    const char *p = strstr(name, "layers.");
    if (!p) return 0;
    char *end;
    long l = strtol(p + 7, &end, 10);
    if (end == p + 7 || *end != '.' || l < 0 || l > GP_MAX_LAYERS) return 0;
    for (int32_t i = 0; i < GP_ADAPTER_N_MODULES; i++) {
        size_t n = strlen(GP_ADAPTER_MODULES[i].name);
        if (strncmp(end + 1, GP_ADAPTER_MODULES[i].name, n) || end[1 + n] != '.') continue;
        const char *sfx = end + 2 + n;
        const char *a = peft ? "lora_A.weight" : "lora_a", *b = peft ? "lora_B.weight" : "lora_b";
        if (strcmp(sfx, a) && strcmp(sfx, b)) return 0;
        *layer = (int32_t)l;
        *which = i;
        *is_b = !strcmp(sfx, b);
        return 1;
    }
    return 0;
}

static float tv_at(const gp_tensor_view *t, int64_t i) {
    if (t->dtype == GP_DTYPE_BF16) return gp_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == GP_DTYPE_F16) return gp_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* The tensor pair of one targeted linear. */
typedef struct pair {
    const gp_tensor_view *a, *b;
} pair;

/* Checks one tensor of a pair: float dtype, 2-D [r0, r1]. */
static gp_status check_shape(const gp_tensor_view *t, int64_t r0, int64_t r1, const char *what) {
    if (t->dtype != GP_DTYPE_F32 && t->dtype != GP_DTYPE_BF16 && t->dtype != GP_DTYPE_F16)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': dtype %s (F32, BF16 or F16)", t->file, t->name,
                            gp_dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld] (ndim %d), %s needs [%lld, %lld]",
                            t->file, t->name, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                            (int)t->ndim, what, (long long)r0, (long long)r1);
    return GP_OK;
}

/* Pass 1: every tensor of st is the A or B of a linear the model has, in the layers and modules the config allows;
 * pairs [n_layers * 7] gets them. */
static gp_status collect(const gp_model *m, const gp_st_set *st, const acfg *c, pair *pairs) {
    for (int32_t i = 0; i < gp_st_count(st); i++) {
        const gp_tensor_view *t = gp_st_at(st, i);
        int32_t l, w;
        int is_b;
        if (!parse_name(t->name, c->peft, &l, &w, &is_b))
            return gp_set_error(GP_ERR_UNSUPPORTED, "%s: tensor '%s' is not a LoRA %s of a q/k/v/o/gate/up/down "
                                "projection (DoRA magnitudes, embeddings, lm_head and other modules are not supported)",
                                t->file, t->name, c->peft ? "lora_A/lora_B.weight" : "lora_a/lora_b");
        if (l >= m->cfg.n_layers)
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': layer %d, the model has %d (an adapter for another "
                                "model?)", t->file, t->name, (int)l, (int)m->cfg.n_layers);
        if (l < c->first_layer || !in_list(c->layers, l, NULL) || !in_list(c->keys, l, GP_ADAPTER_MODULES[w].name))
            return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' is outside the layers or modules that %s names",
                                t->file, t->name, c->path);
        pair *p = &pairs[l * GP_ADAPTER_N_MODULES + w];
        if (is_b) p->b = t;
        else p->a = t;
    }
    return GP_OK;
}

/* Pass 2: both halves present, shapes agree with the linear and the rank; counts terms and floats. */
static gp_status check_pairs(const gp_model *m, const acfg *c, const pair *pairs, int32_t *n_terms, size_t *n_floats) {
    *n_terms = 0;
    *n_floats = 0;
    for (int32_t i = 0; i < m->cfg.n_layers * GP_ADAPTER_N_MODULES; i++) {
        const pair *p = &pairs[i];
        if (!p->a && !p->b) continue;
        const gp_tensor_view *have = p->a ? p->a : p->b;
        if (!p->a || !p->b)
            return gp_set_error(GP_ERR_MISSING, "%s: tensor '%s' has no %s half", have->file, have->name,
                                p->a ? "B" : "A");
        const gp_linear *L = (const gp_linear *)((const char *)&m->layers[i / GP_ADAPTER_N_MODULES] +
                                                 GP_ADAPTER_MODULES[i % GP_ADAPTER_N_MODULES].off);
        const int64_t in = L->w.cols, out = L->w.rows, r = c->rank;
        gp_status s = c->peft ? check_shape(p->a, r, in, "lora_A [r, in]") : check_shape(p->a, in, r, "lora_a [in, r]");
        if (!s) s = c->peft ? check_shape(p->b, out, r, "lora_B [out, r]") : check_shape(p->b, r, out, "lora_b [r, out]");
        if (s) return s;
        (*n_terms)++;
        *n_floats += (size_t)(r * (in + out));
    }
    if (!*n_terms) return gp_set_error(GP_ERR_FORMAT, "%s: the adapter has no LoRA tensors", c->path);
    return GP_OK;
}

/* Pass 3: float32 A [r, in] and B [out, r] (mlx-lm's lora_a / lora_b are their transposes), bound to the backend. */
static gp_status build_terms(gp_adapter *ad, const acfg *c, const pair *pairs) {
    const gp_model *m = ad->m;
    float *d = ad->data;
    int32_t k = 0;
    for (int32_t i = 0; i < m->cfg.n_layers * GP_ADAPTER_N_MODULES; i++) {
        const pair *p = &pairs[i];
        if (!p->a) continue;
        const int64_t r = c->rank, in = c->peft ? p->a->shape[1] : p->a->shape[0];
        const int64_t out = c->peft ? p->b->shape[0] : p->b->shape[1];
        float *a = d, *b = d + r * in;
        for (int64_t x = 0; x < r; x++)
            for (int64_t y = 0; y < in; y++) a[x * in + y] = tv_at(p->a, c->peft ? x * in + y : y * r + x);
        for (int64_t x = 0; x < out; x++)
            for (int64_t y = 0; y < r; y++) b[x * r + y] = tv_at(p->b, c->peft ? x * r + y : y * out + x);
        d += r * (in + out);
        gp_adapter_term *t = &ad->terms[k++];
        t->layer = i / GP_ADAPTER_N_MODULES;
        t->which = i % GP_ADAPTER_N_MODULES;
        const gp_wt va = gp_wt_dense(GP_WFMT_F32, a, r, in), vb = gp_wt_dense(GP_WFMT_F32, b, out, r);
        gp_status s = m->be->ops->bind_weight(m->be, &va, &t->a);
        if (!s) s = m->be->ops->bind_weight(m->be, &vb, &t->b);
        if (s) return s;
    }
    return GP_OK;
}

/* Finds the adapter's files in dir: *tensors and *config (caller frees), c->peft. */
static gp_status find_files(const char *dir, acfg *c, char **tensors, char **config) {
    *tensors = *config = NULL;
    char *mlx = gp_path_join(dir, "adapters.safetensors"), *peft = gp_path_join(dir, "adapter_model.safetensors");
    char *bin = gp_path_join(dir, "adapter_model.bin");
    *config = gp_path_join(dir, "adapter_config.json");
    gp_status s = mlx && peft && bin && *config ? GP_OK : GP_ERR_NOMEM;
    if (!s) {
        c->peft = !gp_file_exists(mlx) && gp_file_exists(peft);
        if (!gp_file_exists(*config))
            s = gp_set_error(GP_ERR_MISSING, "%s: no adapter_config.json (an mlx-lm or PEFT LoRA adapter folder)", dir);
        else if (!gp_file_exists(mlx) && !gp_file_exists(peft))
            s = gp_set_error(GP_ERR_MISSING, gp_file_exists(bin) ? "%s: adapter_model.bin (a pickle) is not read: "
                             "save the adapter as safetensors" : "%s: neither adapters.safetensors (mlx-lm) nor "
                             "adapter_model.safetensors (PEFT)", dir);
    }
    if (!s) {
        *tensors = c->peft ? peft : mlx;
        if (c->peft) peft = NULL;
        else mlx = NULL;
    }
    free(mlx), free(peft), free(bin);
    if (s) free(*config), *config = NULL;
    return s;
}

static gp_status parse_config(const gp_model *m, const char *path, acfg *c, cJSON **root) {
    snprintf(c->path, sizeof c->path, "%s", path);
    gp_status s = gp_json_load(path, 1 << 20, GP_JSON_NO_DUP_KEYS, root);
    if (s) return s;
    if (!cJSON_IsObject(*root)) return gp_set_error(GP_ERR_FORMAT, "%s: top level must be a JSON object", path);
    gp_jobj o = gp_jobj_root(c->path, *root);
    return c->peft ? parse_peft(&o, c) : parse_mlx(&o, c, m->cfg.n_layers);
}

gp_status gp_adapter_load(const gp_model *m, const char *dir, gp_adapter **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_adapter_load: out is NULL");
    *out = NULL;
    if (!m || !dir) return gp_set_error(GP_ERR_INVALID_ARG, "gp_adapter_load: model or dir is NULL");
    acfg c = {0};
    char *tpath = NULL, *cpath = NULL;
    cJSON *root = NULL;
    gp_st_set *st = NULL;
    pair *pairs = NULL;
    gp_adapter *ad = NULL;
    size_t n_floats = 0;
    gp_status s = find_files(dir, &c, &tpath, &cpath);
    if (!s) s = parse_config(m, cpath, &c, &root);
    if (!s) s = gp_st_open_file(tpath, &st);
    if (!s && !(pairs = gp_calloc((size_t)m->cfg.n_layers * GP_ADAPTER_N_MODULES, sizeof *pairs))) s = GP_ERR_NOMEM;
    if (!s) s = collect(m, st, &c, pairs);
    if (!s && !(ad = gp_calloc(1, sizeof *ad))) s = GP_ERR_NOMEM;
    if (!s) {
        pthread_mutex_init(&ad->lock, NULL);
        ad->m = m;
        ad->rank = c.rank;
        ad->scale = c.scale;
        s = check_pairs(m, &c, pairs, &ad->n_terms, &n_floats);
    }
    if (!s && (!(ad->terms = gp_calloc((size_t)ad->n_terms, sizeof *ad->terms)) ||
               !(ad->data = gp_malloc(n_floats, sizeof(float))) || !(ad->dir = gp_strdup(dir))))
        s = GP_ERR_NOMEM;
    if (!s) s = build_terms(ad, &c, pairs);
    if (!s) {
        uint64_t h = gp_hash_file(cpath);
        ad->id = gp_hash_bytes(h ^ gp_hash_file(tpath), &c.scale, sizeof c.scale);
    }
    free(pairs), free(tpath), free(cpath);
    cJSON_Delete(root);
    gp_st_close(st);
    if (s) gp_adapter_free(ad);
    else *out = ad;
    return s;
}

/* Unbinds terms [n] from be and frees the array. */
static void terms_free(gp_backend *be, gp_adapter_term *t, int32_t n) {
    for (int32_t i = 0; t && i < n; i++) {
        if (t[i].a.data) be->ops->unbind_weight(be, &t[i].a);
        if (t[i].b.data) be->ops->unbind_weight(be, &t[i].b);
    }
    free(t);
}

gp_status gp_adapter_terms(gp_adapter *ad, gp_backend *be, const gp_adapter_term **out) {
    *out = ad->terms;
    if (be == ad->m->be) return GP_OK;
    gp_status s = GP_OK;
    pthread_mutex_lock(&ad->lock);
    if (ad->dev_terms && ad->dev_be != be)
        s = gp_set_error(GP_ERR_UNSUPPORTED, "%s: the adapter is bound to another device backend", ad->dir);
    else if (!ad->dev_terms) {
        gp_adapter_term *t = gp_calloc((size_t)ad->n_terms, sizeof *t);
        if (!t) s = GP_ERR_NOMEM;
        for (int32_t i = 0; t && i < ad->n_terms && !s; i++) { /* ad->terms are host views (the CPU binding) */
            t[i].layer = ad->terms[i].layer;
            t[i].which = ad->terms[i].which;
            s = be->ops->bind_weight(be, &ad->terms[i].a, &t[i].a);
            if (!s) s = be->ops->bind_weight(be, &ad->terms[i].b, &t[i].b);
        }
        if (s) terms_free(be, t, ad->n_terms);
        else ad->dev_terms = t, ad->dev_be = be;
    }
    if (!s) *out = ad->dev_terms;
    pthread_mutex_unlock(&ad->lock);
    return s;
}

void gp_adapter_free(gp_adapter *a) {
    if (!a) return;
    if (a->dev_terms) terms_free(a->dev_be, a->dev_terms, a->n_terms);
    terms_free(a->m->be, a->terms, a->terms ? a->n_terms : 0);
    if (a->m) pthread_mutex_destroy(&a->lock);
    free(a->data);
    free(a->dir);
    free(a);
}

int32_t gp_adapter_rank(const gp_adapter *a) { return a ? a->rank : 0; }
int32_t gp_adapter_n_targets(const gp_adapter *a) { return a ? a->n_terms : 0; }
float gp_adapter_scale(const gp_adapter *a) { return a ? a->scale : 0.0f; }
uint64_t gp_adapter_id(const gp_adapter *a) { return a ? a->id : 0; }
