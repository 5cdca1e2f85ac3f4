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

typedef struct {
    const td_grid *g;
    uint64_t calls;          /* exchanges since the last reset */
    uint64_t bytes_off_rank; /* payload bytes this rank sent to other ranks since then */
} td_ep;

/* Sets ops' moe hooks to e's (e must outlive the model's use of ops). */
void td_ep_bind_model(td_ep *e, const td_grid *g, td_model_comm *ops);
void td_ep_reset_stats(td_ep *e);

#endif
