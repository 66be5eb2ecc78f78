/* fuse.c — gp_model_fuse: a model folder with LoRA adapters merged into its weights (what mlx_lm.fuse writes),
 * through the folder rewriter (rewrite.h).  A targeted linear's weight becomes W + cast(scale * B A) in W's dtype;
 * a quantized one is dequantized as mx.dequantize does (scale * q, then + bias, each rounded to the scales' dtype),
 * merged, and quantized again (gp_quantize_rows) unless the whole model is dequantized. */
#include "model/adapter.h"
#include "model/quant.h"
#include "model/rewrite.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fjob {
    const gp_model *m;
    gp_adapter *const *ad;
    const float *scales;
    int32_t n_ad, dequantize;
} fjob;

static void qsettings(const gp_model *m, const char *name, int32_t *bits, int32_t *gs);

/* v rounded to dtype d (float32: unchanged). */
static float round_to(gp_dtype d, float v) {
    if (d == GP_DTYPE_BF16) return gp_bf16_to_f32(gp_f32_to_bf16(v));
    if (d == GP_DTYPE_F16) return gp_f16_to_f32(gp_f32_to_f16(v));
    return v;
}

/* The scales / biases tensor of quantized weight `name` ("X.weight" -> "X.<what>"). */
static const gp_tensor_view *aux_of(const gp_st_set *st, const char *name, const char *what) {
    char buf[320];
    snprintf(buf, sizeof buf, "%.*s.%s", (int)(strlen(name) - 7), name, what);
    return gp_st_find(st, buf);
}

/* 1 when term T of an adapter targets tensor `name` of the checkpoint. */
static int targets(const gp_model *m, const gp_adapter_term *T, const char *name) {
    char canon[160], buf[320];
    snprintf(canon, sizeof canon, "model.layers.%d.%s.weight", (int)T->layer, GP_ADAPTER_MODULES[T->which].name);
    return !strcmp(gp_model_tensor_name(m, canon, buf, sizeof buf), name);
}

/* w [R, C] += the adapters' terms on tensor `name`, each cast to dtype d and added in d (as mlx_lm.fuse). */
static void merge(const fjob *j, const char *name, float *w, int64_t R, int64_t C, gp_dtype d) {
    for (int32_t a = 0; a < j->n_ad; a++)
        for (int32_t t = 0; t < j->ad[a]->n_terms; t++) {
            const gp_adapter_term *T = &j->ad[a]->terms[t];
            if (!targets(j->m, T, name)) continue;
            const float s = j->ad[a]->scale * (j->scales ? j->scales[a] : 1.0f);
            const float *A = T->a.data, *B = T->b.data; /* A [r, C], B [R, r] */
            const int64_t r = T->a.rows;
            for (int64_t o = 0; o < R; o++)
                for (int64_t i = 0; i < C; i++) {
                    float delta = 0.0f;
                    for (int64_t k = 0; k < r; k++) delta += (s * B[o * r + k]) * A[k * C + i];
                    w[o * C + i] = round_to(d, w[o * C + i] + round_to(d, delta));
                }
        }
}

static gp_status compute(void *user, int32_t src, uint8_t *parts[GP_RW_PARTS]) {
    const fjob *j = user;
    const gp_tensor_view *t = gp_st_at(j->m->st, src);
    const int quant = t->dtype == GP_DTYPE_U32;
    const gp_tensor_view *sc = quant ? aux_of(j->m->st, t->name, "scales") : NULL;
    const gp_tensor_view *bi = quant ? aux_of(j->m->st, t->name, "biases") : NULL;
    const int64_t R = t->shape[0];
    int32_t bits = 0, gs = 0;
    if (quant) qsettings(j->m, t->name, &bits, &gs);
    const int64_t cols = quant ? t->shape[1] * 32 / bits : t->shape[1];
    const gp_dtype d = quant ? sc->dtype : t->dtype;
    float *w = gp_malloc((size_t)(R * cols), sizeof(float));
    if (!w) return GP_ERR_NOMEM;
    for (int64_t r = 0; r < R; r++) /* mx.dequantize: scale * q, then + bias, in the scales' dtype */
        for (int64_t i = 0; i < cols; i++) {
            if (!quant) {
                w[r * cols + i] = gp_tensor_elem(t, r * cols + i);
                continue;
            }
            const int64_t bit = (r * cols + i) * bits, g = r * (cols / gs) + i / gs;
            const uint8_t *p = (const uint8_t *)t->data;
            uint32_t v = p[bit >> 3] | ((bit & 7) + bits > 8 ? (uint32_t)p[(bit >> 3) + 1] << 8 : 0);
            v = (v >> (bit & 7)) & ((1u << bits) - 1);
            w[r * cols + i] = round_to(d, round_to(d, gp_tensor_elem(sc, g) * (float)v) + gp_tensor_elem(bi, g));
        }
    merge(j, t->name, w, R, cols, d);
    gp_status s = GP_OK;
    if (quant && !j->dequantize) s = gp_quantize_rows(w, R, cols, bits, gs, d, parts);
    else if (!(parts[0] = gp_malloc((size_t)(R * cols), gp_dtype_size(d)))) s = GP_ERR_NOMEM;
    else
        for (int64_t i = 0; i < R * cols; i++) gp_tensor_store(d, parts[0], i, w[i]);
    free(w);
    return s;
}

/* 1 when source tensor t (a ".weight") is targeted by one of the adapters. */
static int targeted(const fjob *j, const gp_tensor_view *t) {
    for (int32_t a = 0; a < j->n_ad; a++)
        for (int32_t k = 0; k < j->ad[a]->n_terms; k++)
            if (targets(j->m, &j->ad[a]->terms[k], t->name)) return 1;
    return 0;
}

/* Bits and group size of quantized weight `name` (config.json's quantization with its per-module overrides). */
static void qsettings(const gp_model *m, const char *name, int32_t *bits, int32_t *gs) {
    char module[320];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - 7), name);
    *bits = 4, *gs = 64;
    gp_quant_lookup(&m->cfg.quant, module, bits, gs);
}

static int32_t index_of(const gp_st_set *st, const gp_tensor_view *t) {
    for (int32_t q = 0; q < gp_st_count(st); q++)
        if (gp_st_at(st, q) == t) return q;
    return -1;
}

static int ends_with(const char *s, const char *sfx) {
    size_t a = strlen(s), b = strlen(sfx);
    return a > b && !strcmp(s + a - b, sfx);
}

/* The output list: a targeted weight (and with dequantize every quantized weight) is recomputed; the scales and
 * biases of a recomputed quantized weight are its parts 1 and 2 (or dropped when dequantized). */
static gp_status plan(const fjob *j, gp_rw_out **out, int32_t *n_out) {
    const gp_st_set *st = j->m->st;
    const int32_t n = gp_st_count(st);
    if (!(*out = gp_calloc((size_t)n + 1, sizeof **out))) return GP_ERR_NOMEM;
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *t = gp_st_at(st, i);
        gp_rw_out o = {{t->name, t->dtype, t->ndim, {0}, NULL}, i, -1};
        memcpy(o.t.shape, t->shape, sizeof o.t.shape);
        if (ends_with(t->name, ".scales") || ends_with(t->name, ".biases")) { /* of weight "X.weight" */
            char w[320];
            snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(t->name) - 7), t->name);
            const gp_tensor_view *wt = gp_st_find(st, w);
            if (wt && wt->dtype == GP_DTYPE_U32 && j->dequantize) continue;
            if (wt && wt->dtype == GP_DTYPE_U32 && targeted(j, wt))
                o.src = index_of(st, wt), o.part = ends_with(t->name, ".scales") ? 1 : 2;
        } else if (ends_with(t->name, ".weight") && (targeted(j, t) || (j->dequantize && t->dtype == GP_DTYPE_U32))) {
            o.part = 0;
            const gp_tensor_view *sc = t->dtype == GP_DTYPE_U32 ? aux_of(st, t->name, "scales") : NULL;
            if (t->dtype == GP_DTYPE_U32 && (!sc || !aux_of(st, t->name, "biases")))
                return gp_set_error(GP_ERR_MISSING, "%s: tensor '%s' has no scales or biases", t->file, t->name);
            if (sc && j->dequantize) {
                int32_t bits, gs;
                qsettings(j->m, t->name, &bits, &gs);
                o.t.dtype = sc->dtype;
                o.t.shape[1] = t->shape[1] * 32 / bits;
            }
        }
        (*out)[k++] = o;
    }
    *n_out = k;
    return GP_OK;
}

static gp_status drop_quant(cJSON *root, const char *path, void *user) {
    cJSON_DeleteItemFromObject(root, "quantization");
    cJSON_DeleteItemFromObject(root, "quantization_config");
    return GP_OK;
}

gp_status gp_model_fuse(const gp_model *m, gp_adapter *const *adapters, const float *scales, int32_t n,
                        const char *out_dir, int dequantize) {
    if (!m || !out_dir || n < 0 || (n > 0 && !adapters))
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_fuse: bad arguments");
    for (int32_t i = 0; i < n; i++)
        if (!adapters[i] || adapters[i]->m != m)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_fuse: adapter %d was not loaded for this model", (int)i);
    fjob j = {m, adapters, scales, n, dequantize != 0};
    char *target = NULL;
    gp_rw_out *out = NULL;
    int32_t n_out = 0;
    gp_status s = gp_rw_prepare(out_dir, &target);
    if (!s) s = plan(&j, &out, &n_out);
    if (!s) s = gp_rw_config(m->dir, out_dir, dequantize ? drop_quant : NULL, NULL);
    if (!s) s = gp_rw_safetensors(target, m->st, out, n_out, compute, &j, NULL, NULL);
    if (!s) s = gp_rw_copy_files(m->dir, out_dir);
    free(out), free(target);
    return s;
}
