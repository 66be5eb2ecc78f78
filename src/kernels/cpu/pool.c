/* pool.c — the CPU backend's thread pool (see pool.h).  Workers are created on first need and live for the process;
 * between jobs they spin for about a hundred microseconds (decode issues hundreds of small jobs per token) and then
 * sleep on a futex.  The job is a shared record guarded by one mutex (one job at a time per process). */
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

static struct {
    _Atomic uint32_t gen;   /* bumped once per job; workers wait for it to change */
    _Atomic int64_t next;   /* next unclaimed item */
    _Atomic int64_t done;   /* items finished */
    _Atomic int active;     /* workers inside a job */
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

/* Claims and runs items until none is left. */
static void work(int tid) {
    for (;;) {
        int64_t i = atomic_fetch_add(&J.next, 1);
        if (i >= atomic_load_explicit(&J.n_items, memory_order_relaxed)) return;
        atomic_load_explicit(&J.fn, memory_order_relaxed)(atomic_load_explicit(&J.arg, memory_order_relaxed), i, tid);
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
        atomic_fetch_add(&J.active, 1);
        if (atomic_load(&J.gen) == g && tid < atomic_load(&J.n_threads)) work(tid);
        atomic_fetch_sub(&J.active, 1);
    }
    return NULL;
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
    atomic_store(&J.fn, fn);
    atomic_store(&J.arg, arg);
    atomic_store(&J.n_items, n_items);
    atomic_store(&J.n_threads, n_threads);
    atomic_store(&J.done, 0); /* before next: an item claimed from this job always counts in this job */
    atomic_store(&J.next, 0);
    atomic_fetch_add_explicit(&J.gen, 1, memory_order_release);
    if (atomic_load(&J.sleepers) > 0) syscall(SYS_futex, (uint32_t *)&J.gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    work(0);
    while (atomic_load(&J.done) < n_items || atomic_load(&J.active) > 0) relax();
    pthread_mutex_unlock(&g_lock);
}
