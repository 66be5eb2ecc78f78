/* test_kernels.c — the CPU kernel tables (scalar, AVX2, AVX-512) on random data, including lengths that are not a
 * multiple of 16: the prefill matrix-matrix kernel gives exactly the matrix-vector kernel's bits for every element,
 * for every dtype and any row range; every path agrees with the scalar reference within float rounding; the AVX2
 * and AVX-512 paths agree bit for bit. */
#include "kernels/cpu/formats.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const PATHS[] = {"scalar", "avx2", "avx512"};

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - 0.5f;
}

/* A random rows × k weight in dtype dt (caller frees .data). */
static gp_wt make_wt(gp_dtype dt, int64_t rows, int64_t k, uint32_t seed) {
    gp_wt w = gp_wt_dense((gp_wfmt)gp_wfmt_of_dtype(dt), NULL, rows, k);
    size_t n = (size_t)(rows * k);
    void *d = malloc(n * gp_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = frand(&seed);
        if (dt == GP_DTYPE_F32) ((float *)d)[i] = v;
        else if (dt == GP_DTYPE_BF16) ((uint16_t *)d)[i] = gp_f32_to_bf16(v);
        else ((uint16_t *)d)[i] = gp_f32_to_f16(v);
    }
    w.data = d;
    return w;
}

TEST(kernels_gemm_matches_matvec_bit_for_bit) {
    const gp_dtype dts[] = {GP_DTYPE_F32, GP_DTYPE_BF16, GP_DTYPE_F16};
    const int64_t ks[] = {16, 37, 64, 100, 1024, 2100, 4096};
    const int32_t ns[] = {1, 2, 5, 9, 13};
    const int64_t rows = 23;
    int checked = 0;
    for (size_t p = 0; p < 3; p++) {
        if (!gp_cpu_simd_supported(PATHS[p])) continue;
        REQUIRE(gp_cpu_force_simd(PATHS[p]) == 0);
        const gp_simd_kernels *K = gp_cpu_kernels();
        for (size_t di = 0; di < 3; di++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    const int64_t k = ks[ki];
                    const int32_t n = ns[ni];
                    gp_wt w = make_wt(dts[di], rows, k, (uint32_t)(7 + ki * 31 + di));
                    float *x = malloc(sizeof(float) * (size_t)(n * k));
                    uint32_t s = 99;
                    for (int64_t i = 0; i < n * k; i++) x[i] = frand(&s);
                    float *a = malloc(sizeof(float) * (size_t)(n * rows)), *b = malloc(sizeof(float) * (size_t)(n * rows));
                    for (int32_t t = 0; t < n; t++) gp_cpu_matvec(K, a + t * rows, &w, 0, rows, x + t * k);
                    /* two row ranges, as two threads would split them */
                    gp_cpu_gemm(K, b, rows, &w, 0, 7, x, n);
                    gp_cpu_gemm(K, b, rows, &w, 7, rows, x, n);
                    if (memcmp(a, b, sizeof(float) * (size_t)(n * rows))) {
                        NOTE("%s: dtype %s k %lld n %d: gemm differs from matvec", PATHS[p], gp_dtype_name(dts[di]),
                             (long long)k, n);
                        gp_test_failed = 1;
                    }
                    checked++;
                    free(a);
                    free(b);
                    free(x);
                    free((void *)w.data);
                }
    }
    gp_cpu_force_simd(NULL);
    NOTE("%d (path, dtype, k, n) cases: gemm == matvec bit for bit", checked);
}

TEST(kernels_paths_agree) {
    const int64_t k = 100, rows = 9, n = 37;
    gp_wt w = make_wt(GP_DTYPE_BF16, rows, k, 5);
    float x[100], ref[9], got[9], sref[37], sgot[37], oref[100], ogot[100], gref[37], ggot[37], u[37];
    uint32_t s = 3;
    for (int i = 0; i < k; i++) x[i] = frand(&s);
    for (int i = 0; i < n; i++) sref[i] = 8 * frand(&s), u[i] = frand(&s), gref[i] = 8 * frand(&s);
    const gp_simd_kernels *S = gp_simd_scalar();
    gp_cpu_matvec(S, ref, &w, 0, rows, x);
    float s0[37], g0[37];
    memcpy(s0, sref, sizeof s0);
    memcpy(g0, gref, sizeof g0);
    float sum_ref = S->exp_sum(sref, n, 1.5f);
    memset(oref, 0, sizeof oref);
    S->axpy(oref, 0.3f, x, k);
    S->silu_mul(gref, u, n);
    float avx2[9 + 37 + 100 + 37 + 1];
    int have_avx2 = 0;
    for (size_t p = 1; p < 3; p++) {
        if (!gp_cpu_simd_supported(PATHS[p])) continue;
        REQUIRE(gp_cpu_force_simd(PATHS[p]) == 0);
        const gp_simd_kernels *K = gp_cpu_kernels();
        gp_cpu_matvec(K, got, &w, 0, rows, x);
        memcpy(sgot, s0, sizeof sgot);
        float sum = K->exp_sum(sgot, n, 1.5f);
        memset(ogot, 0, sizeof ogot);
        K->axpy(ogot, 0.3f, x, k);
        memcpy(ggot, g0, sizeof ggot);
        K->silu_mul(ggot, u, n);
        double e = 0;
        for (int i = 0; i < rows; i++) e = fmax(e, fabs(got[i] - ref[i]));
        for (int i = 0; i < n; i++) e = fmax(e, fabs(sgot[i] - sref[i]) / sref[i]);
        for (int i = 0; i < n; i++) e = fmax(e, fabs(ggot[i] - gref[i]));
        for (int i = 0; i < k; i++) e = fmax(e, fabs(ogot[i] - oref[i]));
        e = fmax(e, fabs(sum - sum_ref) / sum_ref);
        NOTE("%s vs scalar: max error %.3g (tol 1e-5)", PATHS[p], e);
        CHECK(e < 1e-5);
        /* AVX2 and AVX-512 run the same operations: identical bits */
        float all[9 + 37 + 100 + 37 + 1];
        memcpy(all, got, sizeof got);
        memcpy(all + 9, sgot, sizeof sgot);
        memcpy(all + 46, ogot, sizeof ogot);
        memcpy(all + 146, ggot, sizeof ggot);
        all[183] = sum;
        if (p == 1) memcpy(avx2, all, sizeof all), have_avx2 = 1;
        else if (have_avx2) CHECK(!memcmp(avx2, all, sizeof all));
    }
    gp_cpu_force_simd(NULL);
    free((void *)w.data);
}

/* The bf16 mode's vdpbf16ps kernel (AVX512_BF16 only): for bf16 weights and bf16 activations it gives the bits of
 * the AVX-512 float32 kernel on the same values (simd.h's reduction), for every token count and row range. */
TEST(kernels_dpbf16_gives_the_float32_kernels_bits) {
    if (gp_cpu_force_simd("avx512") != 0 || !gp_cpu_dpbf16()) {
        gp_cpu_force_simd(NULL);
        SKIP("the CPU has no AVX512_BF16");
    }
    const gp_dpbf16_kernels *D = gp_cpu_dpbf16();
    const gp_simd_kernels *K = gp_cpu_kernels();
    const int64_t ks[] = {2, 15, 16, 17, 31, 32, 33, 48, 100, 1024, 3000};
    const int32_t ns[] = {1, 5, 6, 7, 13, 100};
    const int64_t rows = 23;
    int checked = 0, differ = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t k = ks[ki], kp = (k + 31) / 32 * 32;
            const int32_t n = ns[ni];
            gp_wt w = make_wt(GP_DTYPE_BF16, rows, k, (uint32_t)(11 + ki * 7 + ni));
            float *x = malloc(sizeof(float) * (size_t)(n * k));
            uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)(n * kp));
            uint32_t s = 5 + (uint32_t)ni;
            for (int64_t i = 0; i < n * k; i++) x[i] = gp_bf16_to_f32(gp_f32_to_bf16(frand(&s)));
            D->pack(xb, x, n, k);
            float *a = malloc(sizeof(float) * (size_t)(n * rows)), *b = malloc(sizeof(float) * (size_t)(n * rows));
            for (int32_t t = 0; t < n; t++) gp_cpu_matvec(K, a + t * rows, &w, 0, rows, x + t * k);
            D->gemm(b, rows, &w, 0, 7, xb, n); /* two row ranges, as two threads would split them */
            D->gemm(b, rows, &w, 7, rows, xb, n);
            if (memcmp(a, b, sizeof(float) * (size_t)(n * rows))) {
                NOTE("k %lld n %d: vdpbf16ps differs from the float32 kernel", (long long)k, n);
                differ++;
            }
            checked++;
            free(a);
            free(b);
            free(x);
            free(xb);
            free((void *)w.data);
        }
    gp_cpu_force_simd(NULL);
    NOTE("%d (k, n) cases: %d differ from the AVX-512 float32 kernel's bits (want 0)", checked, differ);
    CHECK(differ == 0);
}

/* Attention over bfloat16 rows (scores16, pv16): in every path, the bits scores and pv give on the same rows widened
 * to float32, for head_dim 16-256, runs of 1-9 keys (the 4-key blocks and their remainders) and a row stride wider
 * than the head (a kv head's slice of the cache's rows). */
TEST(kernels_bf16_rows_give_the_float32_rows_bits) {
    const int64_t hds[] = {16, 64, 128, 256}, counts[] = {1, 3, 4, 9};
    int cases = 0, differ = 0;
    for (size_t p = 0; p < 3; p++) {
        if (!gp_cpu_simd_supported(PATHS[p])) continue;
        REQUIRE(gp_cpu_force_simd(PATHS[p]) == 0);
        const gp_simd_kernels *K = gp_cpu_kernels();
        for (size_t h = 0; h < 4; h++)
            for (size_t c = 0; c < 4; c++, cases++) {
                const int64_t hd = hds[h], n = counts[c], stride = 3 * hd;
                uint16_t *r16 = malloc(sizeof(uint16_t) * (size_t)(n * stride));
                float *r32 = malloc(sizeof(float) * (size_t)(n * stride)), *q = malloc(sizeof(float) * (size_t)hd);
                float s16[9], s32[9], pr[9], *o16 = calloc((size_t)hd, sizeof(float));
                float *o32 = calloc((size_t)hd, sizeof(float));
                uint32_t s = (uint32_t)(11 + 7 * h + c);
                for (int64_t i = 0; i < n * stride; i++) r32[i] = gp_bf16_to_f32(r16[i] = gp_f32_to_bf16(frand(&s)));
                for (int64_t i = 0; i < hd; i++) q[i] = frand(&s);
                for (int64_t j = 0; j < n; j++) pr[j] = frand(&s) + 0.5f;
                K->scores16(s16, q, r16 + hd, stride, n, hd);
                K->scores(s32, q, r32 + hd, stride, n, hd);
                K->pv16(o16, pr, 1.7f, r16 + hd, stride, n, hd);
                K->pv(o32, pr, 1.7f, r32 + hd, stride, n, hd);
                differ += memcmp(s16, s32, sizeof(float) * (size_t)n) || memcmp(o16, o32, sizeof(float) * (size_t)hd);
                free(r16), free(r32), free(q), free(o16), free(o32);
            }
    }
    gp_cpu_force_simd(NULL);
    NOTE("scores16 / pv16 against scores / pv on the widened rows (paths x head_dim 16-256 x 1-9 keys, %d cases): "
         "%d differ (want 0)", cases, differ);
    CHECK_EQ_INT(differ, 0);
}
