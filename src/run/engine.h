/* engine: the forward-backward of one optimizer step and the forward of one
 * evaluation batch, chosen once per run (plain for pp = 1, pipeline for the
 * schedules), as Megatron's get_forward_backward_func: the step loop and
 * evaluation call through it and carry no pipeline branch.
 *
 * Not collective by itself; each call is collective over the groups the
 * layout's forward and backward use (tp, pp, and dp inside the strategy). */
#ifndef TRIDENT_TRAIN_ENGINE_H
#define TRIDENT_TRAIN_ENGINE_H

#include "grad_watch.h"
#include "trident/data.h"
#include "trident/grid.h"
#include "trident/model.h"
#include "trident/parallel.h"
#include "trident/pipeline.h"
#include "trident/run_spec.h"

/* What a step of this rank reads; owned by the caller. */
typedef struct {
    const td_run_spec *spec;
    td_grid *g;
    td_dataset *data;
    td_gpt *model;
    td_dp *dp;
    td_pp *pp; /* pipeline parallelism, else NULL */
    int Bl, Bm, K; /* sequences per replica, per micro-batch; micro-batches */
    int *in, *tg;  /* [Bm * seq] one micro-batch's tokens and targets (the plain engine's) */
    int loss_eod;  /* --eod-mask-loss: targets equal to it are dropped (-1); -1: none */
} td_engine_ctx;

/* The global batch's targets that carry loss at `step` of split 0 (train)
 * or 1 (validation): batch x seq, less the end-of-text ones under
 * --eod-mask-loss, counted on the host from the data (a pure function of
 * the step) before the step, so every layout and micro-batch split
 * divides by the same number. */
double td_engine_targets(const td_engine_ctx *c, int split, int step, int batch);

typedef struct {
    const char *name; /* "plain", "pipeline" */
    /* This rank's summed token losses of step `step` (its K micro-batches
     * forward and backward, gradients accumulated in the model); watch
     * learns which micro-batch runs (fault_row: the test fault's tensor, or
     * NULL). */
    double (*train_step)(td_engine_ctx *c, int step, float dloss, td_grad_watch *watch,
                         const td_param *fault_row);
    /* This rank's summed token losses of validation batch `it`, forward only. */
    double (*eval_batch)(td_engine_ctx *c, int it);
    /* Where the loss lives besides dp: the pipeline's last stage holds it, so
     * sums go over pp too (NULL: every rank holds its replica's loss). */
    td_comm *(*loss_group)(const td_engine_ctx *c);
    /* The first timed step begins: forget the statistics of the untimed
     * ones (the pipeline's bubble). NULL: nothing to do. */
    void (*timing_reset)(td_engine_ctx *c);
} td_engine;

/* The engine of this layout. */
const td_engine *td_engine_for(const td_engine_ctx *c);

/* Micro-batch mb of this replica, split 0 (train) or 1 (validation), at
 * `step` (the pipeline's stages read the same rows the plain loop reads). */
void td_engine_batch(const td_engine_ctx *c, int split, int step, int mb, int *in, int *tg);

#endif
