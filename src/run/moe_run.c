/* A mixture of experts in the run (moe_run.h): the step's loss share, its
 * figures for the log, and auxiliary-loss-free balancing's bias update. */
#include "moe_run.h"

#include <math.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/moe.h"

void td_run_moe_begin(td_run *r) {
    if (r->cfg.moe.E == 0 || r->g.is_server) return;
    td_gpt_moe_stats_reset(&r->model);
    td_ep_reset_stats(&r->ep);
}

typedef struct {
    const td_param_table *t;
    const float *load; /* [L, E] the step's */
    float rate;
} bias_ctx;

/* DeepSeek-V3's update: b_i += rate sign(mean load - load_i), layer by
 * layer, on every copy or shard of the bias rows this rank keeps. The
 * decision is the host's (the loads are); data is device memory, so each
 * row's slice comes down, is stepped here and goes back up (TD_HOST_MOE). */
static void bias_update(void *ctx, size_t lo, size_t n, float *data) {
    const bias_ctx *b = ctx;
    const td_param_table *t = b->t;
    int E = t->cfg.moe.E;
    float *h = td_alloc(sizeof(float) * (size_t)E, TD_MEM_OTHER);
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->kind != TD_T_ROUTERB || p->numel == 0) continue;
        size_t a0 = p->offset > lo ? p->offset : lo, a1 = p->offset + p->numel < lo + n ? p->offset + p->numel : lo + n;
        if (a0 >= a1) continue;
        TD_ASSERT(a1 - a0 <= (size_t)E);
        const float *ld = b->load + (size_t)p->layer * E;
        double mean = 0.0;
        for (int e = 0; e < E; e++) mean += ld[e] / E;
        td_dev_download(h, data + (a0 - lo), sizeof(float) * (a1 - a0), TD_HOST_MOE);
        td_dev_sync();
        for (size_t at = a0; at < a1; at++) {
            double err = mean - ld[at - p->offset];
            h[at - a0] += err > 0 ? b->rate : err < 0 ? -b->rate : 0.0f;
        }
        td_dev_upload(data + (a0 - lo), h, sizeof(float) * (a1 - a0), TD_HOST_MOE);
    }
    td_free(h);
}

/* The step's figures, the same on every rank: loads and losses summed over
 * the pipeline's stages (each holds its own layers), dropped assignments
 * over the ranks of the micro-batch as well. */
double td_run_moe_end(td_run *r, int step) {
    const td_moe_config *e = &r->cfg.moe;
    td_run_result *res = r->res;
    if (e->E == 0 || r->g.is_server) return 0.0;
    const td_grid *g = &r->g;
    td_moe_stats *st = td_gpt_moe_stats(&r->model);
    int L = r->cfg.L, E = e->E;
    size_t n = (size_t)L * E + 4;
    float *f = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
    for (size_t i = 0; i < (size_t)L * E; i++) f[i] = (float)st->load[i];
    float *x = f + (size_t)L * E;
    x[0] = (float)st->aux, x[1] = (float)st->z, x[2] = (float)st->dropped, x[3] = (float)st->assigned;
    int micro = r->ec.K; /* the step's micro-batches: fewer than the run's on a --batch-rampup step */
    if (td_grid_grad_ranks(g) > 1) { /* only dropped is this rank's own: the rest are global already */
        float d = x[2];
        td_allreduce(g->grad_comm, &d, 1, TD_F32, TD_SUM);
        x[2] = d;
    }
    if (g->axis[TD_PP].size > 1) td_allreduce(g->axis[TD_PP].comm, f, n, TD_F32, TD_SUM);
    res->moe_aux = x[0] / micro, res->moe_z = x[1] / micro;
    res->moe_dropped = x[3] > 0 ? x[2] / x[3] : 0.0;
    res->moe_load_min = INFINITY, res->moe_load_max = 0.0;
    if (!res->moe_load) res->moe_load = td_alloc(sizeof(double) * (size_t)L * E, TD_MEM_OTHER);
    for (int l = 0; l < L; l++) {
        if (!td_gpt_moe_layer(&r->cfg, l)) continue;
        double sum = 0.0; /* the assignments of the layer's step: tokens x K x micro-batches */
        for (int i = 0; i < E; i++) sum += f[(size_t)l * E + i];
        for (int i = 0; i < E && sum > 0; i++) {
            double rel = f[(size_t)l * E + i] / (sum / E);
            res->moe_load_min = fmin(res->moe_load_min, rel), res->moe_load_max = fmax(res->moe_load_max, rel);
            res->moe_load[(size_t)l * E + i] += f[(size_t)l * E + i];
        }
    }
    res->ep_sent_bytes = (double)r->ep.bytes_off_rank;
    /* the formula, from the routing: the forward's rows sent off the rank
     * (its assignments of other ranks' experts, the other ranks' rows it
     * returns) sent again by the backward and by a recomputed forward, C
     * elements each; and what a uniform router would send: 4 tokens x K x
     * (ep - 1) / ep rows per layer and micro-batch */
    int ep = g->ep, layers = 0, passes = 2 + (r->spec->precision.recompute == TD_RECOMPUTE_BLOCK);
    for (int l = 0; l < L; l++) layers += td_gpt_moe_layer(&r->cfg, l) && r->table.held[l + 1];
    double N = (double)r->ec.Bm * r->cfg.T / g->axis[TD_CP].size,
           es = r->spec->precision.precision == TD_PREC_FP32 ? 4 : 2;
    res->ep_formula_bytes = ep > 1 ? passes * st->off_rank_rows * r->cfg.C * es : 0.0;
    res->ep_uniform_bytes = ep > 1 ? 4.0 * layers * micro * N * e->K * (ep - 1.0) / ep * r->cfg.C * es : 0.0;
    int bad_step;
    if (e->bias_rate > 0.0f && td_dp_nonfinite(r->dp, &bad_step) < 0) { /* not on a step that was not taken */
        bias_ctx b = {&r->table, f, e->bias_rate};
        td_dp_ranges(r->dp, 0, 0, bias_update, &b);
    }
    (void)step;
    double loss = st->loss_sum;
    td_free(f);
    return loss;
}
