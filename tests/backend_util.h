/* backend_util.h — helpers of the backend op tests (test_backend_ops.c, test_cuda_ops.c): moving floats in and out of
 * a backend's memory through its ops only, so one harness runs on a device backend. */
#ifndef GP_TEST_BACKEND_UTIL_H
#define GP_TEST_BACKEND_UTIL_H

#include "kernels/backend.h"

/* A backend buffer holding host floats h [n] (NULL when out of memory). */
float *bu_dev_from(gp_backend *be, const float *h, size_t n);

/* A host copy of backend buffer d [n] after the workspace's ops have run (the test fails if they report an error);
 * caller frees. */
float *bu_host_of(gp_backend *be, gp_ws *ws, const float *d, size_t n);

/* KV rows of `rows` rows on the backend: float32 and quantized arrays both allocated, group scales and minima for
 * bits 4 / 8 (bits 16: bfloat16 rows, no groups); free with bu_kv_free. */
gp_kv_rows bu_kv_alloc(gp_backend *be, int32_t rows, int32_t kvd, int32_t bits, int32_t group);
void bu_kv_free(gp_backend *be, gp_kv_rows *r);

#endif
