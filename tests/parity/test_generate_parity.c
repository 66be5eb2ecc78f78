/* test_generate_parity.c — gp_generate with transformers' processors against every fixture model's reference.json:
 * greedy_48, rep1.3_ngram3_48 (repetition_penalty=1.3, no_repeat_ngram_size=3) and bad_words_32 (the prompt's
 * bad_words_ids), each exact; plus seeded sampling being identical across runs, thread counts and prefill chunks. */
#include "test.h"

#include "fixtures.h"

#include <stdlib.h>

/* Generates from ids with g and compares with reference key `key` of prompt p; returns 1 if equal. */
static int check_case(gp_ctx *c, const char *model, int pi, const cJSON *p, const char *key, const int32_t *ids,
                      int n, const gp_gen_config *g) {
    int32_t *want = NULL;
    int nw = fx_int_array(cJSON_GetObjectItem(p, key), &want);
    if (nw < 0) {
        NOTE("%s prompt %d: reference.json has no '%s'", model, pi, key);
        gp_test_failed = 1;
        return 0;
    }
    gp_gen_result r;
    gp_status s = gp_generate(c, ids, n, g, NULL, NULL, &r);
    CHECK_STATUS(s, GP_OK);
    int same = 0;
    if (s == GP_OK) {
        int fd = fx_first_diff(r.tokens, r.n_tokens, want, nw);
        same = fd < 0;
        if (!same) {
            NOTE("%s prompt %d: %s differs at token %d", model, pi, key, fd);
            fx_print_ids("got ", r.tokens, r.n_tokens);
            fx_print_ids("want", want, nw);
            gp_test_failed = 1;
        }
    }
    gp_gen_result_free(&r);
    free(want);
    return same;
}

static void check_model(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", name);
    char *dir = gp_test_fixture(rel);
    if (!dir) return;
    char *rp = malloc(strlen(dir) + 32);
    REQUIRE(rp);
    sprintf(rp, "%s/reference.json", dir);
    cJSON *ref = fx_read_json(rp);
    free(rp);
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    free(dir);
    gp_ctx *c = NULL;
    if (m) CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    if (!ref || !c) {
        cJSON_Delete(ref);
        gp_ctx_free(c);
        gp_model_free(m);
        gp_test_failed = 1;
        return;
    }
    int pi = 0, n_ok = 0, n_cases = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(ref, "prompts")) {
        int32_t *ids = NULL;
        int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
        if (n <= 0) {
            NOTE("%s prompt %d: no ids", name, pi);
            gp_test_failed = 1;
            free(ids);
            pi++;
            continue;
        }
        /* generate(do_sample=False, max_new_tokens=48): the model's generation config, greedy */
        gp_gen_config g = gp_model_gen_config(m);
        g.do_sample = 0;
        g.max_new_tokens = 48;
        n_ok += check_case(c, name, pi, p, "greedy_48", ids, n, &g);

        /* + repetition_penalty=1.3, no_repeat_ngram_size=3 */
        gp_gen_config gr = g;
        gr.repetition_penalty = 1.3;
        gr.no_repeat_ngram_size = 3;
        n_ok += check_case(c, name, pi, p, "rep1.3_ngram3_48", ids, n, &gr);

        /* max_new_tokens=32, bad_words_ids from the reference */
        const cJSON *bw = cJSON_GetObjectItem(p, "bad_words_ids");
        int nbw = cJSON_IsArray(bw) ? cJSON_GetArraySize(bw) : 0;
        gp_token_seq *seqs = calloc((size_t)(nbw ? nbw : 1), sizeof *seqs);
        REQUIRE(seqs);
        int k = 0, bad = nbw == 0;
        const cJSON *w;
        cJSON_ArrayForEach(w, bw) {
            int32_t *wi = NULL;
            seqs[k].n = fx_int_array(w, &wi);
            seqs[k].ids = wi;
            if (seqs[k].n <= 0) bad = 1;
            k++;
        }
        if (bad) {
            NOTE("%s prompt %d: reference.json has no usable bad_words_ids", name, pi);
            gp_test_failed = 1;
        } else {
            gp_gen_config gb = g;
            gb.max_new_tokens = 32;
            gb.bad_words_ids = seqs;
            gb.n_bad_words_ids = nbw;
            n_ok += check_case(c, name, pi, p, "bad_words_32", ids, n, &gb);
        }
        for (int j = 0; j < k; j++) free((void *)seqs[j].ids);
        free(seqs);
        n_cases += 3;
        free(ids);
        pi++;
    }
    NOTE("%s: %d/%d generations identical to transformers (greedy_48, rep1.3_ngram3_48, bad_words_32)", name, n_ok,
         n_cases);
    CHECK(pi > 0);
    gp_ctx_free(c);
    gp_model_free(m);
    cJSON_Delete(ref);
}

TEST(generate_parity_tiny_llama) { check_model("tiny-llama"); }
TEST(generate_parity_tiny_llama3) { check_model("tiny-llama3"); }
TEST(generate_parity_tiny_qwen2) { check_model("tiny-qwen2"); }
TEST(generate_parity_tiny_qwen3) { check_model("tiny-qwen3"); }
TEST(generate_parity_tiny_gemma2) { check_model("tiny-gemma2"); }
TEST(generate_parity_tiny_gemma3) { check_model("tiny-gemma3"); }
TEST(generate_parity_shakespeare_llama) { check_model("shakespeare-llama"); }

/* A seed fixes the sampled ids: identical across runs, thread counts and prefill chunk sizes. */
TEST(generate_seeded_sampling_is_reproducible) {
    char *dir = gp_test_fixture("models/shakespeare-llama");
    if (!dir) return;
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_OK);
    free(dir);
    REQUIRE(m);
    static const int32_t prompt[] = {1, 4205, 16334, 20084, 28747, 13};
    const int32_t threads[] = {1, 3, 1}, chunks[] = {512, 512, 2};
    int32_t first[40];
    int n_first = -1;
    for (int run = 0; run < 3; run++) {
        gp_ctx_params cp = fx_default_params();
        cp.n_threads = threads[run];
        cp.prefill_chunk = chunks[run];
        gp_ctx *c = NULL;
        CHECK_STATUS(gp_ctx_init(m, &cp, &c), GP_OK);
        if (!c) break;
        gp_gen_config g = gp_model_gen_config(m);
        g.do_sample = 1;
        g.temperature = 1.3;
        g.top_k = 0;
        g.top_p = 0.95;
        g.max_new_tokens = 40;
        g.ignore_eos = 1;
        g.seed = 1234;
        gp_gen_result r;
        CHECK_STATUS(gp_generate(c, prompt, 6, &g, NULL, NULL, &r), GP_OK);
        if (run == 0) {
            n_first = r.n_tokens;
            memcpy(first, r.tokens, sizeof(int32_t) * (size_t)(r.n_tokens < 40 ? r.n_tokens : 40));
        } else {
            int fd = fx_first_diff(r.tokens, r.n_tokens, first, n_first);
            if (fd >= 0) NOTE("run %d (threads %d, chunk %d) differs at token %d", run, threads[run], chunks[run], fd);
            CHECK(fd < 0);
        }
        CHECK_EQ_INT(r.n_tokens, 40);
        gp_gen_result_free(&r);
        gp_ctx_free(c);
    }
    gp_model_free(m);
}
