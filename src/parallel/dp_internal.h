/* Shared state of the data-parallel strategies (private to src/parallel).
 *
 * Each mode is a module behind one table of operations (td_dp_ops):
 * allreduce.c (replicated, bucketed all-reduce; buckets.c), reduce_broadcast.c,
 * zero.c, ps.c. dp.c holds the public API and dispatches to the table; every
 * mode's finish runs the one step pipeline of step.c on the ranges it owns. */
#ifndef TRIDENT_DP_INTERNAL_H
#define TRIDENT_DP_INTERNAL_H

#include "step.h"
#include "trident/backend.h" /* td_dp_alloc_shared: TD_STR */
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/parallel.h"
#include "trident/param_slices.h"

typedef struct td_dp_ops {
    /* bytes per category this rank will hold under `lay` (pure: no MPI) */
    void (*plan)(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                 td_mem_plan *p);
    /* allocates the state into dp->impl (and dp->params/grads/m/v where
     * the mode keeps flat buffers) and binds the model's hook */
    void (*create)(td_dp *dp);
    void (*destroy)(td_dp *dp);
    void (*begin_step)(td_dp *dp, int step); /* NULL: nothing to do */
    void (*begin_micro)(td_dp *dp);          /* NULL: nothing to do */
    void (*begin_eval)(td_dp *dp, int steps_done); /* NULL: nothing to do */
    /* reduce the gradients, run the step pipeline on the owned ranges, sync
     * the parameters; a non-finite step sets dp->bad_row and dp->bad_step */
    double (*finish_step)(td_dp *dp, int step, float lr);
    const float *(*gather_unit)(td_dp *dp, int section, int u, float *scratch);
    int (*full_params)(const td_dp *dp);          /* see td_dp_full_params */
    void (*serve)(td_dp *dp, int steps);          /* NULL: no server ranks */
    int (*save_begin)(td_dp *dp, int steps_done); /* NULL: 1 */
    void (*stop)(td_dp *dp, int step);            /* NULL: nothing to do */
    void (*staleness)(const td_dp *dp, int *max_seen, double *mean_seen); /* NULL: 0, 0 */
    /* td_dp_ranges (parallel.h); NULL: the mode cannot say (ps) */
    void (*ranges)(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx);
    float *(*rank_state)(td_dp *dp, int k); /* td_dp_rank_state; NULL: none */
} td_dp_ops;

extern const td_dp_ops td_dp_allreduce_ops, td_dp_reduce_broadcast_ops, td_dp_zero_ops,
    td_dp_ps_ops;

struct td_dp {
    td_dp_config cfg;
    const td_dp_ops *ops;
    const td_grid *g;
    const td_param_table *t;
    td_gpt *model;
    td_comm *comm; /* the dp x cp group (workers); a shard of it under hybrid sharding */
    int D, r;      /* its size and this rank's place */
    td_comm *rep;  /* hybrid sharding: the replica group summing the shards; NULL: none */
    int R, rep_r;  /* its size (1 without) and this rank's place (0 without) */
    td_comm *ecomm; /* expert parallelism: edp, the ranks holding this rank's experts,
                       over which the expert rows' gradients sum; NULL: none */
    int ED, er;     /* its size and this rank's place (D and r without) */
    int n_units;

    /* flat buffers bound to the model (each mode says which it keeps) */
    float *params, *grads, *m, *v;
    int grads_shared;  /* grads from td_comm_alloc_shared (collective inputs, dp > 1) */
    int params_shared; /* params likewise (ZeRO 1/2 all-gather them in place) */

    int step;            /* of td_dp_begin_step (the top-k update's learning rate) */
    int sync_this_micro; /* the last micro-batch of the step: gradients communicate */
    int training;
    double comm_ms, exposed_ms;
    float loss_scale;      /* td_dp_set_loss_scale: what the gradients are multiplied by */
    int bad_row, bad_step; /* td_dp_nonfinite: -1, or the row and step of a non-finite gradient */
    /* gradient traffic since td_dp_begin_step (td_dp_grad_traffic) */
    uint64_t grad_sent, grad_dense;

    void *impl; /* the mode's own state */
};

/* allocation of buffers other replicas read in collectives (n floats,
 * zeroed; name as td_dev_alloc's): on the cpu device with dp > 1 shared
 * between the dp group's ranks (comm.h, td_comm_alloc_shared), so that one
 * node's collectives run straight between them; else device memory, which
 * the group's shared ring stages in pieces (td_comm_staging_plan_bytes) */
#define td_dp_alloc_shared(dp, n, cat, name) \
    td_dp_alloc_shared_at((dp), (n), (cat), (name), __FILE__ ":" TD_STR(__LINE__))
float *td_dp_alloc_shared_at(td_dp *dp, size_t n, td_mem_cat cat, const char *name, const char *site);
void td_dp_free_shared(td_dp *dp, float *p, td_mem_cat cat);

/* allreduce.c: the replicated state, shared with reduce_broadcast.c */
void td_replicated_create(td_dp *dp);
void td_replicated_destroy(td_dp *dp);
void td_replicated_begin_micro(td_dp *dp);
const float *td_replicated_gather_unit(td_dp *dp, int section, int u, float *scratch);
int td_replicated_full_params(const td_dp *dp);
void td_replicated_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx);

/* buckets.c: bucketed all-reduce (root < 0) or reduce to `root`,
 * overlapped with backward */
typedef struct td_buckets td_buckets;
td_buckets *td_buckets_build(td_dp *dp, int root);
void td_buckets_free(td_dp *dp, td_buckets *b);
void td_buckets_reset(td_buckets *b);
/* buf's buckets broadcast from rank 0 of each one's group (dp, or edp for
 * expert rows): collective over both */
void td_buckets_broadcast(td_dp *dp, td_buckets *b, float *buf);
void td_buckets_on_unit_done(td_dp *dp, td_buckets *b, int unit);
void td_buckets_progress(td_buckets *b);
int td_buckets_started(const td_buckets *b);
void td_buckets_wait_all(td_dp *dp, td_buckets *b);
/* the per-dp-rank state of its payload (td_dp_rank_state) */
float *td_buckets_rank_state(td_buckets *b, int k);

/* buckets.c: the element ranges of the buckets (pure: the plan uses it);
 * lo and len hold t->n_units entries, the count is returned */
int td_bucket_ranges(const td_param_table *t, size_t bucket_bytes, size_t *lo, size_t *len);

/* grad_payload.c: bf16 or top-k reduction of ranges of dp->grads (all
 * ranges together cover the flat buffer once). NULL from create when the
 * payload is plain fp32 or dp = 1: the caller runs its fp32 collective. */
typedef struct td_gpay td_gpay;
int td_gpay_on(const td_dp_config *cfg, int D);
/* The top-k update scheme is on (topk:R at dp > 1): after the reduction the
 * 2-D tensors' gradient elements hold the mean of the ranks' sparse AdamW
 * updates, which the step pipeline applies (td_step_group.updates_2d). */
int td_gpay_updates(const td_dp_config *cfg, int D);
/* Bytes per category the payload holds for these ranges (pure). */
void td_gpay_plan(const td_dp_config *cfg, int D, const td_param_table *t, int n_ranges,
                  const size_t *lo, const size_t *len, td_mem_plan *p);
td_gpay *td_gpay_create(td_dp *dp, int n_ranges, const size_t *lo, const size_t *len);
/* k = 0 residual, 1 / 2 the update scheme's local moments (NULL if absent) */
float *td_gpay_rank_state(td_gpay *g, int k);
void td_gpay_free(td_dp *dp, td_gpay *g);
/* Packs range i (bf16, or top-k with the residual) and starts its
 * collective on req; counts the traffic. */
void td_gpay_start(td_dp *dp, td_gpay *g, int i, td_request *req);
/* After req completed: the reduced (dense, fp32) sum into dp->grads. */
void td_gpay_finish(td_dp *dp, td_gpay *g, int i);
/* Counts an fp32 gradient collective of n elements started since
 * td_comm_sent_bytes() was sent0. */
void td_dp_count_grad(td_dp *dp, uint64_t sent0, size_t n);

/* The step group of this rank's strategy: `group` (size, sharded) as
 * step.h says, with the grid's tp and pp groups. */
td_step_group td_dp_step_group(const td_dp *dp, td_comm *group, int size, int sharded);

/* muon_shard.c: the buffers of --optimizer muon's step on layouts that cut
 * its matrices (step.h, td_muon_step_pieces, td_muon_step_tp) in the memory
 * plan (pure: no MPI). */
void td_muon_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t, td_mem_plan *p);

/* Records a non-finite step: the agreed row at `step`. */
void td_dp_record_nonfinite(td_dp *dp, int step, int row);

#endif
