/* continue.c — gp_generate_continue: the explicit "append" use of a KV cache (the semantic-isolation experiment: a
 * cache per cluster of turns, then a question).  The prompt handed to gp_generate is the cached tokens followed by
 * the new ids, so the prefix reuse of gp_ctx_prefill keeps every cached position and only the new ids are
 * evaluated; results are identical to generating from the concatenated prompt. */
#include "util/util.h"

#include <string.h>

gp_status gp_generate_continue(gp_ctx *c, const int32_t *ids, int32_t n_ids, const gp_gen_config *cfg,
                               gp_token_cb on_token, void *user_data, gp_gen_result *result, int32_t *n_cached) {
    if (!c || !ids || n_ids <= 0)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_continue: a context and n_ids > 0 ids are required");
    int32_t nc = 0;
    const int32_t *cached = gp_ctx_tokens(c, &nc);
    if (n_cached) *n_cached = nc;
    if (nc > INT32_MAX - n_ids) return gp_set_error(GP_ERR_NOMEM, "gp_generate_continue: %d cached + %d ids overflows", nc, n_ids);
    int32_t *all = gp_malloc((size_t)nc + (size_t)n_ids, sizeof *all);
    if (!all) return GP_ERR_NOMEM;
    if (nc) memcpy(all, cached, (size_t)nc * sizeof *all);
    memcpy(all + nc, ids, (size_t)n_ids * sizeof *all);
    gp_status s = gp_generate(c, all, nc + n_ids, cfg, on_token, user_data, result);
    gp_free(all);
    return s;
}
