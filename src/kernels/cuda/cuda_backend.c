/* cuda_backend.c — the CUDA backend: the gp_backend_ops table of backend.h over the kernels of cuda_ops.h, so that
 * model/forward.c and cache/ drive a GPU exactly as they drive the CPU.
 *   - instance (one per model and device): a handle whose stream serves the synchronous memory ops (alloc, upload,
 *     download, copy) and weight binding (each weight uploaded once in its stored format, MLX affine included);
 *   - workspace (one per context): its own stream (ops of different contexts run concurrently), the bf16 mode,
 *     the attention split scratch, LoRA scratch, the token ids on the device, and the first error of its ops;
 *   - ops enqueue kernels and return; finish() waits and reports (GP_ERR_DEVICE naming the failed op).  A decode
 *     step (an embedding of one token up to finish) is recorded and, when it repeats the last step launch for
 *     launch, replayed as a CUDA graph (cuda_rt.cu; attention's positions and descriptor go through device memory
 *     so its arguments repeat), when the workspace's timed steps show graphs faster than launching kernel by kernel
 *     (GENPARITY_CUDA_GRAPH=1 always, =0 never).
 * In a build without CUDA (no `make cuda`) gp_backend_cuda_init says so. */
#include "kernels/backend.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GP_CUDA

gp_status gp_backend_cuda_init(int32_t dev, gp_backend **out) {
    *out = NULL;
    return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: this genparity was built without the CUDA "
                                            "backend (build it with `make cuda`; backends here: %s)", gp_backends());
}

void gp_backend_cuda_graph_stats(const gp_ws *ws, uint64_t out[3]) {
    out[0] = out[1] = out[2] = 0;
}

#else
#include "kernels/cuda/cuda_ops.h"

typedef struct cu_be {
    gp_cu *io; /* the instance's stream: memory ops and uploads */
    int32_t dev;
} cu_be;

typedef struct cu_ws {
    gp_cu *d;          /* this workspace's stream (and bf16 mode) */
    float *part;       /* attention split scratch [part_cap] */
    size_t part_cap;
    float *lora;       /* x A^T of one LoRA term [max_tokens * max_lora_rank] */
    int32_t *ids;      /* [max_tokens] token ids on the device */
    int32_t *ids_host; /* [max_tokens] pinned: their copy source (a chunk), or read by the kernel (one token) */
    int err;           /* first CUDA error of an op (0 = none); sticky */
    char msg[200];
} cu_ws;

#define PART_BYTES (64u << 20) /* attention split scratch: queries are processed in blocks that fit */
#define ATTN_COPY_MAX ((size_t)64 << 20) /* most scratch reserved for a chunk attention's bf16 copy */

static cu_be *be_of(gp_backend *be) { return be->impl; }
static cu_ws *ws_of(gp_ws *ws) { return ws->impl; }
static int bf16_of(gp_ws *ws) { return ws->p.compute == GP_COMPUTE_BF16; }

/* Records the first failed op of the workspace (finish reports it). */
static void check(gp_ws *ws, int e, const char *op) {
    cu_ws *w = ws_of(ws);
    if (e && !w->err) {
        w->err = e;
        snprintf(w->msg, sizeof w->msg, "device cuda: %s failed: %s", op, gp_cu_errstr(e));
    }
}

void gp_backend_cuda_graph_stats(const gp_ws *ws, uint64_t out[3]) {
    out[0] = out[1] = out[2] = 0;
    if (ws && ws->be && !strcmp(ws->be->name, "cuda")) gp_cu_graph_stats(((const cu_ws *)ws->impl)->d, out);
}

/* ---- weights ---- */

static int cu_dtype(gp_dtype d) { return d == GP_DTYPE_F32 ? GP_CU_F32 : d == GP_DTYPE_BF16 ? GP_CU_BF16 : GP_CU_F16; }

/* The kernels' view of a bound weight (data NULL stays absent). */
static gp_cu_wt cw(const gp_wt *w) {
    const gp_cu_wt o = {.data = w->data, .rows = w->rows, .cols = w->cols, .scales = w->scales.data,
                        .biases = w->biases.data,
                        .dtype = w->format == GP_WFMT_F32 ? GP_CU_F32 : w->format == GP_WFMT_BF16 ? GP_CU_BF16
                                 : w->format == GP_WFMT_F16 ? GP_CU_F16 : GP_CU_QAFFINE,
                        .sdt = cu_dtype(w->scales.dtype), .bdt = cu_dtype(w->biases.dtype), .group = w->group_size,
                        .bits = w->bits};
    return o;
}

/* Device copy of n host bytes into *dst (NULL for n = 0). */
static int upload_bytes(gp_backend *be, const void *src, size_t n, const void **dst) {
    void *p = NULL;
    *dst = NULL;
    if (!src || !n) return 0;
    int e = gp_cu_alloc(be_of(be)->io, &p, n);
    if (!e) e = gp_cu_h2d(be_of(be)->io, p, src, n);
    if (e) gp_cu_release(be_of(be)->io, p);
    else *dst = p;
    return e;
}

static void cu_unbind_weight(gp_backend *be, gp_wt *w) {
    gp_cu_release(be_of(be)->io, (void *)w->data);
    gp_cu_release(be_of(be)->io, (void *)w->scales.data);
    gp_cu_release(be_of(be)->io, (void *)w->biases.data);
    memset(w, 0, sizeof *w);
}

static gp_status cu_bind_weight(gp_backend *be, const gp_wt *view, gp_wt *out) {
    *out = *view;
    if (!view->data) return GP_OK;
    if (view->format >= GP_WFMT_COUNT)
        return gp_set_error(GP_ERR_UNSUPPORTED, "device cuda: weight format %d has no kernels", (int)view->format);
    const uint64_t rows = (uint64_t)view->rows, cols = (uint64_t)view->cols;
    uint64_t bytes = view->format == GP_WFMT_QAFFINE ? rows * cols * (uint64_t)view->bits / 8
                                                     : rows * cols * (view->format == GP_WFMT_F32 ? 4 : 2);
    uint64_t aux = 0;
    if (view->format == GP_WFMT_QAFFINE)
        aux = rows * ((cols + (uint64_t)view->group_size - 1) / (uint64_t)view->group_size);
    out->scales.data = out->biases.data = NULL;
    int e = upload_bytes(be, view->data, (size_t)bytes, &out->data);
    const size_t sb = (size_t)(aux * gp_dtype_size(view->scales.dtype));
    const size_t bb = (size_t)(aux * gp_dtype_size(view->biases.dtype));
    if (!e) e = upload_bytes(be, view->scales.data, sb, &out->scales.data);
    if (!e) e = upload_bytes(be, view->biases.data, bb, &out->biases.data);
    if (e) {
        cu_unbind_weight(be, out);
        return gp_set_error(e == 2 ? GP_ERR_NOMEM : GP_ERR_DEVICE, "device cuda: uploading a [%llu, %llu] weight: %s",
                            (unsigned long long)rows, (unsigned long long)cols, gp_cu_errstr(e));
    }
    return GP_OK;
}

/* ---- memory ---- */

static void *cu_alloc(gp_backend *be, size_t bytes) {
    void *p = NULL;
    if (gp_cu_alloc(be_of(be)->io, &p, bytes ? bytes : 16)) return NULL;
    return p;
}
static void cu_dealloc(gp_backend *be, void *p) { gp_cu_release(be_of(be)->io, p); }
static void *cu_host_alloc(gp_backend *be, size_t bytes) {
    void *p = NULL;
    (void)be;
    return gp_cu_host_alloc(&p, bytes ? bytes : 16) ? NULL : p;
}
static void cu_host_free(gp_backend *be, void *p) { (void)be, gp_cu_host_free(p); }
static void cu_upload(gp_backend *be, void *dst, const void *src, size_t n) { gp_cu_h2d(be_of(be)->io, dst, src, n); }
static void cu_download(gp_backend *be, void *dst, const void *src, size_t n) { gp_cu_d2h(be_of(be)->io, dst, src, n); }
static void cu_copy(gp_backend *be, void *dst, const void *src, size_t n) { gp_cu_d2d(be_of(be)->io, dst, src, n); }

static uint64_t cu_mem_free(gp_backend *be, uint64_t *total) {
    uint64_t f = 0, t = 0;
    gp_cu_mem(be_of(be)->io, NULL, 0, &f, &t);
    if (total) *total = t;
    return f;
}

/* ---- workspace ---- */

static void cu_ws_free(gp_ws *ws) {
    if (!ws) return;
    cu_ws *w = ws_of(ws);
    if (w) {
        gp_cu_release(w->d, w->part);
        gp_cu_release(w->d, w->lora);
        gp_cu_release(w->d, w->ids);
        gp_cu_host_free(w->ids_host);
        gp_cu_close(w->d);
        free(w);
    }
    free(ws);
}

/* How decode steps run: GENPARITY_CUDA_GRAPH=0 kernel by kernel, =1 as CUDA graphs, else (default) whichever of the
 * two the workspace measures faster. */
static int graphs_mode(void) {
    const char *e = getenv("GENPARITY_CUDA_GRAPH");
    return e && !strcmp(e, "0") ? GP_CU_GRAPHS_OFF : e && !strcmp(e, "1") ? GP_CU_GRAPHS_ON : GP_CU_GRAPHS_AUTO;
}

static gp_status cu_ws_init(gp_backend *be, const gp_ws_params *p, gp_ws **out) {
    *out = NULL;
    if (p->max_tokens < 0 || p->max_keys < 0 || p->head_dim < 0 || p->max_lora_rank < 0 || p->n_heads < 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "device cuda: workspace sizes must be >= 0");
    gp_ws *ws = gp_calloc(1, sizeof *ws);
    cu_ws *w = gp_calloc(1, sizeof *w);
    char msg[256] = "";
    if (!ws || !w) {
        free(ws), free(w);
        return GP_ERR_NOMEM;
    }
    ws->be = be, ws->p = *p, ws->n_threads = 1, ws->impl = w;
    int e = gp_cu_open(be_of(be)->dev, &w->d, msg, sizeof msg);
    if (e) {
        free(w), free(ws);
        return gp_set_error(GP_ERR_UNSUPPORTED, "device cuda: %s", msg);
    }
    gp_cu_set_bf16(w->d, p->compute == GP_COMPUTE_BF16);
    e = gp_cu_attn_prepare();
    if (!e) e = gp_cu_matmul_prepare();
    if (!e && p->compute == GP_COMPUTE_BF16) e = gp_cu_mma_prepare();
    if (e) {
        cu_ws_free(ws);
        return gp_set_error(GP_ERR_DEVICE, "device cuda: attention or tensor-core kernels' shared memory: %s",
                            gp_cu_errstr(e));
    }
    /* the split scratch holds at least one query's splits and spans of all heads */
    const size_t nsplit = (size_t)p->max_keys / GP_CU_ATTN_SPLIT + 3;
    const size_t one = (size_t)(p->n_heads > 0 ? p->n_heads : 1) * (nsplit + nsplit / GP_CU_ATTN_SPAN + 2) *
                       ((size_t)p->head_dim + 2);
    w->part_cap = one > PART_BYTES / 4 ? one : PART_BYTES / 4;
    const size_t lora = (size_t)p->max_tokens * (size_t)p->max_lora_rank;
    e = gp_cu_alloc(w->d, (void **)&w->part, w->part_cap * sizeof(float));
    if (!e) e = gp_cu_alloc(w->d, (void **)&w->lora, (lora ? lora : 1) * sizeof(float));
    const size_t idb = (size_t)(p->max_tokens > 0 ? p->max_tokens : 1) * sizeof(int32_t);
    if (!e) e = gp_cu_alloc(w->d, (void **)&w->ids, idb);
    if (!e) e = gp_cu_host_alloc((void **)&w->ids_host, idb);
    /* the bf16 mode's GEMM scratch (the input copy [max_tokens, max_cols] bf16, a split GEMM's chain sums), which a
     * chunk attention's bf16 copy of its keys and values uses between GEMMs: room for max_keys of them up to
     * ATTN_COPY_MAX (a longer chunk attention converts each split itself) */
    if (!e && p->compute == GP_COMPUTE_BF16) {
        const size_t gemm = gp_cu_gemm_scratch_bytes(p->max_tokens, p->max_cols);
        size_t copy = gp_cu_attn_copy_bytes(p->n_kv > 0 ? p->n_kv : p->n_heads > 0 ? p->n_heads : 1,
                                            (int64_t)p->max_keys + 2 * GP_CU_ATTN_SPLIT, p->head_dim);
        copy = copy < ATTN_COPY_MAX ? copy : ATTN_COPY_MAX;
        e = gp_cu_reserve(w->d, gemm > copy ? gemm : copy);
    }
    if (!e) e = gp_cu_graphs(w->d, graphs_mode());
    if (e) {
        cu_ws_free(ws);
        return gp_set_error(GP_ERR_NOMEM, "device cuda: out of device memory for a workspace (%d tokens, %d keys)",
                            p->max_tokens, p->max_keys);
    }
    *out = ws;
    return GP_OK;
}

static gp_status cu_finish(gp_ws *ws) {
    cu_ws *w = ws_of(ws);
    check(ws, gp_cu_sync(w->d), "a kernel");
    return w->err ? gp_set_error(GP_ERR_DEVICE, "%s", w->msg) : GP_OK;
}

/* ---- compute ---- */

/* The bf16 mode's bits for a linear: bf16 products on tensor cores (f32/f16 weights rounded as read); the output
 * rounded unless LoRA terms follow a bias-free product (then the last term rounds: the CPU rounds once after them). */
static int linear_mode(gp_ws *ws, const gp_linear *L) {
    if (!bf16_of(ws)) return 0;
    return GP_CU_ROUNDW | GP_CU_MMA | (L->bias.data || L->n_lora == 0 ? GP_CU_ROUND : 0);
}

static void cu_linear(gp_ws *ws, float *y, const float *x, const gp_linear *L, int32_t n) {
    cu_ws *w = ws_of(ws);
    const gp_cu_wt W = cw(&L->w), B = cw(&L->bias);
    check(ws, gp_cu_matmul(w->d, y, x, &W, &B, n, linear_mode(ws, L), 1.0f), "linear");
    for (int32_t i = 0; i < L->n_lora; i++) { /* + scale_i (x A_i^T) B_i^T, in order */
        const gp_lora *lo = &L->lora[i];
        const gp_cu_wt A = cw(&lo->a), Bt = cw(&lo->b), none = {0};
        const int last = bf16_of(ws) && i + 1 == L->n_lora ? GP_CU_ROUND : 0;
        check(ws, gp_cu_matmul(w->d, w->lora, x, &A, &none, n, 0, 1.0f), "LoRA A");
        check(ws, gp_cu_matmul(w->d, y, w->lora, &Bt, &none, n, GP_CU_ACC | last, lo->scale), "LoRA B");
    }
}

static void cu_rmsnorm(gp_ws *ws, float *y, const float *x, const gp_wt *w, int32_t n, int32_t d, float eps,
                       int plus_one) {
    const gp_cu_wt W = cw(w);
    check(ws, gp_cu_rmsnorm(ws_of(ws)->d, y, x, &W, n, d, eps, plus_one), "rmsnorm");
}

/* The products' input when the norm is not fused: x, or pn->h = rmsnorm(x). */
static const float *cu_prenorm(gp_ws *ws, const float *x, const gp_prenorm *pn, int32_t n, int64_t d) {
    if (!pn) return x;
    cu_rmsnorm(ws, pn->h, x, pn->w, n, (int32_t)d, pn->eps, pn->plus_one);
    return pn->h;
}

/* The kernels' view of a prenorm (NULL stays NULL). */
static const gp_cu_norm *cnorm(const gp_prenorm *pn, gp_cu_norm *buf) {
    if (!pn) return NULL;
    *buf = (gp_cu_norm){cw(pn->w), pn->eps, pn->plus_one};
    return buf;
}

/* Plain dense weights in one launch: one token (the norm inside it where the kernel can), or a chunk on tensor cores
 * (the bf16 mode); else the parts. */
static void cu_linears(gp_ws *ws, int32_t m, float *const *ys, const float *x, const gp_prenorm *pn,
                       const gp_linear *const *Ls, int32_t n) {
    gp_cu_wt W[4], B[4];
    gp_cu_norm nb;
    int plain = m <= 4;
    for (int32_t i = 0; plain && i < m; i++) {
        plain = Ls[i]->n_lora == 0;
        W[i] = cw(&Ls[i]->w), B[i] = cw(&Ls[i]->bias);
    }
    const int mode = plain ? linear_mode(ws, Ls[0]) : 0, one = plain && n == 1;
    int (*const fused)(gp_cu *, int32_t, float *const *, const float *, const gp_cu_norm *, const gp_cu_wt *,
                       const gp_cu_wt *, int) = (mode & GP_CU_MMA) ? gp_cu_matmul_mma_multi : gp_cu_matmul_multi;
    const int chunk = plain && n > 1 && (mode & GP_CU_MMA); /* one GEMM on tensor cores, the norm in its input copy */
    if (one && !fused(ws_of(ws)->d, m, ys, x, cnorm(pn, &nb), W, B, mode)) return;
    if (chunk && pn && !gp_cu_matmul_mma_parts(ws_of(ws)->d, m, ys, x, cnorm(pn, &nb), W, B, n, mode)) return;
    x = cu_prenorm(ws, x, pn, n, Ls[0]->w.cols);
    if (one && pn && !fused(ws_of(ws)->d, m, ys, x, NULL, W, B, mode)) return;
    if (chunk && !gp_cu_matmul_mma_parts(ws_of(ws)->d, m, ys, x, NULL, W, B, n, mode)) return;
    for (int32_t i = 0; i < m; i++) cu_linear(ws, ys[i], x, Ls[i], n);
}

static void cu_glu(gp_ws *ws, float *gate, const float *up, int64_t n, gp_act act) {
    check(ws, gp_cu_glu(ws_of(ws)->d, gate, up, n, act == GP_ACT_SILU ? GP_CU_ACT_SILU : GP_CU_ACT_GELU_TANH), "glu");
}

static void cu_linear_glu(gp_ws *ws, float *y, float *tmp, const float *x, const gp_prenorm *pn,
                          const gp_linear *gate, const gp_linear *up, int32_t n, gp_act act) {
    const int plain = n == 1 && !gate->n_lora && !up->n_lora;
    const gp_cu_wt g = cw(&gate->w), bg = cw(&gate->bias), u = cw(&up->w), bu = cw(&up->bias);
    /* (EARLY: the op after the feed-forward's first half is its down projection) */
    const int a = act == GP_ACT_SILU ? GP_CU_ACT_SILU : GP_CU_ACT_GELU_TANH;
    const int mode = linear_mode(ws, gate) | GP_CU_EARLY;
    gp_cu_norm nb;
    int (*const fused)(gp_cu *, float *, const float *, const gp_cu_norm *, const gp_cu_wt *, const gp_cu_wt *,
                       const gp_cu_wt *, const gp_cu_wt *, int32_t, int) =
        (mode & GP_CU_MMA) ? gp_cu_matmul_mma_glu : gp_cu_matmul_glu;
    const int chunk = n > 1 && !gate->n_lora && !up->n_lora && (mode & GP_CU_MMA); /* as cu_linears' */
    if (plain && !fused(ws_of(ws)->d, y, x, cnorm(pn, &nb), &g, &bg, &u, &bu, a, mode)) return;
    if (chunk && pn && !gp_cu_matmul_mma_glu_chunk(ws_of(ws)->d, y, x, cnorm(pn, &nb), &g, &bg, &u, &bu, n, a, mode))
        return;
    x = cu_prenorm(ws, x, pn, n, gate->w.cols);
    if (plain && pn && !fused(ws_of(ws)->d, y, x, NULL, &g, &bg, &u, &bu, a, mode)) return;
    if (chunk && !gp_cu_matmul_mma_glu_chunk(ws_of(ws)->d, y, x, NULL, &g, &bg, &u, &bu, n, a, mode)) return;
    cu_linear(ws, y, x, gate, n);
    cu_linear(ws, tmp, x, up, n);
    cu_glu(ws, y, tmp, (int64_t)n * gate->w.rows, act);
}

static void cu_add(gp_ws *ws, float *y, const float *x, int64_t n) {
    check(ws, gp_cu_add(ws_of(ws)->d, y, x, n), "add");
}

static void cu_linear_add(gp_ws *ws, float *y, float *tmp, const float *x, const gp_linear *L, const gp_prenorm *next,
                          int32_t n) {
    if (!L->n_lora) { /* the product added in the kernel: linear then add, the same two roundings */
        const gp_cu_wt W = cw(&L->w), B = cw(&L->bias);
        /* EARLY: a residual add is followed by a norm, a projection or an element-wise op (never attention, whose
         * early staging needs its predecessor to trigger late: pdl_enter) */
        const int mode = GP_CU_ACC | linear_mode(ws, L) | (n == 1 ? GP_CU_EARLY : 0);
        gp_cu_norm nb;
        /* a chunk's GEMM may make the next projection's normalized input copy in its fold (one pass fewer) */
        if (next && (mode & GP_CU_MMA) &&
            !gp_cu_matmul_mma_add_chunk(ws_of(ws)->d, y, x, &W, &B, n, mode, cnorm(next, &nb)))
            return;
        check(ws, gp_cu_matmul(ws_of(ws)->d, y, x, &W, &B, n, mode, 1.0f), "linear_add");
        return;
    }
    cu_linear(ws, tmp, x, L, n);
    cu_add(ws, y, tmp, (int64_t)n * L->w.rows);
}

static void cu_rope(gp_ws *ws, float *x, int32_t n, int32_t heads, int32_t hd, int32_t pos0, const float *inv_freq) {
    check(ws, gp_cu_rope_qk(ws_of(ws)->d, x, NULL, n, heads, 0, hd, pos0, inv_freq, NULL, NULL, 0.0f, 0, NULL, NULL,
                            NULL, 0, 0), "rope");
}

/* The rows rope_qk stores into: float32, or (bits 16) bfloat16 ones, passed as float * with *b16 set. */
static float *dst_rows(const gp_kv_rows *r, int *b16) {
    *b16 = r->bits == 16;
    return *b16 ? (float *)(void *)r->q : r->f;
}

static void cu_rope_qk(gp_ws *ws, float *q, float *k, int32_t n, int32_t nh, int32_t nkv, int32_t hd, int32_t pos0,
                       const float *inv_freq, const gp_wt *qn, const gp_wt *kn, float eps, int plus_one,
                       const gp_kv_dst *dst) {
    const gp_cu_wt none = {0}, Q = qn ? cw(qn) : none, K = kn ? cw(kn) : none;
    int kb = 0;
    float *kf = dst ? dst_rows(dst->k, &kb) : NULL, *vf = dst ? dst_rows(dst->v, &kb) : NULL;
    check(ws, gp_cu_rope_qk(ws_of(ws)->d, q, k, n, nh, nkv, hd, pos0, inv_freq, &Q, &K, eps, plus_one, kf, vf,
                            dst ? dst->vals : NULL, dst ? dst->r0 : 0, kb),
          "rope");
}

static void cu_embed(gp_ws *ws, float *y, const int32_t *ids, int32_t n, const gp_wt *table, float scale) {
    cu_ws *w = ws_of(ws);
    const gp_cu_wt T = cw(table);
    if (n > ws->p.max_tokens) {
        check(ws, 1 /* cudaErrorInvalidValue */, "embed (more ids than the chunk)");
        return;
    }
    memcpy(w->ids_host, ids, (size_t)n * sizeof(int32_t)); /* (the previous chunk's reads are done: finish ran) */
    if (n == 1) { /* a decode step: recorded up to finish, replayed as a graph when it repeats; the kernel reads the
                   * id from the pinned buffer itself (no copy to wait for) */
        gp_cu_record(w->d);
        check(ws, gp_cu_embed(w->d, y, w->ids_host, n, &T, scale), "embed");
        return;
    }
    check(ws, gp_cu_h2d_async(w->d, w->ids, w->ids_host, (size_t)n * sizeof(int32_t)), "embed (ids)");
    check(ws, gp_cu_embed(w->d, y, w->ids, n, &T, scale), "embed");
}

static void cu_add_row(gp_ws *ws, float *x, const float *v, float c, int32_t n, int32_t d) {
    check(ws, gp_cu_add_rows(ws_of(ws)->d, x, v, c, n, d), "add_row");
}

static void cu_softcap(gp_ws *ws, float *x, int64_t n, float cap) {
    check(ws, gp_cu_softcap(ws_of(ws)->d, x, n, cap), "softcap");
}

static gp_cu_kv_rows kvr(const gp_kv_rows *r) {
    gp_cu_kv_rows o = {r->f, r->q, r->scale, r->minv, r->kvd, r->bits, r->group, r->n_groups, r->row_bytes, 0};
    return o;
}

static void cu_kv_store(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t r0, const float *k,
                        const float *v, int32_t n, int quant) {
    const gp_cu_kv_rows K = kvr(dk), V = kvr(dv);
    check(ws, gp_cu_kv_store(ws_of(ws)->d, &K, &V, r0, k, v, n, quant), "kv_store");
}

static void cu_kv_copy(gp_ws *ws, const gp_kv_rows *dk, const gp_kv_rows *dv, int32_t d0, const gp_kv_rows *sk,
                       const gp_kv_rows *sv, int32_t s0, int32_t n, int quant) {
    const gp_cu_kv_rows DK = kvr(dk), DV = kvr(dv), SK = kvr(sk), SV = kvr(sv);
    check(ws, gp_cu_kv_copy(ws_of(ws)->d, &DK, &DV, d0, &SK, &SV, s0, n, quant), "kv_copy");
}

/* Decode's rope inside the attention kernel (one token, float32 or bfloat16 rows at dst), else the rope kernel
 * first. */
static void attn_rope(gp_ws *ws, const gp_attn_args *a, gp_cu_attn *c) {
    const gp_rope_args *r = a->rope;
    int kb = 0;
    float *kf = r->dst ? dst_rows(r->dst->k, &kb) : NULL, *vf = r->dst ? dst_rows(r->dst->v, &kb) : NULL;
    if (a->n == 1 && a->head_dim % 2 == 0 && kf && vf) {
        const gp_cu_wt none = {0};
        c->rk = r->k, c->rv = r->dst->vals, c->kf = kf, c->vf = vf, c->r0 = r->dst->r0, c->kb = kb;
        c->inv_freq = r->inv_freq, c->eps = r->eps, c->plus_one = r->plus_one;
        c->qn = r->q_norm ? cw(r->q_norm) : none, c->kn = r->k_norm ? cw(r->k_norm) : none;
        return;
    }
    cu_rope_qk(ws, r->q, r->k, a->n, a->n_heads, a->n_kv, a->head_dim, a->pos0, r->inv_freq, r->q_norm, r->k_norm,
               r->eps, r->plus_one, r->dst);
}

/* Attention in blocks of queries whose split scratch fits the workspace's (the same bits for any blocking). */
static void cu_attention(gp_ws *ws, const gp_attn_args *a) {
    cu_ws *w = ws_of(ws);
    const gp_kv_desc *kv = a->kv;
    gp_cu_attn c;
    memset(&c, 0, sizeof c); /* padding too: a recorded step compares the kernels' argument bytes */
    c.window = kv->window, c.pinned = kv->pinned, c.n_seg = kv->n_seg, c.n_heads = a->n_heads, c.n_kv = a->n_kv;
    c.head_dim = a->head_dim, c.scale = a->scale, c.softcap = a->softcap, c.part = w->part;
    if (a->rope) attn_rope(ws, a, &c);
    for (int i = 0; i < 2; i++) c.k[i] = kvr(&kv->k[i]), c.v[i] = kvr(&kv->v[i]);
    for (int32_t s = 0; s < kv->n_seg && s < GP_CU_KV_MAX_SEGS; s++)
        c.seg[s] = (gp_cu_kv_seg){kv->seg[s].p0, kv->seg[s].p1, kv->seg[s].r0, kv->seg[s].src, kv->seg[s].quant, {0}};
    const size_t row = (size_t)a->n_heads * (size_t)a->head_dim;
    for (int32_t t = 0; t < a->n;) {
        c.pos0 = a->pos0 + t;
        c.n = a->n - t;
        while (c.n > 1 && gp_cu_attn_part_floats(&c) > w->part_cap) c.n = c.n / 2 > 1 ? c.n / 2 : 1;
        if (gp_cu_attn_part_floats(&c) > w->part_cap) {
            check(ws, 2 /* cudaErrorMemoryAllocation */, "attention (split scratch too small)");
            return;
        }
        c.q = a->q + (size_t)t * row;
        c.out = a->out + (size_t)t * row;
        check(ws, gp_cu_attention(w->d, &c), "attention");
        t += c.n;
    }
}

/* ---- instance ---- */

static void cu_free(gp_backend *be) {
    if (!be) return;
    cu_be *b = be_of(be);
    if (b) gp_cu_close(b->io);
    free(b);
    free(be);
}

static const gp_backend_ops CUDA_OPS = {
    .free = cu_free,
    .ws_init = cu_ws_init,
    .ws_free = cu_ws_free,
    .alloc = cu_alloc,
    .dealloc = cu_dealloc,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .bind_weight = cu_bind_weight,
    .unbind_weight = cu_unbind_weight,
    .mem_free = cu_mem_free,
    .linear = cu_linear,
    .linears = cu_linears,
    .linear_glu = cu_linear_glu,
    .linear_add = cu_linear_add,
    .rmsnorm = cu_rmsnorm,
    .rope = cu_rope,
    .rope_qk = cu_rope_qk,
    .attention = cu_attention,
    .embed = cu_embed,
    .glu = cu_glu,
    .add = cu_add,
    .add_row = cu_add_row,
    .softcap = cu_softcap,
    .kv_store = cu_kv_store,
    .kv_copy = cu_kv_copy,
    .finish = cu_finish,
};

gp_status gp_backend_cuda_init(int32_t dev, gp_backend **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_backend_cuda_init: out is NULL");
    *out = NULL;
    char msg[256] = "";
    gp_backend *be = gp_calloc(1, sizeof *be);
    cu_be *b = gp_calloc(1, sizeof *b);
    if (!be || !b) {
        free(be), free(b);
        return GP_ERR_NOMEM;
    }
    if (gp_cu_open(dev, &b->io, msg, sizeof msg)) {
        free(be), free(b);
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_ctx_init: device cuda: %s", msg);
    }
    b->dev = dev;
    be->name = "cuda";
    be->ops = &CUDA_OPS;
    be->host_memory = 0;
    be->host_out = 1; /* cudaMallocHost memory: mapped, at the same address on the device (unified addressing) */
    be->p.n_threads = 1;
    be->impl = b;
    *out = be;
    return GP_OK;
}

#endif
