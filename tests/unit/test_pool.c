/* test_pool.c — the CPU thread pool under stress (issue 17 item 3): many small jobs of varying sizes back to back,
 * every item counting its executions; each item of each job must run exactly once, on a thread index below the
 * job's thread count, and only with its own job's argument (a late worker of job N must never claim an item of job
 * N+1).  Before the generation-tagged claim, 24 items ran twice in 400,000 jobs on the 2-core CI machine. */
#include "kernels/cpu/pool.h"
#include "test.h"

#include <stdatomic.h>
#include <stdint.h>

#define MAX_ITEMS 67

typedef struct count_job {
    _Atomic int count[MAX_ITEMS];
    int n_threads;
    uint32_t tag;
    _Atomic int bad; /* wrong thread index or wrong job */
} count_job;

static _Atomic uint32_t g_current_tag;

static void count_item(void *arg, int64_t i, int thread) {
    count_job *j = arg;
    if (thread < 0 || thread >= j->n_threads || j->tag != atomic_load(&g_current_tag)) atomic_fetch_add(&j->bad, 1);
    atomic_fetch_add(&j->count[i], 1);
}

TEST(pool_every_item_runs_exactly_once) {
    const int jobs = 300000; /* the old race showed about 6 double runs per 100,000 jobs here */
    long double_runs = 0, missed = 0, bad = 0;
    uint32_t s = 12345;
    for (int k = 0; k < jobs; k++) {
        s = s * 1664525u + 1013904223u;
        count_job j;
        const int64_t n = 2 + (int64_t)((s >> 8) % (MAX_ITEMS - 1));
        j.n_threads = 2 + (int)((s >> 20) % 3);
        j.tag = (uint32_t)k + 1;
        atomic_store(&g_current_tag, j.tag);
        atomic_store(&j.bad, 0);
        for (int i = 0; i < MAX_ITEMS; i++) atomic_store(&j.count[i], 0);
        gp_pool_run(j.n_threads, n, count_item, &j);
        for (int64_t i = 0; i < n; i++) {
            const int c = atomic_load(&j.count[i]);
            double_runs += c > 1 ? c - 1 : 0;
            missed += c == 0;
        }
        for (int64_t i = n; i < MAX_ITEMS; i++) double_runs += atomic_load(&j.count[i]);
        bad += atomic_load(&j.bad);
    }
    NOTE("%d jobs (2-67 items, 2-4 threads): %ld extra executions, %ld missed items, %ld runs on a wrong thread or "
         "job (want 0, 0, 0)", jobs, double_runs, missed, bad);
    CHECK(double_runs == 0);
    CHECK(missed == 0);
    CHECK(bad == 0);
}
