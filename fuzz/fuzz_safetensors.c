/* fuzz_safetensors.c — libFuzzer target: any bytes as a .safetensors file.  Opening must fail cleanly or give
 * tensors whose data lies inside the file; every tensor's bytes and the metadata are read. */
#include "fuzz_common.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fz_write("x.safetensors", data, size);
    gp_st_set *st;
    if (gp_st_open_file(p, &st) != GP_OK) return 0;
    uint8_t acc = 0;
    for (int32_t i = 0; i < gp_st_count(st); i++) {
        const gp_tensor_view *t = gp_st_at(st, i);
        FZ_CHECK(t && t->name);
        FZ_CHECK(gp_st_find(st, t->name) != NULL);
        for (uint64_t b = 0; b < t->nbytes; b += 4096) acc ^= ((const uint8_t *)t->data)[b];
        if (t->nbytes) acc ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)gp_st_metadata(st, "format");
    FZ_CHECK(acc == acc);
    gp_st_close(st);
    return 0;
}
