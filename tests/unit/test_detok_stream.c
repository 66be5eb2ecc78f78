/* test_detok_stream.c — the streaming detokenizer's promise as a property: for random id sequences on every fixture
 * tokenizer (tokenizers/ and the embedded model), with and without skip_special, the pieces concatenate to
 * gp_tokenizer_decode of the same ids and each piece is valid UTF-8.  Ids are drawn to hit the hard cases: byte
 * fallback tokens, specials inside byte runs, ids past the tokenizer (a model's padded vocab_size), small ids.  Also
 * the regressions of issue 17: Llama-2 ids 15 256 0, a tokenizer without decoder, padding ids in gp_generate. */
#include "genparity.h"
#include "tokenizer/tok_internal.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s) { /* xorshift64*: a fixed, seeded sequence */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Streams ids [n]; returns 1 when the pieces concatenate to decode and each piece is valid UTF-8, else prints the
 * first difference and returns 0. */
static int stream_matches(const gp_tokenizer *t, const char *name, const int32_t *ids, int32_t n, int skip) {
    char *want;
    size_t wlen;
    if (gp_tokenizer_decode(t, ids, n, skip, &want, &wlen) != GP_OK) {
        printf("    %s: decode failed: %s\n", name, gp_errmsg());
        return 0;
    }
    gp_detok *d;
    if (gp_detok_init(t, skip, &d) != GP_OK) {
        free(want);
        return 0;
    }
    tk_buf got = {0};
    int ok = 1, bad_piece = -1;
    for (int32_t i = 0; i <= n && ok; i++) {
        const char *piece;
        gp_status s = i < n ? gp_detok_push(d, ids[i], &piece) : gp_detok_flush(d, &piece);
        if (s != GP_OK) {
            printf("    %s: push %d failed: %s\n", name, (int)i, gp_errmsg());
            ok = 0;
            break;
        }
        size_t k = gp_detok_piece_len(d);
        if (!tk_utf8_is_valid(piece, k) && bad_piece < 0) bad_piece = i;
        if (tk_buf_put(&got, piece, k)) ok = 0;
    }
    gp_detok_free(d);
    if (ok && (got.len != wlen || memcmp(got.p, want, wlen) != 0 || bad_piece >= 0)) {
        size_t at = 0;
        while (at < got.len && at < wlen && got.p[at] == want[at]) at++;
        printf("    %s skip_special=%d: stream (%zu bytes) != decode (%zu bytes) from byte %zu%s; ids:", name, skip,
               got.len, wlen, at, bad_piece >= 0 ? " (or a piece is not valid UTF-8)" : "");
        for (int32_t i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
        ok = 0;
    }
    free(got.p);
    free(want);
    return ok;
}

/* Random sequences over one tokenizer; returns the number of failing sequences (stops printing after 3). */
static int property(const gp_tokenizer *t, const char *name, int n_seq, uint64_t seed) {
    const int32_t V = gp_tokenizer_n_vocab(t);
    int32_t specials[64], n_sp = 0, bytes[256], n_by = 0;
    for (int32_t id = 0; id < V && n_sp < 64; id++)
        if (gp_tokenizer_is_special(t, id)) specials[n_sp++] = id;
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        int32_t id = gp_tokenizer_token_to_id(t, s);
        if (id >= 0) bytes[n_by++] = id;
    }
    /* byte-level (GPT-2) vocabularies: single bytes as tokens are the low ids; also the ids of partial characters */
    int failed = 0;
    uint64_t s = seed;
    int32_t ids[48];
    for (int q = 0; q < n_seq; q++) {
        int32_t n = 1 + (int32_t)(rng_next(&s) % 40);
        for (int32_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&s), k = r % 10, x = r >> 8;
            if (k < 3 || (k < 5 && !n_sp) || (k < 8 && !n_by && k >= 5)) ids[i] = (int32_t)(x % (uint64_t)(V + 16));
            else if (k < 5) ids[i] = specials[x % (uint64_t)n_sp];
            else if (k < 8) ids[i] = bytes[x % (uint64_t)n_by];
            else ids[i] = (int32_t)(x % 300);
        }
        for (int skip = 0; skip < 2; skip++)
            if (!stream_matches(t, name, ids, n, skip) && ++failed >= 3) return failed;
    }
    return failed;
}

TEST(detok_stream_equals_decode_random_ids) {
    static const char *toks[] = {"tokenizers/llama2",  "tokenizers/llama3",       "tokenizers/qwen3",
                                 "tokenizers/gemma3",  "tokenizers/gpt4o",        "tokenizers/deepseek_v3",
                                 "tokenizers/gptoss",  "tokenizers/mistral_nemo", "models/tiny-gemma2"};
    int n_seq = getenv("GENPARITY_ASAN") ? 40 : 150;
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        char *dir = gp_test_fixture(toks[k]);
        if (!dir) return;
        gp_tokenizer *t;
        gp_status s = gp_tokenizer_load_dir(dir, &t);
        CHECK_STATUS(s, GP_OK);
        free(dir);
        if (s) continue;
        int failed = property(t, toks[k], n_seq, 0x9E3779B97F4A7C15ull + k);
        NOTE("%s: %d random sequences x skip_special 0/1, %d differ", toks[k], n_seq, failed);
        CHECK_EQ_INT(failed, 0);
        gp_tokenizer_free(t);
    }
    gp_tokenizer *t; /* the embedded model's tokenizer */
    CHECK_STATUS(gp_tokenizer_load_dir("models/shakespeare-llama", &t), GP_OK);
    if (t) {
        CHECK_EQ_INT(property(t, "shakespeare-llama", n_seq, 7), 0);
        gp_tokenizer_free(t);
    }
}

/* Issue 17.4: a skipped special inside a byte-fallback run; the stream gave 0c bf bd ef bf bd. */
TEST(detok_skipped_special_inside_byte_run) {
    char *dir = gp_test_fixture("tokenizers/llama2");
    if (!dir) return;
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load_dir(dir, &t), GP_OK);
    free(dir);
    if (!t) return;
    const int32_t ids[][4] = {{15, 256, 0}, {15, 0, 256}, {230, 1, 2, 188}, {15, 0, 0, 29874}};
    const int32_t lens[] = {3, 3, 4, 4};
    for (int k = 0; k < 4; k++)
        for (int skip = 0; skip < 2; skip++) CHECK(stream_matches(t, "llama2", ids[k], lens[k], skip));
    gp_tokenizer_free(t);
}

static char *write_file(const char *name, const char *text) {
    char *dir = gp_test_tmpdir();
    char *p = gp_path_join(dir, name);
    free(dir);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

/* Issue 17.4: without a decoder, decode joins tokens with spaces; so must the stream. */
TEST(detok_no_decoder_joins_with_spaces) {
    char *p = write_file("tokenizer.json",
                         "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xC3\xA9\": 3}, "
                         "\"merges\": [\"a b\"]}, \"added_tokens\": [{\"id\": 4, \"content\": \"<s>\", \"special\": true}]}");
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load(p, &t), GP_OK);
    free(p);
    if (!t) return;
    const int32_t ids[] = {0, 4, 1, 2, 99, 3, 4};
    char *text;
    size_t len;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, 7, 1, &text, &len), GP_OK);
    CHECK_STR(text, "a b ab \xC3\xA9");
    gp_free(text);
    for (int skip = 0; skip < 2; skip++) CHECK(stream_matches(t, "no-decoder", ids, 7, skip));
    gp_tokenizer_free(t);
}

/* Issue 17.5: ids past the tokenizer but inside the model's vocab_size decode as "" (transformers) and do not stop
 * generation. tiny-qwen3: vocab_size 151936, tokenizer 151669 ids. */
static gp_status pick_padding(const float *scores, int32_t n_vocab, const int32_t *ids, int32_t n_ids, double u,
                              void *user, int32_t *token) {
    *token = n_vocab - 1 - (n_ids % 3);
    return GP_OK;
}

TEST(generate_padding_ids_decode_empty) {
    char *dir = gp_test_fixture("models/tiny-qwen3");
    if (!dir) return;
    gp_model *m;
    gp_status s = gp_model_load(dir, NULL, &m);
    free(dir);
    CHECK_STATUS(s, GP_OK);
    if (s) return;
    const int32_t V = gp_model_n_vocab(m), TV = gp_tokenizer_n_vocab(gp_model_tokenizer(m));
    NOTE("model vocab_size %d, tokenizer ids %d", V, TV);
    REQUIRE(V - 3 >= TV);
    gp_ctx_params cp = gp_ctx_default_params();
    cp.n_threads = 1;
    gp_ctx *c;
    CHECK_STATUS(gp_ctx_init(m, &cp, &c), GP_OK);
    gp_gen_config g = gp_model_gen_config(m);
    g.max_new_tokens = 4;
    g.do_sample = 0;
    g.n_eos = 0;
    g.sampler = pick_padding;
    const int32_t prompt[] = {1, 2, 3};
    gp_gen_result r;
    CHECK_STATUS(gp_generate(c, prompt, 3, &g, NULL, NULL, &r), GP_OK);
    CHECK_EQ_INT(r.n_tokens, 4);
    CHECK(r.text && r.text_len == 0);
    for (int32_t i = 0; i < r.n_tokens; i++) CHECK(r.tokens[i] >= TV && r.tokens[i] < V);
    gp_gen_result_free(&r);
    gp_ctx_free(c);
    gp_model_free(m);
}
