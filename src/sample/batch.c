/* batch.c — gp_generate_batch: several sequences, each on its own gp_ctx of one model, stepped in lockstep through
 * the same per-sequence state machine as gp_generate (loop.c), so every sequence's tokens and logits are those of
 * running it alone.  Today each step evaluates the sequences one after the other (one pass over the weights per
 * sequence); a batched forward that reads the weights once per step for all of them plugs in at batch_step. */
#include "sample/sample.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first failure's index and message (later failures overwrite the thread's message). */
typedef struct first_fail {
    int32_t idx;
    gp_status s;
    char msg[512];
} first_fail;

static void note_fail(first_fail *f, int32_t i, gp_status s) {
    if (s == GP_OK || f->idx >= 0) return;
    f->idx = i;
    f->s = s;
    snprintf(f->msg, sizeof f->msg, "%s", gp_errmsg());
}

typedef struct batch_item {
    gp_ctx_engine ce;
    gp_gen_engine e;
    gp_gen_seq q;
    int live;    /* begun and not ended */
    int pending; /* has an id to evaluate this step */
    int32_t tok;
} batch_item;

static gp_status check_seqs(const gp_batch_seq *seqs, int32_t n) {
    if (!seqs || n <= 0) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_batch: no sequences (n = %d)", (int)n);
    const gp_model *m = seqs[0].ctx ? gp_ctx_model(seqs[0].ctx) : NULL;
    for (int32_t i = 0; i < n; i++) {
        if (!seqs[i].ctx || !seqs[i].cfg)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_batch: sequence %d has no %s", (int)i,
                                seqs[i].ctx ? "cfg" : "context");
        if (gp_ctx_model(seqs[i].ctx) != m)
            return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_batch: sequence %d's context is of another model",
                                (int)i);
        for (int32_t j = 0; j < i; j++)
            if (seqs[j].ctx == seqs[i].ctx)
                return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_batch: sequences %d and %d share a context "
                                    "(each sequence needs its own)", (int)j, (int)i);
    }
    return GP_OK;
}

/* Evaluates every pending id (one decode step of the batch). */
static void batch_step(batch_item *it, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (!it[i].pending) continue;
        it[i].pending = 0;
        gp_status s = it[i].e.eval(it[i].e.self, &it[i].tok, 1, it[i].q.logits);
        it[i].pending = gp_gen_seq_decoded(&it[i].q, s);
    }
}

gp_status gp_generate_batch(const gp_batch_seq *seqs, int32_t n, gp_gen_result *results, gp_status *status) {
    if (!results) return gp_set_error(GP_ERR_INVALID_ARG, "gp_generate_batch: results is NULL");
    gp_status s = check_seqs(seqs, n);
    if (s) return s;
    first_fail ff = {-1, GP_OK, ""};
    batch_item *it = gp_calloc((size_t)n, sizeof *it);
    gp_status *st = status ? status : gp_calloc((size_t)n, sizeof *st);
    if (!it || !st) {
        free(it);
        if (!status) free(st);
        return GP_ERR_NOMEM;
    }
    /* prefill every sequence (beam search runs alone, below) */
    for (int32_t i = 0; i < n; i++) {
        const gp_batch_seq *b = &seqs[i];
        memset(&results[i], 0, sizeof results[i]);
        results[i].stop_index = -1;
        st[i] = GP_OK;
        if (b->cfg->num_beams > 1) continue;
        st[i] = gp_beam_check(b->cfg, 1);
        if (!st[i] && b->cfg->num_return_sequences > 1)
            st[i] = gp_set_error(GP_ERR_UNSUPPORTED, "gen_config: field 'num_return_sequences' = %d needs num_beams",
                                 (int)b->cfg->num_return_sequences);
        if (!st[i]) st[i] = gp_ctx_engine_bind(&it[i].ce, &it[i].e, b->ctx, b->cfg);
        if (!st[i]) st[i] = gp_gen_seq_begin(&it[i].q, &it[i].e, b->prompt, b->n_prompt, b->cfg, b->on_token,
                                             b->user_data, &results[i]);
        it[i].live = st[i] == GP_OK;
        note_fail(&ff, i, st[i]);
    }
    /* decode in lockstep: choose every sequence's next id, then evaluate them all */
    for (int any = 1; any;) {
        any = 0;
        for (int32_t i = 0; i < n; i++) {
            if (!it[i].live) continue;
            if (gp_gen_seq_next(&it[i].q, &it[i].tok)) {
                it[i].pending = 1;
                any = 1;
                continue;
            }
            st[i] = gp_gen_seq_end(&it[i].q);
            it[i].live = 0;
            note_fail(&ff, i, st[i]);
        }
        batch_step(it, n);
    }
    for (int32_t i = 0; i < n; i++) {
        gp_ctx_engine_unbind(&it[i].ce);
        if (seqs[i].cfg->num_beams > 1)
            st[i] = gp_generate(seqs[i].ctx, seqs[i].prompt, seqs[i].n_prompt, seqs[i].cfg, seqs[i].on_token,
                                seqs[i].user_data, &results[i]);
        note_fail(&ff, i, st[i]);
    }
    s = ff.idx < 0 ? GP_OK : gp_set_error(ff.s, "gp_generate_batch: sequence %d: %s", (int)ff.idx, ff.msg);
    free(it);
    if (!status) free(st);
    return s;
}
