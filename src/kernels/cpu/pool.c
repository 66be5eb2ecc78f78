/* pool.c — the CPU backend's thread pool (see pool.h).  Workers are created on first need and live for the process;
 * between jobs they spin for about a hundred microseconds (decode issues hundreds of small jobs per token) and then
 * sleep on a futex.  The job is a shared record guarded by one mutex (one job at a time per process); items are
 * claimed by a compare-and-swap on a word that carries the job's generation (see J). */
#include "kernels/cpu/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_WORKERS 63
#define SPIN 20000 /* pause iterations before a worker sleeps */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_n_workers; /* started (under g_lock) */

/* The job record.  claim packs the job's generation (high 32 bits) and its next unclaimed item (low 32 bits) in one
 * word, so an item can only be claimed by a compare-and-swap that names the job it belongs to: a worker that woke
 * for job N and runs late can never take an index of job N+1 (its CAS fails once the generation moved), and it
 * dereferences fn/arg only after a successful claim, i.e. while that job cannot complete.  Publishing a job first
 * closes the word (index CLOSED under the new generation), then writes the job's fields, then opens it at index 0. */
#define CLOSED 0xffffffffu
static struct {
    _Atomic uint32_t gen;   /* futex word: bumped once per job; sleeping workers wait for it to change */
    _Atomic uint64_t claim; /* (generation << 32) | next unclaimed item */
    _Atomic int64_t done;   /* items finished */
    _Atomic int sleepers;   /* workers blocked on the futex */
    _Atomic int64_t n_items;
    _Atomic int n_threads;
    _Atomic(gp_pool_fn) fn;
    _Atomic(void *) arg;
} J;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claims and runs items of the current job until none is left (or the job is not one thread tid takes part in). */
static void work(int tid) {
    for (;;) {
        uint64_t c = atomic_load(&J.claim);
        const uint32_t idx = (uint32_t)c;
        if (idx == CLOSED) return;
        /* the fields below belong to c's job whenever the CAS that follows succeeds (they are written while the word
         * is closed, and a job is only replaced after all its items are done) */
        const int64_t n = atomic_load(&J.n_items);
        if ((int64_t)idx >= n || tid >= atomic_load(&J.n_threads)) return;
        gp_pool_fn fn = atomic_load(&J.fn);
        void *arg = atomic_load(&J.arg);
        if (!atomic_compare_exchange_weak(&J.claim, &c, c + 1)) continue;
        fn(arg, idx, tid);
        atomic_fetch_add(&J.done, 1);
    }
}

static void *worker(void *p) {
    const int tid = (int)(intptr_t)p;
    uint32_t seen = atomic_load(&J.gen);
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&J.gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN) {
                relax();
                continue;
            }
            atomic_fetch_add(&J.sleepers, 1);
            if (atomic_load(&J.gen) == seen)
                syscall(SYS_futex, (uint32_t *)&J.gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
            atomic_fetch_sub(&J.sleepers, 1);
            spins = 0;
        }
        seen = g;
        work(tid);
    }
    return NULL;
}

typedef struct offset_job {
    gp_pool_fn fn;
    void *arg;
    int64_t i0;
} offset_job;

static void offset_item(void *a, int64_t i, int tid) {
    const offset_job *o = a;
    o->fn(o->arg, o->i0 + i, tid);
}

/* One job of n_items < CLOSED items (the caller holds g_lock). */
static void run_job(int n_threads, int64_t n_items, gp_pool_fn fn, void *arg) {
    static uint32_t job_gen; /* under g_lock */
    const uint64_t g = (uint64_t)++job_gen << 32;
    atomic_store(&J.claim, g | CLOSED);
    atomic_store(&J.fn, fn);
    atomic_store(&J.arg, arg);
    atomic_store(&J.n_items, n_items);
    atomic_store(&J.n_threads, n_threads);
    atomic_store(&J.done, 0);
    atomic_store(&J.claim, g);
    atomic_fetch_add_explicit(&J.gen, 1, memory_order_release);
    if (atomic_load(&J.sleepers) > 0) syscall(SYS_futex, (uint32_t *)&J.gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    work(0);
    while (atomic_load(&J.done) < n_items) relax();
}

void gp_pool_run(int n_threads, int64_t n_items, gp_pool_fn fn, void *arg) {
    if (n_threads > MAX_WORKERS + 1) n_threads = MAX_WORKERS + 1;
    if (n_threads <= 1 || n_items <= 1) {
        for (int64_t i = 0; i < n_items; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&g_lock);
    while (g_n_workers < n_threads - 1) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, worker, (void *)(intptr_t)(g_n_workers + 1));
        pthread_attr_destroy(&at);
        if (rc != 0) break; /* run with the workers we have */
        g_n_workers++;
    }
    if (n_threads > g_n_workers + 1) n_threads = g_n_workers + 1;
    for (int64_t i0 = 0; i0 < n_items; i0 += CLOSED - 1) { /* jobs of fewer than 2^32 - 1 items */
        const int64_t m = n_items - i0 < CLOSED - 1 ? n_items - i0 : CLOSED - 1;
        if (i0 == 0) run_job(n_threads, m, fn, arg);
        else {
            offset_job o = {fn, arg, i0};
            run_job(n_threads, m, offset_item, &o);
        }
    }
    pthread_mutex_unlock(&g_lock);
}
