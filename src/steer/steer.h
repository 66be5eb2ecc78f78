/* steer.h — steering state kept in a gp_ctx: residual-injection hooks with their schedules and the logit-bias
 * vector, plus the step counter the schedules read. */
#ifndef GP_STEER_H
#define GP_STEER_H

#include "genparity.h"
#include "kernels/backend.h"

typedef struct gp_steer_active {
    gp_steer_hook h; /* h.vector points to vec below */
    float *vec;      /* [n_embd], owned, host memory */
    float *dev;      /* [n_embd] in backend memory (== vec when backend memory is host memory) */
} gp_steer_active;

typedef struct gp_steer_state {
    gp_steer_active *hooks;
    int32_t n_hooks, cap_hooks;
    gp_backend *be;  /* where dev and bias live (set by the context; NULL = host memory) */
    float *bias;     /* [n_vocab] alpha * W v in backend memory, or NULL */
    int32_t step;    /* forward calls since the last reset */
    uint64_t epoch;  /* bumped whenever the set of residual hooks changes (a cache built under other hooks is stale) */
} gp_steer_state;

/* Coefficient a of a hook at forward step s. */
float gp_steer_coef(const gp_steer_hook *h, int32_t step);

/* Adds a * vector to x [n, n_embd] (backend memory) for every hook on `layer` (a from the hook's schedule at
 * st->step), as backend ops of workspace ws. */
void gp_steer_apply(const gp_steer_state *st, gp_ws *ws, int32_t layer, float *x, int32_t n, int32_t n_embd);

/* Validates and copies a hook into st. */
gp_status gp_steer_state_add(gp_steer_state *st, const gp_steer_hook *hook, int32_t n_layers, int32_t n_embd);

/* Frees hooks and bias (keeps the step counter). */
void gp_steer_state_clear(gp_steer_state *st);

#endif
