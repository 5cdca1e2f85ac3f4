/* Replicated data parallelism: every dp rank holds the whole model state.
 * The state and its bucketed gradient sync are shared with
 * reduce_broadcast.c; this file's mode all-reduces the gradients and every
 * replica applies the same update to its own copy. */
#include <string.h>

#include "dp_internal.h"
#include "trident/backend.h"
#include "trident/state_plan.h"

/* Bucket bookkeeping on each unit event. */
static void replicated_hook(void *ctx, td_unit_event ev, int unit) {
    td_dp *dp = ctx;
    td_buckets *b = dp->impl;
    if (ev == TD_BWD_END)
        td_buckets_on_unit_done(dp, b, unit);
    else if (td_buckets_started(b) > 0)
        td_buckets_progress(b);
}

void td_replicated_create(td_dp *dp) {
    int allreduce = dp->cfg.mode == TD_DP_ALLREDUCE;
    size_t n = dp->t->numel;
    dp->params = td_dev_alloc(n * sizeof(float), td_dp_param_cat(&dp->cfg), "parameters");
    /* All-reduced gradients live where the group's ranks can reach each
     * other's: on one node the buckets are then summed straight between the
     * replicas' buffers, with no staging (comm.h, td_comm_alloc_shared). */
    int fwd = dp->cfg.forward_only; /* no gradient, no moment */
    dp->grads_shared = allreduce && dp->D > 1 && !fwd;
    dp->grads = fwd                ? NULL
                : dp->grads_shared ? td_dp_alloc_shared(dp, n, TD_MEM_GRADS, "gradients")
                                   : td_dev_alloc(n * sizeof(float), TD_MEM_GRADS, "gradients");
    /* reduce-broadcast: only the root updates, so only it holds moments;
     * under ep the first ep run's other ranks update their experts (the
     * rest of their moments unused: td_ep_gather_unit reads whole units) */
    if (!fwd && (allreduce || dp->er == 0)) {
        dp->m = td_dev_alloc(n * sizeof(float), TD_MEM_OPTIM, "AdamW m");
        dp->v = td_dev_alloc(n * sizeof(float), TD_MEM_OPTIM, "AdamW v");
    }
    td_param_init_range_dev(dp->t, dp->cfg.seed, 0, n, dp->params);
    dp->impl = td_buckets_build(dp, allreduce ? -1 : 0);
    /* replicas start identical whatever their seeds (expert rows: those of
     * the ranks holding the same experts) */
    td_buckets_broadcast(dp, dp->impl, dp->params);
    td_gpt_bind_flat(dp->model, dp->params, dp->grads);
    dp->model->hook = replicated_hook;
    dp->model->hook_ctx = dp;
}

void td_replicated_destroy(td_dp *dp) {
    td_buckets_free(dp, dp->impl);
    dp->impl = NULL; /* the flat buffers: td_dp_destroy */
}

void td_replicated_begin_micro(td_dp *dp) { td_buckets_reset(dp->impl); }

const float *td_replicated_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    (void)scratch;
    /* dp rank 0 holds the moments under reduce-broadcast too; under ep
     * every rank of edp rank 0 its experts' (td_ep_gather_unit) */
    if (dp->er != 0) return NULL;
    const float *b = section == 0 ? dp->params : section == 1 ? dp->m : dp->v;
    return b + dp->t->unit_offset[u];
}

void td_replicated_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx) {
    float *b = section == 0 ? dp->params : section == 1 ? dp->m : dp->v;
    /* reduce-broadcast: the moments live on dp rank 0 alone */
    if (b && (!owner_only || dp->r == 0)) {
        cb(ctx, 0, dp->t->numel, b);
        return;
    }
    /* expert parallelism: the other ranks of edp's first index own their experts */
    if (!b || !dp->ecomm || td_comm_rank(dp->ecomm) != 0) return;
    for (int i = 0; i < dp->t->n_rows; i++) {
        const td_param *p = &dp->t->rows[i];
        if (p->split == TD_SPLIT_EXPERT && p->numel) cb(ctx, p->offset, p->numel, b + p->offset);
    }
}

static float *replicated_rank_state(td_dp *dp, int k) { return td_buckets_rank_state(dp->impl, k); }

int td_replicated_full_params(const td_dp *dp) {
    (void)dp;
    return 1;
}

static void allreduce_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                           td_mem_plan *p) {
    td_state_bytes st = td_state_plan((double)t->numel, td_layout_grad_ranks(lay), 0, td_state_elem_engine(cfg->master));
    /* td_replicated_create's buffers: the parameters (fp32, or the master
     * copy), the gradients (a shared window, host memory, where a group of
     * two or more all-reduces them on the cpu device), the moments m and v */
    td_plan_dev(p, td_dp_param_cat(cfg), (size_t)(st.params + st.master));
    if (!cfg->forward_only) {
        if (td_layout_shard_ranks(lay) > 1 && !td_backend_is_device())
            td_plan_host(p, TD_MEM_GRADS, (size_t)st.grads);
        else
            td_plan_dev(p, TD_MEM_GRADS, (size_t)st.grads);
        td_plan_dev(p, TD_MEM_OPTIM, (size_t)st.optim / 2);
        td_plan_dev(p, TD_MEM_OPTIM, (size_t)st.optim / 2);
    }
    if (td_gpay_on(cfg, td_layout_grad_ranks(lay))) { /* bf16 / top-k buffers over the buckets */
        size_t *lo = td_alloc(sizeof(size_t) * 2 * (size_t)t->n_units, TD_MEM_OTHER);
        int nb = td_bucket_ranges(t, cfg->bucket_bytes, lo, lo + t->n_units);
        td_gpay_plan(cfg, td_layout_grad_ranks(lay), t, nb, lo, lo + t->n_units, p);
        td_free(lo);
    }
}

/* Every replica owns the whole (all-reduced) gradient: one range, the norm
 * its own; a non-finite row is agreed over the dp group all the same. */
static double allreduce_finish(td_dp *dp, int step, float lr) {
    size_t n = dp->t->numel;
    td_buckets_wait_all(dp, dp->impl);
    td_step_group grp = td_dp_step_group(dp, dp->comm, dp->D, 0);
    td_step_range all = {0, n, dp->params, dp->m, dp->v, NULL};
    td_step_result res = td_step_apply(&grp, dp->grads, &all, 1, step, lr);
    if (res.bad_row >= 0) td_dp_record_nonfinite(dp, step, res.bad_row);
    td_dev_zero(dp->grads, n * sizeof(float));
    return res.norm;
}

const td_dp_ops td_dp_allreduce_ops = {
    .plan = allreduce_plan,
    .create = td_replicated_create,
    .destroy = td_replicated_destroy,
    .begin_micro = td_replicated_begin_micro,
    .finish_step = allreduce_finish,
    .gather_unit = td_replicated_gather_unit,
    .full_params = td_replicated_full_params,
    .ranges = td_replicated_ranges,
    .rank_state = replicated_rank_state,
};
