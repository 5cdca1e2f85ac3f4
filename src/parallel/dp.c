/* Data-parallel strategy: the public API, dispatching to the mode's module
 * (allreduce.c, reduce_broadcast.c, zero.c, ps.c) through its td_dp_ops,
 * and what every mode shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"
#include "trident/backend.h"
#include "trident/fault.h"
#include "trident/pipeline.h"

int td_dp_mode_find(const char *s) {
    if (strcmp(s, "allreduce") == 0) return TD_DP_ALLREDUCE;
    if (strcmp(s, "reduce-broadcast") == 0) return TD_DP_REDUCE_BROADCAST;
    if (strcmp(s, "ps") == 0) return TD_DP_PS;
    return -1;
}

td_dp_mode td_dp_mode_parse(const char *s) {
    int m = td_dp_mode_find(s);
    if (m >= 0) return (td_dp_mode)m;
    td_fail("--dp-mode %s is not known; use allreduce, reduce-broadcast or ps", s);
}

int td_grad_dtype_parse(const char *s) {
    if (strcmp(s, "fp32") == 0) return TD_F32;
    if (strcmp(s, "bf16") == 0) return TD_BF16;
    td_fail("--grad-reduce-dtype %s is not known; use fp32 or bf16", s);
}

void td_grad_compress_parse(const char *s, double *ratio, int *no_ef, int *grad_scheme) {
    *ratio = 0.0;
    *no_ef = *grad_scheme = 0;
    if (strcmp(s, "none") == 0) return;
    char *end = NULL;
    double r = strncmp(s, "topk:", 5) == 0 ? strtod(s + 5, &end) : 0.0;
    int ok = end && end != s + 5 && r > 0 && r <= 1;
    if (ok && strncmp(end, ":grad", 5) == 0 && (end[5] == 0 || end[5] == ':')) {
        *grad_scheme = 1;
        end += 5;
    }
    if (ok && strcmp(end, ":noef") == 0)
        *no_ef = 1;
    else if (ok && *end != 0)
        ok = 0;
    TD_CHECK(ok, "--grad-compress %s is not valid; use none or topk:R[:grad][:noef] with 0 < R <= 1 "
                 "(e.g. topk:0.01)", s);
    *ratio = r;
}

/* The rules table's view of a dp config: the mode, ZeRO and the payload,
 * with the sizes of the grid where one exists (else one process). */
static void compat_of(const td_dp_config *cfg, const td_grid *g, td_compat_cfg *c) {
    td_compat_cfg_init(c);
    c->dp_mode = cfg->mode, c->zero = cfg->zero;
    c->grad_bf16 = cfg->grad_dtype == TD_BF16;
    c->topk_ratio = cfg->topk_ratio, c->topk_no_ef = cfg->topk_no_ef;
    if (g) {
        c->dp = g->axis[TD_DP].size, c->tp = g->axis[TD_TP].size, c->pp = g->axis[TD_PP].size;
        c->ps_servers = g->n_servers;
        c->cp = g->axis[TD_CP].size, c->dp_shard = g->dp_shard, c->ep = g->ep;
    }
}

void td_dp_payload_check(const td_dp_config *cfg) {
    td_compat_cfg c;
    compat_of(cfg, NULL, &c);
    td_compat_check(&c, TD_COMPAT_AT_DP_CONFIG);
}

static const td_dp_ops *ops_of(const td_dp_config *cfg) {
    if (cfg->mode == TD_DP_PS) return &td_dp_ps_ops;
    if (cfg->zero > 0) return &td_dp_zero_ops;
    return cfg->mode == TD_DP_REDUCE_BROADCAST ? &td_dp_reduce_broadcast_ops : &td_dp_allreduce_ops;
}

td_layout td_layout_of_grid(const td_grid *g) {
    td_layout l = {.dp = g->axis[TD_DP].size,
                   .tp = g->axis[TD_TP].size,
                   .pp = g->axis[TD_PP].size,
                   .cp = g->axis[TD_CP].size,
                   .n_servers = g->n_servers,
                   .dp_rank = g->is_server ? -1 : td_comm_rank(g->grad_comm),
                   .is_server = g->is_server,
                   .dp_shard = g->replica_comm ? td_comm_size(g->shard_comm) : 0,
                   .ep = g->ep};
    /* ZeRO's collectives run over the shard (grad without hybrid sharding) */
    l.dp_shares_memory =
        td_layout_shard_ranks(&l) > 1 && !g->is_server && td_comm_shares_memory(g->shard_comm);
    return l;
}

int td_dp_unit_align(const td_dp_config *cfg, const td_layout *lay) {
    /* 16 floats keep every unit 64-byte aligned; sharded layouts also need
     * every unit to split into equal slices */
    int shards = cfg->zero > 0 ? td_layout_shard_ranks(lay) : cfg->mode == TD_DP_PS ? lay->n_servers : 1;
    return 16 * (shards > 0 ? shards : 1);
}

/* A forward-only config reduces no gradient, so it has no payload. */
static td_dp_config forward_cfg(const td_dp_config *cfg) {
    td_dp_config c = *cfg;
    if (c.forward_only) c.grad_dtype = TD_F32, c.topk_ratio = 0.0, c.topk_no_ef = c.topk_grad = 0;
    return c;
}

void td_plan_dev(td_mem_plan *p, td_mem_cat cat, size_t bytes) {
    size_t b = td_dev_footprint(bytes);
    p->bytes[cat] += b;
    if (td_backend_is_device()) p->device[cat] += b;
}

td_mem_plan td_dp_memory_plan(const td_dp_config *cfg, const td_layout *lay,
                              const td_param_table *t) {
    td_mem_plan p;
    memset(&p, 0, sizeof p);
    td_dp_config c = forward_cfg(cfg);
    ops_of(&c)->plan(&c, lay, t, &p);
    td_muon_plan(&c, lay, t, &p);
    return p;
}

/* Shared windows only on the cpu device with dp > 1: MPI shared windows are
 * host memory (comm.h), so on any other device these are step tensors in
 * device memory like the rest, and the group's shared window (its ring) is
 * the comm layer's staging pool instead, in pieces (td_comm_staging_plan_bytes). */
static int shared_window(const td_dp *dp) { return dp->D > 1 && !td_backend_is_device(); }

float *td_dp_alloc_shared_at(td_dp *dp, size_t n, td_mem_cat cat, const char *name, const char *site) {
    return shared_window(dp) ? td_comm_alloc_shared(dp->comm, n * sizeof(float), cat)
                             : td_dev_alloc_at(n * sizeof(float), cat, name, site);
}

void td_dp_free_shared(td_dp *dp, float *p, td_mem_cat cat) {
    if (shared_window(dp))
        td_comm_free_shared(dp->comm, p, cat);
    else
        td_dev_free(p);
}

td_dp *td_dp_create(const td_dp_config *cfg, const td_grid *g, const td_param_table *t,
                    td_gpt *model) {
    TD_CHECK(cfg->zero >= 0 && cfg->zero <= 3, "--zero %d is not a ZeRO stage; use 0, 1, 2 or 3",
             cfg->zero);
    /* ps with tp or pp, ZeRO-2/3 with pp, ZeRO outside all-reduce, the payloads */
    td_compat_cfg c;
    compat_of(cfg, g, &c);
    td_compat_check(&c, TD_COMPAT_AT_DP_CREATE);
    td_dp *dp = td_alloc(sizeof(td_dp), TD_MEM_OTHER);
    TD_ASSERT(!cfg->forward_only || cfg->mode != TD_DP_PS);
    dp->cfg = forward_cfg(cfg);
    dp->ops = ops_of(cfg);
    dp->g = g;
    dp->t = t;
    dp->model = model;
    /* gradients sum over dp x cp (cp ranks hold the same parameters); under
     * hybrid sharding the mode's group is a shard of it, the replica group
     * sums the shards */
    dp->comm = g->shard_comm;
    dp->D = g->is_server ? g->axis[TD_DP].size : td_comm_size(g->shard_comm);
    dp->r = g->is_server ? -1 : td_comm_rank(g->shard_comm);
    dp->rep = g->replica_comm;
    dp->R = dp->rep ? td_comm_size(dp->rep) : 1;
    dp->rep_r = dp->rep ? td_comm_rank(dp->rep) : 0;
    /* expert parallelism: the expert rows' gradients sum over edp only */
    dp->ecomm = g->ep_comm ? g->edp_comm : NULL;
    dp->ED = dp->ecomm ? td_comm_size(dp->ecomm) : dp->D;
    dp->er = dp->ecomm ? td_comm_rank(dp->ecomm) : dp->r;
    dp->n_units = t->n_units;
    dp->training = 1;
    dp->bad_row = dp->bad_step = -1;
    dp->loss_scale = 1.0f;
    dp->ops->create(dp);
    return dp;
}

void td_dp_destroy(td_dp *dp) {
    dp->ops->destroy(dp);
    /* the flat buffers, whichever the mode kept */
    if (dp->params_shared)
        td_dp_free_shared(dp, dp->params, td_dp_param_cat(&dp->cfg));
    else
        td_dev_free(dp->params);
    if (dp->grads_shared)
        td_dp_free_shared(dp, dp->grads, TD_MEM_GRADS);
    else
        td_dev_free(dp->grads);
    td_dev_free(dp->m);
    td_dev_free(dp->v);
    td_free(dp);
}

void td_dp_begin_step(td_dp *dp, int step) {
    if (td_fault_at(TD_FAULT_HOST_READ, step, td_log_rank())) {
        /* test-only: a host read of a step tensor (fault.h), killed by the guard */
        const volatile float *p = dp->grads ? dp->grads : dp->params;
        if (p) fprintf(stderr, "trident: fault host-read: read %g from host code\n", (double)p[0]);
    }
    dp->step = step;
    dp->grad_sent = dp->grad_dense = 0;
    if (dp->ops->begin_step) dp->ops->begin_step(dp, step);
}

void td_dp_set_training(td_dp *dp, int training) { dp->training = training; }

void td_dp_begin_eval(td_dp *dp, int steps_done) {
    if (dp->ops->begin_eval) dp->ops->begin_eval(dp, steps_done);
}

int td_dp_agreed_stops(const td_dp *dp) { return dp->ops->serve == NULL; }

void td_dp_begin_micro(td_dp *dp, int micro, int n_micro) {
    /* replicated modes sum micro-batches locally and sync once */
    dp->sync_this_micro = micro == n_micro - 1;
    if (dp->ops->begin_micro) dp->ops->begin_micro(dp);
}

td_step_group td_dp_step_group(const td_dp *dp, td_comm *group, int size, int sharded) {
    const td_grid *g = dp->g;
    /* sharded: the group's ranges hold every expert once (each rank its
     * experts' slices), so the group's sum already covers them; replicated:
     * each rank holds its own experts, summed over ep */
    int ep = sharded ? 1 : g->ep;
    td_step_group s = {dp->t,
                       &dp->cfg.optim,
                       group,
                       size,
                       sharded,
                       g->axis[TD_TP].comm,
                       g->axis[TD_TP].size,
                       g->axis[TD_PP].comm,
                       g->axis[TD_PP].size,
                       g->axis[TD_PP].size > 1 && g->axis[TD_PP].rank == g->axis[TD_PP].size - 1,
                       dp->loss_scale,
                       td_gpay_updates(&dp->cfg, dp->D),
                       ep > 1 ? g->ep_comm : NULL,
                       ep,
                       NULL};
    return s;
}

void td_dp_begin_pipeline(td_dp *dp) {
    dp->sync_this_micro = 0;
    if (dp->ops->begin_micro) dp->ops->begin_micro(dp);
}

void td_dp_set_final_backward(td_dp *dp, int final) { dp->sync_this_micro = final; }

void td_dp_set_loss_scale(td_dp *dp, float scale) { dp->loss_scale = scale; }

void td_dp_record_nonfinite(td_dp *dp, int step, int row) {
    dp->bad_row = row;
    dp->bad_step = step;
}

int td_dp_nonfinite(const td_dp *dp, int *step) {
    if (step) *step = dp->bad_step;
    return dp->bad_row;
}

double td_dp_finish_step(td_dp *dp, int step, float lr) {
    TD_ASSERT(!dp->cfg.forward_only);
    dp->bad_row = dp->bad_step = -1;
    return dp->ops->finish_step(dp, step, lr);
}

void td_dp_serve(td_dp *dp, int steps) {
    TD_ASSERT(dp->ops->serve);
    dp->ops->serve(dp, steps);
}

const float *td_dp_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    TD_ASSERT(section >= 0 && section < 3 && u >= 0 && u < dp->n_units);
    const float *b = dp->ops->gather_unit(dp, section, u, scratch);
    /* a unit still in the strategy's (device) buffers comes down into
     * scratch; a mode that assembled it in scratch downloaded its pieces */
    if (b && b != scratch)
        td_dev_download(scratch, b, td_unit_numel(dp->t, u) * sizeof(float), TD_HOST_CKPT);
    td_dev_sync();
    return b ? scratch : NULL;
}

int td_dp_full_params(td_dp *dp, const float **params) {
    *params = dp->params;
    return dp->ops->full_params(dp);
}

int td_dp_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx) {
    TD_ASSERT(section >= 0 && section < 3);
    if (!dp->ops->ranges) return 0;
    if (section > 0 && dp->cfg.forward_only) return 1; /* no moments */
    dp->ops->ranges(dp, section, owner_only, cb, ctx);
    return 1;
}

float *td_dp_rank_state(td_dp *dp, int k) {
    TD_ASSERT(k >= 0 && k < TD_DP_RANK_STATES);
    return dp->ops->rank_state ? dp->ops->rank_state(dp, k) : NULL;
}

int td_dp_save_begin(td_dp *dp, int steps_done) {
    return dp->ops->save_begin ? dp->ops->save_begin(dp, steps_done) : 1;
}

void td_dp_stop(td_dp *dp, int step) {
    if (dp->ops->stop) dp->ops->stop(dp, step);
}

void td_dp_gather_state(td_dp *dp, const td_param_table *canon, float *params, float *m,
                        float *v) {
    const td_param_table *t = dp->t;
    float *scratch = td_alloc(td_pp_gather_scratch_floats(t, canon) * sizeof(float), TD_MEM_OTHER);
    float *dst[3] = {params, m, v};
    /* all three always travel (only the root knows what is wanted), but a
     * forward-only strategy has no moments */
    for (int s = 0; s < (dp->cfg.forward_only ? 1 : 3); s++)
        for (int u = 0; u < t->n_units; u++) {
            const td_param_table *in;
            const float *b = td_pp_gather_unit(dp, dp->g, t, canon, s, u, scratch, &in);
            if (!b || !dst[s]) continue;
            for (int i = 0; i < in->n_rows; i++)
                if (in->rows[i].unit == u)
                    memcpy(dst[s] + canon->rows[i].offset, b + (in->rows[i].offset - in->unit_offset[u]),
                           in->rows[i].numel * sizeof(float));
        }
    td_free(scratch);
}

void td_dp_staleness(const td_dp *dp, int *max_seen, double *mean_seen) {
    if (dp->ops->staleness) {
        dp->ops->staleness(dp, max_seen, mean_seen);
    } else {
        *max_seen = 0;
        *mean_seen = 0.0;
    }
}

void td_dp_overlap_stats(const td_dp *dp, double *exposed_ms, double *comm_ms) {
    *exposed_ms = dp->exposed_ms;
    *comm_ms = dp->comm_ms;
}

void td_dp_grad_traffic(const td_dp *dp, uint64_t *sent, uint64_t *dense) {
    *sent = dp->grad_sent;
    *dense = dp->grad_dense;
}
