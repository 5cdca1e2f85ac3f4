/* The one optimizer step of every data-parallel strategy (private to
 * src/parallel): the global gradient norm, the non-finite check, clipping
 * and AdamW, over the ranges of the flat buffers this rank owns once its
 * strategy has reduced the gradients.
 *
 * The ranks of `group` take the step together:
 *   sharded = 0  every rank owns the whole model (replicated): the norm is
 *                its own, summed in double;
 *   sharded = 1  the ranks' ranges partition the model (ZeRO shards, server
 *                slices): each rank's sum of squares is rounded to float and
 *                the floats are all-reduced over the group (fp32 sum, the
 *                order these modes have always used, kept so that every
 *                mode stays bit-identical to before).
 * With tensor parallelism the partial sums are then summed over the tp
 * group (fp32), counting replicated tensors once.
 * Loss scaling is undone here, once for every strategy: the sum of squares
 * is multiplied by 1/scale^2 in double before any rounding to float, and
 * 1/scale joins the clipping coefficient AdamW multiplies by, so with a
 * power-of-two scale the norm and the update are bitwise the unscaled ones.
 * A non-finite norm applies nothing; the first tensor holding a non-finite
 * gradient is the smallest table row over the ranks' scans, agreed over the
 * group. */
#ifndef TRIDENT_STEP_H
#define TRIDENT_STEP_H

#include <stddef.h>

#include "trident/comm.h"
#include "trident/model.h"
#include "trident/optim.h"

/* Flat elements [lo, lo + n) of the model; p, m, v point at element lo of
 * the parameters and AdamW moments wherever the strategy keeps them; g at
 * its gradient when the ranges' gradients are not packed (NULL: packed, see
 * td_step_apply). */
typedef struct {
    size_t lo, n;
    float *p, *m, *v;
    const float *g;
} td_step_range;

/* A piece of the flat layout [lo, lo + n) split into `parts` equal slices
 * over `comm`, slice k on its rank k (`rank`: this rank's), as ZeRO cuts
 * its units (td_step_group.pieces). */
typedef struct {
    size_t lo, n;
    td_comm *comm;
    int parts, rank;
} td_step_piece;

typedef struct {
    const td_param_table *t;
    const td_optim_config *optim;
    td_comm *group; /* NULL: this rank steps alone */
    int group_size;
    int sharded; /* 1: the ranks' ranges partition the model (see above) */
    /* Tensor parallelism: the tp peers hold the other slices of the split
     * tensors and copies of the replicated ones (td_tp_split). The norm sums
     * the split rows of every tp rank and the replicated rows once (tp rank
     * 0's), and the non-finite row is agreed over tp as well. NULL / 1: none. */
    td_comm *tp_group;
    int tp;
    /* Pipeline parallelism: the other stages hold the other units; the norm
     * and the non-finite row are summed / agreed over pp as well. The last
     * stage's copy of the tied embedding (unit 0, summed with the first
     * stage's before this step) is left out of the norm (skip_tied). */
    td_comm *pp_group;
    int pp;
    int skip_tied;
    /* Loss scaling (loss_scale.h): the gradients arrive multiplied by this;
     * the norm pass and AdamW see them divided by it again (0 or 1: not
     * scaled). The same on every rank. */
    float loss_scale;
    /* The top-k update scheme (grad_payload.h): the 2-D tensors' elements of
     * grads hold the mean of the ranks' sparse AdamW updates, not gradients.
     * The norm and clipping cover the other (1-D) tensors; the updates join
     * only the non-finite check, then are added to the parameters with the
     * decoupled decay (td_adamw_update_on with given_2d: add, then scale). */
    int updates_2d;
    /* Expert parallelism: the ep peers hold the other experts (the table's
     * TD_SPLIT_EXPERT rows); the norm sums those rows over ep as well. NULL
     * / 1: none. */
    td_comm *ep_group;
    int ep;
    /* The layouts that cut Muon's matrices: range i of td_step_apply is this
     * rank's slice of pieces[i], and --optimizer muon steps through
     * muon_shard.c (each matrix gathered to an owner). NULL: every range
     * holds its matrices whole. */
    const td_step_piece *pieces;
} td_step_group;

/* bad_row: -1 when the step was applied; else the agreed first row holding a
 * non-finite gradient, or t->n_rows when all are finite and the norm overflowed */
typedef struct {
    double norm; /* global gradient norm of the unscaled gradients, before clipping */
    int bad_row;
} td_step_result;

/* grads: the owned gradients packed range after range (range k's at the sum
 * of the lengths before it), so the sum of squares runs over one contiguous
 * buffer in td_sumsq's fixed block order; a range whose g is set has its
 * gradient there instead (then the sum runs range by range, row by row).
 * step is 0-based. Collective over the group. */
td_step_result td_step_apply(const td_step_group *grp, const float *grads, const td_step_range *r,
                             int n_ranges, int step, float lr);

/* muon_shard.c: --optimizer muon's step on ranges that cut its matrices
 * (grp->pieces set; g[i]: range i's gradient; with grp->tp > 1 the pieces
 * cut tp blocks, and the gather is chained over tp). Collective over the
 * pieces' groups (and tp). */
void td_muon_step_pieces(const td_step_group *grp, const float *const *g, const td_step_range *r,
                         int n_ranges, float lr, int step, float grad_scale);
/* The same under tensor parallelism (grp->tp > 1, ranges holding whole
 * rows): the split matrices' blocks gathered over tp. Collective over tp. */
void td_muon_step_tp(const td_step_group *grp, const float *const *g, const td_step_range *r, int n_ranges,
                     float lr, int step, float grad_scale);

/* The smallest of the ranks' rows over a group (collective over it). */
int td_step_agree_row(td_comm *group, int group_size, int row);

#endif
