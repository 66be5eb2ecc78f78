/* steer.c — residual-injection hooks and their schedules, and loading steering vectors from safetensors, .npy or
 * raw float32 files. */
#include "steer/steer.h"
#include "io/safetensors.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

float gp_steer_coef(const gp_steer_hook *h, int32_t s) {
    switch (h->schedule) {
    case GP_STEER_CONSTANT: return h->alpha;
    case GP_STEER_RAMP: {
        float f = (float)(s + 1) / (float)h->steps;
        return h->alpha * (f < 1.0f ? f : 1.0f);
    }
    case GP_STEER_WARMUP: return s < h->steps ? 0.0f : h->alpha;
    case GP_STEER_CALLBACK: return h->fn ? h->fn(s, h->user_data) : 0.0f;
    }
    return 0.0f;
}

void gp_steer_apply(const gp_steer_state *st, gp_ws *ws, int32_t layer, float *x, int32_t n, int32_t E) {
    for (int32_t k = 0; k < st->n_hooks; k++) {
        const gp_steer_active *a = &st->hooks[k];
        if (a->h.layer != layer) continue;
        float c = gp_steer_coef(&a->h, st->step);
        if (c == 0.0f) continue;
        ws->be->ops->add_row(ws, x, a->dev, c, n, E);
    }
}

gp_status gp_steer_state_add(gp_steer_state *st, const gp_steer_hook *hook, int32_t n_layers, int32_t E) {
    if (!hook || !hook->vector) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: hook and vector are required");
    if (hook->layer < 0 || hook->layer >= n_layers)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_steer_add: layer %d outside [0, %d)", hook->layer, n_layers);
    if ((hook->schedule == GP_STEER_RAMP || hook->schedule == GP_STEER_WARMUP) && hook->steps < 1)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: ramp/warmup schedules need steps >= 1");
    if (hook->schedule == GP_STEER_CALLBACK && !hook->fn)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: the callback schedule needs fn");
    if ((unsigned)hook->schedule > GP_STEER_CALLBACK)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: unknown schedule %d", (int)hook->schedule);
    if (hook->schedule != GP_STEER_CALLBACK && !isfinite(hook->alpha))
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: alpha is %s; it must be finite",
                            isnan(hook->alpha) ? "NaN" : "infinite");
    for (int32_t i = 0; i < E; i++)
        if (!isfinite(hook->vector[i]))
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: vector entry %d is not finite", (int)i);
    if (st->n_hooks == st->cap_hooks) {
        int32_t cap = st->cap_hooks ? 2 * st->cap_hooks : 4;
        gp_steer_active *h = gp_realloc(st->hooks, (size_t)cap, sizeof *h);
        if (!h) return GP_ERR_NOMEM;
        st->hooks = h;
        st->cap_hooks = cap;
    }
    float *v = gp_malloc((size_t)E, sizeof(float));
    if (!v) return GP_ERR_NOMEM;
    memcpy(v, hook->vector, (size_t)E * sizeof(float));
    float *dev = v;
    if (st->be && !st->be->host_memory) {
        if (!(dev = st->be->ops->alloc(st->be, (size_t)E * sizeof(float)))) {
            free(v);
            return GP_ERR_NOMEM;
        }
        st->be->ops->upload(st->be, dev, v, (size_t)E * sizeof(float));
    }
    st->epoch++;
    gp_steer_active *a = &st->hooks[st->n_hooks++];
    a->h = *hook;
    a->h.vector = v;
    a->vec = v;
    a->dev = dev;
    return GP_OK;
}

void gp_steer_state_clear(gp_steer_state *st) {
    if (st->n_hooks) st->epoch++;
    for (int32_t k = 0; k < st->n_hooks; k++) {
        if (st->hooks[k].dev != st->hooks[k].vec) st->be->ops->dealloc(st->be, st->hooks[k].dev);
        free(st->hooks[k].vec);
    }
    free(st->hooks);
    if (st->be) st->be->ops->dealloc(st->be, st->bias);
    else free(st->bias);
    st->hooks = NULL;
    st->n_hooks = st->cap_hooks = 0;
    st->bias = NULL;
}

/* ---- vector files ---- */

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* double -> float without undefined behaviour: values outside float's range become +-inf (then refused). */
static float f64_to_f32(double d) {
    if (d != d) return NAN;
    if (d > FLT_MAX) return INFINITY;
    if (d < -FLT_MAX) return -INFINITY;
    return (float)d;
}

/* Refuses NaN and infinite entries: they would poison every logit of every later position. */
static gp_status check_finite(const char *path, const float *v, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return gp_set_error(GP_ERR_FORMAT, "%s: entry %d of the steering vector is %s (after conversion to "
                                "float32); steering vectors must be finite", path, (int)i, isnan(v[i]) ? "NaN" : "infinite");
    return GP_OK;
}

static gp_status load_safetensors(const char *path, const char *tensor, float **vec, int32_t *n) {
    gp_st_set *st;
    gp_status s = gp_st_open_file(path, &st);
    if (s) return s;
    const gp_tensor_view *t = NULL;
    if (tensor) t = gp_st_find(st, tensor);
    else if (gp_st_count(st) == 1) t = gp_st_at(st, 0);
    if (!t) {
        s = tensor ? gp_set_error(GP_ERR_MISSING, "%s: tensor '%s' not found", path, tensor)
                   : gp_set_error(GP_ERR_INVALID_ARG, "%s: holds %d tensors; name one as FILE:TENSOR", path,
                                  gp_st_count(st));
        gp_st_close(st);
        return s;
    }
    /* the error is formatted before gp_st_close: t->name lives in the closed set */
    int rows1 = t->ndim == 1 || (t->ndim == 2 && t->shape[0] == 1);
    if (!rows1 || t->n_elems == 0 || t->n_elems > (1u << 24)) {
        s = gp_set_error(GP_ERR_FORMAT, "%s: tensor '%s' must be a vector [n] or [1, n] of at most 2^24 values",
                         path, t->name);
        gp_st_close(st);
        return s;
    }
    if (t->dtype != GP_DTYPE_F32 && t->dtype != GP_DTYPE_BF16 && t->dtype != GP_DTYPE_F16 && t->dtype != GP_DTYPE_F64) {
        s = gp_set_error(GP_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not a float type", path, t->name,
                         gp_dtype_name(t->dtype));
        gp_st_close(st);
        return s;
    }
    float *v = gp_malloc((size_t)t->n_elems, sizeof(float));
    if (!v) {
        gp_st_close(st);
        return GP_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < t->n_elems; i++) {
        switch (t->dtype) {
        case GP_DTYPE_F32: memcpy(&v[i], (const char *)t->data + 4 * i, 4); break;
        case GP_DTYPE_F64: {
            double d;
            memcpy(&d, (const char *)t->data + 8 * i, 8);
            v[i] = f64_to_f32(d);
            break;
        }
        case GP_DTYPE_BF16: v[i] = gp_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        default: v[i] = gp_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        }
    }
    *vec = v;
    *n = (int32_t)t->n_elems;
    gp_st_close(st);
    return GP_OK;
}

#define NPY_MAX_HEADER (1 << 20)

static gp_status npy_parse(const char *path, const char *hdr, const char *d, size_t dlen, float **vec, int32_t *n);

/* NumPy .npy v1/v2/v3: magic, version, header length, a Python dict literal header, then the data. */
static gp_status load_npy(const char *path, const char *data, size_t len, float **vec, int32_t *n) {
    if (len < 10 || memcmp(data, "\x93NUMPY", 6))
        return gp_set_error(GP_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
    size_t hl, off;
    if (data[6] == 1) {
        hl = (uint8_t)data[8] | (size_t)(uint8_t)data[9] << 8;
        off = 10;
    } else if (data[6] == 2 || data[6] == 3) {
        if (len < 12) return gp_set_error(GP_ERR_FORMAT, "%s: truncated .npy header", path);
        hl = (uint8_t)data[8] | (size_t)(uint8_t)data[9] << 8 | (size_t)(uint8_t)data[10] << 16 |
             (size_t)(uint8_t)data[11] << 24;
        off = 12;
    } else return gp_set_error(GP_ERR_UNSUPPORTED, "%s: .npy version %d is not supported", path, data[6]);
    if (hl > len - off) return gp_set_error(GP_ERR_FORMAT, "%s: .npy header length past the end of the file", path);
    if (hl > NPY_MAX_HEADER)
        return gp_set_error(GP_ERR_FORMAT, "%s: .npy header of %zu bytes is over the limit of %d", path, hl,
                            NPY_MAX_HEADER);
    char *hdr = gp_malloc(hl + 1, 1); /* v2/v3 headers may exceed 64 KiB in principle; numpy pads them freely */
    if (!hdr) return GP_ERR_NOMEM;
    memcpy(hdr, data + off, hl);
    hdr[hl] = 0;
    gp_status s = npy_parse(path, hdr, data + off + hl, len - off - hl, vec, n);
    free(hdr);
    return s;
}

/* Parses a .npy header dict (NUL-terminated) and converts the data that follows it. */
static gp_status npy_parse(const char *path, const char *hdr, const char *d, size_t dlen, float **vec, int32_t *n) {
    int f64;
    if (strstr(hdr, "'<f4'")) f64 = 0;
    else if (strstr(hdr, "'<f8'")) f64 = 1;
    else return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'descr': only little-endian float32/float64 are supported", path);
    if (strstr(hdr, "'fortran_order': True"))
        return gp_set_error(GP_ERR_UNSUPPORTED, "%s: field 'fortran_order': True is not supported", path);
    const char *sh = strstr(hdr, "'shape':");
    if (!sh) return gp_set_error(GP_ERR_FORMAT, "%s: field 'shape' missing in the .npy header", path);
    sh = strchr(sh, '(');
    long dims[2] = {0, 0};
    int nd = 0;
    const char *p = sh ? sh + 1 : NULL;
    while (p && *p && *p != ')' && nd < 3) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || d < 0) return gp_set_error(GP_ERR_FORMAT, "%s: field 'shape' is malformed", path);
        if (nd < 2) dims[nd] = d;
        nd++;
        p = end;
    }
    long count = nd == 1 ? dims[0] : nd == 2 && dims[0] == 1 ? dims[1] : -1;
    if (count <= 0 || count > (1L << 24))
        return gp_set_error(GP_ERR_FORMAT, "%s: field 'shape' must be (n,) or (1, n)", path);
    size_t es = f64 ? 8 : 4;
    if (dlen / es < (size_t)count)
        return gp_set_error(GP_ERR_FORMAT, "%s: .npy data shorter than its shape says", path);
    float *v = gp_malloc((size_t)count, sizeof(float));
    if (!v) return GP_ERR_NOMEM;
    for (long i = 0; i < count; i++) {
        if (f64) {
            double x;
            memcpy(&x, d + 8 * i, 8);
            v[i] = f64_to_f32(x);
        } else memcpy(&v[i], d + 4 * i, 4);
    }
    *vec = v;
    *n = (int32_t)count;
    return GP_OK;
}

/* On a non-finite entry: frees the vector and fails. */
static gp_status finish_vector(const char *spec, float **vec, int32_t *n) {
    gp_status s = check_finite(spec, *vec, *n);
    if (s) {
        free(*vec);
        *vec = NULL;
        *n = 0;
    }
    return s;
}

gp_status gp_steer_vector_load(const char *spec, float **vec, int32_t *n) {
    if (!spec || !vec || !n) return gp_set_error(GP_ERR_INVALID_ARG, "gp_steer_vector_load: bad arguments");
    *vec = NULL;
    *n = 0;
    /* FILE:TENSOR — the last ':' after ".safetensors" separates the tensor name */
    const char *st = strstr(spec, ".safetensors");
    if (st) {
        char *path = gp_strdup(spec);
        if (!path) return GP_ERR_NOMEM;
        char *colon = path + (st - spec) + strlen(".safetensors");
        const char *tensor = NULL;
        if (*colon == ':') {
            *colon = 0;
            tensor = colon + 1;
        }
        gp_status s = load_safetensors(path, tensor, vec, n);
        free(path);
        return s ? s : finish_vector(spec, vec, n);
    }
    char *data;
    size_t len;
    gp_status s = gp_read_file(spec, 1u << 28, &data, &len);
    if (s) return s;
    if (ends_with(spec, ".npy")) s = load_npy(spec, data, len, vec, n);
    else if (len == 0 || len % 4) s = gp_set_error(GP_ERR_FORMAT, "%s: a raw float32 file must be a non-empty multiple of 4 bytes", spec);
    else {
        float *v = gp_malloc(len / 4, sizeof(float));
        if (!v) s = GP_ERR_NOMEM;
        else {
            memcpy(v, data, len);
            *vec = v;
            *n = (int32_t)(len / 4);
        }
    }
    free(data);
    return s ? s : finish_vector(spec, vec, n);
}
