/* fuzz_npy.c — libFuzzer target: any bytes as a steering vector file (.npy by default; the first byte picks raw
 * float32 or .safetensors instead).  Loading fails cleanly or gives n > 0 finite floats. */
#include "fuzz_common.h"

#include <math.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *name = size && data[0] == 'R' ? "v.f32" : "v.npy";
    const char *p = fz_write(name, data, size);
    float *v = NULL;
    int32_t n = 0;
    if (gp_steer_vector_load(p, &v, &n) != GP_OK) {
        FZ_CHECK(v == NULL);
        return 0;
    }
    FZ_CHECK(v && n > 0);
    for (int32_t i = 0; i < n; i++) FZ_CHECK(isfinite(v[i]));
    gp_free(v);
    return 0;
}
