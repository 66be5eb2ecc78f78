/* backend_util.c — see backend_util.h. */
#include "backend_util.h"
#include "test.h"

#include <stdlib.h>

float *bu_dev_from(gp_backend *be, const float *h, size_t n) {
    float *d = be->ops->alloc(be, n * sizeof(float));
    if (d && n) be->ops->upload(be, d, h, n * sizeof(float));
    return d;
}

float *bu_host_of(gp_backend *be, gp_ws *ws, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    CHECK_STATUS(be->ops->finish(ws), GP_OK);
    if (n) be->ops->download(be, h, d, n * sizeof(float));
    return h;
}
