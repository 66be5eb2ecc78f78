/* tools/cuda_step_times.c — the wall time of each one-token decode step of a model on the GPU, from an empty cache, and
 * what the step's CUDA graphs did (r replayed, L launched one by one, B captured and launched): the steps that record
 * or capture again show up as the slow ones (BENCHMARKS.md, forty-fourth session).  Not built by make:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -I/usr/include/cjson -o /tmp/steps tools/cuda_step_times.c \
 *      build-cuda/libgenparity.a -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -L/usr/local/cuda/lib64 \
 *      -Wl,-rpath,/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lstdc++
 *   GENPARITY_CUDA_GRAPH=1 /tmp/steps MODEL_DIR STEPS REPETITIONS      (bf16 compute mode, ids made up)
 * Prints per repetition: tokens/s, the median step, the steps over 1.3 times it (step:us and its event), and the
 * steps that were not replayed. */
#include "genparity.h"
#include "kernels/backend.h"
#include "model/ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One repetition's line: tokens/s over tot us, the median of t, the slow steps, the events other than replays. */
static void report(int rep, const double *t, const char *ev, int n, double tot) {
    double *s = malloc(sizeof(double) * (size_t)n), over = 0;
    if (!s) return;
    memcpy(s, t, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp);
    const double med = s[n / 2];
    int slow = 0;
    printf("rep %d: %.1f tok/s, median %.1f us; slow steps:", rep, n / tot * 1e6, med);
    for (int i = 0; i < n; i++)
        if (t[i] > 1.3 * med) over += t[i] - med, printf(" %d:%.0f%c", i, t[i], ev[i]), slow++;
    printf(" | %d slow, %.0f us over the median (%.1f%% of the run)\n  not replayed:", slow, over, 100 * over / tot);
    for (int i = 0; i < n; i++)
        if (ev[i] != 'r') printf(" %d%c", i, ev[i]);
    printf("\n");
    free(s);
}

int main(int argc, char **argv) {
    if (argc != 4) return fprintf(stderr, "usage: %s MODEL_DIR STEPS REPETITIONS\n", argv[0]), 2;
    const int n = atoi(argv[2]), reps = atoi(argv[3]);
    gp_model *m = NULL;
    gp_model_params mp = gp_model_default_params();
    mp.load_tokenizer = 0;
    gp_ctx *c = NULL;
    gp_ctx_params cp = gp_ctx_default_params();
    cp.device = GP_DEVICE_CUDA, cp.compute = GP_COMPUTE_BF16, cp.n_ctx = n + 8;
    if (n < 1 || reps < 1 || gp_model_load(argv[1], &mp, &m) != GP_OK || gp_ctx_init(m, &cp, &c) != GP_OK)
        return fprintf(stderr, "%s\n", n < 1 || reps < 1 ? "STEPS and REPETITIONS must be >= 1" : gp_errmsg()), 1;
    float *lg = gp_ctx_logits_buffer(c);
    double *t = malloc(sizeof(double) * (size_t)n);
    char *ev = malloc((size_t)n);
    uint64_t prev[3] = {0, 0, 0}, st[3];
    for (int r = 0; r < reps && t && ev; r++) {
        gp_ctx_reset(c);
        const double a = now_us();
        for (int i = 0; i < n; i++) {
            int32_t id = (i * 7919 + 13) % 1000;
            const double b = now_us();
            if (gp_ctx_eval(c, &id, 1, NULL, lg) != GP_OK) return fprintf(stderr, "%s\n", gp_errmsg()), 1;
            t[i] = now_us() - b;
            gp_backend_cuda_graph_stats(c->ws, st);
            ev[i] = st[1] > prev[1] ? 'B' : st[2] > prev[2] ? 'L' : st[0] > prev[0] ? 'r' : '?';
            memcpy(prev, st, sizeof st);
        }
        report(r, t, ev, n, now_us() - a);
    }
    free(t), free(ev);
    gp_ctx_free(c);
    gp_model_free(m);
    return 0;
}
