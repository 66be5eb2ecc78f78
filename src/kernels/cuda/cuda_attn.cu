/* cuda_attn.cu — attention of the CUDA backend over the KV cache's descriptor (gp_cu_attn: the held positions as
 * runs of rows in the cache's storage or the chunk's staged rows, float32 or affine-quantized, and the visibility
 * rule).
 *
 * One computation for every chunking (so the bits do not depend on it): the keys are cut at fixed absolute
 * positions into splits of GP_CU_ATTN_SPLIT = 64; a warp computes one split for one (query, head) from the split's
 * keys and values staged in shared memory (split_warp: lane l scores keys l and l + 32, each a sequential dot
 * product; the max and the sum of exponentials by the warp's butterfly; the output elements lane, lane + 32, ...
 * summed over the visible keys in order), and the splits that see a key are folded in increasing order by the
 * online-softmax step (fold), in two levels: those of each span of GP_CU_ATTN_SPAN splits from the empty state, then
 * the spans' states (fold_parts_by).  Decode runs the splits in parallel (attn_split_kernel: a block per split and
 * kv head, a warp per query head of the group, partials to scratch; it may run the rope and store the new key and
 * value first), and attn_fold_kernel folds them (a block a head's 32 columns: the spans in parallel warps, then
 * their states; 2 to 8 splits: attn_cluster_kernel, the kv head's splits one thread-block cluster whose block 0
 * folds the partials from the others' shared memory); a chunk of queries (attn_chunk_kernel; a block a span of its
 * tile, the spans' states folded by attn_span_fold_kernel) stages each split once for a tile of queries and every
 * head of a kv group, each warp running Q = 4 (query, head) pairs at once (2 for heads over 128: their dependent
 * chains interleave, the key and value reads are shared; the probabilities go through shared memory, pv_shared), and
 * folds in registers.  Both call the same two functions with the same operands, so a pair's bits do not depend on Q.
 *
 * The bf16 mode over a float32 cache (head_dim a multiple of 8 up to 128, no soft-capping) computes each split on
 * tensor cores instead (below: sdpa's flash attention for 16 (query, head) rows at once, scores and p·v by mma.sync,
 * p rounded to bf16); decode (decode_mma: the split's 8 key tiles and value tiles over a block's 8 warps) and chunks
 * (attn_mma_chunk_kernel: a warp per 16 rows, split_mma_warp, or K warps, split_mma_tile; splits copied by cp.async
 * while the previous one is computed, then to bf16 once) give each row the same arithmetic, and the splits fold as
 * above. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#define SPLIT GP_CU_ATTN_SPLIT
#define MAX_NE 8 /* output elements per lane: head_dim <= 256 */
/* decode's split kernels of 8 warps: blocks a multiprocessor holds (up to 128 registers a thread and about 80 KB of
 * shared memory a block), and the blocks of a call past which each block takes several splits (attn_decode) */
#define ATTN_BLOCKS_PER_SM 2
/* ... and split_decode16's: 3 over heads of 64 (held to 80 registers, two 23 KB buffers a block; Llama-3.2-1B at 8,192
 * held tokens 4% faster on an H200), else 2 (heads of 128 were slower with 3, one buffer a block: BENCHMARKS.md) */
#define SPLIT16_BLOCKS_PER_SM(NE) ((NE) == 2 ? 3 : ATTN_BLOCKS_PER_SM)
/* whether a decode split kernel takes several splits a block: the float32 paths of 8 warps and the plain tensor-core
 * path over heads of 64 (Llama-3.2-1B at 8,192 held tokens 3.6-6.8% faster on the H100); not that path over heads of
 * 128 (with the loop it took 180 registers, a fifth slower at 2,048; held to 128 it spilled and was level to 8%
 * slower: BENCHMARKS.md), nor the 1,024-thread blocks (more than 8 heads a group) and the general tensor-core kernels
 * (heads other than 64 and 128), which no benchmark here runs */
#define ATTN_LOOP(STAGE_BATCH, NE, MMA, PLAIN) ((STAGE_BATCH) > 1 && (!(MMA) || ((PLAIN) && (NE) == 2)))

#ifdef GP_CU_TRACE
/* Diagnostic builds only: block (0, 0)'s thread 0 of each decode attention stores the SM clock at the points
 * attn_stamp(k) names (12 a launch, slot 11 the splits), written to $GP_CU_TRACE_FILE.attn at exit (the means:
 * tools/cuda_attn_stamps.py). */
#define ATTN_STAMPS 12
#define ATTN_STAMP_CAP (1u << 16)
static __device__ unsigned long long g_attn_stamp[ATTN_STAMP_CAP * ATTN_STAMPS];
static __device__ unsigned g_attn_n;
static void attn_stamp_dump(void) {
    stamps_dump(".attn", g_attn_stamp, &g_attn_n, ATTN_STAMP_CAP, ATTN_STAMPS);
}
static void attn_stamp_set(unsigned long long *) { atexit(attn_stamp_dump); }
namespace {
struct attn_stamp_reg {
    attn_stamp_reg() { gp_cu_trace_register(attn_stamp_set); }
} attn_stamp_reg_inst;
}
static __shared__ unsigned s_attn_rec;
__device__ __forceinline__ void attn_stamp(int k) {
    unsigned *rec = &s_attn_rec;
    if (threadIdx.x || blockIdx.x || blockIdx.y) return;
    if (k == 0) *rec = atomicAdd(&g_attn_n, 1u);
    if (*rec >= ATTN_STAMP_CAP) return;
    g_attn_stamp[(size_t)*rec * ATTN_STAMPS + k] = clock64();
    if (k == 0) g_attn_stamp[(size_t)*rec * ATTN_STAMPS + ATTN_STAMPS - 1] = gridDim.x;
}
#else
__device__ __forceinline__ void attn_stamp(int) {}
#endif

/* 2^x as the GPU's ex2.approx.ftz (what flash attention's softmax evaluates) */
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* What one call needs besides gp_cu_attn: the splits, the staging layout, the mode. */
struct attn_plan {
    int32_t np, lo, hi;  /* split ids: np pinned ones [0, np), then [lo, hi] */
    int32_t first;       /* lowest held position */
    int32_t ld;          /* floats per staged row (head_dim + 4: conflict-free float4 reads by lane = key) */
    int32_t G;           /* query heads per kv head */
    int bf;
    int dbuf;            /* decode: a second staging buffer after the queries (split_decode's loop; attn_decode) */
    int32_t s0, nspan;   /* a chunk: its spans s0 .. s0 + nspan - 1 (GP_CU_ATTN_SPAN splits each) */
    int32_t per;         /* ... of which a block takes per in turn (its grid's z: which ones; attn_chunk) */
};

/* Element i of row r of storage st: float32, bfloat16 (bits 16) widened, or q * scale + min of its group (the CPU's
 * two float32 roundings). */
__device__ __forceinline__ float kv_at(const gp_cu_kv_rows &st, int quant, int64_t r, int32_t i) {
    if (!quant) return st.f[r * st.kvd + i];
    if (st.bits == 16) return __bfloat162float(((const __nv_bfloat16 *)st.q)[r * st.kvd + i]);
    const uint8_t *q = st.q + r * st.row_bytes;
    const int32_t g = i / st.group;
    const int v = st.bits == 8 ? q[i] : (q[i >> 1] >> ((i & 1) * 4)) & 15;
    return __fadd_rn(__fmul_rn((float)v, st.scale[r * st.n_groups + g]), st.minv[r * st.n_groups + g]);
}

/* Elements e .. e + 3 of row r of quantized storage st (kv_at's values), out of line: unrolled into every staged
 * vector, the quantized path made the decode kernel's code several times larger (its fetch stalls were most of a
 * decode step's attention). */
__device__ __noinline__ float4 kv_at4(const gp_cu_kv_rows &st, int64_t r, int32_t e) {
    return make_float4(kv_at(st, 1, r, e), kv_at(st, 1, r, e + 1), kv_at(st, 1, r, e + 2), kv_at(st, 1, r, e + 3));
}

/* Four bfloat16 values at p (8-byte aligned) widened to float32. */
__device__ __forceinline__ float4 bf16x4(const uint8_t *p) {
    const uint2 w = *(const uint2 *)p;
    return make_float4(__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                       __uint_as_float(w.y & 0xffff0000u));
}

/* A decode call's values that change every step, in device memory when the step is recorded as a graph
 * (gp_cu_var; the kernel's gp_cu_attn and attn_plan then hold zeros there, so its arguments repeat). */
struct attn_var {
    int32_t pos0, r0, n_seg, np, lo;
    gp_cu_kv_seg seg[GP_CU_KV_MAX_SEGS];
};

/* The descriptor in shared memory (indexed at run time: a kernel parameter indexed so would go to local memory):
 * the call's per-step values (from var when given, else from a and pl) and the storages. */
struct attn_desc_sm : attn_var {
    gp_cu_kv_rows rows[4]; /* keys of the cache, of the chunk; values of the cache, of the chunk */
};

__device__ __forceinline__ void desc_to_smem(const gp_cu_attn &a, const attn_plan &pl, const attn_var *var,
                                             attn_desc_sm *d) {
    if (threadIdx.x == 0 && var) *static_cast<attn_var *>(d) = *var;
    if (threadIdx.x == 0 && !var) {
        d->pos0 = a.pos0, d->r0 = a.r0, d->n_seg = a.n_seg, d->np = pl.np, d->lo = pl.lo;
#pragma unroll
        for (int i = 0; i < GP_CU_KV_MAX_SEGS; i++) d->seg[i] = a.seg[i];
    }
    if (threadIdx.x == 32) d->rows[0] = a.k[0], d->rows[1] = a.k[1], d->rows[2] = a.v[0], d->rows[3] = a.v[1];
}

/* The descriptor run holding position j (the last one that does), or -1 when it is not held. */
__device__ __forceinline__ int seg_of(const attn_desc_sm *d, int32_t j) {
    int sg = -1;
    for (int k = 0; k < d->n_seg; k++)
        if (j >= d->seg[k].p0 && j < d->seg[k].p1) sg = k;
    return sg;
}

/* The descriptor run that holds every row of the split from position j0 (for each of them the run seg_of finds), or
 * -1 when none does (a split in part held, or across runs). */
__device__ __forceinline__ int split_seg(const attn_desc_sm *d, int32_t j0) {
    int sg = -1;
    for (int k = 0; k < d->n_seg; k++) {
        const int32_t p0 = d->seg[k].p0, p1 = d->seg[k].p1;
        if (p0 <= j0 && j0 + SPLIT <= p1) sg = k;
        else if (p0 < j0 + SPLIT && j0 < p1) return -1;
    }
    return sg;
}

/* The rows of split j0 for the kv head at element off by cp.async into ks, vs (rows ldk, ldv elements apart; 16-byte
 * pieces of ES-byte elements) when one run holds them all (split_seg) and the block's threads tile a row: each
 * thread copies piece f of rows i, i + dr, ..., its addresses the last ones plus a stride, with no lookup a row (a
 * third of split_decode16's instructions at 8,192 held tokens: BENCHMARKS.md).  Returns whether it did (no group
 * committed). */
template <int ES, typename T>
__device__ __forceinline__ bool stage_run_async(const attn_desc_sm *d, int32_t j0, int32_t off, int32_t hd, T *ks,
                                                int32_t ldk, T *vs, int32_t ldv, uint8_t *held) {
    constexpr int EV = 16 / ES; /* elements a piece */
    const int32_t nv = hd / EV, n = blockDim.x, sg = split_seg(d, j0);
    if (sg < 0 || n % nv != 0) return false;
    const gp_cu_kv_seg S = d->seg[sg];
    const gp_cu_kv_rows &K = d->rows[S.src], &V = d->rows[2 + S.src];
    const int32_t dr = n / nv, f = threadIdx.x % nv;
    int32_t i = threadIdx.x / nv;
    const int64_t r = S.r0 + (j0 + i - S.p0);
    const uint8_t *kp = (ES == 2 ? K.q : (const uint8_t *)K.f) + (size_t)ES * (r * K.kvd + off + EV * f);
    const uint8_t *vp = (ES == 2 ? V.q : (const uint8_t *)V.f) + (size_t)ES * (r * V.kvd + off + EV * f);
    const size_t kst = (size_t)ES * dr * K.kvd, vst = (size_t)ES * dr * V.kvd;
    for (; i < SPLIT; i += dr, kp += kst, vp += vst) {
        if (f == 0) held[i] = 1;
        cp16(ks + i * ldk + EV * f, kp, true);
        cp16(vs + i * ldv + EV * f, vp, true);
    }
    return true;
}

/* A chunk tile's splits (queries t0 .. t0 + qt - 1): the pinned ones [0, npin), then [lo, hi] from its first query's
 * window start (or the first held position) to its last query's position; split(b) is the b-th of them.  Given
 * spans (sa >= 0), those of spans sa .. se - 1 alone (ids [sa, se) x GP_CU_ATTN_SPAN; the pinned ones then start at
 * p0, and there may be none). */
struct tile_splits {
    int32_t p0, npin, lo, hi;
    __host__ __device__ __forceinline__ tile_splits(const gp_cu_attn &a, const attn_plan &pl, int32_t t0, int32_t qt,
                                                    int32_t sa = -1, int32_t se = 0) {
        const int32_t pf = a.pos0 + t0, p_last = min(a.pos0 + a.n - 1, pf + qt - 1);
        const int32_t lo_pos = a.window > 0 && pf - a.window + 1 > pl.first ? pf - a.window + 1 : pl.first;
        p0 = 0, lo = lo_pos / SPLIT, hi = p_last / SPLIT;
        npin = a.window > 0 && a.pinned > 0 ? min((a.pinned + SPLIT - 1) / SPLIT, lo) : 0;
        if (sa < 0) return;
        const int32_t s0 = sa * GP_CU_ATTN_SPAN, s1 = se * GP_CU_ATTN_SPAN;
        p0 = s0, npin = max(0, min(npin, s1) - s0);
        lo = max(lo, s0), hi = max(min(hi, s1 - 1), lo - 1);
    }
    __device__ __forceinline__ int32_t count() const { return npin + hi - lo + 1; }
    __device__ __forceinline__ int32_t below(int32_t x) const { /* how many have an id below x */
        return max(0, min(npin, x - p0)) + max(0, min(hi + 1, x) - lo);
    }
    __device__ __forceinline__ int32_t split(int32_t b) const { return b < npin ? p0 + b : lo + (b - npin); }
};

/* Vector idx = i nv + f of a split's rows walked by a block without divisions in the loop: (i, f) of this thread's
 * first vector, and step() to the vector blockDim.x further. */
struct row_walk {
    int i, f, di, df, nv;
    __device__ __forceinline__ row_walk(int nv_) : nv(nv_) {
        i = threadIdx.x / nv, f = threadIdx.x - i * nv, di = blockDim.x / nv, df = blockDim.x - di * nv;
    }
    __device__ __forceinline__ void step() {
        i += di, f += df;
        if (f >= nv) f -= nv, i++;
    }
};

/* Stages the keys and values of split s for kv head kvh: ks, vs [SPLIT][ld]; held[i] = key j0 + i is held (the row
 * of position skip, held, is left for the caller to store).  Each row's descriptor run is looked up once, before the
 * vectors (once a vector, it was a sixth of decode attention's instructions; BENCHMARKS.md).  Each thread issues
 * STAGE_BATCH vectors' loads before storing any (one at a time, their latency was most of a decode split): 8 in
 * decode's blocks of up to 8 warps, 2 in a chunk's 16.  ZERO: the rows not held are zeros (the tensor-core path
 * multiplies every row). */
template <int STAGE_BATCH, bool ZERO = false>
__device__ void stage_split(const gp_cu_attn &a, const attn_desc_sm *d, int32_t s, int32_t kvh, int32_t ld,
                            float *ks, float *vs, uint8_t *held, int32_t skip = -1) {
    const int32_t hd = a.head_dim, j0 = s * SPLIT, off = kvh * hd;
    __shared__ int8_t run[SPLIT]; /* each row's descriptor run, looked up once a row (not once a vector) */
    for (int i = threadIdx.x; i < SPLIT; i += blockDim.x) {
        const int sg = seg_of(d, j0 + i);
        run[i] = (int8_t)sg, held[i] = sg >= 0;
    }
    __syncthreads();
    for (row_walk w(hd / 4); w.i < SPLIT;) {
        float4 kv[STAGE_BATCH], vv[STAGE_BATCH];
        int at[STAGE_BATCH]; /* where the vector goes: (i * ld + 4 f), -1 past the split */
        bool in[STAGE_BATCH];
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++, w.step()) {
            const int i = w.i, f = w.f;
            at[u] = i < SPLIT ? i * ld + 4 * f : -1;
            const int32_t j = j0 + i;
            const int sg = i < SPLIT ? run[i] : -1;
            in[u] = sg >= 0 && j != skip;
            /* ZERO (the tensor-core path, whose products take every row): zeros for the rows not held */
            kv[u] = vv[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (ZERO && sg < 0 && i < SPLIT) in[u] = true;
            if (sg < 0 || j == skip) continue;
            const gp_cu_kv_seg S = d->seg[sg];
            const gp_cu_kv_rows &K = d->rows[S.src], &V = d->rows[2 + S.src];
            const int64_t r = S.r0 + (j - S.p0);
            if (!S.quant) {
                kv[u] = *(const float4 *)(K.f + r * K.kvd + off + 4 * f);
                vv[u] = *(const float4 *)(V.f + r * V.kvd + off + 4 * f);
            } else if (K.bits == 16) { /* bfloat16 rows: 8 bytes a vector, widened */
                kv[u] = bf16x4(K.q + 2 * (r * K.kvd + off + 4 * f));
                vv[u] = bf16x4(V.q + 2 * (r * V.kvd + off + 4 * f));
            } else {
                kv[u] = kv_at4(K, r, off + 4 * f);
                vv[u] = kv_at4(V, r, off + 4 * f);
            }
        }
#pragma unroll
        for (int u = 0; u < STAGE_BATCH; u++)
            if (in[u]) *(float4 *)(ks + at[u]) = kv[u], *(float4 *)(vs + at[u]) = vv[u];
    }
}

/* split_warp's probabilities x values with the probabilities through the warp's shared buffer pb [Q][SPLIT] instead
 * of a shuffle per key and pair: the same products, in the same order (key i of pair q when visible, v[q]), so the
 * same bits; a broadcast read gives 4 keys' probabilities, and a group of 4 keys that every pair sees (all but the
 * diagonal's) runs without per-key tests.  Elements past hd are computed from zeros and never stored. */
template <int Q, int NE>
__device__ __forceinline__ void pv_shared(float *pb, const float (*pr)[2], const unsigned (*v)[2], const float *vs,
                                          int32_t ld, int32_t hd, uint64_t seen_any, float (*acc)[NE]) {
    const int lane = threadIdx.x & 31;
    __syncwarp(); /* (the previous split's reads of pb are done) */
#pragma unroll
    for (int q = 0; q < Q; q++) pb[q * SPLIT + lane] = pr[q][0], pb[q * SPLIT + 32 + lane] = pr[q][1];
    __syncwarp();
    for (int i0 = 0; i0 < SPLIT && (seen_any >> i0); i0 += 4) {
        float pq[Q][4], vv[4][NE];
        unsigned g[Q]; /* the group's visible keys of each pair */
        bool all = true;
#pragma unroll
        for (int q = 0; q < Q; q++) {
            const float4 t = *(const float4 *)(pb + q * SPLIT + i0);
            pq[q][0] = t.x, pq[q][1] = t.y, pq[q][2] = t.z, pq[q][3] = t.w;
            g[q] = ((i0 < 32 ? v[q][0] : v[q][1]) >> (i0 & 31)) & 15u;
            all = all && g[q] == 15u;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int k = 0; k < NE; k++) vv[u][k] = lane + 32 * k < hd ? vs[(i0 + u) * ld + lane + 32 * k] : 0.0f;
        if (all) {
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int q = 0; q < Q; q++)
#pragma unroll
                    for (int k = 0; k < NE; k++) acc[q][k] = fmaf(pq[q][u], vv[u][k], acc[q][k]);
            continue;
        }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int q = 0; q < Q; q++)
                if ((g[q] >> u) & 1u)
#pragma unroll
                    for (int k = 0; k < NE; k++) acc[q][k] = fmaf(pq[q][u], vv[u][k], acc[q][k]);
    }
}

/* One split of Q (query at position p[q], head) pairs by one warp from the staged split (keys j0 .. j0 + 63): for each
 * pair that sees a key of it (seen[q] = 1; else 0 and nothing written) m[q] (the max score, scaled in flash mode),
 * l[q] (the sum of exponentials) and acc[q][k] (unnormalized output element lane + 32 k, k < NE).  Every pair's
 * arithmetic is the one-pair computation's (the pairs share the key and value reads and interleave their
 * dependent chains); p[q] < 0: no pair. */
template <int Q, int NE, int PV_BATCH, bool PLAIN = false>
__device__ __forceinline__ void split_warp(const gp_cu_attn &a, const attn_plan &pl, const float *const *qs,
                                           const float *ks, const float *vs, const uint8_t *held, int32_t j0,
                                           const int32_t *p, int *seen, float *m, float *l, float (*acc)[NE],
                                           float *pb = NULL) {
    const int lane = threadIdx.x & 31, hd = a.head_dim, ld = pl.ld;
    /* bf16 mode without soft-capping: sdpa's flash softmax, p = 2^(score * scale * log2 e - max * scale * log2 e) */
    const bool bf = !PLAIN && pl.bf, flash = bf && a.softcap <= 0; /* PLAIN: float32, no soft-capping */
    const float sl2 = a.scale * 1.4426950408889634f;
    float sc[Q][2], dot[Q][2];
    bool vis[Q][2];
#pragma unroll
    for (int q = 0; q < Q; q++) {
        const int32_t lo = a.window > 0 && p[q] - a.window + 1 > 0 ? p[q] - a.window + 1 : 0;
        const int32_t pin = lo > a.pinned ? a.pinned : lo;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int32_t j = j0 + lane + 32 * h;
            vis[q][h] = p[q] >= 0 && held[lane + 32 * h] && j <= p[q] && (j < pin || j >= lo);
            dot[q][h] = 0.0f;
        }
    }
    bool any_h[2] = {false, false};
#pragma unroll
    for (int q = 0; q < Q; q++) any_h[0] |= vis[q][0], any_h[1] |= vis[q][1];
    if (any_h[0] || any_h[1]) /* a sequential dot product per pair and key, the two keys' chains interleaved (a key
                               * no pair sees is computed and ignored) */
#pragma unroll 2
        for (int e = 0; e < hd; e += 4) {
            const float4 k0 = *(const float4 *)(ks + lane * ld + e), k1 = *(const float4 *)(ks + (lane + 32) * ld + e);
#pragma unroll
            for (int q = 0; q < Q; q++) {
                const float4 x = *(const float4 *)(qs[q] + e);
                dot[q][0] = fmaf(x.x, k0.x, dot[q][0]), dot[q][1] = fmaf(x.x, k1.x, dot[q][1]);
                dot[q][0] = fmaf(x.y, k0.y, dot[q][0]), dot[q][1] = fmaf(x.y, k1.y, dot[q][1]);
                dot[q][0] = fmaf(x.z, k0.z, dot[q][0]), dot[q][1] = fmaf(x.z, k1.z, dot[q][1]);
                dot[q][0] = fmaf(x.w, k0.w, dot[q][0]), dot[q][1] = fmaf(x.w, k1.w, dot[q][1]);
            }
        }
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int q = 0; q < Q; q++) {
            float s = -INFINITY;
            if (vis[q][h]) {
                s = flash ? dot[q][h] : dot[q][h] * a.scale; /* flash: the raw score, scaled inside the exponent */
                if constexpr (!PLAIN) {
                    if (a.softcap > 0) s = tanhf(s / a.softcap) * a.softcap;
                }
            }
            sc[q][h] = s;
        }
    unsigned v[Q][2];
    float pr[Q][2];
    bool any = false;
#pragma unroll
    for (int q = 0; q < Q; q++) {
        v[q][0] = __ballot_sync(0xffffffffu, vis[q][0]), v[q][1] = __ballot_sync(0xffffffffu, vis[q][1]);
        seen[q] = v[q][0] || v[q][1];
        any |= seen[q] != 0;
    }
    if (!any) return;
#pragma unroll
    for (int q = 0; q < Q; q++) {
        const float mx = warp_max(fmaxf(sc[q][0], sc[q][1])), msl2 = mx * sl2;
        float sum = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float e = !vis[q][h] ? 0.0f : flash ? ex2_approx(fmaf(sc[q][h], sl2, -msl2)) : expf(sc[q][h] - mx);
            pr[q][h] = bf ? bf16r(e) : e; /* bf16 mode (sdpa): p rounded for p·v, the sum of the float32 values */
            sum += e;
        }
        l[q] = warp_sum(sum);
        m[q] = flash ? mx * a.scale : mx; /* folds work on scaled maxima */
#pragma unroll
        for (int k = 0; k < NE; k++) acc[q][k] = 0.0f;
    }
    /* the visible keys in order, PV_BATCH at a time (their value reads and probability shuffles issued together);
     * past the last key any pair sees, nothing is left */
    uint64_t seen_any = 0;
#pragma unroll
    for (int q = 0; q < Q; q++) seen_any |= (uint64_t)v[q][0] | (uint64_t)v[q][1] << 32;
    if constexpr (PV_BATCH == 0) /* the same through the warp's shared buffer */
        pv_shared<Q, NE>(pb, pr, v, vs, ld, hd, seen_any, acc);
    else {
        for (int i0 = 0; i0 < SPLIT && (seen_any >> i0); i0 += PV_BATCH) {
            float vv[PV_BATCH][NE], pi[PV_BATCH][Q];
#pragma unroll
            for (int u = 0; u < PV_BATCH; u++) {
                const int i = i0 + u;
#pragma unroll
                for (int k = 0; k < NE; k++) vv[u][k] = lane + 32 * k < hd ? vs[i * ld + lane + 32 * k] : 0.0f;
#pragma unroll
                for (int q = 0; q < Q; q++) pi[u][q] = __shfl_sync(0xffffffffu, i < 32 ? pr[q][0] : pr[q][1], i & 31);
            }
#pragma unroll
            for (int u = 0; u < PV_BATCH; u++) {
                const int i = i0 + u;
#pragma unroll
                for (int q = 0; q < Q; q++) {
                    if (!(((i < 32 ? v[q][0] : v[q][1]) >> (i & 31)) & 1u)) continue;
#pragma unroll
                    for (int k = 0; k < NE; k++)
                        if (lane + 32 * k < hd) acc[q][k] = fmaf(pi[u][q], vv[u][k], acc[q][k]);
                }
            }
        }
    }
}

/* The online-softmax fold of one split's (ms, ls, accs) into the running (M, L, O), explicit roundings: fold_step
 * updates M and L and gives the two factors, fold_elem an element. */
__device__ __forceinline__ float2 fold_step(float &M, float &L, float ms, float ls) {
    const float Mn = fmaxf(M, ms), a = M == -INFINITY ? 0.0f : expf(M - Mn), b = expf(ms - Mn);
    L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(ls, b));
    M = Mn;
    return make_float2(a, b);
}
__device__ __forceinline__ float fold_elem(float O, float acc, float2 ab) {
    return __fadd_rn(__fmul_rn(O, ab.x), __fmul_rn(acc, ab.y));
}
template <int NE = MAX_NE>
__device__ __forceinline__ void fold(float &M, float &L, float *O, float ms, float ls, const float *accs) {
    const float2 ab = fold_step(M, L, ms, ls);
#pragma unroll
    for (int k = 0; k < NE; k++) O[k] = fold_elem(O[k], accs[k], ab);
}

/* An output element O / L (rounded in bf16 mode; zero when no key was seen). */
__device__ __forceinline__ float out_val(float O, float L, int bf) {
    const float v = L > 0 ? O / L : 0.0f;
    return bf ? bf16r(v) : v;
}

/* out [hd] of one (query, head) from a warp's elements lane + 32 k. */
template <int NE = MAX_NE>
__device__ __forceinline__ void finish_out(float *out, int hd, float L, const float *O, int bf) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < NE; k++)
        if (lane + 32 * k < hd) out[lane + 32 * k] = out_val(O[k], L, bf);
}

/* Split id of compact index b. */
__device__ __forceinline__ int32_t split_id(const attn_desc_sm &d, int32_t b) {
    return b < d.np ? b : d.lo + (b - d.np);
}
/* A decode call's splits (compact indices 0 .. ns - 1): the pinned ones, then lo to the split holding pos0. */
__device__ __forceinline__ int32_t decode_splits(const attn_desc_sm &d) { return d.np + d.pos0 / SPLIT - d.lo + 1; }

/* Folds partials [b0, b1) of one (query, head) in order into (M, L, O) (this lane's elements lane + 32 k, a warp):
 * ld(b, i) is float i of partial b (m, l, acc [hd], hd <= 32 NE), FOLD_BATCH partials' loads in flight together;
 * those that saw no key (m = -inf) are passed over. */
#define FOLD_BATCH 4
template <int NE, typename Load>
__device__ __forceinline__ void fold_run(int32_t b0, int32_t b1, int32_t hd, float &M, float &L, float (&O)[NE],
                                         Load ld) {
    const int lane = threadIdx.x & 31;
    for (int32_t b = b0; b < b1; b += FOLD_BATCH) {
        float ms[FOLD_BATCH], ls[FOLD_BATCH], accs[FOLD_BATCH][NE];
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++) {
            const bool in = b + u < b1;
            ms[u] = in ? ld(b + u, 0) : -INFINITY;
            ls[u] = in ? ld(b + u, 1) : 0.0f;
#pragma unroll
            for (int k = 0; k < NE; k++) accs[u][k] = in && lane + 32 * k < hd ? ld(b + u, 2 + lane + 32 * k) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++)
            if (ms[u] != -INFINITY) fold<NE>(M, L, O, ms[u], ls[u], accs[u]);
    }
}

/* The empty state. */
template <int NE>
__device__ __forceinline__ void fold_empty(float &M, float &L, float (&O)[NE]) {
    M = -INFINITY, L = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; k++) O[k] = 0.0f;
}

/* fold_run's fold of partials [b0, b1) into (M, L, O), the same arithmetic in fewer round trips to memory: of each
 * 32 partials, lane i reads partial i's m and l and computes its factors (the running max before and after it is a
 * scan of fmaxf, exact in any order) into fac [3][32] (the warp's, shared memory), while the accs of the first
 * W / NE partials are on their way; the warp folds them in order, then reads the next W / NE.  Partials that saw no
 * key (m = -inf) are passed over. */
template <int NE, int W, typename Load>
__device__ __forceinline__ void fold_run_scan(int32_t b0, int32_t b1, int32_t hd, float &M, float &L,
                                              float (&O)[NE], float *fac, Load ld) {
    constexpr int CH = W / NE < 32 ? W / NE : 32; /* partials whose accs are in flight together (W floats a lane) */
    const int lane = threadIdx.x & 31;
    for (int32_t g = b0; g < b1; g += 32) {
        const int n = min(32, b1 - g);
        float acc[CH][NE];
        const auto load = [&](int c) {
#pragma unroll
            for (int i = 0; i < CH; i++)
#pragma unroll
                for (int k = 0; k < NE; k++)
                    acc[i][k] = c + i < n && lane + 32 * k < hd ? ld(g + c + i, 2 + lane + 32 * k) : 0.0f;
        };
        load(0);
        const float ms = lane < n ? ld(g + lane, 0) : -INFINITY, ls = lane < n ? ld(g + lane, 1) : 0.0f;
        float hi = fmaxf(ms, M); /* the running max after partial lane: fold_step's Mn */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float v = __shfl_up_sync(~0u, hi, o);
            if (lane >= o) hi = fmaxf(hi, v);
        }
        float lo = __shfl_up_sync(~0u, hi, 1); /* ... and before it */
        if (lane == 0) lo = M;
        fac[lane] = lo == -INFINITY ? 0.0f : expf(lo - hi);
        const float fb = expf(ms - hi);
        fac[32 + lane] = fb;
        fac[64 + lane] = __fmul_rn(ls, fb);
        const uint32_t live = __ballot_sync(~0u, ms != -INFINITY);
        M = __shfl_sync(~0u, hi, n - 1);
        __syncwarp();
        for (int c = 0; c < n; c += CH) {
            if (c > 0) load(c);
#pragma unroll
            for (int i = 0; i < CH; i++) {
                const int u = c + i; /* (< 32: CH divides 32) */
                const float2 ab = make_float2(fac[u], fac[32 + u]);
                if (live >> u & 1) { /* fold_step and fold_elem */
                    L = __fadd_rn(__fmul_rn(L, ab.x), fac[64 + u]);
#pragma unroll
                    for (int k = 0; k < NE; k++) O[k] = fold_elem(O[k], acc[i][k], ab);
                }
            }
        }
        __syncwarp(); /* (fac read by every lane before the next group's) */
    }
}

/* Folds the ns partials of one (query, head) in order into out (a warp), in two levels (fixed absolute boundaries,
 * so the same for every chunking): each span's partials (GP_CU_ATTN_SPAN splits; end(b): the index after the last
 * partial of b's span) from the empty state (fold_run), then the spans' states in order (a span's state is a partial
 * of the same form; folding one into the empty state copies it).  A chunk computes its spans in parallel blocks
 * (attn_span_fold_kernel folds their states), decode's in parallel warps of attn_fold_kernel. */
template <int NE, typename Load, typename End>
__device__ __forceinline__ void fold_parts_by(int32_t ns, int32_t hd, float *out, int bf, Load ld, End end) {
    float M, L, O[NE];
    fold_empty<NE>(M, L, O);
    for (int32_t b = 0; b < ns;) {
        const int32_t e = min(end(b), ns);
        float Ms, Ls, Os[NE];
        fold_empty<NE>(Ms, Ls, Os);
        fold_run<NE>(b, e, hd, Ms, Ls, Os, ld);
        if (Ms != -INFINITY) fold<NE>(M, L, O, Ms, Ls, Os);
        b = e;
    }
    finish_out<NE>(out, hd, L, O, bf);
}

/* The number of d's splits (compact indices: split_id; ns of them) whose id is below x. */
__device__ __forceinline__ int32_t ids_below(const attn_desc_sm &d, int32_t ns, int32_t x) {
    return max(0, min(d.np, x)) + max(0, min(x - d.lo, ns - d.np));
}
/* The index after the last of d's splits in the span of split index b's. */
__device__ __forceinline__ int32_t span_end(const attn_desc_sm &d, int32_t b) {
    return ids_below(d, INT32_MAX / 2, (split_id(d, b) / GP_CU_ATTN_SPAN + 1) * GP_CU_ATTN_SPAN);
}

/* Element o of the new key k and value v into the cache rows kf, vf and the staged rows *ks, *vs: as the rows hold
 * them (a.kb: rounded to bfloat16, kv_put's rows). */
__device__ __forceinline__ void store_new(const gp_cu_attn &a, size_t o, float *ks, float *vs, float k, float v) {
    if (a.kb) k = bf16r(k), v = bf16r(v);
    kv_put(a.kf, a.kb, o, k), kv_put(a.vf, a.kb, o, v);
    *ks = k, *vs = v;
}
/* (bfloat16 staged rows, split_decode16's: the cache's rows are bfloat16) */
__device__ __forceinline__ void store_new(const gp_cu_attn &a, size_t o, uint16_t *ks, uint16_t *vs, float k,
                                          float v) {
    const __nv_bfloat16 kh = __float2bfloat16_rn(k), vh = __float2bfloat16_rn(v);
    reinterpret_cast<__nv_bfloat16 *>(a.kf)[o] = kh, reinterpret_cast<__nv_bfloat16 *>(a.vf)[o] = vh;
    *ks = __bfloat16_as_ushort(kh), *vs = __bfloat16_as_ushort(vh);
}

/* Decode's jobs before its first split (keys j0 ..), a warp a job: the group's queries w < G copied to qsm [G][hd]
 * and, where that split holds p with the rope inside, the new key (job G), each rotated after its norm (qn, kn:
 * norm_in's float32 copies), the key stored with its value rv at kf, vf (row r0 of the cache's rows: store_new) and
 * ks, vs (the staged row of its position, which stage_split skipped).  One call site of the rope for both: the code is
 * fetched cold every launch, so the jobs share what one of them fetches (BENCHMARKS.md).  PLAIN (hd = 32 NE): lane l
 * holds elements l + 32 j in registers from the loads to the stores (rope_head_regs: rope_head_warp's bits without its
 * round trips through shared memory after the wait; Qwen3-0.6B's jobs 2,420 -> 1,756 cycles); else through qsm. */
template <int NE, bool PLAIN, typename T>
__device__ __forceinline__ void decode_jobs(const gp_cu_attn &a, const attn_plan &pl, const attn_desc_sm &d,
                                            int32_t j0, float *qsm, T *ks, T *vs, int32_t ldk, int32_t ldv,
                                            const float2 *cs, const gp_cu_wt &qn, const gp_cu_wt &kn) {
    const int lane = threadIdx.x & 31, hd = a.head_dim;
    const int32_t kvh = blockIdx.y, p = d.pos0;
    const bool early = a.rk != NULL;
    const int32_t jobs = pl.G + (early && j0 <= p && p < j0 + SPLIT);
    for (int32_t w = threadIdx.x >> 5; w < jobs; w += blockDim.x >> 5) {
        const bool key = w == pl.G;
        float *x = qsm + w * hd;
        const float *src = key ? a.rk + (size_t)kvh * hd : a.q + (size_t)(kvh * pl.G + w) * hd;
        const float *rv = a.rv + (size_t)kvh * hd;
        const size_t o = (size_t)d.r0 * a.n_kv * hd + (size_t)kvh * hd; /* (the key's row and head) */
        const int32_t i = key ? p - j0 : 0;
        gp_cu_wt g = qn; /* (the field chosen, not the struct: a choice of two went through local memory) */
        g.data = key ? kn.data : qn.data;
        if constexpr (PLAIN && NE % 2 == 0) {
            float v[NE], r[NE];
#pragma unroll
            for (int j = 0; j < NE; j++) v[j] = src[lane + 32 * j], r[j] = key ? rv[lane + 32 * j] : 0.0f;
            if (early) rope_head_regs<NE, true>(v, g, a.eps, a.plus_one, pl.bf, cs);
#pragma unroll
            for (int j = 0; j < NE; j++) {
                const int e = lane + 32 * j;
                if (!key) x[e] = v[j];
                else store_new(a, o + e, ks + i * ldk + e, vs + i * ldv + e, v[j], r[j]);
            }
        } else {
            for (int e = lane; e < hd; e += 32) x[e] = src[e];
            if (early) rope_head_warp<true>(x, hd, g, a.eps, a.plus_one, pl.bf, cs);
            if (!key) continue;
            for (int e = lane; e < hd; e += 32) store_new(a, o + e, ks + i * ldk + e, vs + i * ldv + e, x[e], rv[e]);
        }
    }
}

/* The norm weights w [n] widened to float32 into ws (shared memory) by the block, as w again (wt_at reads the same
 * values; before the wait: nothing writes them); w itself when absent or n = 0. */
__device__ __forceinline__ gp_cu_wt norm_in(const gp_cu_wt &w, float *ws, int32_t n) {
    if (!w.data || !n) return w;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ws[i] = wt_at(w.data, w.dtype, i);
    gp_cu_wt o = w;
    o.data = ws, o.dtype = GP_CU_F32;
    return o;
}

/* One split's partial of one (query, head) by its warp: m (-inf when it saw no key), l, acc [hd] at p. */
template <int NE>
__device__ __forceinline__ void put_part(float *p, int seen, float m, float l, const float *acc, int hd) {
    const int lane = threadIdx.x & 31;
    if (!seen) {
        if (lane == 0) p[0] = -INFINITY, p[1] = 0.0f;
        return;
    }
    if (lane == 0) p[0] = m, p[1] = l;
#pragma unroll
    for (int k = 0; k < NE; k++)
        if (lane + 32 * k < hd) p[2 + lane + 32 * k] = acc[k];
}

/* ---- the bf16 mode on tensor cores (sdpa's flash path: no soft-capping, float32 cache rows, head_dim % 8 == 0 and
 * <= 128; the choice depends on the model and cache alone, so decode and every chunking take the same path) ----
 * A warp computes one split for 16 (query, head) rows with mma.sync m16n8k16 (bf16 in, float32 accumulators), rows
 * g and g + 8 of the fragments in lane 4 g + c: scores S = Q K^T over head_dim in 32-column chunks (cuda_mma.cu's
 * element map), the row's max and sum of exponentials over its lanes' 16 keys each then the quad's butterfly,
 * p = 2^(s scale log2 e - max scale log2 e) rounded to bf16 (what flash attention multiplies), and the output
 * P V over the split's four 16-key blocks in order.  A row's numbers depend on its query and the split's keys
 * alone (an mma output element on its row and column), so one query gives the bits it has in any tile. */
#define MMA_WARPS 16 /* warps of a chunk block at most (row tiles of 16 rows x K warps each) */
#define MMA1_WARPS 8  /* ... with K = 1 (a warp a row tile: its output in registers, up to 255 of them) */

/* This lane's 8 elements [32 ch + 8 c, + 8) of float32 row r (of hd) as x8 packs them; zeros past hd or for no row. */
__device__ __forceinline__ uint4 row_frag(const float *r, int ch, int hd) {
    const int k = 32 * ch + 8 * (threadIdx.x & 3);
    if (!r || k >= hd) return make_uint4(0, 0, 0, 0);
    return pack8(*(const float4 *)(r + k), *(const float4 *)(r + k + 4));
}

/* The fragments of rows g (q0) and g + 8 (q8) for the score product: 8 elements [32 ch + 8 c, + 8) of each as
 * cuda_mma.cu's x8 packs them; zeros past hd or for an absent row (NULL). */
template <int NE>
__device__ __forceinline__ void q_frags(const float *q0, const float *q8, int hd, uint4 (&qa)[NE], uint4 (&qa8)[NE]) {
#pragma unroll
    for (int ch = 0; ch < NE; ch++) qa[ch] = row_frag(q0, ch, hd), qa8[ch] = row_frag(q8, ch, hd);
}

/* The warp's bitmask of the split's held keys. */
__device__ __forceinline__ uint64_t held_mask(const uint8_t *held) {
    const int lane = threadIdx.x & 31;
    return (uint64_t)__ballot_sync(0xffffffffu, held[lane]) | (uint64_t)__ballot_sync(0xffffffffu, held[lane + 32])
                                                                    << 32;
}

/* The staged split as mma fragments, from float32 rows (decode: ks, vs [SPLIT][ld], packed as they are read) or
 * from the chunk kernel's bf16 copy (kb [SPLIT][ldk] rows, vt [hd][VT_LD] value columns, keys in pairs): the same
 * round-to-nearest values either way, so the same products.  kfrag: key row i's 8 elements [32 ch + 8 c, + 8) (zeros
 * past hd); vfrag: value column col's keys (k, k + 1) and (k + 8, k + 9), the smaller key in the low half. */
#define VT_LD 36 /* words per value column of vt (32 key pairs + 4: conflict-free fragment reads) */
/* Value tile nt's fragments of the four 16-key blocks, b[kb] = vfrag(8 nt + g, 16 kb + 2 c). */
template <typename F>
__device__ __forceinline__ void vfrags_of(const F &f, int nt, uint2 (&b)[4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kb = 0; kb < 4; kb++) b[kb] = f.vfrag(8 * nt + (lane >> 2), 16 * kb + 2 * (lane & 3));
}
struct frags_f32 {
    static constexpr int WINDOW = 0; /* value tiles pv_tiles lets the compiler load ahead (0: no limit) */
    const float *ks, *vs;
    int32_t ld, hd;
    __device__ __forceinline__ uint4 kfrag(int i, int ch) const { return row_frag(ks + i * ld, ch, hd); }
    __device__ __forceinline__ uint2 vfrag(int col, int k) const {
        const float *v = vs + k * ld + col;
        return make_uint2(pack2(v[0], v[ld]), pack2(v[8 * ld], v[9 * ld]));
    }
    __device__ __forceinline__ void vfrags(int nt, uint2 (&b)[4]) const { vfrags_of(*this, nt, b); }
};
struct frags_bf16 {
    static constexpr int WINDOW = 2; /* (ldmatrix loads; measured on the H200 against 0 and 4, BENCHMARKS.md) */
    const uint16_t *kb;
    const uint32_t *vt;
    int32_t ldk, hd;
    __device__ __forceinline__ uint4 kfrag(int i, int ch) const {
        const int k = 32 * ch + 8 * (threadIdx.x & 3);
        return k < hd ? *(const uint4 *)(kb + i * ldk + k) : make_uint4(0, 0, 0, 0);
    }
    __device__ __forceinline__ uint2 vfrag(int col, int k) const {
        const uint32_t *v = vt + col * VT_LD + k / 2;
        return make_uint2(v[0], v[4]);
    }
    /* vfrags_of's words by two ldmatrix.x4 (vt in shared memory): matrix i of pair h holds keys 32 h + 8 i .. + 7 of
     * columns 8 nt + r in its row r (16 bytes), so lane 4 g + c gets column g's keys 2 c, 2 c + 1 of each */
    __device__ __forceinline__ void vfrags(int nt, uint2 (&b)[4]) const {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t *row = vt + (8 * nt + (lane & 7)) * VT_LD + 16 * h + 4 * (lane >> 3);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(b[2 * h].x), "=r"(b[2 * h].y), "=r"(b[2 * h + 1].x), "=r"(b[2 * h + 1].y)
                         : "r"((uint32_t)__cvta_generic_to_shared(row)));
        }
    }
};

/* bfloat16 rows as the cache holds them (split_decode16): keys ks [SPLIT][hd + K16_PAD], values vs [SPLIT][hd +
 * V16_PAD] (conflict-free fragment reads), the fragments frags_f32 packs from the same values widened. */
#define K16_PAD 32
#define V16_PAD 8
struct frags_rows16 {
    static constexpr int WINDOW = 0;
    const uint16_t *ks, *vs;
    int32_t hd;
    __device__ __forceinline__ uint4 kfrag(int i, int ch) const {
        const int k = 32 * ch + 8 * (threadIdx.x & 3);
        return k < hd ? *(const uint4 *)(ks + i * (hd + K16_PAD) + k) : make_uint4(0, 0, 0, 0);
    }
    __device__ __forceinline__ uint2 vfrag(int col, int k) const {
        const int32_t ld = hd + V16_PAD;
        const uint16_t *v = vs + k * ld + col;
        return make_uint2((uint32_t)v[0] | (uint32_t)v[ld] << 16, (uint32_t)v[8 * ld] | (uint32_t)v[9 * ld] << 16);
    }
    __device__ __forceinline__ void vfrags(int nt, uint2 (&b)[4]) const { vfrags_of(*this, nt, b); }
};

/* Scores of key tile j (keys 8 j + 2 c, + 1 of row g, then of row g + 8: the mma accumulator layout) for query
 * fragments qa, qa8, one mma pair per 32-column chunk in order. */
template <int NE, typename F>
__device__ __forceinline__ void score_tile(const uint4 (&qa)[NE], const uint4 (&qa8)[NE], const F &f, int hd, int j,
                                           float (&s)[4]) {
    s[0] = s[1] = s[2] = s[3] = 0.0f;
#pragma unroll
    for (int ch = 0; ch < NE; ch++)
        if (32 * ch < hd) chunk_mma(s, qa[ch], qa8[ch], f.kfrag(8 * j + (threadIdx.x & 31) / 4, ch));
}

/* Keys [0, n) of a split as bits (n clamped to 0..64). */
__device__ __forceinline__ uint64_t bits_below(int32_t n) {
    return n <= 0 ? 0ull : n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* Bit i: a query at position p sees key j0 + i (held by hm, not after p, inside its window or pinned). */
__device__ __forceinline__ uint64_t vis_mask(const gp_cu_attn &a, uint64_t hm, int32_t j0, int32_t p) {
    if (p < j0) return 0;
    const int32_t lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    const int32_t pin = lo > a.pinned ? a.pinned : lo;
    return hm & bits_below(p - j0 + 1) & (~bits_below(lo - j0) | bits_below(pin - j0));
}

/* One row's softmax over the split's scores v[j][e] (keys 8 j + 2 c + e; those whose bit of vm, vis_mask's shifted
 * by 2 c, is clear set to -inf first): seen, m (the max, scaled), l (the sum of the float32 exponentials: the lane's
 * 16 in order, then the quad's butterfly) and pp[j], the bf16 probabilities of keys 8 j + 2 c, + 1 (zeros where
 * unseen). */
template <bool MASK = true> /* false: vm all ones (no key masked; the same numbers without the tests) */
__device__ __forceinline__ void row_softmax(const gp_cu_attn &a, float (&v)[8][2], uint64_t vm, int &seen, float &m,
                                            float &l, uint32_t (&pp)[8]) {
    const float sl2 = a.scale * 1.4426950408889634f;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (MASK && !((vm >> (8 * j + e)) & 1)) v[j][e] = -INFINITY;
            mx = fmaxf(mx, v[j][e]);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    seen = mx != -INFINITY;
    const float msl2 = mx * sl2;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float e[2];
#pragma unroll
        for (int u = 0; u < 2; u++) { /* (!MASK: no test; a score of -inf gives 2^-inf = 0 all the same where
                                        * the max is finite, and a row whose max is not is not folded) */
            if constexpr (MASK) e[u] = v[j][u] == -INFINITY ? 0.0f : ex2_approx(fmaf(v[j][u], sl2, -msl2));
            else e[u] = ex2_approx(fmaf(v[j][u], sl2, -msl2));
            sum += e[u];
        }
        pp[j] = pack2(e[0], e[1]);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = sum, m = mx * a.scale;
}

/* row_softmax of rows g, g + 8 (positions p[r]) over scores s in the mma accumulator layout, pp[j][r]; returns
 * whether a row of the warp sees a key of the split. */
template <bool FULL = false> /* FULL: both rows of every lane see the split's 64 keys */
__device__ __forceinline__ bool mma_softmax(const gp_cu_attn &a, const float (&s)[8][4], uint64_t hm, int32_t j0,
                                            const int32_t *p, int *seen, float *m, float *l, uint32_t (&pp)[8][2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!FULL && r && __all_sync(0xffffffffu, p[1] < 0)) { /* no row g + 8 in the warp (decode, G <= 8):
                                                                 * row_softmax's values for a row that sees nothing,
                                                                 * without its code */
            seen[1] = 0, m[1] = -INFINITY, l[1] = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) pp[j][1] = 0u;
            break;
        }
        float v[8][2];
        uint32_t q[8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j][0] = s[j][2 * r], v[j][1] = s[j][2 * r + 1];
        if (FULL) row_softmax<false>(a, v, ~0ull, seen[r], m[r], l[r], q);
        else row_softmax(a, v, vis_mask(a, hm, j0, p[r]) >> (2 * (threadIdx.x & 3)), seen[r], m[r], l[r], q);
#pragma unroll
        for (int j = 0; j < 8; j++) pp[j][r] = q[j];
    }
    return __any_sync(0xffffffffu, seen[0] || seen[1]);
}

/* P V for NT value tiles nt = nt0 + step i (columns 8 nt .. + 7): acc[r][2 i + e] = row r's unnormalized output at
 * column 8 nt + 2 c + e, the four 16-key blocks in order (zeros past hd); FOLD: acc is the running output instead,
 * each tile folded into it as it comes (fold_elem with row r's factors ab[r] where seen[r]). */
template <int NT, bool FOLD = false, bool ALL = false, typename F> /* ALL: every row seen */
__device__ __forceinline__ void pv_tiles(const uint32_t (&pp)[8][2], const F &f, int hd, int nt0, int step,
                                         float (*acc)[2 * NT], const float2 *ab = NULL, const int *seen = NULL) {
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int nt = nt0 + step * i;
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (8 * nt < hd) {
            uint2 b[4];
            f.vfrags(nt, b);
#pragma unroll
            for (int kb = 0; kb < 4; kb++)
                mma16816(d, pp[2 * kb][0], pp[2 * kb][1], pp[2 * kb + 1][0], pp[2 * kb + 1][1], b[kb].x, b[kb].y);
        }
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &o = acc[r][2 * i + e];
                if (!FOLD) o = d[2 * r + e];
                else if (ALL || seen[r]) o = fold_elem(o, d[2 * r + e], ab[r]);
            }
        if constexpr (F::WINDOW > 0) /* the next tiles' loads wait here (hoisted all, they spilled) */
            if (i % (F::WINDOW > 0 ? F::WINDOW : 1) == F::WINDOW - 1) __syncwarp();
    }
}

/* What the K warps of a row tile exchange for one split of its 16 rows: scores by row [r][key tile][lane], the bf16
 * probabilities and each row's (m, l) (shared memory). */
struct tile_x {
    float2 s[2][8][32];
    uint32_t pp[2][8][32];
    float2 ml[2][32];
};

/* The barrier of row tile T's K warps (named barrier 1 + T). */
template <int K>
__device__ __forceinline__ void tile_sync(int T) {
    asm volatile("bar.sync %0, %1;" ::"r"(T + 1), "n"(32 * K) : "memory");
}

/* One split for a row tile's 16 rows (rows g, g + 8 of this lane: positions p[r], -1 for none) by its K warps, member
 * q of them: the scores of key tiles (8 / K) q .., the softmax of row q (g or g + 8 of each lane; none for q >= 2),
 * the value tiles q, q + K, ... folded into O (M, L: both rows', kept by every member) where a row sees a key; each
 * row's arithmetic is decode_mma's (score_tile, row_softmax, pv_tiles, fold). */
template <int NE, int K>
__device__ __forceinline__ void split_mma_tile(const gp_cu_attn &a, const uint4 (&qa)[NE], const uint4 (&qa8)[NE],
                                               const frags_bf16 &f, uint64_t hm, int32_t j0, const int32_t *p,
                                               float *M, float *L, float (*O)[8 * NE / K], tile_x *x, int T, int q) {
    const int lane = threadIdx.x & 31, hd = a.head_dim;
#pragma unroll
    for (int jj = 0; jj < 8 / K; jj++) {
        const int j = 8 / K * q + jj;
        float t[4];
        score_tile<NE>(qa, qa8, f, hd, j, t);
        x->s[0][j][lane] = make_float2(t[0], t[1]), x->s[1][j][lane] = make_float2(t[2], t[3]);
    }
    tile_sync<K>(T);
    if (q < 2) {
        float v[8][2], m, l;
        uint32_t pr[8];
        int sn;
#pragma unroll
        for (int j = 0; j < 8; j++) v[j][0] = x->s[q][j][lane].x, v[j][1] = x->s[q][j][lane].y;
        row_softmax(a, v, vis_mask(a, hm, j0, p[q]) >> (2 * (lane & 3)), sn, m, l, pr);
#pragma unroll
        for (int j = 0; j < 8; j++) x->pp[q][j][lane] = pr[j];
        x->ml[q][lane] = make_float2(m, l); /* m = -inf: unseen */
    }
    tile_sync<K>(T);
    uint32_t pp[8][2];
    int seen[2];
    float2 ab[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int j = 0; j < 8; j++) pp[j][r] = x->pp[r][j][lane];
        const float2 ml = x->ml[r][lane];
        seen[r] = ml.x != -INFINITY;
        if (seen[r]) ab[r] = fold_step(M[r], L[r], ml.x, ml.y);
    }
    if (__any_sync(0xffffffffu, seen[0] || seen[1])) pv_tiles<4 * NE / K, true>(pp, f, hd, q, K, O, ab, seen);
}

/* split_mma_tile by one warp alone (K = 1): every score tile, both rows' softmax in registers (mma_softmax), every
 * value tile folded into O; the same functions in the same order, so the same bits, and no barrier.  FULL: every
 * row of the warp sees all 64 keys (the splits before a chunk's diagonal), so nothing is masked (and, where every
 * row's max is finite, every row is folded without a test). */
template <int NE, bool FULL, typename F>
__device__ __forceinline__ void split_rows(const gp_cu_attn &a, const uint4 (&qa)[NE], const uint4 (&qa8)[NE],
                                           const F &f, int hd, uint64_t hm, int32_t j0, const int32_t *p, float *M,
                                           float *L, float (*O)[8 * NE]) {
    float s[8][4], m[2], l[2];
    uint32_t pp[8][2];
    int seen[2];
#pragma unroll
    for (int j = 0; j < 8; j++) score_tile<NE>(qa, qa8, f, hd, j, s[j]);
    if (!mma_softmax<FULL>(a, s, hm, j0, p, seen, m, l, pp)) return;
    float2 ab[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (seen[r]) ab[r] = fold_step(M[r], L[r], m[r], l[r]);
    if (FULL && __all_sync(0xffffffffu, seen[0] && seen[1])) pv_tiles<4 * NE, true, true>(pp, f, hd, 0, 1, O, ab, seen);
    else pv_tiles<4 * NE, true>(pp, f, hd, 0, 1, O, ab, seen);
}
template <int NE, typename F>
__device__ __forceinline__ void split_mma_warp(const gp_cu_attn &a, const uint4 (&qa)[NE], const uint4 (&qa8)[NE],
                                               const F &f, int hd, uint64_t hm, int32_t j0, const int32_t *p,
                                               float *M, float *L, float (*O)[8 * NE]) {
    if (__all_sync(0xffffffffu, vis_mask(a, hm, j0, p[0]) == ~0ull && vis_mask(a, hm, j0, p[1]) == ~0ull))
        split_rows<NE, true>(a, qa, qa8, f, hd, hm, j0, p, M, L, O);
    else split_rows<NE, false>(a, qa, qa8, f, hd, hm, j0, p, M, L, O);
}

/* out [hd] of row r's (query, head) from this lane's elements of tiles nt0 + step i (pv_tiles' columns). */
template <int NT>
__device__ __forceinline__ void finish_frag(float *out, int hd, float L, const float *O, int bf, int nt0, int step) {
    const int c = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int nt = nt0 + step * i;
        if (8 * nt < hd)
            *(float2 *)(out + 8 * nt + 2 * c) = make_float2(out_val(O[2 * i], L, bf), out_val(O[2 * i + 1], L, bf));
    }
}

/* A split's partial of one (query, head) from this lane's elements of tiles nt0 + step i (put_part's layout: m, l,
 * acc [hd]). */
template <int NT>
__device__ __forceinline__ void put_frag(float *p, int seen, float m, float l, const float *acc, int hd, int nt0,
                                         int step) {
    const int c = threadIdx.x & 3;
    if (c == 0 && nt0 == 0) p[0] = seen ? m : -INFINITY, p[1] = seen ? l : 0.0f;
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int nt = nt0 + step * i;
        if (seen && 8 * nt < hd) p[2 + 8 * nt + 2 * c] = acc[2 * i], p[3 + 8 * nt + 2 * c] = acc[2 * i + 1];
    }
}

/* The end of span `span` of a chunk for the row of query t, head h (at position p; -1: none; heads of hd): its
 * state (M, L and the N values of O this thread holds) out, through fin(the output row) when the chunk has one span,
 * else through put(the span's partial in part [n][n_heads][nspan][hd + 2], whether it saw a key;
 * attn_span_fold_kernel folds them); then the empty state. */
template <int N, typename Fin, typename Put>
__device__ __forceinline__ void span_end(const gp_cu_attn &a, const attn_plan &pl, int32_t p, int32_t t, int32_t h,
                                         int32_t hd, int32_t span, float &M, float &L, float *O, Fin fin, Put put) {
    const size_t o = (size_t)t * a.n_heads + h;
    if (p >= 0 && pl.nspan == 1) fin(a.out + o * hd);
    else if (p >= 0) put(a.part + (o * pl.nspan + span - pl.s0) * (hd + 2), M != -INFINITY);
    M = -INFINITY, L = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) O[k] = 0.0f;
}

/* span_end for a tensor-core tile's row: this lane's tiles nt0 + step i of O */
template <int NT>
__device__ __forceinline__ void span_out_frag(const gp_cu_attn &a, const attn_plan &pl, int32_t p, int32_t t,
                                              int32_t h, int32_t hd, int32_t span, float &M, float &L, float *O,
                                              int nt0, int step) {
    span_end<2 * NT>(
        a, pl, p, t, h, hd, span, M, L, O, [&](float *y) { finish_frag<NT>(y, hd, L, O, pl.bf, nt0, step); },
        [&](float *q, bool seen) { put_frag<NT>(q, seen, M, L, O, hd, nt0, step); });
}

/* Split s's keys and values for kv head kvh into ks, vs [SPLIT][ld] by cp.async (one group, not waited for; zeros for
 * the positions not held, held[i] marks the others): the tensor-core chunk's staging and a looping decode block's
 * next split, their rows all float32 (inlined there; stage_async is the chunk kernels' call, which stages bfloat16
 * rows by stage_split instead). */
template <bool RUN = false> /* RUN: stage_run_async first (decode's; the chunk kernels spilled more with it) */
__device__ __forceinline__ void stage_async_in(const gp_cu_attn &a, const attn_desc_sm *d, int32_t s, int32_t kvh,
                                               int32_t ld, float *ks, float *vs, uint8_t *held) {
    const int32_t j0 = s * SPLIT, off = kvh * a.head_dim;
    if (RUN && stage_run_async<4>(d, j0, off, a.head_dim, ks, ld, vs, ld, held)) {
        cp_commit();
        return;
    }
    for (row_walk w(a.head_dim / 4); w.i < SPLIT; w.step()) {
        const int i = w.i, f = w.f;
        const int32_t j = j0 + i;
        const int sg = seg_of(d, j);
        if (f == 0) held[i] = sg >= 0;
        const float *kp = a.q, *vp = a.q; /* (mapped addresses for the zero fills) */
        if (sg >= 0) {
            const gp_cu_kv_seg S = d->seg[sg];
            const int64_t r = S.r0 + (j - S.p0);
            kp = d->rows[S.src].f + r * d->rows[S.src].kvd + off + 4 * f;
            vp = d->rows[2 + S.src].f + r * d->rows[2 + S.src].kvd + off + 4 * f;
        }
        cp16(ks + i * ld + 4 * f, kp, sg >= 0);
        cp16(vs + i * ld + 4 * f, vp, sg >= 0);
    }
    cp_commit();
}
template <bool B16 = false> /* B16: bfloat16 rows (cp.async copies bytes as they are): loaded, widened, zeros */
__device__ void stage_async(const gp_cu_attn &a, const attn_desc_sm *d, int32_t s, int32_t kvh, int32_t ld, float *ks,
                            float *vs, uint8_t *held) {
    if constexpr (B16) stage_split<4, true>(a, d, s, kvh, ld, ks, vs, held);
    else stage_async_in(a, d, s, kvh, ld, ks, vs, held);
}

/* The landed float32 split (ks, vs [SPLIT][ld]) as the bf16 copy frags_bf16 reads (kb [SPLIT][ldk] in column order,
 * vt [hd][vld] value columns with keys in pairs) and, given hm, its held mask at *hm, by the block. */
__device__ __forceinline__ void split_to_bf16(const float *ks, const float *vs, int32_t ld, int32_t hd, uint16_t *kb,
                                              int32_t ldk, uint32_t *vt, int64_t vld, const uint8_t *held,
                                              uint64_t *hm) {
    for (row_walk w(hd / 8); w.i < SPLIT; w.step()) {
        const float *k = ks + w.i * ld + 8 * w.f;
        *(uint4 *)(kb + w.i * ldk + 8 * w.f) = pack8(*(const float4 *)k, *(const float4 *)(k + 4));
    }
    for (int idx = threadIdx.x; idx < SPLIT / 2 * hd; idx += blockDim.x) {
        const int col = idx / (SPLIT / 2), kp = idx - col * (SPLIT / 2);
        vt[col * vld + kp] = pack2(vs[2 * kp * ld + col], vs[(2 * kp + 1) * ld + col]);
    }
    if (hm && threadIdx.x < 32) {
        const uint64_t m = held_mask(held);
        if (threadIdx.x == 0) *hm = m;
    }
}

/* Shared memory of attn_mma_chunk_kernel with w row tiles: the float32 keys and values [SPLIT][ld] each, their bf16
 * copy [SPLIT][hd + 32] and value columns [hd][VT_LD] words, a tile_x per row tile of K > 1 warps; PRE: two bf16
 * copies and their held flags instead of the float32 rows and one copy. */
static size_t mma_chunk_copy(int32_t hd) { return (size_t)SPLIT * (hd + 32) * 2 + (size_t)hd * VT_LD * 4 + SPLIT; }
static size_t mma_chunk_smem(int32_t hd, int32_t w, int k, bool pre) {
    const size_t stage = pre ? mma_chunk_copy(hd) : (size_t)2 * SPLIT * (hd + 4) * sizeof(float) + mma_chunk_copy(hd);
    return (pre ? 2 : 1) * stage + (k > 1 ? (size_t)w * sizeof(tile_x) : 0);
}

/* The bf16 copy of a chunk's keys and values (attn_kv_bf16_kernel writes it into the GEMM scratch; the chunk kernel
 * with PRE stages its splits from it): positions [p0, p0 + np) (whole splits), keys k [n_kv][np][hd], value columns
 * v [n_kv][hd][np / 2] words (keys in pairs), held flags h [np]. */
struct attn_pre {
    uint16_t *k;
    uint32_t *v;
    uint8_t *h;
    int32_t p0, np;
};

/* Rows [i0, i0 + KV_COPY_ROWS) of attn_pre's copy, i0 = blockIdx.x KV_COPY_ROWS, of kv head blockIdx.y: each row's
 * keys and values read from the cache (float32, or bfloat16 rows widened; zeros where the position is not held), the
 * keys rounded to bf16 into k, the values through shared memory into their columns' words, the held flags (kv head 0):
 * split_to_bf16's values, by blocks of a quarter split (a block a split, staged by cp.async: 64 blocks for a 512-token
 * chunk with no held tokens before it, 6.7-9.4 us a layer on an H200; 3.0-3.7 so: BENCHMARKS.md). */
#define KV_COPY_ROWS 16
__global__ void __launch_bounds__(256) attn_kv_bf16_kernel(gp_cu_attn a, attn_plan pl, attn_pre c) {
    __shared__ attn_desc_sm d;
    __shared__ int8_t run[KV_COPY_ROWS];
    __shared__ __align__(16) float vs[KV_COPY_ROWS][32 * MAX_NE + 4];
    const int32_t kvh = blockIdx.y, hd = a.head_dim, i0 = blockIdx.x * KV_COPY_ROWS, off = kvh * hd, nu = hd / 8;
    desc_to_smem(a, pl, NULL, &d);
    pdl_enter();
    __syncthreads();
    if (threadIdx.x < KV_COPY_ROWS) run[threadIdx.x] = (int8_t)seg_of(&d, c.p0 + i0 + (int32_t)threadIdx.x);
    __syncthreads();
    for (int32_t u = threadIdx.x; u < KV_COPY_ROWS * nu; u += blockDim.x) {
        const int32_t i = u / nu, f = u - i * nu, sg = run[i], j = c.p0 + i0 + i;
        float4 k0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), k1 = k0, v0 = k0, v1 = k0;
        if (sg >= 0) {
            const gp_cu_kv_seg S = d.seg[sg];
            const gp_cu_kv_rows &K = d.rows[S.src], &V = d.rows[2 + S.src];
            const int64_t r = S.r0 + (j - S.p0);
            if (!S.quant) {
                const float *kp = K.f + r * K.kvd + off + 8 * f, *vp = V.f + r * V.kvd + off + 8 * f;
                k0 = *(const float4 *)kp, k1 = *(const float4 *)(kp + 4);
                v0 = *(const float4 *)vp, v1 = *(const float4 *)(vp + 4);
            } else if (K.bits == 16) { /* bfloat16 rows: widened */
                const uint8_t *kp = K.q + 2 * (r * K.kvd + off + 8 * f), *vp = V.q + 2 * (r * V.kvd + off + 8 * f);
                k0 = bf16x4(kp), k1 = bf16x4(kp + 8), v0 = bf16x4(vp), v1 = bf16x4(vp + 8);
            } else { /* (quantized rows: not on this path, attn_mma) */
                k0 = kv_at4(K, r, off + 8 * f), k1 = kv_at4(K, r, off + 8 * f + 4);
                v0 = kv_at4(V, r, off + 8 * f), v1 = kv_at4(V, r, off + 8 * f + 4);
            }
        }
        *(uint4 *)(c.k + ((size_t)kvh * c.np + i0 + i) * hd + 8 * f) = pack8(k0, k1);
        *(float4 *)&vs[i][8 * f] = v0, *(float4 *)&vs[i][8 * f + 4] = v1;
    }
    __syncthreads();
    uint32_t *v = c.v + (size_t)kvh * hd * (c.np / 2) + i0 / 2;
    for (int32_t idx = threadIdx.x; idx < KV_COPY_ROWS / 2 * hd; idx += blockDim.x) {
        const int32_t col = idx / (KV_COPY_ROWS / 2), kp = idx - col * (KV_COPY_ROWS / 2);
        v[(size_t)col * (c.np / 2) + kp] = pack2(vs[2 * kp][col], vs[2 * kp + 1][col]);
    }
    if (kvh == 0 && threadIdx.x < KV_COPY_ROWS) c.h[i0 + threadIdx.x] = run[threadIdx.x] >= 0;
}

/* Split s's keys, value columns and held flags from attn_pre's copy into kb [SPLIT][ldk], vt [hd][VT_LD] and held
 * by cp.async (one group, not waited for).  A thread copies the same 16 bytes of every row (every column) it takes,
 * rows n / (hd / 8) apart (columns n / 8) for n threads, so each copy's addresses are the last ones plus a stride
 * (STRIDED, heads over 64: the loops that found each row, piece and column again took 29% of the chunk kernel's
 * instructions at 8,192 held tokens, 8 turns a split; heads of 64 take 2 turns, and their kernel, held to 128
 * registers, ran 1% slower with the strides: BENCHMARKS.md); row_walk's loop where hd / 8 does not divide n. */
template <bool STRIDED>
__device__ void stage_copy_async(const attn_pre &c, int32_t s, int32_t kvh, int32_t hd, int32_t ldk, uint16_t *kb,
                                 uint32_t *vt, uint8_t *held) {
    if constexpr (!STRIDED) {
        const int32_t i0 = s * SPLIT - c.p0;
        const uint16_t *k = c.k + ((size_t)kvh * c.np + i0) * hd;
        for (row_walk w(hd / 8); w.i < SPLIT; w.step()) cp16(kb + w.i * ldk + 8 * w.f, k + w.i * hd + 8 * w.f, true);
        const uint32_t *v = c.v + (size_t)kvh * hd * (c.np / 2) + i0 / 2;
        for (int u = threadIdx.x; u < hd * (SPLIT / 8); u += blockDim.x) { /* a column's SPLIT / 2 words: 8 units */
            const int col = u / (SPLIT / 8), q = u % (SPLIT / 8);
            cp16(vt + col * VT_LD + 4 * q, v + (size_t)col * (c.np / 2) + 4 * q, true);
        }
        if (threadIdx.x < SPLIT / 16) cp16(held + 16 * threadIdx.x, c.h + i0 + 16 * threadIdx.x, true);
        cp_commit();
        return;
    }
    const int32_t i0 = s * SPLIT - c.p0, nv = hd / 8, n = blockDim.x;
    int32_t t = threadIdx.x;
    asm volatile("" : "+r"(t)); /* (found at each call: kept across the caller's loop, its offsets spilled) */
    const uint16_t *k = c.k + ((size_t)kvh * c.np + i0) * hd;
    if (n % nv == 0) {
        const int32_t dr = n / nv;
        const uint16_t *src = k + (t / nv) * hd + 8 * (t % nv);
        uint16_t *dst = kb + (t / nv) * ldk + 8 * (t % nv);
        for (int32_t i = t / nv; i < SPLIT; i += dr, src += (size_t)dr * hd, dst += dr * ldk) cp16(dst, src, true);
    } else
        for (row_walk w(nv); w.i < SPLIT; w.step()) cp16(kb + w.i * ldk + 8 * w.f, k + w.i * hd + 8 * w.f, true);
    /* a value column's SPLIT / 2 words: SPLIT / 8 units of 16 bytes, unit t % 8 of columns t / 8 + j n / 8 */
    static_assert(SPLIT / 8 == 8, "a value column's units: 8 (n is a multiple of 32)");
    const size_t vld = (size_t)c.np / 2;
    const int32_t dc = n / 8;
    const uint32_t *vsrc = c.v + (size_t)kvh * hd * vld + i0 / 2 + (size_t)(t / 8) * vld + 4 * (t % 8);
    uint32_t *vdst = vt + (t / 8) * VT_LD + 4 * (t % 8);
    for (int32_t col = t / 8; col < hd; col += dc, vsrc += dc * vld, vdst += dc * VT_LD) cp16(vdst, vsrc, true);
    if (t < SPLIT / 16) cp16(held + 16 * t, c.h + i0 + 16 * t, true);
    cp_commit();
}

/* A chunk of queries on tensor cores: grid (kv heads, query tiles), blockDim.x / 32 K row tiles of 16 rows, each K
 * warps' (split_mma_tile; one warp's with K = 1, split_mma_warp), a tile qt queries x the G heads of kv head kvh
 * (row i: query t0 + i / G, head kvh G + i % G); the splits as attn_chunk_kernel takes and folds them, each copied
 * by cp.async while the one before is computed, then to bf16 — or, PRE, copied from attn_pre's bf16 copy
 * (attn_kv_bf16_kernel's) into one of two buffers while the other is computed: the same values, one barrier a split
 * and no conversion. */
template <int NE, int K, bool PRE, bool B16 = false, bool EXACT = false> /* (B16: bfloat16 rows, stage_async<true>;
                                                                           * not with PRE; EXACT: head_dim 32 NE) */
__global__ void __launch_bounds__(K == 1 ? 32 * MMA1_WARPS : 32 * MMA_WARPS, K == 1 && NE == 2 ? 2 : 1)
    attn_mma_chunk_kernel(gp_cu_attn a, attn_plan pl, int32_t qt, attn_pre c) {
    pdl_enter();
    extern __shared__ float smem[];
    __shared__ attn_desc_sm d;
    __shared__ uint8_t held_f[SPLIT];
    __shared__ uint64_t hm_f;
    const int32_t kvh = blockIdx.x, hd = EXACT ? 32 * NE : a.head_dim, lane = threadIdx.x & 31, ldk = hd + 32;
    const int32_t t0 = (gridDim.y - 1 - blockIdx.y) * qt; /* the tiles with the most keys first */
    const size_t cb = (hd * VT_LD * 4 + SPLIT * ldk * 2 + SPLIT) / 4; /* floats a bf16 copy (mma_chunk_copy) */
    float *ks = smem, *vs = ks + SPLIT * pl.ld, *cp = PRE ? smem : vs + SPLIT * pl.ld; /* copies at cp */
    auto vt_of = [&](int i) { return (uint32_t *)(cp + i * cb); }; /* copy i: vt, kb, held */
    auto kb_of = [&](int i) { return (uint16_t *)(vt_of(i) + hd * VT_LD); };
    auto held_of = [&](int i) { return PRE ? (uint8_t *)(kb_of(i) + SPLIT * ldk) : held_f; };
    const int T = threadIdx.x / (32 * K), q = (threadIdx.x >> 5) % K;
    tile_x *x = (tile_x *)(cp + (PRE ? 2 : 1) * cb) + T;
    desc_to_smem(a, pl, NULL, &d);
    int32_t t[2], h[2], p[2];
    const float *qr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = 16 * T + (lane >> 2) + 8 * r;
        t[r] = t0 + i / pl.G, h[r] = kvh * pl.G + i % pl.G;
        p[r] = i < qt * pl.G && t[r] < a.n ? a.pos0 + t[r] : -1;
        qr[r] = p[r] >= 0 ? a.q + ((size_t)t[r] * a.n_heads + h[r]) * hd : NULL;
    }
    uint4 qa[NE], qa8[NE];
    q_frags<NE>(qr[0], qr[1], hd, qa, qa8);
    const int32_t sa = pl.s0 + (int32_t)blockIdx.z * pl.per, se = min(sa + pl.per, pl.s0 + pl.nspan);
    const tile_splits sp(a, pl, t0, qt, sa, se); /* (this block's spans of them) */
    int32_t span = sa;                           /* the span being folded */
    float M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f}, O[2][8 * NE / K];
#pragma unroll
    for (int k = 0; k < 8 * NE / K; k++) O[0][k] = O[1][k] = 0.0f;
    __syncthreads(); /* the descriptor is in place */
    constexpr bool STRIDED = NE > 2; /* (stage_copy_async's) */
    if (sp.count() > 0 && PRE) stage_copy_async<STRIDED>(c, sp.split(0), kvh, hd, ldk, kb_of(0), vt_of(0), held_of(0));
    else if (sp.count() > 0) stage_async<B16>(a, &d, sp.split(0), kvh, pl.ld, ks, vs, held_f);
    for (int32_t b = 0; span < se; span++) { /* span by span; then its state out */
        for (const int32_t be = sp.below((span + 1) * GP_CU_ATTN_SPAN); b < be; b++) {
            const int32_t s = sp.split(b), i = PRE ? b & 1 : 0;
            cp_wait<0>();
            __syncthreads(); /* split b landed; the readers of the buffer it goes to next (split b - 1's) are done */
            uint64_t hm;
            if (PRE) {
                if (b + 1 < sp.count())
                    stage_copy_async<STRIDED>(c, sp.split(b + 1), kvh, hd, ldk, kb_of(i ^ 1), vt_of(i ^ 1),
                                              held_of(i ^ 1));
                hm = held_mask(held_of(i));
            } else {
                split_to_bf16(ks, vs, pl.ld, hd, kb_of(0), ldk, vt_of(0), VT_LD, held_f, &hm_f);
                __syncthreads(); /* the copy complete, the float32 buffer free: split b + 1 goes in while b runs */
                if (b + 1 < sp.count()) stage_async<B16>(a, &d, sp.split(b + 1), kvh, pl.ld, ks, vs, held_f);
                hm = hm_f;
            }
            const frags_bf16 f{kb_of(i), vt_of(i), ldk, hd};
            const int32_t ps[2] = {p[0] >= s * SPLIT ? p[0] : -1, p[1] >= s * SPLIT ? p[1] : -1};
            if (__any_sync(0xffffffffu, ps[0] >= 0 || ps[1] >= 0)) { /* (the same for a row tile's K warps) */
                if constexpr (K == 1) split_mma_warp<NE>(a, qa, qa8, f, hd, hm, s * SPLIT, ps, M, L, O);
                else split_mma_tile<NE, K>(a, qa, qa8, f, hm, s * SPLIT, ps, M, L, O, x, T, q);
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++)
            span_out_frag<4 * NE / K>(a, pl, p[r], t[r], h[r], hd, span, M[r], L[r], O[r], q, K);
    }
}

/* Decode's fold of more than one split (after the split kernel; attn_decode): block (h, c) folds columns
 * [32 c, 32 c + 32) of head h's ns partials in fold_parts_by's two levels and order, each span a warp (fold_run_scan:
 * one round trip to L2 for a span's 32 partials), then warp 0 the spans' states from shared memory (nsp rows of
 * FOLD_ROW floats, dynamic).  Each element's arithmetic is fold_run's, so the chunk's bits; every head's columns
 * fold at once on their own multiprocessors (in the split kernel's last block of a kv head instead, its ticket's,
 * they took a third of the 8B shape's attention at 8,192 held tokens: BENCHMARKS.md). */
#define FOLD_WARPS 8
#define FOLD_ROW 34 /* a span's state in attn_fold_kernel's shared memory: m, l, its 32 columns */
__global__ void __launch_bounds__(32 * FOLD_WARPS) attn_fold_kernel(gp_cu_attn a, attn_plan pl, const attn_var *var) {
    extern __shared__ float st[]; /* [nsp][FOLD_ROW]: each span's state of columns c */
    __shared__ attn_desc_sm d;
    __shared__ float fac[FOLD_WARPS][96]; /* fold_run_scan's factors, a warp's */
    desc_to_smem(a, pl, var, &d);
    pdl_enter();
    __syncthreads();
    const int32_t h = blockIdx.x, c0 = 32 * blockIdx.y, hd = a.head_dim, ld = hd + 2, w = min(32, hd - c0);
    const int32_t ns = decode_splits(d), s0 = split_id(d, 0) / GP_CU_ATTN_SPAN;
    const int32_t nsp = split_id(d, ns - 1) / GP_CU_ATTN_SPAN - s0 + 1;
    const float *src = a.part + (size_t)h * ns * ld;
    const int warp = threadIdx.x >> 5;
    float M, L, O[1];
    for (int32_t si = warp; si < nsp; si += FOLD_WARPS) {
        const int32_t b0 = ids_below(d, ns, (s0 + si) * GP_CU_ATTN_SPAN);
        const int32_t b1 = ids_below(d, ns, (s0 + si + 1) * GP_CU_ATTN_SPAN);
        fold_empty<1>(M, L, O);
        fold_run_scan<1, 32>(b0, b1, w, M, L, O, fac[warp],
                             [&](int32_t b, int32_t i) { return __ldcg(src + (size_t)b * ld + (i < 2 ? i : c0 + i)); });
        put_part<1>(st + FOLD_ROW * si, M != -INFINITY, M, L, O, w);
    }
    __syncthreads();
    if (warp) return;
    fold_empty<1>(M, L, O);
    fold_run_scan<1, 32>(0, nsp, w, M, L, O, fac[0], [&](int32_t b, int32_t i) { return st[FOLD_ROW * b + i]; });
    finish_out<1>(a.out + (size_t)h * hd + c0, w, L, O, pl.bf);
}

/* A cluster of CL blocks (the kv head's splits): block 0 folds the partials ps [G][...] every block wrote to its
 * shared memory, a warp a head, through distributed shared memory (fold_parts' loads and arithmetic). */
template <int CL, int NE>
__device__ __forceinline__ void fold_cluster(const gp_cu_attn &a, const attn_plan &pl, const attn_desc_sm &d,
                                             int32_t kvh, float *ps, int32_t stride) {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync(); /* every block's partials written and visible to the cluster */
    attn_stamp(8);
    const int warp = threadIdx.x >> 5;
    if (blockIdx.x == 0 && warp < pl.G)
        fold_parts_by<NE>(
            CL, a.head_dim, a.out + (size_t)(kvh * pl.G + warp) * a.head_dim, pl.bf,
            [&](int32_t r, int32_t i) { return cluster.map_shared_rank(ps + warp * stride, (int)r)[i]; },
            [&](int32_t r) { return span_end(d, r); });
    attn_stamp(9);
    cluster.sync(); /* no block leaves (its shared memory) before block 0 has read it */
    attn_stamp(10);
}

/* Decode's split on tensor cores for the G heads' rows (queries qsm [G][hd]; rows past G see nothing), over the
 * block's 8 warps: warp w the scores of key tile w (to shared memory), then every warp the softmax (the same
 * arithmetic in each) and the value tiles w, w + 8 (the columns 8 w .., 64 + 8 w ..); then as split_decode: folded
 * in registers when it is the only split, else partials to the cluster or to part (as split idx of the call). */
template <int NE, int CL, typename F>
__device__ __forceinline__ void decode_mma(const gp_cu_attn &a, const attn_plan &pl, const attn_desc_sm *d,
                                           const float *qsm, const F &fr, const uint8_t *held, int32_t j0, int32_t p,
                                           int32_t kvh, int32_t ns, int32_t idx) {
    constexpr int NT = NE / 2; /* value tiles a warp (4 NE of them, 8 warps) */
    __shared__ float4 sc[8][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hd = a.head_dim;
    const int32_t row[2] = {lane >> 2, (lane >> 2) + 8};
    const int32_t ps[2] = {row[0] < pl.G ? p : -1, row[1] < pl.G ? p : -1};
    {
        uint4 qa[NE], qa8[NE];
        q_frags<NE>(ps[0] >= 0 ? qsm + row[0] * hd : NULL, ps[1] >= 0 ? qsm + row[1] * hd : NULL, hd, qa, qa8);
        float t[4];
        score_tile<NE>(qa, qa8, fr, hd, warp, t);
        sc[warp][lane] = make_float4(t[0], t[1], t[2], t[3]);
    }
    const uint64_t hm = held_mask(held);
    __syncthreads();
    attn_stamp(6);
    float s[8][4], m[2], l[2], acc[2][2 * NT];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float4 v = sc[j][lane];
        s[j][0] = v.x, s[j][1] = v.y, s[j][2] = v.z, s[j][3] = v.w;
    }
    int seen[2];
    uint32_t pp[8][2];
    if (mma_softmax(a, s, hm, j0, ps, seen, m, l, pp)) pv_tiles<NT>(pp, fr, hd, warp, 8, acc);
    attn_stamp(7);
    if (ns == 1) { /* the only split: folded in registers as the chunk kernel does */
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (row[r] < pl.G) {
                float M = -INFINITY, L = 0.0f, O[2 * NT];
#pragma unroll
                for (int k = 0; k < 2 * NT; k++) O[k] = 0.0f;
                if (seen[r]) fold<2 * NT>(M, L, O, m[r], l[r], acc[r]);
                finish_frag<NT>(a.out + (size_t)(kvh * pl.G + row[r]) * hd, hd, L, O, pl.bf, warp, 8);
            }
        attn_stamp(8);
        return;
    }
    if constexpr (CL > 0) {
        __shared__ float part[8][32 * NE + 2]; /* this block's partials, one per head of the group (G <= 8) */
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (row[r] < pl.G) put_frag<NT>(part[row[r]], seen[r], m[r], l[r], acc[r], hd, warp, 8);
        fold_cluster<CL, NE>(a, pl, *d, kvh, &part[0][0], 32 * NE + 2);
    } else {
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (row[r] < pl.G)
                put_frag<NT>(a.part + ((size_t)(kvh * pl.G + row[r]) * ns + idx) * (hd + 2), seen[r], m[r], l[r],
                             acc[r], hd, warp, 8);
    }
}

/* Decode: grid (blocks of a kv head, kv heads); warp w < G = query head kvh * G + w; the per-step values from var
 * when it is given (a recorded step), else from a and pl.  A single split is folded in registers.  CL = 0: each
 * block writes each of its splits' partials (m, l, acc [hd]) of every head of the group to part[(h, split)], and
 * attn_fold_kernel, launched next, folds them in order: the same partials and fold whichever block computes a split.
 * CL > 0 (attn_cluster_kernel: the kv head's splits are one thread-block cluster of CL blocks, those past the
 * call's splits seeing no key): the partials stay in shared memory and block 0 folds them through distributed
 * shared memory, with the same loads and arithmetic. */
template <int STAGE_BATCH, int NE, int CL, bool MMA, bool PLAIN>
__device__ __forceinline__ void split_decode(const gp_cu_attn &a, const attn_plan &pl, const attn_var *var) {
    /* LOOP (ATTN_LOOP): blocks that may take several splits; DBUF: with two staging buffers (heads of 64: two blocks
     * a multiprocessor keep their shared memory, attn_decode) */
    constexpr bool LOOP = CL == 0 && ATTN_LOOP(STAGE_BATCH, NE, MMA, PLAIN), DBUF = LOOP && NE == 2;
    extern __shared__ float smem[]; /* ks, vs [SPLIT][ld], q [G][hd] (, the new key [hd]) (, ks, vs of DBUF) */
    __shared__ attn_desc_sm d;
    __shared__ uint8_t held[DBUF ? 2 * SPLIT : SPLIT]; /* (DBUF: the second buffer's flags after the first's) */
    const int32_t nb = gridDim.x, kvh = blockIdx.y, hd = a.head_dim;
    const int warp = threadIdx.x >> 5;
    const bool head = warp < pl.G; /* warps past the group's heads only stage */
    const int32_t h = kvh * pl.G + warp;
    float *ks = smem, *vs = ks + SPLIT * pl.ld, *qs = vs + SPLIT * pl.ld + warp * hd;
    __shared__ float2 cs[MAX_NE * 16]; /* the rope's rope_cs values at position p [head_dim / 2] */
    __shared__ float nw[2][MAX_NE * 32]; /* the query and key norms' weights [head_dim] widened to float32 */
    attn_stamp(0);
    desc_to_smem(a, pl, var, &d); /* (var: written before the step's first kernel, so readable before the wait) */
    const gp_cu_wt qn = norm_in(a.qn, nw[0], a.rk ? hd : 0), kn = norm_in(a.kn, nw[1], a.rk ? hd : 0);
    __syncthreads();
    attn_stamp(1);
    /* LOOP: the call's ns splits (plan_of's) over the nb blocks of the kv head, block b taking the splits
     * ns - 1 - b, ns - 1 - b - nb, ... in turn (nb < ns: attn_decode's choice; the split holding p first, so the
     * block whose first split holds it stores the new key).  Else block b takes split b (a cluster's: of CL; the
     * other kernels keep their registers and block order: BENCHMARKS.md). */
    const int32_t p = d.pos0, ns = LOOP ? decode_splits(d) : nb;
    const int32_t first = LOOP ? ns - 1 - (int32_t)blockIdx.x : (int32_t)blockIdx.x;
    if (first < 0) return; /* (LOOP: a grid rounded up past the splits, attn_decode) */
    /* the rope inside (a.rk): its angles and the first split's held rows, which are earlier steps', before the wait
     * for the kernel that writes q, k, v; then every block rotates its heads' queries, the block of the split
     * holding p the new key.  (One call site of stage_split: each one is a large share of the kernel's code.) */
    const bool early = a.rk != NULL;
    if (early) rope_angles(cs, hd / 2, (float)p, a.inv_freq, pl.bf);
    if (!early) pdl_enter();
    /* pre (DBUF and pl.dbuf, float32 rows only): while a looping block computes a split, the next one's rows are
     * copied by cp.async (stage_async_in) into the other of two staging buffers (the second after the queries) */
    float *const qsm = vs + SPLIT * pl.ld;
    const int32_t o2 = 2 * SPLIT * pl.ld + (pl.G + early) * hd; /* floats from a buffer's rows to the other's */
    bool pre = DBUF && pl.dbuf;
    for (int i = 0; i < d.n_seg; i++) pre = pre && !d.seg[i].quant;
    int b = 0; /* the buffer of this split */
    for (int32_t idx = first;;) {
        float *kb = ks + b * o2, *vb = vs + b * o2;
        uint8_t *hb = held + b * SPLIT;
        const int32_t j0 = split_id(d, idx) * SPLIT;
        const bool at_first = !LOOP || idx == first;
        if (at_first || !pre)
            stage_split<STAGE_BATCH, MMA>(a, &d, j0 / SPLIT, kvh, pl.ld, kb, vb, hb, at_first && early ? p : -1);
        else cp_wait<0>(); /* (this thread's copies of the split; the barrier below: everyone's) */
        if (at_first) {
            attn_stamp(2);
            if (early) __syncthreads(), pdl_enter(); /* (cs written) */
            attn_stamp(3);
            decode_jobs<NE, PLAIN>(a, pl, d, j0, qsm, ks, vs, pl.ld, pl.ld, cs, qn, kn);
            attn_stamp(4);
        }
        __syncthreads();
        if (pre && idx - nb >= 0) /* the next split into the other buffer (its last reads were before the barrier) */
            stage_async_in<true>(a, &d, split_id(d, idx - nb), kvh, pl.ld, ks + (1 - b) * o2, vs + (1 - b) * o2,
                                 held + (1 - b) * SPLIT);
        attn_stamp(5);
        if constexpr (MMA) {
            decode_mma<NE, CL>(a, pl, &d, qsm, frags_f32{kb, vb, pl.ld, hd}, hb, j0, p, kvh, ns, idx);
            if (ns == 1 || CL > 0) return;
        } else {
            float m, l, acc[1][NE];
            const int32_t pq = head ? p : -1;
            int seen;
            constexpr int PV = STAGE_BATCH == 1 ? 2 : NE <= 4 ? 8 : 4;
            split_warp<1, NE, PV, PLAIN>(a, pl, &qs, kb, vb, hb, j0, &pq, &seen, &m, &l, acc);
            attn_stamp(7);
            if (ns == 1) { /* the only split: folded in registers as the chunk kernel does, no partials */
                float M = -INFINITY, L = 0.0f, O[NE];
#pragma unroll
                for (int k = 0; k < NE; k++) O[k] = 0.0f;
                if (seen) fold<NE>(M, L, O, m, l, acc[0]);
                if (head) finish_out<NE>(a.out + (size_t)h * hd, hd, L, O, pl.bf);
                attn_stamp(8);
                return;
            }
            if constexpr (CL > 0) {
                __shared__ float ps[8][32 * NE + 2]; /* this block's partials, one per head of the group (G <= 8) */
                if (head) put_part<NE>(ps[warp], seen, m, l, acc[0], hd);
                fold_cluster<CL, NE>(a, pl, d, kvh, &ps[0][0], 32 * NE + 2);
                return;
            }
            if (head) put_part<NE>(a.part + ((size_t)h * ns + idx) * (hd + 2), seen, m, l, acc[0], hd);
        }
        if (!LOOP || (idx -= nb) < 0) break;
        __syncthreads(); /* (every warp done with the split's rows before the next is staged over them) */
        if (pre) b = 1 - b;
    }
}

/* PLAIN: head_dim = 32 NE, no soft-capping, and the float32 mode (or, MMA, the bf16 mode's tensor-core path),
 * compiled with those known (the values a call already has, now constants to the compiler, which drops the other
 * mode's paths and the loops' bounds): the same arithmetic in less code and fewer jumps, which a decode step fetches
 * cold every launch. */
template <int NE, bool PLAIN, bool MMA>
__device__ __forceinline__ void plain_case(gp_cu_attn &a, attn_plan &pl) {
    if (PLAIN) pl.bf = MMA ? 1 : 0, a.softcap = 0.0f, a.head_dim = 32 * NE, pl.ld = 32 * NE + 4;
}

/* Decode (MMA: on tensor cores, blocks of 8 warps for any G up to 16; PLAIN: plain_case).  Blocks of 8 warps are
 * held to ATTN_BLOCKS_PER_SM's 128 registers a thread, but the plain tensor-core kernel over heads of 128, which
 * does not loop and takes 126 unbounded (122 under the bound, a few percent slower on the H100: BENCHMARKS.md). */
template <int STAGE_BATCH, int NE, bool MMA, bool PLAIN = false>
__global__ void __launch_bounds__(STAGE_BATCH > 1 ? 256 : 1024,
                                  STAGE_BATCH > 1 && !(MMA && PLAIN && NE == 4) ? ATTN_BLOCKS_PER_SM : 1)
    attn_split_kernel(gp_cu_attn a, attn_plan pl, const attn_var *var) {
    plain_case<NE, PLAIN, MMA>(a, pl);
    split_decode<STAGE_BATCH, NE, 0, MMA, PLAIN>(a, pl, var);
}

/* Decode with 2 to 8 splits and up to 8 query heads per kv head: grid (CL, kv heads), clusters of CL blocks. */
template <int NE, int CL, bool MMA, bool PLAIN = false>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(256)
    attn_cluster_kernel(gp_cu_attn a, attn_plan pl, const attn_var *var) {
    plain_case<NE, PLAIN, MMA>(a, pl);
    split_decode<8, NE, CL, MMA, PLAIN>(a, pl, var);
}

/* Bytes of split_decode16's staging buffer for heads of hd: a split's bfloat16 keys and values (frags_rows16). */
__host__ __device__ constexpr size_t tile16(int32_t hd) { return (size_t)SPLIT * (2 * hd + K16_PAD + V16_PAD) * 2; }

/* Split s's bfloat16 rows for kv head kvh into ks, vs (frags_rows16's layout) by cp.async as the cache holds them
 * (one group, not waited for; zeros for the positions not held, held[i] marks the others). */
__device__ __forceinline__ void stage16_async(const gp_cu_attn &a, const attn_desc_sm *d, int32_t s, int32_t kvh,
                                              uint16_t *ks, uint16_t *vs, uint8_t *held) {
    const int32_t hd = a.head_dim, j0 = s * SPLIT, off = kvh * hd;
    if (stage_run_async<2>(d, j0, off, hd, ks, hd + K16_PAD, vs, hd + V16_PAD, held)) {
        cp_commit();
        return;
    }
    for (row_walk w(hd / 8); w.i < SPLIT; w.step()) {
        const int i = w.i, f = w.f;
        const int32_t j = j0 + i;
        const int sg = seg_of(d, j);
        if (f == 0) held[i] = sg >= 0;
        const void *kp = a.q, *vp = a.q; /* (mapped addresses for the zero fills) */
        if (sg >= 0) {
            const gp_cu_kv_seg S = d->seg[sg];
            const int64_t r = S.r0 + (j - S.p0);
            kp = d->rows[S.src].q + 2 * (r * d->rows[S.src].kvd + off + 8 * f);
            vp = d->rows[2 + S.src].q + 2 * (r * d->rows[2 + S.src].kvd + off + 8 * f);
        }
        cp16(ks + i * (hd + K16_PAD) + 8 * f, kp, sg >= 0);
        cp16(vs + i * (hd + V16_PAD) + 8 * f, vp, sg >= 0);
    }
    cp_commit();
}

/* split_decode's tensor-core path (PLAIN) over bfloat16 cache rows, staged as they are (stage16_async: half the
 * bytes of float32 rows, no conversion, and the products read them as frags_rows16: the same values, so the same
 * bits).  Blocks that take several splits (CL == 0 and nb < ns) copy the next one into a second buffer while they
 * compute the current one when pl.dbuf.  Shared memory: [1 + pl.dbuf] buffers of tile16 bytes, then q [G][hd]. */
template <int NE, int CL>
__device__ __forceinline__ void split_decode16(const gp_cu_attn &a, const attn_plan &pl, const attn_var *var) {
    extern __shared__ float smem[];
    __shared__ attn_desc_sm d;
    __shared__ uint8_t held[2 * SPLIT];
    __shared__ float2 cs[MAX_NE * 16];
    __shared__ float nw[2][MAX_NE * 32];
    const int32_t nb = gridDim.x, kvh = blockIdx.y, hd = a.head_dim;
    const size_t tb = tile16(hd) / 2; /* (elements a buffer) */
    uint16_t *const k16 = (uint16_t *)smem;
    float *const qsm = (float *)(k16 + (1 + pl.dbuf) * tb);
    auto kb_of = [&](int b) { return k16 + b * tb; };
    auto vb_of = [&](int b) { return k16 + b * tb + SPLIT * (hd + K16_PAD); };
    desc_to_smem(a, pl, var, &d);
    const gp_cu_wt qn = norm_in(a.qn, nw[0], a.rk ? hd : 0), kn = norm_in(a.kn, nw[1], a.rk ? hd : 0);
    __syncthreads();
    /* split_decode's order: block b takes splits ns - 1 - b, ns - 1 - b - nb, ... (the first holds p) */
    const int32_t p = d.pos0, ns = CL == 0 ? decode_splits(d) : nb;
    const int32_t first = CL == 0 ? ns - 1 - (int32_t)blockIdx.x : (int32_t)blockIdx.x;
    if (first < 0) return; /* (a grid rounded up past the splits, attn_decode) */
    const bool early = a.rk != NULL;
    if (early) rope_angles(cs, hd / 2, (float)p, a.inv_freq, pl.bf);
    if (!early) pdl_enter();
    /* the first split's rows are earlier steps' (the new key's row is written by the jobs after they land) */
    stage16_async(a, &d, split_id(d, first), kvh, kb_of(0), vb_of(0), held);
    int b = 0;
    for (int32_t idx = first;;) {
        const int32_t j0 = split_id(d, idx) * SPLIT;
        cp_wait<0>();
        __syncthreads(); /* split idx landed; the buffer the next copy goes to is free (its readers passed the end) */
        if (idx == first) {
            if (early) pdl_enter();
            decode_jobs<NE, true>(a, pl, d, j0, qsm, kb_of(0), vb_of(0), hd + K16_PAD, hd + V16_PAD, cs, qn, kn);
            __syncthreads();
        }
        if (pl.dbuf && idx - nb >= 0)
            stage16_async(a, &d, split_id(d, idx - nb), kvh, kb_of(1 - b), vb_of(1 - b), held + (1 - b) * SPLIT);
        decode_mma<NE, CL>(a, pl, &d, qsm, frags_rows16{kb_of(b), vb_of(b), hd}, held + b * SPLIT, j0, p, kvh, ns,
                           idx);
        if (ns == 1 || CL > 0) return;
        if ((idx -= nb) < 0) break;
        __syncthreads(); /* every warp done with buffer b */
        if (pl.dbuf) b = 1 - b;
        else stage16_async(a, &d, split_id(d, idx), kvh, kb_of(0), vb_of(0), held);
    }
}

/* Decode over bfloat16 cache rows on tensor cores (split_decode16): blocks that may take several splits, and
 * clusters of CL blocks for 2 to 8 splits. */
template <int NE>
__global__ void __launch_bounds__(256, SPLIT16_BLOCKS_PER_SM(NE))
    attn_split16_kernel(gp_cu_attn a, attn_plan pl, const attn_var *var) {
    plain_case<NE, true, true>(a, pl);
    split_decode16<NE, 0>(a, pl, var);
}
template <int NE, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(256)
    attn_cluster16_kernel(gp_cu_attn a, attn_plan pl, const attn_var *var) {
    plain_case<NE, true, true>(a, pl);
    split_decode16<NE, CL>(a, pl, var);
}

/* span_end for a warp's pair (query t, head h) with the elements lane + 32 k. */
template <int NE>
__device__ __forceinline__ void span_out(const gp_cu_attn &a, const attn_plan &pl, int32_t p, int32_t t, int32_t h,
                                         int32_t span, float &M, float &L, float *O) {
    span_end<NE>(
        a, pl, p, t, h, a.head_dim, span, M, L, O, [&](float *y) { finish_out<NE>(y, a.head_dim, L, O, pl.bf); },
        [&](float *q, bool seen) { put_part<NE>(q, seen, M, L, O, a.head_dim); });
}

/* A chunk of queries: grid (kv heads, query tiles); a tile is qt queries x the G heads of kv head kvh, pairs
 * (query t0 + i / G, head kvh * G + i % G) for i < qt G, of which warp w runs w, w + nw, ..., Q at a time.  The
 * block stages each split its queries may see once and every pair folds it in registers. */
template <int Q, int NE>
__global__ void __launch_bounds__(512) attn_chunk_kernel(gp_cu_attn a, attn_plan pl, int32_t qt) {
    pdl_enter();
    extern __shared__ float smem[];
    __shared__ attn_desc_sm d;
    __shared__ uint8_t held[SPLIT];
    /* the tiles with the most keys first (blocks start in index order; the short ones fill the last wave) */
    const int32_t kvh = blockIdx.x, hd = a.head_dim, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int32_t pairs = qt * pl.G, t0 = (gridDim.y - 1 - blockIdx.y) * qt;
    float *ks = smem, *vs = ks + SPLIT * pl.ld, *qsm = vs + SPLIT * pl.ld; /* queries [pairs][hd] */
    float *pb = qsm + pairs * hd + warp * Q * SPLIT;                       /* this warp's probabilities [Q][SPLIT] */
    desc_to_smem(a, pl, NULL, &d);
    int32_t t[Q], h[Q], p[Q]; /* this warp's pairs: query, head, position (-1: none) */
    const float *qs[Q];
#pragma unroll
    for (int q = 0; q < Q; q++) {
        const int32_t i = warp + nw * q;
        t[q] = t0 + i / pl.G, h[q] = kvh * pl.G + i % pl.G;
        p[q] = i < pairs && t[q] < a.n ? a.pos0 + t[q] : -1;
        qs[q] = qsm + (i < pairs ? i : 0) * hd;
        for (int e = threadIdx.x & 31; e < hd && p[q] >= 0; e += 32)
            qsm[i * hd + e] = a.q[((size_t)t[q] * a.n_heads + h[q]) * hd + e];
    }
    const int32_t sa = pl.s0 + (int32_t)blockIdx.z * pl.per, se = min(sa + pl.per, pl.s0 + pl.nspan);
    const tile_splits sp(a, pl, t0, qt, sa, se); /* (this block's spans of them) */
    int32_t span = sa;                           /* the span being folded */
    float M[Q], L[Q], O[Q][NE], acc[Q][NE], m[Q], l[Q];
    int seen[Q];
#pragma unroll
    for (int q = 0; q < Q; q++) {
        M[q] = -INFINITY, L[q] = 0.0f;
#pragma unroll
        for (int k = 0; k < NE; k++) O[q][k] = 0.0f;
    }
    for (int32_t b = 0; span < se; span++) { /* span by span; then its state out */
        for (const int32_t be = sp.below((span + 1) * GP_CU_ATTN_SPAN); b < be; b++) {
            const int32_t s = sp.split(b);
            __syncthreads(); /* the previous split's readers are done (and the descriptor and queries are in place) */
            stage_split<2>(a, &d, s, kvh, pl.ld, ks, vs, held);
            __syncthreads();
            int32_t ps[Q]; /* the pairs that may see a key of this split */
            bool any = false;
#pragma unroll
            for (int q = 0; q < Q; q++) ps[q] = p[q] >= s * SPLIT ? p[q] : -1, any |= ps[q] >= 0;
            if (!any) continue;
            split_warp<Q, NE, 0>(a, pl, qs, ks, vs, held, s * SPLIT, ps, seen, m, l, acc, pb);
#pragma unroll
            for (int q = 0; q < Q; q++)
                if (seen[q]) fold<NE>(M[q], L[q], O[q], m[q], l[q], acc[q]);
        }
#pragma unroll
        for (int q = 0; q < Q; q++) span_out<NE>(a, pl, p[q], t[q], h[q], span, M[q], L[q], O[q]);
    }
}

/* A chunk's spans' states (the chunk kernels' partials, part [n][n_heads][nspan][hd + 2]) folded in order into out:
 * fold_parts_by's second level.  A warp a (query, head). */
template <int NE>
__global__ void __launch_bounds__(256) attn_span_fold_kernel(gp_cu_attn a, attn_plan pl) {
    pdl_enter();
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); /* query row / n_heads, head row % n_heads */
    if (row >= (int64_t)a.n * a.n_heads) return;
    const int32_t hd = a.head_dim;
    const float *p = a.part + (size_t)row * pl.nspan * (hd + 2);
    float M, L, O[NE];
    fold_empty<NE>(M, L, O);
    fold_run<NE>(0, pl.nspan, hd, M, L, O, [&](int32_t b, int32_t i) { return __ldcg(p + (size_t)b * (hd + 2) + i); });
    finish_out<NE>(a.out + (size_t)row * hd, hd, L, O, pl.bf);
}

/* The spans a plan's splits lie in: the first (the lowest split's: a pinned one's, else lo's) and their count, to
 * hi's. */
static int32_t span_lo(const attn_plan &m) { return (m.np > 0 ? 0 : m.lo) / GP_CU_ATTN_SPAN; }
static int32_t span_count(const attn_plan &m) { return m.hi / GP_CU_ATTN_SPAN - span_lo(m) + 1; }

/* The call's splits: the last query's split, down to the first query's window start (or the first held position),
 * plus the splits of pinned positions below that. */
static attn_plan plan_of(const gp_cu_attn *a, int bf) {
    int32_t first = INT32_MAX;
    for (int s = 0; s < a->n_seg; s++) first = a->seg[s].p0 < first ? a->seg[s].p0 : first;
    if (first == INT32_MAX) first = a->pos0;
    const int32_t lo = a->window > 0 && a->pos0 - a->window + 1 > first ? a->pos0 - a->window + 1 : first;
    attn_plan m;
    m.hi = (a->pos0 + a->n - 1) / SPLIT;
    m.lo = lo / SPLIT < m.hi ? lo / SPLIT : m.hi;
    const int32_t pin = a->window > 0 && a->pinned > 0 ? (a->pinned + SPLIT - 1) / SPLIT : 0;
    m.np = pin < m.lo ? pin : m.lo;
    m.first = first;
    m.ld = a->head_dim + 4;
    m.G = a->n_heads / a->n_kv;
    m.bf = bf;
    m.dbuf = 0, m.per = 0;
    /* a chunk's spans; decode leaves them 0 (the arguments of a recorded step repeat) */
    m.s0 = a->n > 1 ? span_lo(m) : 0;
    m.nspan = a->n > 1 ? span_count(m) : 0;
    return m;
}

extern "C" size_t gp_cu_attn_part_floats(const gp_cu_attn *a) {
    const attn_plan m = plan_of(a, 0);
    if (a->n > 1) /* a chunk: each span's state of every (query, head) when there are several, else none */
        return m.nspan > 1 ? (size_t)a->n * a->n_heads * (size_t)m.nspan * (size_t)(a->head_dim + 2) : 0;
    /* decode: each split's partial of every head (attn_fold_kernel folds them) */
    return (size_t)a->n_heads * (size_t)(m.np + m.hi - m.lo + 1) * (size_t)(a->head_dim + 2);
}

/* Largest dynamic shared memory the attention kernels take: staged split tiles of head_dim 256, CHUNK_Q query
 * elements (a chunk tile's pairs x head_dim, or a decode group's heads) and a chunk's probabilities (16 warps x Q
 * pairs x SPLIT, Q <= 4). */
#define CHUNK_Q 8192
#ifndef GP_CHUNK_WARPS
#define GP_CHUNK_WARPS 16
#endif
#define ATTN_SMEM_MAX ((2 * SPLIT * (32 * MAX_NE + 4) + CHUNK_Q + 16 * 4 * SPLIT) * sizeof(float))

typedef void (*attn_kernel)(gp_cu_attn, attn_plan, const attn_var *);

/* attn_cluster_kernel<NE, CL, MMA, PLAIN> by [MMA, or 2 = PLAIN, 3 = MMA and PLAIN][NE 2, 4, 8][CL 2, 4, 8 as
 * CL >> 2] (the tensor-core path: NE <= 4) */
static const attn_kernel cluster_kernels[4][3][3] = {
    {{attn_cluster_kernel<2, 2, false>, attn_cluster_kernel<2, 4, false>, attn_cluster_kernel<2, 8, false>},
     {attn_cluster_kernel<4, 2, false>, attn_cluster_kernel<4, 4, false>, attn_cluster_kernel<4, 8, false>},
     {attn_cluster_kernel<8, 2, false>, attn_cluster_kernel<8, 4, false>, attn_cluster_kernel<8, 8, false>}},
    {{attn_cluster_kernel<2, 2, true>, attn_cluster_kernel<2, 4, true>, attn_cluster_kernel<2, 8, true>},
     {attn_cluster_kernel<4, 2, true>, attn_cluster_kernel<4, 4, true>, attn_cluster_kernel<4, 8, true>},
     {NULL, NULL, NULL}},
    {{attn_cluster_kernel<2, 2, false, true>, attn_cluster_kernel<2, 4, false, true>,
      attn_cluster_kernel<2, 8, false, true>},
     {attn_cluster_kernel<4, 2, false, true>, attn_cluster_kernel<4, 4, false, true>,
      attn_cluster_kernel<4, 8, false, true>},
     {attn_cluster_kernel<8, 2, false, true>, attn_cluster_kernel<8, 4, false, true>,
      attn_cluster_kernel<8, 8, false, true>}},
    {{attn_cluster_kernel<2, 2, true, true>, attn_cluster_kernel<2, 4, true, true>,
      attn_cluster_kernel<2, 8, true, true>},
     {attn_cluster_kernel<4, 2, true, true>, attn_cluster_kernel<4, 4, true, true>,
      attn_cluster_kernel<4, 8, true, true>},
     {NULL, NULL, NULL}}};

/* attn_split_kernel by [G <= 8 (STAGE_BATCH 8), G > 8 (1), MMA, PLAIN with G <= 8, MMA and PLAIN][NE 2, 4, 8] */
static const attn_kernel split_kernels[5][3] = {
    {attn_split_kernel<8, 2, false>, attn_split_kernel<8, 4, false>, attn_split_kernel<8, 8, false>},
    {attn_split_kernel<1, 2, false>, attn_split_kernel<1, 4, false>, attn_split_kernel<1, 8, false>},
    {attn_split_kernel<8, 2, true>, attn_split_kernel<8, 4, true>, NULL},
    {attn_split_kernel<8, 2, false, true>, attn_split_kernel<8, 4, false, true>, attn_split_kernel<8, 8, false, true>},
    {attn_split_kernel<8, 2, true, true>, attn_split_kernel<8, 4, true, true>, NULL}};

/* split_decode16's kernels by [NE 2, 4] (and [CL 2, 4, 8 as CL >> 2]) */
static const attn_kernel split16_kernels[2] = {attn_split16_kernel<2>, attn_split16_kernel<4>};
static const attn_kernel cluster16_kernels[2][3] = {
    {attn_cluster16_kernel<2, 2>, attn_cluster16_kernel<2, 4>, attn_cluster16_kernel<2, 8>},
    {attn_cluster16_kernel<4, 2>, attn_cluster16_kernel<4, 4>, attn_cluster16_kernel<4, 8>}};

/* The tensor-core chunk kernels, [from attn_pre's copy][K 1, 2, 4 as K >> 1][head_dim over 64] (attn_chunk) */
typedef void (*mma_chunk_kernel)(gp_cu_attn, attn_plan, int32_t, attn_pre);
static const mma_chunk_kernel mma_chunk_kernels[2][3][2] = {
    {{attn_mma_chunk_kernel<2, 1, false>, attn_mma_chunk_kernel<4, 1, false>},
     {attn_mma_chunk_kernel<2, 2, false>, attn_mma_chunk_kernel<4, 2, false>},
     {attn_mma_chunk_kernel<2, 4, false>, attn_mma_chunk_kernel<4, 4, false>}},
    {{attn_mma_chunk_kernel<2, 1, true>, attn_mma_chunk_kernel<4, 1, true>},
     {attn_mma_chunk_kernel<2, 2, true>, attn_mma_chunk_kernel<4, 2, true>},
     {attn_mma_chunk_kernel<2, 4, true>, attn_mma_chunk_kernel<4, 4, true>}}};
/* K = 1 for head_dim 64 and 128 exactly (their checks of the head's width folded away), [float32 rows, attn_pre's
 * copy, bfloat16 rows][head_dim 128] */
static const mma_chunk_kernel mma_chunk_exact[3][2] = {
    {attn_mma_chunk_kernel<2, 1, false, false, true>, attn_mma_chunk_kernel<4, 1, false, false, true>},
    {attn_mma_chunk_kernel<2, 1, true, false, true>, attn_mma_chunk_kernel<4, 1, true, false, true>},
    {attn_mma_chunk_kernel<2, 1, false, true, true>, attn_mma_chunk_kernel<4, 1, false, true, true>}};
/* ... without attn_pre's copy over bfloat16 rows, [K 1, 2, 4 as K >> 1][head_dim over 64] */
static const mma_chunk_kernel mma_chunk16_kernels[3][2] = {
    {attn_mma_chunk_kernel<2, 1, false, true>, attn_mma_chunk_kernel<4, 1, false, true>},
    {attn_mma_chunk_kernel<2, 2, false, true>, attn_mma_chunk_kernel<4, 2, false, true>},
    {attn_mma_chunk_kernel<2, 4, false, true>, attn_mma_chunk_kernel<4, 4, false, true>}};

extern "C" int gp_cu_attn_prepare(void) {
    const void *ks[] = {(const void *)attn_chunk_kernel<4, 2>, (const void *)attn_chunk_kernel<4, 4>,
                        (const void *)attn_chunk_kernel<2, 8>, (const void *)attn_kv_bf16_kernel};
    const int nm = (int)(sizeof mma_chunk_kernels / sizeof(mma_chunk_kernel));
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < nm && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute((const void *)(&mma_chunk_kernels[0][0][0])[i],
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATTN_SMEM_MAX);
    for (int i = 0; i < (int)(sizeof mma_chunk16_kernels / sizeof(mma_chunk_kernel)) && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute((const void *)(&mma_chunk16_kernels[0][0])[i],
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATTN_SMEM_MAX);
    for (int i = 0; i < (int)(sizeof mma_chunk_exact / sizeof(mma_chunk_kernel)) && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute((const void *)(&mma_chunk_exact[0][0])[i],
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATTN_SMEM_MAX);
    /* the other chunk kernels, then the decode tables' cluster and split kernels (NULL where none is built) */
    const int nk = (int)(sizeof ks / sizeof ks[0]), nc = (int)(sizeof cluster_kernels / sizeof(attn_kernel));
    const int n = nk + nc + (int)(sizeof split_kernels / sizeof(attn_kernel));
    for (int i = 0; i < n && e == cudaSuccess; i++) {
        const int j = i - nk, m = j - nc; /* (3 x 3 tables: [.][j / 3 % 3][j % 3]) */
        const void *k = j < 0    ? ks[i]
                        : m < 0  ? (const void *)cluster_kernels[j / 9][j / 3 % 3][j % 3]
                                 : (const void *)split_kernels[m / 3][m % 3];
        if (k) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATTN_SMEM_MAX);
    }
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute((const void *)attn_fold_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)ATTN_SMEM_MAX);
    for (int i = 0; i < 8 && e == cudaSuccess; i++) { /* split_decode16's: 2 split kernels, then 2 x 3 clusters' */
        const void *k = i < 2 ? (const void *)split16_kernels[i]
                              : (const void *)cluster16_kernels[(i - 2) / 3][(i - 2) % 3];
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ATTN_SMEM_MAX);
    }
    return (int)e;
}

/* Whether every held row is a bfloat16 row of the cache (split_decode16 copies them as they are; a float32 segment,
 * such as a chunk's staged rows, takes stage_split's widening path instead). */
static int rows16(const gp_cu_attn *a) {
    for (int32_t i = 0; i < a->n_seg; i++)
        if (!a->seg[i].quant || a->k[a->seg[i].src].bits != 16) return 0;
    return a->n_seg > 0;
}

/* Whether a call runs on tensor cores (decode_mma, attn_mma_chunk_kernel): the bf16 mode's flash path over
 * float32 or bfloat16 cache rows, head_dim a multiple of 8 up to 128, at most 16 heads a kv head.  It depends on the
 * model and the cache alone. */
static int attn_mma(const gp_cu_attn *a, const attn_plan *pl) {
    return pl->bf && a->softcap <= 0 && (a->k[0].bits == 0 || a->k[0].bits == 16) && a->head_dim % 8 == 0 &&
           a->head_dim <= 128 &&
           pl->G <= 16;
}

/* A recorded step: the decode call's per-step values of c and pl moved to d's per-step block (zeros left in c, pl);
 * NULL (c, pl as they are) when d is not recording. */
static const attn_var *step_var(gp_cu *d, gp_cu_attn *c, attn_plan *pl) {
    if (!gp_cu_recording(d)) return NULL;
    attn_var v;
    memset(&v, 0, sizeof v);
    v.pos0 = c->pos0, v.r0 = c->r0, v.n_seg = c->n_seg, v.np = pl->np, v.lo = pl->lo;
    memcpy(v.seg, c->seg, sizeof v.seg);
    const attn_var *var = (const attn_var *)gp_cu_var(d, &v, sizeof v);
    if (!var) return NULL;
    c->pos0 = c->r0 = c->n_seg = 0;
    memset(c->seg, 0, sizeof c->seg);
    pl->np = pl->lo = pl->hi = pl->first = 0;
    return var;
}

/* Decode: the splits in parallel (at least 8 warps stage a split; a group's heads compute it, or warp 0 on tensor
 * cores), then the fold.  Past ATTN_BLOCKS_PER_SM blocks a multiprocessor's worth, a block stages and computes
 * several splits in turn (GP_CU_ATTN_LOOP=0: a block a split): measured on the H100, BENCHMARKS.md. */
static int attn_decode(gp_cu *d, const gp_cu_attn *a, const attn_plan &pl, size_t tiles) {
    const int32_t ns = pl.np + pl.hi - pl.lo + 1, hd = a->head_dim;
    const size_t sh = tiles + (size_t)(pl.G + (a->rk ? 1 : 0)) * hd * sizeof(float);
    if (sh > ATTN_SMEM_MAX) return (int)cudaErrorInvalidValue;
    const size_t fsh = (size_t)span_count(pl) * FOLD_ROW * sizeof(float); /* attn_fold_kernel's spans' states */
    if (a->n_kv > GP_CU_ATTN_MAX_KV || fsh > ATTN_SMEM_MAX) return (int)cudaErrorInvalidValue;
    const int mma = attn_mma(a, &pl), ne = hd <= 64 ? 0 : hd <= 128 ? 1 : 2;
    static const int plain_on = env_int("GP_CU_ATTN_PLAIN", 1);
    const int plain = plain_on && (mma || (!pl.bf && a->softcap <= 0)) && hd == 64 << ne; /* plain_case */
    const int b16 = mma && plain && rows16(a); /* bfloat16 rows staged as they are: split_decode16 */
    const size_t sh16 = tile16(hd) + (size_t)(pl.G + (a->rk ? 1 : 0)) * hd * sizeof(float);
    /* past ATTN_BLOCKS_PER_SM blocks a multiprocessor (split_decode16: SPLIT16_BLOCKS_PER_SM), the kv heads' blocks
     * take several splits each */
    static const int loop_env = env_int("GP_CU_ATTN_LOOP", -1); /* (0: a block a split) */
    const int loop = loop_env >= 0 ? loop_env : b16 ? SPLIT16_BLOCKS_PER_SM(2 << ne) : ATTN_BLOCKS_PER_SM;
    /* tests: a kv head's blocks when it loops, and no clusters (2 to 8 splits take the looping path too) */
    static const int forced = env_int("GP_CU_ATTN_LOOP_BLOCKS", 0);
    static const int64_t sms = gp_cu_sm_count();
    const int64_t cap = forced > 0 ? forced : sms * loop / a->n_kv > 1 ? sms * loop / a->n_kv : 1;
    const int takes = b16 || ATTN_LOOP(pl.G > 8 && !mma ? 1 : 8, 2 << ne, mma, plain); /* (the kernel below) */
    /* blocks a kv head: where they may take several splits, the splits rounded up to a power of two (the blocks past
     * them return), at most cap: a grid that changes at 16 and 32 splits, not every 64 positions, keeps the decode
     * step's graphs (rec_flush); recorded again at each change, about 1 ms on an H200 (BENCHMARKS.md) */
    int64_t nb = ns;
    if (loop && takes) {
        for (nb = 1; nb < ns;) nb *= 2;
        if (nb > cap) nb = cap;
    }
    const dim3 grid((unsigned)nb, (unsigned)a->n_kv), blk(32 * (pl.G < 8 || mma ? 8 : pl.G));
    gp_cu_attn c = *a;
    attn_plan pc = pl;
    const attn_var *var = step_var(d, &c, &pc);
    if (pl.G <= 8 && ns >= 2 && ns <= 8 && !forced) { /* one cluster of 2, 4 or 8 blocks per kv head */
        const int cl = ns <= 2 ? 2 : ns <= 4 ? 4 : 8;
        if (b16)
            launch(cluster16_kernels[ne][cl >> 2], dim3((unsigned)cl, (unsigned)a->n_kv), blk, sh16, d, c, pc, var);
        else launch(cluster_kernels[plain ? 2 + mma : mma][ne][cl >> 2], dim3((unsigned)cl, (unsigned)a->n_kv), blk,
                    sh, d, c, pc, var);
    } else {
        /* blocks that take several splits stage the next one while they compute (split_decode's pre: float32 rows;
         * split_decode16) where a second buffer keeps loop blocks a multiprocessor (228 KB, 9 KB a block for its
         * static arrays and the runtime) */
        static const int dbuf_on = env_int("GP_CU_ATTN_DBUF", 1); /* (0: each split staged in turn) */
        const size_t s1 = b16 ? sh16 : sh, buf = b16 ? tile16(hd) : tiles;
        pc.dbuf = dbuf_on && nb < ns && (loop > 2 ? loop : 2) * (s1 + buf + 9216) <= 233472 &&
                  (b16 || a->k[0].bits != 16);
        const attn_kernel k = b16 ? split16_kernels[ne]
                                  : split_kernels[mma ? 2 + 2 * plain : pl.G > 8 ? 1 : plain ? 3 : 0][ne];
        launch(k, grid, blk, pc.dbuf ? s1 + buf : s1, d, c, pc, var);
        if (ns > 1) /* (one split: folded in the split kernel's registers) */
            launch(attn_fold_kernel, dim3((unsigned)a->n_heads, (unsigned)(hd + 31) / 32), dim3(32 * FOLD_WARPS), fsh,
                   d, c, pc, var);
    }
    return (int)cudaGetLastError();
}

/* Bytes of attn_pre's keys (and of its values): n_kv heads x np positions x hd bf16 values, rounded up to 256. */
static size_t copy_half(int64_t n_kv, int64_t np, int64_t hd) {
    return ((size_t)(n_kv * np * hd) * 2 + 255) / 256 * 256;
}

extern "C" size_t gp_cu_attn_copy_bytes(int64_t n_kv, int64_t positions, int64_t head_dim) {
    return 2 * copy_half(n_kv, positions, head_dim) + (size_t)positions;
}

/* The bf16 copy a chunk's tensor-core attention stages from (attn_pre, in d's GEMM scratch, free between the
 * GEMMs): the positions of every split a tile of the chunk reads (tile_splits of the whole chunk as one tile: the
 * first tile's lowest split, or 0 with pinned splits, to the last query's); k NULL (the kernel then converts each
 * split itself) where the scratch is too small, or GP_CU_ATTN_PRE=0 is in the environment (tests, measurements). */
static attn_pre pre_copy(gp_cu *d, const gp_cu_attn *a, const attn_plan &pl) {
    static const bool off = env_int("GP_CU_ATTN_PRE", 1) == 0;
    attn_pre c = {};
    const tile_splits sp(*a, pl, 0, a->n);
    const int64_t p0 = sp.npin ? 0 : (int64_t)sp.lo * SPLIT, np = ((int64_t)sp.hi + 1) * SPLIT - p0;
    const size_t kb = copy_half(a->n_kv, np, a->head_dim);
    size_t cap = 0;
    uint8_t *base = (uint8_t *)gp_cu_scratch(d, &cap);
    if (off || !base || 2 * kb + (size_t)np > cap || p0 < 0 || np > INT32_MAX) return c;
    c.k = (uint16_t *)base, c.v = (uint32_t *)(base + kb), c.h = base + 2 * kb, c.p0 = (int32_t)p0;
    c.np = (int32_t)np;
    return c;
}

/* After a chunk kernel: its spans' states folded into the output when it has several (each block computed one
 * span of a tile: pl.nspan times the blocks a chunk had before, BENCHMARKS.md). */
static int span_fold(gp_cu *d, const gp_cu_attn *a, const attn_plan &pl) {
    if (pl.nspan <= 1) return (int)cudaGetLastError();
    const int64_t rows = (int64_t)a->n * a->n_heads, hd = a->head_dim;
    const dim3 grid((unsigned)((rows + 7) / 8)), blk(256);
    if (hd <= 64) launch(attn_span_fold_kernel<2>, grid, blk, 0, d, *a, pl);
    else if (hd <= 128) launch(attn_span_fold_kernel<4>, grid, blk, 0, d, *a, pl);
    else launch(attn_span_fold_kernel<8>, grid, blk, 0, d, *a, pl);
    return (int)cudaGetLastError();
}

/* A chunk of queries: blocks of query tiles x one kv head's group x the chunk's spans. */
static int attn_chunk(gp_cu *d, const gp_cu_attn *a, const attn_plan &pl0, size_t tiles) {
    if (pl0.G > 16) return (int)cudaErrorNotSupported; /* (no supported family has more than 8) */
    if (pl0.nspan > 1 && !a->part) return (int)cudaErrorInvalidValue; /* nowhere for the spans' states */
    /* a block a span of its tile (GP_CU_ATTN_PER=k: k spans a block in turn) */
    static const int per = env_int("GP_CU_ATTN_PER", 1);
    attn_plan pl = pl0;
    pl.per = per >= 1 && per < pl.nspan ? per : pl.nspan;
    const unsigned nz = (unsigned)((pl.nspan + pl.per - 1) / pl.per);
    const int32_t hd = a->head_dim;
    if (attn_mma(a, &pl)) {
        /* a warp a row tile of 16 rows (K = 1, split_mma_warp), 8 warps a block when their blocks fill 0.8 of the
         * multiprocessors or more, but for heads over 64 in several spans (over 200 registers a thread: 8 warps a
         * multiprocessor either way, and blocks of 4 fill it more evenly: Qwen3-0.6B's pp512 at 8,192 held tokens
         * +5% on the H200), else 4 (GP_CU_ATTN_WIDE=1|0 forces it); GP_CU_ATTN_K=2|4 runs the row tiles of K
         * warps instead (split_mma_tile, 16 warps or 8): the same bits.  (Measured on the H200, BENCHMARKS.md: a
         * 512-token chunk at 8,192 held tokens, Llama-3.2-1B's prefill +16% over K = 2 and Qwen3-0.6B's +4% over K =
         * 4; level at 0.  The H100's measurements of K = 2 and 4: 16 warps took 44.7 µs against 47.2 and 59.1 against
         * 69.7 at 128 blocks for 132 multiprocessors.) */
        static const int64_t sms = gp_cu_sm_count();
        static const int force = env_int("GP_CU_ATTN_K", 0);
        static const int wide = env_int("GP_CU_ATTN_WIDE", -1);
        const int K = force == 1 || force == 2 || force == 4 ? force : 1;
        const int32_t wmax = K == 1 ? MMA1_WARPS : MMA_WARPS / K, q16 = 16 * wmax / pl.G;
        const int64_t blocks = (int64_t)a->n_kv * ((a->n + q16 - 1) / q16) * nz;
        const bool fill = wide == 0 || wide == 1 ? wide == 1 : blocks * 5 >= 4 * sms && (nz == 1 || hd <= 64);
        const int32_t w = fill ? wmax : wmax / 2;
        const int32_t qt = 16 * w / pl.G;
        const dim3 grid((unsigned)a->n_kv, (unsigned)((a->n + qt - 1) / qt), nz), blk(32 * K * w);
        const attn_pre c = pre_copy(d, a, pl);
        if (c.k) launch(attn_kv_bf16_kernel, dim3((unsigned)(c.np / KV_COPY_ROWS), (unsigned)a->n_kv), dim3(256), 0,
                        d, *a, pl, c);
        const bool exact = K == 1 && (hd == 64 || hd == 128);
        const mma_chunk_kernel kern = exact ? mma_chunk_exact[c.k ? 1 : a->k[0].bits == 16 ? 2 : 0][hd > 64]
                                      : c.k ? mma_chunk_kernels[1][K >> 1][hd > 64]
                                      : a->k[0].bits == 16 ? mma_chunk16_kernels[K >> 1][hd > 64]
                                                           : mma_chunk_kernels[0][K >> 1][hd > 64];
        launch(kern, grid, blk, mma_chunk_smem(hd, w, K, c.k != NULL), d, *a, pl, qt, c);
        return span_fold(d, a, pl);
    }
    /* up to 16 warps of Q (query, head) pairs each (Q = 4, or 2 for heads over 128: CHUNK_Q query elements) */
    const int32_t Q = hd <= 128 ? 4 : 2, qt = GP_CHUNK_WARPS * Q / pl.G, pairs = qt * pl.G;
    const int32_t warps = (pairs + Q - 1) / Q;
    const size_t sh = tiles + ((size_t)pairs * hd + (size_t)warps * Q * SPLIT) * sizeof(float);
    if (sh > ATTN_SMEM_MAX) return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)a->n_kv, (unsigned)((a->n + qt - 1) / qt), nz), blk(32 * warps);
    if (hd <= 64) launch(attn_chunk_kernel<4, 2>, grid, blk, sh, d, *a, pl, qt);
    else if (hd <= 128) launch(attn_chunk_kernel<4, 4>, grid, blk, sh, d, *a, pl, qt);
    else launch(attn_chunk_kernel<2, 8>, grid, blk, sh, d, *a, pl, qt);
    return span_fold(d, a, pl);
}

extern "C" int gp_cu_attention(gp_cu *d, const gp_cu_attn *a) {
    if (a->n <= 0) return 0;
    if (a->rk && (a->n != 1 || !a->kf || !a->vf || !a->rv || !a->inv_freq || a->head_dim % 2))
        return (int)cudaErrorInvalidValue;
    if (a->n_seg > GP_CU_KV_MAX_SEGS || a->n_kv <= 0 || a->n_heads % a->n_kv || a->head_dim % 4 ||
        a->head_dim > 32 * MAX_NE)
        return (int)cudaErrorInvalidValue;
    const attn_plan pl = plan_of(a, gp_cu_bf16(d));
    const size_t tiles = (size_t)2 * SPLIT * pl.ld * sizeof(float);
    return a->n == 1 ? attn_decode(d, a, pl, tiles) : attn_chunk(d, a, pl, tiles);
}
