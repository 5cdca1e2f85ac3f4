/* pipeline: pipeline parallelism over the grid's pp axis (src/parallel/pp*.c).
 *
 * The model's L blocks are cut into P x V contiguous chunks ("virtual
 * stages"); virtual stage v = c * P + s is chunk c of stage s (V = 1 but
 * for the interleaved schedule). The first virtual stage also runs the
 * embeddings, the last the final norm, the tied head and the loss; the
 * token embedding lives on the first and the last stage, whose gradients
 * are summed over the grid's embedding group every step (td_grid.embed_comm),
 * so the step equals one process's.
 *
 * A stage runs its action list from the schedule module (schedule.h) with
 * nonblocking point-to-point transfers: receives are posted as early as a
 * slot of activations is free, sends never wait. The strategy (dp.c) keeps
 * the stage's state as it keeps a whole model's; the executor drives its
 * unit hook, so a unit's data-parallel reduction starts after the unit's
 * last backward (weight-gradient) action. */
#ifndef TRIDENT_PIPELINE_H
#define TRIDENT_PIPELINE_H

#include "trident/parallel.h"
#include "trident/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the blocks go: a pure function of the config and the flags, the
 * same on every rank. */
typedef struct {
    int P, V;
    int first[TD_MAX_LAYERS + 2]; /* [P*V + 1]: virtual stage v holds blocks [first[v], first[v+1]) */
} td_pp_split;

/* "uniform" (blocks spread as evenly as possible, interleaved: equal
 * chunks), or an explicit list "a,b,c" of P*V block counts. One clear error
 * naming --pp-partition / --pp / --virtual-stages / --layers otherwise.
 * "auto" is resolved by the trainer (it measures) through td_pp_split_auto. */
void td_pp_split_parse(td_pp_split *sp, const char *spec, int L, int P, int V);
/* From costs of the embedding, each block and the head: the contiguous split
 * minimizing the slowest virtual stage (td_pp_partition over the blocks, the
 * embedding's cost added to block 0's and the head's to the last block's).
 * Returns the predicted time of the slowest virtual stage. */
double td_pp_split_auto(td_pp_split *sp, const double *block_cost, double embed_cost,
                        double head_cost, int L, int P, int V);
/* The units stage s holds: held[L+2] (model.h td_param_table.held); tied:
 * the last stage holds the embedding too, as its head. */
void td_pp_held_units(const td_pp_split *sp, int L, int tied, int stage, unsigned char *held);
/* The slot shape of stage s (model.h) and how many slots its schedule needs. */
td_slot_shape td_pp_slot_shape(const td_pp_split *sp, const td_schedule *sched, int stage);
/* A TD_GPT_FORWARD stage's slots: no dx, no weight-gradient stash (a
 * no-op for TD_GPT_TRAIN). */
void td_pp_slot_shape_use(td_slot_shape *sh, td_gpt_use use);
/* Activation bytes of stage s: the model's scratch (with recomputation, its
 * shared block set too) plus the schedule's peak of in-flight micro-batch
 * chunks times a slot (the plan); a TD_GPT_FORWARD stage has one slot
 * (td_pp_forward_only runs one micro-batch chunk at a time). The stage
 * model's recompute mode and use set the slots' shape (td_pp_create). */
size_t td_pp_activation_bytes(const td_param_table *t, int B, int seq_parallel, const td_pp_split *sp,
                              const td_schedule *sched, int stage, td_recompute rc, td_gpt_use use);

/* Time per stage and step, for the bubble (ms, summed since the last reset). */
typedef struct {
    double step_ms;    /* from the schedule's start until the pipeline has flushed
                          (the last stage to finish: the longest stage time) */
    double own_ms;     /* from the schedule's start to this stage's last action's end */
    double compute_ms; /* forward / backward / weight-gradient actions */
    double fwd_ms, bwd_ms, wgrad_ms; /* the compute split by kind */
    double wait_ms;    /* blocked on a receive (or a slot's send) */
    double send_ms;    /* posting and completing sends */
    int steps;
    int stage;
    int max_inflight;  /* most slots (micro-batch chunks' activations) held at once */
} td_pp_stats;

typedef struct td_pp td_pp;

/* Tokens of micro-batch mb of this step for this rank's replica. */
typedef void (*td_pp_batch_fn)(void *ctx, int mb, int *inputs, int *targets);

td_pp *td_pp_create(const td_grid *g, td_gpt *model, td_dp *dp, const td_schedule *sched,
                    const td_pp_split *sp);
void td_pp_destroy(td_pp *pp);
/* One training step's forward and backward of every micro-batch, then the
 * embedding group's sum; the caller then runs td_dp_finish_step. Returns the
 * sum of the token losses on the last stage (0 elsewhere). */
double td_pp_train_step(td_pp *pp, int step, float dloss, td_pp_batch_fn batch, void *ctx);
/* --batch-rampup: the next td_pp_train_step runs n_micro micro-batches
 * (1 to the schedule's M given to td_pp_create, whose slots and memory plan
 * serve any fewer), by the same kind of schedule built for n_micro, once,
 * on first use; n_micro = M goes back to that schedule. */
void td_pp_set_micro(td_pp *pp, int n_micro);
/* Forward only (evaluation) of n_micro micro-batches in order; the loss sum
 * on the last stage, 0 elsewhere. */
double td_pp_forward_only(td_pp *pp, int n_micro, td_pp_batch_fn batch, void *ctx);
/* After td_pp_forward_only: its last micro-batch's token losses [N] (device
 * memory, read through td_dev_download) on the stage that holds the head,
 * NULL on the others (trident eval --task's per-row sums). */
const float *td_pp_head_losses(const td_pp *pp);
void td_pp_stats_get(const td_pp *pp, td_pp_stats *s);
void td_pp_stats_reset(td_pp *pp);

/* Unit u of section s (as td_tp_gather_unit) on world rank 0, from whichever
 * stage holds it (the first for unit 0), laid out as *layout says (canon
 * unless pp = tp = 1). scratch: td_pp_gather_scratch_floats. Collective over
 * the world. */
const float *td_pp_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t,
                               const td_param_table *canon, int section, int u, float *scratch,
                               const td_param_table **layout);
size_t td_pp_gather_scratch_floats(const td_param_table *t, const td_param_table *canon);

#ifdef __cplusplus
}
#endif

#endif
