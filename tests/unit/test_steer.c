/* test_steer.c — steering vectors from .npy / raw / safetensors files (and their bad forms), schedule
 * coefficients, several hooks adding up, and hooks staying in effect through the KV cache. */
#include "fixtures.h"
#include "steer/steer.h"
#include "test.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char *write_bytes(const char *name, const void *data, size_t len) {
    char *dir = gp_test_tmpdir();
    char *p = gp_path_join(dir, name);
    free(dir);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return p;
}

/* A .npy v1 file: header dict padded with spaces to a multiple of 64, ending in '\n'. */
static char *write_npy(const char *descr, const char *shape, const void *data, size_t len, const char *magic) {
    char hdr[256];
    int k = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    while ((10 + k + 1) % 64) hdr[k++] = ' ';
    hdr[k++] = '\n';
    unsigned char *buf = malloc(10 + (size_t)k + len);
    memcpy(buf, magic, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (unsigned char)(k & 255);
    buf[9] = (unsigned char)(k >> 8);
    memcpy(buf + 10, hdr, (size_t)k);
    memcpy(buf + 10 + k, data, len);
    char *p = write_bytes("v.npy", buf, 10 + (size_t)k + len);
    free(buf);
    return p;
}

TEST(steer_vector_files_load) {
    float v[4] = {1.5f, -2.0f, 0.25f, 3.0f};
    double d[4] = {1.5, -2.0, 0.25, 3.0};
    float *out;
    int32_t n;
    char *p = write_npy("<f4", "(4,)", v, sizeof v, "\x93NUMPY");
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_OK);
    CHECK(n == 4 && !memcmp(out, v, sizeof v));
    gp_free(out);
    free(p);
    p = write_npy("<f8", "(1, 4)", d, sizeof d, "\x93NUMPY");
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_OK);
    CHECK(n == 4 && !memcmp(out, v, sizeof v));
    gp_free(out);
    free(p);
    p = write_bytes("v.f32", v, sizeof v);
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_OK);
    CHECK(n == 4 && !memcmp(out, v, sizeof v));
    gp_free(out);
    free(p);
    char *dir = gp_test_tmpdir();
    char *st = gp_path_join(dir, "v.safetensors");
    gp_st_write_tensor t = {.name = "persona", .dtype = GP_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v};
    CHECK_STATUS(gp_st_write(st, &t, 1, NULL, NULL, 0), GP_OK);
    CHECK_STATUS(gp_steer_vector_load(st, &out, &n), GP_OK); /* single tensor: name optional */
    CHECK(n == 4 && !memcmp(out, v, sizeof v));
    gp_free(out);
    char spec[1024];
    snprintf(spec, sizeof spec, "%s:persona", st);
    CHECK_STATUS(gp_steer_vector_load(spec, &out, &n), GP_OK);
    gp_free(out);
    snprintf(spec, sizeof spec, "%s:nope", st);
    CHECK_STATUS(gp_steer_vector_load(spec, &out, &n), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "nope") != NULL);
    free(st);
    free(dir);
}

TEST(steer_vector_bad_files) {
    float v[4] = {1, 2, 3, 4};
    float *out = NULL;
    int32_t n;
    char *p = write_npy("<f4", "(4,)", v, sizeof v, "\x93NUMPX");
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), p) && strstr(gp_errmsg(), "magic"));
    free(p);
    p = write_npy(">f4", "(4,)", v, sizeof v, "\x93NUMPY");
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_ERR_UNSUPPORTED);
    CHECK(strstr(gp_errmsg(), "descr") != NULL);
    free(p);
    p = write_npy("<f4", "(8,)", v, sizeof v, "\x93NUMPY"); /* shape says 8, data holds 4 */
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_ERR_FORMAT);
    free(p);
    p = write_npy("<f4", "(2, 2)", v, sizeof v, "\x93NUMPY");
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "shape") != NULL);
    free(p);
    p = write_bytes("v.f32", v, 7);
    CHECK_STATUS(gp_steer_vector_load(p, &out, &n), GP_ERR_FORMAT);
    free(p);
    CHECK_STATUS(gp_steer_vector_load("/nonexistent/v.npy", &out, &n), GP_ERR_IO);
    CHECK(out == NULL);
}

static float half_alpha(int32_t step, void *ud) { return step == 0 ? *(float *)ud : 0.5f * *(float *)ud; }

TEST(steer_schedules) {
    gp_steer_hook h = {.alpha = 4.0f, .schedule = GP_STEER_RAMP, .steps = 4};
    CHECK(gp_steer_coef(&h, 0) == 1.0f && gp_steer_coef(&h, 2) == 3.0f && gp_steer_coef(&h, 9) == 4.0f);
    h.schedule = GP_STEER_WARMUP;
    h.steps = 2;
    CHECK(gp_steer_coef(&h, 0) == 0.0f && gp_steer_coef(&h, 1) == 0.0f && gp_steer_coef(&h, 2) == 4.0f);
    float a = 2.0f;
    h.schedule = GP_STEER_CALLBACK;
    h.fn = half_alpha;
    h.user_data = &a;
    CHECK(gp_steer_coef(&h, 0) == 2.0f && gp_steer_coef(&h, 5) == 1.0f);
    h.schedule = GP_STEER_CONSTANT;
    CHECK(gp_steer_coef(&h, 7) == 4.0f);
}

/* Two hooks of alpha/2 on one layer equal one hook of alpha; a prompt prefilled with a hook stays steered in the
 * cache after the hook is removed; bad hooks are refused. */
TEST(steer_hooks_with_cache) {
    gp_model *m = fx_load_model("tiny-llama", 0);
    if (!m) return;
    const int32_t V = gp_model_n_vocab(m), E = gp_model_n_embd(m);
    float *vec = malloc((size_t)E * sizeof(float));
    for (int i = 0; i < E; i++) vec[i] = (float)sin(i * 0.7) * 0.5f;
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    float *plain = malloc((size_t)V * sizeof(float));
    int32_t ids[6] = {1, 450, 1701, 338, 263, 1243}, next = 29892;
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, NULL, &c) == GP_OK);
    gp_steer_hook h = {.layer = 0, .vector = vec, .alpha = 3.0f};
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, ids, 6, NULL, a), GP_OK);
    gp_ctx_steer_clear(c);
    gp_ctx_reset(c);
    h.alpha = 1.5f;
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, ids, 6, NULL, b), GP_OK);
    double d = fx_max_abs_diff(a, b, (size_t)V);
    NOTE("two hooks of 1.5 vs one of 3.0: max|Δ| = %.3g (tol 1e-4)", d);
    CHECK(d < 1e-4);
    /* steered prefill, then an unsteered decode step, vs a fully unsteered run */
    gp_ctx_steer_clear(c);
    CHECK_STATUS(gp_ctx_eval(c, &next, 1, NULL, a), GP_OK);
    gp_ctx_reset(c);
    CHECK_STATUS(gp_ctx_eval(c, ids, 6, NULL, plain), GP_OK);
    CHECK_STATUS(gp_ctx_eval(c, &next, 1, NULL, plain), GP_OK);
    CHECK(fx_max_abs_diff(a, plain, (size_t)V) > 1e-3);
    h.layer = gp_model_n_layers(m);
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_ERR_RANGE);
    h.layer = 0;
    h.schedule = GP_STEER_RAMP;
    h.steps = 0;
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_ERR_INVALID_ARG);
    gp_ctx_free(c);
    free(vec);
    free(a);
    free(b);
    free(plain);
    gp_model_free(m);
}
