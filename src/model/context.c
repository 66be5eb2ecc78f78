/* context.c — gp_ctx lifecycle and everything around the forward pass (forward.c): gp_ctx_eval (checks, cache
 * reservation, chunking), named KV caches (select, fork, drop, trim), prefix reuse, cache files with a model
 * fingerprint, memory accounting and limits, steering hooks.  Activations and the workspace come from the model's
 * backend. */
#include "model/ctx.h"
#include "util/util.h"

#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

gp_ctx_params gp_ctx_default_params(void) {
    gp_ctx_params p = {0};
    p.prefill_chunk = 512;
    p.kv_group_size = 64;
    p.keep = -1; /* the default: mlx-lm's keep of 4 with a rotating cache (at most max_kv_size - 1), else 0 */
    return p;
}

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

static gp_status add_cache(gp_ctx *c, const char *name, gp_cache *kc) {
    gp_cache **v = gp_realloc(c->caches, (size_t)c->n_caches + 1, sizeof *v);
    if (!v) return GP_ERR_NOMEM;
    c->caches = v;
    c->caches[c->n_caches++] = kc;
    (void)name;
    return GP_OK;
}

static gp_status new_cache(gp_ctx *c, const char *name, gp_cache **out) {
    const gp_config *cfg = &c->m->cfg;
    return gp_cache_create(name, &c->kvp, c->be, cfg->n_layers, cfg->n_kv_heads * cfg->head_dim, cfg->window, out);
}

gp_ws_params gp_ctx_ws_params(const gp_ctx *x, int32_t lora_rank) {
    const gp_config *c = &x->m->cfg;
    const gp_ctx_params *p = &x->p;
    /* a query sees at most n_ctx keys, or max_kv_size with a rotating cache (positions grow without bound) */
    const int32_t seen = p->max_kv_size > 0 ? p->max_kv_size : p->n_ctx, q = c->n_heads * c->head_dim;
    const int32_t cols = c->n_ff > c->n_embd ? c->n_ff : c->n_embd; /* down's input, else the hidden size */
    const gp_ws_params wp = {.n_threads = p->n_threads, .max_tokens = p->prefill_chunk, .max_keys = seen,
                             .head_dim = c->head_dim, .max_lora_rank = lora_rank, .compute = p->compute,
                             .max_cols = cols > q ? cols : q, .n_heads = c->n_heads, .n_kv = c->n_kv_heads};
    return wp;
}

/* The workspace and the activation buffers of one chunk, from the context's backend. */
static gp_status alloc_activations(gp_ctx *x) {
    const gp_config *c = &x->m->cfg;
    const gp_ctx_params *p = &x->p;
    gp_backend *be = x->be;
    const gp_ws_params wp = gp_ctx_ws_params(x, x->ws_lora_rank);
    gp_status s = be->ops->ws_init(be, &wp, &x->ws);
    if (s) return s;
    size_t C = (size_t)p->prefill_chunk, E = (size_t)c->n_embd, Q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t KV = (size_t)c->n_kv_heads * (size_t)c->head_dim, F = (size_t)c->n_ff, V = (size_t)c->n_vocab;
    size_t H = E > Q ? E : Q;
    /* a device computes the logits in blocks of rows (64 MB) and reads each back; the CPU writes them in place */
    size_t lr = V * sizeof(float) < (64u << 20) ? (64u << 20) / (V * sizeof(float)) : 1;
    x->logit_rows = be->host_memory || lr > C ? (int32_t)C : (int32_t)lr;
    float **bufs[] = {&x->x, &x->h, &x->q, &x->k, &x->v, &x->att, &x->gate, &x->up, &x->logits};
    const size_t rows[] = {C * E, C * H, C * Q, C * KV, C * KV, C * Q, C * F, C * F,
                           be->host_memory ? 0 : (size_t)x->logit_rows * V};
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i]) continue;
        size_t n;
        if (!gp_mul_ok(rows[i], sizeof(float), &n) || !(*bufs[i] = be->ops->alloc(be, n)))
            return gp_set_error(GP_ERR_NOMEM, "gp_ctx_init: out of %s memory for activations (prefill_chunk %d, "
                                "n_ctx %d)", be->name, p->prefill_chunk, p->n_ctx);
        total += n;
    }
    if (!(x->host_logits = be->ops->host_alloc(be, V * sizeof(float))))
        return gp_set_error(GP_ERR_NOMEM, "gp_ctx_init: out of host memory for the logits (%zu floats)", V);
    x->scratch_bytes = total + sizeof(float) * (uint64_t)x->ws->n_threads * ((uint64_t)wp.max_keys + 2 * (uint64_t)c->head_dim);
    return GP_OK;
}

gp_status gp_ctx_init(const gp_model *m, const gp_ctx_params *params, gp_ctx **out) {
    if (!out) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: out is NULL");
    *out = NULL;
    if (!m) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: model is NULL");
    gp_ctx_params p = params ? *params : gp_ctx_default_params();
    const gp_config *c = &m->cfg;
    if (p.keep == -1) p.keep = p.max_kv_size > 0 ? (p.max_kv_size > 4 ? 4 : p.max_kv_size - 1) : 0;
    gp_status ps = gp_ctx_params_check(&p); /* ranges first: nothing below may overflow (house, issue 17.9) */
    if (ps) return ps;
    if (p.n_ctx < 0 || p.n_threads < 0 || p.prefill_chunk < 0 || p.max_kv_size < 0 || p.keep < 0 ||
        p.quantized_kv_start < 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: sizes must be >= 0");
    if (p.compute != GP_COMPUTE_F32 && p.compute != GP_COMPUTE_BF16)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: field 'compute' = %d is not GP_COMPUTE_F32 or "
                            "GP_COMPUTE_BF16", (int)p.compute);
    if (p.device != GP_DEVICE_CPU && p.device != GP_DEVICE_CUDA)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: device %d is not GP_DEVICE_CPU or GP_DEVICE_CUDA",
                            p.device);
    if (p.keep > 0 && p.max_kv_size == 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_init: keep = %d needs a rotating cache (max_kv_size > 0)",
                            p.keep);
    if (p.n_ctx == 0) p.n_ctx = c->n_ctx_train;
    if (p.n_threads == 0) p.n_threads = online_cpus();
    if (p.prefill_chunk == 0) p.prefill_chunk = 512;
    if (p.prefill_chunk > p.n_ctx) p.prefill_chunk = p.n_ctx;
    if (p.kv_group_size == 0) p.kv_group_size = 64;
    gp_ctx *x = gp_calloc(1, sizeof *x);
    if (!x) return GP_ERR_NOMEM;
    x->m = m;
    x->p = p;
    gp_status s = gp_model_bound(m, p.device, &x->wb);
    if (s) {
        free(x);
        return s;
    }
    x->be = x->wb->be;
    x->layers = x->wb->layers;
    x->ws_lora_rank = m->max_lora_rank;
    snprintf(x->lora_desc, sizeof x->lora_desc, "none");
    x->steer.be = x->be;
    /* kv_bits 0: float32 rows, but bfloat16 ones in the bf16 mode (which rounds keys and values to bfloat16 before
     * they are stored: the same values in half the bytes; CUDA's tensor-core decode and the CPU's scores16 / pv16
     * read them as they are: BENCHMARKS.md); 32: float32 rows (the cache's 0) */
    const int32_t bits = p.kv_bits == 0 ? (p.compute == GP_COMPUTE_BF16 ? 16 : 0) : p.kv_bits == 32 ? 0 : p.kv_bits;
    /* min_slots: on a GPU the cache grows to 256 positions at once, unless a memory limit is set.  (Each growth
     * moves the buffers, so the decode step's CUDA graphs are captured again: grown by doubling from 1, a fresh
     * context's first 64 tokens paid for 5 of them, about 2.5 ms each on an H200: BENCHMARKS.md.) */
    const int32_t min_slots = p.device == GP_DEVICE_CUDA && !p.mem_limit_bytes ? 256 : 0;
    x->kvp = (gp_kv_params){.n_ctx = p.n_ctx, .max_kv_size = p.max_kv_size, .keep = p.keep, .bits = bits,
                            .group = p.kv_group_size, .q_start = p.quantized_kv_start, .min_slots = min_slots};
    gp_cache *first;
    s = new_cache(x, "default", &first);
    if (s || (s = add_cache(x, "default", first))) {
        if (!s) gp_cache_destroy(first);
        gp_ctx_free(x);
        return s;
    }
    if ((s = alloc_activations(x))) {
        gp_ctx_free(x);
        return s;
    }
    *out = x;
    return GP_OK;
}

void gp_ctx_free(gp_ctx *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n_caches; i++) gp_cache_destroy(c->caches[i]);
    free(c->caches);
    gp_backend *be = c->be;
    float *bufs[] = {c->x, c->h, c->q, c->k, c->v, c->att, c->gate, c->up, c->logits};
    for (size_t i = 0; be && i < sizeof bufs / sizeof bufs[0]; i++) be->ops->dealloc(be, bufs[i]);
    if (be) be->ops->host_free(be, c->host_logits);
    if (c->ws) be->ops->ws_free(c->ws);
    gp_steer_state_clear(&c->steer);
    free(c->own_layers);
    free(c->lora_terms);
    free(c);
}

float *gp_ctx_logits_buffer(gp_ctx *c) { return c ? c->host_logits : NULL; }

void gp_ctx_reset(gp_ctx *c) {
    if (!c) return;
    gp_cache_clear(gp_ctx_cache(c));
    c->steer.step = 0;
}

int32_t gp_ctx_n_past(const gp_ctx *c) { return c ? gp_cache_n_past(gp_ctx_cache(c)) : 0; }

const int32_t *gp_ctx_tokens(const gp_ctx *c, int32_t *n) {
    if (!c) {
        if (n) *n = 0;
        return NULL;
    }
    const gp_cache *kc = gp_ctx_cache(c);
    if (n) *n = gp_cache_n_past(kc);
    return gp_cache_ids(kc);
}

uint64_t gp_ctx_kv_bytes(const gp_ctx *c) {
    uint64_t b = 0;
    for (int32_t i = 0; c && i < c->n_caches; i++) b += gp_cache_bytes(c->caches[i]);
    return b;
}

gp_status gp_ctx_memory(const gp_ctx *c, gp_mem_info *info) {
    if (!c || !info) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_memory: bad arguments");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    info->weight_bytes = gp_model_weight_bytes(c->m);
    info->kv_bytes = gp_ctx_kv_bytes(c);
    info->scratch_bytes = c->scratch_bytes;
    info->peak_rss_bytes = (uint64_t)ru.ru_maxrss * 1024u;
    return GP_OK;
}

/* Makes the current cache ready to take positions up to n_total - 1 in chunks of prefill_chunk (growing its rings,
 * unsharing forked buffers) within mem_limit_bytes.  After GP_OK, the forward's cache writes cannot fail. */
static gp_status ctx_reserve(gp_ctx *c, int32_t n_total) {
    gp_cache *kc = gp_ctx_cache(c);
    if (c->p.mem_limit_bytes) {
        const uint64_t now = gp_ctx_kv_bytes(c), mine = gp_cache_bytes(kc), after = gp_cache_bytes_for(kc, n_total);
        if (now - mine + after + c->scratch_bytes > c->p.mem_limit_bytes)
            return gp_set_error(GP_ERR_NOMEM,
                                "KV cache '%s': %d positions need %.1f MB of caches + scratch, over the context's "
                                "memory limit of %.1f MB",
                                gp_cache_name(kc), n_total, (double)(now - mine + after + c->scratch_bytes) / 1e6,
                                (double)c->p.mem_limit_bytes / 1e6);
    }
    return gp_cache_reserve(kc, n_total, c->p.prefill_chunk);
}

gp_status gp_ctx_eval(gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *opts, float *logits) {
    if (!c || (!ids && n > 0) || n < 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: bad arguments");
    if (n == 0) return GP_OK;
    const gp_config *cfg = &c->m->cfg;
    gp_cache *kc = gp_ctx_cache(c);
    const int32_t n_past = gp_cache_n_past(kc);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->n_vocab)
            return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: token id %d at index %d is outside the vocabulary [0, %d)",
                                ids[i], i, cfg->n_vocab);
    if (c->kvp.max_kv_size == 0 && (int64_t)n_past + n > c->p.n_ctx)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: %d cached + %d new positions exceed n_ctx = %d", n_past, n,
                            c->p.n_ctx);
    if ((int64_t)n_past + n > INT32_MAX / 2)
        return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: position counter would overflow");
    if (opts && opts->n_hidden_layers > 0) {
        if (!opts->hidden_layers || !opts->hidden_out)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval: hidden_layers and hidden_out are required");
        for (int32_t j = 0; j < opts->n_hidden_layers; j++)
            if (opts->hidden_layers[j] < 0 || opts->hidden_layers[j] > cfg->n_layers)
                return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval: hidden layer index %d outside [0, %d]",
                                    opts->hidden_layers[j], cfg->n_layers);
    }
    gp_status s = ctx_reserve(c, n_past + n);
    if (s || (s = gp_cache_begin(kc, ids, n, c->steer.epoch))) return s;
    const int all = opts && opts->all_logits;
    for (int32_t t0 = 0; t0 < n; t0 += c->p.prefill_chunk) {
        const int32_t cn = n - t0 < c->p.prefill_chunk ? n - t0 : c->p.prefill_chunk;
        float *lg = NULL;
        if (logits && all) lg = logits + (size_t)t0 * cfg->n_vocab;
        else if (logits && t0 + cn == n) lg = logits;
        if ((s = gp_forward_chunk(c, ids + t0, cn, opts, t0, n, lg, all))) return s;
    }
    c->steer.step++;
    return GP_OK;
}

gp_status gp_ctx_trim(gp_ctx *c, int32_t n) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_trim: ctx is NULL");
    return gp_cache_trim(gp_ctx_cache(c), n);
}

gp_status gp_ctx_prefill(gp_ctx *c, const int32_t *ids, int32_t n, float *logits, int32_t *n_reused) {
    if (!c || !ids || n <= 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_prefill: ids and n > 0 are required");
    gp_cache *kc = gp_ctx_cache(c);
    c->steer.step = 0; /* a new request: its prefill is steering step 0 */
    /* cached positions are reusable only if computed under the current hooks, and those do not vary by step */
    int reusable = gp_cache_reusable(kc, c->steer.epoch);
    for (int32_t i = 0; i < c->steer.n_hooks; i++)
        if (c->steer.hooks[i].h.schedule != GP_STEER_CONSTANT) reusable = 0;
    const int32_t held = gp_cache_n_past(kc), *have = gp_cache_ids(kc);
    int32_t k = 0;
    while (reusable && k < held && k < n && have[k] == ids[k]) k++;
    if (k == n) k--; /* evaluate at least the last token to get its logits */
    if (k < held && gp_cache_trim(kc, k) != GP_OK) k = 0;
    if (k == 0) gp_cache_clear(kc);
    if (n_reused) *n_reused = k;
    return gp_ctx_eval(c, ids + k, n - k, NULL, logits);
}

/* ---- named caches ---- */

static int32_t find_cache(const gp_ctx *c, const char *name) {
    for (int32_t i = 0; i < c->n_caches; i++)
        if (!strcmp(gp_cache_name(c->caches[i]), name)) return i;
    return -1;
}

static gp_status check_name(const char *name) {
    if (!name || !*name || strlen(name) >= 64)
        return gp_set_error(GP_ERR_INVALID_ARG, "cache names must have 1 to 63 characters");
    return GP_OK;
}

gp_status gp_ctx_cache_select(gp_ctx *c, const char *name) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_cache_select: ctx is NULL");
    gp_status s = check_name(name);
    if (s) return s;
    int32_t i = find_cache(c, name);
    if (i < 0) {
        gp_cache *kc;
        if ((s = new_cache(c, name, &kc))) return s;
        if ((s = add_cache(c, name, kc))) {
            gp_cache_destroy(kc);
            return s;
        }
        i = c->n_caches - 1;
    }
    c->cur = i;
    return GP_OK;
}

gp_status gp_ctx_cache_fork(gp_ctx *c, const char *src, const char *dst) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_cache_fork: ctx is NULL");
    gp_status s = check_name(dst);
    if (s) return s;
    int32_t i = src ? find_cache(c, src) : -1;
    if (i < 0) return gp_set_error(GP_ERR_MISSING, "gp_ctx_cache_fork: no cache named '%s'", src ? src : "(null)");
    if (find_cache(c, dst) >= 0) return gp_set_error(GP_ERR_STATE, "gp_ctx_cache_fork: cache '%s' already exists", dst);
    gp_cache *kc;
    if ((s = gp_cache_fork(c->caches[i], dst, &kc))) return s;
    if ((s = add_cache(c, dst, kc))) gp_cache_destroy(kc);
    return s;
}

gp_status gp_ctx_cache_drop(gp_ctx *c, const char *name) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_cache_drop: ctx is NULL");
    int32_t i = name ? find_cache(c, name) : -1;
    if (i < 0) return gp_set_error(GP_ERR_MISSING, "gp_ctx_cache_drop: no cache named '%s'", name ? name : "(null)");
    if (i == c->cur) return gp_set_error(GP_ERR_STATE, "gp_ctx_cache_drop: '%s' is the current cache", name);
    gp_cache_destroy(c->caches[i]);
    memmove(c->caches + i, c->caches + i + 1, (size_t)(c->n_caches - i - 1) * sizeof *c->caches);
    c->n_caches--;
    if (c->cur > i) c->cur--;
    return GP_OK;
}

const char *gp_ctx_cache_name(const gp_ctx *c) { return c ? gp_cache_name(gp_ctx_cache(c)) : NULL; }

/* ---- cache files ---- */

/* Model fingerprint: config.json bytes + every tensor's name, dtype, shape and bytes.  Computed once per model. */
static uint64_t model_fingerprint(const gp_model *cm) {
    gp_model *m = (gp_model *)cm; /* the fingerprint is a lazily computed, immutable property of the model */
    pthread_mutex_lock(&m->fp_lock);
    if (!m->fingerprint) {
        char *cfg = gp_path_join(m->dir, "config.json");
        uint64_t h = gp_hash_file(cfg);
        free(cfg);
        for (int32_t i = 0; i < gp_st_count(m->st); i++) {
            const gp_tensor_view *t = gp_st_at(m->st, i);
            h = gp_hash_bytes(h, t->name, strlen(t->name));
            h = gp_hash_bytes(h, t->shape, sizeof t->shape);
            h = gp_hash_bytes(h, &t->dtype, sizeof t->dtype);
            h = gp_hash_bytes(h, t->data, t->nbytes);
        }
        m->fingerprint = h ? h : 1;
    }
    uint64_t fp = m->fingerprint;
    pthread_mutex_unlock(&m->fp_lock);
    return fp;
}

static uint64_t tokenizer_hash(const gp_model *m) {
    char *p = gp_path_join(m->dir, "tokenizer.json");
    uint64_t h = gp_file_exists(p) ? gp_hash_file(p) : 0;
    free(p);
    return h;
}

/* The residual hooks as "layer:alpha:schedule:steps:vectorhash" entries ("" when none). */
static void steer_desc(const gp_ctx *c, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < c->steer.n_hooks && k + 96 < cap; i++) {
        const gp_steer_hook *h = &c->steer.hooks[i].h;
        uint64_t vh = gp_hash_bytes(0, c->steer.hooks[i].vec, (size_t)c->m->cfg.n_embd * sizeof(float));
        k += (size_t)snprintf(buf + k, cap - k, "%s%d:%.9g:%d:%d:%016llx", i ? "," : "", h->layer, (double)h->alpha,
                              (int)h->schedule, h->steps, (unsigned long long)vh);
    }
}

typedef struct load_check {
    char fp[32], th[32];
    int32_t n_vocab;
} load_check;

static gp_status check_file(const gp_st_set *st, const char *path, void *ud) {
    const load_check *lc = ud;
    const char *fp = gp_st_metadata(st, "model_fingerprint"), *th = gp_st_metadata(st, "tokenizer_hash");
    if (!fp || strcmp(fp, lc->fp))
        return gp_set_error(GP_ERR_STATE, "%s: metadata 'model_fingerprint' = %s belongs to another model (this one is %s)",
                            path, fp ? fp : "(none)", lc->fp);
    if (!th || strcmp(th, lc->th))
        return gp_set_error(GP_ERR_STATE, "%s: metadata 'tokenizer_hash' = %s differs from this model's %s", path,
                            th ? th : "(none)", lc->th);
    const gp_tensor_view *t = gp_st_find(st, "token_ids"); /* every id must be one of this vocabulary's */
    if (t && t->dtype == GP_DTYPE_I32)
        for (uint64_t i = 0; i < t->n_elems; i++) {
            int32_t id;
            memcpy(&id, (const char *)t->data + 4 * i, 4);
            if (id < 0 || id >= lc->n_vocab)
                return gp_set_error(GP_ERR_FORMAT, "%s: tensor 'token_ids': id %d at position %llu is outside the "
                                    "vocabulary (%d)", path, (int)id, (unsigned long long)i, (int)lc->n_vocab);
        }
    return GP_OK;
}

gp_status gp_ctx_cache_save(gp_ctx *c, const char *path) {
    if (!c || !path) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_cache_save: bad arguments");
    load_check lc = {.n_vocab = c->m->cfg.n_vocab};
    snprintf(lc.fp, sizeof lc.fp, "%016llx", (unsigned long long)model_fingerprint(c->m));
    snprintf(lc.th, sizeof lc.th, "%016llx", (unsigned long long)tokenizer_hash(c->m));
    char steer[1024];
    steer_desc(c, steer, sizeof steer);
    const char *keys[] = {"model_fingerprint", "tokenizer_hash", "architecture", "steering_hooks", "logit_bias_vector",
                          "lora"};
    const char *vals[] = {lc.fp, lc.th, c->m->cfg.arch_name, steer, c->steer.bias ? "set" : "none", c->lora_desc};
    return gp_cache_save(gp_ctx_cache(c), path, keys, vals, 6);
}

gp_status gp_ctx_cache_load(gp_ctx *c, const char *path) {
    if (!c || !path) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_cache_load: bad arguments");
    load_check lc = {.n_vocab = c->m->cfg.n_vocab};
    snprintf(lc.fp, sizeof lc.fp, "%016llx", (unsigned long long)model_fingerprint(c->m));
    snprintf(lc.th, sizeof lc.th, "%016llx", (unsigned long long)tokenizer_hash(c->m));
    const gp_config *cfg = &c->m->cfg;
    gp_cache *kc;
    gp_status s = gp_cache_load(path, gp_cache_name(gp_ctx_cache(c)), &c->kvp, c->be, cfg->n_layers,
                                cfg->n_kv_heads * cfg->head_dim, cfg->window, check_file, &lc, &kc);
    if (s) return s;
    /* positions computed under other steering hooks than the context's current ones are never reused */
    char now[1024];
    steer_desc(c, now, sizeof now);
    gp_st_set *st;
    const char *was = NULL;
    int mixed = 1;
    if (gp_st_open_file(path, &st) == GP_OK) {
        was = gp_st_metadata(st, "steering_hooks");
        const char *lora = gp_st_metadata(st, "lora"); /* built under other adapters: never reused */
        mixed = !was || strcmp(was, now) || !lora || strcmp(lora, c->lora_desc);
        gp_st_close(st);
    }
    gp_cache_set_provenance(kc, c->steer.epoch, mixed);
    gp_cache_destroy(c->caches[c->cur]);
    c->caches[c->cur] = kc;
    return GP_OK;
}

/* ---- steering ---- */

gp_status gp_ctx_steer_add(gp_ctx *c, const gp_steer_hook *hook) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_steer_add: ctx is NULL");
    return gp_steer_state_add(&c->steer, hook, c->m->cfg.n_layers, c->m->cfg.n_embd);
}

void gp_ctx_steer_clear(gp_ctx *c) {
    if (c) gp_steer_state_clear(&c->steer);
}

gp_status gp_ctx_logit_bias_vector(gp_ctx *c, const float *vector, float alpha) {
    if (!c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_logit_bias_vector: ctx is NULL");
    gp_backend *be = c->be;
    be->ops->dealloc(be, c->steer.bias);
    c->steer.bias = NULL;
    if (!vector) return GP_OK;
    if (!isfinite(alpha)) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_logit_bias_vector: alpha must be finite");
    for (int32_t i = 0; i < c->m->cfg.n_embd; i++)
        if (!isfinite(vector[i]))
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_logit_bias_vector: vector entry %d is not finite", (int)i);
    const int32_t V = c->m->cfg.n_vocab, E = c->m->cfg.n_embd;
    float *host = gp_malloc((size_t)V, sizeof(float));
    float *b = be->ops->alloc(be, (size_t)V * sizeof(float)), *v = be->ops->alloc(be, (size_t)E * sizeof(float));
    if (!host || !b || !v) {
        free(host);
        be->ops->dealloc(be, b);
        be->ops->dealloc(be, v);
        return GP_ERR_NOMEM;
    }
    be->ops->upload(be, v, vector, (size_t)E * sizeof(float));
    be->ops->linear(c->ws, b, v, &c->wb->lm_head, 1); /* W [V, E] @ v [E] */
    gp_status s = be->ops->finish(c->ws);
    if (s) {
        free(host);
        be->ops->dealloc(be, b);
        be->ops->dealloc(be, v);
        return s;
    }
    be->ops->download(be, host, b, (size_t)V * sizeof(float));
    for (int32_t i = 0; i < V; i++) host[i] *= alpha;
    be->ops->upload(be, b, host, (size_t)V * sizeof(float));
    free(host);
    be->ops->dealloc(be, v);
    c->steer.bias = b;
    return GP_OK;
}

/* ---- internal accessors ---- */

const gp_model *gp_ctx_model(const gp_ctx *c) { return c ? c->m : NULL; }
int32_t gp_ctx_layer_cap(const gp_ctx *c, int32_t l) { return gp_cache_layer_cap(gp_ctx_cache(c), l); }

gp_status gp_ctx_eval_batch(gp_ctx *const *cs, int32_t n, const int32_t *ids, float *logits) {
    if (!cs || !ids || !logits || n <= 0 || !cs[0] || n > cs[0]->p.prefill_chunk)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval_batch: bad arguments");
    const gp_ctx *c0 = cs[0];
    for (int32_t i = 0; i < n; i++) {
        const gp_ctx *c = cs[i];
        if (!c || c->m != c0->m || memcmp(&c->p, &c0->p, sizeof c->p) != 0 || strcmp(c->lora_desc, c0->lora_desc))
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval_batch: context %d differs from context 0", (int)i);
        for (int32_t j = 0; j < i; j++)
            if (cs[j] == c) return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_eval_batch: context %d repeats", (int)i);
        if (ids[i] < 0 || ids[i] >= c->m->cfg.n_vocab)
            return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval_batch: token id %d of sequence %d is outside the vocabulary",
                                ids[i], (int)i);
        const int32_t n_past = gp_cache_n_past(gp_ctx_cache(c));
        if ((c->kvp.max_kv_size == 0 && (int64_t)n_past + 1 > c->p.n_ctx) || n_past + 1 > INT32_MAX / 2)
            return gp_set_error(GP_ERR_RANGE, "gp_ctx_eval_batch: sequence %d's context is full", (int)i);
    }
    for (int32_t i = 0; i < n; i++) {
        gp_cache *kc = gp_ctx_cache(cs[i]);
        gp_status s = ctx_reserve(cs[i], gp_cache_n_past(kc) + 1);
        if (!s) s = gp_cache_begin(kc, ids + i, 1, cs[i]->steer.epoch);
        if (s) return s; /* (earlier sequences keep their reservation; nothing was evaluated) */
    }
    gp_status s = gp_forward_batch(cs, n, ids, logits);
    for (int32_t i = 0; i < n; i++) cs[i]->steer.step++;
    return s;
}
