/* test_concurrency.c — the threading promises, run by `make test` and under ThreadSanitizer by `make tsan`:
 * one gp_model shared by 4 threads, each with its own gp_ctx (and 2 pool threads), gives exactly the single-threaded
 * logits and tokens; and the thread pool runs every item of every job exactly once (a stress test that counts
 * executions per item per job, from two caller threads at once; issue 17.3: a worker woken for job N could claim an
 * index of job N+1 before it was reset). */
#include "genparity.h"
#include "kernels/cpu/pool.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define N_CTX_THREADS 4
#define N_GEN 12

typedef struct {
    const gp_model *m;
    int32_t prompt[16];
    int32_t n_prompt;
    float *logits;          /* [n_vocab] of the prompt's last position */
    int32_t tokens[N_GEN];  /* greedy continuation */
    int32_t n_tokens;
    gp_status status;
} run_job;

/* Prefill logits + a greedy continuation in a fresh context of its own. */
static void *run_one(void *p) {
    run_job *j = p;
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = 2;
    cp.prefill_chunk = 4;
    gp_ctx *c;
    if ((j->status = gp_ctx_init(j->m, &cp, &c)) != GP_OK) return NULL;
    j->status = gp_ctx_prefill(c, j->prompt, j->n_prompt, j->logits, NULL);
    if (j->status == GP_OK) {
        gp_gen_config g = gp_gen_config_default();
        g.max_new_tokens = N_GEN;
        g.do_sample = 0;
        gp_gen_result r;
        j->status = gp_generate(c, j->prompt, j->n_prompt, &g, NULL, NULL, &r);
        if (j->status == GP_OK) {
            j->n_tokens = r.n_tokens;
            memcpy(j->tokens, r.tokens, (size_t)r.n_tokens * sizeof *r.tokens);
            gp_gen_result_free(&r);
        }
    }
    gp_ctx_free(c);
    return NULL;
}

TEST(multi_context_threads_equal_single_threaded) {
    gp_model *m;
    REQUIRE(gp_model_load("models/shakespeare-llama", NULL, &m) == GP_OK);
    const gp_tokenizer *tok = gp_model_tokenizer(m);
    static const char *prompts[N_CTX_THREADS] = {"ROMEO:", "First Citizen:\nBefore we proceed", "KING HENRY:",
                                                 "O, she doth teach the torches"};
    const size_t V = (size_t)gp_model_n_vocab(m);
    run_job ref[N_CTX_THREADS], par[N_CTX_THREADS];
    memset(ref, 0, sizeof ref);
    for (int k = 0; k < N_CTX_THREADS; k++) {
        int32_t *ids, n;
        REQUIRE(gp_tokenizer_encode(tok, prompts[k], strlen(prompts[k]), 1, &ids, &n) == GP_OK);
        ref[k].m = m;
        ref[k].n_prompt = n < 16 ? n : 16;
        memcpy(ref[k].prompt, ids, (size_t)ref[k].n_prompt * sizeof *ids);
        gp_free(ids);
        ref[k].logits = malloc(V * sizeof(float));
        par[k] = ref[k];
        par[k].logits = malloc(V * sizeof(float));
        run_one(&ref[k]); /* one at a time */
        CHECK_STATUS(ref[k].status, GP_OK);
    }
    pthread_t th[N_CTX_THREADS];
    for (int k = 0; k < N_CTX_THREADS; k++) REQUIRE(pthread_create(&th[k], NULL, run_one, &par[k]) == 0);
    for (int k = 0; k < N_CTX_THREADS; k++) pthread_join(th[k], NULL);
    int same = 0;
    for (int k = 0; k < N_CTX_THREADS; k++) {
        CHECK_STATUS(par[k].status, GP_OK);
        int lg = memcmp(ref[k].logits, par[k].logits, V * sizeof(float)) == 0;
        int tk = ref[k].n_tokens == par[k].n_tokens &&
                 memcmp(ref[k].tokens, par[k].tokens, (size_t)ref[k].n_tokens * sizeof(int32_t)) == 0;
        if (!lg || !tk) printf("    context %d: logits %s, tokens %s\n", k, lg ? "equal" : "DIFFER", tk ? "equal" : "DIFFER");
        CHECK(lg && tk);
        same += lg && tk;
        free(ref[k].logits);
        free(par[k].logits);
    }
    NOTE("%d contexts on %d threads (2 pool threads each) over one model: %d/%d bit-identical to single-threaded "
         "(prefill logits [%zu] + %d greedy tokens)", N_CTX_THREADS, N_CTX_THREADS, same, N_CTX_THREADS, V, N_GEN);
    gp_model_free(m);
}

/* ---- thread pool: exactly once ---- */

#define MAX_ITEMS 9

typedef struct {
    _Atomic uint8_t *counts; /* [n_jobs * MAX_ITEMS] executions per (job, item) */
    int n_jobs, n_threads, caller;
} stress;

typedef struct {
    _Atomic uint8_t *slot; /* this job's MAX_ITEMS counters */
    int64_t n_items;
    _Atomic int *outside;  /* items run with an index past the job */
} job_arg;

static void count_item(void *arg, int64_t item, int thread) {
    job_arg *a = arg;
    if (item < 0 || item >= a->n_items) atomic_fetch_add(a->outside, 1);
    else atomic_fetch_add(&a->slot[item], 1);
}

static _Atomic int g_outside;

static void *stress_caller(void *p) {
    stress *s = p;
    for (int j = 0; j < s->n_jobs; j++) {
        job_arg a = {s->counts + (size_t)j * MAX_ITEMS, 2 + (j * 7 + s->caller) % (MAX_ITEMS - 1), &g_outside};
        gp_pool_run(s->n_threads, a.n_items, count_item, &a);
    }
    return NULL;
}

TEST(pool_stress_each_item_exactly_once) {
    int n_jobs = getenv("GENPARITY_TSAN") ? 40000 : getenv("GENPARITY_ASAN") ? 200000 : 1000000;
    const char *e = getenv("GENPARITY_POOL_JOBS");
    if (e && atoi(e) > 0) n_jobs = atoi(e);
    stress s[2];
    for (int c = 0; c < 2; c++) {
        s[c].counts = calloc((size_t)n_jobs * MAX_ITEMS, 1);
        s[c].n_jobs = n_jobs;
        s[c].n_threads = 3 + c;
        s[c].caller = c;
    }
    atomic_store(&g_outside, 0);
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, stress_caller, &s[1]) == 0);
    stress_caller(&s[0]);
    pthread_join(th, NULL);
    long twice = 0, never = 0;
    for (int c = 0; c < 2; c++) {
        for (int j = 0; j < n_jobs; j++) {
            int64_t n_items = 2 + (j * 7 + c) % (MAX_ITEMS - 1);
            for (int64_t i = 0; i < MAX_ITEMS; i++) {
                int k = atomic_load(&s[c].counts[(size_t)j * MAX_ITEMS + i]);
                if (i < n_items && k == 0) never++;
                if (k > 1 || (i >= n_items && k > 0)) twice++;
            }
        }
        free(s[c].counts);
    }
    NOTE("%d jobs x 2 callers (3 and 4 threads): %ld items run more than once, %ld never, %d outside their job",
         n_jobs, twice, never, atomic_load(&g_outside));
    CHECK_EQ_INT(twice, 0);
    CHECK_EQ_INT(never, 0);
    CHECK_EQ_INT(atomic_load(&g_outside), 0);
}
