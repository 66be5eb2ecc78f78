/* cmd_bench.c — `genparity bench`: llama-bench's method on one or more model folders.  Per model: one warm-up; pp =
 * one prefill of p random ids into an empty cache; tg = n single-token decodes from an empty cache; each repeated r
 * times, reported as mean ± sd of tokens/s; tokenizer and sampling are not timed.  -d D (llama-bench's depth): each
 * repetition of either test (and its warm-up) first prefills D random ids, not timed, so it runs on a cache holding
 * D tokens.  The same run measures the machine's read bandwidth (threaded sum over a 1 GiB buffer, best of several
 * passes; with --device cuda the GPU's copy bandwidth, gp_device_copy_bandwidth) and reports for tg
 * bandwidth_utilization = weight bytes read per token × tokens/s ÷ bandwidth.  Prints a Markdown table (one row per
 * model) or JSON. */
#include "cli.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int32_t bench_compute = GP_COMPUTE_F32; /* --compute: the contexts' gp_compute */
static int32_t bench_kv_bits = 0;              /* --kv-bits: the contexts' cache rows (gp_ctx_params.kv_bits) */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void help(FILE *f) {
    fprintf(f, "usage: genparity bench --model DIR [--model DIR ...] [-p 512] [-n 128] [-d 0] [-r 5] [--threads T]\n"
               "                       [--device cpu|cuda] [--format md|json]\n"
               "\n"
               "  --model DIR     model folder (repeat for one table row per model)\n"
               "  -p N            prompt tokens of the prefill test (default 512; 0 skips it)\n"
               "  -n N            tokens of the decode test (default 128; 0 skips it)\n"
               "  -d D            depth: both tests run on a cache already holding D tokens (prefilled before each\n"
               "                  repetition, not timed; default 0)\n"
               "  -r N            repetitions (default 5)\n"
               "  --threads T     worker threads (default: all CPUs)\n"
               "  --format F      md (default) or json\n"
               "  --device D      cpu (default) or cuda (a `make cuda` build and a GPU)\n"
               "  --compute C     f32 (default) or bf16 (activations rounded as transformers' bf16 forward)\n"
               "  --kv-bits N     cache rows: 0 (default: float32, bfloat16 with --compute bf16 on cuda), 16\n"
               "                  (bfloat16), 32 (float32), 4 or 8 (quantized)\n"
               "  --bandwidth-mib N  buffer of the bandwidth measurement (default 1024; 0 skips it): the CPU's read\n"
               "                     bandwidth, or with --device cuda the GPU's copy bandwidth (bytes read + written)\n"
               "  --bandwidth-gbs N  take N GB/s as the memory bandwidth instead of measuring it\n");
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* Sum of a[0..n) (n a multiple of 64) with AVX2 loads, four accumulators and software prefetch. */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *a, size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 16) {
        _mm_prefetch((const char *)(a + i) + 2048, _MM_HINT_T0);
        _mm_prefetch((const char *)(a + i) + 2048 + 64, _MM_HINT_T0);
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(a + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(a + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(a + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(a + i + 12)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, s);
    return v[0] + v[1] + v[2] + v[3];
}
#endif

/* Sum of a[0..n) (n a multiple of 64): the fastest loop the CPU has. */
static uint64_t sum_u64(const uint64_t *a, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) return sum_avx2(a, n);
#endif
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += a[i];
    return s;
}

/* Read bandwidth in bytes/s: the best pass of a sum over a buffer of mib MiB (touched first), each thread summing
 * one contiguous part; 4 passes with `threads` threads and 2 with one thread (on a busy machine one thread can be
 * the faster). */
static double measure_bandwidth(int threads, int mib) {
    const size_t n = ((size_t)mib << 20) / sizeof(uint64_t) / 64 * 64;
    if (n == 0) return 0;
    uint64_t *a = aligned_alloc(64, n * sizeof(uint64_t));
    if (!a) return 0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < 6; pass++) {
        const int nt = pass < 4 ? threads : 1;
        double t0 = now();
        uint64_t s = 0;
#pragma omp parallel num_threads(nt) reduction(+ : s)
        {
            const size_t k = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
            const size_t per = (n / k) / 64 * 64, lo = id * per, hi = id + 1 == k ? n : lo + per;
            s += sum_u64(a + lo, hi - lo);
        }
        double dt = now() - t0;
        sink += s;
        if (dt > 0 && (double)(n * sizeof(uint64_t)) / dt > best) best = (double)(n * sizeof(uint64_t)) / dt;
    }
    (void)sink;
    free(a);
    return best;
}

/* Resets the peak resident set (VmHWM) so each model's peak is its own (Linux; ignored elsewhere). */
static void reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* Peak resident set in bytes (VmHWM), or 0. */
static long long peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    int64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            char num[32] = "";
            if (sscanf(line + 6, "%31s", num) != 1 || cli_to_i64(num, &kb)) kb = 0;
        }
    fclose(f);
    return kb * 1024;
}

typedef struct stat2 {
    double mean, sd;
} stat2;

static stat2 stats(const double *v, int n) {
    stat2 s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n > 0 ? n : 1;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

typedef struct row {
    const char *dir;
    char arch[96];
    double params_b, weight_gib, decode_gb, load_s;
    stat2 pp, tg;
    double bw_util;
    long long peak;
    int ok;
} row;

static int parse_pos(const char *flag, const char *v, int lo, int *out) {
    int32_t x;
    if (cli_i32(flag, v, lo, 1 << 20, &x)) return -1;
    *out = x;
    return 0;
}

/* One run on a fresh cache: the depth's d ids prefilled (not timed), then a prefill of p ids and k single-token
 * decodes, timed; their seconds, or -1 when an eval fails. */
static double bench_run(gp_ctx *c, const int32_t *ids, int d, int p, int k, float *logits) {
    gp_ctx_reset(c);
    if (d > 0 && gp_ctx_eval(c, ids, d, NULL, logits) != GP_OK) return -1;
    const double a = now();
    if (p > 0 && gp_ctx_eval(c, ids + d, p, NULL, logits) != GP_OK) return -1;
    for (int i = 0; i < k; i++)
        if (gp_ctx_eval(c, ids + d + i, 1, NULL, logits) != GP_OK) return -1;
    return now() - a;
}

/* Runs one model; fills *r.  Returns 0, or 1 after printing the library's message. */
static int bench_model(const char *dir, int p, int n, int d, int reps, int threads, int device, double bw, row *r) {
    memset(r, 0, sizeof *r);
    r->dir = dir;
    reset_peak_rss();
    double t0 = now();
    gp_model *m = NULL;
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0; /* the tokenizer is not part of the benchmark */
    if (gp_model_load(dir, &mp, &m) != GP_OK) return cli_fail(dir);
    r->load_s = now() - t0;
    snprintf(r->arch, sizeof r->arch, "%s", gp_model_arch(m));
    r->weight_gib = (double)gp_model_weight_bytes(m) / (1024.0 * 1024.0 * 1024.0);
    r->decode_gb = (double)gp_model_decode_bytes(m) / 1e9;
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = threads;
    cp.device = device;
    cp.compute = bench_compute;
    cp.kv_bits = bench_kv_bits;
    const int len = d + (p > n ? p : n); /* ids: the depth's, then the test's */
    cp.n_ctx = len + 1;
    if (p > 0) cp.prefill_chunk = p;
    gp_ctx *c = NULL;
    if (gp_ctx_init(m, &cp, &c) != GP_OK) {
        gp_model_free(m);
        return cli_fail("creating the context");
    }
    const int32_t V = gp_model_n_vocab(m);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)len + 4);
    float *logits = gp_ctx_logits_buffer(c); /* the context's (pinned on a GPU), as llama-bench reads llama's own */
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    int rc = 0;
    if (!ids || !logits || !pp || !tg) {
        fprintf(stderr, "genparity bench: out of memory\n");
        rc = 1;
        goto done;
    }
    uint64_t s = 42;
    for (int i = 0; i < len; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
    /* warm-up: one prefill and a few decode steps, each after the depth's (faults the mapped weights in, and grows
     * the buffers a cache of that depth needs: without it the first repetition at a depth paid for them) */
    if (p > 0 && bench_run(c, ids, d, p, 0, logits) < 0) goto fail;
    if (n > 0 && bench_run(c, ids, d, 0, n < 4 ? n : 4, logits) < 0) goto fail;
    for (int k = 0; k < reps && p > 0; k++) {
        const double t = bench_run(c, ids, d, p, 0, logits);
        if (t < 0) goto fail;
        pp[k] = p / t;
    }
    for (int k = 0; k < reps && n > 0; k++) {
        const double t = bench_run(c, ids, d, 0, n, logits);
        if (t < 0) goto fail;
        tg[k] = n / t;
    }
    r->pp = stats(pp, p > 0 ? reps : 0);
    r->tg = stats(tg, n > 0 ? reps : 0);
    r->bw_util = bw > 0 ? (double)gp_model_decode_bytes(m) * r->tg.mean / bw : 0;
    r->peak = peak_rss();
    r->ok = 1;
    goto done;
fail:
    rc = cli_fail("evaluating");
done:
    free(ids);
    free(pp);
    free(tg);
    gp_ctx_free(c);
    gp_model_free(m);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    const char *models[64];
    int n_models = 0, p = 512, n = 128, d = 0, reps = 5, threads = 0, bw_mib = 1024, bw_gbs = 0, device = GP_DEVICE_CPU;
    const char *format = "md";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "genparity bench: unknown flag or missing value: %s\n", a);
            return 2;
        }
        if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
            if (n_models == 64) {
                fprintf(stderr, "genparity bench: at most 64 models\n");
                return 2;
            }
            models[n_models++] = v;
        } else if (!strcmp(a, "-p")) { if (parse_pos(a, v, 0, &p)) return 2; }
        else if (!strcmp(a, "-n")) { if (parse_pos(a, v, 0, &n)) return 2; }
        else if (!strcmp(a, "-d")) { if (parse_pos(a, v, 0, &d)) return 2; }
        else if (!strcmp(a, "-r")) { if (parse_pos(a, v, 1, &reps)) return 2; }
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) { if (parse_pos(a, v, 0, &threads)) return 2; }
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--bandwidth-mib")) { if (parse_pos(a, v, 0, &bw_mib)) return 2; }
        else if (!strcmp(a, "--bandwidth-gbs")) { if (parse_pos(a, v, 1, &bw_gbs)) return 2; }
        else if (!strcmp(a, "--compute")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16")) {
                fprintf(stderr, "genparity bench: --compute must be f32 or bf16, got '%s'\n", v);
                return 2;
            }
            bench_compute = strcmp(v, "bf16") ? GP_COMPUTE_F32 : GP_COMPUTE_BF16;
        } else if (!strcmp(a, "--kv-bits")) {
            if (parse_pos(a, v, 0, &bench_kv_bits)) return 2;
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
                fprintf(stderr, "genparity bench: --device must be cpu or cuda, got '%s'\n", v);
                return 2;
            }
            device = strcmp(v, "cuda") ? GP_DEVICE_CPU : GP_DEVICE_CUDA;
        }
        else {
            fprintf(stderr, "genparity bench: unknown flag %s (see --help)\n", a);
            return 2;
        }
        i++;
    }
    int json = !strcmp(format, "json");
    if (!json && strcmp(format, "md")) {
        fprintf(stderr, "genparity bench: --format must be md or json\n");
        return 2;
    }
    if (n_models == 0) return cli_missing("--model", "at least one model folder");
    if (threads == 0) threads = omp_get_num_procs();
    const int cuda = device == GP_DEVICE_CUDA; /* (the CPU's kernels and bf16 instructions do not apply) */
    double bw = bw_gbs ? bw_gbs * 1e9 : 0;
    if (!bw_gbs && cuda && bw_mib && gp_device_copy_bandwidth(GP_DEVICE_CUDA, (uint32_t)bw_mib, &bw))
        fprintf(stderr, "genparity bench: %s (no bandwidth utilization)\n", gp_errmsg());
    else if (!bw_gbs && !cuda)
        bw = measure_bandwidth(threads, bw_mib);
    const int bf16 = bench_compute == GP_COMPUTE_BF16;
    row rows[64];
    int rc = 0;
    for (int i = 0; i < n_models; i++)
        if (bench_model(models[i], p, n, d, reps, threads, device, bw, &rows[i])) rc = 1;
    if (json) {
        printf("{\"device\":\"%s\",\"threads\":%d,\"simd\":\"%s\",\"compute\":\"%s\",\"bf16_dot\":%s,"
               "\"read_bandwidth_gb_s\":%.2f,\"p\":%d,\"n\":%d,\"d\":%d,\"r\":%d,\"models\":[",
               cuda ? "cuda" : "cpu", threads, gp_cpu_simd(), bf16 ? "bf16" : "f32",
               bf16 && !cuda && gp_cpu_bf16_dot() ? "true" : "false", bw / 1e9, p, n, d, reps);
        for (int i = 0, first = 1; i < n_models; i++) {
            const row *r = &rows[i];
            if (!r->ok) continue;
            printf("%s{\"model\":", first ? "" : ",");
            cli_json_string(stdout, r->dir, strlen(r->dir));
            printf(",\"arch\":\"%s\",\"weights_gib\":%.3f,\"decode_bytes_per_token\":%.0f,\"load_s\":%.3f,"
                   "\"pp_tokens_per_s\":%.2f,\"pp_sd\":%.2f,\"tg_tokens_per_s\":%.2f,\"tg_sd\":%.2f,"
                   "\"bandwidth_utilization\":%.3f,\"peak_memory_bytes\":%lld}",
                   r->arch, r->weight_gib, r->decode_gb * 1e9, r->load_s, r->pp.mean, r->pp.sd, r->tg.mean, r->tg.sd,
                   r->bw_util, r->peak);
            first = 0;
        }
        printf("]}\n");
    } else {
        printf("device %s, threads %d, kernels %s, compute %s, %s bandwidth %.1f GB/s, p %d, n %d, d %d, r %d\n\n",
               cuda ? "cuda" : "cpu", threads, cuda ? "cuda" : gp_cpu_simd(),
               !bf16 ? "f32" : !cuda && gp_cpu_bf16_dot() ? "bf16 (vdpbf16ps)" : "bf16",
               bw_gbs ? "given" : cuda ? "measured device copy" : "measured read",
               bw / 1e9, p, n, d, reps);
        char at[32] = ""; /* llama-bench's "pp512 @ d4096" */
        if (d > 0) snprintf(at, sizeof at, " @ d%d", d);
        printf("| model | arch | weights GiB | load s | pp%d%s t/s | tg%d%s t/s | tg GB/token | "
               "tg bandwidth_utilization | peak MiB |\n",
               p, at, n, at);
        printf("|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_models; i++) {
            const row *r = &rows[i];
            if (!r->ok) continue;
            printf("| %s | %s | %.2f | %.2f | %.1f ± %.1f | %.2f ± %.2f | %.3f | %.0f%% | %.0f |\n", r->dir, r->arch,
                   r->weight_gib, r->load_s, r->pp.mean, r->pp.sd, r->tg.mean, r->tg.sd, r->decode_gb,
                   100 * r->bw_util, (double)r->peak / (1024.0 * 1024.0));
        }
    }
    return rc;
}
