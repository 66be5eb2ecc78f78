/* mlock.c — pinning a model's mapped weights in RAM (gp_model_mlock, `--mlock`), refused clearly when
 * RLIMIT_MEMLOCK does not allow it. */
#include "io/safetensors.h"
#include "model/model.h"
#include "util/util.h"

gp_status gp_model_mlock(const gp_model *m) {
    if (!m) return gp_set_error(GP_ERR_INVALID_ARG, "gp_model_mlock: model is NULL");
    if (!m->st) return GP_OK;
    return gp_st_mlock(m->st);
}
