/* test_tokenizer_bad.c — malformed tokenizer.json files: each load fails with the right status and a message
 * that names the file and the field; nothing leaks (run under make asan). */
#include "genparity.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static char *write_tok(const char *json) {
    char *dir = gp_test_tmpdir();
    char *p = malloc(strlen(dir) + 32);
    sprintf(p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "wb");
    if (f) {
        fwrite(json, 1, strlen(json), f);
        fclose(f);
    }
    free(dir);
    return p;
}

/* Loads json and expects status want and a message containing the path and every given fragment. */
static void expect(const char *json, gp_status want, const char *frag1, const char *frag2) {
    char *p = write_tok(json);
    gp_tokenizer *t = (gp_tokenizer *)1;
    CHECK_STATUS(gp_tokenizer_load(p, &t), want);
    CHECK(t == NULL);
    const char *m = gp_errmsg();
    if (!strstr(m, p) || (frag1 && !strstr(m, frag1)) || (frag2 && !strstr(m, frag2))) {
        printf("    message \"%s\" lacks the path or \"%s\" / \"%s\"\n", m, frag1 ? frag1 : "", frag2 ? frag2 : "");
        gp_test_failed = 1;
    }
    if (t != (gp_tokenizer *)1) gp_tokenizer_free(t);
    free(p);
}

#define MODEL(v, m) "{\"model\": {\"type\": \"BPE\", \"vocab\": " v ", \"merges\": " m "}}"

TEST(tokenizer_bad_missing_file) {
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load("/nonexistent/tokenizer.json", &t), GP_ERR_IO);
    CHECK(strstr(gp_errmsg(), "/nonexistent/tokenizer.json") != NULL);
    CHECK_STATUS(gp_tokenizer_load_dir("/nonexistent", &t), GP_ERR_MISSING);
    CHECK(strstr(gp_errmsg(), "/nonexistent") != NULL);
    CHECK_STATUS(gp_tokenizer_load(NULL, &t), GP_ERR_INVALID_ARG);
}

TEST(tokenizer_bad_not_json) {
    expect("this is not json", GP_ERR_FORMAT, "JSON", NULL);
    expect("[1, 2, 3]", GP_ERR_FORMAT, "object", NULL);
}

TEST(tokenizer_bad_truncated) {
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\"", GP_ERR_FORMAT, "JSON", "truncated");
}

TEST(tokenizer_bad_model_missing) {
    expect("{\"normalizer\": null}", GP_ERR_MISSING, "'model'", NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"merges\": []}}", GP_ERR_MISSING, "'model.vocab'", NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}}", GP_ERR_MISSING, "'model.merges'", NULL);
}

TEST(tokenizer_bad_unsupported_model) {
    expect("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", GP_ERR_UNSUPPORTED, "'model.type'", "Unigram");
    expect("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", GP_ERR_UNSUPPORTED, "'model.type'", "WordPiece");
    expect("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}}}", GP_ERR_UNSUPPORTED, "'model.type'", "WordLevel");
    expect("{\"model\": {\"vocab\": {\"a\": 0}}}", GP_ERR_UNSUPPORTED, "'model.merges'", "BPE");
}

TEST(tokenizer_bad_merges) {
    expect(MODEL("{\"a\": 0, \"b\": 1, \"ab\": 2}", "[\"a c\"]"), GP_ERR_FORMAT, "'model.merges[0]'", "'c'");
    expect(MODEL("{\"a\": 0, \"b\": 1}", "[[\"a\", \"b\"]]"), GP_ERR_FORMAT, "'model.merges[0]'", "'ab'");
    expect(MODEL("{\"a\": 0, \"b\": 1, \"ab\": 2}", "[\"ab\"]"), GP_ERR_FORMAT, "'model.merges[0]'", NULL);
    expect(MODEL("{\"a\": 0, \"b\": 1, \"ab\": 2}", "[\"a b\", 7]"), GP_ERR_FORMAT, "'model.merges[1]'", NULL);
    expect(MODEL("{\"a\": 0}", "{}"), GP_ERR_FORMAT, "'model.merges'", NULL);
}

TEST(tokenizer_bad_vocab_ids) {
    expect(MODEL("{\"a\": -1}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "'a'");
    expect(MODEL("{\"a\": 1e12}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "'a'");
    expect(MODEL("{\"a\": 1.5}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "'a'");
    expect(MODEL("{\"a\": \"x\"}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "'a'");
    expect(MODEL("{\"a\": 0, \"b\": 0}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "id 0");
    expect(MODEL("{\"a\": 0, \"a\": 1}", "[]"), GP_ERR_FORMAT, "'model.vocab'", "duplicated");
    expect(MODEL("[1, 2]", "[]"), GP_ERR_FORMAT, "'model.vocab'", NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": -5, "
           "\"content\": \"<s>\"}]}",
           GP_ERR_FORMAT, "'added_tokens[0].id'", NULL);
}

TEST(tokenizer_bad_components) {
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Precompiled\"}}",
           GP_ERR_UNSUPPORTED, "'normalizer.type'", "Precompiled");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": "
           "\"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
           "\"Isolated\"}]}}",
           GP_ERR_UNSUPPORTED, "'pre_tokenizer.pretokenizers[0].pattern'", NULL);
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": \"CTC\"}}",
           GP_ERR_UNSUPPORTED, "'decoder.type'", "CTC");
    expect("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": "
           "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
           GP_ERR_FORMAT, "'post_processor.single[0]'", "<s>");
}

TEST(tokenizer_bad_calls) {
    char *p = write_tok(MODEL("{\"a\": 0, \"b\": 1, \"ab\": 2}", "[\"a b\"]"));
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load(p, &t), GP_OK);
    int32_t *ids, n;
    CHECK_STATUS(gp_tokenizer_encode(t, NULL, 3, 0, &ids, &n), GP_ERR_INVALID_ARG);
    char *text;
    size_t len;
    int32_t bad[] = {0, -5}, past[] = {0, 99};
    CHECK_STATUS(gp_tokenizer_decode(t, bad, 2, 0, &text, &len), GP_ERR_RANGE);
    CHECK(text == NULL);
    /* ids past the tokenizer decode as "" like tokenizers' decode (a model's padded vocab_size) */
    CHECK_STATUS(gp_tokenizer_decode(t, past, 2, 0, &text, &len), GP_OK);
    CHECK_STR(text, "a");
    gp_free(text);
    CHECK_STATUS(gp_tokenizer_decode(t, bad, -1, 0, &text, &len), GP_ERR_INVALID_ARG);
    gp_detok *d;
    CHECK_STATUS(gp_detok_init(t, 0, &d), GP_OK);
    const char *piece;
    CHECK_STATUS(gp_detok_push(d, -3, &piece), GP_ERR_RANGE);
    gp_detok_free(d);
    gp_tokenizer_free(t);
    gp_tokenizer_free(NULL);
    gp_detok_free(NULL);
    free(p);
}

/* A word that has no id (no unk token, no byte fallback) encodes to nothing, first in the text or later: found by
 * fuzz_tokenizer (pointer arithmetic on the still-empty id list, caught by UBSan in make asan). */
TEST(tokenizer_bad_word_without_ids) {
    char *p = write_tok(MODEL("{\"a\": 0, \"b\": 1, \"ab\": 2}", "[\"a b\"]"));
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load(p, &t), GP_OK);
    int32_t *ids = NULL, n = -1;
    CHECK_STATUS(gp_tokenizer_encode(t, "xyz", 3, 0, &ids, &n), GP_OK);
    CHECK_EQ_INT(n, 0);
    gp_free(ids);
    CHECK_STATUS(gp_tokenizer_encode(t, "xyz", 3, 0, &ids, &n), GP_OK); /* again: nothing was cached */
    CHECK_EQ_INT(n, 0);
    gp_free(ids);
    gp_tokenizer_free(t);
    free(p);
}
