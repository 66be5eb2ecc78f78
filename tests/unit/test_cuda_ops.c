/* test_cuda_ops.c — the CUDA backend against the CPU backend, op by op through backend.h (built with `make cuda`;
 * run on a GPU by `make test-cuda`): the same random inputs bound and uploaded through each backend, the outputs
 * compared with the tolerance printed next to the actual error.  Beyond test_backend_ops.c (every op of every
 * backend against a double-precision definition on small shapes) it covers the shapes and formats the kernels
 * specialize on (long rows, 16-byte and odd paths, MLX affine 3/4/6/8 bits with group 16/32/64), LoRA terms, the
 * quantizer of the KV cache (the same bits as the CPU's), attention across several key splits, the CUDA backend's
 * own promise (one token alone gives the bits it has inside a chunk; a query alone gives its bits inside a block of
 * queries), and the bf16 compute mode op by op against the CPU's bf16 mode.  Without a device the tests are skipped
 * with the driver's reason (test_cuda_select.c checks the error a user sees). */
#include "test.h"

#ifdef GP_CUDA
#include "backend_util.h"
#include "kernels/backend.h"
#include "util/util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static gp_backend *g_be[2]; /* [0] the CPU (reference), [1] CUDA */
static int g_no_device;

/* Opens both backends once; 0 (after recording a skip) without a device. */
static int backends(void) {
    if (g_be[1]) return 1;
    if (!g_no_device && gp_backend_cuda_init(0, &g_be[1]) != GP_OK) g_no_device = 1;
    if (g_no_device) {
        printf("    skip: %s\n", "no usable CUDA device");
        gp_test_skipped = 1;
        return 0;
    }
    gp_backend_params bp = {1};
    return gp_backend_cpu_init(&bp, &g_be[0]) == GP_OK;
}

static gp_ws *mk_ws(gp_backend *be, int32_t compute, int32_t tokens, int32_t keys, int32_t hd, int32_t heads,
                    int32_t rank) {
    gp_ws_params p = {.n_threads = 1, .max_tokens = tokens, .max_keys = keys, .head_dim = hd, .n_heads = heads,
                      .max_lora_rank = rank, .compute = compute, .max_cols = 8192};
    gp_ws *ws = NULL;
    return be->ops->ws_init(be, &p, &ws) == GP_OK ? ws : NULL;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

static float *rand_f32(size_t n, uint32_t seed, float scale) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand(&seed) * scale;
    return v;
}

/* v [n] rounded to bf16 in place (bf16 mode values). */
static void bf16_round(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = gp_bf16_to_f32(gp_f32_to_bf16(v[i]));
}

/* A host weight [rows, cols] of format f with random values (MLX affine: `bits`, `group`, bf16 scales/biases). */
static gp_wt host_wt(gp_wfmt f, int64_t rows, int64_t cols, int bits, int group, uint32_t seed) {
    const size_t n = (size_t)(rows * cols);
    gp_wt w = gp_wt_dense(f, NULL, rows, cols);
    if (f == GP_WFMT_QAFFINE) {
        const size_t words = n * (size_t)bits / 32, ng = (size_t)rows * (size_t)(cols / group);
        uint32_t *q = calloc(words + 1, 4);
        uint16_t *sc = malloc(ng * 2), *bi = malloc(ng * 2);
        for (size_t i = 0; i < words; i++) {
            seed = seed * 1664525u + 1013904223u;
            q[i] = seed ^ (seed >> 13);
        }
        for (size_t g = 0; g < ng; g++) {
            sc[g] = gp_f32_to_bf16(0.02f + 0.01f * frand(&seed));
            bi[g] = gp_f32_to_bf16(0.3f * frand(&seed));
        }
        w.data = q;
        w.scales = (gp_wt_aux){sc, GP_DTYPE_BF16};
        w.biases = (gp_wt_aux){bi, GP_DTYPE_BF16};
        w.bits = bits;
        w.group_size = group;
        return w;
    }
    void *d = malloc(n * (f == GP_WFMT_F32 ? 4 : 2) + 16);
    for (size_t i = 0; i < n; i++) {
        const float v = frand(&seed);
        if (f == GP_WFMT_F32) ((float *)d)[i] = v;
        else if (f == GP_WFMT_BF16) ((uint16_t *)d)[i] = gp_f32_to_bf16(v);
        else ((uint16_t *)d)[i] = gp_f32_to_f16(v);
    }
    w.data = d;
    return w;
}

static void host_wt_free(gp_wt *w) {
    free((void *)w->data), free((void *)w->scales.data), free((void *)w->biases.data);
}

/* Max |a - b| / (1 + |b|) (NaN counts as infinite). */
static double max_rel(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(e == e)) return INFINITY;
        m = e > m ? e : m;
    }
    return m;
}

/* ---- linear ---- */

/* A linear with its weights bound on backend be (host views in h), optional bias and 2 LoRA terms. */
typedef struct lin {
    gp_linear L;
    gp_lora lora[2];
} lin;

static void lin_bind(gp_backend *be, const gp_linear *h, lin *o) {
    memset(o, 0, sizeof *o);
    CHECK_STATUS(be->ops->bind_weight(be, &h->w, &o->L.w), GP_OK);
    if (h->bias.data) CHECK_STATUS(be->ops->bind_weight(be, &h->bias, &o->L.bias), GP_OK);
    for (int i = 0; i < h->n_lora; i++) {
        CHECK_STATUS(be->ops->bind_weight(be, &h->lora[i].a, &o->lora[i].a), GP_OK);
        CHECK_STATUS(be->ops->bind_weight(be, &h->lora[i].b, &o->lora[i].b), GP_OK);
        o->lora[i].scale = h->lora[i].scale;
    }
    o->L.lora = h->n_lora ? o->lora : NULL;
    o->L.n_lora = h->n_lora;
}

static void lin_unbind(gp_backend *be, lin *o) {
    be->ops->unbind_weight(be, &o->L.w);
    if (o->L.bias.data) be->ops->unbind_weight(be, &o->L.bias);
    for (int i = 0; i < o->L.n_lora; i++) {
        be->ops->unbind_weight(be, &o->lora[i].a);
        be->ops->unbind_weight(be, &o->lora[i].b);
    }
}

/* y [n, rows] = linear(x [n, cols]) on backend b in compute mode; caller frees. */
static float *run_linear(int b, int32_t compute, const gp_linear *h, const float *x, int32_t n) {
    gp_backend *be = g_be[b];
    gp_ws *ws = mk_ws(be, compute, n, 1, 1, 1, 8);
    lin o;
    lin_bind(be, h, &o);
    float *dx = bu_dev_from(be, x, (size_t)n * h->w.cols), *dy = be->ops->alloc(be, sizeof(float) * n * h->w.rows);
    be->ops->linear(ws, dy, dx, &o.L, n);
    float *y = bu_host_of(be, ws, dy, (size_t)n * h->w.rows);
    be->ops->dealloc(be, dx), be->ops->dealloc(be, dy);
    lin_unbind(be, &o);
    be->ops->ws_free(ws);
    return y;
}

/* One linear case on both backends: returns the max relative error CUDA vs CPU; *chunk_ok: CUDA gives token t alone
 * the bits it has inside the chunk. */
static double linear_case(gp_wfmt f, int bits, int group, int64_t R, int64_t K, int variant, int32_t compute,
                          int *chunk_ok) {
    enum { N = 45 }; /* several tiles of tokens of the tiled prefill kernel (16 a tile), the last one partial */
    gp_linear h = {host_wt(f, R, K, bits, group, (uint32_t)(R * 7 + K + bits)), {0}, NULL, 0};
    gp_lora lo[2];
    if (variant >= 1) h.bias = host_wt(GP_WFMT_BF16, 1, R, 0, 0, 99);
    if (variant >= 2) {
        lo[0] = (gp_lora){host_wt(GP_WFMT_F32, 3, K, 0, 0, 5), host_wt(GP_WFMT_F32, R, 3, 0, 0, 6), 0.5f};
        lo[1] = (gp_lora){host_wt(GP_WFMT_F32, 4, K, 0, 0, 7), host_wt(GP_WFMT_F32, R, 4, 0, 0, 8), -2.0f};
        h.lora = lo, h.n_lora = 2;
    }
    float *x = rand_f32((size_t)N * K, 3, 2.0f);
    if (compute == GP_COMPUTE_BF16) bf16_round(x, (size_t)N * K);
    float *ref = run_linear(0, compute, &h, x, N), *y = run_linear(1, compute, &h, x, N);
    const double e = max_rel(y, ref, (size_t)N * R);
    *chunk_ok = 1;
    for (int32_t t = 0; t < N; t += 5) {
        float *y1 = run_linear(1, compute, &h, x + (size_t)t * K, 1);
        *chunk_ok &= !memcmp(y1, y + (size_t)t * R, (size_t)R * 4);
        free(y1);
    }
    host_wt_free(&h.w);
    if (variant >= 1) host_wt_free(&h.bias);
    for (int i = 0; i < h.n_lora; i++) host_wt_free(&lo[i].a), host_wt_free(&lo[i].b);
    free(x), free(ref), free(y);
    return e;
}

TEST(cuda_backend_linear_matches_cpu_and_is_chunk_invariant) {
    if (!backends()) return;
    const struct { gp_wfmt f; int bits, group; const char *name; } fmts[] = {
        {GP_WFMT_F32, 0, 0, "f32"}, {GP_WFMT_BF16, 0, 0, "bf16"}, {GP_WFMT_F16, 0, 0, "f16"},
        {GP_WFMT_QAFFINE, 4, 64, "q4g64"}, {GP_WFMT_QAFFINE, 3, 32, "q3g32"}, {GP_WFMT_QAFFINE, 6, 32, "q6g32"},
        {GP_WFMT_QAFFINE, 8, 16, "q8g16"}, {GP_WFMT_QAFFINE, 2, 64, "q2g64"}, {GP_WFMT_QAFFINE, 5, 32, "q5g32"}};
    const int64_t shapes[][2] = {{37, 64}, {129, 1024}, {64, 80}, {8, 4104}, {300, 2048}};
    double worst = 0;
    int cases = 0, chunk_all = 1;
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t K = shapes[si][1];
            if (fmts[fi].f == GP_WFMT_QAFFINE && (K % fmts[fi].group || (K * fmts[fi].bits) % 32)) continue;
            for (int variant = 0; variant < 3; variant++) {
                int ok;
                const double e = linear_case(fmts[fi].f, fmts[fi].bits, fmts[fi].group, shapes[si][0], K, variant,
                                             GP_COMPUTE_F32, &ok);
                if (e > 1e-4 || !ok)
                    NOTE("%s [%lld, %lld] variant %d: max rel err %.3g, token alone %s", fmts[fi].name,
                         (long long)shapes[si][0], (long long)K, variant, e, ok ? "same bits" : "DIFFERS");
                worst = e > worst ? e : worst;
                chunk_all &= ok;
                cases++;
            }
        }
    NOTE("linear cuda vs cpu: %d cases (f32/bf16/f16, MLX affine 2/3/4/5/6/8 bits, bias, LoRA), max rel err %.3g "
         "(tol 1e-4); one token alone %s", cases, worst, chunk_all ? "gives the chunk's bits" : "DIFFERS");
    CHECK(worst < 1e-4);
    CHECK(chunk_all);
}

/* ---- the other ops ---- */

typedef struct ew_out {
    float *norm[2], *rope, *emb, *qemb, *glu[2], *addcap;
} ew_out;

static void ew_free(ew_out *o) {
    free(o->norm[0]), free(o->norm[1]), free(o->rope), free(o->emb), free(o->qemb), free(o->glu[0]), free(o->glu[1]);
    free(o->addcap);
}

/* rmsnorm (both conventions), rope_qk with per-head norms, embed (bf16 and MLX 4-bit tables, scaled), glu (both
 * activations), add + add_row + softcap on backend b in compute mode. */
static ew_out run_elementwise(int b, int32_t compute) {
    enum { N = 6, D = 2048, NH = 8, NKV = 2, HD = 64, V = 50 };
    gp_backend *be = g_be[b];
    gp_ws *ws = mk_ws(be, compute, N, 1, HD, NH, 0);
    ew_out o = {0};
    float *x = rand_f32((size_t)N * D, 1, 4.0f), *u = rand_f32((size_t)N * D, 2, 4.0f);
    if (compute == GP_COMPUTE_BF16) bf16_round(x, (size_t)N * D), bf16_round(u, (size_t)N * D);
    gp_wt hw = host_wt(GP_WFMT_BF16, 1, D, 0, 0, 3), hn = host_wt(GP_WFMT_BF16, 1, HD, 0, 0, 4), w, nw;
    gp_wt ht = host_wt(GP_WFMT_BF16, V, D, 0, 0, 5), hq = host_wt(GP_WFMT_QAFFINE, V, D, 4, 64, 6), t, tq;
    be->ops->bind_weight(be, &hw, &w), be->ops->bind_weight(be, &hn, &nw);
    be->ops->bind_weight(be, &ht, &t), be->ops->bind_weight(be, &hq, &tq);
    float *dx = bu_dev_from(be, x, (size_t)N * D), *du = bu_dev_from(be, u, (size_t)N * D), *dy = bu_dev_from(be, x, (size_t)N * D);
    for (int po = 0; po < 2; po++) {
        be->ops->rmsnorm(ws, dy, dx, &w, N, D, 1e-6f, po);
        o.norm[po] = bu_host_of(be, ws, dy, (size_t)N * D);
    }
    float inv[HD / 2];
    for (int i = 0; i < HD / 2; i++) inv[i] = powf(500000.0f, -2.0f * i / HD);
    float *dinv = bu_dev_from(be, inv, HD / 2);
    be->ops->upload(be, dy, x, sizeof(float) * N * D);
    be->ops->rope_qk(ws, dy, dy + N * NH * HD, N, NH, NKV, HD, 1000, dinv, &nw, &nw, 1e-6f, 1, NULL);
    o.rope = bu_host_of(be, ws, dy, (size_t)N * (NH + NKV) * HD);
    const int32_t ids[N] = {3, 0, 49, 7, 7, 21};
    be->ops->embed(ws, dy, ids, N, &t, 45.25f);
    o.emb = bu_host_of(be, ws, dy, (size_t)N * D);
    be->ops->embed(ws, dy, ids, N, &tq, 1.0f);
    o.qemb = bu_host_of(be, ws, dy, (size_t)N * D);
    for (int act = 0; act < 2; act++) {
        be->ops->upload(be, dy, x, sizeof(float) * N * D);
        be->ops->glu(ws, dy, du, (int64_t)N * D, (gp_act)act);
        o.glu[act] = bu_host_of(be, ws, dy, (size_t)N * D);
    }
    be->ops->upload(be, dy, x, sizeof(float) * N * D);
    be->ops->add(ws, dy, du, (int64_t)N * D);
    be->ops->add_row(ws, dy, dx, 0.5f, N, D);
    be->ops->softcap(ws, dy, (int64_t)N * D, 30.0f);
    o.addcap = bu_host_of(be, ws, dy, (size_t)N * D);
    be->ops->unbind_weight(be, &w), be->ops->unbind_weight(be, &nw);
    be->ops->unbind_weight(be, &t), be->ops->unbind_weight(be, &tq);
    be->ops->dealloc(be, dx), be->ops->dealloc(be, du), be->ops->dealloc(be, dy), be->ops->dealloc(be, dinv);
    be->ops->ws_free(ws);
    host_wt_free(&hw), host_wt_free(&hn), host_wt_free(&ht), host_wt_free(&hq);
    free(x), free(u);
    return o;
}

TEST(cuda_backend_elementwise_ops_match_cpu) {
    if (!backends()) return;
    ew_out c = run_elementwise(0, GP_COMPUTE_F32), g = run_elementwise(1, GP_COMPUTE_F32);
    const size_t N = 6 * 2048;
    double e[7] = {max_rel(g.norm[0], c.norm[0], N), max_rel(g.norm[1], c.norm[1], N),
                   max_rel(g.rope, c.rope, 6 * 10 * 64), max_rel(g.emb, c.emb, N), max_rel(g.qemb, c.qemb, N),
                   fmax(max_rel(g.glu[0], c.glu[0], N), max_rel(g.glu[1], c.glu[1], N)), max_rel(g.addcap, c.addcap, N)};
    NOTE("cuda vs cpu: rmsnorm %.2g / %.2g (1 + w), norms + rope %.2g, embed bf16 %.2g, embed MLX 4-bit %.2g, glu "
         "%.2g, add + add_row + softcap %.2g (tol 1e-5)", e[0], e[1], e[2], e[3], e[4], e[5], e[6]);
    for (int i = 0; i < 7; i++) CHECK(e[i] < 1e-5);
    ew_free(&c), ew_free(&g);
}

/* ---- KV rows and attention ---- */

TEST(cuda_backend_kv_quantizer_gives_the_cpu_bits) {
    if (!backends()) return;
    enum { ROWS = 9, KVD = 512 };
    float *k = rand_f32((size_t)ROWS * KVD, 11, 3.0f), *v = rand_f32((size_t)ROWS * KVD, 12, 0.5f);
    int differ = 0;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2) {
            uint8_t *q[2];
            float *sc[2];
            const int32_t rb = KVD * bits / 8, ng = KVD / group;
            for (int b = 0; b < 2; b++) {
                gp_backend *be = g_be[b];
                gp_ws *ws = mk_ws(be, 0, ROWS, 1, 1, 1, 0);
                gp_kv_rows rk = bu_kv_alloc(be, ROWS, KVD, bits, group), rv = bu_kv_alloc(be, ROWS, KVD, bits, group);
                float *dk = bu_dev_from(be, k, (size_t)ROWS * KVD), *dv = bu_dev_from(be, v, (size_t)ROWS * KVD);
                be->ops->kv_store(ws, &rk, &rv, 0, dk, dv, ROWS, 1);
                CHECK_STATUS(be->ops->finish(ws), GP_OK);
                q[b] = malloc((size_t)ROWS * rb * 2), sc[b] = malloc(sizeof(float) * ROWS * ng * 4);
                be->ops->download(be, q[b], rk.q, (size_t)ROWS * rb);
                be->ops->download(be, q[b] + ROWS * rb, rv.q, (size_t)ROWS * rb);
                be->ops->download(be, sc[b], rk.scale, sizeof(float) * ROWS * ng);
                be->ops->download(be, sc[b] + ROWS * ng, rk.minv, sizeof(float) * ROWS * ng);
                be->ops->download(be, sc[b] + 2 * ROWS * ng, rv.scale, sizeof(float) * ROWS * ng);
                be->ops->download(be, sc[b] + 3 * ROWS * ng, rv.minv, sizeof(float) * ROWS * ng);
                bu_kv_free(be, &rk), bu_kv_free(be, &rv);
                be->ops->dealloc(be, dk), be->ops->dealloc(be, dv);
                be->ops->ws_free(ws);
            }
            differ += memcmp(q[0], q[1], (size_t)ROWS * rb * 2) != 0;
            differ += memcmp(sc[0], sc[1], sizeof(float) * ROWS * ng * 4) != 0;
            free(q[0]), free(q[1]), free(sc[0]), free(sc[1]);
        }
    NOTE("KV quantizer (4/8 bits x group 32/64/128, keys and values): %d of 12 arrays differ from the CPU's bits "
         "(want 0)", differ);
    CHECK_EQ_INT(differ, 0);
    free(k), free(v);
}

/* Attention of n queries at positions held.. over float rows of positions [0, held - 50), 8-bit rows of [held - 50,
 * held) and the chunk's staged float rows (window > 0: a sliding window with 4 pinned positions), heads of hd
 * elements; bits == 0: a float32 cache (every row float) and bf16 values (the bf16 mode's tensor-core path).  Returns
 * out [n, nh, hd] (caller frees); one_by_one: a call per query (decode: 300 held keys are 5 splits, a cluster; 700
 * are 11, folded by the last block of each kv head; `make test-cuda` also runs them with GP_CU_ATTN_LOOP_BLOCKS=3,
 * blocks that take several splits each, and the clusters' splits that way). */
static float *run_attention(int b, int32_t n, int32_t window, float softcap, int one_by_one, int32_t compute,
                            int32_t bits, int32_t hd, int32_t held) {
    enum { NH = 8, NKV = 2 };
    const int32_t CAP = held, POS0 = held, F = held - 50; /* F: the float rows */
    const int32_t kvd = NKV * hd;
    gp_backend *be = g_be[b];
    gp_ws *ws = mk_ws(be, compute, n, POS0 + n, hd, NH, 0);
    gp_kv_rows ck = bu_kv_alloc(be, CAP, kvd, bits, 32), cv = bu_kv_alloc(be, CAP, kvd, bits, 32);
    gp_kv_rows sk = bu_kv_alloc(be, n, kvd, bits, 32), sv = bu_kv_alloc(be, n, kvd, bits, 32);
    float *k = rand_f32((size_t)(CAP + n) * kvd, 21, 2.0f), *v = rand_f32((size_t)(CAP + n) * kvd, 22, 2.0f);
    float *q = rand_f32((size_t)n * NH * hd, 23, 2.0f);
    const int b16 = bits == 16; /* bfloat16 rows: every held position's, rounded as stored */
    if (!bits || b16)
        bf16_round(k, (size_t)(CAP + n) * kvd), bf16_round(v, (size_t)(CAP + n) * kvd),
            bf16_round(q, (size_t)n * NH * hd);
    float *dk = bu_dev_from(be, k, (size_t)(CAP + n) * kvd), *dv = bu_dev_from(be, v, (size_t)(CAP + n) * kvd);
    be->ops->kv_store(ws, &ck, &cv, 0, dk, dv, b16 ? CAP : F, b16);
    if (!b16) be->ops->kv_store(ws, &ck, &cv, F, dk + F * kvd, dv + F * kvd, 50, bits != 0);
    gp_kv_desc d = {.k = {ck, sk}, .v = {cv, sv}, .window = window, .pinned = window ? 4 : 0};
    d.k[1].f = dk + CAP * kvd, d.v[1].f = dv + CAP * kvd; /* the chunk's float rows, read in place */
    const gp_kv_seg segs[] = {{0, F, 0, 0, 0}, {F, CAP, F, 0, bits != 0}, {CAP, CAP + n, 0, 1, 0}};
    const gp_kv_seg segs16[] = {{0, CAP, 0, 0, 1}, {CAP, CAP + n, 0, 1, 0}};
    if (b16) memcpy(d.seg, segs16, sizeof segs16);
    else memcpy(d.seg, segs, sizeof segs);
    d.n_seg = b16 ? 2 : 3;
    float *dq = bu_dev_from(be, q, (size_t)n * NH * hd);
    float *dout = be->ops->alloc(be, sizeof(float) * n * NH * hd);
    gp_attn_args a = {.out = dout, .q = dq, .kv = &d, .n = n, .pos0 = POS0, .n_heads = NH, .n_kv = NKV,
                      .head_dim = hd, .scale = 0.125f, .softcap = softcap};
    if (!one_by_one) be->ops->attention(ws, &a);
    else
        for (int32_t t = 0; t < n; t++) {
            gp_attn_args one = a;
            one.out = dout + (size_t)t * NH * hd, one.q = dq + (size_t)t * NH * hd, one.n = 1, one.pos0 = POS0 + t;
            be->ops->attention(ws, &one);
        }
    float *out = bu_host_of(be, ws, dout, (size_t)n * NH * hd);
    bu_kv_free(be, &ck), bu_kv_free(be, &cv), bu_kv_free(be, &sk), bu_kv_free(be, &sv);
    be->ops->dealloc(be, dk), be->ops->dealloc(be, dv), be->ops->dealloc(be, dq), be->ops->dealloc(be, dout);
    be->ops->ws_free(ws);
    free(k), free(v), free(q);
    return out;
}

TEST(cuda_backend_attention_matches_cpu_and_is_chunk_invariant) {
    if (!backends()) return;
    const struct { int32_t n, window; float softcap; } cases[] = {{5, 0, 0}, {1, 0, 0}, {9, 120, 0}, {3, 0, 50.0f}};
    const int32_t hds[] = {64, 128, 256, 96}; /* 32 NE (decode's plain kernels in the float32 mode) and not */
    double worst = 0;
    int same = 1;
    for (size_t k = 0; k < 3 * sizeof hds / sizeof hds[0]; k++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int32_t n = cases[i].n, hd = hds[k % 4], held = k < 4 ? 300 : k < 8 ? 700 : 2045;
            float *c = run_attention(0, n, cases[i].window, cases[i].softcap, 0, GP_COMPUTE_F32, 8, hd, held);
            float *g = run_attention(1, n, cases[i].window, cases[i].softcap, 0, GP_COMPUTE_F32, 8, hd, held);
            float *g1 = run_attention(1, n, cases[i].window, cases[i].softcap, 1, GP_COMPUTE_F32, 8, hd, held);
            const double e = max_rel(g, c, (size_t)n * 8 * hd);
            worst = e > worst ? e : worst;
            same &= !memcmp(g, g1, (size_t)n * 8 * hd * 4);
            free(c), free(g), free(g1);
        }
    NOTE("attention cuda vs cpu (300, 700 and 2,045 held keys: 5, 11 and 32 splits, the last a span's, chunks across "
         "the next span; float + 8-bit rows, staged chunk, window + pinned, soft-cap; head_dim 64, 128, 256, 96): max "
         "rel err %.3g (tol 1e-5); a query alone %s", worst,
         same ? "gives its bits inside the block" : "DIFFERS");
    CHECK(worst < 1e-5);
    CHECK(same);
}

/* ---- the bf16 mode ---- */

/* Elements of a and b [n] that differ, and the largest difference in bf16 steps of the larger magnitude, or of
 * 2^-10 of the array's largest magnitude when that is larger (a sum that cancels to nearly 0 carries the absolute
 * error of its terms, not of its value). */
static size_t bf16_steps(const float *a, const float *b, size_t n, double *worst_steps) {
    size_t differ = 0;
    double floor = 0;
    for (size_t i = 0; i < n; i++) floor = fmax(floor, fabs(b[i]) / 1024.0);
    for (size_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        differ++;
        const double m = fmax(fmax(fabs(a[i]), fabs(b[i])), floor);
        int ex;
        frexp(m, &ex);
        const double step = ldexp(1.0, ex - 8), s = fabs((double)a[i] - b[i]) / step;
        *worst_steps = s > *worst_steps || !(s == s) ? s : *worst_steps;
    }
    return differ;
}

/* Element i of a dense host weight as float (rounded to bf16: what the bf16 mode multiplies). */
static double bf16_of_wt(const gp_wt *w, size_t i) {
    const float v = w->format == GP_WFMT_F32 ? ((const float *)w->data)[i]
                    : w->format == GP_WFMT_BF16 ? gp_bf16_to_f32(((const uint16_t *)w->data)[i])
                                                : gp_f16_to_f32(((const uint16_t *)w->data)[i]);
    return gp_bf16_to_f32(gp_f32_to_bf16(v));
}

/* Worst |got - ref| / (sum over k of |x_k w_k|) of the bf16 mode's linear on tensor cores against the CPU's float32
 * sums, beyond one bf16 step of the output: the tensor cores' accumulation error relative to the terms' size. */
static double mma_err(const gp_linear *h, const float *x, int32_t N, const float *got, const float *ref) {
    double worst = 0;
    for (int32_t t = 0; t < N; t++)
        for (int64_t r = 0; r < h->w.rows; r++) {
            double mag = 0;
            for (int64_t k = 0; k < h->w.cols; k++) mag += fabs(x[(size_t)t * h->w.cols + k] * bf16_of_wt(&h->w, (size_t)(r * h->w.cols + k)));
            const float a = got[(size_t)t * h->w.rows + r], b = ref[(size_t)t * h->w.rows + r];
            int ex;
            frexp(fmax(fabs(a), fabs(b)), &ex);
            const double d = fabs((double)a - b) - ldexp(1.0, ex - 8);
            if (d > 0 && mag > 0) worst = fmax(worst, d / mag);
        }
    return worst;
}

TEST(cuda_backend_bf16_mode_matches_the_cpu_bf16_mode) {
    if (!backends()) return;
    size_t differ = 0, total = 0;
    double steps = 0, acc_err = 0;
    /* linears on tensor cores: bf16, f16 and f32 weights (rounded to bf16 as read), bias, LoRA; 37, 130 or 300
     * tokens (the prefill tiles: bf16 weights take the pipelined GEMM, 72 columns leave two chains empty; 300: three
     * 128-token tiles, on Hopper in pairs with an empty fourth) against one token alone (the decode kernel) */
    const struct { gp_wfmt f; int64_t R, K; int32_t N; } lc[] = {
        {GP_WFMT_BF16, 96, 2048, 37}, {GP_WFMT_F16, 72, 1032, 37}, {GP_WFMT_F32, 8200, 256, 37},
        {GP_WFMT_BF16, 136, 72, 130}, {GP_WFMT_BF16, 264, 1056, 130}, {GP_WFMT_BF16, 264, 1056, 300}};
    int alone_same = 1;
    for (int f = 0; f < (int)(sizeof lc / sizeof lc[0]); f++)
        for (int variant = 0; variant < 3; variant++) {
            const int32_t N = lc[f].N;
            const int64_t R = lc[f].R, K = lc[f].K;
            gp_linear h = {host_wt(lc[f].f, R, K, 0, 0, 31 + (uint32_t)f), {0}, NULL, 0};
            gp_lora lo[1];
            if (variant >= 1) h.bias = host_wt(GP_WFMT_BF16, 1, R, 0, 0, 32);
            if (variant == 2) {
                lo[0] = (gp_lora){host_wt(GP_WFMT_F32, 4, K, 0, 0, 33), host_wt(GP_WFMT_F32, R, 4, 0, 0, 34), 0.5f};
                h.lora = lo, h.n_lora = 1;
            }
            float *x = rand_f32((size_t)N * K, 35, 2.0f);
            bf16_round(x, (size_t)N * K);
            float *c = run_linear(0, GP_COMPUTE_BF16, &h, x, N), *g = run_linear(1, GP_COMPUTE_BF16, &h, x, N);
            acc_err = fmax(acc_err, mma_err(&h, x, N, g, c));
            for (int32_t t = 0; t < N; t += 17) {
                float *g1 = run_linear(1, GP_COMPUTE_BF16, &h, x + (size_t)t * K, 1);
                alone_same &= !memcmp(g1, g + (size_t)t * R, (size_t)R * 4);
                free(g1);
            }
            host_wt_free(&h.w);
            if (variant >= 1) host_wt_free(&h.bias);
            if (variant == 2) host_wt_free(&lo[0].a), host_wt_free(&lo[0].b);
            free(x), free(c), free(g);
        }
    NOTE("bf16 linear on tensor cores vs the cpu's float32 sums (bf16/f16/f32 weights, bias, LoRA, 37/130/300 tokens): "
         "error beyond one bf16 step at most %.3g of the terms' magnitude (tol 2^-8: tensor cores accumulate with "
         "fewer bits); one token alone %s", acc_err, alone_same ? "gives its bits inside the chunk" : "DIFFERS");
    CHECK(acc_err <= 1.0 / 256);
    CHECK(alone_same);
    ew_out c = run_elementwise(0, GP_COMPUTE_BF16), g = run_elementwise(1, GP_COMPUTE_BF16);
    const size_t N = 6 * 2048;
    float *pc[] = {c.norm[0], c.norm[1], c.rope, c.emb, c.qemb, c.glu[0], c.glu[1], c.addcap};
    float *pg[] = {g.norm[0], g.norm[1], g.rope, g.emb, g.qemb, g.glu[0], g.glu[1], g.addcap};
    for (int i = 0; i < 8; i++) {
        const size_t n = i == 2 ? 6 * 10 * 64 : N;
        differ += bf16_steps(pg[i], pc[i], n, &steps);
        total += n;
    }
    ew_free(&c), ew_free(&g);
    NOTE("bf16 mode, cuda vs the cpu's bf16 mode (norms, rope, embed, glu, add, softcap): %zu of %zu elements "
         "differ, by at most %.3g bf16 steps (tol: 1 step, 1%% of the elements; a float32 value in another order "
         "rounds to the neighbouring bf16 value now and then)", differ, total, steps);
    CHECK(steps <= 1.0);
    CHECK(differ * 100 <= total);
    /* attention follows sdpa in this mode (not the CPU's eager softmax): close, not equal; over a float32 cache or
     * bfloat16 rows on tensor cores, with and without a sliding window (head_dim 128 too: decode's plain tensor-core
     * kernels and the chunk's one-warp kernels take 64 and 128 apart; 700 held keys: splits every row sees whole;
     * 2,045: the chunk's queries and the window across a span's end, two spans folded) */
    static const struct { int32_t bits, window, hd, held; } ac_cases[] = { /* (700: decode's last block folds) */
        {8, 0, 64, 300},   {0, 0, 64, 300},   {0, 120, 64, 300},  {0, 0, 128, 300},
        {0, 0, 64, 700},   {0, 0, 128, 700},  {16, 0, 64, 700},   {16, 0, 128, 700},
        {0, 120, 64, 2045}, {0, 0, 128, 2045}, {16, 0, 64, 2045}, {16, 120, 128, 2045}};
    for (size_t i = 0; i < sizeof ac_cases / sizeof ac_cases[0]; i++) {
        const int32_t bits = ac_cases[i].bits, window = ac_cases[i].window, hd = ac_cases[i].hd;
        const int32_t held = ac_cases[i].held;
        float *ac = run_attention(0, 5, window, 0, 0, GP_COMPUTE_BF16, bits, hd, held);
        float *ag = run_attention(1, 5, window, 0, 0, GP_COMPUTE_BF16, bits, hd, held);
        float *ag1 = run_attention(1, 5, window, 0, 1, GP_COMPUTE_BF16, bits, hd, held);
        const double e = max_rel(ag, ac, (size_t)5 * 8 * hd);
        NOTE("bf16 attention (sdpa's flash softmax; %s, window %d, head_dim %d, %d held keys) vs the cpu's eager bf16: "
             "max rel err %.3g (tol 3e-2); a query alone %s", bits == 8 ? "8-bit rows, float32 sums" : bits ?
             "bfloat16 rows, tensor cores" : "float32 cache, tensor cores", window, hd, held, e,
             memcmp(ag, ag1, (size_t)5 * 8 * hd * 4) ? "DIFFERS" : "gives its bits inside the block");
        CHECK(e < 3e-2);
        CHECK(!memcmp(ag, ag1, (size_t)5 * 8 * hd * 4));
        free(ac), free(ag), free(ag1);
    }
}

#endif
