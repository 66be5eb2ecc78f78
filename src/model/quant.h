/* quant.h — MLX affine quantization (mlx_lm.convert -q) as config.json describes it and as the weight binder
 * reads it: the default bits and group size of "quantization" (or "quantization_config"), the per-module overrides
 * (an object of its own, or false = left unquantized), and the checked view of one quantized tensor
 * (weight uint32 [out, in*bits/32] + scales and biases [out, in/group]) as a gp_wt of format GP_WFMT_QAFFINE. */
#ifndef GP_QUANT_H
#define GP_QUANT_H

#include "genparity.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "kernels/backend.h"

#include <stdint.h>

/* One per-module override: module path as in the checkpoint ("model.layers.3.mlp.down_proj"); bits 0 = the module
 * is left unquantized. */
typedef struct gp_quant_rule {
    char *module;
    int32_t bits, group_size;
} gp_quant_rule;

/* A model's quantization settings; bits 0 = the model is not quantized. */
typedef struct gp_quant {
    int32_t bits, group_size;
    gp_quant_rule *rules;
    int32_t n_rules;
} gp_quant;

/* Reads "quantization" (else "quantization_config") of config.json's root object into *q (zeroed when absent).
 * Anything but MLX affine (another mode or a quant_method such as gptq/awq/bitsandbytes), bits outside
 * {2,3,4,5,6,8} or a group size outside {16,32,64,128} is an error naming the file and the field. */
gp_status gp_quant_parse(const gp_jobj *root, gp_quant *q);

/* Frees the rules (q itself is the caller's); NULL is a no-op. */
void gp_quant_free(gp_quant *q);

/* The settings of module (weight name without ".weight"): 1 and *bits, *group_size when it is quantized, 0 when
 * the model or this module is not. */
int gp_quant_lookup(const gp_quant *q, const char *module, int32_t *bits, int32_t *group_size);

/* The host view of quantized tensor `name` (a ".weight" of dtype U32) whose logical float shape is [rows, cols]:
 * finds "<module>.scales" and "<module>.biases" in st and checks every shape and dtype against q's settings for the
 * module.  GP_OK and *view, or an error naming the tensor, what was found and what was expected. */
gp_status gp_quant_view(const gp_st_set *st, const gp_quant *q, const char *name, const gp_tensor_view *t,
                        int64_t rows, int64_t cols, gp_wt *view);

/* MLX affine quantization of one group of n floats (as mlx.core.quantize computes it on the CPU, float32): from the
 * group's min and max, scale = max((max - min) / (2^bits - 1), 1e-7) signed towards the edge of larger magnitude,
 * the edge snapped to a whole step (bias = edge, scale = edge / round(edge / scale) when that is not 0), then
 * q[j] = clamp(rint((w[j] - bias) / scale), 0, 2^bits - 1).  *scale and *bias are float32 (store them in the
 * weight's dtype, rounded to nearest even, as MLX does). */
void gp_quantize_group(const float *w, int32_t n, int32_t bits, uint8_t *q, float *scale, float *bias);

/* Packs n values q[] of `bits` bits into out [n * bits / 8] as a little-endian bit stream (value i at bit i*bits). */
void gp_quant_pack(const uint8_t *q, int64_t n, int32_t bits, uint8_t *out);

/* Element i of a float tensor (F32, BF16, F16) as float32; v stored as element i of dst in dtype d (round to nearest
 * even). */
float gp_tensor_elem(const gp_tensor_view *t, int64_t i);
void gp_tensor_store(gp_dtype d, uint8_t *dst, int64_t i, float v);

/* Quantizes w [R, C] row by row in groups of gs: parts[0] packed [R, C * bits / 8] bytes, parts[1] / parts[2] scales
 * and biases [R, C / gs] in dtype aux (malloc'd; the caller frees them, also on error). */
gp_status gp_quantize_rows(const float *w, int64_t R, int64_t C, int32_t bits, int32_t gs, gp_dtype aux,
                           uint8_t *parts[3]);

#endif
