/* What a forward pass in a run's layout needs of td_run_train (run_spec.h:
 * td_layout_pass_forward); filled by td_run_train, borrowed for the call
 * of spec->hooks.layout_pass. */
#ifndef TRIDENT_LAYOUT_PASS_H
#define TRIDENT_LAYOUT_PASS_H

#include "trident/run_spec.h"

struct td_layout_pass {
    const td_grid *g;
    const td_dataset *data;
    td_gpt *model;
    td_dp *dp;
    td_pp *pp; /* pipeline parallelism, else NULL */
    int Bl, Bm, K, T; /* rows per replica, per micro-batch; micro-batches; context */
};

#endif
