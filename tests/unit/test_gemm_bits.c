/* test_gemm_bits.c — the determinism contract of the dense weight kernels (formats.h): on every SIMD path this CPU
 * has and every dense format, the matrix-matrix kernel (prefill, batches) gives each output exactly the bits of the
 * matrix-vector kernel (decode) of the same row and token — odd row counts, token counts that leave tile remainders,
 * and column counts with a tail — so results never depend on how many tokens share a call. */
#include "io/safetensors.h"
#include "kernels/cpu/formats.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 777u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) - 0.5f;
}

TEST(gemm_equals_matvec_bit_for_bit) {
    static const char *const PATHS[] = {"scalar", "avx2", "avx512"};
    static const gp_wfmt FMTS[] = {GP_WFMT_F32, GP_WFMT_BF16, GP_WFMT_F16};
    static const int64_t COLS[] = {16, 37, 100, 257, 1100}, ROWS[] = {1, 2, 5, 9}; /* 1100: column blocks + a tail */
    static const int32_t NT[] = {2, 3, 4, 7, 25, 50};
    int paths = 0, cases = 0, bad = 0;
    for (int pi = 0; pi < 3; pi++) {
        if (gp_cpu_force_simd(PATHS[pi])) continue;
        const gp_simd_kernels *K = gp_cpu_kernels();
        paths++;
        for (int fi = 0; fi < 3; fi++)
            for (int ci = 0; ci < 5; ci++)
                for (int ri = 0; ri < 4; ri++)
                    for (int ni = 0; ni < 6; ni++) {
                        const int64_t C = COLS[ci], R = ROWS[ri];
                        const int32_t n = NT[ni];
                        float *wf = malloc(R * C * 4), *x = malloc(n * C * 4), *y = malloc(n * R * 4), *v = malloc(R * 4);
                        uint16_t *wh = malloc(R * C * 2);
                        for (int64_t i = 0; i < R * C; i++) {
                            wf[i] = frand();
                            wh[i] = FMTS[fi] == GP_WFMT_BF16 ? gp_f32_to_bf16(wf[i]) : gp_f32_to_f16(wf[i]);
                        }
                        for (int64_t i = 0; i < n * C; i++) x[i] = frand();
                        gp_wt w = gp_wt_dense(FMTS[fi], FMTS[fi] == GP_WFMT_F32 ? (void *)wf : (void *)wh, R, C);
                        gp_cpu_gemm(K, y, R, &w, 0, R, x, n);
                        for (int32_t t = 0; t < n; t++) {
                            gp_cpu_matvec(K, v, &w, 0, R, x + t * C);
                            bad += memcmp(v, y + t * R, R * 4) != 0;
                        }
                        cases++;
                        free(wf), free(x), free(y), free(v), free(wh);
                    }
    }
    gp_cpu_force_simd(NULL);
    NOTE("%d SIMD paths, %d (format, cols, rows, tokens) cases: %d tokens whose gemm outputs differ from matvec "
         "(want 0)", paths, cases, bad);
    CHECK(paths > 0 && bad == 0);
}
