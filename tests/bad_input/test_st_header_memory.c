/* test_st_header_memory.c — issue 17 item 11: a safetensors header is streamed, not parsed into a JSON tree, so a
 * 20 MB header of small values (800 MB as a cJSON tree) costs little more than its own bytes; a header with 100k
 * real tensors loads them all; tokenizer.json and config files over their size limits are refused before reading. */
#include "genparity.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes path = 8-byte length + header + data_len zero bytes. */
static int write_st(const char *path, const char *hdr, size_t hlen, size_t data_len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = 0; ok && i < data_len; i++) ok = fputc(0, f) != EOF;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Kilobytes of the named /proc/self/status line (VmRSS, VmHWM), or -1. */
static long proc_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') kb = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return kb;
}

/* Resets the peak RSS to the current one (Linux); 0 on success. */
static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

TEST(st_header_of_small_values_is_streamed) {
    size_t junk = (size_t)20 << 20;
    char *hdr = malloc(junk + 256);
    REQUIRE(hdr);
    size_t k = (size_t)sprintf(hdr, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"junk\":[");
    for (size_t i = 0; i < junk / 2; i++) hdr[k++] = '1', hdr[k++] = ',';
    k += (size_t)sprintf(hdr + k, "1]}}");
    NOTE("header of %zu bytes: cJSON would build a tree of ~%zu MB", k, gp_json_tree_estimate(hdr, k) >> 20);
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    REQUIRE(write_st(path, hdr, k, 4) == 0);
    free(hdr);
    long rss0 = proc_kb("VmRSS");
    int can_measure = reset_peak() == 0 && rss0 > 0 && !getenv("GENPARITY_ASAN");
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_file(path, &s), GP_OK);
    long peak = proc_kb("VmHWM");
    if (s) {
        const gp_tensor_view *w = gp_st_find(s, "w");
        CHECK(w && w->n_elems == 1);
    }
    gp_st_close(s);
    if (can_measure) {
        NOTE("peak RSS growth while opening it: %ld KB (limit 100 MB; the header itself is mapped)", peak - rss0);
        CHECK(peak - rss0 < 100 * 1024);
    }
    free(dir);
}

TEST(st_header_with_100k_tensors) {
    int n = 100000;
    size_t cap = (size_t)n * 96 + 64;
    char *hdr = malloc(cap);
    REQUIRE(hdr);
    size_t k = (size_t)sprintf(hdr, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(hdr + k, cap - k, ",\"t.%d\\u00e9\":{\"shape\":[1],\"data_offsets\":[%d,%d],\"dtype\":\"F32\"}",
                              i, 4 * i, 4 * i + 4);
    hdr[k++] = '}';
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/many.safetensors", dir);
    REQUIRE(write_st(path, hdr, k, (size_t)4 * n) == 0);
    free(hdr);
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_file(path, &s), GP_OK);
    if (s) {
        CHECK_EQ_INT(gp_st_count(s), n);
        const gp_tensor_view *t = gp_st_find(s, "t.99999\xc3\xa9"); /* \u00e9 decoded to UTF-8 */
        CHECK(t && t->nbytes == 4 && t->shape[0] == 1);
        CHECK_STR(gp_st_metadata(s, "format"), "pt");
    }
    gp_st_close(s);
    free(dir);
}

TEST(st_header_names_with_nul_or_bad_escapes) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);
    static const struct {
        const char *hdr, *needle;
    } cases[] = {
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "NUL"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", "trailing"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "not valid JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "dimension 0"},
        {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", "'dtype'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,4]}}", "'shape'"},
        {"{\"__metadata__\":{\"a\":\"b\"},\"__metadata__\":{}}", "twice"},
        {"{\"__metadata__\":[]}", "not an object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE(write_st(path, cases[i].hdr, strlen(cases[i].hdr), 4) == 0);
        gp_st_set *s = NULL;
        gp_status st = gp_st_open_file(path, &s);
        if (st == GP_OK || !strstr(gp_errmsg(), cases[i].needle) || !strstr(gp_errmsg(), path)) {
            NOTE("%s -> %d '%s' (want an error naming '%s')", cases[i].hdr, (int)st, gp_errmsg(), cases[i].needle);
            gp_test_failed = 1;
        }
        gp_st_close(s);
    }
    free(dir);
}

TEST(json_files_over_their_limits_are_refused_before_reading) {
    char *dir = gp_test_tmpdir();
    REQUIRE(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    /* a sparse file just over the config limit: refused by its size, never read */
    REQUIRE(fseek(f, (long)GP_JSON_CONFIG_BYTES, SEEK_SET) == 0 && fputc(' ', f) != EOF);
    fclose(f);
    gp_model *m = NULL;
    CHECK_STATUS(gp_model_load(dir, NULL, &m), GP_ERR_FORMAT);
    CHECK(strstr(gp_errmsg(), "config.json") && strstr(gp_errmsg(), "over the limit"));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    REQUIRE((f = fopen(path, "wb")));
    REQUIRE(fseek(f, (long)GP_JSON_TOKENIZER_BYTES, SEEK_SET) == 0 && fputc(' ', f) != EOF);
    fclose(f);
    gp_tokenizer *t = NULL;
    CHECK(gp_tokenizer_load(path, &t) != GP_OK);
    CHECK(strstr(gp_errmsg(), "tokenizer.json") && strstr(gp_errmsg(), "over the limit"));
    free(dir);
}
