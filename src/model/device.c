/* device.c — what a device offers, measured through its backend: gp_device_copy_bandwidth times the backend's own
 * buffer copies (CUDA: device to device), the figure `genparity bench --device cuda` reports decode's bandwidth
 * utilization against. */
#include "genparity.h"
#include "kernels/backend.h"
#include "util/util.h"

#include <stddef.h>
#include <stdio.h>

#define COPY_PASSES 5

/* The best of COPY_PASSES copies of a buffer of mib MiB into another on be, bytes read + written per second. */
static gp_status time_copies(gp_backend *be, uint32_t mib, double *bytes_per_s) {
    const size_t bytes = (size_t)mib << 20;
    void *a = be->ops->alloc(be, bytes), *b = a ? be->ops->alloc(be, bytes) : NULL;
    if (!a || !b) {
        be->ops->dealloc(be, a);
        return gp_set_error(GP_ERR_NOMEM, "gp_device_copy_bandwidth: out of %s memory for two buffers of %u MiB",
                            be->name, mib);
    }
    be->ops->copy(be, b, a, bytes); /* (warm-up: the pages mapped, the clocks up) */
    double best = 0;
    for (int i = 0; i < COPY_PASSES; i++) {
        const double t0 = gp_now();
        be->ops->copy(be, b, a, bytes);
        const double dt = gp_now() - t0;
        if (dt > 0 && 2.0 * (double)bytes / dt > best) best = 2.0 * (double)bytes / dt;
    }
    be->ops->dealloc(be, a), be->ops->dealloc(be, b);
    *bytes_per_s = best;
    return GP_OK;
}

gp_status gp_device_copy_bandwidth(int32_t device, uint32_t mib, double *bytes_per_s) {
    if (!bytes_per_s) return gp_set_error(GP_ERR_INVALID_ARG, "gp_device_copy_bandwidth: bytes_per_s is NULL");
    *bytes_per_s = 0;
    if (device != GP_DEVICE_CUDA)
        return gp_set_error(GP_ERR_UNSUPPORTED, "gp_device_copy_bandwidth: device %d: only a CUDA device (%d) is "
                            "measured here (a CPU's bandwidth is its threads' reads, not one copy)", device,
                            GP_DEVICE_CUDA);
    if (mib < 1 || mib > 16384)
        return gp_set_error(GP_ERR_INVALID_ARG, "gp_device_copy_bandwidth: mib %u outside [1, 16384]", mib);
    gp_backend *be = NULL;
    gp_status s = gp_backend_cuda_init(0, &be);
    if (s) { /* the backend's reason, under this function's name */
        char why[256];
        snprintf(why, sizeof why, "%s", gp_errmsg());
        return gp_set_error(s, "gp_device_copy_bandwidth: %s", why);
    }
    s = time_copies(be, mib, bytes_per_s);
    gp_backend_free(be);
    return s;
}
