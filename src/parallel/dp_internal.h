/* Shared state of the data-parallel strategies (private to src/parallel). */
#ifndef TRIDENT_DP_INTERNAL_H
#define TRIDENT_DP_INTERNAL_H

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/parallel.h"

typedef struct {
    int lo_unit, hi_unit;  /* units [lo, hi] (inclusive), contiguous in the flat buffer */
    size_t lo, hi;         /* element range */
    td_request *req;
    double start_ms;
} td_bucket;

struct td_dp {
    td_dp_config cfg;
    const td_grid *g;
    const td_param_table *t;
    td_gpt *model;
    td_comm *comm;          /* the dp group (workers) */
    int D, r;               /* dp size and rank */
    int n_units;

    /* replicated state (zero 0, zero 1 params/grads, reduce-broadcast) */
    float *params, *grads, *m, *v;
    int grads_shared;  /* grads from td_comm_alloc_shared (collective inputs, dp > 1) */
    int params_shared; /* params likewise (ZeRO 1/2 all-gather them in place) */

    /* bucketed gradient sync during backward */
    td_bucket *buckets;
    int n_buckets, next_bucket;
    int sync_this_micro;
    int training;
    double comm_ms, exposed_ms;
    int bad_row, bad_step; /* td_dp_nonfinite: -1, or the row and step of a non-finite gradient */

    /* ZeRO (zero.c) and parameter server (ps.c) keep their own state */
    struct td_zero *zero;
    struct td_ps *ps;
};

/* buckets.c: bucketed all-reduce / reduce overlapped with backward */
void td_buckets_build(td_dp *dp);
void td_buckets_free(td_dp *dp);
void td_buckets_on_unit_done(td_dp *dp, int unit);
void td_buckets_progress(td_dp *dp);
void td_buckets_wait_all(td_dp *dp);

/* zero.c */
void td_zero_create(td_dp *dp);
void td_zero_destroy(td_dp *dp);
void td_zero_hook(void *ctx, td_unit_event ev, int unit);
double td_zero_finish_step(td_dp *dp, int step, float lr);
const float *td_zero_gather_unit(td_dp *dp, int section, int u, float *scratch);
/* shared: the dp group shares memory (td_comm_shares_memory), so ZeRO's
 * collectives need no MPI staging */
void td_zero_plan(const td_dp_config *cfg, const td_param_table *t, int D, int shared,
                  td_mem_plan *p);

/* ps.c */
void td_ps_create(td_dp *dp);
void td_ps_destroy(td_dp *dp);
void td_ps_begin_step(td_dp *dp, int step);
double td_ps_finish_step(td_dp *dp, int step, float lr);
void td_ps_serve(td_dp *dp, int steps);
const float *td_ps_gather_unit(td_dp *dp, int section, int u, float *scratch);
void td_ps_stop(td_dp *dp, int step);
int td_ps_save_begin(td_dp *dp, int steps_done);
void td_ps_plan(const td_dp_config *cfg, const td_grid *g, const td_param_table *t, td_mem_plan *p);
void td_ps_staleness(const td_dp *dp, int *max_seen, double *mean_seen);

/* Sharded layouts (ZeRO over dp ranks, parameter servers) split every unit
 * of the padded flat buffer into `parts` equal slices; part s owns slice s
 * of each unit, and its shard packs those slices unit after unit.
 * td_unit_slice: flat offset of part s's slice of unit u, its length in *len.
 * td_slices_pack/unpack: part s's slices between flat and packed form. */
size_t td_unit_slice(const td_param_table *t, int u, int parts, int s, size_t *len);
void td_slices_pack(const td_param_table *t, int parts, int s, const float *flat, float *packed);
void td_slices_unpack(const td_param_table *t, int parts, int s, const float *packed, float *flat);

/* Non-finite gradients: the table row of the first non-finite element among
 * the flat elements [lo, lo + n) stored at x, or t->n_rows if none. */
int td_dp_first_nonfinite(const td_param_table *t, const float *x, size_t lo, size_t n);
/* Records a non-finite norm at `step`: the smallest of the ranks' rows over
 * the dp group (collective over it). */
void td_dp_record_nonfinite(td_dp *dp, int step, int row);

/* Global norm and AdamW over [lo, hi) of full buffers (shared by modes). */
void td_dp_adamw_range(td_dp *dp, float *p, const float *g, float *m, float *v, size_t lo,
                       size_t hi, int step, float lr, float scale);

#endif
