/* http.c — the libmicrohttpd side of `genparity serve` (one thread per connection): routing, API-key check, body
 * size limit (413), JSON responses, SSE streaming from a job's output buffer, and client-disconnect detection (the
 * connection's socket is polled while waiting; a hang-up sets the job's cancel flag, which stops its generation at
 * the next token). */
#include "http.h"

#include <cJSON.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Per-request state (MHD's con_cls). */
typedef struct req {
    sbuf body;
    int too_large;
} req;

/* What a streaming response reads from. */
typedef struct stream_src {
    job *j;
    struct MHD_Connection *conn;
} stream_src;

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, const char *json, int retry_after) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (retry_after) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *type, const char *msg) {
    char *e = oai_error(type, NULL, "%s", msg);
    enum MHD_Result ok = send_json(conn, status, e ? e : "{}", status == 429);
    free(e);
    return ok;
}

/* 1 when the client closed its side of the connection. */
static int client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits up to 50 ms on j->cv (caller holds j->mu). */
static void wait_a_little(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_src *src = cls;
    job *j = src->j;
    pthread_mutex_lock(&j->mu);
    while (pos >= j->out.len && !j->done) {
        wait_a_little(j);
        if (pos >= j->out.len && !j->done && client_gone(src->conn)) {
            atomic_store(&j->cancel, 1);
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    ssize_t n;
    if (pos >= j->out.len) n = MHD_CONTENT_READER_END_OF_STREAM;
    else {
        size_t k = j->out.len - (size_t)pos < max ? j->out.len - (size_t)pos : max;
        memcpy(buf, j->out.p + pos, k);
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void sse_free(void *cls) {
    stream_src *src = cls;
    atomic_store(&src->j->cancel, 1); /* no-op when it already finished */
    job_release(src->j);
    free(src);
}

/* Non-stream: waits for the job (cancelling it if the client goes away) and sends its body. */
static enum MHD_Result finish_plain(struct MHD_Connection *conn, job *j) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        wait_a_little(j);
        if (!j->done && !atomic_load(&j->cancel) && client_gone(conn)) atomic_store(&j->cancel, 1);
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ok;
    if (atomic_load(&j->cancel)) ok = MHD_NO; /* nobody to answer */
    else ok = send_json(conn, (unsigned)(j->http_status ? j->http_status : 500), j->out.p ? j->out.p : "{}", 0);
    job_release(j);
    return ok;
}

static enum MHD_Result handle_generate(server *s, struct MHD_Connection *conn, req *rq, job_kind kind) {
    char *err = NULL;
    int status = 400;
    job *j = oai_parse_request(s, kind, rq->body.p ? rq->body.p : "", rq->body.len, &err, &status);
    if (!j) {
        enum MHD_Result ok = send_json(conn, (unsigned)status, err ? err : "{}", 0);
        free(err);
        return ok;
    }
    if (slots_submit(s, j, &status)) {
        job_release(j);
        return status == 429 ? send_error(conn, 429, "rate_limit_error", "the server's queue is full; retry later")
                             : send_error(conn, 503, "server_error", "the server is shutting down");
    }
    if (!j->stream) return finish_plain(conn, j);
    stream_src *src = malloc(sizeof *src);
    struct MHD_Response *r = src ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, src,
                                                                     sse_free)
                                 : NULL;
    if (!r) {
        free(src);
        atomic_store(&j->cancel, 1);
        job_release(j);
        return MHD_NO;
    }
    *src = (stream_src){j, conn};
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result handle_health(server *s, struct MHD_Connection *conn) {
    cJSON *o = cJSON_CreateObject();
    pthread_mutex_lock(&s->mu);
    cJSON_AddStringToObject(o, "status", s->draining ? "draining" : "ok");
    cJSON_AddNumberToObject(o, "slots", s->parallel);
    cJSON_AddNumberToObject(o, "running", s->running);
    cJSON_AddNumberToObject(o, "queued", s->q_len);
    cJSON_AddNumberToObject(o, "max_queue", s->max_queue);
    cJSON_AddNumberToObject(o, "queue_high_water", s->q_high_water);
    cJSON_AddNumberToObject(o, "served", (double)s->n_served);
    cJSON_AddNumberToObject(o, "rejected", (double)s->n_rejected);
    cJSON_AddNumberToObject(o, "cancelled", (double)s->n_cancelled);
    pthread_mutex_unlock(&s->mu);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    enum MHD_Result ok = send_json(conn, MHD_HTTP_OK, txt ? txt : "{}", 0);
    free(txt);
    return ok;
}

static enum MHD_Result handle_models(server *s, struct MHD_Connection *conn) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "genparity");
    cJSON_AddStringToObject(m, "architecture", gp_model_arch(s->model));
    cJSON_AddNumberToObject(m, "context_length", s->n_ctx);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    enum MHD_Result ok = send_json(conn, MHD_HTTP_OK, txt ? txt : "{}", 0);
    free(txt);
    return ok;
}

static int authorized(server *s, struct MHD_Connection *conn) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return 0;
    const char *k = h + 7, *want = s->api_key;
    size_t n = strlen(want), m = strlen(k);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? k[i] : 0);
    return diff == 0;
}

static enum MHD_Result route(server *s, struct MHD_Connection *conn, const char *url, const char *method, req *rq) {
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) return get ? handle_health(s, conn) : send_error(conn, 405, "invalid_request_error",
                                                                                 "use GET /health");
    int is_models = !strcmp(url, "/v1/models"), is_cmpl = !strcmp(url, "/v1/completions");
    int is_chat = !strcmp(url, "/v1/chat/completions");
    if (!is_models && !is_cmpl && !is_chat) return send_error(conn, 404, "invalid_request_error", "unknown path");
    if (!authorized(s, conn))
        return send_error(conn, 401, "authentication_error", "missing or wrong API key (Authorization: Bearer KEY)");
    if (is_models) return get ? handle_models(s, conn) : send_error(conn, 405, "invalid_request_error",
                                                                    "use GET /v1/models");
    if (!post) return send_error(conn, 405, "invalid_request_error", "use POST");
    if (rq->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than the server's limit of %zu bytes", s->max_body);
        return send_error(conn, 413, "invalid_request_error", msg);
    }
    return handle_generate(s, conn, rq, is_chat ? JOB_CHAT : JOB_COMPLETION);
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                const char *version, const char *upload_data, size_t *upload_data_size,
                                void **con_cls) {
    server *s = cls;
    req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        atomic_fetch_add(&s->active_requests, 1);
        pthread_mutex_lock(&s->mu);
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > 64 * (unsigned long long)s->max_body) /* absurd: answer without reading */
            return send_error(conn, 413, "invalid_request_error", "the request body is far over the server's limit");
        if (draining) return send_error(conn, 503, "server_error", "the server is shutting down");
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!rq->too_large && rq->body.len + *upload_data_size > s->max_body) {
            rq->too_large = 1;
            sbuf_free(&rq->body);
        }
        if (!rq->too_large && sbuf_add(&rq->body, upload_data, *upload_data_size)) return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    return route(s, conn, url, method, rq);
}

void http_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    req *rq = *con_cls;
    if (!rq) return;
    atomic_fetch_sub(&((server *)cls)->active_requests, 1);
    sbuf_free(&rq->body);
    free(rq);
    *con_cls = NULL;
}
