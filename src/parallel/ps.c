/* Parameter servers. S extra ranks after the grid hold the parameters and
 * AdamW state, each server a 1/S slice of every unit (the table pads units to
 * a multiple of S). Workers push gradients and pull parameters each step.
 *
 * Protocol (all ints travel as exact small floats):
 *   worker -> server  CTRL [kind, step]          kind GRAD: DATA [slice] follows
 *                                                kind PULL: wants params for `step`
 *                                                kind DONE: worker finished
 *                                                kind SAVE: (worker 0) send the state
 *                                                after `step` updates, unit by unit
 *   server -> worker  HDR [version, norm, fail_step, fail_row] then PARAM [slice]
 * A server applies the update of step s once every worker's step-s gradient
 * has arrived, in step order, so the math is that of synchronous training;
 * with staleness K a pull for step s is answered as soon as version >= s - K
 * (stale-synchronous parallel), otherwise it waits for the missing updates.
 * The global gradient norm is summed over the servers' slices (each element
 * once) with an all-reduce among the servers, in the same update order.
 * A non-finite norm is not applied: the servers agree on the first tensor
 * holding a non-finite gradient, stop advancing, and answer every pull at
 * once with fail_step >= 0; each worker then stops and says DONE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_internal.h"
#include "trident/backend.h"

enum { TAG_CTRL = 101, TAG_DATA = 102, TAG_HDR = 103, TAG_PARAM = 104 };
enum { KIND_GRAD = 1, KIND_PULL = 2, KIND_DONE = 3, KIND_SAVE = 4 };

struct td_ps {
    int S, W;                /* servers, workers */
    int K;                   /* staleness bound */
    size_t slice;            /* elements of one server's slice (sum over units) */
    float *sendbuf;          /* worker: [S][slice] packed gradients / received params */
    td_request **reqs;       /* worker: per-server requests */
    float *hdrs;             /* worker: [S][4] */
    int done_sent;           /* worker: DONE went to the servers */
    int pulled_for;          /* worker: step the params are valid for (-1 none) */
    float last_norm;
    int delay_ms;            /* worker: test-only sleep before each push (see test_delay) */
    int max_stale, n_pulls;
    double sum_stale;
    /* server */
    float *p, *m, *v;        /* [slice] */
    float *acc;              /* [(K+1)][slice] gradient sums of pending steps */
    int *acc_count;          /* [(K+1)] workers that pushed for that step */
    float *tmp;              /* [slice] receive buffer */
    td_step_range *ranges;   /* [n_units] this server's slices, for the step */
    int version;             /* updates applied */
    float *norms;            /* [steps] global norm of each update */
    int fail_step, fail_row; /* a non-finite update (-1: none); workers learn it from HDR */
};

static struct td_ps *PS(const td_dp *dp) { return dp->impl; }
static size_t unit_slice(const td_dp *dp, int u, int s, size_t *len) {
    return td_param_unit_slice(dp->t, u, PS(dp)->S, s, len);
}
/* td_param_slices_pack / _unpack's layout, as device copies (the flat
 * buffers and the send buffer are device memory). */
static void pack(const td_dp *dp, int s, const float *flat, float *packed) {
    size_t k = 0, len;
    for (int u = 0; u < dp->t->n_units; u++) {
        size_t off = td_param_unit_slice(dp->t, u, PS(dp)->S, s, &len);
        td_dev_copy(packed + k, flat + off, len * sizeof(float));
        k += len;
    }
}
static void unpack(const td_dp *dp, int s, const float *packed, float *flat) {
    size_t k = 0, len;
    for (int u = 0; u < dp->t->n_units; u++) {
        size_t off = td_param_unit_slice(dp->t, u, PS(dp)->S, s, &len);
        td_dev_copy(flat + off, packed + k, len * sizeof(float));
        k += len;
    }
}

/* TEST ONLY: TRIDENT_TEST_PS_DELAY_MS=RANK:MS makes the worker of world
 * rank RANK sleep MS milliseconds before it pushes each step's gradient, so
 * tests/layouts/test_ps_staleness.c can make a worker slow on purpose and
 * see stale-synchronous pulls happen. Not a user setting; unset, nothing. */
static int test_delay(int world_rank) {
    const char *env = getenv("TRIDENT_TEST_PS_DELAY_MS");
    int r, ms;
    if (!env || sscanf(env, "%d:%d", &r, &ms) != 2 || r != world_rank || ms <= 0) return 0;
    return ms;
}

static void ps_stop(td_dp *dp, int step);
static const float *ps_gather_unit(td_dp *dp, int section, int u, float *scratch);

static int server_world_rank(const td_dp *dp, int s) { return td_grid_workers(dp->g) + s; }

static void ps_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                    td_mem_plan *p) {
    size_t n = t->numel * sizeof(float), slice = n / (size_t)lay->n_servers;
    if (lay->is_server) { /* ps_create's buffers, one each */
        td_plan_dev(p, td_dp_param_cat(cfg), slice);
        td_plan_dev(p, TD_MEM_OPTIM, slice);
        td_plan_dev(p, TD_MEM_OPTIM, slice);
        td_plan_dev(p, TD_MEM_GRADS, (size_t)(cfg->ps_staleness + 1) * slice);
        td_plan_dev(p, TD_MEM_COMM, slice);
    } else {
        td_plan_dev(p, td_dp_param_cat(cfg), n);
        td_plan_dev(p, TD_MEM_GRADS, n);
        td_plan_dev(p, TD_MEM_COMM, n); /* packed slices for all servers */
    }
}

static void ps_create(td_dp *dp) {
    const td_grid *g = dp->g;
    TD_ASSERT(g->axis[TD_TP].size == 1 && g->axis[TD_PP].size == 1); /* td_dp_create refused it (rows ps-tp, ps-pp) */
    struct td_ps *ps = td_alloc(sizeof *ps, TD_MEM_OTHER);
    dp->impl = ps;
    ps->S = g->n_servers;
    ps->W = g->axis[TD_DP].size;
    ps->K = dp->cfg.ps_staleness;
    ps->slice = dp->t->numel / (size_t)ps->S;
    ps->pulled_for = -1;
    ps->fail_step = ps->fail_row = -1;
    TD_ASSERT(dp->t->unit_align % ps->S == 0);
    if (g->is_server) {
        int s = g->server_rank;
        ps->p = td_dev_alloc(ps->slice * sizeof(float), td_dp_param_cat(&dp->cfg), "server parameter slice");
        ps->m = td_dev_alloc(ps->slice * sizeof(float), TD_MEM_OPTIM, "server AdamW m");
        ps->v = td_dev_alloc(ps->slice * sizeof(float), TD_MEM_OPTIM, "server AdamW v");
        ps->acc = td_dev_alloc((size_t)(ps->K + 1) * ps->slice * sizeof(float), TD_MEM_GRADS,
                               "server gradient sums");
        ps->acc_count = td_alloc(sizeof(int) * (size_t)(ps->K + 1), TD_MEM_OTHER);
        ps->tmp = td_dev_alloc(ps->slice * sizeof(float), TD_MEM_COMM, "server gradient receive");
        ps->ranges = td_alloc(sizeof(td_step_range) * (size_t)dp->n_units, TD_MEM_OTHER);
        /* the same counter-based init as every other layout, slice by slice;
         * the slices are also the ranges this server owns in the step */
        size_t k = 0, len;
        for (int u = 0; u < dp->n_units; u++) {
            size_t off = unit_slice(dp, u, s, &len);
            td_param_init_range_dev(dp->t, dp->cfg.seed, off, off + len, ps->p + k);
            ps->ranges[u] = (td_step_range){off, len, ps->p + k, ps->m + k, ps->v + k, NULL};
            k += len;
        }
        return;
    }
    ps->delay_ms = test_delay(g->world_rank);
    size_t n = dp->t->numel;
    dp->params = td_dev_alloc(n * sizeof(float), td_dp_param_cat(&dp->cfg), "parameters");
    dp->grads = td_dev_alloc(n * sizeof(float), TD_MEM_GRADS, "gradients");
    ps->sendbuf = td_dev_alloc(n * sizeof(float), TD_MEM_COMM, "ps send buffer");
    ps->hdrs = td_alloc(sizeof(float) * 4 * (size_t)ps->S, TD_MEM_OTHER);
    ps->reqs = td_alloc(sizeof(td_request *) * 2 * (size_t)ps->S, TD_MEM_OTHER);
    for (int i = 0; i < 2 * ps->S; i++) ps->reqs[i] = td_request_new();
    td_gpt_bind_flat(dp->model, dp->params, dp->grads);
    dp->model->hook = NULL;
}

static void ps_destroy(td_dp *dp) {
    struct td_ps *ps = dp->impl;
    if (ps->reqs)
        for (int i = 0; i < 2 * ps->S; i++) td_request_free(ps->reqs[i]);
    td_free(ps->reqs);
    td_free(ps->hdrs);
    td_dev_free(ps->sendbuf);
    td_dev_free(ps->p);
    td_dev_free(ps->m);
    td_dev_free(ps->v);
    td_dev_free(ps->acc);
    td_free(ps->acc_count);
    td_dev_free(ps->tmp);
    td_free(ps->ranges);
    td_free(ps->norms);
    td_free(ps);
    dp->impl = NULL;
}

static void send_ctrl(td_dp *dp, int s, int kind, int step) {
    float msg[2] = {(float)kind, (float)step};
    td_send(dp->g->world, msg, 2, TD_F32, server_world_rank(dp, s), TAG_CTRL);
}

/* Worker: parameters valid for `step` (version >= step - K). */
static void pull(td_dp *dp, int step, int k_bound) {
    struct td_ps *ps = dp->impl;
    int want = step - k_bound > 0 ? step - k_bound : 0; /* the oldest version acceptable */
    for (int s = 0; s < ps->S; s++) send_ctrl(dp, s, KIND_PULL, want);
    for (int s = 0; s < ps->S; s++) {
        int src = server_world_rank(dp, s);
        td_recv_start(ps->reqs[2 * s], dp->g->world, ps->hdrs + 4 * s, 4, TD_F32, src, TAG_HDR);
        td_recv_start(ps->reqs[2 * s + 1], dp->g->world, ps->sendbuf + (size_t)s * ps->slice, ps->slice,
                      TD_F32, src, TAG_PARAM);
    }
    int version = step;
    for (int s = 0; s < ps->S; s++) {
        td_wait(ps->reqs[2 * s]);
        td_wait(ps->reqs[2 * s + 1]);
        unpack(dp, s, ps->sendbuf + (size_t)s * ps->slice, dp->params);
        if ((int)ps->hdrs[4 * s] < version) version = (int)ps->hdrs[4 * s];
        ps->last_norm = ps->hdrs[4 * s + 1];
        if (ps->hdrs[4 * s + 2] >= 0) ps->fail_step = (int)ps->hdrs[4 * s + 2], ps->fail_row = (int)ps->hdrs[4 * s + 3];
    }
    if (ps->fail_step >= 0) return; /* the servers stopped: no staleness to count */
    int stale = step - version;
    if (stale > ps->max_stale) ps->max_stale = stale;
    ps->sum_stale += stale;
    ps->n_pulls++;
    ps->pulled_for = step;
}

static void ps_begin_step(td_dp *dp, int step) {
    if (PS(dp)->pulled_for != step) pull(dp, step, step == 0 ? 0 : PS(dp)->K);
}

static double ps_finish(td_dp *dp, int step, float lr) {
    struct td_ps *ps = dp->impl;
    if (ps->delay_ms > 0) {
        struct timespec ts = {ps->delay_ms / 1000, (long)(ps->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int s = 0; s < ps->S; s++) pack(dp, s, dp->grads, ps->sendbuf + (size_t)s * ps->slice);
    for (int s = 0; s < ps->S; s++) {
        send_ctrl(dp, s, KIND_GRAD, step);
        td_send_start(ps->reqs[2 * s], dp->g->world, ps->sendbuf + (size_t)s * ps->slice, ps->slice,
                      TD_F32, server_world_rank(dp, s), TAG_DATA);
    }
    for (int s = 0; s < ps->S; s++) td_wait(ps->reqs[2 * s]);
    td_dev_zero(dp->grads, dp->t->numel * sizeof(float));
    int last = step == (dp->cfg.steps > 0 ? dp->cfg.steps : dp->cfg.optim.max_steps) - 1;
    /* the last step waits for every update so eval and checkpoint see them */
    pull(dp, step + 1, last ? 0 : ps->K);
    if (ps->fail_step >= 0) { /* a non-finite update: stop here */
        dp->bad_step = ps->fail_step, dp->bad_row = ps->fail_row;
        ps_stop(dp, step);
        return NAN;
    }
    if (last) ps_stop(dp, step);
    return ps->last_norm; /* norm of the newest update this worker has seen */
}

static void ps_stop(td_dp *dp, int step) {
    struct td_ps *ps = dp->impl;
    if (dp->g->is_server || ps->done_sent) return;
    for (int s = 0; s < ps->S; s++) send_ctrl(dp, s, KIND_DONE, step);
    ps->done_sent = 1;
}

/* ---- server ------------------------------------------------------------ */

static void reply(td_dp *dp, int worker_rank) {
    struct td_ps *ps = dp->impl;
    float hdr[4] = {(float)ps->version, ps->version > 0 ? ps->norms[ps->version - 1] : 0.0f,
                    (float)ps->fail_step, (float)ps->fail_row};
    td_send(dp->g->world, hdr, 4, TD_F32, worker_rank, TAG_HDR);
    td_send(dp->g->world, ps->p, ps->slice, TD_F32, worker_rank, TAG_PARAM);
}

/* Applies every complete pending step in order. */
static void apply_ready(td_dp *dp) {
    struct td_ps *ps = dp->impl;
    while (ps->fail_step < 0) {
        int slot = ps->version % (ps->K + 1);
        if (ps->acc_count[slot] < ps->W) return;
        float *g = ps->acc + (size_t)slot * ps->slice;
        /* the servers' slices partition the model */
        td_step_group grp = {dp->t, &dp->cfg.optim, dp->g->ps_comm, ps->S, 1, NULL, 1, NULL, 1, 0, 1.0f, 0, NULL, 1, NULL};
        /* ps: tp = pp = 1, no loss scaling (refused), no top-k (refused) */
        td_step_result res = td_step_apply(&grp, g, ps->ranges, dp->n_units, ps->version,
                                           td_lr_at(&dp->cfg.optim, ps->version));
        if (res.bad_row >= 0) { /* every server sees it: stop advancing */
            ps->fail_step = ps->version, ps->fail_row = res.bad_row;
            dp->bad_step = ps->fail_step, dp->bad_row = ps->fail_row;
            return;
        }
        ps->norms[ps->version] = (float)res.norm;
        td_dev_zero(g, ps->slice * sizeof(float));
        ps->acc_count[slot] = 0;
        ps->version++;
    }
}

static void ps_serve(td_dp *dp, int steps) {
    struct td_ps *ps = dp->impl;
    ps->norms = td_alloc(sizeof(float) * (size_t)(steps + 1), TD_MEM_OTHER);
    int W = ps->W, done = 0;
    int *waiting = td_alloc(sizeof(int) * (size_t)W, TD_MEM_OTHER); /* pull step per worker, -1 none */
    int save_for = -1; /* a save asked for by worker 0: the updates it must hold */
    for (int w = 0; w < W; w++) waiting[w] = -1;
    while (done < W) {
        float msg[2];
        int src = td_recv(dp->g->world, msg, 2, TD_F32, TD_ANY_SOURCE, TAG_CTRL);
        int kind = (int)msg[0], step = (int)msg[1];
        TD_ASSERT(src >= 0 && src < W);
        if (kind == KIND_GRAD) {
            TD_ASSERT(step >= ps->version && step <= ps->version + ps->K);
            td_recv(dp->g->world, ps->tmp, ps->slice, TD_F32, src, TAG_DATA);
            int slot = step % (ps->K + 1);
            float *acc = ps->acc + (size_t)slot * ps->slice;
            td_ops_for(TD_K_F32)->add(acc, ps->tmp, ps->slice);
            ps->acc_count[slot]++;
            apply_ready(dp);
        } else if (kind == KIND_PULL) {
            waiting[src] = step;
        } else if (kind == KIND_SAVE) {
            TD_ASSERT(src == 0);
            save_for = step;
        } else {
            TD_ASSERT(kind == KIND_DONE);
            done++;
        }
        for (int w = 0; w < W; w++)
            if (waiting[w] >= 0 && (ps->version >= waiting[w] || ps->fail_step >= 0)) {
                reply(dp, w);
                waiting[w] = -1;
            }
        /* worker 0 waits in the save, so no update past save_for can happen */
        if (save_for >= 0 && (ps->version >= save_for || ps->fail_step >= 0)) {
            float hdr[4] = {(float)ps->version, 0.0f, (float)ps->fail_step, (float)ps->fail_row};
            td_send(dp->g->world, hdr, 4, TD_F32, 0, TAG_HDR);
            if (ps->fail_step < 0) {
                TD_ASSERT(ps->version == save_for);
                for (int sec = 0; sec < 3; sec++)
                    for (int u = 0; u < dp->n_units; u++) ps_gather_unit(dp, sec, u, NULL);
            }
            save_for = -1;
        }
    }
    td_free(waiting);
}

/* World rank 0 asks the servers; whether they had stopped on a non-finite
 * update (and where) then reaches every worker in one sum, to which only
 * rank 0 adds (small integers: exact in float). */
static int ps_save_begin(td_dp *dp, int steps_done) {
    struct td_ps *ps = dp->impl;
    float f[3] = {0.0f, 0.0f, 0.0f}; /* failed, step, row */
    if (dp->g->world_rank == 0) {
        for (int s = 0; s < ps->S; s++) send_ctrl(dp, s, KIND_SAVE, steps_done);
        for (int s = 0; s < ps->S; s++) {
            float hdr[4];
            td_recv(dp->g->world, hdr, 4, TD_F32, server_world_rank(dp, s), TAG_HDR);
            if (hdr[2] >= 0) {
                ps->fail_step = dp->bad_step = (int)hdr[2];
                ps->fail_row = dp->bad_row = (int)hdr[3];
                f[0] = 1.0f;
            }
        }
        if (f[0] > 0) f[1] = (float)dp->bad_step, f[2] = (float)dp->bad_row;
    }
    if (dp->g->axis[TD_DP].size > 1) td_allreduce(dp->g->grad_comm, f, 3, TD_F32, TD_SUM);
    if (f[0] > 0) dp->bad_step = (int)f[1], dp->bad_row = (int)f[2];
    return f[0] == 0.0f;
}

/* An evaluation reads the parameters after steps_done updates: pulled
 * as a step's would be. */
static void ps_begin_eval(td_dp *dp, int steps_done) { ps_begin_step(dp, steps_done); }

/* One unit to world rank 0 (worker 0): each server sends its slice of the
 * unit straight into place in rank 0's unit buffer. */
static const float *ps_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    struct td_ps *ps = dp->impl;
    const td_grid *g = dp->g;
    size_t len, off;
    if (g->is_server) {
        size_t k = 0;
        for (int v = 0; v < u; v++) {
            unit_slice(dp, v, g->server_rank, &len);
            k += len;
        }
        unit_slice(dp, u, g->server_rank, &len);
        const float *mine = section == 0 ? ps->p : section == 1 ? ps->m : ps->v;
        td_send(g->world, mine + k, len, TD_F32, 0, TAG_PARAM);
        return NULL;
    }
    if (g->world_rank != 0) return NULL;
    for (int s = 0; s < ps->S; s++) {
        off = unit_slice(dp, u, s, &len);
        td_recv(g->world, scratch + (off - dp->t->unit_offset[u]), len, TD_F32, server_world_rank(dp, s),
                TAG_PARAM);
    }
    return scratch;
}

static void ps_staleness(const td_dp *dp, int *max_seen, double *mean_seen) {
    const struct td_ps *ps = dp->impl;
    float st[2] = {(float)ps->max_stale, ps->n_pulls ? (float)(ps->sum_stale / ps->n_pulls) : 0.0f};
    if (dp->g->axis[TD_DP].size > 1) td_allreduce(dp->g->grad_comm, st, 2, TD_F32, TD_MAX);
    *max_seen = (int)st[0];
    *mean_seen = st[1];
}

/* ps workers hold the full parameters, pulled after the last update */
static int ps_full_params(const td_dp *dp) {
    (void)dp;
    return 1;
}

const td_dp_ops td_dp_ps_ops = {
    .plan = ps_plan,
    .create = ps_create,
    .destroy = ps_destroy,
    .begin_step = ps_begin_step,
    .begin_eval = ps_begin_eval,
    .finish_step = ps_finish,
    .gather_unit = ps_gather_unit,
    .full_params = ps_full_params,
    .serve = ps_serve,
    .save_begin = ps_save_begin,
    .stop = ps_stop,
    .staleness = ps_staleness,
};
