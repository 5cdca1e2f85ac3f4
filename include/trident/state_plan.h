/* state_plan: bytes of the model states (parameters, gradients, fp32 master
 * weights, optimizer moments) one data-parallel rank holds at a ZeRO stage.
 *
 * One pure function, called by the engine's memory plan (src/parallel:
 * replicated all-reduce and ZeRO 1-3 take their parameter, gradient and
 * optimizer byte counts from it) and by the planner (src/planner), so that
 * the two cannot disagree on what a stage shards (docs/design.md principle 2).
 * Per element byte counts say what the states are made of: this CPU engine
 * keeps fp32 parameters (or fp32 master weights), fp32 gradients and two fp32
 * AdamW moments (4, 4, 0, 8 bytes); the mixed-precision accounting of the
 * ZeRO paper (Rajbhandari et al., SC'20, section 3.1) is 2 + 2 + K with
 * K = 12: fp16 parameters and gradients, fp32 master weights, momentum and
 * variance (2, 2, 4, 8). Depends on nothing. */
#ifndef TRIDENT_STATE_PLAN_H
#define TRIDENT_STATE_PLAN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double param, grad, master, optim; /* bytes per parameter element */
} td_state_elem;

typedef struct {
    double params, grads, master, optim; /* bytes on one rank */
} td_state_bytes;

/* The engine's fp32 states (master: the fp32 weights are master weights,
 * counted as master instead of params) and the ZeRO paper's (2 + 2 + 12). */
td_state_elem td_state_elem_engine(int master);
td_state_elem td_state_elem_mixed(void);

/* numel parameter elements replicated over D data-parallel ranks at ZeRO
 * stage `zero` (0 replicated; 1 shards the optimizer moments and master
 * weights; 2 also the gradients; 3 also the parameters) by 1/D each. The
 * engine pads numel to a multiple of D, so its shares are exact. */
td_state_bytes td_state_plan(double numel, int D, int zero, td_state_elem e);
static inline double td_state_total(td_state_bytes b) { return b.params + b.grads + b.master + b.optim; }

#ifdef __cplusplus
}
#endif

#endif
