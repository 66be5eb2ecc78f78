/* test_safetensors.c — unit tests of src/io/safetensors: dtype helpers, half-float conversions, reading every
 * fixture checkpoint, write -> read round trips, sharded folders, and a sparse 1 GiB file that must not cost RSS. */
#include "io/safetensors.h"
#include "test.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *k_models[] = {"tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3",
                                 "tiny-gemma2", "tiny-gemma3", "shakespeare-llama"};

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t header_len_of(const char *path) {
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (f) {
        if (fread(b, 1, 8, f) != 8) memset(b, 0, 8);
        fclose(f);
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

TEST(st_dtype_helpers) {
    for (int i = 0; i < GP_DTYPE_COUNT; i++) {
        gp_dtype t = GP_DTYPE_COUNT;
        CHECK_EQ_INT(gp_dtype_parse(gp_dtype_name((gp_dtype)i), &t), 0);
        CHECK_EQ_INT(t, i);
        CHECK(gp_dtype_size((gp_dtype)i) > 0);
    }
    gp_dtype t;
    CHECK_EQ_INT(gp_dtype_parse("F4", &t), -1);
    CHECK_EQ_INT(gp_dtype_parse("bf16", &t), -1);
    CHECK_EQ_INT(gp_dtype_size(GP_DTYPE_BF16), 2);
    CHECK_EQ_INT(gp_dtype_size(GP_DTYPE_F64), 8);
    CHECK_STR(gp_dtype_name(GP_DTYPE_F8_E4M3), "F8_E4M3");
}

TEST(st_f16_exhaustive) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gp_f16_to_f32((uint16_t)h);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
#ifdef __FLT16_MAX__
        _Float16 ref;
        uint16_t hh = (uint16_t)h;
        memcpy(&ref, &hh, 2);
        if (!is_nan && fbits(f) != fbits((float)ref)) bad++;
#endif
        if (is_nan ? !isnan(f) : gp_f32_to_f16(f) != h) bad++;
        if (is_nan && !isnan(gp_f16_to_f32(gp_f32_to_f16(f)))) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(gp_f16_to_f32(0x0001) == ldexpf(1, -24)); /* smallest subnormal */
    CHECK(gp_f16_to_f32(0x03ff) == ldexpf(1023, -24));
    CHECK(gp_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(isinf(gp_f16_to_f32(0xfc00)) && gp_f16_to_f32(0xfc00) < 0);
}

TEST(st_f32_to_f16_rounding) {
    CHECK_EQ_INT(gp_f32_to_f16(65519.99f), 0x7bff);
    CHECK_EQ_INT(gp_f32_to_f16(65520.0f), 0x7c00);                  /* tie between 65504 and inf goes up */
    CHECK_EQ_INT(gp_f32_to_f16(ldexpf(1, -25)), 0x0000);            /* tie to even zero */
    CHECK_EQ_INT(gp_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 1);  /* just above the tie */
    CHECK_EQ_INT(gp_f32_to_f16(ldexpf(3, -25)), 0x0002);            /* 1.5 ulp -> 2 (even) */
    CHECK_EQ_INT(gp_f32_to_f16(ldexpf(5, -25)), 0x0002);            /* 2.5 ulp -> 2 (even) */
    CHECK_EQ_INT(gp_f32_to_f16(ldexpf(2047, -25)), 0x0400);         /* subnormal rounds up into the first normal */
    CHECK_EQ_INT(gp_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);     /* tie, even below */
    CHECK_EQ_INT(gp_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);     /* tie, odd below -> up */
    CHECK_EQ_INT(gp_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ_INT(gp_f32_to_f16(-INFINITY), 0xfc00);
    CHECK(isnan(gp_f16_to_f32(gp_f32_to_f16(NAN))));
#ifdef __FLT16_MAX__
    /* against the compiler's own float -> _Float16 conversion over a spread of bit patterns */
    int bad = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 65521) {
        float f = bitsf((uint32_t)u);
        if (isnan(f)) continue;
        _Float16 r = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        if (gp_f32_to_f16(f) != rb) bad++;
    }
    CHECK_EQ_INT(bad, 0);
#endif
}

TEST(st_f32_to_bf16_rounding) {
    CHECK_EQ_INT(gp_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(gp_f32_to_bf16(bitsf(0x3f808000)), 0x3f80); /* tie, even below */
    CHECK_EQ_INT(gp_f32_to_bf16(bitsf(0x3f818000)), 0x3f82); /* tie, odd below -> up */
    CHECK_EQ_INT(gp_f32_to_bf16(bitsf(0x3f808001)), 0x3f81);
    CHECK_EQ_INT(gp_f32_to_bf16(bitsf(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
    CHECK_EQ_INT(gp_f32_to_bf16(-0.0f), 0x8000);
    CHECK(isnan(gp_bf16_to_f32(gp_f32_to_bf16(NAN))));
    CHECK(isnan(gp_bf16_to_f32(gp_f32_to_bf16(bitsf(0x7f800001))))); /* payload only in the low bits */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gp_bf16_to_f32((uint16_t)h);
        if (!isnan(f) && gp_f32_to_bf16(f) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every fixture checkpoint opens; views are name-sorted, findable, and tile the data section. */
TEST(st_read_fixture_models) {
    for (size_t m = 0; m < sizeof k_models / sizeof *k_models; m++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/%s/model.safetensors", k_models[m]);
        char *path = gp_test_fixture(rel);
        if (!path) return;
        gp_st_set *s = NULL;
        CHECK_STATUS(gp_st_open_file(path, &s), GP_OK);
        if (s) {
            CHECK(gp_st_count(s) > 0);
            uint64_t sum = 0;
            for (int32_t i = 0; i < gp_st_count(s); i++) {
                const gp_tensor_view *v = gp_st_at(s, i);
                if (i) CHECK(strcmp(gp_st_at(s, i - 1)->name, v->name) < 0);
                CHECK(gp_st_find(s, v->name) == v);
                CHECK_STR(v->file, path);
                CHECK_EQ_INT(v->nbytes, v->n_elems * gp_dtype_size(v->dtype));
                sum += v->nbytes;
            }
            CHECK_EQ_INT(sum, gp_st_total_bytes(s));
            CHECK_EQ_INT(sum, (uint64_t)file_size(path) - 8 - header_len_of(path));
            CHECK_STR(gp_st_metadata(s, "format"), "pt");
            CHECK(gp_st_metadata(s, "nope") == NULL);
            CHECK(gp_st_find(s, "no.such.tensor") == NULL);
            CHECK(gp_st_at(s, -1) == NULL && gp_st_at(s, gp_st_count(s)) == NULL);
        }
        gp_st_close(s);
        free(path);
    }
}

TEST(st_qwen3_embed_and_value_round_trip) {
    char *dir = gp_test_fixture("models/tiny-qwen3");
    if (!dir) return;
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_dir(dir, &s), GP_OK);
    free(dir);
    REQUIRE(s);
    const gp_tensor_view *e = gp_st_find(s, "model.embed_tokens.weight");
    REQUIRE(e);
    CHECK_EQ_INT(e->dtype, GP_DTYPE_BF16);
    CHECK_EQ_INT(e->ndim, 2);
    CHECK_EQ_INT(e->shape[0], 151936);
    CHECK_EQ_INT(e->shape[1], 32);
    CHECK_EQ_INT(e->n_elems, 151936 * 32);
    CHECK_EQ_INT(e->nbytes, 151936 * 32 * 2);

    /* rows 0..3 written as BF16 and as F32 (converted), read back: the values survive exactly */
    const uint16_t *w = e->data;
    float f32[128];
    for (int i = 0; i < 128; i++) f32[i] = gp_bf16_to_f32(w[i]);
    gp_st_write_tensor t[2] = {
        {.name = "rows.bf16", .dtype = GP_DTYPE_BF16, .ndim = 2, .shape = {4, 32}, .data = w},
        {.name = "rows.f32", .dtype = GP_DTYPE_F32, .ndim = 2, .shape = {4, 32}, .data = f32},
    };
    char *tmp = gp_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/rows.safetensors", tmp);
    CHECK_STATUS(gp_st_write(path, t, 2, NULL, NULL, 0), GP_OK);
    gp_st_set *r = NULL;
    CHECK_STATUS(gp_st_open_file(path, &r), GP_OK);
    if (r) {
        const gp_tensor_view *a = gp_st_find(r, "rows.bf16"), *b = gp_st_find(r, "rows.f32");
        REQUIRE(a && b);
        CHECK(memcmp(a->data, w, 256) == 0);
        const uint16_t *ah = a->data;
        const float *bf = b->data;
        int bad = 0;
        for (int i = 0; i < 128; i++) bad += gp_bf16_to_f32(ah[i]) != f32[i] || bf[i] != f32[i] ||
                                            gp_f32_to_bf16(bf[i]) != w[i];
        CHECK_EQ_INT(bad, 0);
        NOTE("embed[0][0..2] = %g %g %g", f32[0], f32[1], f32[2]);
    }
    gp_st_close(r);
    gp_st_close(s);
    free(tmp);
}

TEST(st_write_read_round_trip) {
    char *tmp = gp_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmp);
    double f64[3] = {1.5, -2.25, 1e300};
    int64_t i64[2] = {-1, INT64_MAX};
    uint8_t u8[5] = {1, 2, 3, 4, 5};
    float scalar = 3.25f;
    uint16_t h16[6];
    for (int i = 0; i < 6; i++) h16[i] = gp_f32_to_f16((float)i * 0.1f);
    gp_st_write_tensor t[] = {
        {.name = "z.f64", .dtype = GP_DTYPE_F64, .ndim = 1, .shape = {3}, .data = f64},
        {.name = "a \"quoted\" \\ name\n", .dtype = GP_DTYPE_I64, .ndim = 2, .shape = {1, 2}, .data = i64},
        {.name = "u8", .dtype = GP_DTYPE_U8, .ndim = 1, .shape = {5}, .data = u8},
        {.name = "scalar", .dtype = GP_DTYPE_F32, .ndim = 0, .data = &scalar},
        {.name = "empty", .dtype = GP_DTYPE_BF16, .ndim = 3, .shape = {2, 0, 7}, .data = NULL},
        {.name = "h16", .dtype = GP_DTYPE_F16, .ndim = 3, .shape = {1, 2, 3}, .data = h16},
    };
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "tab\there \"q\""};
    CHECK_STATUS(gp_st_write(path, t, 6, keys, vals, 2), GP_OK);
    uint64_t hl = header_len_of(path);
    CHECK_EQ_INT(hl % 8, 0); /* padded so the data section is 8-aligned */
    CHECK_EQ_INT(file_size(path), (long)(8 + hl + 24 + 16 + 5 + 4 + 0 + 12));
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_file(path, &s), GP_OK);
    REQUIRE(s);
    CHECK_EQ_INT(gp_st_count(s), 6);
    for (int i = 0; i < 6; i++) {
        const gp_tensor_view *v = gp_st_find(s, t[i].name);
        CHECK(v != NULL);
        if (!v) continue;
        CHECK_EQ_INT(v->dtype, t[i].dtype);
        CHECK_EQ_INT(v->ndim, t[i].ndim);
        uint64_t n = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            CHECK_EQ_INT(v->shape[d], t[i].shape[d]);
            n *= (uint64_t)t[i].shape[d];
        }
        CHECK_EQ_INT(v->n_elems, n);
        CHECK(v->nbytes == 0 || memcmp(v->data, t[i].data, v->nbytes) == 0);
    }
    CHECK_STR(gp_st_metadata(s, "note"), "tab\there \"q\"");
    CHECK_STR(gp_st_metadata(s, "format"), "pt");
    gp_st_close(s);

    /* bad arguments are refused and leave no file behind */
    char bad_path[512];
    snprintf(bad_path, sizeof bad_path, "%s/bad.safetensors", tmp);
    gp_st_write_tensor dup[2] = {t[2], t[2]};
    CHECK_STATUS(gp_st_write(bad_path, dup, 2, NULL, NULL, 0), GP_ERR_INVALID_ARG);
    CHECK(strstr(gp_errmsg(), bad_path) != NULL);
    gp_st_write_tensor neg = t[2];
    neg.shape[0] = -1;
    CHECK_STATUS(gp_st_write(bad_path, &neg, 1, NULL, NULL, 0), GP_ERR_INVALID_ARG);
    CHECK(file_size(bad_path) < 0);
    snprintf(bad_path, sizeof bad_path, "%s/no/such/dir/x.safetensors", tmp);
    CHECK_STATUS(gp_st_write(bad_path, t, 1, NULL, NULL, 0), GP_ERR_IO);
    CHECK(strstr(gp_errmsg(), bad_path) != NULL);
    free(tmp);
}

/* Splits a fixture into two shards + index; the merged set matches the single file byte for byte. */
TEST(st_sharded_dir_matches_single_file) {
    char *src = gp_test_fixture("models/tiny-llama/model.safetensors");
    if (!src) return;
    gp_st_set *one = NULL;
    CHECK_STATUS(gp_st_open_file(src, &one), GP_OK);
    free(src);
    REQUIRE(one);
    int32_t n = gp_st_count(one), half = n / 2;
    gp_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    REQUIRE(w);
    for (int32_t i = 0; i < n; i++) {
        const gp_tensor_view *v = gp_st_at(one, i);
        w[i].name = v->name, w[i].dtype = v->dtype, w[i].ndim = v->ndim, w[i].data = v->data;
        memcpy(w[i].shape, v->shape, sizeof v->shape);
    }
    char *dir = gp_test_tmpdir();
    char p1[512], p2[512], idx[512];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    CHECK_STATUS(gp_st_write(p1, w, half, mk, mv, 1), GP_OK);
    CHECK_STATUS(gp_st_write(p2, w + half, n - half, mk, mv, 1), GP_OK);
    FILE *f = fopen(idx, "w");
    REQUIRE(f);
    fprintf(f, "{\"metadata\": {\"total_size\": %llu},\n \"weight_map\": {",
            (unsigned long long)gp_st_total_bytes(one));
    for (int32_t i = n - 1; i >= 0; i--) /* any order */
        fprintf(f, "%s\n  \"%s\": \"model-0000%d-of-00002.safetensors\"", i == n - 1 ? "" : ",", w[i].name,
                i < half ? 1 : 2);
    fprintf(f, "}}\n");
    fclose(f);

    gp_st_set *sh = NULL;
    CHECK_STATUS(gp_st_open_dir(dir, &sh), GP_OK);
    if (sh) {
        CHECK_EQ_INT(gp_st_count(sh), n);
        CHECK_EQ_INT(gp_st_total_bytes(sh), gp_st_total_bytes(one));
        CHECK_STR(gp_st_metadata(sh, "format"), "pt");
        int bad = 0;
        for (int32_t i = 0; i < n; i++) {
            const gp_tensor_view *a = gp_st_at(one, i), *b = gp_st_find(sh, a->name);
            if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
                memcmp(b->shape, a->shape, sizeof a->shape) || memcmp(b->data, a->data, a->nbytes) ||
                !strstr(b->file, i < half ? "model-00001" : "model-00002"))
                bad++;
        }
        CHECK_EQ_INT(bad, 0);
    }
    gp_st_close(sh);
    gp_st_close(one);
    free(w);
    free(dir);
}

TEST(st_open_dir_without_weights) {
    char *dir = gp_test_tmpdir();
    gp_st_set *s = (gp_st_set *)1;
    CHECK_STATUS(gp_st_open_dir(dir, &s), GP_ERR_MISSING);
    CHECK(s == NULL);
    CHECK(strstr(gp_errmsg(), dir) != NULL);
    CHECK(strstr(gp_errmsg(), "no model.safetensors or model.safetensors.index.json") != NULL);
    free(dir);
}

static long rss_bytes(void) {
    long pages = -1, resident = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* A sparse file holding one 1 GiB F32 tensor: opening it maps, validates and costs (almost) no memory. */
TEST(st_sparse_1gb_costs_no_rss) {
    char *dir = gp_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    const uint64_t nbytes = 1ull << 30;
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"F32\",\"shape\":[268435456],\"data_offsets\":[0,%llu]}}",
                      (unsigned long long)nbytes);
    while (hl % 8) hdr[hl++] = ' ';
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    int ok = write(fd, le, 8) == 8 && write(fd, hdr, (size_t)hl) == hl && ftruncate(fd, 8 + hl + (off_t)nbytes) == 0;
    close(fd);
    if (!ok) {
        unlink(path);
        free(dir);
        SKIP("cannot create a sparse 1 GiB file in %s", path);
    }
    long before = rss_bytes();
    gp_st_set *s = NULL;
    CHECK_STATUS(gp_st_open_file(path, &s), GP_OK);
    long after = rss_bytes();
    if (s) {
        const gp_tensor_view *v = gp_st_find(s, "w");
        CHECK(v != NULL);
        if (v) {
            CHECK_EQ_INT(v->nbytes, nbytes);
            CHECK_EQ_INT(v->n_elems, nbytes / 4);
            CHECK_EQ_INT(v->shape[0], 268435456);
            CHECK(((const float *)v->data)[v->n_elems - 1] == 0.0f); /* last element readable (a hole: zero) */
        }
    }
    NOTE("RSS grew by %ld KiB opening a 1 GiB file", (after - before) / 1024);
    CHECK(before > 0 && after - before < 64l * 1024 * 1024);
    gp_st_close(s);
    unlink(path);
    free(dir);
}
