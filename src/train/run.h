/* run: what one training run holds once it is open (the grid, the data, the
 * model's configuration and tables, the memory plan, the strategy, the loss
 * scaler, the result being filled), so the calls that need several of them
 * take the run instead of 9-12 arguments. td_train_run owns every member;
 * the run is a view of its state, valid while td_train_run runs. */
#ifndef TRIDENT_TRAIN_RUN_H
#define TRIDENT_TRAIN_RUN_H

#include "mem_plan.h"
#include "trident/data.h"
#include "trident/grid.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/parallel.h"
#include "trident/train.h"

typedef struct {
    const td_train_opts *o;
    const td_grid *g;
    const td_dataset *data;        /* its tokenizer is the checkpoints' */
    const td_gpt_config *cfg;
    const td_param_table *table;   /* this rank's layout */
    const td_param_table *canon;   /* one process's layout (gathered saves) */
    const td_mem_plan *plan;
    td_dp *dp;
    td_loss_scaler *scaler;
    td_train_result *res;
} td_run;

#endif
