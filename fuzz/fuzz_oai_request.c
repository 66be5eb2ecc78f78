/* fuzz_oai_request.c — libFuzzer target for the HTTP server's request parser (server/oai.c): the first byte picks
 * /v1/completions or /v1/chat/completions, the rest is the request body.  oai_parse_request returns a job whose
 * prompt ids lie inside the vocabulary and fit the context, or NULL with a JSON error and status 4xx/5xx. */
#include "fuzz_common.h"
#include "../server/server.h"

static server g_s;

int LLVMFuzzerInitialize(int *argc, char ***argv) { /* the model loads once, outside every unit's timeout */
    FZ_CHECK(gp_model_load(FZ_MODEL, NULL, &g_s.model) == GP_OK);
    g_s.tok = gp_model_tokenizer(g_s.model);
    snprintf(g_s.model_name, sizeof g_s.model_name, "shakespeare-llama");
    g_s.n_vocab = gp_model_n_vocab(g_s.model);
    g_s.n_ctx = 256;
    g_s.parallel = 1;
    g_s.max_queue = 4;
    g_s.max_body = 1 << 20;
    pthread_mutex_init(&g_s.mu, NULL);
    pthread_cond_init(&g_s.idle_cv, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *err = NULL;
    int status = 0;
    job *j = oai_parse_request(&g_s, data[0] & 1 ? JOB_CHAT : JOB_COMPLETION, (const char *)data + 1, size - 1, &err,
                               &status);
    if (!j) {
        FZ_CHECK(err != NULL && status >= 400 && status < 600);
        free(err);
        return 0;
    }
    FZ_CHECK(err == NULL);
    FZ_CHECK(j->n_ids >= 0 && j->n_ids < g_s.n_ctx);
    for (int32_t i = 0; i < j->n_ids; i++) FZ_CHECK(j->ids[i] >= 0 && j->ids[i] < g_s.n_vocab);
    FZ_CHECK(gp_gen_config_validate(&j->g, g_s.n_vocab) == GP_OK);
    job_release(j);
    return 0;
}
