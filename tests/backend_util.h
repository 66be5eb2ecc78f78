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

#endif
