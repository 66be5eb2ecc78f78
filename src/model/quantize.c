/* quantize.c — gp_model_quantize: an MLX-quantized copy of a model folder (what mlx_lm.convert -q writes), through
 * the folder rewriter (rewrite.h): each quantizable matrix becomes weight (packed uint32) + scales + biases computed
 * by gp_quantize_group (quant.c), everything else is copied byte for byte; config.json gains the "quantization"
 * settings; the tokenizer and generation files are copied. */
#include "genparity.h"
#include "io/safetensors.h"
#include "model/quant.h"
#include "model/rewrite.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qjob {
    const gp_st_set *st;
    int32_t bits, gs;
} qjob;

float gp_tensor_elem(const gp_tensor_view *t, int64_t i) {
    if (t->dtype == GP_DTYPE_BF16) return gp_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == GP_DTYPE_F16) return gp_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

void gp_tensor_store(gp_dtype d, uint8_t *dst, int64_t i, float v) {
    if (d == GP_DTYPE_BF16) ((uint16_t *)dst)[i] = gp_f32_to_bf16(v);
    else if (d == GP_DTYPE_F16) ((uint16_t *)dst)[i] = gp_f32_to_f16(v);
    else ((float *)dst)[i] = v;
}

/* mlx-lm quantizes linears and embeddings (2-D weights) whose input size the group divides; the vision tower and
 * projector of a multimodal checkpoint are copied. */
static int quantizable(const gp_tensor_view *t, int32_t gs) {
    size_t n = strlen(t->name);
    int matrix = t->ndim == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight") &&
                 (t->dtype == GP_DTYPE_F32 || t->dtype == GP_DTYPE_BF16 || t->dtype == GP_DTYPE_F16);
    int language = !strstr(t->name, "vision_tower") && !strstr(t->name, "multi_modal_projector");
    return matrix && language && t->shape[1] % gs == 0 &&
           (strstr(t->name, "_proj.weight") || strstr(t->name, "embed_tokens.weight") ||
            strstr(t->name, "lm_head.weight"));
}

gp_status gp_quantize_rows(const float *w, int64_t R, int64_t C, int32_t bits, int32_t gs, gp_dtype aux,
                           uint8_t *parts[3]) {
    const int64_t G = C / gs, gb = (int64_t)gs * bits / 8, es = (int64_t)gp_dtype_size(aux);
    parts[0] = gp_malloc((size_t)(R * C * bits / 8), 1);
    parts[1] = gp_malloc((size_t)(R * G), (size_t)es);
    parts[2] = gp_malloc((size_t)(R * G), (size_t)es);
    uint8_t *q = gp_malloc((size_t)gs, 1);
    gp_status s = parts[0] && parts[1] && parts[2] && q ? GP_OK : GP_ERR_NOMEM;
    for (int64_t r = 0; !s && r < R; r++)
        for (int64_t g = 0; g < G; g++) {
            float sc, bi;
            gp_quantize_group(w + r * C + g * gs, gs, bits, q, &sc, &bi);
            gp_quant_pack(q, gs, bits, parts[0] + r * C * bits / 8 + g * gb);
            gp_tensor_store(aux, parts[1], r * G + g, sc);
            gp_tensor_store(aux, parts[2], r * G + g, bi);
        }
    free(q);
    return s;
}

static gp_status compute(void *user, int32_t src, uint8_t *parts[GP_RW_PARTS]) {
    const qjob *j = user;
    const gp_tensor_view *t = gp_st_at(j->st, src);
    const int64_t R = t->shape[0], C = t->shape[1];
    float *w = gp_malloc((size_t)(R * C), sizeof(float));
    if (!w) return GP_ERR_NOMEM;
    for (int64_t i = 0; i < R * C; i++) w[i] = gp_tensor_elem(t, i);
    gp_status s = gp_quantize_rows(w, R, C, j->bits, j->gs, t->dtype, parts);
    free(w);
    return s;
}

/* The output tensor list: per source tensor in order, a copy or weight + scales + biases (names in *names). */
static gp_status plan(const qjob *j, gp_rw_out **out, int32_t *n_out, char ***names) {
    const int32_t n = gp_st_count(j->st);
    *out = gp_calloc((size_t)n * 3 + 1, sizeof **out);
    *names = gp_calloc((size_t)n * 2 + 1, sizeof **names);
    if (!*out || !*names) return GP_ERR_NOMEM;
    int32_t k = 0, nn = 0;
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *t = gp_st_at(j->st, i);
        if (t->dtype == GP_DTYPE_U32)
            return gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor '%s' is already quantized (U32)", t->file, t->name);
        gp_rw_out o = {{t->name, t->dtype, t->ndim, {0}, NULL}, i, -1};
        memcpy(o.t.shape, t->shape, sizeof o.t.shape);
        if (!quantizable(t, j->gs)) {
            (*out)[k++] = o;
            continue;
        }
        const size_t base = strlen(t->name) - 7;
        char *sn = (*names)[nn++] = gp_malloc(base + 8, 1), *bn = (*names)[nn++] = gp_malloc(base + 8, 1);
        if (!sn || !bn) return GP_ERR_NOMEM;
        snprintf(sn, base + 8, "%.*s.scales", (int)base, t->name);
        snprintf(bn, base + 8, "%.*s.biases", (int)base, t->name);
        const int64_t R = t->shape[0], C = t->shape[1];
        (*out)[k++] = (gp_rw_out){{t->name, GP_DTYPE_U32, 2, {R, C * j->bits / 32}, NULL}, i, 0};
        (*out)[k++] = (gp_rw_out){{sn, t->dtype, 2, {R, C / j->gs}, NULL}, i, 1};
        (*out)[k++] = (gp_rw_out){{bn, t->dtype, 2, {R, C / j->gs}, NULL}, i, 2};
    }
    *n_out = k;
    return GP_OK;
}

/* config.json: refuses an already quantized model, adds "quantization" and "quantization_config". */
static gp_status add_quant(cJSON *root, const char *path, void *user) {
    const gp_quantize_params *p = user;
    if (cJSON_HasObjectItem(root, "quantization") || cJSON_HasObjectItem(root, "quantization_config"))
        return gp_set_error(GP_ERR_INVALID_ARG, "%s: the model is already quantized (field 'quantization')", path);
    for (int k = 0; k < 2; k++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "group_size", p->group_size);
        cJSON_AddNumberToObject(q, "bits", p->bits);
        cJSON_AddStringToObject(q, "mode", "affine");
        cJSON_AddItemToObject(root, k ? "quantization_config" : "quantization", q);
    }
    return GP_OK;
}

gp_status gp_model_quantize(const char *dir, const char *out_dir, const gp_quantize_params *p) {
    if (!dir || !out_dir || !p) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: NULL argument");
    if (p->bits != 2 && p->bits != 3 && p->bits != 4 && p->bits != 5 && p->bits != 6 && p->bits != 8)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: bits = %d (2, 3, 4, 5, 6 or 8)", (int)p->bits);
    if (p->group_size != 32 && p->group_size != 64 && p->group_size != 128)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: group_size = %d (32, 64 or 128)",
                            (int)p->group_size);
    char *target = NULL, **names = NULL;
    gp_st_set *st = NULL;
    gp_rw_out *out = NULL;
    int32_t n_out = 0;
    gp_status s = gp_rw_prepare(out_dir, &target);
    if (!s) s = gp_st_open_dir(dir, &st);
    qjob j = {st, p->bits, p->group_size};
    if (!s) s = plan(&j, &out, &n_out, &names);
    if (!s) s = gp_rw_config(dir, out_dir, add_quant, (void *)p);
    if (!s) s = gp_rw_safetensors(target, st, out, n_out, compute, &j, p->progress, p->progress_user_data);
    if (!s) s = gp_rw_copy_files(dir, out_dir);
    for (int32_t i = 0; names && names[i]; i++) free(names[i]);
    free(names), free(out), free(target);
    gp_st_close(st);
    return s;
}
