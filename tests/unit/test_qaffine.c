/* test_qaffine.c — the MLX affine quantized format's CPU kernels (formats.c row GP_WFMT_QAFFINE, qaffine_*.c):
 * on random packed weights of every bit width, group size and odd row counts, on every SIMD path this CPU has,
 * the matrix-vector kernel (decode) and the matrix-matrix kernel (prefill) give exactly the bits of the generic
 * definition (widen the row: scale * q + bias in float32, then the path's dot product). */
#include "io/safetensors.h"
#include "kernels/cpu/formats.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static uint32_t next(void) { return rng = rng * 1664525u + 1013904223u; }
static float frand(void) { return (float)(next() >> 8) / (float)(1u << 24) - 0.5f; }

/* One weight of [rows, cols] with bits / group: random packed bytes, bf16 scales and biases. */
static gp_wt make(int64_t rows, int64_t cols, int bits, int gs, uint8_t **q, uint16_t **s, uint16_t **b) {
    const int64_t nb = rows * cols * bits / 8, ng = rows * cols / gs;
    *q = malloc((size_t)nb), *s = malloc((size_t)ng * 2), *b = malloc((size_t)ng * 2);
    for (int64_t i = 0; i < nb; i++) (*q)[i] = (uint8_t)(next() >> 24);
    for (int64_t i = 0; i < ng; i++) {
        float fs = 0.01f + 0.05f * (frand() + 0.5f), fb = frand();
        uint32_t us, ub;
        memcpy(&us, &fs, 4), memcpy(&ub, &fb, 4);
        (*s)[i] = (uint16_t)(us >> 16), (*b)[i] = (uint16_t)(ub >> 16);
    }
    gp_wt w = gp_wt_dense(GP_WFMT_QAFFINE, *q, rows, cols);
    w.bits = bits, w.group_size = gs;
    w.scales = (gp_wt_aux){*s, GP_DTYPE_BF16};
    w.biases = (gp_wt_aux){*b, GP_DTYPE_BF16};
    return w;
}

TEST(qaffine_kernels_match_the_definition) {
    static const char *const PATHS[] = {"scalar", "avx2", "avx512"};
    static const int BITS[] = {2, 3, 4, 5, 6, 8}, GS[] = {16, 32, 64, 128};
    const gp_cpu_format *F = gp_cpu_format_of(GP_WFMT_QAFFINE);
    REQUIRE(F);
    int n_paths = 0, n_cases = 0, n_bad = 0;
    for (int pi = 0; pi < 3; pi++) {
        if (gp_cpu_force_simd(PATHS[pi])) continue;
        const gp_simd_kernels *K = gp_cpu_kernels();
        n_paths++;
        for (int bi = 0; bi < 6; bi++)
            for (int gi = 0; gi < 4; gi++) {
                /* 2 token tiles + 1 left over; 1152 columns: blocks of 512, 512 and 128 */
                const int64_t rows = 7 + bi, cols = gi == 3 ? 1152 : 256, nt = 7;
                uint8_t *q;
                uint16_t *s, *b;
                gp_wt w = make(rows, cols, BITS[bi], GS[gi], &q, &s, &b);
                float *x = malloc(nt * cols * 4), *row = malloc(cols * 4), *y = malloc(rows * 4),
                      *yg = malloc(nt * rows * 4);
                for (int64_t i = 0; i < nt * cols; i++) x[i] = frand();
                gp_cpu_matvec(K, y, &w, 0, rows, x);
                gp_cpu_gemm(K, yg, rows, &w, 0, rows, x, (int32_t)nt);
                for (int64_t r = 0; r < rows; r++) {
                    F->widen(&w, r, row);
                    for (int64_t t = 0; t < nt; t++) {
                        const float want = K->dot(row, x + t * cols, cols);
                        n_bad += memcmp(&want, &yg[t * rows + r], 4) != 0 || (t == 0 && memcmp(&want, &y[r], 4) != 0);
                    }
                }
                n_cases++;
                free(q), free(s), free(b), free(x), free(row), free(y), free(yg);
            }
    }
    gp_cpu_force_simd(NULL);
    NOTE("%d SIMD paths x %d (bits, group) cases: %d outputs differ from widen + dot (want 0 bits)", n_paths,
         n_cases / (n_paths ? n_paths : 1), n_bad);
    CHECK(n_paths > 0 && n_bad == 0);
}
