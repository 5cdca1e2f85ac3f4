/* Reduce-broadcast data parallelism: the gradients are reduced to dp rank
 * 0, which alone holds the AdamW moments, runs the step and broadcasts the
 * updated parameters. The replicated state is allreduce.c's. */
#include <math.h>
#include <string.h>

#include "dp_internal.h"
#include "trident/backend.h"

static void rb_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                    td_mem_plan *p) {
    size_t n = t->numel * sizeof(float);
    td_plan_dev(p, td_dp_param_cat(cfg), n);
    if (cfg->forward_only) return; /* no gradient, no moment */
    td_plan_dev(p, TD_MEM_GRADS, n);
    /* the moments on dp rank 0, under ep on every rank of edp rank 0 */
    if (lay->dp_rank >= 0 && lay->dp_rank < (lay->ep > 1 ? lay->ep : 1))
        td_plan_dev(p, TD_MEM_OPTIM, n), td_plan_dev(p, TD_MEM_OPTIM, n);
}

/* Under ep the expert stacks were reduced to rank 0 of their edp group
 * (buckets.c): the ranks of edp rank 0 (the first ep run) step together,
 * the root the whole model, the others their own expert stacks, so their
 * ranges partition the model over the ep group. */
static td_step_result ep_step(td_dp *dp, int step, float lr) {
    const td_param_table *t = dp->t;
    td_step_range *r = td_alloc(sizeof *r * TD_UNIT_PIECES * (size_t)t->n_units, TD_MEM_OTHER);
    int n = 0;
    if (dp->r == 0) r[n++] = (td_step_range){0, t->numel, dp->params, dp->m, dp->v, NULL};
    for (int u = 0; u < t->n_units && dp->r != 0; u++) {
        size_t lo[TD_UNIT_PIECES], len[TD_UNIT_PIECES];
        int ex[TD_UNIT_PIECES];
        for (int k = 0, np = td_param_unit_pieces(t, u, lo, len, ex); k < np; k++)
            if (ex[k])
                r[n++] = (td_step_range){lo[k], len[k], dp->params + lo[k], dp->m + lo[k], dp->v + lo[k],
                                         dp->grads + lo[k]};
    }
    td_step_group grp = td_dp_step_group(dp, dp->g->ep_comm, dp->g->ep, 1);
    td_step_result res = td_step_apply(&grp, dp->grads, r, n, step, lr);
    td_free(r);
    return res;
}

static double rb_finish(td_dp *dp, int step, float lr) {
    size_t n = dp->t->numel;
    td_buckets_wait_all(dp, dp->impl);
    /* the root owns the whole reduced gradient and steps alone (under ep
     * with the ranks that own experts) */
    float norm_f = 0.0f;
    int row = dp->t->n_rows;
    if (dp->er == 0) {
        td_step_result res;
        if (dp->ecomm) {
            res = ep_step(dp, step, lr);
        } else {
            td_step_group grp = td_dp_step_group(dp, NULL, 1, 0);
            td_step_range all = {0, n, dp->params, dp->m, dp->v, NULL};
            res = td_step_apply(&grp, dp->grads, &all, 1, step, lr);
        }
        if (res.bad_row >= 0) row = res.bad_row;
        norm_f = (float)res.norm;
    }
    if (dp->D > 1) { /* the expert stacks from rank 0 of their edp group */
        td_buckets_broadcast(dp, dp->impl, dp->params);
        td_broadcast(dp->comm, &norm_f, 1, TD_F32, 0);
    }
    /* every rank learns a non-finite step from the broadcast norm, and the
     * root's row */
    if (!isfinite(norm_f))
        td_dp_record_nonfinite(dp, step, td_step_agree_row(dp->comm, dp->D, row));
    td_dev_zero(dp->grads, n * sizeof(float));
    return norm_f;
}

const td_dp_ops td_dp_reduce_broadcast_ops = {
    .plan = rb_plan,
    .create = td_replicated_create,
    .destroy = td_replicated_destroy,
    .begin_micro = td_replicated_begin_micro,
    .finish_step = rb_finish,
    .gather_unit = td_replicated_gather_unit,
    .full_params = td_replicated_full_params,
    .ranges = td_replicated_ranges,
};
