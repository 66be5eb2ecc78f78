/* test_tokenizer_extra.c — five more real tokenizers (gemma3, gpt4o, deepseek_v3, gptoss, mistral_nemo, as the
 * @lenml/tokenizer-* packages ship them) read from the fixtures' tokenizers/ folder: each loads, and
 * decode(encode(s)) == s and streaming == decode on the Shakespeare corpus and on a mixed-script string.  A missing
 * fixture skips locally and fails under CI=true (gp_test_fixture). */
#include "genparity.h"
#include "util/util.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static const char *MIXED =
    "Hello, world! \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD0\xBC\xD0\xB8\xD1\x80. "   /* Cyrillic */
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 "                       /* CJK */
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85 " /* Arabic */
    "\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 "                  /* emoji */
    "caf\xC3\xA9  na\xC3\xAFve\n\ttabs   12345 3.14 <b>x</b>";

static char *read_all(const char *path, size_t *len) {
    char *b;
    return gp_read_file(path, 256u << 20, &b, len) == GP_OK ? b : NULL;
}

static int stream_equals(const gp_tokenizer *t, const int32_t *ids, int32_t n, const char *want, size_t wlen) {
    gp_detok *d;
    if (gp_detok_init(t, 0, &d) != GP_OK) return 0;
    size_t off = 0;
    int ok = 1;
    for (int32_t i = 0; i <= n && ok; i++) {
        const char *piece;
        if ((i < n ? gp_detok_push(d, ids[i], &piece) : gp_detok_flush(d, &piece)) != GP_OK) ok = 0;
        else {
            size_t k = strlen(piece);
            if (off + k > wlen || memcmp(want + off, piece, k) != 0) ok = 0;
            off += k;
        }
    }
    gp_detok_free(d);
    return ok && off == wlen;
}

static void round_trip(const gp_tokenizer *t, const char *name, const char *what, const char *s, size_t len) {
    int32_t *ids, n;
    CHECK_STATUS(gp_tokenizer_encode(t, s, len, 0, &ids, &n), GP_OK);
    char *back;
    size_t blen;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, n, 0, &back, &blen), GP_OK);
    int ok = back && blen == len && memcmp(back, s, len) == 0;
    if (!ok) {
        size_t d = 0;
        while (back && d < blen && d < len && back[d] == s[d]) d++;
        printf("    %s %s: round trip differs at byte %zu: \"%.20s\" vs \"%.20s\"\n", name, what, d, back ? back + d : "",
               s + d);
        gp_test_failed = 1;
    }
    if (back && !stream_equals(t, ids, n, back, blen)) {
        printf("    %s %s: streamed text differs from decode\n", name, what);
        gp_test_failed = 1;
    }
    NOTE("%s %s: %zu bytes -> %d ids%s", name, what, len, n, ok ? ", exact round trip" : "");
    gp_free(back);
    gp_free(ids);
}

static void check_extra(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", name);
    char *path = gp_test_fixture(rel);
    if (!path) return;
    gp_tokenizer *t;
    CHECK_STATUS(gp_tokenizer_load(path, &t), GP_OK);
    free(path);
    if (gp_test_failed) return;
    round_trip(t, name, "mixed-script", MIXED, strlen(MIXED));
    char *corpus = gp_test_fixture("corpus/tinyshakespeare.txt");
    size_t len;
    char *text = corpus ? read_all(corpus, &len) : NULL;
    if (text) {
        if (getenv("GENPARITY_ASAN") && len > 100000) len = 100000; /* sanitizers are slow: a prefix suffices */
        round_trip(t, name, "corpus", text, len);
    }
    free(text);
    free(corpus);
    gp_tokenizer_free(t);
}

TEST(tokenizer_extra_gemma3) { check_extra("gemma3"); }
TEST(tokenizer_extra_gpt4o) { check_extra("gpt4o"); }
TEST(tokenizer_extra_deepseek_v3) { check_extra("deepseek_v3"); }
TEST(tokenizer_extra_gptoss) { check_extra("gptoss"); }
TEST(tokenizer_extra_mistral_nemo) { check_extra("mistral_nemo"); }
