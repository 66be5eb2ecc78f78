/* cuda_rt.cu — the device handle of the CUDA backend (cuda_ops.h): device discovery with a reason when there is
 * none, one non-blocking stream per handle, plain cudaMalloc allocations, copies, the one kernel launch
 * (gp_cu_launch), and the decode-step recorder that replays repeated steps as CUDA graphs. */
#include "kernels/cuda/cuda_launch.cuh"
#include "kernels/cuda/cuda_ops.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A recorded launch: the kernel, its shape, and its parameters' values at bytes [off, off + len) of the recording's
 * argument arena, parameter i at off + po[i]. */
#define REC_MAX_PARAMS 16
typedef struct cu_rec {
    const void *func;
    unsigned g[3], b[3];
    size_t smem;
    uint32_t off, len, np;
    uint16_t po[REC_MAX_PARAMS];
} cu_rec;

/* A recording: launches and their argument bytes (grown as needed). */
typedef struct cu_recording {
    cu_rec *r;
    int n, cap;
    unsigned char *arena;
    size_t used, arena_cap;
} cu_recording;

/* A step the recorder keeps: its recording and, once a step repeated it, its graphs (exec[0] the head of `split`
 * launches, exec[1] the rest). */
typedef struct cu_kept {
    cu_recording rec;
    cudaGraphExec_t exec[2];
    int split;
} cu_kept;
#define KEPT_STEPS 8 /* steps a handle keeps with their graphs, most recent first */

#define VAR_SLOTS 64 /* distinct per-step values a step keeps apart (more are stored as they come) */
#define OCC_SLOTS 16 /* kernel shapes whose occupancy a handle remembers (gp_cu_occupancy) */
struct gp_cu {
    int dev;
    cudaStream_t s;
    int bf16; /* gp_cu_set_bf16 */
    void *scratch; /* gp_cu_reserve: the tensor-core GEMM's bf16 copy of its input */
    size_t scratch_cap;
    /* decode steps as CUDA graphs (gp_cu_record): the step being recorded, the last steps flushed and their graphs */
    int graphs;            /* GP_CU_GRAPHS_* (OFF as well once a graph failed to build) */
    int step, rec, ran;    /* a decode step is running; it records; how it ran (STEP_*) */
    int misses, pause;     /* consecutive steps unlike any kept; steps left unrecorded after repeated misses */
    int phase, n_phase;    /* GRAPHS_AUTO: PHASE_*, and its steps so far */
    double t0, t_sum[2];   /* GRAPHS_AUTO: when the step began (us); the timed launched and replayed steps' time */
    int n_t[2];            /* GRAPHS_AUTO: how many of each were timed */
    cu_recording cur;
    cu_kept kept[KEPT_STEPS]; /* the last distinct steps flushed, most recent first (n_kept of them) */
    int n_kept;
    int ran_n;             /* launches of the step being recorded that already run (0 or a kept step's split) */
    cudaError_t early;     /* the error of the head's launch, reported by the sync */
    unsigned char *var_h, *var_d; /* gp_cu_var: a step's per-call values, pinned and device copies */
    size_t var_used, var_cap, var_sent; /* bytes written; of those, bytes already uploaded */
    uint32_t var_off[VAR_SLOTS], var_len[VAR_SLOTS]; /* this step's distinct values (gp_cu_var returns a repeat's) */
    int n_var;
    uint64_t stats[3];     /* steps replayed, graphs built, steps launched one by one */
    uint64_t work;         /* kernels and copies enqueued or recorded so far */
    struct { const float *x; int64_t cols; int32_t n; size_t off; uint64_t at; gp_cu_norm nm; int has_nm; } hand;
    struct { const void *k; int threads; size_t smem; int per; } occ[OCC_SLOTS]; /* gp_cu_occupancy's answers */
    int n_occ;
    unsigned *ctr; /* gp_cu_counters */
};

/* ---- decode steps as CUDA graphs ----
 * While a step records (gp_cu_record .. gp_cu_sync), launch() appends each kernel launch with its argument values
 * instead of launching it.  The sync flushes the step: when it equals one of the last KEPT_STEPS distinct steps
 * flushed, launch for launch and byte for byte (every per-step value, such as positions, went through gp_cu_var
 * into device memory, so the arguments repeat), the step runs as the CUDA graphs built from that one (captured the
 * first time it repeats, then replayed as they are); otherwise its launches run one by one and it is kept, in place
 * of the least recently matched.  (Kept, not only the last: a context's decode attention changes shape as its
 * splits grow, so each generation from an empty cache passes the same few shapes, which one kept step made it
 * launch one by one and capture again: about 1 ms a shape on an H200, BENCHMARKS.md.)  The graphs are two: the
 * step's head (its first eighth of launches), which a step launches as soon as it has recorded a head like a kept
 * one's, so that the GPU runs it while the host records the rest, and the rest.  MISSES steps in a row unlike every
 * kept one pause recording for PAUSE_STEPS steps (a caller whose arguments change every step pays little:
 * recording delays a step's first kernel by the time the host takes to record it). */
#define MISSES 4
#define PAUSE_STEPS 32
/* a step: not recorded; replayed as a graph; recorded and launched, or replayed as the graph it just built */
enum { STEP_LAUNCHED, STEP_REPLAYED, STEP_RECORDED };
/* GP_CU_GRAPHS_AUTO times PROBE_STEPS steps launched kernel by kernel, then PROBE_STEPS replayed ones, and keeps the
 * faster way for PROBE_EVERY steps (the bits are the same either way) */
enum { PHASE_TIME_LAUNCHES, PHASE_TIME_GRAPHS, PHASE_GRAPHS, PHASE_LAUNCHES };
#define PROBE_STEPS 16
#define PROBE_EVERY 1024
#define VAR_BYTES (64u << 10)

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* The head of a step of n launches, which runs while the host records the rest: an eighth of them, none under 16
 * ($GP_CU_HEAD = k: k launches, 0 none; read when graphs are built: a switch for tests and measurements).  (Heads
 * ending before an attention launch were measured: the seam between the two graphs cost more there.) */
static int split_of(int n) {
    const char *h = getenv("GP_CU_HEAD");
    const int k = h ? atoi(h) : n >= 16 ? n / 8 : 0;
    return k > 0 && k < n ? k : 0;
}

/* Room for one more launch of at most `bytes` argument bytes; 0 or -1 when out of memory. */
static int rec_room(cu_recording *c, size_t bytes) {
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 256;
        cu_rec *r = (cu_rec *)realloc(c->r, (size_t)cap * sizeof *r);
        if (!r) return -1;
        c->r = r, c->cap = cap;
    }
    if (align_up(c->used, 16) + bytes > c->arena_cap) {
        const size_t cap = 2 * (c->arena_cap + bytes) + 4096;
        unsigned char *a = (unsigned char *)realloc(c->arena, cap);
        if (!a) return -1;
        c->arena = a, c->arena_cap = cap;
    }
    return 0;
}

static void rec_free(cu_recording *c) {
    free(c->r);
    free(c->arena);
    memset(c, 0, sizeof *c);
}

#ifdef GP_CU_TRACE
/* The launch log of a diagnostic build (GP_CU_TRACE, cuda_launch.cuh): kernel and block count of each launch when
 * $GP_CU_TRACE_FILE is set, written there with the first and last pass of its blocks at exit (tools/cuda_timeline.py
 * reads it; graphs or launches one by one, GENPARITY_CUDA_GRAPH=1 or 0).  Never built into the library. */
static void (*trace_sets[16])(unsigned long long *);
static int n_trace_sets;
static unsigned long long *trace_buf;
static struct { const void *f; unsigned blocks; } *trace_log;
static size_t n_log;
extern "C" void gp_cu_trace_register(void (*set)(unsigned long long *)) {
    if (n_trace_sets < 16) trace_sets[n_trace_sets++] = set;
}
static void host_dump(const char *fn);
static void trace_dump(void) {
    const char *fn = getenv("GP_CU_TRACE_FILE");
    unsigned long long *h = (unsigned long long *)malloc((GP_TRACE_CAP + 1) * 8ull);
    if (!fn || !h || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, trace_buf, (GP_TRACE_CAP + 1) * 8ull, cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(h);
        return;
    }
    host_dump(fn);
    FILE *f = fopen(fn, "w");
    unsigned long long t = 0, nt = h[0] & 0xffffffffu;
    for (size_t i = 0; f && i < n_log && t + trace_log[i].blocks <= nt && t + trace_log[i].blocks <= GP_TRACE_CAP;
         i++) {
        unsigned long long lo = ~0ull, hi = 0;
        for (unsigned b = 0; b < trace_log[i].blocks; b++) {
            const unsigned long long v = h[1 + t + b];
            lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        const char *name = "?";
        cudaFuncGetName(&name, trace_log[i].f);
        fprintf(f, "%zu %u %llu %llu %s\n", i, trace_log[i].blocks, lo, hi, name);
        t += trace_log[i].blocks;
    }
    if (f) fclose(f);
    free(h);
}
static void trace_launch(const void *func, dim3 grid) {
    static int on = -1; /* tracing: $GP_CU_TRACE_FILE set and the buffers allocated (decided at the first launch) */
    if (on < 0) {
        on = getenv("GP_CU_TRACE_FILE") != NULL;
        trace_log = on ? (decltype(trace_log))calloc(GP_TRACE_CAP, sizeof *trace_log) : NULL;
        on = trace_log && cudaMalloc(&trace_buf, (GP_TRACE_CAP + 1) * 8ull) == cudaSuccess &&
             cudaMemset(trace_buf, 0, (GP_TRACE_CAP + 1) * 8ull) == cudaSuccess &&
             cudaDeviceSynchronize() == cudaSuccess;
        for (int i = 0; on && i < n_trace_sets; i++) trace_sets[i](trace_buf);
        if (on) atexit(trace_dump);
    }
    if (on && n_log < GP_TRACE_CAP) trace_log[n_log].f = func, trace_log[n_log++].blocks = grid.x * grid.y * grid.z;
}
static int trace_mute; /* while a graph is captured: its launches are logged each time it is replayed */
/* The host's side of each step (µs, CLOCK_MONOTONIC): HOST_REC gp_cu_record, HOST_HEAD the head's graph launched,
 * HOST_FLUSH the recording ended (gp_cu_sync), HOST_REST the rest launched, HOST_DONE the sync returned, HOST_UP the
 * head's per-step values uploaded (before its graph's launch); written to $GP_CU_TRACE_FILE.host at exit, a line a
 * step in that order. */
enum { HOST_REC, HOST_HEAD, HOST_FLUSH, HOST_REST, HOST_DONE, HOST_UP, HOST_N };
#define HOST_CAP 65536
static double (*host_t)[HOST_N];
static size_t n_host;
static void host_mark(int k) {
    if (!host_t) host_t = (double (*)[HOST_N])calloc(HOST_CAP, sizeof *host_t);
    if (host_t && n_host < HOST_CAP) host_t[n_host][k] = now_us();
    if (k == HOST_DONE && n_host < HOST_CAP) n_host++;
}
static void host_dump(const char *fn) {
    char path[4096];
    snprintf(path, sizeof path, "%s.host", fn);
    FILE *f = host_t ? fopen(path, "w") : NULL;
    for (size_t i = 0; f && i < n_host; i++)
        fprintf(f, "%.3f %.3f %.3f %.3f %.3f %.3f\n", host_t[i][0], host_t[i][1], host_t[i][2], host_t[i][3],
                host_t[i][4], host_t[i][5]);
    if (f) fclose(f);
}
#define HOST_MARK(k) host_mark(k)
/* Logs launches [i0, i1) of c (a graph of them was just launched). */
static void trace_range(const cu_recording *c, int i0, int i1) {
    for (int i = i0; i < i1; i++) trace_launch(c->r[i].func, dim3(c->r[i].g[0], c->r[i].g[1], c->r[i].g[2]));
}
#define TRACE_MUTE(on) (trace_mute = (on))
#else
#define trace_range(c, i0, i1) ((void)0)
#define TRACE_MUTE(on) ((void)0)
#define HOST_MARK(k) ((void)0)
#endif

cudaError_t gp_cu_launch(gp_cu *d, const void *func, dim3 grid, dim3 block, size_t shmem, void **args) {
    d->work++;
#ifdef GP_CU_TRACE
    if (!trace_mute) trace_launch(func, grid);
#endif
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = d->s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, func, args);
}

/* Launches recorded launch i of c on d's stream (captured when the stream captures). */
static cudaError_t rec_launch(gp_cu *d, const cu_recording *c, int i) {
    const cu_rec *r = &c->r[i];
    void *args[REC_MAX_PARAMS];
    for (uint32_t k = 0; k < r->np; k++) args[k] = c->arena + r->off + r->po[k];
    return gp_cu_launch(d, r->func, dim3(r->g[0], r->g[1], r->g[2]), dim3(r->b[0], r->b[1], r->b[2]), r->smem, args);
}

/* Launches recorded launches [i0, i1) of c. */
static cudaError_t rec_launch_range(gp_cu *d, const cu_recording *c, int i0, int i1) {
    cudaError_t e = cudaSuccess;
    for (int i = i0; i < i1 && e == cudaSuccess; i++) e = rec_launch(d, c, i);
    return e;
}

/* *x = the graph of launches [i0, i1) of c (captured from them), or NULL with the error. */
static cudaError_t rec_capture(gp_cu *d, const cu_recording *c, int i0, int i1, cudaGraphExec_t *x) {
    cudaGraph_t g = NULL;
    *x = NULL;
    cudaError_t e = cudaStreamBeginCapture(d->s, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        TRACE_MUTE(1);
        e = rec_launch_range(d, c, i0, i1);
        TRACE_MUTE(0);
        const cudaError_t e2 = cudaStreamEndCapture(d->s, &g);
        if (e == cudaSuccess) e = e2;
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) *x = NULL;
    return e;
}

/* k's graphs destroyed (one in flight is freed after it). */
static void kept_drop(cu_kept *k) {
    for (int i = 0; i < 2; i++)
        if (k->exec[i]) cudaGraphExecDestroy(k->exec[i]), k->exec[i] = NULL;
}

/* Every kept step's graphs destroyed (their recordings stay). */
static void rec_drop(gp_cu *d) {
    for (int i = 0; i < d->n_kept; i++) kept_drop(&d->kept[i]);
}

/* k->exec = the graphs of kept step k: its head of `split` launches (split_of), which the next steps like it launch
 * as soon as they have recorded it, and the rest; on failure graphs stay off for d. */
static void rec_build(gp_cu *d, cu_kept *k) {
    const int n = k->rec.n;
    k->split = split_of(n);
    cudaError_t e = k->split ? rec_capture(d, &k->rec, 0, k->split, &k->exec[0]) : cudaSuccess;
    if (e == cudaSuccess) e = rec_capture(d, &k->rec, k->split, n, &k->exec[1]);
    if (e != cudaSuccess) {
        rec_drop(d), d->graphs = GP_CU_GRAPHS_OFF;
        cudaGetLastError(); /* the step runs launch by launch instead */
    }
}

/* The argument bytes of c's first k launches. */
static size_t head_bytes(const cu_recording *c, int k) { return k ? c->r[k - 1].off + c->r[k - 1].len : 0; }

/* a's first k launches are b's, launch for launch and byte for byte. */
static int same_head(const cu_recording *a, const cu_recording *b, int k) {
    return a->n >= k && b->n >= k && !memcmp(a->r, b->r, (size_t)k * sizeof *a->r) &&
           !memcmp(a->arena, b->arena, head_bytes(a, k));
}

static int same_step(const cu_recording *a, const cu_recording *b) {
    return a->n == b->n && a->used == b->used && same_head(a, b, a->n);
}

/* Uploads the per-step values written since the last upload (before the launches that follow on the stream). */
static cudaError_t var_upload(gp_cu *d) {
    const size_t a = d->var_sent, b = d->var_used;
    d->var_sent = b;
    return b > a ? cudaMemcpyAsync(d->var_d + a, d->var_h + a, b - a, cudaMemcpyHostToDevice, d->s) : cudaSuccess;
}

static void var_reset(gp_cu *d) { d->var_used = 0, d->var_sent = 0, d->n_var = 0; }

/* While recording launch k->split of a step whose head repeats kept step k's (the most recent such): the head runs
 * now, from k's graph, while the host records the rest (its error waits for the sync). */
static void rec_head(gp_cu *d) {
    if (d->ran_n) return;
    for (int i = 0; i < d->n_kept; i++) {
        const cu_kept *k = &d->kept[i];
        if (!k->split || d->cur.n != k->split || !k->exec[0] || !same_head(&d->cur, &k->rec, k->split)) continue;
        cudaError_t e = var_upload(d);
        HOST_MARK(HOST_UP);
        if (e == cudaSuccess) e = cudaGraphLaunch(k->exec[0], d->s);
        HOST_MARK(HOST_HEAD);
        trace_range(&d->cur, 0, k->split);
        d->ran_n = k->split;
        if (d->early == cudaSuccess) d->early = e;
        return;
    }
}

/* Kept step i moved to the front (the most recently matched first). */
static void kept_front(gp_cu *d, int i) {
    const cu_kept k = d->kept[i];
    memmove(&d->kept[1], &d->kept[0], (size_t)i * sizeof k);
    d->kept[0] = k;
}

/* The step just recorded kept in front, in place of the least recently matched (its graphs destroyed; its
 * recording's buffers become the next step's). */
static void kept_push(gp_cu *d) {
    if (d->n_kept < KEPT_STEPS) d->n_kept++;
    cu_kept *k = &d->kept[d->n_kept - 1];
    kept_drop(k);
    const cu_recording t = k->rec;
    k->rec = d->cur, d->cur = t, k->split = 0;
    kept_front(d, d->n_kept - 1);
}

/* The kept step the recorded one equals, or -1. */
static int kept_find(const gp_cu *d) {
    for (int i = 0; i < d->n_kept; i++)
        if (same_step(&d->cur, &d->kept[i].rec)) return i;
    return -1;
}

/* Ends the recording and runs the step: its per-call values uploaded, then its graphs or its launches (after its
 * head when that already runs: rec_head). */
static cudaError_t rec_flush(gp_cu *d) {
    cudaError_t e = d->early;
    d->early = cudaSuccess;
    if (!d->rec) return e;
    HOST_MARK(HOST_FLUSH);
    d->rec = 0;
    if (e == cudaSuccess) e = var_upload(d);
    const int i0 = d->ran_n, hit = e == cudaSuccess && d->cur.n ? kept_find(d) : -1;
    if (hit >= 0) {
        d->misses = 0;
        kept_front(d, hit);
        cu_kept *k = &d->kept[0];
        /* a step that captures and instantiates its graphs is not timed (ran stays STEP_RECORDED): that cost, once
         * per graph, swamped the timed choice's mean of the replays */
        const int build = !k->exec[1];
        if (build) rec_build(d, k), d->stats[1] += k->exec[1] != NULL;
        /* (a head launched from another kept step is this one's when its length is this one's split) */
        if (k->exec[1] && (i0 == 0 || i0 == k->split)) {
            if (i0 == 0 && k->split) e = cudaGraphLaunch(k->exec[0], d->s), trace_range(&d->cur, 0, k->split);
            if (e == cudaSuccess) e = cudaGraphLaunch(k->exec[1], d->s), d->stats[0]++;
            HOST_MARK(HOST_REST);
            trace_range(&d->cur, k->split, d->cur.n);
            if (!build) d->ran = STEP_REPLAYED;
        } else e = rec_launch_range(d, &d->cur, i0, d->cur.n), d->stats[2]++;
    } else if (e == cudaSuccess && d->cur.n) {
        e = rec_launch_range(d, &d->cur, i0, d->cur.n), d->stats[2]++;
        if (d->n_kept && ++d->misses >= MISSES) d->pause = PAUSE_STEPS, d->misses = 0;
        kept_push(d);
    }
    d->cur.n = 0, d->cur.used = 0, d->ran_n = 0;
    var_reset(d);
    return e;
}

extern "C" int gp_cu_graphs(gp_cu *d, int mode) {
    d->graphs = GP_CU_GRAPHS_OFF;
    if (mode == GP_CU_GRAPHS_OFF) return 0;
    cudaError_t e = cudaSuccess;
    if (!d->var_h) e = cudaMallocHost((void **)&d->var_h, VAR_BYTES);
    if (e == cudaSuccess && !d->var_d) e = cudaMalloc((void **)&d->var_d, VAR_BYTES);
    if (e == cudaSuccess) d->graphs = mode, d->var_cap = VAR_BYTES;
    d->phase = PHASE_TIME_LAUNCHES, d->n_phase = 0, d->t_sum[0] = d->t_sum[1] = 0, d->n_t[0] = d->n_t[1] = 0;
    return (int)e;
}

extern "C" void gp_cu_record(gp_cu *d) {
    if (!d->graphs || d->step) return;
    d->step = 1, d->ran = STEP_LAUNCHED, d->t0 = now_us();
    HOST_MARK(HOST_REC);
    if (d->pause > 0) {
        d->pause--;
        return;
    }
    if (d->graphs == GP_CU_GRAPHS_AUTO && (d->phase == PHASE_TIME_LAUNCHES || d->phase == PHASE_LAUNCHES)) return;
    d->rec = 1, d->ran = STEP_RECORDED;
}

/* GRAPHS_AUTO after a step of dt us: the two timing phases (the steps that ran the timed way; a phase ends after
 * PROBE_STEPS of them or 4 PROBE_STEPS steps), the choice of the faster mean, and the next timing. */
static void auto_step(gp_cu *d, double dt) {
    if (d->phase >= PHASE_GRAPHS) {
        if (++d->n_phase == PROBE_EVERY) {
            d->phase = PHASE_TIME_LAUNCHES, d->n_phase = 0;
            d->t_sum[0] = d->t_sum[1] = 0, d->n_t[0] = d->n_t[1] = 0;
        }
        return;
    }
    const int k = d->phase; /* PHASE_TIME_LAUNCHES = 0 times launched steps, PHASE_TIME_GRAPHS = 1 replayed ones */
    if (d->ran == (k ? STEP_REPLAYED : STEP_LAUNCHED)) d->t_sum[k] += dt, d->n_t[k]++;
    if (++d->n_phase < 4 * PROBE_STEPS && d->n_t[k] < PROBE_STEPS) return;
    d->n_phase = 0;
    if (k == PHASE_TIME_LAUNCHES) d->phase = PHASE_TIME_GRAPHS;
    else d->phase = d->n_t[1] && d->n_t[0] && d->t_sum[1] / d->n_t[1] < d->t_sum[0] / d->n_t[0] ? PHASE_GRAPHS
                                                                                            : PHASE_LAUNCHES;
}

extern "C" int gp_cu_recording(gp_cu *d) { return d->rec; }

extern "C" void *gp_cu_var(gp_cu *d, const void *src, size_t bytes) {
    if (!d->rec) return NULL;
    for (int i = 0; i < d->n_var; i++) /* the same values again (every layer's positions): the same address */
        if (d->var_len[i] == bytes && !memcmp(d->var_h + d->var_off[i], src, bytes)) return d->var_d + d->var_off[i];
    const size_t off = align_up(d->var_used, 16);
    if (off + bytes > d->var_cap) return NULL;
    memcpy(d->var_h + off, src, bytes);
    d->var_used = off + bytes;
    if (d->n_var < VAR_SLOTS) d->var_off[d->n_var] = (uint32_t)off, d->var_len[d->n_var++] = (uint32_t)bytes;
    return d->var_d + off;
}

/* Stops recording: what was recorded and does not run yet runs now, launch by launch (it is not compared with the
 * last step). */
static void rec_abort(gp_cu *d) {
    if (!d->rec) return;
    d->rec = 0;
    var_upload(d);
    rec_launch_range(d, &d->cur, d->ran_n, d->cur.n);
    d->cur.n = 0, d->cur.used = 0, d->ran_n = 0;
    var_reset(d);
}

extern "C" int gp_cu_rec_begin(gp_cu *d, const void *func, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, size_t shmem, size_t arg_bytes, unsigned nparams) {
    cu_recording *c = &d->cur;
    d->work++;
    rec_head(d);
    if (nparams > REC_MAX_PARAMS || rec_room(c, arg_bytes)) {
        rec_abort(d); /* the caller launches this one directly, after the recorded ones */
        return -1;
    }
    const size_t off = align_up(c->used, 16);
    memset(c->arena + c->used, 0, off - c->used);
    cu_rec *r = &c->r[c->n++];
    memset(r, 0, sizeof *r);
    r->func = func;
    r->g[0] = gx, r->g[1] = gy, r->g[2] = gz, r->b[0] = bx, r->b[1] = by, r->b[2] = bz;
    r->smem = shmem;
    r->off = (uint32_t)off;
    c->used = off;
    return 0;
}

extern "C" void gp_cu_rec_arg(gp_cu *d, const void *v, size_t size, size_t align) {
    cu_recording *c = &d->cur;
    cu_rec *r = &c->r[c->n - 1];
    const size_t off = align_up(c->used, align);
    memset(c->arena + c->used, 0, off - c->used);
    memcpy(c->arena + off, v, size);
    r->po[r->np++] = (uint16_t)(off - r->off);
    c->used = off + size;
    r->len = (uint32_t)(c->used - r->off);
}

extern "C" void gp_cu_graph_stats(gp_cu *d, uint64_t out[3]) {
    for (int i = 0; i < 3; i++) out[i] = d->stats[i];
}
extern "C" int gp_cu_bf16(gp_cu *d) { return d->bf16; }
extern "C" void gp_cu_set_bf16(gp_cu *d, int on) { d->bf16 = on ? 1 : 0; }

extern "C" int gp_cu_reserve(gp_cu *d, size_t bytes) {
    if (bytes <= d->scratch_cap) return 0;
    cudaFree(d->scratch);
    d->scratch = NULL, d->scratch_cap = 0;
    cudaError_t e = cudaMalloc(&d->scratch, bytes);
    if (e == cudaSuccess) d->scratch_cap = bytes;
    else d->scratch = NULL;
    return (int)e;
}

extern "C" void *gp_cu_scratch(gp_cu *d, size_t *cap) {
    *cap = d->scratch_cap;
    return d->scratch;
}

extern "C" void gp_cu_hand_set(gp_cu *d, const float *x, int64_t cols, int32_t n, const gp_cu_norm *nm, size_t off) {
    d->hand.x = x, d->hand.cols = cols, d->hand.n = n, d->hand.off = off, d->hand.at = d->work;
    d->hand.has_nm = nm != NULL;
    if (nm) d->hand.nm = *nm;
}

/* nm and the hand-over's norm are the same norm (or both none) */
static int same_norm(const gp_cu *d, const gp_cu_norm *nm) {
    if (!nm || !d->hand.has_nm) return !nm && !d->hand.has_nm;
    const gp_cu_norm *h = &d->hand.nm;
    return h->w.data == nm->w.data && h->w.dtype == nm->w.dtype && h->eps == nm->eps && h->plus_one == nm->plus_one;
}

extern "C" int gp_cu_hand_take(gp_cu *d, const float *x, int64_t cols, int32_t n, const gp_cu_norm *nm,
                               size_t *off) {
    const int ok = d->hand.x && d->hand.x == x && d->hand.cols == cols && d->hand.n == n && same_norm(d, nm) &&
                   d->hand.at == d->work;
    d->hand.x = NULL;
    *off = ok ? d->hand.off : 0;
    return ok;
}

extern "C" const char *gp_cu_errstr(int e) { return cudaGetErrorString((cudaError_t)e); }

extern "C" int gp_cu_device_count(char *msg, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (msg) snprintf(msg, cap, "no usable CUDA device (%s: %s)", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error */
        return 0;
    }
    if (n <= 0 && msg) snprintf(msg, cap, "no CUDA device found");
    return n;
}

extern "C" int gp_cu_open(int32_t dev, gp_cu **out, char *msg, size_t cap) {
    *out = NULL;
    int n = gp_cu_device_count(msg, cap);
    if (n <= 0) return (int)cudaErrorNoDevice;
    if (dev < 0 || dev >= n) {
        if (msg) snprintf(msg, cap, "CUDA device %d does not exist (%d found)", dev, n);
        return (int)cudaErrorInvalidDevice;
    }
    gp_cu *d = (gp_cu *)calloc(1, sizeof *d);
    if (!d) return (int)cudaErrorMemoryAllocation;
    d->dev = dev;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc((void **)&d->ctr, 64);
    if (e == cudaSuccess) e = cudaMemsetAsync(d->ctr, 0, 64, d->s); /* (before every kernel of the stream) */
    if (e != cudaSuccess) {
        if (msg) snprintf(msg, cap, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        if (d->s) cudaStreamDestroy(d->s);
        cudaFree(d->ctr);
        free(d);
        return (int)e;
    }
    *out = d;
    return 0;
}

extern "C" void gp_cu_close(gp_cu *d) {
    if (!d) return;
    rec_abort(d);
    cudaStreamSynchronize(d->s);
    cudaStreamDestroy(d->s);
    rec_drop(d);
    rec_free(&d->cur);
    for (int i = 0; i < KEPT_STEPS; i++) rec_free(&d->kept[i].rec);
    cudaFreeHost(d->var_h);
    cudaFree(d->var_d);
    cudaFree(d->scratch);
    cudaFree(d->ctr);
    free(d);
}

extern "C" int gp_cu_mem(gp_cu *d, char *name, size_t cap, uint64_t *free_b, uint64_t *total_b) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d->dev);
    if (e != cudaSuccess) return (int)e;
    if (name) snprintf(name, cap, "%s", p.name);
    size_t f = 0, t = 0;
    e = cudaMemGetInfo(&f, &t);
    if (free_b) *free_b = f;
    if (total_b) *total_b = t;
    return (int)e;
}

extern "C" int gp_cu_alloc(gp_cu *d, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0) return 0;
    return (int)cudaMalloc(p, bytes);
}

extern "C" void gp_cu_release(gp_cu *d, void *p) {
    if (p) cudaFree(p);
}

extern "C" int gp_cu_h2d(gp_cu *d, void *dst, const void *src, size_t bytes) {
    rec_abort(d);
    d->work++;
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_d2d(gp_cu *d, void *dst, const void *src, size_t bytes) {
    rec_abort(d);
    d->work++;
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_h2d_async(gp_cu *d, void *dst, const void *src, size_t bytes) {
    rec_abort(d);
    d->work++;
    if (!bytes) return 0;
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->s);
}

extern "C" int gp_cu_d2h(gp_cu *d, void *dst, const void *src, size_t bytes) {
    rec_abort(d);
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_sm_count(void) {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int gp_cu_occupancy(gp_cu *d, const void *k, int threads, size_t smem) {
    for (int i = 0; i < d->n_occ; i++)
        if (d->occ[i].k == k && d->occ[i].threads == threads && d->occ[i].smem == smem) return d->occ[i].per;
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (d->n_occ < OCC_SLOTS) {
        d->occ[d->n_occ].k = k, d->occ[d->n_occ].threads = threads;
        d->occ[d->n_occ].smem = smem, d->occ[d->n_occ++].per = per;
    }
    return per;
}

extern "C" unsigned *gp_cu_counters(gp_cu *d) { return d->ctr; }

extern "C" int gp_cu_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    return bytes ? (int)cudaMallocHost(p, bytes) : 0;
}

extern "C" void gp_cu_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" int gp_cu_sync(gp_cu *d) {
    cudaError_t e = rec_flush(d);
    const cudaError_t es = cudaStreamSynchronize(d->s);
    if (d->step) HOST_MARK(HOST_DONE);
    if (e == cudaSuccess) e = es;
    if (d->step && d->graphs == GP_CU_GRAPHS_AUTO) auto_step(d, now_us() - d->t0);
    d->step = 0;
    if (e == cudaSuccess) e = cudaGetLastError();
    return (int)e;
}
