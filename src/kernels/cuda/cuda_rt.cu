/* cuda_rt.cu — the device handle of the CUDA backend (cuda_ops.h): device discovery with a reason when there is
 * none, one non-blocking stream per handle, plain cudaMalloc allocations, copies. */
#include "kernels/cuda/cuda_ops.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

struct gp_cu {
    int dev;
    cudaStream_t s;
    int bf16; /* gp_cu_set_bf16 */
    void *scratch; /* gp_cu_reserve: the tensor-core GEMM's bf16 copy of its input */
    size_t scratch_cap;
};

extern "C" cudaStream_t gp_cu_stream(gp_cu *d) { return d->s; }
extern "C" int gp_cu_bf16(gp_cu *d) { return d->bf16; }
extern "C" void gp_cu_set_bf16(gp_cu *d, int on) { d->bf16 = on ? 1 : 0; }

extern "C" int gp_cu_reserve(gp_cu *d, size_t bytes) {
    if (bytes <= d->scratch_cap) return 0;
    cudaFree(d->scratch);
    d->scratch = NULL, d->scratch_cap = 0;
    cudaError_t e = cudaMalloc(&d->scratch, bytes);
    if (e == cudaSuccess) d->scratch_cap = bytes;
    else d->scratch = NULL;
    return (int)e;
}

extern "C" void *gp_cu_scratch(gp_cu *d, size_t *cap) {
    *cap = d->scratch_cap;
    return d->scratch;
}

extern "C" const char *gp_cu_errstr(int e) { return cudaGetErrorString((cudaError_t)e); }

extern "C" int gp_cu_device_count(char *msg, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (msg) snprintf(msg, cap, "no usable CUDA device (%s: %s)", cudaGetErrorName(e), cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error */
        return 0;
    }
    if (n <= 0 && msg) snprintf(msg, cap, "no CUDA device found");
    return n;
}

extern "C" int gp_cu_open(int32_t dev, gp_cu **out, char *msg, size_t cap) {
    *out = NULL;
    int n = gp_cu_device_count(msg, cap);
    if (n <= 0) return (int)cudaErrorNoDevice;
    if (dev < 0 || dev >= n) {
        if (msg) snprintf(msg, cap, "CUDA device %d does not exist (%d found)", dev, n);
        return (int)cudaErrorInvalidDevice;
    }
    gp_cu *d = (gp_cu *)calloc(1, sizeof *d);
    if (!d) return (int)cudaErrorMemoryAllocation;
    d->dev = dev;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&d->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        if (msg) snprintf(msg, cap, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        free(d);
        return (int)e;
    }
    *out = d;
    return 0;
}

extern "C" void gp_cu_close(gp_cu *d) {
    if (!d) return;
    cudaStreamSynchronize(d->s);
    cudaStreamDestroy(d->s);
    cudaFree(d->scratch);
    free(d);
}

extern "C" int gp_cu_mem(gp_cu *d, char *name, size_t cap, uint64_t *free_b, uint64_t *total_b) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d->dev);
    if (e != cudaSuccess) return (int)e;
    if (name) snprintf(name, cap, "%s", p.name);
    size_t f = 0, t = 0;
    e = cudaMemGetInfo(&f, &t);
    if (free_b) *free_b = f;
    if (total_b) *total_b = t;
    return (int)e;
}

extern "C" int gp_cu_alloc(gp_cu *d, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0) return 0;
    return (int)cudaMalloc(p, bytes);
}

extern "C" void gp_cu_release(gp_cu *d, void *p) {
    if (p) cudaFree(p);
}

extern "C" int gp_cu_h2d(gp_cu *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_d2d(gp_cu *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_h2d_async(gp_cu *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->s);
}

extern "C" int gp_cu_d2h(gp_cu *d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->s);
    return (int)e;
}

extern "C" int gp_cu_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    return bytes ? (int)cudaMallocHost(p, bytes) : 0;
}

extern "C" void gp_cu_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

extern "C" int gp_cu_sync(gp_cu *d) {
    cudaError_t e = cudaStreamSynchronize(d->s);
    if (e == cudaSuccess) e = cudaGetLastError();
    return (int)e;
}
