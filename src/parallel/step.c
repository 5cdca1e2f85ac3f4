/* The one optimizer step of every data-parallel strategy (see step.h). */
#include <math.h>

#include "step.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/parallel.h"
#include "trident/timeline.h"

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

/* The scalars the host needs from the device: each piece's sum of squares
 * (or first non-finite index) is written by an op to its own slot of a
 * device buffer, and the slots come down in one named copy
 * (TD_HOST_SCALARS) and are added on the host in the order the pieces were
 * queued: the norm keeps the bits of summing td_sumsq's in that order. */
typedef struct {
    const td_ops *ops;
    double *dev, *host;
    int64_t *dev_i, *host_i;
    int *row_of; /* the table row of each first_nonfinite slot */
    int n, cap;
} scalars;

static void scalars_init(scalars *s, int cap) {
    s->ops = td_ops_for(TD_K_F32);
    s->cap = cap;
    s->n = 0;
    s->dev = td_dev_alloc(sizeof(double) * (size_t)cap, TD_MEM_OTHER, "optimizer scalars");
    s->host = td_alloc(sizeof(double) * (size_t)cap, TD_MEM_OTHER);
    s->dev_i = NULL, s->host_i = NULL, s->row_of = NULL;
}

static void scalars_free(scalars *s) {
    td_dev_free(s->dev);
    td_dev_free(s->dev_i);
    td_free(s->host);
    td_free(s->host_i);
    td_free(s->row_of);
}

static void sum_piece(scalars *s, const float *x, size_t n) {
    TD_ASSERT(s->n < s->cap);
    s->ops->sumsq(s->dev + s->n++, x, n);
}

/* Download the queued sums (one copy) and wait for them. */
static void scalars_fetch(scalars *s) {
    td_dev_download(s->host, s->dev, sizeof(double) * (size_t)s->n, TD_HOST_SCALARS);
    td_dev_sync();
}

/* The host's sum of slots [a, b), in order. */
static double sum_slots(const scalars *s, int a, int b) {
    double sum = 0.0;
    for (int i = a; i < b; i++) sum += s->host[i];
    return sum;
}

static void counted_sumsq(scalars *s, const td_param_table *t, const float *grads,
                          const td_step_range *r, int n_ranges, int skip_tied, int skip_2d,
                          int experts) {
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
            if (a < b) sum_piece(s, range_grads(r, i, grads, k) + (a - r[i].lo), b - a);
        }
        k += r[i].n;
    }
}

/* The smallest table row holding a non-finite gradient in this rank's
 * ranges, or t->n_rows: each row's piece is scanned by an op into its own
 * device slot, and the slots come down together. */
static int first_nonfinite_row(scalars *s, const td_param_table *t, const float *grads,
                               const td_step_range *r, int n_ranges) {
    size_t cap = (size_t)n_ranges * (size_t)(t->n_rows > 0 ? t->n_rows : 1);
    s->dev_i = td_dev_alloc(sizeof(int64_t) * cap, TD_MEM_OTHER, "optimizer non-finite scan");
    s->host_i = td_alloc(sizeof(int64_t) * cap, TD_MEM_OTHER);
    s->row_of = td_alloc(sizeof(int) * cap, TD_MEM_OTHER);
    int q = 0;
    size_t k = 0;
    for (int i = 0; i < n_ranges; i++) {
        const float *x = range_grads(r, i, grads, k);
        for (int j = 0; j < t->n_rows; j++) {
            const td_param *p = &t->rows[j];
            size_t a = td_max_sz(r[i].lo, p->offset), b = td_min_sz(r[i].lo + r[i].n, p->offset + p->numel);
            if (a >= b) continue;
            s->row_of[q] = j;
            s->ops->first_nonfinite(s->dev_i + q++, x + (a - r[i].lo), b - a);
        }
        k += r[i].n;
    }
    td_dev_download(s->host_i, s->dev_i, sizeof(int64_t) * (size_t)q, TD_HOST_SCALARS);
    td_dev_sync();
    int row = t->n_rows;
    for (int i = 0; i < q; i++)
        if (s->host_i[i] >= 0 && s->row_of[i] < row) row = s->row_of[i];
    return row;
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
            const float *g = range_grads(r, i, grads, k);
            float *host = NULL;
            if (td_backend_is_device() && r[i].n) { /* the probe reads host memory: verify's oracle */
                host = td_alloc(r[i].n * sizeof(float), TD_MEM_OTHER);
                td_dev_download(host, g, r[i].n * sizeof(float), TD_HOST_EXPORT);
                td_dev_sync();
                g = host;
            }
            g_probe(g_probe_ctx, grp->t, step, r[i].lo, r[i].n, g, scale);
            td_free(host);
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
    int counted = tp || grp->skip_tied || grp->updates_2d || ep || !packed;
    scalars sc;
    scalars_init(&sc, 2 * n_ranges * (t->n_rows > 0 ? t->n_rows : 1) + 2);
    if (counted)
        counted_sumsq(&sc, t, grads, r, n_ranges, grp->skip_tied, grp->updates_2d, ep ? 0 : -1);
    else
        sum_piece(&sc, grads, total);
    int own_end = sc.n;
    if (ep) counted_sumsq(&sc, t, grads, r, n_ranges, grp->skip_tied, grp->updates_2d, 1);
    int ep_end = sc.n;
    /* given updates are not gradients (no norm), but a non-finite one must
     * stop the step like a gradient: it turns this sum into NaN (0 x inf) */
    TD_ASSERT(packed || !grp->updates_2d); /* its modes pack their ranges */
    if (grp->updates_2d) sum_piece(&sc, grads, total);
    scalars_fetch(&sc);
    double sumsq = sum_slots(&sc, 0, own_end);
    if (ep) { /* the other ranks' experts */
        float sq = (float)sum_slots(&sc, own_end, ep_end);
        td_allreduce(grp->ep_group, &sq, 1, TD_F32, TD_SUM);
        sumsq += sq;
    }
    if (grp->updates_2d) sumsq += 0.0 * sc.host[ep_end];
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
        int row = first_nonfinite_row(&sc, t, grads, r, n_ranges);
        scalars_free(&sc);
        res.bad_row = td_step_agree_row(together ? grp->group : NULL, grp->group_size, row);
        if (tp) res.bad_row = td_step_agree_row(grp->tp_group, grp->tp, res.bad_row);
        if (pp) res.bad_row = td_step_agree_row(grp->pp_group, grp->pp, res.bad_row);
        return res;
    }
    scalars_free(&sc);
    float scale = td_clip_scale(res.norm, grp->optim->clip) * (float)unscale;
    const td_ops *ops = td_ops_for(TD_K_F32);
    size_t k = 0;
    if (grp->optim->optimizer == TD_OPT_MUON && (grp->pieces || tp)) { /* matrices cut over ranks */
        const float **g = td_alloc(sizeof *g * (size_t)(n_ranges > 0 ? n_ranges : 1), TD_MEM_OTHER);
        for (int i = 0; i < n_ranges; i++) g[i] = range_grads(r, i, grads, k), k += r[i].n;
        if (grp->pieces) td_muon_step_pieces( /* with tp too: the chained gather */grp, g, r, n_ranges, lr, step + 1, scale);
        else td_muon_step_tp(grp, g, r, n_ranges, lr, step + 1, scale);
        td_free(g);
        return res;
    }
    for (int i = 0; i < n_ranges; i++) {
        if (grp->optim->optimizer == TD_OPT_MUON) /* whole matrices; the other layouts: compat_recipes.c */
            td_muon_update_on(td_ops_for((td_ktype)grp->optim->muon_ns_k), r[i].p, range_grads(r, i, grads, k),
                              r[i].m, r[i].v, r[i].lo, r[i].lo + r[i].n, t, grp->optim, lr, step + 1, scale, 0);
        else
            td_adamw_update_on(ops, r[i].p, range_grads(r, i, grads, k), r[i].m, r[i].v,
                               r[i].lo, r[i].lo + r[i].n, t, grp->optim, lr, step + 1, scale,
                               grp->updates_2d);
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
