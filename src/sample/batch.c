/* batch.c — gp_generate_batch: several sequences, each on its own gp_ctx of one model, stepped in lockstep through
 * the same per-sequence state machine as gp_generate (loop.c), so every sequence's tokens and logits are those of
 * running it alone.  Each decode step evaluates all pending sequences in one forward (gp_ctx_eval_batch: every
 * linear reads the weights once for all rows; attention per sequence on its own cache); contexts that cannot share
 * a step (different params, a full context) are evaluated one by one. */
#include "model/ctx.h"
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

/* Scratch of the batched step: up to cap rows. */
typedef struct batch_buf {
    int32_t cap, V;
    gp_ctx **cs;
    int32_t *ids, *who;
    float *logits; /* [cap, V] */
} batch_buf;

/* One forward for the pending sequences who[0..k) (gp_ctx_eval_batch: the weights read once for all rows); returns
 * 0 when it could not run them together (they are then evaluated one by one). */
static int step_together(batch_item *it, batch_buf *b, int32_t k) {
    if (k < 2) return 0;
    for (int32_t j = 0; j < k; j++) {
        b->cs[j] = it[b->who[j]].ce.c;
        b->ids[j] = it[b->who[j]].tok;
    }
    if (gp_ctx_eval_batch(b->cs, k, b->ids, b->logits) != GP_OK) {
        gp_clear_error(); /* a full context or contexts that differ: one by one gives each its own outcome */
        return 0;
    }
    for (int32_t j = 0; j < k; j++) {
        batch_item *x = &it[b->who[j]];
        memcpy(x->q.logits, b->logits + (size_t)j * (size_t)b->V, (size_t)b->V * sizeof(float));
        x->pending = 0; /* the next step's gp_gen_seq_next decides (a failure recorded here ends the sequence) */
        gp_gen_seq_decoded(&x->q, GP_OK);
    }
    return 1;
}

/* Evaluates every pending id (one decode step of the batch), b->cap rows per forward. */
static void batch_step(batch_item *it, int32_t n, batch_buf *b) {
    int32_t k = 0;
    for (int32_t i = 0; i <= n; i++) {
        if (i < n && it[i].pending) b->who[k++] = i;
        if (k == 0 || (i < n && k < b->cap)) continue;
        if (!b->logits || !step_together(it, b, k))
            for (int32_t j = 0; j < k; j++) {
                batch_item *x = &it[b->who[j]];
                gp_status s = x->e.eval(x->e.self, &x->tok, 1, x->q.logits);
                x->pending = 0;
                gp_gen_seq_decoded(&x->q, s);
            }
        k = 0;
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
    const gp_model *m = gp_ctx_model(seqs[0].ctx);
    batch_buf bb = {0};
    bb.V = gp_model_n_vocab(m);
    bb.cap = n < gp_ctx_max_rows(seqs[0].ctx) ? n : gp_ctx_max_rows(seqs[0].ctx);
    bb.cs = gp_calloc((size_t)n, sizeof *bb.cs);
    bb.ids = gp_calloc((size_t)n, sizeof *bb.ids);
    bb.who = gp_calloc((size_t)n + 1, sizeof *bb.who);
    bb.logits = bb.cap > 1 ? gp_malloc((size_t)bb.cap * (size_t)bb.V, sizeof(float)) : NULL;
    if (!bb.cs || !bb.ids || !bb.who) bb.cap = 0;
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
        if (bb.cap > 0) batch_step(it, n, &bb);
        else
            for (int32_t i = 0; i < n; i++)
                if (it[i].pending) {
                    it[i].pending = 0;
                    gp_gen_seq_decoded(&it[i].q, it[i].e.eval(it[i].e.self, &it[i].tok, 1, it[i].q.logits));
                }
    }
    free(bb.cs);
    free(bb.ids);
    free(bb.who);
    free(bb.logits);
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
