/* test_quant_bad.c — MLX affine quantized weights (GP_WFMT_QAFFINE) on a synthetic model: exactness (a quantized
 * folder gives bit-identical logits to a float32 folder of its dequantized weights, scale * q + bias in float32, for
 * every bit width) and every malformed quantized tensor or quantization config refused with a message naming the
 * tensor or field, nothing half-loaded.  The parity with mlx-lm itself is python/tests/test_quant.py. */
#include "genparity.h"
#include "io/safetensors.h"
#include "synth.h"
#include "test.h"
#include "util/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GS 16 /* the synthetic model's sizes are 16 and 32 */

static uint16_t to_bf16(float f) { /* round to nearest even (finite values) */
    union { float f; uint32_t u; } v = {f};
    return (uint16_t)((v.u + 0x7fff + ((v.u >> 16) & 1)) >> 16);
}

/* Quantizes row-major w [rows, cols] to bits: packed [rows, cols*bits/32] uint32, bf16 scales/biases, and the
 * dequantized float32 values deq (what every kernel must multiply). */
static void quantize(const float *w, int64_t rows, int64_t cols, int bits, uint32_t *packed, uint16_t *sc,
                     uint16_t *bi, float *deq) {
    const int64_t G = cols / GS, nb = cols * bits / 8;
    uint8_t *p = (uint8_t *)packed;
    memset(p, 0, (size_t)(rows * nb));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < G; g++) {
            const float *x = w + r * cols + g * GS;
            float lo = x[0], hi = x[0];
            for (int i = 1; i < GS; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
            sc[r * G + g] = to_bf16((hi - lo) / (float)((1 << bits) - 1));
            bi[r * G + g] = to_bf16(lo);
            const float s = gp_bf16_to_f32(sc[r * G + g]), b = gp_bf16_to_f32(bi[r * G + g]);
            for (int i = 0; i < GS; i++) {
                float qf = s > 0 ? (x[i] - b) / s + 0.5f : 0.0f;
                uint32_t q = qf < 0 ? 0 : qf > (float)((1 << bits) - 1) ? (uint32_t)((1 << bits) - 1) : (uint32_t)qf;
                const int64_t bit = (g * GS + i) * bits;
                for (int k = 0; k < bits; k++)
                    if (q >> k & 1) p[r * nb + (bit + k) / 8] |= (uint8_t)(1u << ((bit + k) % 8));
                deq[r * cols + g * GS + i] = s * (float)q + b;
            }
        }
}

static int write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    int rc = fputs(text, f) < 0;
    return fclose(f) != 0 || rc;
}

/* Which malformation write_pair applies to the quantized folder. */
enum { OK, BAD_WIDTH, BAD_SCALES_SHAPE, BAD_SCALES_DTYPE, NO_BIASES };

/* From a synthetic float32 model in src: qdir gets its projections quantized to `bits` (config quantization_json)
 * and ddir (may be NULL) the same model with the dequantized weights as float32.  Returns 0 on success. */
static int write_pair(const char *src, const char *qdir, const char *ddir, int bits, const char *quant_json, int bad) {
    char cfg[2600];
    const char *base = synth_llama_config(bits == 3 || bits == 5 ? "hidden_size" : NULL, "32");
    snprintf(cfg, sizeof cfg, "%.*s, \"quantization\": %s}", (int)strlen(base) - 1, base, quant_json);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    gp_st_set *st = NULL;
    if (gp_st_open_file(path, &st)) return 1;
    const int32_t n = gp_st_count(st);
    gp_st_write_tensor *q = calloc((size_t)n * 3, sizeof *q), *d = calloc((size_t)n, sizeof *d);
    void **bufs = calloc((size_t)n * 4, sizeof *bufs);
    char **names = calloc((size_t)n * 2, sizeof *names);
    int32_t nq = 0, nbuf = 0, nn = 0;
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *t = gp_st_at(st, i);
        d[i] = (gp_st_write_tensor){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->data};
        size_t len = strlen(t->name);
        if (t->ndim != 2 || len < 12 || strcmp(t->name + len - 12, "_proj.weight")) {
            q[nq++] = d[i];
            continue;
        }
        const int64_t R = t->shape[0], C = t->shape[1], G = C / GS;
        uint32_t *pk = calloc((size_t)(R * C * bits / 32), 4);
        uint16_t *sc = calloc((size_t)(R * (G + 1)), 2), *bi = calloc((size_t)(R * G), 2); /* + BAD_SCALES_SHAPE */
        float *deq = calloc((size_t)(R * C), 4);
        quantize(t->data, R, C, bits, pk, sc, bi, deq);
        bufs[nbuf++] = pk, bufs[nbuf++] = sc, bufs[nbuf++] = bi, bufs[nbuf++] = deq;
        d[i].data = deq;
        char *sn = names[nn++] = malloc(len + 2), *bn = names[nn++] = malloc(len + 2);
        snprintf(sn, len + 2, "%.*s.scales", (int)(len - 7), t->name);
        snprintf(bn, len + 2, "%.*s.biases", (int)(len - 7), t->name);
        const int first = !strcmp(t->name, "model.layers.0.self_attn.q_proj.weight");
        q[nq++] = (gp_st_write_tensor){t->name, GP_DTYPE_U32, 2, {R, C * bits / 32 - (first && bad == BAD_WIDTH)}, pk};
        q[nq++] = (gp_st_write_tensor){sn, first && bad == BAD_SCALES_DTYPE ? GP_DTYPE_I16 : GP_DTYPE_BF16, 2,
                                       {R, G + (first && bad == BAD_SCALES_SHAPE)}, sc};
        if (!(first && bad == NO_BIASES)) q[nq++] = (gp_st_write_tensor){bn, GP_DTYPE_BF16, 2, {R, G}, bi};
    }
    int rc = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", qdir);
    rc |= gp_st_write(path, q, nq, NULL, NULL, 0) != GP_OK;
    rc |= write_text(qdir, "config.json", cfg);
    if (ddir) {
        snprintf(path, sizeof path, "%s/model.safetensors", ddir);
        rc |= gp_st_write(path, d, n, NULL, NULL, 0) != GP_OK;
        rc |= write_text(ddir, "config.json", base);
    }
    for (int32_t i = 0; i < nbuf; i++) free(bufs[i]);
    for (int32_t i = 0; i < nn; i++) free(names[i]);
    free(bufs), free(names), free(q), free(d);
    gp_st_close(st);
    return rc;
}

/* Logits of ids through a fresh context of the model in dir (NULL on a load failure). */
static float *logits_of(const char *dir, const int32_t *ids, int32_t n) {
    gp_model *m = NULL;
    gp_ctx *c = NULL;
    float *out = malloc(64 * sizeof(float));
    if (gp_model_load(dir, NULL, &m) || gp_ctx_init(m, NULL, &c) || gp_ctx_eval(c, ids, n, NULL, out)) {
        NOTE("%s: %s", dir, gp_errmsg());
        free(out);
        out = NULL;
    }
    gp_ctx_free(c);
    gp_model_free(m);
    return out;
}

TEST(quant_exact_every_bits) {
    static const int BITS[] = {2, 3, 4, 5, 6, 8};
    const int32_t ids[5] = {1, 7, 33, 63, 2};
    char *src = gp_test_tmpdir(), *qd = gp_test_tmpdir(), *dd = gp_test_tmpdir();
    for (size_t i = 0; i < sizeof BITS / sizeof BITS[0]; i++) {
        /* 3- and 5-bit rows fill whole uint32 words from 32 columns on: those use hidden_size 32 */
        const int wide = BITS[i] == 3 || BITS[i] == 5;
        REQUIRE(synth_model(src, synth_llama_config(wide ? "hidden_size" : NULL, "32"), NULL, NULL) == 0);
        char qj[96];
        snprintf(qj, sizeof qj, "{\"bits\": %d, \"group_size\": %d, \"mode\": \"affine\"}", BITS[i], GS);
        REQUIRE(write_pair(src, qd, dd, BITS[i], qj, OK) == 0);
        float *a = logits_of(qd, ids, 5), *b = logits_of(dd, ids, 5);
        CHECK(a && b);
        if (a && b) {
            float worst = 0;
            for (int k = 0; k < 64; k++) worst = fabsf(a[k] - b[k]) > worst ? fabsf(a[k] - b[k]) : worst;
            NOTE("%d-bit: max |quantized - dequantized float32| = %g (must be 0: the same values, the same dot)",
                 BITS[i], worst);
            CHECK(memcmp(a, b, 64 * sizeof(float)) == 0);
        }
        free(a), free(b);
    }
    free(src), free(qd), free(dd);
}

/* Writes the quantized folder with malformation `bad` and config quantization `qj`; expects status want and a
 * message containing needle. */
static void expect_bad(int bad, const char *qj, gp_status want, const char *needle) {
    char *src = gp_test_tmpdir(), *qd = gp_test_tmpdir();
    REQUIRE(synth_model(src, synth_llama_config(NULL, NULL), NULL, NULL) == 0);
    REQUIRE(write_pair(src, qd, NULL, 4, qj, bad) == 0);
    gp_model *m = (gp_model *)1;
    CHECK_STATUS(gp_model_load(qd, NULL, &m), want);
    CHECK(m == NULL);
    if (!strstr(gp_errmsg(), needle)) {
        NOTE("message '%s' should contain '%s'", gp_errmsg(), needle);
        gp_test_failed = 1;
    }
    free(src), free(qd);
}

#define Q4 "{\"bits\": 4, \"group_size\": 16}"
TEST(quant_bad_packed_width) { expect_bad(BAD_WIDTH, Q4, GP_ERR_FORMAT, "model.layers.0.self_attn.q_proj.weight"); }
TEST(quant_bad_scales_shape) { expect_bad(BAD_SCALES_SHAPE, Q4, GP_ERR_FORMAT, "q_proj.scales"); }
TEST(quant_bad_scales_dtype) { expect_bad(BAD_SCALES_DTYPE, Q4, GP_ERR_FORMAT, "q_proj.scales"); }
TEST(quant_bad_missing_biases) { expect_bad(NO_BIASES, Q4, GP_ERR_MISSING, "q_proj.biases"); }
TEST(quant_bad_bits_mismatch) { /* config says 8 bits, the tensors are 4-bit */
    expect_bad(OK, "{\"bits\": 8, \"group_size\": 16}", GP_ERR_FORMAT, "q_proj.weight");
}
TEST(quant_bad_group_not_dividing) {
    expect_bad(OK, "{\"bits\": 4, \"group_size\": 32}", GP_ERR_FORMAT, "group_size 32 does not divide");
}
TEST(quant_bad_config_bits) { expect_bad(OK, "{\"bits\": 7, \"group_size\": 16}", GP_ERR_UNSUPPORTED, "bits"); }
TEST(quant_bad_config_mode) {
    expect_bad(OK, "{\"bits\": 4, \"group_size\": 16, \"mode\": \"mxfp4\"}", GP_ERR_UNSUPPORTED, "mode");
}
TEST(quant_bad_config_method) {
    expect_bad(OK, "{\"quant_method\": \"gptq\", \"bits\": 4, \"group_size\": 16}", GP_ERR_UNSUPPORTED,
               "quant_method");
}
TEST(quant_bad_config_absent) { expect_bad(OK, "null", GP_ERR_FORMAT, "does not quantize"); }
TEST(quant_bad_override_false) { /* a module the config leaves unquantized, stored quantized */
    expect_bad(OK, "{\"bits\": 4, \"group_size\": 16, \"model.layers.1.mlp.up_proj\": false}", GP_ERR_FORMAT,
               "model.layers.1.mlp.up_proj");
}
TEST(quant_bad_override_type) {
    expect_bad(OK, "{\"bits\": 4, \"group_size\": 16, \"model.layers.1.mlp.up_proj\": 3}", GP_ERR_FORMAT,
               "model.layers.1.mlp.up_proj");
}
TEST(quant_override_bits_apply) { /* an override with the tensors' own bits loads */
    char *src = gp_test_tmpdir(), *qd = gp_test_tmpdir();
    REQUIRE(synth_model(src, synth_llama_config(NULL, NULL), NULL, NULL) == 0);
    REQUIRE(write_pair(src, qd, NULL, 4,
                       "{\"bits\": 8, \"group_size\": 32, \"model.layers.0.self_attn.q_proj\": {\"bits\": 4, "
                       "\"group_size\": 16}}", OK) == 0);
    gp_model *m = NULL; /* every other module is 4-bit group 16 in the file but 8-bit group 32 in the config */
    CHECK_STATUS(gp_model_load(qd, NULL, &m), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "q_proj") == NULL); /* q_proj matched its override; the first error is elsewhere */
    gp_model_free(m);
    free(src), free(qd);
}

TEST(quantize_writes_a_loadable_folder) { /* gp_model_quantize on a float32 model; arithmetic = mlx: test_quantize.py */
    char *src = gp_test_tmpdir(), *out = gp_test_tmpdir(), path[600];
    REQUIRE(synth_model(src, synth_llama_config("hidden_size", "32"), NULL, NULL) == 0);
    snprintf(path, sizeof path, "%s/q", out);
    gp_quantize_params p = {.bits = 4, .group_size = 32};
    CHECK_STATUS(gp_model_quantize(src, path, &p), GP_OK);
    CHECK_STATUS(gp_model_quantize(src, path, &p), GP_ERR_INVALID_ARG); /* holds a model now */
    CHECK(strstr(gp_errmsg(), "already holds a model") != NULL);
    const int32_t ids[3] = {1, 7, 33};
    float *a = logits_of(path, ids, 3), *b = logits_of(src, ids, 3);
    CHECK(a && b);
    if (a && b) {
        float worst = 0;
        for (int k = 0; k < 64; k++) worst = fabsf(a[k] - b[k]) > worst ? fabsf(a[k] - b[k]) : worst;
        NOTE("4-bit group 32 vs float32: max |logit diff| %.3g (a sanity bound of 1: random weights)", worst);
        CHECK(worst < 1.0f);
    }
    free(a), free(b);
    char again[640];
    snprintf(again, sizeof again, "%s/qq", out);
    CHECK_STATUS(gp_model_quantize(path, again, &p), GP_ERR_INVALID_ARG); /* already quantized */
    p.bits = 7;
    CHECK_STATUS(gp_model_quantize(src, again, &p), GP_ERR_INVALID_ARG);
    p.bits = 4, p.group_size = 48;
    CHECK_STATUS(gp_model_quantize(src, again, &p), GP_ERR_INVALID_ARG);
    free(src), free(out);
}
