/* Data-parallel strategy: creation, the replicated modes (all-reduce and
 * reduce-broadcast) and dispatch to ZeRO (zero.c) and parameter servers
 * (ps.c). */
#include <math.h>
#include <string.h>

#include "dp_internal.h"

td_dp_mode td_dp_mode_parse(const char *s) {
    if (strcmp(s, "allreduce") == 0) return TD_DP_ALLREDUCE;
    if (strcmp(s, "reduce-broadcast") == 0) return TD_DP_REDUCE_BROADCAST;
    if (strcmp(s, "ps") == 0) return TD_DP_PS;
    td_fail("--dp-mode %s is not known; use allreduce, reduce-broadcast or ps", s);
}

const char *td_dp_mode_name(td_dp_mode m) {
    return m == TD_DP_ALLREDUCE ? "allreduce" : m == TD_DP_REDUCE_BROADCAST ? "reduce-broadcast" : "ps";
}

int td_dp_unit_align(const td_dp_config *cfg, const td_grid *g) {
    /* 16 floats keep every unit 64-byte aligned; sharded layouts also need
     * every unit to split into equal slices */
    int shards = cfg->zero > 0 ? g->dp : cfg->mode == TD_DP_PS ? g->n_servers : 1;
    return 16 * (shards > 0 ? shards : 1);
}

/* Replicated modes: bucket bookkeeping on each unit event. */
static void replicated_hook(void *ctx, td_unit_event ev, int unit) {
    td_dp *dp = ctx;
    if (ev == TD_BWD_END) td_buckets_on_unit_done(dp, unit);
    else if (dp->next_bucket > 0) td_buckets_progress(dp);
}

td_mem_plan td_dp_memory_plan(const td_dp_config *cfg, const td_grid *g, const td_param_table *t) {
    td_mem_plan p;
    memset(&p, 0, sizeof p);
    size_t n = t->numel * sizeof(float);
    if (cfg->mode == TD_DP_PS) {
        td_ps_plan(cfg, g, t, &p);
    } else if (cfg->zero > 0) {
        td_zero_plan(cfg, t, g->dp, g->dp > 1 && td_comm_shares_memory(g->dp_comm), &p);
    } else {
        p.bytes[TD_MEM_PARAMS] = n;
        p.bytes[TD_MEM_GRADS] = n;
        /* reduce-broadcast: only the root updates, so only it holds moments */
        int holds_optim = cfg->mode == TD_DP_ALLREDUCE || g->dp_rank == 0;
        p.bytes[TD_MEM_OPTIM] = holds_optim ? 2 * n : 0;
    }
    return p;
}

td_dp *td_dp_create(const td_dp_config *cfg, const td_grid *g, const td_param_table *t,
                    td_gpt *model) {
    td_dp *dp = td_alloc(sizeof(td_dp), TD_MEM_OTHER);
    dp->cfg = *cfg;
    dp->g = g;
    dp->t = t;
    dp->model = model;
    dp->comm = g->dp_comm;
    dp->D = g->dp;
    dp->r = g->is_server ? -1 : g->dp_rank;
    dp->n_units = t->n_units;
    dp->training = 1;
    dp->bad_row = dp->bad_step = -1;
    TD_CHECK(cfg->zero >= 0 && cfg->zero <= 3, "--zero %d is not a ZeRO stage; use 0, 1, 2 or 3",
             cfg->zero);
    TD_CHECK(cfg->zero == 0 || cfg->mode == TD_DP_ALLREDUCE,
             "--zero %d needs --dp-mode allreduce (ZeRO shards over the all-reduce group; %s has "
             "its own placement)", cfg->zero, td_dp_mode_name(cfg->mode));
    if (cfg->mode == TD_DP_PS) {
        td_ps_create(dp);
        return dp;
    }
    if (cfg->zero > 0) {
        td_zero_create(dp);
        return dp;
    }
    size_t n = t->numel;
    dp->params = td_alloc(n * sizeof(float), TD_MEM_PARAMS);
    /* All-reduced gradients live where the group's ranks can reach each
     * other's: on one node the buckets are then summed straight between the
     * replicas' buffers, with no staging (comm.h, td_comm_alloc_shared). */
    dp->grads_shared = cfg->mode == TD_DP_ALLREDUCE && dp->D > 1;
    dp->grads = dp->grads_shared ? td_comm_alloc_shared(dp->comm, n * sizeof(float), TD_MEM_GRADS)
                                 : td_alloc(n * sizeof(float), TD_MEM_GRADS);
    if (cfg->mode == TD_DP_ALLREDUCE || dp->r == 0) {
        dp->m = td_alloc(n * sizeof(float), TD_MEM_OPTIM);
        dp->v = td_alloc(n * sizeof(float), TD_MEM_OPTIM);
    }
    td_param_init_range(t, cfg->seed, 0, n, dp->params);
    /* replicas start identical whatever their seeds */
    if (dp->D > 1) td_broadcast(dp->comm, dp->params, n, TD_F32, 0);
    td_buckets_build(dp);
    td_gpt_bind_flat(model, dp->params, dp->grads);
    model->hook = replicated_hook;
    model->hook_ctx = dp;
    return dp;
}

void td_dp_destroy(td_dp *dp) {
    if (dp->ps) td_ps_destroy(dp);
    if (dp->zero) td_zero_destroy(dp);
    td_buckets_free(dp);
    if (dp->params_shared)
        td_comm_free_shared(dp->comm, dp->params, TD_MEM_PARAMS);
    else
        td_free(dp->params);
    if (dp->grads_shared)
        td_comm_free_shared(dp->comm, dp->grads, TD_MEM_GRADS);
    else
        td_free(dp->grads);
    td_free(dp->m);
    td_free(dp->v);
    td_free(dp);
}

void td_dp_begin_step(td_dp *dp, int step) {
    if (dp->ps) td_ps_begin_step(dp, step);
}

void td_dp_set_training(td_dp *dp, int training) { dp->training = training; }

void td_dp_begin_micro(td_dp *dp, int micro, int n_micro) {
    /* replicated modes sum micro-batches locally and sync once */
    dp->sync_this_micro = micro == n_micro - 1;
    dp->next_bucket = 0;
}

size_t td_unit_slice(const td_param_table *t, int u, int parts, int s, size_t *len) {
    size_t n = td_unit_numel(t, u);
    TD_ASSERT(n % (size_t)parts == 0); /* the table pads units for this */
    *len = n / (size_t)parts;
    return t->unit_offset[u] + (size_t)s * *len;
}

void td_slices_pack(const td_param_table *t, int parts, int s, const float *flat, float *packed) {
    size_t k = 0, len;
    for (int u = 0; u < t->n_units; u++) {
        size_t off = td_unit_slice(t, u, parts, s, &len);
        memcpy(packed + k, flat + off, len * sizeof(float));
        k += len;
    }
}

void td_slices_unpack(const td_param_table *t, int parts, int s, const float *packed, float *flat) {
    size_t k = 0, len;
    for (int u = 0; u < t->n_units; u++) {
        size_t off = td_unit_slice(t, u, parts, s, &len);
        memcpy(flat + off, packed + k, len * sizeof(float));
        k += len;
    }
}

void td_dp_adamw_range(td_dp *dp, float *p, const float *g, float *m, float *v, size_t lo,
                       size_t hi, int step, float lr, float scale) {
    td_adamw_update(p, g, m, v, lo, hi, dp->t, &dp->cfg.optim, lr, step + 1, scale);
}

int td_dp_first_nonfinite(const td_param_table *t, const float *x, size_t lo, size_t n) {
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        size_t a = td_max_sz(lo, r->offset), b = td_min_sz(lo + n, r->offset + r->numel);
        for (size_t k = a; k < b; k++)
            if (!isfinite(x[k - lo])) return i;
    }
    return t->n_rows;
}

void td_dp_record_nonfinite(td_dp *dp, int step, int row) {
    float neg = -(float)row; /* rows are small integers, exact in float; MAX of -row = MIN */
    if (dp->D > 1) td_allreduce(dp->comm, &neg, 1, TD_F32, TD_MAX);
    dp->bad_row = (int)-neg;
    dp->bad_step = step;
}

int td_dp_nonfinite(const td_dp *dp, int *step) {
    if (step) *step = dp->bad_step;
    return dp->bad_row;
}

double td_dp_finish_step(td_dp *dp, int step, float lr) {
    dp->bad_row = dp->bad_step = -1;
    if (dp->ps) return td_ps_finish_step(dp, step, lr);
    if (dp->zero) return td_zero_finish_step(dp, step, lr);
    size_t n = dp->t->numel;
    td_buckets_wait_all(dp);
    double norm = 0.0;
    /* a non-finite norm: no update; the step's first bad tensor is found
     * from the reduced gradient (the root's, under reduce-broadcast) */
    if (dp->cfg.mode == TD_DP_ALLREDUCE) {
        norm = sqrt(td_sumsq(dp->grads, n));
        if (isfinite(norm)) {
            float scale = td_clip_scale(norm, dp->cfg.optim.clip);
            td_dp_adamw_range(dp, dp->params, dp->grads, dp->m, dp->v, 0, n, step, lr, scale);
        } else {
            td_dp_record_nonfinite(dp, step, td_dp_first_nonfinite(dp->t, dp->grads, 0, n));
        }
    } else { /* reduce-broadcast: the root updates, then everyone receives */
        float norm_f = 0.0f;
        int row = dp->t->n_rows;
        if (dp->r == 0) {
            norm = sqrt(td_sumsq(dp->grads, n));
            if (isfinite(norm)) {
                float scale = td_clip_scale(norm, dp->cfg.optim.clip);
                td_dp_adamw_range(dp, dp->params, dp->grads, dp->m, dp->v, 0, n, step, lr, scale);
            } else {
                row = td_dp_first_nonfinite(dp->t, dp->grads, 0, n);
            }
            norm_f = (float)norm;
        }
        if (dp->D > 1) {
            td_broadcast(dp->comm, dp->params, n, TD_F32, 0);
            td_broadcast(dp->comm, &norm_f, 1, TD_F32, 0);
        }
        norm = norm_f;
        if (!isfinite(norm)) td_dp_record_nonfinite(dp, step, row);
    }
    memset(dp->grads, 0, n * sizeof(float));
    return norm;
}

void td_dp_serve(td_dp *dp, int steps) {
    TD_ASSERT(dp->ps);
    td_ps_serve(dp, steps);
}

const float *td_dp_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    TD_ASSERT(section >= 0 && section < 3 && u >= 0 && u < dp->n_units);
    if (dp->ps) return td_ps_gather_unit(dp, section, u, scratch);
    if (dp->zero) return td_zero_gather_unit(dp, section, u, scratch);
    /* replicated: dp rank 0 of the first grid row is world rank 0, and holds
     * the moments under reduce-broadcast too */
    if (dp->g->world_rank != 0) return NULL;
    const float *b = section == 0 ? dp->params : section == 1 ? dp->m : dp->v;
    return b + dp->t->unit_offset[u];
}

int td_dp_full_params(td_dp *dp, const float **params) {
    *params = dp->params;
    if (dp->zero) return dp->cfg.zero < 3;
    return 1; /* replicated, and ps workers (pulled after the last update) */
}

int td_dp_save_begin(td_dp *dp, int steps_done) {
    return dp->ps ? td_ps_save_begin(dp, steps_done) : 1;
}

void td_dp_stop(td_dp *dp, int step) {
    if (dp->ps) td_ps_stop(dp, step);
}

void td_dp_gather_state(td_dp *dp, const td_param_table *canon, float *params, float *m,
                        float *v) {
    const td_param_table *t = dp->t;
    size_t max_unit = 0;
    for (int u = 0; u < t->n_units; u++) max_unit = td_max_sz(max_unit, td_unit_numel(t, u));
    float *scratch = td_alloc(max_unit * sizeof(float), TD_MEM_OTHER);
    float *dst[3] = {params, m, v};
    for (int s = 0; s < 3; s++) /* all three always travel: only the root knows what is wanted */
        for (int u = 0; u < t->n_units; u++) {
            const float *b = td_dp_gather_unit(dp, s, u, scratch);
            if (!b || !dst[s]) continue;
            for (int i = 0; i < t->n_rows; i++)
                if (t->rows[i].unit == u)
                    memcpy(dst[s] + canon->rows[i].offset, b + (t->rows[i].offset - t->unit_offset[u]),
                           t->rows[i].numel * sizeof(float));
        }
    td_free(scratch);
}

void td_dp_staleness(const td_dp *dp, int *max_seen, double *mean_seen) {
    if (dp->ps) {
        td_ps_staleness(dp, max_seen, mean_seen);
    } else {
        *max_seen = 0;
        *mean_seen = 0.0;
    }
}

void td_dp_overlap_stats(const td_dp *dp, double *exposed_ms, double *comm_ms) {
    *exposed_ms = dp->exposed_ms;
    *comm_ms = dp->comm_ms;
}
