/* adapter.h — a loaded LoRA adapter (gp_adapter): its low-rank terms as float32 A [rank, in] / B [out, rank] per
 * targeted linear of the model, bound through the model's backend; and the per-context linears that carry them
 * (gp_ctx_set_adapters builds a copy of the model's layers whose linears list the context's terms). */
#ifndef GP_ADAPTER_H
#define GP_ADAPTER_H

#include "genparity.h"
#include "kernels/backend.h"
#include "model/model.h"

#include <pthread.h>

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
    pthread_mutex_t lock;      /* guards dev_terms (bound lazily; the adapter may be shared by contexts) */
    gp_adapter_term *dev_terms;/* [n_terms] the terms bound through dev_be, or NULL */
    gp_backend *dev_be;
};

/* The adapter's terms bound through backend be (the model's CPU backend: ad->terms; a device backend: copies made
 * on the first call and kept until gp_adapter_free).  *out is owned by the adapter. */
gp_status gp_adapter_terms(gp_adapter *ad, gp_backend *be, const gp_adapter_term **out);

#endif
