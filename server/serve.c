/* serve.c — `genparity serve`: parses the flags, loads the model once, starts the slots and the libmicrohttpd daemon,
 * prints the address it listens on, and on SIGTERM/SIGINT drains (stops accepting, lets queued and running requests
 * finish and their responses go out) and exits 0. */
#include "http.h"
#include "../cli/cli.h"

#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: genparity serve [--model DIR] [options]\n"
            "\n"
            "OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,\n"
            "GET /health.  N slots (contexts sharing one model) generate concurrently; more requests wait in a\n"
            "queue; beyond it they get 429 with Retry-After.  SIGTERM/SIGINT: finish what is queued, then exit.\n"
            "\n"
            "  --model DIR        Hugging Face model folder (default: the embedded models/shakespeare-llama)\n"
            "  --host ADDR        address to listen on (default 127.0.0.1)\n"
            "  --port N           TCP port (default 8080; 0 = any free port, printed at start)\n"
            "  --parallel N       slots generating at once (default 1)\n"
            "  --max-queue M      requests that may wait for a slot (default 64)\n"
            "  --api-key KEY      require 'Authorization: Bearer KEY' on /v1/* (default: none)\n"
            "  --max-body BYTES   largest request body (default 1048576); larger ones get 413\n"
            "  --adapter DIR[:SCALE]  LoRA adapter (mlx-lm or PEFT folder) applied in every slot; repeatable\n"
            "\n"
            "context flags apply to every slot:\n");
    cli_ctx_flags_help(f);
}

typedef struct serve_opts {
    const char *model, *host, *api_key;
    cli_adapters ad;
    int32_t port, parallel, max_queue, max_body;
} serve_opts;

/* Returns 0, 1 after --help, or -1 on a bad flag (message printed by the cli_* helpers). */
static int parse_flags(int argc, char **argv, serve_opts *o, gp_ctx_params *cp) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return help(stdout), 1;
        int cf = cli_adapter_flag(argc, argv, &i, &o->ad);
        if (cf == 0) cf = cli_ctx_flag(argc, argv, &i, cp);
        if (cf < 0) return -1;
        if (cf > 0) continue;
        const char **str = !strcmp(a, "--model") ? &o->model : !strcmp(a, "--host") ? &o->host
                         : !strcmp(a, "--api-key") ? &o->api_key : NULL;
        int32_t *num = !strcmp(a, "--port") ? &o->port : !strcmp(a, "--parallel") ? &o->parallel
                     : !strcmp(a, "--max-queue") ? &o->max_queue : !strcmp(a, "--max-body") ? &o->max_body : NULL;
        if (!str && !num) return cli_unknown(a), -1;
        const char *v = cli_value(argc, argv, &i);
        if (!v) return -1;
        if (str) *str = v;
        else if (num == &o->port && cli_i32(a, v, 0, 65535, num)) return -1;
        else if (num == &o->parallel && cli_i32(a, v, 1, 256, num)) return -1;
        else if (num == &o->max_queue && cli_i32(a, v, 0, 1 << 20, num)) return -1;
        else if (num == &o->max_body && cli_i32(a, v, 1024, 1 << 30, num)) return -1;
    }
    return 0;
}

static struct MHD_Daemon *start_daemon(server *s, const serve_opts *o) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", (int)o->port);
    int e = getaddrinfo(o->host, port, &hints, &ai);
    if (e) {
        fprintf(stderr, "genparity serve: --host %s: %s\n", o->host, gai_strerror(e));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, http_on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) fprintf(stderr, "genparity serve: cannot listen on %s:%d (in use, or not an address of this host)\n",
                    o->host, (int)o->port);
    return d;
}

/* Blocks until SIGTERM or SIGINT (blocked in every thread), then drains: no new connections, queued and running
 * jobs finish, responses go out (at most 60 s), and the daemon stops. */
static void wait_and_drain(server *s, struct MHD_Daemon *d, const sigset_t *set) {
    int sig = 0;
    sigwait(set, &sig);
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    int running = s->running, queued = s->q_len;
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr, "genparity serve: %s: draining (%d running, %d queued)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            running, queued);
    MHD_quiesce_daemon(d);
    slots_wait_idle(s);
    for (int i = 0; i < 6000 && atomic_load(&s->active_requests) > 0; i++) usleep(10000);
    MHD_stop_daemon(d);
}

int cmd_serve(int argc, char **argv) {
    serve_opts o = {.host = "127.0.0.1", .port = 8080, .parallel = 1, .max_queue = 64, .max_body = 1 << 20};
    gp_ctx_params cp = gp_ctx_default_params();
    int pr = parse_flags(argc, argv, &o, &cp);
    if (pr) return pr > 0 ? 0 : 2;
    if (!o.model) o.model = cli_default_model();
    server s = {.parallel = (int)o.parallel, .max_queue = (int)o.max_queue, .max_body = (size_t)o.max_body,
                .api_key = o.api_key, .n_ctx = cp.n_ctx};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.idle_cv, NULL);
    atomic_init(&s.next_id, 1);
    atomic_init(&s.active_requests, 0);
    if (gp_model_load(o.model, NULL, &s.model) != GP_OK) return cli_fail("loading the model");
    if (cli_adapters_load(s.model, &o.ad)) {
        cli_adapters_free(&o.ad);
        gp_model_free(s.model);
        return 1;
    }
    s.adapters = o.ad.loaded, s.adapter_scales = o.ad.scale, s.n_adapters = o.ad.n;
    s.tok = gp_model_tokenizer(s.model);
    gp_status ts = s.tok ? gp_chat_template_load(o.model, &s.tmpl) : GP_ERR_MISSING;
    if (ts != GP_OK && ts != GP_ERR_MISSING)
        fprintf(stderr, "genparity serve: warning: the chat template does not load (%s); /v1/chat/completions will "
                        "answer 400\n", gp_errmsg());
    s.n_vocab = gp_model_n_vocab(s.model);
    const char *base = o.model + strlen(o.model);
    while (base > o.model && base[-1] == '/') base--;
    const char *end = base;
    while (base > o.model && base[-1] != '/') base--;
    snprintf(s.model_name, sizeof s.model_name, "%.*s", (int)(end - base), base);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts, so every thread inherits it */
    signal(SIGPIPE, SIG_IGN);
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    if (slots_start(&s, &cp) == 0 && (d = start_daemon(&s, &o))) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "genparity serve: listening on http://%s:%u (model %s, %d slots, queue %d)\n", o.host,
                di ? di->port : (unsigned)o.port, s.model_name, s.parallel, s.max_queue);
        wait_and_drain(&s, d, &set);
        fprintf(stderr, "genparity serve: stopped (%lld served, %lld rejected, %lld cancelled)\n", s.n_served,
                s.n_rejected, s.n_cancelled);
        rc = 0;
    }
    slots_stop(&s);
    cli_adapters_free(&o.ad);
    gp_chat_template_free(s.tmpl);
    gp_model_free(s.model);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.idle_cv);
    return rc;
}
