/* cuda_launch.cuh — shared by the CUDA kernel files: kernel launches with programmatic dependent launch (the next
 * kernel of the stream is scheduled while this one runs and waits in pdl_wait() until it has finished and its
 * writes are visible, which hides launch gaps between the many small kernels of a decode step), and the GLU
 * activation used both by the GLU op and by the projection that applies it on the fly (one expression, one
 * rounding). */
#ifndef GP_CUDA_LAUNCH_CUH
#define GP_CUDA_LAUNCH_CUH

#include "kernels/cuda/cuda_ops.h"

#include <cuda_runtime.h>
#include <math.h>

/* First statements of every kernel: wait for the previous kernel of the stream, then let the next one be scheduled.
 * Both are no-ops for a kernel launched without the programmatic attribute. */
__device__ __forceinline__ void pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
}

/* kernel<<<grid, block, shmem, stream>>>(args...) with programmatic stream serialization allowed. */
template <typename... KArgs, typename... Args>
static inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t shmem, cudaStream_t s,
                          Args... args) {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shmem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

/* act(g) * u: SiLU or the tanh approximation of GELU */
__device__ __forceinline__ float glu_val(float x, float u, int act) {
    if (act == GP_CU_ACT_SILU) return x / (1.0f + expf(-x)) * u;
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    const float inner = beta * (x + kappa * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner)) * u;
}

#endif
