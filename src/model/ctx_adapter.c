/* ctx_adapter.c — gp_ctx_set_adapters: a context's LoRA adapters.  The model stays untouched: the context gets a
 * copy of the model's layers whose targeted linears list the adapters' low-rank terms (scale = adapter scale x the
 * caller's), the workspace grows its LoRA scratch when needed, and a change of the set bumps the provenance epoch so
 * that positions computed under the old set are never reused (cache files record the set as metadata "lora"). */
#include "model/adapter.h"
#include "model/ctx.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ADAPTERS 16

/* "none" or "id:scale,..." of a set. */
static void describe(gp_adapter *const *ad, const float *scales, int32_t n, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, n ? "" : "none");
    for (int32_t i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%016llx:%.9g", i ? "," : "", (unsigned long long)ad[i]->id,
                              (double)(ad[i]->scale * (scales ? scales[i] : 1.0f)));
}

/* The workspace with LoRA scratch for `rank` (sum of ranks of one linear), replacing the context's. */
static gp_status grow_ws(gp_ctx *c, int32_t rank) {
    if (rank <= c->ws_lora_rank) return GP_OK;
    const gp_ws_params wp = gp_ctx_ws_params(c, rank);
    gp_ws *ws;
    gp_status s = c->be->ops->ws_init(c->be, &wp, &ws);
    if (s) return s;
    c->be->ops->ws_free(c->ws);
    c->ws = ws;
    c->ws_lora_rank = rank;
    return GP_OK;
}

/* own [n_layers] = the model's layers with every term of ad[0..n) listed in its linear (terms storage *out). */
static gp_status build_layers(gp_ctx *c, gp_adapter *const *ad, const float *scales, int32_t n, gp_layer **own,
                              gp_lora **out, int32_t *max_rank) {
    const gp_model *m = c->m;
    const int32_t NL = m->cfg.n_layers;
    int32_t total = 0;
    for (int32_t i = 0; i < n; i++) total += ad[i]->n_terms;
    int32_t *count = gp_calloc((size_t)NL * GP_ADAPTER_N_MODULES, sizeof *count);
    *own = gp_malloc((size_t)NL, sizeof **own);
    *out = gp_calloc((size_t)total + 1, sizeof **out);
    if (!count || !*own || !*out) {
        free(count);
        return GP_ERR_NOMEM;
    }
    memcpy(*own, c->wb->layers, (size_t)NL * sizeof **own);
    for (int32_t i = 0; i < n; i++) /* terms per linear, then each linear's slice of *out */
        for (int32_t t = 0; t < ad[i]->n_terms; t++) count[ad[i]->terms[t].layer * GP_ADAPTER_N_MODULES + ad[i]->terms[t].which]++;
    gp_lora *next = *out;
    *max_rank = 0;
    for (int32_t j = 0; j < NL * GP_ADAPTER_N_MODULES; j++) {
        gp_linear *L = (gp_linear *)((char *)&(*own)[j / GP_ADAPTER_N_MODULES] + GP_ADAPTER_MODULES[j % GP_ADAPTER_N_MODULES].off);
        L->lora = next;
        L->n_lora = 0;
        next += count[j];
    }
    for (int32_t i = 0; i < n; i++) {
        const gp_adapter_term *terms; /* the adapter's terms on the context's backend */
        gp_status s = gp_adapter_terms(ad[i], c->be, &terms);
        if (s) {
            free(count);
            return s;
        }
        for (int32_t t = 0; t < ad[i]->n_terms; t++) {
            const gp_adapter_term *T = &terms[t];
            gp_linear *L = (gp_linear *)((char *)&(*own)[T->layer] + GP_ADAPTER_MODULES[T->which].off);
            ((gp_lora *)L->lora)[L->n_lora++] = (gp_lora){T->a, T->b, ad[i]->scale * (scales ? scales[i] : 1.0f)};
        }
    }
    for (int32_t j = 0; j < NL * GP_ADAPTER_N_MODULES; j++) {
        const gp_linear *L = (const gp_linear *)((char *)&(*own)[j / GP_ADAPTER_N_MODULES] + GP_ADAPTER_MODULES[j % GP_ADAPTER_N_MODULES].off);
        int32_t r = 0;
        for (int32_t k = 0; k < L->n_lora; k++) r += (int32_t)L->lora[k].a.rows;
        *max_rank = r > *max_rank ? r : *max_rank;
    }
    free(count);
    return GP_OK;
}

gp_status gp_ctx_set_adapters(gp_ctx *c, gp_adapter *const *adapters, const float *scales, int32_t n) {
    if (!c || n < 0 || n > MAX_ADAPTERS || (n > 0 && !adapters))
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_set_adapters: bad arguments (n = %d, at most %d)", (int)n,
                            MAX_ADAPTERS);
    for (int32_t i = 0; i < n; i++)
        if (!adapters[i] || adapters[i]->m != c->m)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_ctx_set_adapters: adapter %d %s", (int)i,
                                adapters[i] ? "was loaded for another model" : "is NULL");
    char desc[sizeof c->lora_desc];
    describe(adapters, scales, n, desc, sizeof desc);
    gp_layer *own = NULL;
    gp_lora *terms = NULL;
    int32_t rank = 0;
    gp_status s = n ? build_layers(c, adapters, scales, n, &own, &terms, &rank) : GP_OK;
    if (!s) s = grow_ws(c, rank);
    if (s) {
        free(own), free(terms);
        return s;
    }
    free(c->own_layers), free(c->lora_terms);
    c->own_layers = own;
    c->lora_terms = terms;
    c->layers = own ? own : c->wb->layers;
    if (strcmp(desc, c->lora_desc)) c->steer.epoch++; /* the caches' positions were computed under the old set */
    memcpy(c->lora_desc, desc, sizeof desc);
    return GP_OK;
}
