/* The one optimizer step of every data-parallel strategy (see step.h). */
#include <math.h>

#include "step.h"
#include "trident/base.h"
#include "trident/parallel.h"
#include "trident/timeline.h"

int td_step_first_nonfinite(const td_param_table *t, const float *x, size_t lo, size_t n) {
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        size_t a = td_max_sz(lo, r->offset), b = td_min_sz(lo + n, r->offset + r->numel);
        for (size_t k = a; k < b; k++)
            if (!isfinite(x[k - lo])) return i;
    }
    return t->n_rows;
}

int td_step_agree_row(td_comm *group, int group_size, int row) {
    float neg = -(float)row; /* rows are small integers, exact in float; MAX of -row = MIN */
    if (group && group_size > 1) td_allreduce(group, &neg, 1, TD_F32, TD_MAX);
    return (int)-neg;
}

/* This rank's share of the squared norm over its ranges when some of its
 * elements are counted elsewhere: every element of the split tensors'
 * slices, the tp-replicated tensors (experts too) on tp rank 0 only, the
 * tied embedding on the first pipeline stage only (each piece summed in
 * td_sumsq's fixed order); experts: -1 every row, 0 all but the expert
 * rows, 1 those only. */
/* Range i's gradient: its own, or its place in the packed buffer (k: the
 * lengths of the ranges before it). */
static const float *range_grads(const td_step_range *r, int i, const float *grads, size_t k) {
    return r[i].g ? r[i].g : grads + k;
}

static double counted_sumsq(const td_param_table *t, const float *grads, const td_step_range *r,
                            int n_ranges, int skip_tied, int skip_2d, int experts) {
    double sum = 0.0;
    size_t k = 0;
    for (int i = 0; i < n_ranges; i++) {
        for (int j = 0; j < t->n_rows; j++) {
            const td_param *p = &t->rows[j];
            int expert = p->split == TD_SPLIT_EXPERT;
            if (td_param_tp_replicated(p) && t->tp_rank != 0) continue;
            if (experts >= 0 && expert != experts) continue;
            if (skip_tied && p->unit == 0) continue;
            if (skip_2d && p->ndim == 2) continue;
            size_t a = td_max_sz(r[i].lo, p->offset), b = td_min_sz(r[i].lo + r[i].n, p->offset + p->numel);
            if (a < b) sum += td_sumsq(range_grads(r, i, grads, k) + (a - r[i].lo), b - a);
        }
        k += r[i].n;
    }
    return sum;
}

static td_grad_probe g_probe;
static void *g_probe_ctx;

void td_dp_set_grad_probe(td_grad_probe fn, void *ctx) {
    g_probe = fn;
    g_probe_ctx = ctx;
}

static td_step_result apply(const td_step_group *grp, const float *grads, const td_step_range *r,
                            int n_ranges, int step, float lr) {
    if (g_probe) {
        size_t k = 0;
        float scale = grp->loss_scale > 0.0f ? grp->loss_scale : 1.0f;
        for (int i = 0; i < n_ranges; i++) {
            g_probe(g_probe_ctx, grp->t, step, r[i].lo, r[i].n, range_grads(r, i, grads, k), scale);
            k += r[i].n;
        }
    }
    const td_param_table *t = grp->t;
    int together = grp->group && grp->group_size > 1;
    size_t total = 0;
    int packed = 1;
    for (int i = 0; i < n_ranges; i++) total += r[i].n, packed &= r[i].g == NULL;
    td_step_result res = {0.0, -1};
    int tp = grp->tp_group && grp->tp > 1, pp = grp->pp_group && grp->pp > 1;
    /* 1/scale: a power of two scales the double sum exactly */
    double unscale = grp->loss_scale > 0.0f ? 1.0 / grp->loss_scale : 1.0;
    int ep = grp->ep_group && grp->ep > 1;
    double sumsq = tp || grp->skip_tied || grp->updates_2d || ep || !packed
                       ? counted_sumsq(t, grads, r, n_ranges, grp->skip_tied, grp->updates_2d, ep ? 0 : -1)
                       : td_sumsq(grads, total);
    if (ep) { /* the other ranks' experts */
        float sq = (float)counted_sumsq(t, grads, r, n_ranges, grp->skip_tied, grp->updates_2d, 1);
        td_allreduce(grp->ep_group, &sq, 1, TD_F32, TD_SUM);
        sumsq += sq;
    }
    /* given updates are not gradients (no norm), but a non-finite one must
     * stop the step like a gradient: it turns this sum into NaN (0 x inf) */
    TD_ASSERT(packed || !grp->updates_2d); /* its modes pack their ranges */
    if (grp->updates_2d) sumsq += 0.0 * td_sumsq(grads, total);
    sumsq *= unscale * unscale;
    if (grp->sharded) {
        float sq = (float)sumsq;
        if (together) td_allreduce(grp->group, &sq, 1, TD_F32, TD_SUM);
        sumsq = sq;
    }
    if (tp) {
        float sq = (float)sumsq;
        td_allreduce(grp->tp_group, &sq, 1, TD_F32, TD_SUM);
        sumsq = sq;
    }
    if (pp) {
        float sq = (float)sumsq;
        td_allreduce(grp->pp_group, &sq, 1, TD_F32, TD_SUM);
        sumsq = sq;
    }
    res.norm = sqrt(sumsq);
    if (!isfinite(res.norm)) { /* no update: every rank scans what it owns */
        int row = t->n_rows;
        size_t k = 0;
        for (int i = 0; i < n_ranges; i++) {
            int ri = td_step_first_nonfinite(t, range_grads(r, i, grads, k), r[i].lo, r[i].n);
            if (ri < row) row = ri;
            k += r[i].n;
        }
        res.bad_row = td_step_agree_row(together ? grp->group : NULL, grp->group_size, row);
        if (tp) res.bad_row = td_step_agree_row(grp->tp_group, grp->tp, res.bad_row);
        if (pp) res.bad_row = td_step_agree_row(grp->pp_group, grp->pp, res.bad_row);
        return res;
    }
    float scale = td_clip_scale(res.norm, grp->optim->clip) * (float)unscale;
    size_t k = 0;
    for (int i = 0; i < n_ranges; i++) {
        (grp->updates_2d ? td_adamw_update_2d_given : td_adamw_update)(
            r[i].p, range_grads(r, i, grads, k), r[i].m, r[i].v, r[i].lo, r[i].lo + r[i].n, t, grp->optim, lr, step + 1,
            scale);
        k += r[i].n;
    }
    return res;
}

/* With --trace the whole of it is one "optimizer" event: the norm's
 * all-reduces inside show as collectives nested in it. */
td_step_result td_step_apply(const td_step_group *grp, const float *grads, const td_step_range *r,
                             int n_ranges, int step, float lr) {
    if (!td_timeline_enabled()) return apply(grp, grads, r, n_ranges, step, lr);
    double t0 = td_timeline_now_us();
    td_step_result res = apply(grp, grads, r, n_ranges, step, lr);
    td_timeline_add("optimizer", "optimizer", t0, td_timeline_now_us(), -1, -1);
    return res;
}
