/* adapter.h — a loaded LoRA adapter (gp_adapter): its low-rank terms as float32 A [rank, in] / B [out, rank] per
 * targeted linear of the model, bound through the model's backend; and the per-context linears that carry them
 * (gp_ctx_set_adapters builds a copy of the model's layers whose linears list the context's terms). */
#ifndef GP_ADAPTER_H
#define GP_ADAPTER_H

#include "genparity.h"
#include "kernels/backend.h"
#include "model/model.h"

/* The linears an adapter may target, as offsets into gp_layer (index = gp_adapter_term.which). */
typedef struct gp_adapter_module {
    const char *name; /* "self_attn.q_proj" ... as in the checkpoint */
    size_t off;       /* offsetof(gp_layer, q) ... */
} gp_adapter_module;
extern const gp_adapter_module GP_ADAPTER_MODULES[];
#define GP_ADAPTER_N_MODULES 7

typedef struct gp_adapter_term {
    int32_t layer, which; /* decoder layer, GP_ADAPTER_MODULES index */
    gp_wt a, b;           /* A [rank, in], B [out, rank] (float32, bound through the model's backend) */
} gp_adapter_term;

struct gp_adapter {
    const gp_model *m;
    char *dir;
    uint64_t id;        /* hash of adapter_config.json and the tensors file */
    float scale;        /* the adapter's own scale */
    int32_t rank;
    int32_t n_terms;
    gp_adapter_term *terms;
    float *data;        /* host storage of every A and B */
};

#endif
