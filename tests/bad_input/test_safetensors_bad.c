/* test_safetensors_bad.c — malformed safetensors files and sharded indexes: each must fail with the right status,
 * a message naming the file and the field/tensor at fault, and nothing left mapped (leaks are ASan's job). */
#include "io/safetensors.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

/* Writes DIR/name = [u64 LE hlen][hdr][data_len zero bytes]; returns the path (caller frees). */
static char *mk_raw(const char *dir, const char *name, uint64_t hlen, const char *hdr, size_t data_len) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    if (!path) abort();
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hlen >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
    return path;
}

/* DIR/name with a truthful header length. */
static char *mk_file(const char *dir, const char *name, const char *hdr, size_t data_len) {
    return mk_raw(dir, name, strlen(hdr), hdr, data_len);
}

/* A well-formed length prefix for hdr, in a fresh temporary dir. */
static char *mk_st(const char *hdr, size_t data_len) {
    char *dir = gp_test_tmpdir();
    char *p = mk_file(dir, "bad.safetensors", hdr, data_len);
    free(dir);
    return p;
}

/* 1 if path is mapped in this process. */
static int is_mapped(const char *path) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, path) != NULL;
    fclose(f);
    return found;
}

/* Opens path (a file, or a dir when is_dir), expects status st and a message containing path, w1 and w2. */
#define EXPECT_BAD(path, is_dir, st, w1, w2)                                                                  \
    do {                                                                                                      \
        gp_st_set *_set = (gp_st_set *)1;                                                                     \
        CHECK_STATUS((is_dir) ? gp_st_open_dir(path, &_set) : gp_st_open_file(path, &_set), st);              \
        CHECK(_set == NULL);                                                                                  \
        if (_set && _set != (gp_st_set *)1) gp_st_close(_set);                                                \
        const char *_m = gp_errmsg();                                                                         \
        if (!strstr(_m, path) || !strstr(_m, w1) || !strstr(_m, w2)) {                                        \
            printf("    %s:%d: message \"%s\" should name \"%s\", \"%s\", \"%s\"\n", __FILE__, __LINE__, _m,  \
                   path, w1, w2);                                                                             \
            gp_test_failed = 1;                                                                               \
        }                                                                                                     \
        CHECK(!is_mapped(path));                                                                              \
    } while (0)

/* One header entry: "name":{"dtype":..,"shape":..,"data_offsets":[b,e]} */
#define T1(name, dtype, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

TEST(st_bad_file_shorter_than_8_bytes) {
    char *dir = gp_test_tmpdir();
    char *p = malloc(strlen(dir) + 16);
    sprintf(p, "%s/short", dir);
    FILE *f = fopen(p, "wb");
    fwrite("\x05\0\0\0\0", 1, 5, f);
    fclose(f);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "header length", "shorter than");
    free(p);
    free(dir);
}

TEST(st_bad_missing_file) {
    char *dir = gp_test_tmpdir();
    char *p = malloc(strlen(dir) + 32);
    sprintf(p, "%s/none.safetensors", dir);
    EXPECT_BAD(p, 0, GP_ERR_MISSING, "cannot open", "");
    free(p);
    free(dir);
}

TEST(st_bad_header_length_past_eof) {
    char *dir = gp_test_tmpdir();
    char *p = mk_raw(dir, "x.safetensors", 1000, "{}", 10);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "header length", "past the end");
    free(p);
    free(dir);
}

TEST(st_bad_header_length_over_100mb) {
    char *dir = gp_test_tmpdir();
    char *p = mk_raw(dir, "x.safetensors", 200ull << 20, "{}", 0); /* a 10-byte file claiming a 200 MB header */
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "header length", "over the limit");
    free(p);
    free(dir);
}

TEST(st_bad_header_not_json) {
    char *p = mk_st("{\"a\": nope", 0);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "'header'", "not valid JSON");
    free(p);
}

TEST(st_bad_header_trailing_garbage) {
    char *p = mk_st("{}   x", 0);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "'header'", "trailing");
    free(p);
}

TEST(st_bad_header_not_object) {
    char *p = mk_st("[1, 2, 3]", 0);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "'header'", "not an object");
    free(p);
}

TEST(st_bad_unknown_dtype) {
    char *p = mk_st("{" T1("w", "F4", "[2]", "0", "1") "}", 1);
    EXPECT_BAD(p, 0, GP_ERR_UNSUPPORTED, "tensor 'w': field 'dtype'", "'F4'");
    free(p);
}

TEST(st_bad_negative_shape_dim) {
    char *p = mk_st("{" T1("w", "F32", "[-1]", "0", "4") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'shape'", "dimension 0");
    free(p);
}

TEST(st_bad_fractional_shape_dim) {
    char *p = mk_st("{" T1("w", "F32", "[1.5]", "0", "4") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'shape'", "not an integer");
    free(p);
}

TEST(st_bad_too_many_dims) {
    char *p = mk_st("{" T1("w", "F32", "[1,1,1,1,1,1,1,1,1]", "0", "4") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_UNSUPPORTED, "tensor 'w': field 'shape'", "9 dimensions");
    free(p);
}

TEST(st_bad_shape_product_overflows) {
    char *p = mk_st("{" T1("w", "F32", "[4294967296,4294967296,4294967296]", "0", "4") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'shape'", "overflows");
    free(p);
}

TEST(st_bad_shape_times_dtype_not_span) {
    char *p = mk_st("{" T1("w", "F32", "[2]", "0", "4") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'data_offsets'", "is 8 bytes");
    free(p);
}

TEST(st_bad_offsets_begin_after_end) {
    char *p = mk_st("{" T1("w", "F32", "[0]", "4", "0") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'data_offsets'", "begin 4 > end 0");
    free(p);
}

TEST(st_bad_offsets_not_a_pair) {
    char *p = mk_st("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'w': field 'data_offsets'", "[begin, end]");
    free(p);
}

TEST(st_bad_offsets_overlap) {
    char *p = mk_st("{" T1("a", "F32", "[2]", "0", "8") "," T1("b", "F32", "[2]", "4", "12") "}", 12);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'b': field 'data_offsets'", "overlaps tensor 'a'");
    free(p);
}

/* Header order is free: the JSON lists b (bytes 8..16) before a (bytes 0..8).  Only gaps/overlaps are errors. */
TEST(st_out_of_order_header_is_accepted) {
    char *p = mk_st("{" T1("b", "F32", "[2]", "8", "16") "," T1("a", "F32", "[2]", "0", "8") "}", 16);
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_file(p, &s), GP_OK);
    if (s) {
        CHECK_EQ_INT(gp_st_count(s), 2);
        CHECK_STR(gp_st_at(s, 0)->name, "a");
        CHECK_EQ_INT((const char *)gp_st_find(s, "b")->data - (const char *)gp_st_find(s, "a")->data, 8);
    }
    gp_st_close(s);
    free(p);
}

TEST(st_bad_gap_between_tensors) {
    char *p = mk_st("{" T1("a", "F32", "[1]", "0", "4") "," T1("b", "F32", "[1]", "8", "12") "}", 12);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'b': field 'data_offsets'", "gap of 4 bytes");
    free(p);
}

TEST(st_bad_gap_at_start) {
    char *p = mk_st("{" T1("a", "F32", "[1]", "4", "8") "}", 8);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'a': field 'data_offsets'", "gap of 4 bytes");
    free(p);
}

TEST(st_bad_span_past_end) {
    char *p = mk_st("{" T1("a", "F32", "[2]", "0", "8") "}", 4);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'a': field 'data_offsets'", "past the data section");
    free(p);
}

TEST(st_bad_data_longer_than_covered) {
    char *p = mk_st("{" T1("a", "F32", "[1]", "0", "4") "}", 8);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "field 'data_offsets'", "cover 4 bytes but the data section is 8");
    free(p);
}

TEST(st_bad_duplicate_tensor_name) {
    char *p = mk_st("{" T1("a", "F32", "[1]", "0", "4") "," T1("a", "F32", "[1]", "4", "8") "}", 8);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "tensor 'a'", "duplicate");
    free(p);
}

TEST(st_bad_metadata_not_strings) {
    char *p = mk_st("{\"__metadata__\":{\"format\":1}}", 0);
    EXPECT_BAD(p, 0, GP_ERR_FORMAT, "field '__metadata__'", "'format'");
    free(p);
}

TEST(st_metadata_null_is_none) { /* mlx.core.save_safetensors writes "__metadata__": null */
    char *p = mk_st("{\"__metadata__\":null," T1("a", "F32", "[1]", "0", "4") "}", 4);
    gp_st_set *st = NULL;
    CHECK_STATUS(gp_st_open_file(p, &st), GP_OK);
    CHECK(st && gp_st_find(st, "a") && !gp_st_metadata(st, "format"));
    gp_st_close(st);
    free(p);
}

/* A folder with shard(s) and an index; shard "ok.safetensors" holds tensor "a". */
static char *mk_index_dir(const char *index_json, int with_shard) {
    char *dir = gp_test_tmpdir();
    if (with_shard) free(mk_file(dir, "ok.safetensors", "{" T1("a", "F32", "[1]", "0", "4") "}", 4));
    char *ip = malloc(strlen(dir) + 40);
    sprintf(ip, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(ip, "w");
    fputs(index_json, f);
    fclose(f);
    free(ip);
    return dir;
}

TEST(st_bad_index_names_missing_shard) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\"}}", 0);
    EXPECT_BAD(dir, 1, GP_ERR_MISSING, "field 'weight_map'", "'model-00001-of-00002.safetensors' is missing");
    free(dir);
}

TEST(st_bad_index_tensor_not_in_its_shard) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"ok.safetensors\",\"b\":\"ok.safetensors\"}}", 1);
    EXPECT_BAD(dir, 1, GP_ERR_MISSING, "tensor 'b'", "not in shard 'ok.safetensors'");
    free(dir);
}

TEST(st_bad_index_shard_name_with_dotdot) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"../ok.safetensors\"}}", 1);
    EXPECT_BAD(dir, 1, GP_ERR_FORMAT, "tensor 'a'", "'../ok.safetensors' is not a plain file name");
    free(dir);
}

TEST(st_bad_index_shard_name_with_slash) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"/etc/passwd\"}}", 1);
    EXPECT_BAD(dir, 1, GP_ERR_FORMAT, "field 'weight_map'", "not a plain file name");
    free(dir);
}

TEST(st_bad_index_tensor_in_two_shards) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"ok.safetensors\",\"b\":\"ok2.safetensors\"}}", 1);
    free(mk_file(dir, "ok2.safetensors",
                "{" T1("a", "F32", "[1]", "0", "4") "," T1("b", "F32", "[1]", "4", "8") "}", 8));
    EXPECT_BAD(dir, 1, GP_ERR_FORMAT, "tensor 'a'", "also in shard");
    free(dir);
}

TEST(st_bad_index_not_json) {
    char *dir = mk_index_dir("{\"weight_map\": [", 1);
    EXPECT_BAD(dir, 1, GP_ERR_FORMAT, "field 'weight_map'", "not valid JSON");
    free(dir);
}

TEST(st_bad_shard_is_malformed) {
    char *dir = mk_index_dir("{\"weight_map\":{\"a\":\"ok.safetensors\",\"c\":\"broken.safetensors\"}}", 1);
    free(mk_file(dir, "broken.safetensors", "{]", 0));
    EXPECT_BAD(dir, 1, GP_ERR_FORMAT, "broken.safetensors", "'header'");
    free(dir);
}
