/* test_batch.c — gp_generate_batch is batch-invariant: every sequence's tokens, text and every step's logits are
 * bit-identical to running it alone with gp_generate, over mixed prompt lengths, different configs (greedy,
 * repetition penalty, seeded sampling) and sequences finishing at different steps, with 1 and 2 threads; bad batches
 * are refused naming the sequence. */
#include "test.h"

#include "fixtures.h"

#include <stdlib.h>
#include <string.h>

enum { NSEQ = 4, MAXSTEP = 40 };

/* A caller logits processor that records the scores it sees (with no other processor active they are the raw
 * logits) for every step. */
typedef struct rec {
    float *steps; /* [MAXSTEP, V] */
    int n, V;
} rec;

static gp_status record(const int32_t *ids, int32_t n_ids, float *scores, int32_t n_vocab, void *ud) {
    rec *r = ud;
    if (r->n < MAXSTEP) memcpy(r->steps + (size_t)r->n * (size_t)n_vocab, scores, (size_t)n_vocab * sizeof(float));
    r->n++;
    return GP_OK;
}

static const int32_t P0[] = {1, 4205, 16334, 20084, 28747, 13}, P1[] = {1, 450}, P2[] = {1, 22172, 29901, 13, 3869, 29892, 590, 16780, 29892, 4207, 29892, 322},
                     P3[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
static const int32_t *const PROMPTS[NSEQ] = {P0, P1, P2, P3};
static const int32_t NP[NSEQ] = {6, 2, 12, 21};

static void make_cfg(const gp_model *m, int i, gp_gen_config *g, gp_logits_processor *lp, rec *r) {
    *g = gp_model_gen_config(m);
    g->do_sample = 0;
    g->ignore_eos = 1;
    g->max_new_tokens = 8 + 9 * i; /* finishing at different steps: 8, 17, 26, 35 */
    if (i == 1) g->repetition_penalty = 1.3;
    if (i == 2) {
        g->do_sample = 1;
        g->temperature = 0.8;
        g->seed = 7;
    }
    if (i == 3) g->ignore_eos = 0, g->logprobs = 1, g->top_logprobs = 3;
    lp->fn = record;
    lp->user_data = r;
    g->logits_processors = lp;
    g->n_logits_processors = 1;
}

TEST(batch_bit_identical_to_alone) {
    gp_model *m = fx_load_model("shakespeare-llama", 1);
    if (!m) return;
    const int V = gp_model_n_vocab(m);
    rec alone[NSEQ], inb[NSEQ];
    gp_gen_result ra[NSEQ], rb[NSEQ];
    gp_gen_config g[NSEQ];
    gp_logits_processor lp[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        alone[i] = (rec){calloc((size_t)MAXSTEP * V, sizeof(float)), 0, V};
        inb[i] = (rec){calloc((size_t)MAXSTEP * V, sizeof(float)), 0, V};
        REQUIRE(alone[i].steps && inb[i].steps);
    }
    /* alone: one context, one sequence at a time, 1 thread */
    gp_ctx_params cp = fx_default_params();
    cp.n_threads = 1;
    gp_ctx *c = NULL;
    CHECK_STATUS(gp_ctx_init(m, &cp, &c), GP_OK);
    for (int i = 0; i < NSEQ && c; i++) {
        make_cfg(m, i, &g[i], &lp[i], &alone[i]);
        CHECK_STATUS(gp_generate(c, PROMPTS[i], NP[i], &g[i], NULL, NULL, &ra[i]), GP_OK);
        gp_ctx_reset(c);
    }
    gp_ctx_free(c);
    for (int threads = 1; threads <= 2; threads++) {
        gp_ctx *cs[NSEQ] = {0};
        gp_batch_seq b[NSEQ];
        gp_status st[NSEQ];
        cp.n_threads = threads;
        for (int i = 0; i < NSEQ; i++) {
            CHECK_STATUS(gp_ctx_init(m, &cp, &cs[i]), GP_OK);
            inb[i].n = 0;
            make_cfg(m, i, &g[i], &lp[i], &inb[i]);
            b[i] = (gp_batch_seq){cs[i], PROMPTS[i], NP[i], &g[i], NULL, NULL};
        }
        CHECK_STATUS(gp_generate_batch(b, NSEQ, rb, st), GP_OK);
        int same_steps = 0, n_steps = 0;
        for (int i = 0; i < NSEQ; i++) {
            CHECK_STATUS(st[i], GP_OK);
            CHECK(fx_first_diff(rb[i].tokens, rb[i].n_tokens, ra[i].tokens, ra[i].n_tokens) < 0);
            CHECK_EQ_INT(rb[i].finish_reason, ra[i].finish_reason);
            CHECK(rb[i].text && ra[i].text && !strcmp(rb[i].text, ra[i].text));
            if (ra[i].logprobs) CHECK(rb[i].logprobs && !memcmp(ra[i].logprobs, rb[i].logprobs,
                                                                 (size_t)ra[i].n_tokens * sizeof(float)));
            CHECK_EQ_INT(inb[i].n, alone[i].n);
            int n = alone[i].n < MAXSTEP ? alone[i].n : MAXSTEP;
            for (int k = 0; k < n; k++, n_steps++)
                same_steps += !memcmp(alone[i].steps + (size_t)k * V, inb[i].steps + (size_t)k * V, (size_t)V * 4);
            gp_gen_result_free(&rb[i]);
            gp_ctx_free(cs[i]);
        }
        NOTE("threads %d: %d/%d steps' logits bit-identical to the sequence alone (tolerance: 0 bits); lengths %d %d "
             "%d %d", threads, same_steps, n_steps, ra[0].n_tokens, ra[1].n_tokens, ra[2].n_tokens, ra[3].n_tokens);
        CHECK_EQ_INT(same_steps, n_steps);
    }
    CHECK(ra[0].n_tokens != ra[3].n_tokens); /* they did finish at different steps */
    for (int i = 0; i < NSEQ; i++) {
        gp_gen_result_free(&ra[i]);
        free(alone[i].steps);
        free(inb[i].steps);
    }
    gp_model_free(m);
}

TEST(batch_refuses_bad_batches) {
    gp_model *m = fx_load_model("shakespeare-llama", 0);
    if (!m) return;
    gp_ctx *c = NULL, *c2 = NULL;
    CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    CHECK_STATUS(gp_ctx_init(m, fx_params(), &c2), GP_OK);
    gp_gen_config g = gp_model_gen_config(m);
    g.max_new_tokens = 2;
    gp_gen_result r[2];
    gp_batch_seq b[2] = {{c, P0, 6, &g, NULL, NULL}, {c, P1, 2, &g, NULL, NULL}};
    CHECK_STATUS(gp_generate_batch(b, 2, r, NULL), GP_ERR_INVALID_ARG); /* a shared context */
    CHECK(strstr(gp_errmsg(), "share a context") != NULL);
    CHECK_STATUS(gp_generate_batch(b, 0, r, NULL), GP_ERR_INVALID_ARG);
    /* one bad sequence fails alone; the other completes */
    static const int32_t bad[] = {1, 999999};
    b[0] = (gp_batch_seq){c, bad, 2, &g, NULL, NULL};
    b[1] = (gp_batch_seq){c2, P1, 2, &g, NULL, NULL};
    gp_status st[2];
    CHECK_STATUS(gp_generate_batch(b, 2, r, st), GP_ERR_RANGE);
    CHECK(strstr(gp_errmsg(), "sequence 0") != NULL);
    CHECK_STATUS(st[1], GP_OK);
    CHECK_EQ_INT(r[1].n_tokens, 2);
    gp_gen_result_free(&r[0]);
    gp_gen_result_free(&r[1]);
    gp_ctx_free(c);
    gp_ctx_free(c2);
    gp_model_free(m);
}
