/* The per-rank memory plan of a training run (docs/design.md principle 2): the
 * one pure function the trainer allocates from and `train --auto` predicts
 * with, for a live grid or for a layout it only considers. */
#ifndef TRIDENT_TRAIN_MEM_PLAN_H
#define TRIDENT_TRAIN_MEM_PLAN_H

#include "trident/train.h"

/* The data-parallel configuration the flags give; bad payload flags are a
 * user error here, before anything is allocated. */
td_dp_config td_train_dp_config(const td_train_opts *o, td_dp_mode mode);
/* Builds this rank's parameter table into *table (freed by the caller) and
 * returns the bytes per category it will hold: model states by the dp
 * mode's plan, activations (the pipeline's in-flight micro-batches when
 * split and sched are given, else one micro-batch of Bm sequences),
 * tensor-parallel buffers and reduced-precision copies. held: the units a
 * pipeline stage holds (td_pp_held_units), NULL without a pipeline. */
td_mem_plan td_train_mem_plan(const td_train_opts *o, const td_dp_config *dcfg, const td_gpt_config *cfg,
                              const td_layout *lay, int tp_rank, const unsigned char *held,
                              const td_pp_split *split, const td_schedule *sched, int pp_rank, int Bm,
                              td_param_table *table);

#endif
