/* server.h — `genparity serve`, the OpenAI-compatible HTTP server: a layer above the library (like cli/), using only
 * include/genparity.h.  serve.c (flags, start, SIGTERM drain), http.c (libmicrohttpd glue: routing, auth, body limit,
 * SSE streaming, disconnects), slots.c (N slots = N gp_ctx sharing one gp_model, FIFO queue, prefix-aware dispatch),
 * oai.c (OpenAI request JSON -> job, job output -> OpenAI response JSON, error objects). */
#ifndef GP_SERVER_H
#define GP_SERVER_H

#include "genparity.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The `genparity serve` command (registered in cli/main.c). */
int cmd_serve(int argc, char **argv);

/* A growable byte buffer. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;
int sbuf_add(sbuf *b, const char *s, size_t n); /* 0, or -1 out of memory */
void sbuf_free(sbuf *b);

typedef enum job_kind { JOB_COMPLETION = 0, JOB_CHAT = 1 } job_kind;

/* One generation request.  Shared by the connection thread and the slot worker (refcount 2 when queued); the
 * connection reads `out` as the worker appends to it. */
typedef struct job {
    job_kind kind;
    int stream;             /* 1: SSE chunks; 0: one JSON object when done */
    int include_usage;      /* stream_options.include_usage: an extra chunk with usage and no choices */
    int n_logprobs;         /* -1: none; 0..20: chosen token's logprob + that many alternatives */
    int32_t *ids;           /* prompt ids (owned) */
    int32_t n_ids;
    gp_gen_config g;        /* arrays below are owned by the job */
    char **stops;
    int n_stops;
    gp_token_bias *bias;
    char id[48];
    long long created;
    /* output, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sbuf out;               /* SSE bytes (stream) or the response body (done, non-stream) */
    int done;               /* the worker finished (out is complete) */
    int http_status;        /* of a non-stream response */
    int32_t n_cached;       /* prompt positions reused from the slot's cache */
    int32_t n_gen;          /* tokens generated so far */
    size_t text_off;        /* completions logprobs: text offset of the next token */
    atomic_int cancel;      /* the client went away: stop at the next token */
    atomic_int refs;
    struct job *next;       /* queue link */
    struct server *srv;
} job;

void job_release(job *j); /* drops one reference; frees the job at zero */

typedef struct slot {
    int index;
    gp_ctx *ctx;
    pthread_t thread;
    pthread_cond_t cv;      /* signalled (with server.mu) when `job` is assigned or on shutdown */
    job *job;               /* assigned job, NULL when idle */
    int32_t *cached;        /* copy of the cache's token ids after the last job */
    int32_t n_cached;
} slot;

typedef struct server {
    gp_model *model;
    const gp_tokenizer *tok;
    gp_chat_template *tmpl;  /* the model folder's chat template, or NULL (chat completions then get 400) */
    char model_name[256];
    int32_t n_vocab, n_ctx;
    int parallel, max_queue;
    size_t max_body;
    const char *api_key;
    gp_adapter *const *adapters; /* --adapter: set on every slot's context (n_adapters, scales) */
    const float *adapter_scales;
    int n_adapters;
    slot *slots;
    /* scheduler state, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;  /* signalled when a job finishes (drain waits on it) */
    job *q_head, *q_tail;
    int q_len, q_high_water, running, shutting_down, draining;
    long long n_served, n_rejected, n_cancelled;
    atomic_llong next_id;
    atomic_int active_requests; /* HTTP requests between their first callback and their completion */
} server;

/* slots.c */
int slots_start(server *s, const gp_ctx_params *cp); /* creates the contexts and workers; 0 or -1 (message printed) */
void slots_stop(server *s);                          /* wakes and joins the workers, frees the contexts */
/* Queues j (taking one reference for the worker).  Returns 0, or -1 when the queue is full (429) or the server is
 * draining (503): *why says which. */
int slots_submit(server *s, job *j, int *http_status);
void slots_wait_idle(server *s); /* blocks until no job is queued or running */

/* oai.c */
/* Parses an OpenAI request body (completions: prompt; chat: messages through the chat template) into a new job (one
 * reference).  Returns the job, or NULL with an error object as malloc'd JSON text in *err (caller frees with free())
 * and the HTTP status in *status (400, or 500 out of memory). */
job *oai_parse_request(server *s, job_kind kind, const char *body, size_t len, char **err, int *status);
/* Returns an OpenAI error object as malloc'd JSON text. */
char *oai_error(const char *type, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends the SSE chunk of one generated token (stream) to j->out (caller holds j->mu). */
void oai_stream_token(job *j, const gp_token_event *ev);
/* Appends the final chunk(s) and [DONE] (stream) or writes the whole response body (non-stream). */
void oai_finish(job *j, gp_status st, const gp_gen_result *r);

#endif
