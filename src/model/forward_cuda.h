/* forward_cuda.h — the forward pass on the CUDA backend (GP_DEVICE_CUDA): the model's weights on the device
 * (uploaded once, shared by every CUDA context of the model), a context's device KV cache and scratch, and one chunk
 * of forward_chunk's work as CUDA ops.  In a build without CUDA these return GP_ERR_UNSUPPORTED with the reason. */
#ifndef GP_FORWARD_CUDA_H
#define GP_FORWARD_CUDA_H

#include "genparity.h"

typedef struct gp_cuda_model gp_cuda_model;
typedef struct gp_cuda_ctx gp_cuda_ctx;
struct gp_ctx;
struct gp_model;

/* Gives context c (c->p.device == GP_DEVICE_CUDA) its device state, uploading the model's weights first if no
 * earlier context did.  GP_ERR_UNSUPPORTED without a CUDA build / device, or for a KV cache kind the CUDA backend
 * does not have (quantized); GP_ERR_NOMEM when the weights or the cache do not fit in device memory. */
gp_status gp_cuda_ctx_init(struct gp_ctx *c);
void gp_cuda_ctx_free(gp_cuda_ctx *x);
/* Frees a model's device weights; NULL is a no-op. */
void gp_cuda_model_free(gp_cuda_model *dm);

/* forward_chunk on the device: n tokens at positions n_past.. of the current cache; logits as forward_chunk's. */
gp_status gp_cuda_forward_chunk(struct gp_ctx *c, const int32_t *ids, int32_t n, const gp_eval_opts *o, int32_t t0,
                                int32_t n_total, float *logits, int all);

#endif
