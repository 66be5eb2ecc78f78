/* test_backend_ops.c — every op of every available backend (BACKENDS below; a CUDA backend adds one line) against a
 * plain, obviously-correct reference written here in double precision, on random data with odd sizes (not
 * multiples of 16, one token and several), every weight format and LoRA terms; and each op gives the same bits
 * with 1 and 3 threads.  Data moves in and out only through the backend's alloc / upload / download, so the same
 * harness runs on a device backend.  Tolerances are stated per op and the maximum errors are printed.
 * (In the spirit of llama.cpp's test-backend-ops.) */
#include "backend_util.h"
#include "kernels/backend.h"
#include "test.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef gp_status (*backend_init_fn)(const gp_backend_params *p, gp_backend **out);

#ifdef GP_CUDA
static gp_status cuda_init(const gp_backend_params *p, gp_backend **out) { return gp_backend_cuda_init(0, out); }
#endif

static const struct {
    const char *name;
    backend_init_fn init;
} BACKENDS[] = {
    {"cpu", gp_backend_cpu_init},
#ifdef GP_CUDA
    {"cuda", cuda_init},
#endif
};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

/* Backend b, or NULL (a note, not a failure) when it cannot run here (a CUDA build without a GPU). */
static gp_backend *open_backend(size_t b) {
    gp_backend *be = NULL;
    if (BACKENDS[b].init(NULL, &be) == GP_OK) return be;
    NOTE("%s: not available here (%s)", BACKENDS[b].name, gp_errmsg());
    return NULL;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

static float *rand_vec(size_t n, uint32_t seed, float amp) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = amp * frand(&seed);
    return v;
}

/* A weight [rows, cols] in format f from float values v (rounded to the format), bound through the backend;
 * *exact receives the values the weight holds. *host_data must be freed after unbinding. */
static gp_wt make_weight(gp_backend *be, gp_wfmt f, const float *v, int64_t rows, int64_t cols, float *exact,
                         void **host_data) {
    const size_t n = (size_t)(rows * cols), es = f == GP_WFMT_F32 ? 4 : 2;
    void *d = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        if (f == GP_WFMT_F32) ((float *)d)[i] = exact[i] = v[i];
        else if (f == GP_WFMT_BF16) exact[i] = gp_bf16_to_f32(((uint16_t *)d)[i] = gp_f32_to_bf16(v[i]));
        else exact[i] = gp_f16_to_f32(((uint16_t *)d)[i] = gp_f32_to_f16(v[i]));
    }
    gp_wt view = gp_wt_dense(f, d, rows, cols), w;
    if (be->ops->bind_weight(be, &view, &w) != GP_OK) memset(&w, 0, sizeof w);
    *host_data = d;
    return w;
}

static gp_ws *make_ws(gp_backend *be, int32_t threads, int32_t tokens, int32_t keys, int32_t hd, int32_t rank) {
    gp_ws_params p = {.n_threads = threads, .max_tokens = tokens, .max_keys = keys, .head_dim = hd,
                      .max_lora_rank = rank};
    gp_ws *ws = NULL;
    if (be->ops->ws_init(be, &p, &ws) != GP_OK) return NULL;
    return ws;
}

/* ---- linear ---- */

/* One linear case: returns the max error relative to the magnitude of the terms; *same: 1 and 3 threads agree. */
static double linear_case(gp_backend *be, gp_wfmt f, int64_t out, int64_t in, int32_t n, int bias, int n_lora,
                          uint32_t seed, int *same) {
    const int32_t ranks[2] = {3, 1};
    const float scales[2] = {0.5f, -2.0f};
    float *wv = rand_vec((size_t)(out * in), seed, 1), *we = malloc(sizeof(float) * (size_t)(out * in));
    float *x = rand_vec((size_t)(n * in), seed + 1, 2), *bv = rand_vec((size_t)out, seed + 2, 1);
    void *hw, *hb, *ha[2], *hbb[2];
    float *be_bias = malloc(sizeof(float) * (size_t)out), *ae[2], *bee[2];
    gp_linear L = {0};
    gp_lora lora[2];
    L.w = make_weight(be, f, wv, out, in, we, &hw);
    hb = NULL;
    if (bias) L.bias = make_weight(be, GP_WFMT_F32, bv, 1, out, be_bias, &hb);
    int32_t rank_sum = 0;
    for (int i = 0; i < n_lora; i++) {
        float *a = rand_vec((size_t)(ranks[i] * in), seed + 10 + i, 1), *b = rand_vec((size_t)(out * ranks[i]), seed + 20 + i, 1);
        ae[i] = malloc(sizeof(float) * (size_t)(ranks[i] * in));
        bee[i] = malloc(sizeof(float) * (size_t)(out * ranks[i]));
        lora[i].a = make_weight(be, GP_WFMT_F32, a, ranks[i], in, ae[i], &ha[i]);
        lora[i].b = make_weight(be, GP_WFMT_F32, b, out, ranks[i], bee[i], &hbb[i]);
        lora[i].scale = scales[i];
        rank_sum += ranks[i];
        free(a);
        free(b);
    }
    L.lora = n_lora ? lora : NULL;
    L.n_lora = n_lora;
    float *dx = bu_dev_from(be, x, (size_t)(n * in)), *dy = be->ops->alloc(be, sizeof(float) * (size_t)(n * out));
    float *got[2] = {NULL, NULL};
    const int32_t threads[2] = {1, 3};
    for (int ti = 0; ti < 2; ti++) {
        gp_ws *ws = make_ws(be, threads[ti], n, 1, 1, rank_sum);
        be->ops->linear(ws, dy, dx, &L, n);
        got[ti] = bu_host_of(be, ws, dy, (size_t)(n * out));
        be->ops->ws_free(ws);
    }
    *same = !memcmp(got[0], got[1], sizeof(float) * (size_t)(n * out));
    double err = 0;
    for (int32_t t = 0; t < n; t++)
        for (int64_t o = 0; o < out; o++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < in; i++) {
                ref += (double)x[t * in + i] * we[o * in + i];
                mag += fabs((double)x[t * in + i] * we[o * in + i]);
            }
            if (bias) ref += be_bias[o], mag += fabs(be_bias[o]);
            for (int k = 0; k < n_lora; k++)
                for (int r = 0; r < ranks[k]; r++) {
                    double z = 0, zm = 0;
                    for (int64_t i = 0; i < in; i++) {
                        z += (double)x[t * in + i] * ae[k][r * in + i];
                        zm += fabs((double)x[t * in + i] * ae[k][r * in + i]);
                    }
                    ref += scales[k] * z * bee[k][o * ranks[k] + r];
                    mag += fabs(scales[k]) * zm * fabs(bee[k][o * ranks[k] + r]);
                }
            const double e = fabs(got[0][t * out + o] - ref) / (1.0 + mag);
            if (e > err) err = e;
        }
    be->ops->unbind_weight(be, &L.w);
    if (bias) be->ops->unbind_weight(be, &L.bias);
    for (int i = 0; i < n_lora; i++) {
        be->ops->unbind_weight(be, &lora[i].a);
        be->ops->unbind_weight(be, &lora[i].b);
        free(ha[i]), free(hbb[i]), free(ae[i]), free(bee[i]);
    }
    be->ops->dealloc(be, dx);
    be->ops->dealloc(be, dy);
    free(got[0]), free(got[1]), free(hw), free(hb), free(wv), free(we), free(x), free(bv), free(be_bias);
    return err;
}

TEST(backend_ops_linear) {
    const gp_wfmt fmts[] = {GP_WFMT_F32, GP_WFMT_BF16, GP_WFMT_F16};
    const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {130, 37}, {257, 64}};
    const int32_t ns[] = {1, 4, 9};
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        double worst = 0;
        int cases = 0, all_same = 1;
        for (size_t f = 0; f < 3; f++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (size_t ni = 0; ni < 3; ni++)
                    for (int variant = 0; variant < 3; variant++) { /* plain, + bias, + bias + 2 LoRA terms */
                        int same;
                        double e = linear_case(be, fmts[f], shapes[s][0], shapes[s][1], ns[ni], variant >= 1,
                                               variant == 2 ? 2 : 0, (uint32_t)(f * 1000 + s * 10 + ni + variant * 7),
                                               &same);
                        if (e > worst) worst = e;
                        all_same &= same;
                        cases++;
                    }
        NOTE("%s linear: %d cases (f32/bf16/f16, bias, LoRA), max relative error %.3g (tol 1e-6); 1 vs 3 threads %s",
             BACKENDS[b].name, cases, worst, all_same ? "identical" : "DIFFER");
        CHECK(worst < 1e-6);
        CHECK(all_same);
        gp_backend_free(be);
    }
}

/* ---- element-wise, norms, rope, embed ---- */

static double max_abs_diff(const float *a, const double *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i]));
    return e;
}

TEST(backend_ops_elementwise) {
    const int32_t n = 5, d = 37, heads = 3, hd = 10;
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        gp_ws *ws = make_ws(be, 3, n, 1, hd, 0);
        REQUIRE(ws);
        const size_t N = (size_t)n * d;
        float *x = rand_vec(N, 1, 4), *u = rand_vec(N, 2, 4), *wv = rand_vec((size_t)d, 3, 1), *we = malloc(sizeof(float) * d);
        double *ref = malloc(sizeof(double) * N);
        void *hw;
        gp_wt w = make_weight(be, GP_WFMT_BF16, wv, 1, d, we, &hw);
        float *dx = bu_dev_from(be, x, N), *du = bu_dev_from(be, u, N), *got;
        double e[8] = {0};
        /* rmsnorm, both conventions */
        for (int po = 0; po < 2; po++) {
            be->ops->upload(be, dx, x, N * sizeof(float));
            be->ops->rmsnorm(ws, dx, dx, &w, n, d, 1e-5f, po);
            got = bu_host_of(be, ws, dx, N);
            for (int32_t t = 0; t < n; t++) {
                double ss = 0;
                for (int32_t i = 0; i < d; i++) ss += (double)x[t * d + i] * x[t * d + i];
                const double inv = 1.0 / sqrt(ss / d + 1e-5);
                for (int32_t i = 0; i < d; i++) ref[t * d + i] = x[t * d + i] * inv * (po ? 1.0 + we[i] : we[i]);
            }
            e[0] = fmax(e[0], max_abs_diff(got, ref, N));
            free(got);
        }
        /* glu: silu and gelu(tanh) */
        for (int act = 0; act < 2; act++) {
            be->ops->upload(be, dx, x, N * sizeof(float));
            be->ops->glu(ws, dx, du, (int64_t)N, (gp_act)act);
            got = bu_host_of(be, ws, dx, N);
            for (size_t i = 0; i < N; i++) {
                const double g = x[i];
                ref[i] = (act == GP_ACT_SILU ? g / (1 + exp(-g))
                                             : 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)))) * u[i];
            }
            e[1] = fmax(e[1], max_abs_diff(got, ref, N));
            free(got);
        }
        /* add, add_row, softcap */
        be->ops->upload(be, dx, x, N * sizeof(float));
        be->ops->add(ws, dx, du, (int64_t)N);
        float *dv = bu_dev_from(be, wv, (size_t)d);
        be->ops->add_row(ws, dx, dv, 0.75f, n, d);
        be->ops->softcap(ws, dx, (int64_t)N, 3.0f);
        got = bu_host_of(be, ws, dx, N);
        for (size_t i = 0; i < N; i++) ref[i] = 3.0 * tanh(((double)x[i] + u[i] + 0.75 * wv[i % d]) / 3.0);
        e[2] = max_abs_diff(got, ref, N);
        free(got);
        /* rope on [n, heads, hd] at pos0 = 11 */
        float inv_freq[5];
        for (int i = 0; i < hd / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / hd);
        float *r = rand_vec((size_t)n * heads * hd, 4, 2), *dr = bu_dev_from(be, r, (size_t)n * heads * hd);
        float *dinv = bu_dev_from(be, inv_freq, (size_t)hd / 2); /* rope tables are backend memory */
        be->ops->rope(ws, dr, n, heads, hd, 11, dinv);
        got = bu_host_of(be, ws, dr, (size_t)n * heads * hd);
        double *rr = malloc(sizeof(double) * (size_t)n * heads * hd);
        for (int32_t t = 0; t < n; t++)
            for (int32_t h = 0; h < heads; h++)
                for (int32_t i = 0; i < hd / 2; i++) {
                    const double a = (double)(float)((11 + t) * inv_freq[i]);
                    const float *v = r + (t * heads + h) * hd;
                    rr[(t * heads + h) * hd + i] = v[i] * cos(a) - v[i + hd / 2] * sin(a);
                    rr[(t * heads + h) * hd + i + hd / 2] = v[i + hd / 2] * cos(a) + v[i] * sin(a);
                }
        e[3] = max_abs_diff(got, rr, (size_t)n * heads * hd);
        free(got);
        /* embed from an f16 table, scaled */
        const int32_t V = 9, ids[5] = {8, 0, 3, 3, 7};
        float *tv = rand_vec((size_t)V * d, 5, 1), *te = malloc(sizeof(float) * V * d);
        void *ht;
        gp_wt table = make_weight(be, GP_WFMT_F16, tv, V, d, te, &ht);
        be->ops->embed(ws, dx, ids, n, &table, 1.5f);
        got = bu_host_of(be, ws, dx, N);
        for (int32_t t = 0; t < n; t++)
            for (int32_t i = 0; i < d; i++) ref[t * d + i] = 1.5 * te[ids[t] * d + i];
        e[4] = max_abs_diff(got, ref, N);
        free(got);
        NOTE("%s: max abs error rmsnorm %.2g, glu %.2g, add+add_row+softcap %.2g, rope %.2g, embed %.2g (tol 1e-5)",
             BACKENDS[b].name, e[0], e[1], e[2], e[3], e[4]);
        for (int i = 0; i < 5; i++) CHECK(e[i] < 1e-5);
        be->ops->unbind_weight(be, &w);
        be->ops->unbind_weight(be, &table);
        float *bufs[] = {dx, du, dv, dr, dinv};
        for (int i = 0; i < 5; i++) be->ops->dealloc(be, bufs[i]);
        be->ops->ws_free(ws);
        free(x), free(u), free(wv), free(we), free(ref), free(hw), free(r), free(rr), free(tv), free(te), free(ht);
        gp_backend_free(be);
    }
}

/* ---- KV storage and attention ---- */

/* Row r of s as floats (dequantized when quant), read back to the host by the plain formula of gp_kv_rows. */
static void kv_row(gp_backend *be, const gp_kv_rows *s, int32_t r, int quant, float *out) {
    if (!quant) {
        be->ops->download(be, out, s->f + (size_t)r * s->kvd, sizeof(float) * s->kvd);
        return;
    }
    uint8_t q[1024];
    float sc[64], mn[64];
    be->ops->download(be, q, s->q + (size_t)r * s->row_bytes, (size_t)s->row_bytes);
    if (s->bits == 16) {
        for (int32_t i = 0; i < s->kvd; i++) out[i] = gp_bf16_to_f32((uint16_t)(q[2 * i] | q[2 * i + 1] << 8));
        return;
    }
    be->ops->download(be, sc, s->scale + (size_t)r * s->n_groups, sizeof(float) * s->n_groups);
    be->ops->download(be, mn, s->minv + (size_t)r * s->n_groups, sizeof(float) * s->n_groups);
    for (int32_t i = 0; i < s->kvd; i++) {
        const int v = s->bits == 8 ? q[i] : (q[i / 2] >> ((i % 2) * 4)) & 15;
        out[i] = v * sc[i / s->group] + mn[i / s->group];
    }
}

TEST(backend_ops_kv_store_copy) {
    const int32_t kvd = 44, rows = 6;
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        gp_ws *ws = make_ws(be, 2, rows, 1, 1, 0);
        float *x = rand_vec((size_t)rows * kvd, 9, 3), row[64], row2[64];
        double worst[2] = {0, 0};
        int bf16_exact = 1;
        for (int bits = 4; bits <= 16; bits += bits == 8 ? 8 : 4) {
            gp_kv_rows a = bu_kv_alloc(be, rows, kvd, bits, 32), c = bu_kv_alloc(be, rows, kvd, bits, 32);
            gp_kv_rows a2 = bu_kv_alloc(be, rows, kvd, bits, 32), c2 = bu_kv_alloc(be, rows, kvd, bits, 32);
            float *dx = bu_dev_from(be, x, (size_t)rows * kvd);
            be->ops->kv_store(ws, &a, &a2, 0, dx, dx, rows, 1);
            be->ops->kv_store(ws, &a, &a2, 0, dx, dx, 2, 0);
            be->ops->kv_copy(ws, &c, &c2, 1, &a, &a2, 0, rows - 1, 1);
            be->ops->kv_copy(ws, &c, &c2, 3, &a, &a2, 0, 2, 0);
            CHECK_STATUS(be->ops->finish(ws), GP_OK);
            for (int32_t r = 0; r < rows; r++) {
                kv_row(be, &a, r, 1, row);
                for (int32_t i = 0; bits == 16 && i < kvd; i++) /* bfloat16 rows: rounded to nearest even */
                    bf16_exact &= row[i] == gp_bf16_to_f32(gp_f32_to_bf16(x[r * kvd + i]));
                for (int32_t g = 0; bits < 16 && g < (kvd + 31) / 32; g++) { /* error <= half a quantization step */
                    float lo = INFINITY, hi = -INFINITY;
                    for (int32_t i = g * 32; i < kvd && i < g * 32 + 32; i++)
                        lo = fminf(lo, x[r * kvd + i]), hi = fmaxf(hi, x[r * kvd + i]);
                    const double step = (hi - lo) / ((1 << bits) - 1);
                    for (int32_t i = g * 32; i < kvd && i < g * 32 + 32; i++)
                        worst[bits / 8] = fmax(worst[bits / 8], fabs(row[i] - x[r * kvd + i]) / step);
                }
                kv_row(be, &a2, r, 1, row2); /* the values' rows: the same numbers */
                CHECK(!memcmp(row, row2, sizeof(float) * kvd));
                if (r + 1 < rows) { /* copies are exact */
                    kv_row(be, &c, r + 1, 1, row2);
                    CHECK(!memcmp(row, row2, sizeof(float) * kvd));
                    kv_row(be, &c2, r + 1, 1, row2);
                    CHECK(!memcmp(row, row2, sizeof(float) * kvd));
                }
            }
            kv_row(be, &c, 4, 0, row);
            CHECK(!memcmp(row, x + kvd, sizeof(float) * kvd));
            kv_row(be, &c2, 4, 0, row);
            CHECK(!memcmp(row, x + kvd, sizeof(float) * kvd));
            be->ops->dealloc(be, dx);
            bu_kv_free(be, &a), bu_kv_free(be, &a2);
            bu_kv_free(be, &c), bu_kv_free(be, &c2);
        }
        NOTE("%s kv_store: max error / quantization step %.3f (4-bit), %.3f (8-bit) (tol 0.5 + 1e-4); bfloat16 rows "
             "%s; kv_copy exact", BACKENDS[b].name, worst[0], worst[1],
             bf16_exact ? "rounded to nearest even" : "WRONG");
        CHECK(worst[0] <= 0.5001 && worst[1] <= 0.5001);
        CHECK(bf16_exact);
        be->ops->ws_free(ws);
        free(x);
        gp_backend_free(be);
    }
}

/* Attention over a descriptor with pinned float rows, an evicted gap, float and quantized ring rows with a wrap,
 * and a chunk whose later rows are quantized (keys of kb bits, values of vb: 4, 8 or 16 = bfloat16), against the
 * definition (softmax over visible keys, double). */
static void attention_case(gp_backend *be, int32_t hd, float softcap, int32_t kb, int32_t vb, double *err, int *same) {
    enum { NKV = 2, NH = 4, N = 5, POS0 = 14, WINDOW = 6, PINNED = 2 };
    const int32_t kvd = NKV * hd;
    gp_kv_rows st[2] = {bu_kv_alloc(be, 9, kvd, kb, 16), bu_kv_alloc(be, N, kvd, kb, 16)};
    gp_kv_rows sv[2] = {bu_kv_alloc(be, 9, kvd, vb, 16), bu_kv_alloc(be, N, kvd, vb, 16)};
    gp_kv_desc d = {.k = {st[0], st[1]}, .v = {sv[0], sv[1]}, .window = WINDOW, .pinned = PINNED};
    /* positions -> (storage, row, quantized); positions 2..4 evicted */
    const gp_kv_seg segs[] = {{0, 2, 0, 0, 0}, {5, 9, 2, 0, 0}, {9, 12, 6, 0, 1}, {12, 14, 3, 0, 1},
                              {14, 16, 0, 1, 0}, {16, 19, 2, 1, 1}};
    d.n_seg = (int32_t)(sizeof segs / sizeof segs[0]);
    memcpy(d.seg, segs, sizeof segs);
    gp_ws *ws1 = make_ws(be, 1, N, 32, hd, 0), *ws3 = make_ws(be, 3, N, 32, hd, 0);
    float *kx = rand_vec((size_t)kvd, 0, 1);
    for (int32_t s = 0; s < d.n_seg; s++)
        for (int32_t j = segs[s].p0; j < segs[s].p1; j++) {
            float *kr = rand_vec((size_t)kvd, 100 + (uint32_t)j, 2), *vr = rand_vec((size_t)kvd, 200 + (uint32_t)j, 2);
            float *dk = bu_dev_from(be, kr, (size_t)kvd), *dv = bu_dev_from(be, vr, (size_t)kvd);
            const int32_t r = segs[s].r0 + (j - segs[s].p0);
            be->ops->kv_store(ws1, &d.k[segs[s].src], &d.v[segs[s].src], r, dk, dv, 1, segs[s].quant);
            CHECK_STATUS(be->ops->finish(ws1), GP_OK);
            be->ops->dealloc(be, dk), be->ops->dealloc(be, dv), free(kr), free(vr);
        }
    float *q = rand_vec((size_t)N * NH * hd, 7, 2), *dq = bu_dev_from(be, q, (size_t)N * NH * hd);
    float *dout = be->ops->alloc(be, sizeof(float) * N * NH * hd), *got[2];
    gp_attn_args a = {.out = dout, .q = dq, .kv = &d, .n = N, .pos0 = POS0, .n_heads = NH, .n_kv = NKV,
                      .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .softcap = softcap};
    gp_ws *wss[2] = {ws1, ws3};
    for (int i = 0; i < 2; i++) {
        be->ops->attention(wss[i], &a);
        got[i] = bu_host_of(be, wss[i], dout, (size_t)N * NH * hd);
    }
    *same = !memcmp(got[0], got[1], sizeof(float) * N * NH * hd);
    /* the reference: every held position's rows as the storages hold them */
    float K[19][64], Vv[19][64];
    int held[19] = {0};
    for (int32_t s = 0; s < d.n_seg; s++)
        for (int32_t j = segs[s].p0; j < segs[s].p1; j++) {
            kv_row(be, &d.k[segs[s].src], segs[s].r0 + (j - segs[s].p0), segs[s].quant, K[j]);
            kv_row(be, &d.v[segs[s].src], segs[s].r0 + (j - segs[s].p0), segs[s].quant, Vv[j]);
            held[j] = 1;
        }
    *err = 0;
    for (int32_t t = 0; t < N; t++)
        for (int32_t h = 0; h < NH; h++) {
            const int32_t p = POS0 + t, kvh = h / (NH / NKV);
            double sc[19], mx = -INFINITY, sum = 0;
            for (int32_t j = 0; j <= p; j++) {
                sc[j] = -INFINITY;
                if (!held[j] || !(p - j < WINDOW || j < PINNED)) continue;
                double s = 0;
                for (int32_t i = 0; i < hd; i++) s += (double)q[(t * NH + h) * hd + i] * K[j][kvh * hd + i];
                s *= 1.0 / sqrt((double)hd);
                if (softcap > 0) s = softcap * tanh(s / softcap);
                sc[j] = s;
                mx = fmax(mx, s);
            }
            for (int32_t j = 0; j <= p; j++) sum += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
            for (int32_t i = 0; i < hd; i++) {
                double o = 0;
                for (int32_t j = 0; j <= p; j++)
                    if (sc[j] != -INFINITY) o += exp(sc[j] - mx) / sum * Vv[j][kvh * hd + i];
                *err = fmax(*err, fabs(got[0][(t * NH + h) * hd + i] - o));
            }
        }
    for (int i = 0; i < 2; i++) bu_kv_free(be, &st[i]), bu_kv_free(be, &sv[i]);
    be->ops->dealloc(be, dq), be->ops->dealloc(be, dout);
    be->ops->ws_free(ws1), be->ops->ws_free(ws3);
    free(kx), free(q), free(got[0]), free(got[1]);
}

TEST(backend_ops_attention) {
    const int32_t hds[] = {12, 16, 32};
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        double worst = 0;
        int all_same = 1;
        for (size_t i = 0; i < 3; i++)
            for (int cap = 0; cap < 2; cap++)
                for (int bf = 0; bf < 2; bf++) {
                    double e;
                    int same;
                    attention_case(be, hds[i], cap ? 1.5f : 0.0f, bf ? 16 : 4, bf ? 16 : 8, &e, &same);
                    worst = fmax(worst, e);
                    all_same &= same;
                }
        NOTE("%s attention (pinned, evicted gap, float + 4/8-bit or bfloat16 rows, ring wrap, window, soft-cap; "
             "head_dim 12/16/32):"
             " max abs error %.3g (tol 1e-5); 1 vs 3 threads %s",
             BACKENDS[b].name, worst, all_same ? "identical" : "DIFFER");
        CHECK(worst < 1e-5);
        CHECK(all_same);
        gp_backend_free(be);
    }
}

static int same_bits(gp_backend *be, gp_ws *ws, const float *a, const float *b, size_t n);

/* Attention that runs the rope itself (gp_attn_args.rope, decode's fused kernel on a device) against rope_qk then
 * attention, on two copies of a cache holding pos float rows (bits 16: bfloat16 rows): the outputs and the stored key
 * and value rows must have the same bits.  Returns the number of differing results. */
static int rope_attention_case(gp_backend *be, int32_t compute, int32_t hd, int32_t G, int32_t pos, int32_t n,
                               int norm, int32_t bits) {
    enum { NKV = 2 };
    const int32_t nh = NKV * G, kvd = NKV * hd, rows = pos + n;
    gp_ws_params wp = {.n_threads = 2, .max_tokens = n, .max_keys = rows, .head_dim = hd, .n_heads = nh,
                       .compute = compute, .max_cols = kvd};
    gp_ws *ws = NULL;
    if (be->ops->ws_init(be, &wp, &ws) != GP_OK) return 1;
    gp_kv_rows ck[2], cv[2];
    float *old = rand_vec((size_t)rows * kvd, 61, 2), *inv = malloc(sizeof(float) * hd / 2);
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / hd);
    float *nv = rand_vec(256, 62, 1), *ne = malloc(sizeof(float) * 256), *dinv = bu_dev_from(be, inv, hd / 2);
    void *hn;
    gp_wt nw = make_weight(be, GP_WFMT_BF16, nv, 1, hd, ne, &hn);
    float *qkv = rand_vec((size_t)n * (nh + 2 * NKV) * hd, 63, 2), *d[2][3], *out[2];
    const size_t sz[3] = {(size_t)n * nh * hd, (size_t)n * kvd, (size_t)n * kvd};
    uint16_t *oldh = malloc(sizeof(uint16_t) * ((size_t)rows * kvd + 1));
    for (size_t i = 0; i < (size_t)rows * kvd; i++) oldh[i] = gp_f32_to_bf16(old[i]);
    const int b16 = bits == 16;
    for (int c = 0; c < 2; c++) {
        ck[c] = bu_kv_alloc(be, rows, kvd, bits, 32), cv[c] = bu_kv_alloc(be, rows, kvd, bits, 32);
        void *kd = b16 ? (void *)ck[c].q : ck[c].f, *vd = b16 ? (void *)cv[c].q : cv[c].f;
        be->ops->upload(be, kd, b16 ? (const void *)oldh : old, (b16 ? 2 : 4) * (size_t)pos * kvd);
        be->ops->upload(be, vd, b16 ? (const void *)oldh : old, (b16 ? 2 : 4) * (size_t)pos * kvd);
        for (int i = 0, o = 0; i < 3; o += (int)sz[i], i++) d[c][i] = bu_dev_from(be, qkv + o, sz[i]);
        out[c] = be->ops->alloc(be, sizeof(float) * sz[0]);
    }
    int bad = 0;
    for (int c = 0; c < 2; c++) {
        const gp_kv_dst dst = {&ck[c], &cv[c], d[c][2], pos};
        gp_kv_desc kv = {.k = {ck[c], ck[c]}, .v = {cv[c], cv[c]}, .n_seg = 1, .seg = {{0, rows, 0, 0, b16}}};
        const gp_wt *qn = norm ? &nw : NULL;
        const gp_rope_args ra = {d[c][0], d[c][1], dinv, qn, qn, 1e-6f, norm == 2, &dst};
        if (!c) be->ops->rope_qk(ws, d[c][0], d[c][1], n, nh, NKV, hd, pos, dinv, qn, qn, 1e-6f, norm == 2, &dst);
        const gp_attn_args a = {.out = out[c], .q = d[c][0], .kv = &kv, .n = n, .pos0 = pos, .n_heads = nh,
                                .n_kv = NKV, .head_dim = hd, .scale = 0.3f, .rope = c ? &ra : NULL};
        be->ops->attention(ws, &a);
    }
    bad += !same_bits(be, ws, out[0], out[1], sz[0]);
    const size_t words = (size_t)rows * kvd / (b16 ? 2 : 1); /* (the rows as float-sized words) */
    const float *k0 = b16 ? (const float *)ck[0].q : ck[0].f, *k1 = b16 ? (const float *)ck[1].q : ck[1].f;
    const float *v0 = b16 ? (const float *)cv[0].q : cv[0].f, *v1 = b16 ? (const float *)cv[1].q : cv[1].f;
    bad += !same_bits(be, ws, k0, k1, words) + !same_bits(be, ws, v0, v1, words);
    for (int c = 0; c < 2; c++) {
        bu_kv_free(be, &ck[c]), bu_kv_free(be, &cv[c]);
        for (int i = 0; i < 3; i++) be->ops->dealloc(be, d[c][i]);
        be->ops->dealloc(be, out[c]);
    }
    be->ops->unbind_weight(be, &nw);
    be->ops->dealloc(be, dinv);
    be->ops->ws_free(ws);
    free(old), free(oldh), free(inv), free(nv), free(ne), free(hn), free(qkv);
    return bad;
}

TEST(backend_ops_attention_with_rope_gives_its_parts_bits) {
    const int32_t hds[] = {8, 64, 128, 256}, Gs[] = {1, 4, 16}, poss[] = {0, 5, 70, 130, 200};
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        int bad = 0, cases = 0;
        /* f32; bf16; bf16 over a float32 cache (tensor cores on cuda); bf16 and f32 over bfloat16 rows (the bf16
         * mode's own: tensor cores on cuda) */
        for (int32_t mode = 0; mode < 5; mode++)
            for (size_t h = 0; h < 4; h++)
                for (size_t g = 0; g < 3; g++)
                    for (size_t p = 0; p < 5; p++)
                        for (int norm = 0; norm < 3; norm++, cases++)
                            bad += rope_attention_case(be, mode % 4 ? GP_COMPUTE_BF16 : GP_COMPUTE_F32, hds[h], Gs[g],
                                                       poss[p], p == 1 ? 3 : 1, norm,
                                                       mode == 2 ? 0 : mode > 2 ? 16 : 8);
        NOTE("%s: attention running the rope itself vs rope_qk then attention (f32 and bf16 modes, 8-bit, float32 and "
             "bfloat16 caches, head_dim 8-256, 1-16 heads per kv head, positions 0-200, 1 and 3 tokens, no / plain / "
             "Gemma head norms; %d cases): %d results differ (want 0)", BACKENDS[b].name, cases, bad);
        CHECK_EQ_INT(bad, 0);
        gp_backend_free(be);
    }
}

/* ---- composite ops ---- */

/* 1 when backend buffers a and b [n] hold the same bits (after ws's ops). */
static int same_bits(gp_backend *be, gp_ws *ws, const float *a, const float *b, size_t n) {
    float *x = bu_host_of(be, ws, a, n), *y = bu_host_of(be, ws, b, n);
    const int same = !memcmp(x, y, n * sizeof(float));
    free(x), free(y);
    return same;
}

/* linears, linear_glu (with and without the norm first), linear_add and rope_qk against the ops they are made of, in
 * one compute mode, for n tokens of E features; returns the number of ops whose bits differ. */
static int composite_case(gp_backend *be, int32_t compute, int32_t n, int32_t E) {
    enum { Q = 32, KV = 16, F = 40, HD = 8 };
    gp_ws_params p = {.n_threads = 2, .max_tokens = n, .max_keys = 1, .head_dim = HD, .compute = compute,
                      .max_cols = E > F ? E : F};
    gp_ws *ws = NULL;
    if (be->ops->ws_init(be, &p, &ws) != GP_OK) return 1;
    const int64_t rows[5] = {Q, KV, KV, F, F};
    gp_linear L[5];
    void *hw[5], *hb[5];
    for (int i = 0; i < 5; i++) {
        float *v = rand_vec((size_t)(rows[i] * E), 40 + (uint32_t)i, 1), *e = malloc(sizeof(float) * rows[i] * E);
        float *bv = rand_vec((size_t)rows[i], 50 + (uint32_t)i, 1), *be_ = malloc(sizeof(float) * rows[i]);
        L[i] = (gp_linear){make_weight(be, i == 2 ? GP_WFMT_F16 : GP_WFMT_BF16, v, rows[i], E, e, &hw[i]), {0}, NULL, 0};
        hb[i] = NULL;
        if (i != 1) L[i].bias = make_weight(be, GP_WFMT_BF16, bv, 1, rows[i], be_, &hb[i]);
        free(v), free(e), free(bv), free(be_);
    }
    float *x = rand_vec((size_t)n * E, 3, 2), *dx = bu_dev_from(be, x, (size_t)n * E);
    float *a[5], *b[5];
    for (int i = 0; i < 5; i++) a[i] = be->ops->alloc(be, sizeof(float) * n * F), b[i] = be->ops->alloc(be, sizeof(float) * n * F);
    int bad = 0;
    /* q, k, v in one call */
    const gp_linear *three[3] = {&L[0], &L[1], &L[2]};
    be->ops->linears(ws, 3, a, dx, NULL, three, n);
    for (int i = 0; i < 3; i++) be->ops->linear(ws, b[i], dx, &L[i], n);
    for (int i = 0; i < 3; i++) bad += !same_bits(be, ws, a[i], b[i], (size_t)(n * rows[i]));
    /* act(gate) * up */
    be->ops->linear_glu(ws, a[3], a[4], dx, NULL, &L[3], &L[4], n, GP_ACT_GELU_TANH);
    be->ops->linear(ws, b[3], dx, &L[3], n);
    be->ops->linear(ws, b[4], dx, &L[4], n);
    be->ops->glu(ws, b[3], b[4], (int64_t)n * F, GP_ACT_GELU_TANH);
    bad += !same_bits(be, ws, a[3], b[3], (size_t)(n * F));
    /* the same two with the norm first (q and k: one dtype, which a device may fuse; Llama's and Gemma's scaling) */
    float *gv = rand_vec((size_t)E, 11, 1), *ge = malloc(sizeof(float) * E);
    void *hg;
    const gp_wt g = make_weight(be, GP_WFMT_BF16, gv, 1, E, ge, &hg);
    float *h = be->ops->alloc(be, sizeof(float) * n * E), *hh = be->ops->alloc(be, sizeof(float) * n * E);
    for (int po = 0; po < 2; po++) {
        const gp_prenorm pn = {&g, h, 1e-5f, po};
        be->ops->linears(ws, 2, a, dx, &pn, three, n);
        be->ops->rmsnorm(ws, hh, dx, &g, n, E, 1e-5f, po);
        for (int i = 0; i < 2; i++) be->ops->linear(ws, b[i], hh, &L[i], n);
        for (int i = 0; i < 2; i++) bad += !same_bits(be, ws, a[i], b[i], (size_t)(n * rows[i]));
        be->ops->linear_glu(ws, a[3], a[4], dx, &pn, &L[3], &L[4], n, GP_ACT_SILU);
        be->ops->linear(ws, b[3], hh, &L[3], n);
        be->ops->linear(ws, b[4], hh, &L[4], n);
        be->ops->glu(ws, b[3], b[4], (int64_t)n * F, GP_ACT_SILU);
        bad += !same_bits(be, ws, a[3], b[3], (size_t)(n * F));
    }
    be->ops->unbind_weight(be, (gp_wt *)&g);
    be->ops->dealloc(be, h), be->ops->dealloc(be, hh);
    free(gv), free(ge), free(hg);
    /* the residual add: y += linear(x) */
    float *r = rand_vec((size_t)n * Q, 8, 3);
    be->ops->upload(be, a[0], r, sizeof(float) * n * Q);
    be->ops->upload(be, b[0], r, sizeof(float) * n * Q);
    be->ops->linear_add(ws, a[0], a[1], dx, &L[0], NULL, n);
    be->ops->linear(ws, b[1], dx, &L[0], n);
    be->ops->add(ws, b[0], b[1], (int64_t)n * Q);
    bad += !same_bits(be, ws, a[0], b[0], (size_t)(n * Q));
    /* per-head norms, then rope, of q [n, 4, 8] and k [n, 2, 8] */
    float inv[HD / 2], *nv = rand_vec(HD, 9, 1), *ne = malloc(sizeof(float) * HD), *dinv;
    void *hn;
    for (int i = 0; i < HD / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / HD);
    gp_wt norm = make_weight(be, GP_WFMT_BF16, nv, 1, HD, ne, &hn);
    dinv = bu_dev_from(be, inv, HD / 2);
    float *qk = rand_vec((size_t)n * (Q + KV), 10, 2);
    be->ops->upload(be, a[3], qk, sizeof(float) * n * Q), be->ops->upload(be, a[4], qk + n * Q, sizeof(float) * n * KV);
    be->ops->upload(be, b[3], qk, sizeof(float) * n * Q), be->ops->upload(be, b[4], qk + n * Q, sizeof(float) * n * KV);
    be->ops->rope_qk(ws, a[3], a[4], n, Q / HD, KV / HD, HD, 5, dinv, &norm, &norm, 1e-6f, 0, NULL);
    be->ops->rmsnorm(ws, b[3], b[3], &norm, n * Q / HD, HD, 1e-6f, 0);
    be->ops->rmsnorm(ws, b[4], b[4], &norm, n * KV / HD, HD, 1e-6f, 0);
    be->ops->rope(ws, b[3], n, Q / HD, HD, 5, dinv);
    be->ops->rope(ws, b[4], n, KV / HD, HD, 5, dinv);
    bad += !same_bits(be, ws, a[3], b[3], (size_t)(n * Q)) + !same_bits(be, ws, a[4], b[4], (size_t)(n * KV));
    for (int i = 0; i < 5; i++) {
        be->ops->unbind_weight(be, &L[i].w);
        if (hb[i]) be->ops->unbind_weight(be, &L[i].bias);
        be->ops->dealloc(be, a[i]), be->ops->dealloc(be, b[i]);
        free(hw[i]), free(hb[i]);
    }
    be->ops->unbind_weight(be, &norm);
    be->ops->dealloc(be, dx), be->ops->dealloc(be, dinv);
    be->ops->ws_free(ws);
    free(x), free(r), free(nv), free(ne), free(hn), free(qk);
    return bad;
}

/* Case k of handover_case on y [N, E] from the GLU's output in [N, F] (L[2]: down; L[0], L[1]: gate, up): down;
 * the residual add; (k 3, 4) the residual add told the next norm pn (next: pn or NULL), then (k 4: after an add to y)
 * the GLU of y's norm into out. */
/* handover_case's sizes: tokens, features, GLU rows */
enum { HO_N = 300, HO_E = 64, HO_F = 3072 };

static void glu_down_step(gp_backend *be, gp_ws *ws, int k, float *y, const float *in, float *out, float *tmp,
                          const float *dd, const gp_linear *L, const gp_prenorm *pn, const gp_prenorm *next) {
    enum { N = HO_N, E = HO_E };
    if (k == 0 || k == 2) be->ops->linear(ws, y, in, &L[2], N);
    else be->ops->linear_add(ws, y, tmp, in, &L[2], k >= 3 ? next : NULL, N);
    if (k == 4) be->ops->add(ws, y, dd, (int64_t)N * E);
    if (k >= 3) be->ops->linear_glu(ws, out, tmp, y, pn, &L[0], &L[1], N, GP_ACT_SILU);
}

/* A GLU's output straight into a linear and a residual linear (down), and the residual linear told the next norm
 * followed by the GLU of that norm, against the same ops on copies (other pointers) without the next norm, and after
 * an op that changed the input: the same bits (a device may hand over the copy of the GLU's output it made for the
 * next GEMM, or of the residual's norm made in its fold; F = 3072 rows, a GLU grid that fills an H100).  Returns
 * the outputs that differ. */
static int handover_case(gp_backend *be, int32_t compute) {
    enum { N = HO_N, E = HO_E, F = HO_F, B = 9 };
    gp_ws_params p = {.n_threads = 2, .max_tokens = N, .max_keys = 1, .head_dim = 8, .compute = compute,
                      .max_cols = F};
    gp_ws *ws = NULL;
    if (be->ops->ws_init(be, &p, &ws) != GP_OK) return 1;
    const int64_t rows[4] = {F, F, E, 1}, cols[4] = {E, E, F, E};
    gp_linear L[4]; /* gate, up, down; the norm's weight */
    void *hw[4];
    for (int i = 0; i < 4; i++) {
        float *v = rand_vec((size_t)(rows[i] * cols[i]), 70 + (uint32_t)i, 1);
        float *e = malloc(sizeof(float) * (size_t)(rows[i] * cols[i]));
        L[i] = (gp_linear){make_weight(be, GP_WFMT_BF16, v, rows[i], cols[i], e, &hw[i]), {0}, NULL, 0};
        free(v), free(e);
    }
    float *x = rand_vec((size_t)N * E, 73, 2), *dx = bu_dev_from(be, x, (size_t)N * E);
    float *ones = rand_vec((size_t)N * F, 74, 1), *dd = bu_dev_from(be, ones, (size_t)N * F), *d[B];
    for (int i = 0; i < B; i++) d[i] = be->ops->alloc(be, sizeof(float) * N * F);
    const gp_prenorm pn = {&L[3].w, d[8], 1e-5f, 0};
    int bad = 0;
    for (int k = 0; k < 5; k++) {
        be->ops->linear_glu(ws, d[0], d[1], dx, NULL, &L[0], &L[1], N, GP_ACT_SILU);
        if (k == 2) be->ops->add(ws, d[0], dd, (int64_t)N * F);
        float *h = bu_host_of(be, ws, d[0], (size_t)N * F);
        be->ops->upload(be, d[2], h, sizeof(float) * N * F);
        free(h);
        be->ops->upload(be, d[3], x, sizeof(float) * N * E), be->ops->upload(be, d[4], x, sizeof(float) * N * E);
        glu_down_step(be, ws, k, d[4], d[2], d[7], d[5], dd, L, &pn, NULL);
        /* again, so that each op follows the one before directly */
        be->ops->linear_glu(ws, d[0], d[1], dx, NULL, &L[0], &L[1], N, GP_ACT_SILU);
        if (k == 2) be->ops->add(ws, d[0], dd, (int64_t)N * F);
        glu_down_step(be, ws, k, d[3], d[0], d[6], d[5], dd, L, &pn, &pn);
        bad += !same_bits(be, ws, d[3], d[4], (size_t)N * E) + (k >= 3 && !same_bits(be, ws, d[6], d[7], N * F));
    }
    for (int i = 0; i < 4; i++) be->ops->unbind_weight(be, &L[i].w), free(hw[i]);
    for (int i = 0; i < B; i++) be->ops->dealloc(be, d[i]);
    be->ops->dealloc(be, dx), be->ops->dealloc(be, dd);
    be->ops->ws_free(ws);
    free(x), free(ones);
    return bad;
}

TEST(backend_ops_projections_after_a_glu_or_a_residual_give_the_bits_of_copies) {
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        const int bad = handover_case(be, GP_COMPUTE_F32) + handover_case(be, GP_COMPUTE_BF16);
        NOTE("%s: down after linear_glu, and the GLU after a residual add told its norm, vs the same on copies (f32 "
             "and bf16 modes, 300 tokens, 3072 rows; after an add too): %d outputs differ (want 0)", BACKENDS[b].name,
             bad);
        CHECK_EQ_INT(bad, 0);
        gp_backend_free(be);
    }
}

/* rope_qk (per-head norms, then rope) against rmsnorm and rope apart, for heads of hd elements in one compute mode,
 * its cache store (float32 rows from R0) against its own outputs: the rows must hold the rotated keys and the values
 * as given.  0 where every output and row has those bits. */
static int rope_qk_case(gp_backend *be, int32_t compute, int32_t hd) {
    enum { N = 5, NH = 3, NKV = 2, POS = 7, R0 = 2 };
    gp_ws_params p = {.n_threads = 2, .max_tokens = N, .max_keys = 1, .head_dim = hd, .compute = compute,
                      .max_cols = NH * hd};
    gp_ws *ws = NULL;
    if (be->ops->ws_init(be, &p, &ws) != GP_OK) return 1;
    float *inv = malloc(sizeof(float) * (size_t)hd / 2), *nv = rand_vec((size_t)hd, 61, 1);
    float *ne = malloc(sizeof(float) * (size_t)hd), *qk = rand_vec((size_t)N * (NH + NKV) * hd, 62, 2);
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / hd);
    void *hn;
    gp_wt norm = make_weight(be, GP_WFMT_BF16, nv, 1, hd, ne, &hn);
    float *dinv = bu_dev_from(be, inv, (size_t)hd / 2), *d[4];
    const size_t nq = (size_t)N * NH * hd, nk = (size_t)N * NKV * hd;
    for (int i = 0; i < 4; i++) d[i] = bu_dev_from(be, qk + (i & 1 ? nq : 0), i & 1 ? nk : nq);
    float *vh = rand_vec(nk, 63, 2), *dv = bu_dev_from(be, vh, nk);
    gp_kv_rows ck = bu_kv_alloc(be, R0 + N, NKV * hd, 0, 32), cv = bu_kv_alloc(be, R0 + N, NKV * hd, 0, 32);
    const gp_kv_dst dst = {&ck, &cv, dv, R0};
    be->ops->rope_qk(ws, d[0], d[1], N, NH, NKV, hd, POS, dinv, &norm, &norm, 1e-6f, 0, &dst);
    be->ops->rmsnorm(ws, d[2], d[2], &norm, N * NH, hd, 1e-6f, 0);
    be->ops->rmsnorm(ws, d[3], d[3], &norm, N * NKV, hd, 1e-6f, 0);
    be->ops->rope(ws, d[2], N, NH, hd, POS, dinv);
    be->ops->rope(ws, d[3], N, NKV, hd, POS, dinv);
    int bad = !same_bits(be, ws, d[0], d[2], nq) + !same_bits(be, ws, d[1], d[3], nk);
    const size_t at = (size_t)R0 * NKV * hd;
    bad += !same_bits(be, ws, ck.f + at, d[1], nk) + !same_bits(be, ws, cv.f + at, dv, nk);
    bu_kv_free(be, &ck), bu_kv_free(be, &cv);
    be->ops->dealloc(be, dv);
    free(vh);
    for (int i = 0; i < 4; i++) be->ops->dealloc(be, d[i]);
    be->ops->unbind_weight(be, &norm);
    be->ops->dealloc(be, dinv);
    be->ops->ws_free(ws);
    free(inv), free(nv), free(ne), free(qk), free(hn);
    return bad;
}

TEST(backend_ops_rope_qk_gives_its_parts_bits_at_model_head_sizes) {
    /* 64-256: a device's heads in registers; 96 and 80: its general path */
    const int32_t hds[] = {64, 128, 192, 256, 96, 80};
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        int bad = 0;
        for (int32_t mode = 0; mode < 2; mode++)
            for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++)
                bad += rope_qk_case(be, mode ? GP_COMPUTE_BF16 : GP_COMPUTE_F32, hds[i]);
        NOTE("%s: rope_qk (head norms, then rope) vs rmsnorm and rope apart, its cache rows vs its keys and the values "
             "(f32 and bf16 modes, head_dim 64, 128, 192, 256, 96, 80): %d outputs differ (want 0)", BACKENDS[b].name,
             bad);
        CHECK_EQ_INT(bad, 0);
        gp_backend_free(be);
    }
}

TEST(backend_ops_composite_ops_give_their_parts_bits) {
    for (size_t b = 0; b < N_BACKENDS; b++) {
        gp_backend *be = open_backend(b);
        if (!be) continue;
        int bad = 0;
        /* 37: a device's prefill kernels; 300: three tiles of 128 tokens */
        const int32_t ns[] = {1, 5, 37, 300};
        /* 1024: wide enough for a fused norm; 2048: a device's norm too wide for 4 values a thread in registers (the
         * looping GLU's takes 8); 4096: too wide for those 8 as well */
        const int32_t es[] = {48, 1024, 2048, 4096};
        for (int32_t mode = 0; mode < 2; mode++)
            for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
                for (size_t e = 0; e < sizeof es / sizeof es[0]; e++)
                    bad += composite_case(be, mode ? GP_COMPUTE_BF16 : GP_COMPUTE_F32, ns[i], es[e]);
        NOTE("%s: linears / linear_glu [after a norm] / linear_add / rope_qk vs their parts (f32 and bf16 modes, 1, 5, "
             "37 and 300 tokens, 48, 1024, 2048 and 4096 features): %d outputs differ (want 0)", BACKENDS[b].name, bad);
        CHECK_EQ_INT(bad, 0);
        gp_backend_free(be);
    }
}
