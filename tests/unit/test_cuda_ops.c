/* test_cuda_ops.c — the CUDA op harness (built with `make cuda`; run on a GPU by `make test-cuda`): every op of
 * kernels/cuda/cuda_ops.h against the CPU backend's op on the same random inputs, including sizes that are not a
 * multiple of the vector width, printing the maximum error next to the tolerance.  It also checks the CUDA
 * backend's own promises: a projection gives the same bits for one token and inside a chunk of tokens, attention
 * gives the same bits for every chunking of the queries, and a second run gives the same bits.  Without a device
 * the tests are skipped with the driver's reason (test_cuda_select.c checks the error a user sees). */
#include "test.h"

#ifdef GP_CUDA
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static gp_cu *g_dev;
static gp_backend *g_cpu; /* the reference: the CPU backend instance and one workspace (1 thread) */
static gp_ws *g_ws;

/* The CPU backend's workspace (created once). */
static gp_ws *cpu(void) {
    if (!g_ws) {
        gp_backend_params bp = {1};
        gp_ws_params wp = {.n_threads = 1, .max_tokens = 64, .max_keys = 4096, .head_dim = 256};
        if (gp_backend_cpu_init(&bp, &g_cpu) || g_cpu->ops->ws_init(g_cpu, &wp, &g_ws)) return NULL;
    }
    return g_ws;
}

/* Opens device 0 once per process; NULL (after recording a skip) without a device. */
static gp_cu *dev(void) {
    char msg[256] = "";
    if (!g_dev && gp_cu_open(0, &g_dev, msg, sizeof msg) != 0) {
        printf("    skip: %s\n", msg);
        gp_test_skipped = 1;
        return NULL;
    }
    return g_dev;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

static float *rand_f32(size_t n, uint32_t seed, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = frand(&seed) * scale;
    return v;
}

/* Host weight of dtype dt with random values (caller frees .data). */
static gp_wt host_wt(gp_dtype dt, int64_t rows, int64_t cols, uint32_t seed) {
    gp_wt w = gp_wt_dense((gp_wfmt)gp_wfmt_of_dtype(dt), NULL, rows, cols);
    size_t n = (size_t)(rows * cols);
    void *d = malloc(n * gp_dtype_size(dt) + 16);
    for (size_t i = 0; i < n; i++) {
        float v = frand(&seed);
        if (dt == GP_DTYPE_F32) ((float *)d)[i] = v;
        else if (dt == GP_DTYPE_BF16) ((uint16_t *)d)[i] = gp_f32_to_bf16(v);
        else ((uint16_t *)d)[i] = gp_f32_to_f16(v);
    }
    w.data = d;
    return w;
}

static int cu_dtype(gp_wfmt f) { return f == GP_WFMT_F32 ? GP_CU_F32 : f == GP_WFMT_BF16 ? GP_CU_BF16 : GP_CU_F16; }

/* Device copy of n bytes of host data. */
static void *up(gp_cu *d, const void *h, size_t n) {
    void *p = NULL;
    if (gp_cu_alloc(d, &p, n ? n : 4)) return NULL;
    if (n && gp_cu_h2d(d, p, h, n)) return NULL;
    return p;
}

static gp_cu_wt dev_wt(gp_cu *d, const gp_wt *w) {
    gp_cu_wt o = {NULL, cu_dtype(w->format), w->rows, w->cols};
    if (w->data) o.data = up(d, w->data, (size_t)gp_wt_bytes(w));
    return o;
}

/* Copies n floats back from the device (caller frees). */
static float *down(gp_cu *d, const float *p, size_t n) {
    float *h = malloc(n * sizeof(float) + 4);
    if (gp_cu_d2h(d, h, p, n * sizeof(float))) memset(h, 0xff, n * sizeof(float)); /* NaN: fails the check */
    return h;
}

/* Max |a - b| / (1 + |b|) over n elements (NaN counts as infinite). */
static double max_err(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(e == e)) return INFINITY;
        if (e > m) m = e;
    }
    return m;
}

TEST(cuda_ops_matmul_matches_cpu_and_is_chunk_invariant) {
    gp_cu *d = dev();
    if (!d) return;
    gp_ws *ws = cpu();
    REQUIRE(ws);
    const gp_dtype dts[] = {GP_DTYPE_F32, GP_DTYPE_BF16, GP_DTYPE_F16};
    const int64_t shapes[][2] = {{37, 40}, {64, 2048}, {33, 13}, {129, 1000}, {8, 4104}};
    const int32_t N = 11;
    double worst = 0;
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 5; si++) {
            const int64_t R = shapes[si][0], K = shapes[si][1];
            gp_wt w = host_wt(dts[di], R, K, 7 + si), b = host_wt(dts[di], 1, R, 99 + si);
            float *x = rand_f32((size_t)N * K, 3 + di, 2.0f), *ref = malloc((size_t)N * R * sizeof(float));
            gp_linear L = {w, si & 1 ? b : gp_wt_dense(GP_WFMT_F32, NULL, 1, R), NULL, 0};
            ws->be->ops->linear(ws, ref, x, &L, N);
            gp_cu_wt dw = dev_wt(d, &w), db = dev_wt(d, &b);
            float *dx = up(d, x, (size_t)N * K * 4), *dy = NULL, *dy1 = NULL;
            gp_cu_alloc(d, (void **)&dy, (size_t)N * R * 4);
            gp_cu_alloc(d, (void **)&dy1, (size_t)R * 4);
            REQUIRE(dw.data && dx && dy && dy1);
            CHECK_EQ_INT(gp_cu_matmul(d, dy, dx, &dw, si & 1 ? &db : NULL, N), 0);
            float *y = down(d, dy, (size_t)N * R);
            double e = max_err(y, ref, (size_t)N * R);
            if (e > worst) worst = e;
            CHECK(e < 1e-4);
            float *res = rand_f32((size_t)N * R, 77, 3.0f), *dres = up(d, res, (size_t)N * R * 4);
            CHECK_EQ_INT(gp_cu_matmul_add(d, dres, dx, &dw, si & 1 ? &db : NULL, N), 0); /* = matmul, then add */
            float *yr = down(d, dres, (size_t)N * R);
            for (size_t i = 0; i < (size_t)N * R; i++) res[i] += y[i];
            CHECK(memcmp(yr, res, (size_t)N * R * 4) == 0);
            free(yr); free(res);
            gp_cu_release(d, dres);
            for (int32_t t = 0; t < N; t += 5) { /* one token alone gives the chunk's bits */
                CHECK_EQ_INT(gp_cu_matmul(d, dy1, dx + (size_t)t * K, &dw, si & 1 ? &db : NULL, 1), 0);
                float *y1 = down(d, dy1, (size_t)R);
                CHECK(memcmp(y1, y + (size_t)t * R, (size_t)R * 4) == 0);
                free(y1);
            }
            float *wide = NULL;
            gp_cu_alloc(d, (void **)&wide, (size_t)(R * K) * 4);
            CHECK_EQ_INT(gp_cu_matmul_cublas(d, dy, dx, &dw, si & 1 ? &db : NULL, N, wide), 0);
            float *yb = down(d, dy, (size_t)N * R);
            double eb = max_err(yb, ref, (size_t)N * R);
            CHECK(eb < 1e-4);
            if (eb > worst) worst = eb;
            free(yb); free(y); free(x); free(ref); free((void *)w.data); free((void *)b.data);
            gp_cu_release(d, wide); gp_cu_release(d, (void *)dw.data); gp_cu_release(d, (void *)db.data);
            gp_cu_release(d, dx); gp_cu_release(d, dy); gp_cu_release(d, dy1);
        }
    NOTE("matmul (own kernel and cuBLAS) vs CPU, 3 dtypes x 5 shapes x 11 tokens: max rel err %.3g (tol 1e-4)", worst);
}

TEST(cuda_ops_norm_rope_embed_elementwise_match_cpu) {
    gp_cu *d = dev();
    if (!d) return;
    gp_ws *ws = cpu();
    REQUIRE(ws);
    const gp_backend_ops *B = ws->be->ops;
    double worst[6] = {0};
    const int32_t n = 7, dims[] = {16, 144, 2048, 37};
    for (int di = 0; di < 4; di++) {
        const int32_t D = dims[di];
        for (int po = 0; po < 2; po++) {
            gp_wt w = host_wt(GP_DTYPE_BF16, 1, D, 5 + di);
            float *x = rand_f32((size_t)n * D, 11 + di, 4.0f), *ref = malloc((size_t)n * D * 4);
            B->rmsnorm(ws, ref, x, &w, n, D, 1e-6f, po);
            gp_cu_wt dw = dev_wt(d, &w);
            float *dx = up(d, x, (size_t)n * D * 4);
            CHECK_EQ_INT(gp_cu_rmsnorm(d, dx, dx, &dw, n, D, 1e-6f, po), 0);
            float *y = down(d, dx, (size_t)n * D);
            double e = max_err(y, ref, (size_t)n * D);
            worst[0] = e > worst[0] ? e : worst[0];
            free(y); free(x); free(ref); free((void *)w.data);
            gp_cu_release(d, (void *)dw.data); gp_cu_release(d, dx);
        }
    }
    /* rope at a large position (the angle's range reduction matters) */
    const int32_t heads = 3, hd = 64, pos0 = 4093;
    float inv[32];
    for (int i = 0; i < 32; i++) inv[i] = powf(500000.0f, -(float)(2 * i) / hd);
    float *x = rand_f32((size_t)n * heads * hd, 21, 2.0f), *ref = malloc((size_t)n * heads * hd * 4);
    memcpy(ref, x, (size_t)n * heads * hd * 4);
    B->rope(ws, ref, n, heads, hd, pos0, inv);
    float *dx = up(d, x, (size_t)n * heads * hd * 4), *dinv = up(d, inv, sizeof inv);
    int32_t *dpos = up(d, &pos0, 4);
    CHECK_EQ_INT(gp_cu_rope(d, dx, n, heads, hd, dpos, dinv), 0);
    float *y = down(d, dx, (size_t)n * heads * hd);
    worst[1] = max_err(y, ref, (size_t)n * heads * hd);
    free(y); free(x); free(ref);
    gp_cu_release(d, dx); gp_cu_release(d, dinv); gp_cu_release(d, dpos);
    /* embedding (f16 table, scaled) */
    gp_wt tab = host_wt(GP_DTYPE_F16, 50, 36, 8);
    int32_t ids[5] = {3, 49, 0, 3, 17};
    float *er = malloc(5 * 36 * 4);
    B->embed(ws, er, ids, 5, &tab, 12.0f);
    gp_cu_wt dtab = dev_wt(d, &tab);
    int32_t *dids = up(d, ids, sizeof ids);
    float *dy = NULL;
    gp_cu_alloc(d, (void **)&dy, 5 * 36 * 4);
    CHECK_EQ_INT(gp_cu_embed(d, dy, dids, 5, &dtab, 12.0f), 0);
    y = down(d, dy, 5 * 36);
    worst[2] = max_err(y, er, 5 * 36);
    CHECK(memcmp(y, er, 5 * 36 * 4) == 0); /* a widening and one product: exact */
    free(y); free(er); free((void *)tab.data);
    gp_cu_release(d, (void *)dtab.data); gp_cu_release(d, dids); gp_cu_release(d, dy);
    /* glu (both activations), add, softcap on 10007 elements */
    const int64_t E = 10007;
    for (int act = 0; act < 2; act++) {
        float *g = rand_f32((size_t)E, 30 + act, 8.0f), *u = rand_f32((size_t)E, 40 + act, 2.0f);
        float *gr = malloc((size_t)E * 4);
        memcpy(gr, g, (size_t)E * 4);
        B->glu(ws, gr, u, E, act ? GP_ACT_GELU_TANH : GP_ACT_SILU);
        float *dg = up(d, g, (size_t)E * 4), *du = up(d, u, (size_t)E * 4);
        CHECK_EQ_INT(gp_cu_glu(d, dg, du, E, act ? GP_CU_ACT_GELU_TANH : GP_CU_ACT_SILU), 0);
        y = down(d, dg, (size_t)E);
        double e = max_err(y, gr, (size_t)E);
        worst[3] = e > worst[3] ? e : worst[3];
        free(y);
        memcpy(gr, g, (size_t)E * 4);
        B->add(ws, gr, u, E);
        gp_cu_h2d(d, dg, g, (size_t)E * 4);
        CHECK_EQ_INT(gp_cu_add(d, dg, du, E), 0);
        y = down(d, dg, (size_t)E);
        CHECK(memcmp(y, gr, (size_t)E * 4) == 0);
        free(y);
        memcpy(gr, g, (size_t)E * 4);
        B->softcap(ws, gr, E, 3.0f);
        gp_cu_h2d(d, dg, g, (size_t)E * 4);
        CHECK_EQ_INT(gp_cu_softcap(d, dg, E, 3.0f), 0);
        y = down(d, dg, (size_t)E);
        double e2 = max_err(y, gr, (size_t)E);
        worst[4] = e2 > worst[4] ? e2 : worst[4];
        free(y); free(g); free(u); free(gr);
        gp_cu_release(d, dg); gp_cu_release(d, du);
    }
    NOTE("max rel err vs CPU: rmsnorm %.3g, rope %.3g, embed %.3g, glu %.3g, softcap %.3g (tol 1e-5)", worst[0],
         worst[1], worst[2], worst[3], worst[4]);
    for (int i = 0; i < 5; i++) CHECK(worst[i] < 1e-5);
}

/* One attention case: n_old cached positions then a chunk of n queries; CPU reference vs CUDA, and CUDA with the
 * chunk split into one-token calls (cache stored as it goes) gives the same bits. */
static double attn_case(gp_cu *d, int32_t n_old, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t window,
                        int32_t cap, int32_t keep, float softcap, uint32_t seed) {
    const int32_t kvd = nkv * hd, total = n_old + n;
    float *kall = rand_f32((size_t)total * kvd, seed, 2.0f), *vall = rand_f32((size_t)total * kvd, seed + 1, 2.0f);
    float *q = rand_f32((size_t)n * nh * hd, seed + 2, 2.0f);
    /* host ring holding positions < n_old */
    float *kc = calloc((size_t)cap * kvd, 4), *vc = calloc((size_t)cap * kvd, 4);
    for (int32_t j = 0; j < n_old; j++) {
        int32_t s = j < keep ? j : keep + (j - keep) % (cap - keep);
        memcpy(kc + (size_t)s * kvd, kall + (size_t)j * kvd, (size_t)kvd * 4);
        memcpy(vc + (size_t)s * kvd, vall + (size_t)j * kvd, (size_t)kvd * 4);
    }
    /* reference: the positions in order (storage 0 = positions [0, n_old), storage 1 = the chunk), the visibility
     * rule of the ring (window, pinned); the device reads the same positions from its ring */
    gp_kv_desc kd;
    memset(&kd, 0, sizeof kd);
    kd.k[0].f = kall, kd.v[0].f = vall, kd.k[1].f = kall + (size_t)n_old * kvd, kd.v[1].f = vall + (size_t)n_old * kvd;
    for (int s2 = 0; s2 < 2; s2++) kd.k[s2].kvd = kd.v[s2].kvd = kvd;
    kd.seg[0] = (gp_kv_seg){0, n_old, 0, 0, 0};
    kd.seg[1] = (gp_kv_seg){n_old, total, 0, 1, 0};
    kd.n_seg = n_old > 0 ? 2 : 1;
    if (n_old == 0) kd.seg[0] = kd.seg[1];
    kd.window = window, kd.pinned = keep;
    float *ref = malloc((size_t)n * nh * hd * 4);
    gp_attn_args a = {.out = ref, .q = q, .kv = &kd, .n = n, .pos0 = n_old, .n_heads = nh, .n_kv = nkv,
                      .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .softcap = softcap};
    gp_ws *ws = cpu();
    ws->be->ops->attention(ws, &a);
    /* device: the same cache, then the whole chunk in one call */
    gp_cu_kv c = {up(d, kc, (size_t)cap * kvd * 4), up(d, vc, (size_t)cap * kvd * 4), cap, keep, kvd};
    float *dq = up(d, q, (size_t)n * nh * hd * 4), *dk = up(d, kall + (size_t)n_old * kvd, (size_t)n * kvd * 4);
    float *dv = up(d, vall + (size_t)n_old * kvd, (size_t)n * kvd * 4), *dout = NULL, *part = NULL;
    const int32_t ns = (total + GP_CU_ATTN_SPLIT - 1) / GP_CU_ATTN_SPLIT;
    gp_cu_alloc(d, (void **)&dout, (size_t)n * nh * hd * 4);
    gp_cu_alloc(d, (void **)&part, (size_t)n * nh * ns * (hd + 2) * 4);
    int32_t *dpos = up(d, &n_old, 4);
    gp_cu_attn ca = {dout, dq, dk, dv, &c, dpos, n, nh, nkv, hd, window, 0, a.scale, softcap, ns, part};
    int rc = gp_cu_attention(d, &ca);
    CHECK_EQ_INT(rc, 0);
    float *y = down(d, dout, (size_t)n * nh * hd);
    double e = max_err(y, ref, (size_t)n * nh * hd);
    /* the chunk's queries in two calls (t_off), keys of the chunk from k_new: the same bits */
    const int32_t h1 = n / 2;
    gp_cu_attn a1 = {dout, dq, dk, dv, &c, dpos, h1, nh, nkv, hd, window, 0, a.scale, softcap, ns, part};
    gp_cu_attn a2 = {dout + (size_t)h1 * nh * hd, dq + (size_t)h1 * nh * hd, dk, dv, &c, dpos, n - h1, nh, nkv, hd,
                     window, h1, a.scale, softcap, ns, part};
    CHECK_EQ_INT(gp_cu_attention(d, &a1), 0);
    CHECK_EQ_INT(gp_cu_attention(d, &a2), 0);
    float *y2 = down(d, dout, (size_t)n * nh * hd);
    CHECK(memcmp(y, y2, (size_t)n * nh * hd * 4) == 0);
    free(y2);
    /* one query at a time, storing each position after its attention (decode) */
    for (int32_t t = 0; t < n; t++) {
        int32_t p = n_old + t;
        gp_cu_h2d(d, dpos, &p, 4);
        gp_cu_attn one = {dout + (size_t)t * nh * hd, dq + (size_t)t * nh * hd, dk + (size_t)t * kvd,
                          dv + (size_t)t * kvd, &c, dpos, 1, nh, nkv, hd, window, 0, a.scale, softcap, ns, part};
        CHECK_EQ_INT(gp_cu_attention(d, &one), 0);
        CHECK_EQ_INT(gp_cu_kv_store(d, &c, dk + (size_t)t * kvd, dv + (size_t)t * kvd, 1, dpos), 0);
    }
    float *y1 = down(d, dout, (size_t)n * nh * hd);
    CHECK(memcmp(y, y1, (size_t)n * nh * hd * 4) == 0);
    free(y); free(y1); free(kall); free(vall); free(q); free(kc); free(vc); free(ref);
    gp_cu_release(d, c.k); gp_cu_release(d, c.v); gp_cu_release(d, dq); gp_cu_release(d, dk); gp_cu_release(d, dv);
    gp_cu_release(d, dout); gp_cu_release(d, part); gp_cu_release(d, dpos);
    return e;
}

TEST(cuda_ops_attention_matches_cpu_and_is_chunk_invariant) {
    gp_cu *d = dev();
    if (!d) return;
    double worst = 0, e;
    /* n_old, n, heads, kv heads, head_dim, window, cap, keep, softcap */
    e = attn_case(d, 0, 9, 4, 2, 16, 0, 64, 0, 0, 1);          worst = e > worst ? e : worst;
    e = attn_case(d, 300, 5, 8, 2, 64, 0, 600, 0, 0, 2);       worst = e > worst ? e : worst; /* two splits */
    e = attn_case(d, 20, 40, 4, 1, 32, 16, 64, 0, 50.0f, 3);   worst = e > worst ? e : worst; /* window, softcap */
    e = attn_case(d, 700, 3, 2, 2, 128, 0, 1024, 0, 0, 4);     worst = e > worst ? e : worst; /* three splits */
    e = attn_case(d, 40, 6, 4, 2, 16, 20, 24, 4, 0, 5);        worst = e > worst ? e : worst; /* rotating ring */
    e = attn_case(d, 517, 1, 32, 8, 64, 0, 1024, 0, 0, 6);     worst = e > worst ? e : worst; /* decode shape */
    NOTE("attention vs CPU (6 cases: GQA, splits, window, softcap, ring): max rel err %.3g (tol 1e-5)", worst);
    CHECK(worst < 1e-5);
}

TEST(cuda_ops_kv_store_ring_keeps_the_last_writer) {
    gp_cu *d = dev();
    if (!d) return;
    const int32_t kvd = 8, cap = 10, keep = 2, n = 20, pos0 = 5;
    float *k = rand_f32((size_t)n * kvd, 1, 1.0f), *v = rand_f32((size_t)n * kvd, 2, 1.0f);
    gp_cu_kv c = {NULL, NULL, cap, keep, kvd};
    gp_cu_alloc(d, (void **)&c.k, (size_t)cap * kvd * 4);
    gp_cu_alloc(d, (void **)&c.v, (size_t)cap * kvd * 4);
    float *dk = up(d, k, (size_t)n * kvd * 4), *dv = up(d, v, (size_t)n * kvd * 4);
    int32_t *dpos = up(d, &pos0, 4);
    float zero[10 * 8] = {0};
    gp_cu_h2d(d, c.k, zero, sizeof zero);
    gp_cu_h2d(d, c.v, zero, sizeof zero);
    CHECK_EQ_INT(gp_cu_kv_store(d, &c, dk, dv, n, dpos), 0);
    float *hk = down(d, c.k, (size_t)cap * kvd);
    float ref[10 * 8] = {0};
    for (int32_t t = 0; t < n; t++) { /* sequential writes: the last one wins */
        int32_t j = pos0 + t, s = j < keep ? j : keep + (j - keep) % (cap - keep);
        memcpy(ref + s * kvd, k + (size_t)t * kvd, kvd * 4);
    }
    CHECK(memcmp(hk, ref, sizeof ref) == 0);
    free(hk); free(k); free(v);
    gp_cu_release(d, c.k); gp_cu_release(d, c.v); gp_cu_release(d, dk); gp_cu_release(d, dv); gp_cu_release(d, dpos);
}

TEST(cuda_ops_fused_decode_ops_give_the_separate_ops_bits) {
    gp_cu *d = dev();
    if (!d) return;
    /* GLU inside the projection (with and without the residual add) == glu then matmul (then add) */
    const int64_t R = 72, K = 2048;
    for (int act = 0; act < 2; act++) {
        gp_wt w = host_wt(GP_DTYPE_BF16, R, K, 51 + act), b = host_wt(GP_DTYPE_BF16, 1, R, 61);
        float *gu = rand_f32((size_t)2 * K, 71 + act, 6.0f), *res = rand_f32((size_t)R, 81, 2.0f);
        gp_cu_wt dw = dev_wt(d, &w), db = dev_wt(d, &b);
        float *dgu = up(d, gu, (size_t)2 * K * 4), *dy = NULL, *dr = up(d, res, (size_t)R * 4), *dr2 = up(d, res, (size_t)R * 4);
        gp_cu_alloc(d, (void **)&dy, (size_t)R * 4);
        CHECK_EQ_INT(gp_cu_matmul_glu(d, dy, dgu, &dw, &db, 1, act, 0), 0);
        CHECK_EQ_INT(gp_cu_matmul_glu(d, dr, dgu, &dw, &db, 1, act, 1), 0);
        float *y1 = down(d, dy, (size_t)R), *r1 = down(d, dr, (size_t)R);
        CHECK_EQ_INT(gp_cu_glu(d, dgu, dgu + K, K, act), 0);
        CHECK_EQ_INT(gp_cu_matmul(d, dy, dgu, &dw, &db, 1), 0);
        CHECK_EQ_INT(gp_cu_matmul_add(d, dr2, dgu, &dw, &db, 1), 0);
        float *y2 = down(d, dy, (size_t)R), *r2 = down(d, dr2, (size_t)R);
        CHECK(memcmp(y1, y2, (size_t)R * 4) == 0);
        CHECK(memcmp(r1, r2, (size_t)R * 4) == 0);
        free(y1); free(y2); free(r1); free(r2); free(gu); free(res); free((void *)w.data); free((void *)b.data);
        gp_cu_release(d, (void *)dw.data); gp_cu_release(d, (void *)db.data); gp_cu_release(d, dgu);
        gp_cu_release(d, dy); gp_cu_release(d, dr); gp_cu_release(d, dr2);
    }
    /* rope + store in one kernel == rope then kv_store (ring with pinned positions, position past the ring) */
    const int32_t nh = 4, nkv = 2, hd = 32, kvd = nkv * hd, cap = 12, keep = 2, pos = 29;
    float inv[16];
    for (int i = 0; i < 16; i++) inv[i] = powf(10000.0f, -(float)(2 * i) / hd);
    float *qk = rand_f32((size_t)(nh + nkv) * hd, 91, 2.0f), *v = rand_f32((size_t)kvd, 92, 2.0f);
    float *a1 = up(d, qk, (size_t)(nh + nkv) * hd * 4), *a2 = up(d, qk, (size_t)(nh + nkv) * hd * 4);
    float *dv = up(d, v, (size_t)kvd * 4), *dinv = up(d, inv, sizeof inv);
    int32_t *dpos = up(d, &pos, 4);
    float *z = calloc((size_t)cap * kvd, 4);
    gp_cu_kv c1 = {up(d, z, (size_t)cap * kvd * 4), up(d, z, (size_t)cap * kvd * 4), cap, keep, kvd};
    gp_cu_kv c2 = {up(d, z, (size_t)cap * kvd * 4), up(d, z, (size_t)cap * kvd * 4), cap, keep, kvd};
    CHECK_EQ_INT(gp_cu_rope_store(d, a1, nh, nkv, hd, dpos, dinv, dv, &c1, NULL, NULL, 0.0f, 0), 0);
    CHECK_EQ_INT(gp_cu_rope(d, a2, 1, nh + nkv, hd, dpos, dinv), 0);
    CHECK_EQ_INT(gp_cu_kv_store(d, &c2, a2 + (size_t)nh * hd, dv, 1, dpos), 0);
    float *h1 = down(d, a1, (size_t)(nh + nkv) * hd), *h2 = down(d, a2, (size_t)(nh + nkv) * hd);
    float *k1 = down(d, c1.k, (size_t)cap * kvd), *k2 = down(d, c2.k, (size_t)cap * kvd);
    float *v1 = down(d, c1.v, (size_t)cap * kvd), *v2 = down(d, c2.v, (size_t)cap * kvd);
    CHECK(memcmp(h1, h2, (size_t)(nh + nkv) * hd * 4) == 0);
    CHECK(memcmp(k1, k2, (size_t)cap * kvd * 4) == 0);
    CHECK(memcmp(v1, v2, (size_t)cap * kvd * 4) == 0);
    free(h1); free(h2); free(k1); free(k2); free(v1); free(v2); free(qk); free(v); free(z);
    gp_cu_release(d, a1); gp_cu_release(d, a2); gp_cu_release(d, dv); gp_cu_release(d, dinv); gp_cu_release(d, dpos);
    gp_cu_release(d, c1.k); gp_cu_release(d, c1.v); gp_cu_release(d, c2.k); gp_cu_release(d, c2.v);
}

/* The GLU applied inside the stacked gate|up projection (gp_cu_matmul_gluo) == gp_cu_matmul then gp_cu_glu, bit for
 * bit: f32/bf16/f16 weights, odd widths (the element path), with and without bias, both activations. */
static void gluo_case(gp_cu *d, int64_t R, int64_t K, gp_dtype dt, int bias, int act) {
    gp_wt w = host_wt(dt, 2 * R, K, (uint32_t)(R * 7 + K)), b = host_wt(GP_DTYPE_BF16, 1, 2 * R, 5);
    float *xh = rand_f32((size_t)K, (uint32_t)K, 4.0f);
    gp_cu_wt dw = dev_wt(d, &w), db = dev_wt(d, &b);
    float *dx = up(d, xh, (size_t)K * 4), *dy = NULL, *dgu = NULL;
    gp_cu_alloc(d, (void **)&dy, (size_t)R * 4);
    gp_cu_alloc(d, (void **)&dgu, (size_t)2 * R * 4);
    CHECK_EQ_INT(gp_cu_matmul_gluo(d, dy, dx, &dw, bias ? &db : NULL, act), 0);
    CHECK_EQ_INT(gp_cu_matmul(d, dgu, dx, &dw, bias ? &db : NULL, 1), 0);
    CHECK_EQ_INT(gp_cu_glu(d, dgu, dgu + R, R, act), 0);
    float *y1 = down(d, dy, (size_t)R), *y2 = down(d, dgu, (size_t)R);
    const int same = memcmp(y1, y2, (size_t)R * 4) == 0;
    if (!same)
        printf("    gluo R=%lld K=%lld dt=%d bias=%d act=%d: max|d| %g\n", (long long)R, (long long)K, (int)dt, bias, act,
               max_err(y1, y2, (size_t)R));
    CHECK(same);
    free(y1); free(y2); free(xh); free((void *)w.data); free((void *)b.data);
    gp_cu_release(d, (void *)dw.data); gp_cu_release(d, (void *)db.data);
    gp_cu_release(d, dx); gp_cu_release(d, dy); gp_cu_release(d, dgu);
}

TEST(cuda_ops_fused_glu_and_qk_norm_give_the_separate_ops_bits) {
    gp_cu *d = dev();
    if (!d) return;
    const int64_t widths[] = {64, 77, 1000, 2048};
    const gp_dtype dts[] = {GP_DTYPE_BF16, GP_DTYPE_F32, GP_DTYPE_F16};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) gluo_case(d, 19 + i * 3 + j, widths[i], dts[j], (i + j) & 1, j & 1);
    /* q/k norms in the rope + store kernel == the two rmsnorm calls, then rope_store without them */
    const int32_t hds[] = {32, 64, 128, 256};
    for (int i = 0; i < 4; i++) {
        const int32_t nh = 4, nkv = 2, hd = hds[i], kvd = nkv * hd, cap = 8, pos = 5;
        float inv[128];
        for (int f = 0; f < hd / 2; f++) inv[f] = powf(10000.0f, -(float)(2 * f) / hd);
        gp_wt qn = host_wt(GP_DTYPE_BF16, 1, hd, 3), kn = host_wt(GP_DTYPE_BF16, 1, hd, 4);
        gp_cu_wt dqn = dev_wt(d, &qn), dkn = dev_wt(d, &kn);
        float *qk = rand_f32((size_t)(nh + nkv) * hd, 93 + i, 3.0f), *v = rand_f32((size_t)kvd, 94, 2.0f);
        float *a1 = up(d, qk, (size_t)(nh + nkv) * hd * 4), *a2 = up(d, qk, (size_t)(nh + nkv) * hd * 4);
        float *dv = up(d, v, (size_t)kvd * 4), *dinv = up(d, inv, (size_t)hd / 2 * 4);
        int32_t *dpos = up(d, &pos, 4);
        float *z = calloc((size_t)cap * kvd, 4);
        gp_cu_kv c1 = {up(d, z, (size_t)cap * kvd * 4), up(d, z, (size_t)cap * kvd * 4), cap, 0, kvd};
        gp_cu_kv c2 = {up(d, z, (size_t)cap * kvd * 4), up(d, z, (size_t)cap * kvd * 4), cap, 0, kvd};
        CHECK_EQ_INT(gp_cu_rope_store(d, a1, nh, nkv, hd, dpos, dinv, dv, &c1, &dqn, &dkn, 1e-6f, i & 1), 0);
        CHECK_EQ_INT(gp_cu_rmsnorm(d, a2, a2, &dqn, nh, hd, 1e-6f, i & 1), 0);
        CHECK_EQ_INT(gp_cu_rmsnorm(d, a2 + (size_t)nh * hd, a2 + (size_t)nh * hd, &dkn, nkv, hd, 1e-6f, i & 1), 0);
        CHECK_EQ_INT(gp_cu_rope_store(d, a2, nh, nkv, hd, dpos, dinv, dv, &c2, NULL, NULL, 0.0f, 0), 0);
        float *h1 = down(d, a1, (size_t)(nh + nkv) * hd), *h2 = down(d, a2, (size_t)(nh + nkv) * hd);
        float *k1 = down(d, c1.k, (size_t)cap * kvd), *k2 = down(d, c2.k, (size_t)cap * kvd);
        CHECK(memcmp(h1, h2, (size_t)(nh + nkv) * hd * 4) == 0);
        CHECK(memcmp(k1, k2, (size_t)cap * kvd * 4) == 0);
        free(h1); free(h2); free(k1); free(k2); free(qk); free(v); free(z);
        free((void *)qn.data); free((void *)kn.data);
        gp_cu_release(d, a1); gp_cu_release(d, a2); gp_cu_release(d, dv);
        gp_cu_release(d, dinv); gp_cu_release(d, dpos);
        gp_cu_release(d, c1.k); gp_cu_release(d, c1.v); gp_cu_release(d, c2.k); gp_cu_release(d, c2.v);
        gp_cu_release(d, (void *)dqn.data); gp_cu_release(d, (void *)dkn.data);
    }
}


/* x [n] rounded to bf16 in place (the inputs of a bf16-mode op are bf16 values) */
static void to_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = gp_bf16_to_f32(gp_f32_to_bf16(x[i]));
}

/* A bf16-mode result against the CPU op's: every element a bf16 value, at most one bf16 step (2^-7 of the magnitude)
 * away, and the share of elements that differ at all.  Returns the max relative error; *nd += differing count. */
static double bf16_cmp(const float *y, const float *ref, size_t n, size_t *nd, int *not_bf16) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (gp_bf16_to_f32(gp_f32_to_bf16(y[i])) != y[i]) (*not_bf16)++;
        const double e = fabs((double)y[i] - ref[i]) / fmax(fabs((double)ref[i]), 1e-3);
        if (!(e == e)) return INFINITY;
        m = e > m ? e : m;
        *nd += y[i] != ref[i];
    }
    return m;
}

/* The bf16 compute mode (gp_cu_set_bf16) against the CPU backend's bf16 mode, op by op, on bf16 inputs: the same
 * roundings, so results agree except where float32 sums in another order (or cosf/expf on the device) land on the
 * other side of a bf16 rounding: at most one bf16 step, on a small share of the elements (printed). */
TEST(cuda_ops_bf16_mode_matches_the_cpu_bf16_mode) {
    gp_cu *d = dev();
    if (!d) return;
    gp_backend_params bp = {1};
    gp_backend *be = NULL;
    gp_ws *ws = NULL;
    gp_ws_params wp = {.n_threads = 1, .max_tokens = 64, .max_keys = 4096, .head_dim = 256, .compute = GP_COMPUTE_BF16,
                       .max_cols = 4104};
    REQUIRE(gp_backend_cpu_init(&bp, &be) == GP_OK && be->ops->ws_init(be, &wp, &ws) == GP_OK);
    const gp_backend_ops *B = be->ops;
    gp_cu_set_bf16(d, 1);
    size_t nd = 0, total = 0;
    int not_bf16 = 0;
    double worst = 0;
    const int32_t N = 9;
    const int64_t shapes[][2] = {{37, 40}, {64, 2048}, {129, 1000}, {8, 4104}};
    for (int si = 0; si < 4; si++) { /* linear with and without bias, and the residual form */
        const int64_t R = shapes[si][0], K = shapes[si][1];
        /* bf16 weights, and one float16 checkpoint (its weights read as bf16, as transformers loads them) */
        gp_wt w = host_wt(si == 2 ? GP_DTYPE_F16 : GP_DTYPE_BF16, R, K, 7 + si);
        gp_wt b = host_wt(GP_DTYPE_BF16, 1, R, 99 + si);
        float *x = rand_f32((size_t)N * K, 3 + si, 2.0f), *ref = malloc((size_t)N * R * 4);
        float *res = rand_f32((size_t)N * R, 5 + si, 4.0f), *rref = malloc((size_t)N * R * 4);
        to_bf16(x, (size_t)N * K), to_bf16(res, (size_t)N * R);
        gp_linear L = {w, si & 1 ? b : gp_wt_dense(GP_WFMT_F32, NULL, 1, R), NULL, 0};
        B->linear(ws, ref, x, &L, N);
        memcpy(rref, res, (size_t)N * R * 4);
        B->add(ws, rref, ref, (int64_t)N * R);
        gp_cu_wt dw = dev_wt(d, &w), db = dev_wt(d, &b), none = {NULL, 0, 0, 0};
        float *dx = up(d, x, (size_t)N * K * 4), *dr = up(d, res, (size_t)N * R * 4), *dy = NULL;
        gp_cu_alloc(d, (void **)&dy, (size_t)N * R * 4);
        for (int n = 1; n <= N; n += N - 1) { /* one token (decode kernel) and the chunk (prefill tiles) */
            CHECK_EQ_INT(gp_cu_matmul(d, dy, dx, &dw, si & 1 ? &db : &none, n), 0);
            float *y = down(d, dy, (size_t)n * R);
            const double e = bf16_cmp(y, ref, (size_t)n * R, &nd, &not_bf16);
            worst = e > worst ? e : worst, total += (size_t)n * R;
            free(y);
        }
        CHECK_EQ_INT(gp_cu_matmul_add(d, dr, dx, &dw, si & 1 ? &db : &none, N), 0);
        float *y = down(d, dr, (size_t)N * R);
        const double e = bf16_cmp(y, rref, (size_t)N * R, &nd, &not_bf16);
        worst = e > worst ? e : worst, total += (size_t)N * R;
        free(y); free(x); free(ref); free(res); free(rref); free((void *)w.data); free((void *)b.data);
        gp_cu_release(d, (void *)dw.data); gp_cu_release(d, (void *)db.data);
        gp_cu_release(d, dx); gp_cu_release(d, dr); gp_cu_release(d, dy);
    }
    for (int po = 0; po < 2; po++) { /* RMSNorm, both weight conventions */
        const int32_t D = 2048;
        gp_wt w = host_wt(GP_DTYPE_BF16, 1, D, 5 + po);
        float *x = rand_f32((size_t)N * D, 11 + po, 4.0f), *ref = malloc((size_t)N * D * 4);
        to_bf16(x, (size_t)N * D);
        B->rmsnorm(ws, ref, x, &w, N, D, 1e-6f, po);
        gp_cu_wt dw = dev_wt(d, &w);
        float *dx = up(d, x, (size_t)N * D * 4);
        CHECK_EQ_INT(gp_cu_rmsnorm(d, dx, dx, &dw, N, D, 1e-6f, po), 0);
        float *y = down(d, dx, (size_t)N * D);
        const double e = bf16_cmp(y, ref, (size_t)N * D, &nd, &not_bf16);
        worst = e > worst ? e : worst, total += (size_t)N * D;
        free(y); free(x); free(ref); free((void *)w.data);
        gp_cu_release(d, (void *)dw.data); gp_cu_release(d, dx);
    }
    { /* rope at a large position, embed (scaled), glu, add, softcap */
        const int32_t heads = 3, hd = 64, pos0 = 4093;
        float inv[32];
        for (int i = 0; i < 32; i++) inv[i] = powf(500000.0f, -(float)(2 * i) / hd);
        const size_t nr = (size_t)N * heads * hd;
        float *x = rand_f32(nr, 21, 2.0f), *ref = malloc(nr * 4);
        to_bf16(x, nr);
        memcpy(ref, x, nr * 4);
        B->rope(ws, ref, N, heads, hd, pos0, inv);
        float *dx = up(d, x, nr * 4), *dinv = up(d, inv, sizeof inv);
        int32_t *dpos = up(d, &pos0, 4);
        CHECK_EQ_INT(gp_cu_rope(d, dx, N, heads, hd, dpos, dinv), 0);
        float *y = down(d, dx, nr);
        double e = bf16_cmp(y, ref, nr, &nd, &not_bf16);
        worst = e > worst ? e : worst, total += nr;
        free(y); free(x); free(ref);
        gp_cu_release(d, dx); gp_cu_release(d, dinv); gp_cu_release(d, dpos);
        gp_wt tab = host_wt(GP_DTYPE_BF16, 50, 36, 8);
        int32_t ids[5] = {3, 49, 0, 3, 17};
        float *er = malloc(5 * 36 * 4), *dy = NULL;
        B->embed(ws, er, ids, 5, &tab, 45.2548f);
        gp_cu_wt dtab = dev_wt(d, &tab);
        int32_t *dids = up(d, ids, sizeof ids);
        gp_cu_alloc(d, (void **)&dy, 5 * 36 * 4);
        CHECK_EQ_INT(gp_cu_embed(d, dy, dids, 5, &dtab, 45.2548f), 0);
        y = down(d, dy, 5 * 36);
        CHECK(memcmp(y, er, 5 * 36 * 4) == 0); /* a widening and one rounded product: exact */
        free(y); free(er); free((void *)tab.data);
        gp_cu_release(d, (void *)dtab.data); gp_cu_release(d, dids); gp_cu_release(d, dy);
        const int64_t E = 10007;
        for (int op = 0; op < 4; op++) { /* glu silu, glu gelu, add, softcap */
            float *g = rand_f32((size_t)E, 30 + op, 8.0f), *u = rand_f32((size_t)E, 40 + op, 2.0f);
            to_bf16(g, (size_t)E), to_bf16(u, (size_t)E);
            float *gr = malloc((size_t)E * 4);
            memcpy(gr, g, (size_t)E * 4);
            float *dg = up(d, g, (size_t)E * 4), *du = up(d, u, (size_t)E * 4);
            if (op < 2) {
                B->glu(ws, gr, u, E, op ? GP_ACT_GELU_TANH : GP_ACT_SILU);
                CHECK_EQ_INT(gp_cu_glu(d, dg, du, E, op ? GP_CU_ACT_GELU_TANH : GP_CU_ACT_SILU), 0);
            } else if (op == 2) {
                B->add(ws, gr, u, E);
                CHECK_EQ_INT(gp_cu_add(d, dg, du, E), 0);
            } else {
                B->softcap(ws, gr, E, 3.0f);
                CHECK_EQ_INT(gp_cu_softcap(d, dg, E, 3.0f), 0);
            }
            y = down(d, dg, (size_t)E);
            e = bf16_cmp(y, gr, (size_t)E, &nd, &not_bf16);
            worst = e > worst ? e : worst, total += (size_t)E;
            free(y); free(g); free(u); free(gr);
            gp_cu_release(d, dg); gp_cu_release(d, du);
        }
    }
    gp_cu_set_bf16(d, 0);
    NOTE("bf16 mode vs the CPU's bf16 mode: %zu of %zu elements differ (%.3f%%, tol 2%%), max rel err %.3g (tol 2^-7 = "
         "%.3g), %d results not bf16 values (want 0)", nd, total, 100.0 * nd / total, worst, ldexp(1, -7), not_bf16);
    CHECK(not_bf16 == 0);
    CHECK(worst <= ldexp(1, -7));
    CHECK(nd * 50 <= total);
    B->ws_free(ws);
    gp_backend_free(be);
}
#endif
