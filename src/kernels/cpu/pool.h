/* pool.h — the CPU backend's thread pool: workers started once per process, kept spinning briefly between jobs and
 * then sleeping.  A job is n_items independent items; the caller takes part, items are claimed one at a time, and the
 * caller returns as soon as every item is done — a worker that the OS has not run yet never holds the caller up
 * (it simply takes no item).  Which thread runs an item never changes what the item computes. */
#ifndef GP_CPU_POOL_H
#define GP_CPU_POOL_H

#include <stdint.h>

/* One item of a job: thread is the participant's index in [0, n_threads) (for per-thread scratch). */
typedef void (*gp_pool_fn)(void *arg, int64_t item, int thread);

/* Runs fn(arg, i, thread) for every i in [0, n_items) on up to n_threads threads (the caller is thread 0) and
 * returns when all are done.  n_threads <= 1 or n_items <= 1 runs inline.  Not reentrant: one job at a time
 * per process (the library runs one forward per context and contexts are used by one thread; concurrent contexts
 * serialise on the pool). */
void gp_pool_run(int n_threads, int64_t n_items, gp_pool_fn fn, void *arg);

#endif
