/* quant.c — MLX affine quantization settings (config.json) and the checked view of a quantized tensor (quant.h). */
#include "model/quant.h"
#include "util/util.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int valid_bits(int64_t b) { return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }
static int valid_group(int64_t g) { return g == 16 || g == 32 || g == 64 || g == 128; }

/* bits / group_size / mode of one settings object (the top level or an override); absent fields keep *bits and *gs. */
static gp_status parse_settings(const gp_jobj *o, int32_t *bits, int32_t *gs) {
    const char *mode = NULL, *method = NULL;
    gp_status s;
    if ((s = gp_json_str(o, "quant_method", &method))) return s;
    if (method && strcmp(method, "mlx") != 0 && strcmp(method, "affine") != 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%squant_method' = '%s': only MLX affine quantization "
                            "(mlx_lm.convert -q) is supported", o->path, o->prefix, method);
    if ((s = gp_json_str(o, "mode", &mode))) return s;
    if (mode && strcmp(mode, "affine") != 0)
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%smode' = '%s': only \"affine\" quantization is supported",
                            o->path, o->prefix, mode);
    if ((s = gp_json_i32(o, "bits", 0, 64, bits))) return s;
    if ((s = gp_json_i32(o, "group_size", 0, 1 << 20, gs))) return s;
    if (!valid_bits(*bits))
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%sbits' = %d: MLX affine bits are 2, 3, 4, 5, 6 or 8",
                            o->path, o->prefix, (int)*bits);
    if (!valid_group(*gs))
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field '%sgroup_size' = %d: must be 16, 32, 64 or 128", o->path,
                            o->prefix, (int)*gs);
    return GP_OK;
}

static int is_setting_key(const char *k) {
    return !strcmp(k, "bits") || !strcmp(k, "group_size") || !strcmp(k, "mode") || !strcmp(k, "quant_method");
}

/* One per-module entry (key = module path): an object of settings, or false (left unquantized). */
static gp_status parse_rule(const gp_jobj *q, const cJSON *e, gp_quant *out, gp_quant_rule *r) {
    r->bits = out->bits;
    r->group_size = out->group_size;
    if (cJSON_IsFalse(e)) r->bits = 0;
    else if (cJSON_IsObject(e)) {
        char buf[300];
        snprintf(buf, sizeof buf, "%s%s.", q->prefix, e->string);
        gp_jobj o = {q->path, buf, e};
        gp_status s = parse_settings(&o, &r->bits, &r->group_size);
        if (s) return s;
    } else if (!cJSON_IsTrue(e))
        return gp_set_error(GP_ERR_FORMAT, "%s: field '%s%s': a module's quantization must be an object, true or "
                            "false", q->path, q->prefix, e->string);
    return (r->module = gp_strdup(e->string)) ? GP_OK : GP_ERR_NOMEM;
}

gp_status gp_quant_parse(const gp_jobj *root, gp_quant *out) {
    memset(out, 0, sizeof *out);
    char buf[64];
    gp_jobj q;
    const char *key = gp_json_has(root, "quantization") ? "quantization" : "quantization_config";
    gp_status s = gp_json_obj(root, key, &q, buf, sizeof buf);
    if (s || !q.o) return s;
    if ((s = parse_settings(&q, &out->bits, &out->group_size))) return s;
    int32_t n = 0;
    for (const cJSON *e = q.o->child; e; e = e->next) n += !is_setting_key(e->string);
    if (n && !(out->rules = gp_calloc((size_t)n, sizeof *out->rules))) return GP_ERR_NOMEM;
    for (const cJSON *e = q.o->child; e; e = e->next) {
        if (is_setting_key(e->string)) continue;
        if ((s = parse_rule(&q, e, out, &out->rules[out->n_rules]))) break;
        out->n_rules++;
    }
    if (s) gp_quant_free(out);
    return s;
}

void gp_quant_free(gp_quant *q) {
    if (!q) return;
    for (int32_t i = 0; i < q->n_rules; i++) free(q->rules[i].module);
    free(q->rules);
    memset(q, 0, sizeof *q);
}

int gp_quant_lookup(const gp_quant *q, const char *module, int32_t *bits, int32_t *group_size) {
    if (!q || !q->bits) return 0;
    *bits = q->bits;
    *group_size = q->group_size;
    for (int32_t i = 0; i < q->n_rules; i++)
        if (!strcmp(q->rules[i].module, module)) {
            *bits = q->rules[i].bits;
            *group_size = q->rules[i].group_size;
        }
    return *bits != 0;
}

static int is_float(gp_dtype d) { return d == GP_DTYPE_F32 || d == GP_DTYPE_BF16 || d == GP_DTYPE_F16; }

/* scales or biases of module: float [rows, groups]. */
static gp_status aux_view(const gp_st_set *st, const char *module, const char *what, const char *wname, int64_t rows,
                          int64_t groups, gp_wt_aux *out) {
    char name[320];
    snprintf(name, sizeof name, "%s.%s", module, what);
    const gp_tensor_view *t = gp_st_find(st, name);
    if (!t)
        return gp_set_error(GP_ERR_MISSING, "tensor '%s' is quantized (U32) but '%s' is missing", wname, name);
    if (!is_float(t->dtype))
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': dtype %s, a quantized weight's %s must be F32, BF16 or "
                            "F16", t->file, name, gp_dtype_name(t->dtype), what);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != groups)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': shape [%lld, %lld] (ndim %d), expected [%lld, %lld] "
                            "(rows, in / group_size)", t->file, name, (long long)t->shape[0],
                            (long long)(t->ndim > 1 ? t->shape[1] : 0), (int)t->ndim, (long long)rows,
                            (long long)groups);
    out->data = t->data;
    out->dtype = t->dtype;
    return GP_OK;
}

gp_status gp_quant_view(const gp_st_set *st, const gp_quant *q, const char *name, const gp_tensor_view *t,
                        int64_t rows, int64_t cols, gp_wt *view) {
    char module[300];
    size_t n = strlen(name);
    if (n < 8 || n - 7 >= sizeof module || strcmp(name + n - 7, ".weight"))
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': U32 (quantized) but not a module's .weight", t->file,
                            name);
    memcpy(module, name, n - 7);
    module[n - 7] = 0;
    int32_t bits = 0, gs = 0;
    if (!gp_quant_lookup(q, module, &bits, &gs))
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' is U32 (quantized) but config.json's \"quantization\" "
                            "does not quantize '%s'", t->file, name, module);
    if (cols % gs)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': group_size %d does not divide the input size %lld",
                            t->file, name, (int)gs, (long long)cols);
    if ((cols * bits) % 32)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': %d-bit values of %lld columns do not fill whole uint32 "
                            "words (in * bits must be a multiple of 32)", t->file, name, (int)bits, (long long)cols);
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols * bits / 32)
        return gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s': packed shape [%lld, %lld] (ndim %d), %d-bit [%lld, %lld] "
                            "needs [%lld, %lld] uint32", t->file, name, (long long)t->shape[0],
                            (long long)(t->ndim > 1 ? t->shape[1] : 0), (int)t->ndim, (int)bits, (long long)rows,
                            (long long)cols, (long long)rows, (long long)(cols * bits / 32));
    *view = gp_wt_dense(GP_WFMT_QAFFINE, t->data, rows, cols);
    view->bits = bits;
    view->group_size = gs;
    gp_status s = aux_view(st, module, "scales", name, rows, cols / gs, &view->scales);
    if (!s) s = aux_view(st, module, "biases", name, rows, cols / gs, &view->biases);
    return s;
}

void gp_quantize_group(const float *w, int32_t n, int32_t bits, uint8_t *q, float *scale, float *bias) {
    const float n_bins = (float)((1 << bits) - 1);
    float lo = INFINITY, hi = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        lo = w[j] < lo ? w[j] : lo;
        hi = w[j] > hi ? w[j] : hi;
    }
    const int low_edge = fabsf(lo) > fabsf(hi); /* snap the edge of larger magnitude to the grid */
    float s = (hi - lo) / n_bins;
    s = s < 1e-7f ? 1e-7f : s; /* std::max(s, eps) */
    s = low_edge ? s : -s;
    const float edge = low_edge ? lo : hi, q0 = rintf(edge / s);
    float b = 0.0f;
    if (q0 != 0.0f) {
        s = edge / q0;
        b = edge;
    }
    for (int32_t j = 0; j < n; j++) {
        float v = rintf((w[j] - b) / s);
        v = v < 0.0f ? 0.0f : v > n_bins ? n_bins : v;
        q[j] = (uint8_t)v;
    }
    *scale = s;
    *bias = b;
}

void gp_quant_pack(const uint8_t *q, int64_t n, int32_t bits, uint8_t *out) {
    memset(out, 0, (size_t)(n * bits / 8));
    for (int64_t i = 0; i < n; i++) {
        const int64_t bit = i * bits;
        const uint32_t v = (uint32_t)q[i] << (bit & 7);
        out[bit >> 3] |= (uint8_t)v;
        if ((bit & 7) + bits > 8) out[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
    }
}
