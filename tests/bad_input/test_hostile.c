/* test_hostile.c — regressions of issue 17 (hostile input found by fuzzing and abuse), each run under `make asan`:
 * rejected steering tensors (use after free), non-finite steering vectors and alphas, .npy v2 headers over 1023
 * bytes, FIFOs given as paths (must fail at once, never block), tokenizer.json strings that are not UTF-8, regex
 * subjects that are not UTF-8, Bert/Roberta post-processor ids, NULL handles, top-N logprobs by selection, the
 * message when sampling has nothing left, keep without a rotating cache. */
#include "genparity.h"
#include "io/safetensors.h"
#include "sample/sample.h"
#include "tokenizer/tok_internal.h"
#include "util/util.h"
#include "test.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *tmp_path(const char *name) {
    char *dir = gp_test_tmpdir();
    char *p = gp_path_join(dir, name);
    free(dir);
    return p;
}

static char *write_bytes(const char *name, const void *data, size_t n) {
    char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
    return p;
}

static void check_msg(const char *what, const char *frag) {
    const char *m = gp_errmsg();
    if (!strstr(m, frag)) {
        printf("    %s: message \"%s\" lacks \"%s\"\n", what, m, frag);
        gp_test_failed = 1;
    }
}

/* Issue 17.1: the tensor's name was read after the file was closed (ASan: heap-use-after-free). */
TEST(steer_vector_rejected_tensor_names_it) {
    char *p = tmp_path("model.safetensors");
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t iv[3] = {1, 2, 3};
    gp_st_write_tensor t[3] = {{"model.embed_tokens.weight", GP_DTYPE_F32, 2, {2, 3}, w},
                               {"ints", GP_DTYPE_I32, 1, {3}, iv},
                               {"empty", GP_DTYPE_F32, 1, {0}, w}};
    REQUIRE(gp_st_write(p, t, 3, NULL, NULL, 0) == GP_OK);
    static const struct { const char *tensor; gp_status want; } cases[] = {
        {"model.embed_tokens.weight", GP_ERR_FORMAT}, {"ints", GP_ERR_UNSUPPORTED}, {"empty", GP_ERR_FORMAT}};
    for (int k = 0; k < 3; k++) {
        char spec[512];
        snprintf(spec, sizeof spec, "%s:%s", p, cases[k].tensor);
        float *v = NULL;
        int32_t n = -1;
        CHECK_STATUS(gp_steer_vector_load(spec, &v, &n), cases[k].want);
        CHECK(v == NULL && n == 0);
        check_msg(cases[k].tensor, cases[k].tensor);
    }
    free(p);
}

/* Issue 17.12: NaN / inf vectors (and a float64 value past float's range, which was a float-cast-overflow) */
TEST(steer_vector_non_finite_refused) {
    float raw[3] = {1.0f, NAN, 2.0f};
    char *p = write_bytes("nan.f32", raw, sizeof raw);
    float *v = NULL;
    int32_t n;
    CHECK_STATUS(gp_steer_vector_load(p, &v, &n), GP_ERR_FORMAT);
    CHECK(v == NULL);
    check_msg("raw NaN", "NaN");
    free(p);

    char npy[128 + 16];
    const char *hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
    memset(npy, ' ', 128);
    memcpy(npy, "\x93NUMPY\x01\x00", 8);
    npy[8] = 118;
    npy[9] = 0;
    memcpy(npy + 10, hdr, strlen(hdr));
    npy[127] = '\n';
    double d[2] = {1.0, 1e300};
    memcpy(npy + 128, d, sizeof d);
    p = write_bytes("big.npy", npy, sizeof npy);
    CHECK_STATUS(gp_steer_vector_load(p, &v, &n), GP_ERR_FORMAT);
    check_msg("f8 1e300", "infinite");
    free(p);

    p = tmp_path("inf.safetensors");
    float w[2] = {INFINITY, 0};
    gp_st_write_tensor t = {"v", GP_DTYPE_F32, 1, {2}, w};
    REQUIRE(gp_st_write(p, &t, 1, NULL, NULL, 0) == GP_OK);
    CHECK_STATUS(gp_steer_vector_load(p, &v, &n), GP_ERR_FORMAT);
    free(p);
}

/* Issue 17.12: .npy v2 headers may be longer than 1023 bytes (numpy writes v2 when the header needs > 65535). */
TEST(npy_v2_long_header_loads) {
    const size_t hl = 4096 - 12;
    char *buf = calloc(1, 12 + hl + 3 * 4);
    memcpy(buf, "\x93NUMPY\x02\x00", 8);
    buf[8] = (char)(hl & 0xff);
    buf[9] = (char)(hl >> 8);
    memset(buf + 12, ' ', hl);
    const char *h = "{'descr': '<f4', 'fortran_order': False, ";
    memcpy(buf + 12, h, strlen(h));
    const char *tail = "'shape': (3,), }"; /* the shape lies past byte 1023 of the header */
    memcpy(buf + 12 + 2000, tail, strlen(tail));
    buf[12 + hl - 1] = '\n';
    float x[3] = {0.5f, -1.0f, 2.0f};
    memcpy(buf + 12 + hl, x, sizeof x);
    char *p = write_bytes("v2.npy", buf, 12 + hl + sizeof x);
    free(buf);
    float *v = NULL;
    int32_t n = 0;
    CHECK_STATUS(gp_steer_vector_load(p, &v, &n), GP_OK);
    CHECK_EQ_INT(n, 3);
    if (v && n == 3) CHECK(v[0] == 0.5f && v[1] == -1.0f && v[2] == 2.0f);
    gp_free(v);
    free(p);
}

/* Issue 17.7: a FIFO given as a path is refused at once (before, open() blocked forever waiting for a writer). */
TEST(fifo_paths_refused_without_blocking) {
    char *dir = gp_test_tmpdir();
    static const char *names[] = {"tokenizer.json", "v.npy", "w.safetensors", "cache.safetensors", "config.json"};
    char *paths[5];
    for (int k = 0; k < 5; k++) {
        paths[k] = gp_path_join(dir, names[k]);
        REQUIRE(mkfifo(paths[k], 0600) == 0);
    }
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load(paths[0], &t), GP_ERR_IO);
    check_msg("tokenizer", "FIFO");
    float *v;
    int32_t n;
    CHECK_STATUS(gp_steer_vector_load(paths[1], &v, &n), GP_ERR_IO);
    check_msg("npy", "FIFO");
    gp_st_set *st;
    CHECK_STATUS(gp_st_open_file(paths[2], &st), GP_ERR_IO);
    check_msg("safetensors", "FIFO");
    char *text;
    CHECK_STATUS(gp_read_file(paths[4], 1 << 20, &text, NULL), GP_ERR_IO);
    gp_model *m;
    CHECK(gp_model_load(dir, NULL, &m) != GP_OK); /* config.json is a FIFO */
    gp_ctx *c;
    REQUIRE(gp_model_load("models/shakespeare-llama", NULL, &m) == GP_OK);
    REQUIRE(gp_ctx_init(m, NULL, &c) == GP_OK);
    CHECK_STATUS(gp_ctx_cache_load(c, paths[3]), GP_ERR_IO);
    check_msg("cache", "FIFO");
    int fd;
    CHECK_STATUS(gp_open_regular(dir, &fd), GP_ERR_IO);
    check_msg("directory", "directory");
    gp_ctx_free(c);
    gp_model_free(m);
    for (int k = 0; k < 5; k++) free(paths[k]);
    free(dir);
}

/* Issue 17.2: strings that are not UTF-8 in tokenizer.json are refused with the field named; before, a lone lead
 * byte as an added token split a character of the input and PCRE2 got invalid UTF-8 under NO_UTF_CHECK. */
TEST(tokenizer_json_strings_not_utf8) {
    static const struct { const char *json, *field; } cases[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1, "
         "\"content\": \"\xE3\", \"special\": false}]}", "added_tokens[0].content"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": "
         "\"Replace\", \"pattern\": {\"String\": \"\x81\"}, \"content\": \"x\"}}", "normalizer.pattern.String"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": "
         "\"Prepend\", \"prepend\": \"\xC3\"}}", "normalizer.prepend"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"\xED\xA0\x80\": 1}, \"merges\": []}}", "model.vocab"},
    };
    for (int k = 0; k < 4; k++) {
        char *p = write_bytes("tokenizer.json", cases[k].json, strlen(cases[k].json));
        gp_tokenizer *t = (gp_tokenizer *)1;
        CHECK_STATUS(gp_tokenizer_load(p, &t), GP_ERR_FORMAT);
        CHECK(t == NULL);
        check_msg(cases[k].field, cases[k].field);
        check_msg(cases[k].field, "not valid UTF-8");
        free(p);
    }
}

/* Issue 17.2: the regex wrapper checks its subject instead of passing invalid UTF-8 with PCRE2_NO_UTF_CHECK. */
TEST(regex_subject_not_utf8_is_an_error) {
    tk_regex re;
    cJSON *j = cJSON_Parse("{\"Regex\": \"\\\\p{L}+\"}");
    REQUIRE(j);
    gp_status s = tk_regex_from_json(&re, j, "test", "pattern");
    cJSON_Delete(j);
    REQUIRE(s == GP_OK);
    tk_scratch sc;
    REQUIRE(tk_scratch_init(&sc) == 0);
    size_t ms, me;
    CHECK_EQ_INT(tk_regex_next(&re, &sc, "ab\xC3", 3, 0, &ms, &me), -1);
    CHECK_STATUS(tk_fail_status(&sc), GP_ERR_FORMAT);
    check_msg("subject", "not valid UTF-8");
    CHECK_EQ_INT(tk_regex_next(&re, &sc, "ab c", 4, 0, &ms, &me), 1);
    CHECK(ms == 0 && me == 2);
    tk_scratch_free(&sc);
    tk_regex_free(&re);
}

/* Issue 17.10: BertProcessing / RobertaProcessing ids are checked against the vocabulary. */
TEST(tokenizer_bert_processing_ids_checked) {
    static const char *ids[] = {"-5", "99999999", "1.5"};
    for (int k = 0; k < 3; k++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"[CLS]\": 1}, \"merges\": []}, "
                 "\"post_processor\": {\"type\": \"%s\", \"cls\": [\"[CLS]\", %s], \"sep\": [\"[CLS]\", 1]}}",
                 k == 1 ? "RobertaProcessing" : "BertProcessing", ids[k]);
        char *p = write_bytes("tokenizer.json", json, strlen(json));
        gp_tokenizer *t = (gp_tokenizer *)1;
        CHECK_STATUS(gp_tokenizer_load(p, &t), GP_ERR_FORMAT);
        CHECK(t == NULL);
        check_msg(ids[k], "post_processor.cls[1]");
        free(p);
    }
}

/* Issue 17.10: one rule for NULL handles: fallible calls return GP_ERR_INVALID_ARG, getters a neutral value. */
TEST(null_handles_one_rule) {
    CHECK_STATUS(gp_ctx_trim(NULL, 0), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_cache_select(NULL, "a"), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_cache_fork(NULL, "default", "b"), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_cache_drop(NULL, "a"), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_prefill(NULL, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_eval(NULL, NULL, 0, NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_cache_save(NULL, "x"), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_cache_load(NULL, "x"), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_steer_add(NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_logit_bias_vector(NULL, NULL, 1.0f), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_memory(NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_init(NULL, NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_generate(NULL, NULL, 0, NULL, NULL, NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_detok_init(NULL, 0, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_detok_push(NULL, 0, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_detok_flush(NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_gen_config_validate(NULL, 0), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_model_load(NULL, NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_tokenizer_load(NULL, NULL), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_steer_vector_load(NULL, NULL, NULL), GP_ERR_INVALID_ARG);
    gp_ctx_reset(NULL);
    gp_ctx_steer_clear(NULL);
    gp_ctx_free(NULL);
    gp_model_free(NULL);
    gp_gen_result_free(NULL);
    int32_t n = 7;
    CHECK(gp_ctx_tokens(NULL, &n) == NULL && n == 0);
    CHECK_EQ_INT(gp_ctx_n_past(NULL), 0);
    CHECK_EQ_INT(gp_ctx_kv_bytes(NULL), 0);
    CHECK(gp_ctx_cache_name(NULL) == NULL);
    CHECK(gp_ctx_model(NULL) == NULL);
    CHECK_EQ_INT(gp_model_n_vocab(NULL), 0);
    CHECK_EQ_INT(gp_model_n_layers(NULL), 0);
    CHECK_EQ_INT(gp_model_n_embd(NULL), 0);
    CHECK_EQ_INT(gp_model_n_ctx_train(NULL), 0);
    CHECK_EQ_INT(gp_model_eos_ids(NULL, NULL, 4), 0);
    CHECK_EQ_INT(gp_model_bos_id(NULL), -1);
    CHECK(gp_model_tokenizer(NULL) == NULL);
    CHECK(gp_model_arch(NULL) == NULL);
    CHECK_EQ_INT(gp_model_weight_bytes(NULL), 0);
    CHECK_EQ_INT(gp_model_decode_bytes(NULL), 0);
    CHECK_EQ_INT(gp_tokenizer_n_vocab(NULL), 0);
    CHECK_EQ_INT(gp_tokenizer_bos_id(NULL), -1);
    CHECK(gp_tokenizer_id_to_token(NULL, 0) == NULL);
    CHECK_EQ_INT(gp_detok_piece_len(NULL), 0);
    CHECK(isnan(gp_logits_kl(NULL, NULL, 3)));
    CHECK(gp_logits_kl(NULL, NULL, 0) == 0.0);
    CHECK_EQ_INT(gp_text_suspect(NULL, 3), 0);
}

/* Issue 17.12: top-N logprobs by bounded-heap selection give the same list as a full sort (ties by lower id, NaN
 * never listed, -inf listed last), for every N up to V. */
TEST(top_n_selection_matches_sort) {
    enum { V = 97 };
    float lp[V];
    uint64_t s = 12345;
    for (int q = 0; q < 40; q++) {
        for (int i = 0; i < V; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int r = (int)(s >> 58);
            lp[i] = r < 3 ? NAN : r < 6 ? -INFINITY : (float)((s >> 40) % 9) * -0.5f;
        }
        for (int k = 1; k <= V; k += (q % 5) + 1) {
            gp_top_logprob top[V];
            gp_top_n(lp, V, k, top);
            /* reference: repeated best-remaining scan */
            unsigned char used[V] = {0};
            for (int j = 0; j < k; j++) {
                int best = -1;
                for (int i = 0; i < V; i++)
                    if (!used[i] && !isnan(lp[i]) && (best < 0 || lp[i] > lp[best])) best = i;
                if (best >= 0) used[best] = 1;
                int32_t want_id = best;
                float want_lp = best >= 0 ? lp[best] : -INFINITY;
                if (top[j].id != want_id || !(top[j].logprob == want_lp)) {
                    printf("    k=%d j=%d: got (%d, %g), want (%d, %g)\n", k, j, top[j].id, (double)top[j].logprob,
                           want_id, (double)want_lp);
                    gp_test_failed = 1;
                    return;
                }
            }
        }
    }
}

/* Issue 17.12: when sampling has nothing left because scores hold +inf/NaN (an underflowing temperature, two +inf
 * biases) the message says so instead of "every token is masked". */
TEST(sampling_nan_scores_message) {
    gp_model *m;
    REQUIRE(gp_model_load("models/shakespeare-llama", NULL, &m) == GP_OK);
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = 1;
    gp_ctx *c;
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    const int32_t prompt[] = {1, 450, 1058};
    gp_gen_config g = gp_gen_config_default();
    g.max_new_tokens = 2;
    g.do_sample = 1;
    g.top_k = 0;
    g.temperature = 1e-45;
    gp_gen_result r;
    CHECK_STATUS(gp_generate(c, prompt, 3, &g, NULL, NULL, &r), GP_ERR_STATE);
    check_msg("temperature", "+inf");
    gp_token_bias lb[2] = {{5, INFINITY}, {6, INFINITY}};
    g.temperature = 1.0;
    g.logit_bias = lb;
    g.n_logit_bias = 2;
    CHECK_STATUS(gp_generate(c, prompt, 3, &g, NULL, NULL, &r), GP_ERR_STATE);
    check_msg("two +inf biases", "+inf");
    gp_ctx_free(c);
    gp_model_free(m);
}

/* Issue 17.12: steering alphas and vectors must be finite; keep needs a rotating cache. */
TEST(steer_alpha_nan_and_keep_without_rotation_refused) {
    gp_model *m;
    REQUIRE(gp_model_load("models/shakespeare-llama", NULL, &m) == GP_OK);
    gp_ctx_params cp = gp_ctx_default_params();
    cp.keep = 4;
    gp_ctx *c = (gp_ctx *)1;
    CHECK_STATUS(gp_ctx_init(m, &cp, &c), GP_ERR_INVALID_ARG);
    CHECK(c == NULL);
    check_msg("keep", "max_kv_size");
    cp.keep = 0;
    cp.n_threads = 1;
    REQUIRE(gp_ctx_init(m, &cp, &c) == GP_OK);
    const int32_t E = gp_model_n_embd(m);
    float *v = calloc((size_t)E, sizeof *v);
    gp_steer_hook h = {0, v, NAN, GP_STEER_CONSTANT, 0, NULL, NULL};
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_ERR_INVALID_ARG);
    h.alpha = 1.0f;
    v[E - 1] = INFINITY;
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_logit_bias_vector(c, v, 1.0f), GP_ERR_INVALID_ARG);
    v[E - 1] = 0.0f;
    CHECK_STATUS(gp_ctx_logit_bias_vector(c, v, NAN), GP_ERR_INVALID_ARG);
    CHECK_STATUS(gp_ctx_steer_add(c, &h), GP_OK);
    free(v);
    gp_ctx_free(c);
    gp_model_free(m);
}
