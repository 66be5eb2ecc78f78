/* quantize.c — gp_model_quantize: an MLX-quantized copy of a model folder (what mlx_lm.convert -q writes), streamed
 * through gp_st_write_stream one tensor at a time: each quantizable matrix becomes weight (packed uint32) + scales +
 * biases computed by gp_quantize_group (quant.c), everything else is copied byte for byte; config.json gains the
 * "quantization" settings; the tokenizer and generation files are copied. */
#include "genparity.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/quant.h"
#include "util/util.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { K_COPY, K_WEIGHT, K_SCALES, K_BIASES };

typedef struct qjob {
    const gp_st_set *st;
    int32_t bits, gs, n_src;
    int32_t *src;          /* [n_out] source tensor of each output tensor */
    uint8_t *kind;         /* [n_out] K_* */
    int32_t cur;           /* source tensor whose outputs are in the buffers (-1: none) */
    uint8_t *packed;       /* [rows * cols * bits / 8] */
    uint8_t *scales, *biases; /* [rows * cols / gs] in the weight's dtype */
    float *row;            /* [cols] */
    uint8_t *q;            /* [gs] */
    const gp_quantize_params *p;
} qjob;

static float elem(const gp_tensor_view *t, int64_t i) {
    if (t->dtype == GP_DTYPE_BF16) return gp_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == GP_DTYPE_F16) return gp_f16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

static void store(gp_dtype d, uint8_t *dst, int64_t i, float v) {
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

/* Quantizes source tensor s into the job's buffers (replacing the previous one). */
static gp_status compute(qjob *j, int32_t s) {
    const gp_tensor_view *t = gp_st_at(j->st, s);
    const int64_t R = t->shape[0], C = t->shape[1], G = C / j->gs, es = (int64_t)gp_dtype_size(t->dtype);
    free(j->packed), free(j->scales), free(j->biases), free(j->row);
    j->packed = gp_malloc((size_t)(R * C * j->bits / 8), 1);
    j->scales = gp_malloc((size_t)(R * G), (size_t)es);
    j->biases = gp_malloc((size_t)(R * G), (size_t)es);
    j->row = gp_malloc((size_t)C, sizeof(float));
    j->cur = -1;
    if (!j->packed || !j->scales || !j->biases || !j->row) return GP_ERR_NOMEM;
    const int64_t gb = (int64_t)j->gs * j->bits / 8;
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < C; c++) j->row[c] = elem(t, r * C + c);
        for (int64_t g = 0; g < G; g++) {
            float sc, bi;
            gp_quantize_group(j->row + g * j->gs, j->gs, j->bits, j->q, &sc, &bi);
            gp_quant_pack(j->q, j->gs, j->bits, j->packed + r * C * j->bits / 8 + g * gb);
            store(t->dtype, j->scales, r * G + g, sc);
            store(t->dtype, j->biases, r * G + g, bi);
        }
    }
    j->cur = s;
    if (j->p->progress) j->p->progress((float)(s + 1) / (float)j->n_src, j->p->progress_user_data);
    return GP_OK;
}

static gp_status fill(void *user, int32_t i, uint64_t off, void *buf, size_t len) {
    qjob *j = user;
    const gp_tensor_view *t = gp_st_at(j->st, j->src[i]);
    if (j->kind[i] == K_COPY) {
        memcpy(buf, (const uint8_t *)t->data + off, len);
        if (off + len == t->nbytes && j->p->progress)
            j->p->progress((float)(j->src[i] + 1) / (float)j->n_src, j->p->progress_user_data);
        return GP_OK;
    }
    if (j->cur != j->src[i]) {
        gp_status s = compute(j, j->src[i]);
        if (s) return s;
    }
    const uint8_t *from = j->kind[i] == K_WEIGHT ? j->packed : j->kind[i] == K_SCALES ? j->scales : j->biases;
    memcpy(buf, from + off, len);
    return GP_OK;
}

/* The output tensor list: per source tensor in order, a copy or weight + scales + biases. */
static gp_status plan(qjob *j, gp_st_write_tensor **out, int32_t *n_out, char ***names) {
    const int32_t n = gp_st_count(j->st);
    *out = gp_calloc((size_t)n * 3, sizeof **out);
    *names = gp_calloc((size_t)n * 2 + 1, sizeof **names);
    j->src = gp_calloc((size_t)n * 3, sizeof *j->src);
    j->kind = gp_calloc((size_t)n * 3, 1);
    if (!*out || !*names || !j->src || !j->kind) return GP_ERR_NOMEM;
    int32_t k = 0, nn = 0;
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *t = gp_st_at(j->st, i);
        if (t->dtype == GP_DTYPE_U32)
            return gp_set_error(GP_ERR_INVALID_ARG, "%s: tensor '%s' is already quantized (U32)", t->file, t->name);
        gp_st_write_tensor w = {t->name, t->dtype, t->ndim, {0}, NULL};
        memcpy(w.shape, t->shape, sizeof w.shape);
        if (!quantizable(t, j->gs)) {
            j->src[k] = i, j->kind[k] = K_COPY, (*out)[k++] = w;
            continue;
        }
        const size_t base = strlen(t->name) - 7;
        char *sn = (*names)[nn++] = gp_malloc(base + 8, 1), *bn = (*names)[nn++] = gp_malloc(base + 8, 1);
        if (!sn || !bn) return GP_ERR_NOMEM;
        snprintf(sn, base + 8, "%.*s.scales", (int)base, t->name);
        snprintf(bn, base + 8, "%.*s.biases", (int)base, t->name);
        const int64_t R = t->shape[0], C = t->shape[1];
        j->src[k] = i, j->kind[k] = K_WEIGHT, (*out)[k++] = (gp_st_write_tensor){t->name, GP_DTYPE_U32, 2, {R, C * j->bits / 32}, NULL};
        j->src[k] = i, j->kind[k] = K_SCALES, (*out)[k++] = (gp_st_write_tensor){sn, t->dtype, 2, {R, C / j->gs}, NULL};
        j->src[k] = i, j->kind[k] = K_BIASES, (*out)[k++] = (gp_st_write_tensor){bn, t->dtype, 2, {R, C / j->gs}, NULL};
    }
    *n_out = k;
    return GP_OK;
}

static gp_status write_bytes(const char *path, const void *data, size_t len) {
    int fd;
    gp_status s = gp_open_write(path, &fd);
    if (s) return s;
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return gp_set_error(GP_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w, len -= (size_t)w;
    }
    return close(fd) ? gp_set_error(GP_ERR_IO, "%s: close failed: %s", path, strerror(errno)) : GP_OK;
}

/* out_dir/config.json = dir's with "quantization" and "quantization_config" {group_size, bits, mode}. */
static gp_status write_config(const char *dir, const char *out_dir, const gp_quantize_params *p) {
    char *in = gp_path_join(dir, "config.json"), *out = gp_path_join(out_dir, "config.json");
    cJSON *root = NULL;
    gp_status s = in && out ? gp_json_load(in, GP_JSON_CONFIG_BYTES, GP_JSON_NO_DUP_KEYS, &root) : GP_ERR_NOMEM;
    if (!s && (!cJSON_IsObject(root) || cJSON_HasObjectItem(root, "quantization")))
        s = gp_set_error(GP_ERR_INVALID_ARG, "%s: %s", in, cJSON_IsObject(root) ? "the model is already quantized "
                         "(field 'quantization')" : "top level must be a JSON object");
    for (int k = 0; !s && k < 2; k++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "group_size", p->group_size);
        cJSON_AddNumberToObject(q, "bits", p->bits);
        cJSON_AddStringToObject(q, "mode", "affine");
        cJSON_AddItemToObject(root, k ? "quantization_config" : "quantization", q);
    }
    char *text = s ? NULL : cJSON_Print(root);
    if (!s) s = text ? write_bytes(out, text, strlen(text)) : GP_ERR_NOMEM;
    free(text), free(in), free(out);
    cJSON_Delete(root);
    return s;
}

/* Copies every other regular file of dir (tokenizer, generation config, chat template ...) into out_dir. */
static gp_status copy_files(const char *dir, const char *out_dir) {
    DIR *d = opendir(dir);
    if (!d) return gp_set_error(GP_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    gp_status s = GP_OK;
    for (struct dirent *e; !s && (e = readdir(d));) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
            (len > 12 && !strcmp(n + len - 12, ".safetensors")))
            continue;
        char *from = gp_path_join(dir, n), *to = gp_path_join(out_dir, n), *data = NULL;
        struct stat st;
        size_t size = 0;
        if (!from || !to) s = GP_ERR_NOMEM;
        else if (stat(from, &st) == 0 && S_ISREG(st.st_mode) && !(s = gp_read_file(from, (size_t)1 << 30, &data, &size)))
            s = write_bytes(to, data, size);
        free(data), free(from), free(to);
    }
    closedir(d);
    return s;
}

gp_status gp_model_quantize(const char *dir, const char *out_dir, const gp_quantize_params *p) {
    if (!dir || !out_dir || !p) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: NULL argument");
    if (p->bits != 2 && p->bits != 3 && p->bits != 4 && p->bits != 5 && p->bits != 6 && p->bits != 8)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: bits = %d (2, 3, 4, 5, 6 or 8)", (int)p->bits);
    if (p->group_size != 32 && p->group_size != 64 && p->group_size != 128)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_quantize: group_size = %d (32, 64 or 128)",
                            (int)p->group_size);
    char *target = gp_path_join(out_dir, "model.safetensors");
    if (!target) return GP_ERR_NOMEM;
    gp_status s = GP_OK;
    if (gp_file_exists(target))
        s = gp_set_error(GP_ERR_INVALID_ARG, "%s: already holds a model (model.safetensors); choose an empty folder",
                         out_dir);
    else if (mkdir(out_dir, 0755) && errno != EEXIST)
        s = gp_set_error(GP_ERR_IO, "%s: cannot create: %s", out_dir, strerror(errno));
    gp_st_set *st = NULL;
    qjob j = {.bits = p->bits, .gs = p->group_size, .cur = -1, .p = p};
    gp_st_write_tensor *out = NULL;
    char **names = NULL;
    int32_t n_out = 0;
    if (!s) s = gp_st_open_dir(dir, &st);
    if (!s) {
        j.st = st;
        j.n_src = gp_st_count(st);
        j.q = gp_malloc((size_t)p->group_size, 1);
        s = j.q ? plan(&j, &out, &n_out, &names) : GP_ERR_NOMEM;
    }
    if (!s) s = write_config(dir, out_dir, p);
    if (!s) s = gp_st_write_stream(target, out, n_out, NULL, NULL, 0, fill, &j);
    if (!s) s = copy_files(dir, out_dir);
    for (int32_t i = 0; names && names[i]; i++) free(names[i]);
    free(names), free(out), free(j.src), free(j.kind), free(j.packed), free(j.scales), free(j.biases), free(j.row);
    free(j.q), free(target);
    gp_st_close(st);
    return s;
}
