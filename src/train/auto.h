/* `trident train --auto` (auto.c): picks the layout from the calibrated
 * planner, prints the prediction before the run and the measurement after. */
#ifndef TRIDENT_TRAIN_AUTO_H
#define TRIDENT_TRAIN_AUTO_H

#include "trident/planner.h"
#include "trident/train.h"

typedef struct {
    int active;
    td_plan_cluster cluster; /* `local` for the world size and threads */
    td_plan_eval pred;       /* the chosen layout and its predicted costs */
    double mem_bytes;        /* the engine's plan, busiest rank */
} td_auto;

/* Collective-free: every rank computes the same choice from the same
 * profile and flags, and sets o's layout flags to it; rank 0 prints it. A
 * missing profile or no fitting layout is one clear error. */
void td_auto_choose(td_train_opts *o, td_auto *a);
/* The layout flags of a planned layout (dp, tp, pp, zero, micro-batches,
 * schedule and chunks, recompute, sequence parallelism). */
void td_auto_apply(td_train_opts *o, const td_plan_layout *l);
/* Rank 0: measured step time and memory beside the prediction. */
void td_auto_report(const td_auto *a, const td_train_result *res);

#endif
