/* test_tokenizer.c — tokenizer behaviour beyond the reference rows: invalid UTF-8 input, decoding ids that end
 * mid-character, corpus round trips and streaming on the fixture tokenizers, the query API, and small synthetic
 * tokenizer.json files for features the fixtures do not use (unk fusion, byte fallback, Metaspace, split
 * behaviors, added-token lstrip/rstrip/single_word/normalized, merges in ["a","b"] form). */
#include "genparity.h"
#include "test.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static gp_tokenizer *fixture_tok(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizers/%s", name);
    char *dir = gp_test_fixture(rel);
    if (!dir) return NULL;
    gp_tokenizer *t = NULL;
    if (gp_tokenizer_load_dir(dir, &t) != GP_OK) {
        printf("    %s\n", gp_errmsg());
        gp_test_failed = 1;
    }
    free(dir);
    return t;
}

static char *read_corpus(size_t *len) {
    char *p = gp_test_fixture("corpus/tinyshakespeare.txt"), *b = NULL;
    if (p && gp_read_file(p, 64u << 20, &b, len) != GP_OK) b = NULL;
    free(p);
    return b;
}

/* Encodes both strings and checks that the ids are equal. */
static void same_encoding(const gp_tokenizer *t, const char *a, size_t la, const char *b) {
    int32_t *x, *y, nx, ny;
    CHECK_STATUS(gp_tokenizer_encode(t, a, la, 0, &x, &nx), GP_OK);
    CHECK_STATUS(gp_tokenizer_encode(t, b, strlen(b), 0, &y, &ny), GP_OK);
    int same = nx == ny && (nx == 0 || memcmp(x, y, sizeof *x * (size_t)nx) == 0);
    if (!same) printf("    encodings differ for the input expected to read as \"%s\" (%d vs %d ids)\n", b, nx, ny);
    CHECK(same);
    gp_free(x);
    gp_free(y);
}

TEST(tokenizer_invalid_utf8_becomes_fffd) {
    gp_tokenizer *t = fixture_tok("qwen3");
    if (!t) return;
    same_encoding(t, "a\xff" "b", 3, "a\xEF\xBF\xBD" "b");
    same_encoding(t, "\xe4\xb8", 2, "\xEF\xBF\xBD");                         /* truncated: one maximal subpart */
    same_encoding(t, "\xf0\x80x", 3, "\xEF\xBF\xBD\xEF\xBF\xBDx");           /* F0 80: two */
    same_encoding(t, "\xed\xa0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); /* surrogate: three */
    same_encoding(t, "ok\xc3", 3, "ok\xEF\xBF\xBD");
    /* NUL is ordinary text: it round-trips */
    int32_t *ids, n;
    CHECK_STATUS(gp_tokenizer_encode(t, "nul\0byte", 8, 0, &ids, &n), GP_OK);
    char *txt;
    size_t len;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, n, 0, &txt, &len), GP_OK);
    CHECK(len == 8 && memcmp(txt, "nul\0byte", 8) == 0);
    gp_free(txt);
    gp_free(ids);
    gp_tokenizer_free(t);
}

/* Byte-level: a prefix of the ids that ends inside a character decodes to the complete part plus one U+FFFD. */
TEST(tokenizer_decode_mid_character) {
    const char *names[] = {"llama3", "qwen3"};
    const char *s = "\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";
    for (int k = 0; k < 2; k++) {
        gp_tokenizer *t = fixture_tok(names[k]);
        if (!t) return;
        int32_t *ids, n;
        CHECK_STATUS(gp_tokenizer_encode(t, s, strlen(s), 0, &ids, &n), GP_OK);
        int bad = 0;
        for (int32_t i = 0; i <= n; i++) {
            char *txt;
            size_t len;
            CHECK_STATUS(gp_tokenizer_decode(t, ids, i, 0, &txt, &len), GP_OK);
            size_t core = len;
            if (core >= 3 && !memcmp(txt + core - 3, "\xEF\xBF\xBD", 3)) core -= 3;
            /* what remains must be a prefix of s, without any U+FFFD */
            if (core > strlen(s) || memcmp(txt, s, core) != 0) bad++;
            if (i == n && strcmp(txt, s) != 0) bad++;
            gp_free(txt);
        }
        if (bad) printf("    %s: %d prefixes decode wrongly\n", names[k], bad);
        CHECK_EQ_INT(bad, 0);
        gp_free(ids);
        gp_tokenizer_free(t);
    }
}

/* SentencePiece byte fallback follows tokenizers' ByteFallback: an invalid byte run is one U+FFFD per byte. */
TEST(tokenizer_decode_byte_fallback_partial) {
    gp_tokenizer *t = fixture_tok("llama2");
    if (!t) return;
    int32_t ids[] = {238, 136}; /* <0xEC> <0x95>: the first two bytes of a Hangul syllable */
    char *txt;
    size_t len;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, 2, 0, &txt, &len), GP_OK);
    CHECK_STR(txt, "\xEF\xBF\xBD\xEF\xBF\xBD");
    gp_free(txt);
    gp_tokenizer_free(t);
}

static char *stream_all(const gp_tokenizer *t, const int32_t *ids, int32_t n, int skip, size_t *len) {
    gp_detok *d;
    if (gp_detok_init(t, skip, &d) != GP_OK) return NULL;
    size_t cap = 1 << 16, l = 0;
    char *out = malloc(cap);
    for (int32_t i = 0; i <= n; i++) {
        const char *piece;
        gp_status s = i < n ? gp_detok_push(d, ids[i], &piece) : gp_detok_flush(d, &piece);
        if (s != GP_OK) {
            free(out);
            gp_detok_free(d);
            return NULL;
        }
        size_t k = strlen(piece);
        while (l + k + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + l, piece, k);
        l += k;
    }
    out[l] = 0;
    *len = l;
    gp_detok_free(d);
    return out;
}

static void round_trip_corpus(const char *name) {
    size_t len;
    char *text = read_corpus(&len);
    if (!text) return;
    gp_tokenizer *t = fixture_tok(name);
    if (!t) {
        free(text);
        return;
    }
    int32_t *ids, n;
    CHECK_STATUS(gp_tokenizer_encode(t, text, len, 0, &ids, &n), GP_OK);
    char *back;
    size_t blen;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, n, 0, &back, &blen), GP_OK);
    CHECK(blen == len && memcmp(back, text, len) == 0);
    size_t slen;
    char *st = stream_all(t, ids, n, 0, &slen);
    CHECK(st && slen == blen && memcmp(st, back, blen) == 0);
    NOTE("%s: %zu bytes -> %d ids, round trip and stream exact", name, len, n);
    free(st);
    gp_free(back);
    gp_free(ids);
    gp_tokenizer_free(t);
    free(text);
}

TEST(tokenizer_round_trip_corpus_llama2) { round_trip_corpus("llama2"); }
TEST(tokenizer_round_trip_corpus_llama3) { round_trip_corpus("llama3"); }
TEST(tokenizer_round_trip_corpus_qwen3) { round_trip_corpus("qwen3"); }

TEST(tokenizer_queries) {
    gp_tokenizer *t = fixture_tok("llama2");
    if (!t) return;
    CHECK_EQ_INT(gp_tokenizer_n_vocab(t), 32000);
    CHECK_EQ_INT(gp_tokenizer_bos_id(t), 1);
    CHECK_EQ_INT(gp_tokenizer_eos_id(t), 2);
    CHECK_EQ_INT(gp_tokenizer_pad_id(t), -1);
    CHECK_EQ_INT(gp_tokenizer_token_to_id(t, "<s>"), 1);
    CHECK_STR(gp_tokenizer_id_to_token(t, 2), "</s>");
    CHECK(gp_tokenizer_id_to_token(t, 32000) == NULL);
    CHECK(gp_tokenizer_id_to_token(t, -1) == NULL);
    CHECK_EQ_INT(gp_tokenizer_token_to_id(t, "no such token"), -1);
    CHECK(gp_tokenizer_is_special(t, 1));
    CHECK(!gp_tokenizer_is_special(t, 1000));
    gp_tokenizer_free(t);
    t = fixture_tok("qwen3");
    if (!t) return;
    CHECK_EQ_INT(gp_tokenizer_bos_id(t), -1);
    CHECK_EQ_INT(gp_tokenizer_eos_id(t), gp_tokenizer_token_to_id(t, "<|im_end|>"));
    CHECK_EQ_INT(gp_tokenizer_pad_id(t), gp_tokenizer_token_to_id(t, "<|endoftext|>"));
    CHECK_EQ_INT(gp_tokenizer_n_vocab(t), 151669);
    gp_tokenizer_free(t);
}

/* ---- synthetic tokenizers ----------------------------------------------------------------------------------- */

static gp_tokenizer *synth(const char *json) {
    char *dir = gp_test_tmpdir();
    char *p = malloc(strlen(dir) + 32);
    sprintf(p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "wb");
    gp_tokenizer *t = NULL;
    if (f) {
        fputs(json, f);
        fclose(f);
        if (gp_tokenizer_load(p, &t) != GP_OK) {
            printf("    synthetic tokenizer: %s\n", gp_errmsg());
            gp_test_failed = 1;
        }
    }
    free(p);
    free(dir);
    return t;
}

static void expect_ids(const gp_tokenizer *t, const char *text, const int32_t *want, int32_t nw) {
    int32_t *ids, n;
    if (gp_tokenizer_encode(t, text, strlen(text), 0, &ids, &n) != GP_OK) {
        printf("    encode \"%s\": %s\n", text, gp_errmsg());
        gp_test_failed = 1;
        return;
    }
    int ok = n == nw && (n == 0 || memcmp(ids, want, sizeof *ids * (size_t)n) == 0);
    if (!ok) {
        printf("    \"%s\": got [", text);
        for (int32_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("], want [");
        for (int32_t i = 0; i < nw; i++) printf("%s%d", i ? "," : "", want[i]);
        printf("]\n");
        gp_test_failed = 1;
    }
    gp_free(ids);
}

static void expect_text(const gp_tokenizer *t, const int32_t *ids, int32_t n, const char *want) {
    char *txt;
    size_t len;
    CHECK_STATUS(gp_tokenizer_decode(t, ids, n, 0, &txt, &len), GP_OK);
    CHECK_STR(txt, want);
    size_t sl;
    char *st = stream_all(t, ids, n, 0, &sl);
    CHECK_STR(st, txt);
    free(st);
    gp_free(txt);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (int32_t)(sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

TEST(tokenizer_synth_unk_fusion) {
    const char *fmt = "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": %s, "
                      "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3}, \"merges\": [[\"a\", \"b\"]]}}";
    char json[512];
    snprintf(json, sizeof json, fmt, "true");
    gp_tokenizer *t = synth(json);
    if (!t) return;
    expect_ids(t, "abxyab", IDS(3, 0, 3));
    gp_tokenizer_free(t);
    snprintf(json, sizeof json, fmt, "false");
    t = synth(json);
    if (!t) return;
    expect_ids(t, "abxyab", IDS(3, 0, 0, 3));
    gp_tokenizer_free(t);
}

TEST(tokenizer_synth_byte_fallback) {
    gp_tokenizer *t = synth("{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\", "
                            "\"vocab\": {\"<unk>\": 0, \"<0xC3>\": 1, \"<0xA9>\": 2, \"a\": 3}, \"merges\": []}, "
                            "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
                            "{\"type\": \"Fuse\"}]}}");
    if (!t) return;
    expect_ids(t, "a\xC3\xA9", IDS(3, 1, 2));
    expect_ids(t, "a\xE4\xB8\xAD", IDS(3, 0)); /* a byte without a <0xNN> token: unk */
    expect_text(t, IDS(3, 1, 2), "a\xC3\xA9");
    expect_text(t, IDS(3, 1), "a\xEF\xBF\xBD");
    expect_text(t, IDS(1, 1, 3), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
    gp_tokenizer_free(t);
}

TEST(tokenizer_synth_metaspace) {
    gp_tokenizer *t = synth(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xE2\x96\x81\": 0, \"h\": 1, \"i\": 2, \"\xE2\x96\x81h\": 3, "
        "\"\xE2\x96\x81hi\": 4, \"hi\": 5}, \"merges\": [\"\xE2\x96\x81 h\", \"\xE2\x96\x81h i\", \"h i\"]},"
        "\"added_tokens\": [{\"id\": 6, \"content\": \"<x>\", \"special\": false, \"normalized\": false}],"
        "\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"first\", "
        "\"split\": true},"
        "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"first\"}}");
    if (!t) return;
    expect_ids(t, "hi hi", IDS(4, 4));
    expect_ids(t, "<x>hi", IDS(6, 5)); /* not at offset 0: no prepended U+2581 */
    expect_ids(t, " hi", IDS(4));
    expect_text(t, IDS(4, 4), "hi hi");
    expect_text(t, IDS(6, 4, 5), "<x> hihi");
    gp_tokenizer_free(t);
}

static gp_tokenizer *split_tok(const char *behavior) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"-\": 2, \"a-\": 3, \"-b\": 4, \"--\": 5, "
             "\"a--\": 6, \"--b\": 7}, \"merges\": [\"a -\", \"- b\", \"- -\", \"a --\", \"-- b\"]},"
             "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", "
             "\"invert\": false}}",
             behavior);
    return synth(json);
}

TEST(tokenizer_synth_split_behaviors) {
    gp_tokenizer *t;
    if ((t = split_tok("Removed"))) expect_ids(t, "a-b", IDS(0, 1)), gp_tokenizer_free(t);
    if ((t = split_tok("Isolated"))) expect_ids(t, "a-b", IDS(0, 2, 1)), gp_tokenizer_free(t);
    if ((t = split_tok("MergedWithPrevious"))) expect_ids(t, "a-b", IDS(3, 1)), gp_tokenizer_free(t);
    if ((t = split_tok("MergedWithNext"))) expect_ids(t, "a-b", IDS(0, 4)), gp_tokenizer_free(t);
    if ((t = split_tok("Contiguous"))) expect_ids(t, "a--b", IDS(0, 5, 1)), gp_tokenizer_free(t);
    if ((t = split_tok("Isolated"))) expect_ids(t, "a--b", IDS(0, 2, 2, 1)), gp_tokenizer_free(t);
}

TEST(tokenizer_synth_added_tokens) {
    gp_tokenizer *t = synth(
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \" \": 2, \"<\": 6, \"w\": 7, \">\": 8}, "
        "\"merges\": []},"
        "\"normalizer\": {\"type\": \"Lowercase\"},"
        "\"added_tokens\": ["
        "{\"id\": 3, \"content\": \"[M]\", \"special\": true, \"normalized\": true},"
        "{\"id\": 4, \"content\": \"<t>\", \"special\": true, \"normalized\": false, \"lstrip\": true, \"rstrip\": true},"
        "{\"id\": 5, \"content\": \"<w>\", \"special\": false, \"normalized\": false, \"single_word\": true}]}");
    if (!t) return;
    expect_ids(t, "A[M]B", IDS(0, 3, 1));     /* matched on the lowercased text */
    expect_ids(t, "a <t>  b", IDS(0, 4, 1));  /* spaces around <t> are absorbed */
    expect_ids(t, "a<w>", IDS(0, 6, 7, 8));   /* not a single word: plain text */
    expect_ids(t, "a <w> b", IDS(0, 2, 5, 2, 1));
    CHECK(gp_tokenizer_is_special(t, 3));
    CHECK(!gp_tokenizer_is_special(t, 5));
    char *txt;
    size_t len;
    CHECK_STATUS(gp_tokenizer_decode(t, IDS(0, 3, 5), 1, &txt, &len), GP_OK);
    CHECK_STR(txt, "a <w>"); /* no decoder: tokens joined with spaces; special [m] skipped */
    gp_free(txt);
    gp_tokenizer_free(t);
}
