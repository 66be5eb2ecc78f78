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

gp_kv_rows bu_kv_alloc(gp_backend *be, int32_t rows, int32_t kvd, int32_t bits, int32_t group) {
    gp_kv_rows r = {0};
    r.kvd = kvd, r.bits = bits, r.group = group;
    r.n_groups = bits == 16 ? 0 : (kvd + group - 1) / group;
    r.row_bytes = (kvd * bits + 7) / 8;
    const size_t groups = (size_t)rows * (size_t)(r.n_groups > 0 ? r.n_groups : 1);
    r.f = be->ops->alloc(be, sizeof(float) * (size_t)rows * kvd);
    r.q = be->ops->alloc(be, (size_t)rows * (size_t)(r.row_bytes > 0 ? r.row_bytes : 1));
    r.scale = be->ops->alloc(be, sizeof(float) * groups);
    r.minv = be->ops->alloc(be, sizeof(float) * groups);
    return r;
}

void bu_kv_free(gp_backend *be, gp_kv_rows *r) {
    be->ops->dealloc(be, r->f), be->ops->dealloc(be, r->q), be->ops->dealloc(be, r->scale);
    be->ops->dealloc(be, r->minv);
}
