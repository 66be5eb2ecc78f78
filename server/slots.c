/* slots.c — the server's generation slots: N contexts (gp_ctx) sharing one gp_model, one worker thread each, a FIFO
 * queue with a length limit, and prefix-aware dispatch (a queued job goes to the idle slot whose cache shares the
 * longest prefix with its prompt, so a conversation that extends an earlier one reuses its cached positions). */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_add(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    *b = (sbuf){0};
}

void job_release(job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    free(j->ids);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->stops);
    free(j->bias);
    sbuf_free(&j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Hands queued jobs to idle slots (caller holds s->mu).  Cancelled jobs are dropped here. */
static void dispatch_locked(server *s) {
    while (s->q_head) {
        job *j = s->q_head;
        if (atomic_load(&j->cancel)) {
            s->q_head = j->next;
            if (!s->q_head) s->q_tail = NULL;
            s->q_len--;
            s->n_cancelled++;
            pthread_mutex_lock(&j->mu);
            j->done = 1;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
            job_release(j);
            continue;
        }
        int best = -1;
        int32_t best_len = -1;
        for (int i = 0; i < s->parallel; i++) {
            slot *sl = &s->slots[i];
            if (sl->job) continue;
            int32_t k = common_prefix(sl->cached, sl->n_cached, j->ids, j->n_ids);
            if (k > best_len) best = i, best_len = k;
        }
        if (best < 0) return;
        s->q_head = j->next;
        if (!s->q_head) s->q_tail = NULL;
        s->q_len--;
        j->next = NULL;
        j->n_cached = best_len >= j->n_ids ? j->n_ids - 1 : best_len;
        s->slots[best].job = j;
        s->running++;
        pthread_cond_signal(&s->slots[best].cv);
    }
}

int slots_submit(server *s, job *j, int *http_status) {
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->shutting_down) {
        pthread_mutex_unlock(&s->mu);
        *http_status = 503;
        return -1;
    }
    int idle = s->parallel - s->running;
    if (idle <= s->q_len && s->q_len >= s->max_queue) { /* no slot free for it and the queue is full */
        s->n_rejected++;
        pthread_mutex_unlock(&s->mu);
        *http_status = 429;
        return -1;
    }
    atomic_fetch_add(&j->refs, 1);
    j->next = NULL;
    if (s->q_tail) s->q_tail->next = j;
    else s->q_head = j;
    s->q_tail = j;
    s->q_len++;
    dispatch_locked(s);
    if (s->q_len > s->q_high_water) s->q_high_water = s->q_len;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int on_token(const gp_token_event *ev, void *ud) {
    job *j = ud;
    pthread_mutex_lock(&j->mu);
    j->n_gen = ev->index + 1;
    if (j->stream) {
        oai_stream_token(j, ev);
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return atomic_load(&j->cancel) ? 1 : 0;
}

/* Runs one job on the slot's context and publishes its output. */
static void run_job(server *s, slot *sl, job *j) {
    gp_gen_result r = {0};
    gp_status st = GP_ERR_CANCELLED;
    if (!atomic_load(&j->cancel)) st = gp_generate(sl->ctx, j->ids, j->n_ids, &j->g, on_token, j, &r);
    pthread_mutex_lock(&j->mu);
    oai_finish(j, st, &r);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    gp_gen_result_free(&r);
    int32_t n;
    const int32_t *toks = gp_ctx_tokens(sl->ctx, &n);
    int32_t *copy = n > 0 ? malloc((size_t)n * sizeof *copy) : NULL;
    if (copy) memcpy(copy, toks, (size_t)n * sizeof *copy);
    pthread_mutex_lock(&s->mu);
    free(sl->cached);
    sl->cached = copy;
    sl->n_cached = copy ? n : 0;
    if (st == GP_ERR_CANCELLED) s->n_cancelled++;
    else s->n_served++;
    pthread_mutex_unlock(&s->mu);
}

typedef struct worker_arg {
    server *s;
    slot *sl;
} worker_arg;

static void *worker(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    server *s = a.s;
    slot *sl = a.sl;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->job && !s->shutting_down) pthread_cond_wait(&sl->cv, &s->mu);
        if (!sl->job) break;
        job *j = sl->job;
        pthread_mutex_unlock(&s->mu);
        run_job(s, sl, j);
        job_release(j);
        pthread_mutex_lock(&s->mu);
        sl->job = NULL;
        s->running--;
        dispatch_locked(s);
        pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int slots_start(server *s, const gp_ctx_params *cp) {
    s->slots = calloc((size_t)s->parallel, sizeof *s->slots);
    if (!s->slots) return -1;
    for (int i = 0; i < s->parallel; i++) {
        slot *sl = &s->slots[i];
        sl->index = i;
        pthread_cond_init(&sl->cv, NULL);
        if (gp_ctx_init(s->model, cp, &sl->ctx) != GP_OK) {
            fprintf(stderr, "genparity serve: creating slot %d: %s\n", i, gp_errmsg());
            return -1;
        }
        if (s->n_adapters && gp_ctx_set_adapters(sl->ctx, s->adapters, s->adapter_scales, s->n_adapters) != GP_OK) {
            fprintf(stderr, "genparity serve: --adapter on slot %d: %s\n", i, gp_errmsg());
            return -1;
        }
    }
    s->n_ctx = s->n_ctx ? s->n_ctx : gp_model_n_ctx_train(s->model);
    for (int i = 0; i < s->parallel; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) return -1;
        *a = (worker_arg){s, &s->slots[i]};
        if (pthread_create(&s->slots[i].thread, NULL, worker, a)) {
            free(a);
            fprintf(stderr, "genparity serve: cannot start worker thread %d\n", i);
            return -1;
        }
    }
    return 0;
}

void slots_wait_idle(server *s) {
    pthread_mutex_lock(&s->mu);
    while (s->running || s->q_len) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void slots_stop(server *s) {
    if (!s->slots) return;
    pthread_mutex_lock(&s->mu);
    s->shutting_down = 1;
    for (int i = 0; i < s->parallel; i++) pthread_cond_signal(&s->slots[i].cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->parallel; i++) {
        slot *sl = &s->slots[i];
        if (sl->thread) pthread_join(sl->thread, NULL);
        gp_ctx_free(sl->ctx);
        free(sl->cached);
        pthread_cond_destroy(&sl->cv);
    }
    free(s->slots);
    s->slots = NULL;
}
