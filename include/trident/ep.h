/* Expert parallelism (src/parallel/ep.c): the communication a mixture of
 * experts needs (model.h, td_model_comm's moe hooks), over the grid's grad
 * group (routing statistics) and ep group (tokens to their experts' ranks
 * and back, by all-to-all-v). Every hook is collective over its group and
 * called by every member in the same order (the model's forward and
 * backward do so); a stuck one is reported by the comm layer's hang report. */
#ifndef TRIDENT_EP_H
#define TRIDENT_EP_H

#include <stdint.h>

#include "trident/grid.h"
#include "trident/model.h"
#include "trident/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const td_grid *g;
    uint64_t calls;          /* exchanges since the last reset */
    uint64_t bytes_off_rank; /* payload bytes this rank sent to other ranks since then */
    td_request *req;         /* the exchange in flight */
    size_t sc[TD_MOE_MAX_EP], sd[TD_MOE_MAX_EP], rc[TD_MOE_MAX_EP], rd[TD_MOE_MAX_EP]; /* its counts */
} td_ep;

/* Sets ops' moe hooks to e's (e must outlive the model's use of ops). */
void td_ep_bind_model(td_ep *e, const td_grid *g, td_model_comm *ops);
void td_ep_reset_stats(td_ep *e);
void td_ep_free(td_ep *e);

/* Unit u of section s (0 params, 1 and 2 AdamW's moments) in the canonical
 * layout on grad rank 0, every expert in place: the copies of the first ep
 * run (td_dp_gather_unit's, any dp mode but ps) put together
 * (td_tp_gather_unit's contract). Collective over dp. NULL on every other
 * rank. */
const float *td_ep_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t, const td_param_table *canon,
                               int section, int u, float *scratch, const td_param_table **layout);

#ifdef __cplusplus
}
#endif

#endif
