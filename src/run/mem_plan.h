/* The per-rank memory plan of a training run (docs/design.md principle 2): the
 * one pure function the trainer allocates from and `train --auto` predicts
 * with, for a live grid or for a layout it only considers. */
#ifndef TRIDENT_TRAIN_MEM_PLAN_H
#define TRIDENT_TRAIN_MEM_PLAN_H

#include "trident/run_spec.h"

/* The data-parallel configuration the flags give; bad payload flags are a
 * user error here, before anything is allocated. */
td_dp_config td_run_dp_config(const td_run_spec *spec, td_dp_mode mode);
/* The model a run builds: forward-only for a layout pass (trident eval:
 * the dp config's forward_only), else one that trains. */
td_gpt_use td_run_model_use(const td_dp_config *dcfg);
/* Where a rank sits in a layout and what it runs: the inputs of its plan
 * besides the flags and the model (a live grid's rank, or a layout the
 * planner only considers). Borrowed. */
typedef struct {
    const td_dp_config *dcfg;
    const td_layout *lay;
    int tp_rank, pp_rank;
    const unsigned char *held;  /* the units a pipeline stage holds (td_pp_held_units), NULL without a pipeline */
    const td_pp_split *split;   /* NULL without a pipeline */
    const td_schedule *sched;   /* the pipeline's, else unused */
    int Bm;                     /* sequences per micro-batch */
    int cp_rank;                /* its place on the cp axis (lay->cp > 1) */
} td_rank_shape;

/* Builds this rank's parameter table into *table (freed by the caller) and
 * returns the bytes per category it will hold: model states by the dp
 * mode's plan, activations (the pipeline's in-flight micro-batches when
 * split is given, else one micro-batch of Bm sequences), tensor-parallel
 * buffers and reduced-precision copies. */
td_mem_plan td_run_mem_plan(const td_run_spec *spec, const td_gpt_config *cfg, const td_rank_shape *rs,
                              td_param_table *table);

/* The comm layer's host staging of device payloads this rank reserves at its
 * start (td_staging_shape, comm.h), from the shapes the plan knows:
 * big, a parameter broadcast's slice (at most td_comm_piece_bytes() of
 * this rank's parameters) or, for the parameter server and a dp x cp group
 * without a shared ring (payloads staged whole), this rank's parameters,
 * which every block then holds; small, a
 * micro-batch's fp32 activations (B x T x C: pipeline sends, sequence
 * parallelism's bf16 collectives, scalars), doubled for cp's K/V blocks and
 * times ep x top-k for the experts' all-to-all (their capacity bound);
 * eight of those in flight; p2p, Muon's gather (td_muon_staging). table:
 * the one td_run_mem_plan built. */
td_staging_shape td_run_staging_shape(const td_run_spec *spec, const td_gpt_config *cfg,
                                      const td_rank_shape *rs, const td_param_table *table);

#endif
