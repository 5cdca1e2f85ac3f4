/* ZeRO stages 1-3 over the dp group.
 *
 * Every unit u of the (padded) flat layout is split into D equal slices;
 * dp rank r owns slice r of every unit. Its shard buffers (AdamW m and v,
 * the gradient shard, and at stage 3 the parameters) are those slices packed
 * unit after unit: shard_off[u] = sum of the slice sizes before u.
 *
 *   stage 1: full params and grads; on the last micro-batch each unit's
 *            gradient is reduce-scattered as soon as its backward ends; each
 *            rank updates its slices; the parameters are all-gathered.
 *   stage 2: full params; gradients live in a small pool of unit buffers,
 *            reduce-scattered after each unit's backward (every micro-batch)
 *            and added into the gradient shard.
 *   stage 3: + parameters sharded: each unit is all-gathered before its
 *            forward and again before its backward, released after use, the
 *            next unit's gather started early (prefetch). The embeddings
 *            (used at both ends) and the tiny final norm stay gathered from
 *            forward to backward when training.
 * The order of gathers and reduce-scatters is the unit order of forward and
 * backward: static and identical on every rank. */
#include <string.h>

#include "dp_internal.h"
#include "trident/state_plan.h"

#define POOL 2 /* block buffers in flight: the one in use + one prefetched/draining */

typedef struct {
    float *full;       /* [max block numel] gradient of one unit (stages 2, 3); the
                        * reduce-scatter runs in place: slice r receives the sum */
    td_request *req;
    int unit;          /* -1 free */
    int scattering;    /* its reduce-scatter has started */
} grad_slot;

typedef struct {
    float *buf;        /* gathered parameters of one unit */
    td_request *req;
    int unit;          /* -1 free */
} gather_slot;

struct td_zero {
    int stage, L;
    size_t *shard_off; /* [n_units + 1] */
    size_t shard_n;    /* packed shard elements */
    size_t max_block;
    float *gshard;     /* [shard_n] gradient shard (sum over micro-batches) */
    float *pshard;     /* [shard_n] stage 3 parameters */
    /* stage 1: per-unit reduce-scatter of the full gradient buffer */
    td_request **unit_req;
    float *rs_out;     /* [shard_n] stage-1 reduce-scatter output */
    td_gpay *pay;      /* stage 1 with top-k: each unit's pairs all-gathered instead */
    /* stages 2, 3: gradient buffers; index POOL is unit 0's own */
    grad_slot gslots[POOL + 1];
    /* stage 3: gathered parameters; POOL = unit 0, POOL + 1 = final norm */
    gather_slot pslots[POOL + 2];
    int *gather_of;    /* [n_units] pslot holding the unit, -1 none */
    td_step_range *ranges; /* [n_units] the owned slices, for the step */
};

static size_t slice_len(const td_dp *dp, int u) {
    size_t len;
    td_param_unit_slice(dp->t, u, dp->D, 0, &len);
    return len;
}
static size_t my_slice_off(const td_dp *dp, int u) {
    size_t len;
    return td_param_unit_slice(dp->t, u, dp->D, dp->r, &len);
}

static void zero_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                      td_mem_plan *p) {
    int D = td_layout_shard_ranks(lay), shared = D > 1 && lay->dp_shares_memory;
    size_t n = t->numel * sizeof(float), sh = n / (size_t)D;
    size_t max_block = 0;
    int L = t->cfg.L;
    for (int u = 1; u <= L + 1; u++) max_block = td_max_sz(max_block, td_unit_numel(t, u));
    size_t u0 = td_unit_numel(t, 0) * sizeof(float), uf = td_unit_numel(t, L + 1) * sizeof(float);
    max_block *= sizeof(float);
    /* what each stage shards: the one function the planner calls too */
    td_state_bytes st = td_state_plan((double)t->numel, D, cfg->zero, td_state_elem_engine(cfg->master));
    p->bytes[TD_MEM_OPTIM] = (size_t)st.optim;
    p->bytes[TD_MEM_GRADS] = (size_t)st.grads;
    p->bytes[td_dp_param_cat(cfg)] = (size_t)(st.params + st.master);
    if (cfg->zero == 1) p->bytes[TD_MEM_COMM] = sh; /* reduce-scatter output */
    else p->bytes[TD_MEM_COMM] = POOL * max_block + u0;
    /* Through MPI the comm layer packs a reduce-scatter piece per in-flight
     * slot unless a unit fits one piece and does not scatter in place (stage
     * 1); one reduce-scatter is in flight at a time. Between shared buffers
     * (one node) it needs nothing. */
    size_t unit_bytes = td_max_sz(max_block, u0), piece = td_comm_piece_bytes();
    int gpay = cfg->zero == 1 && td_gpay_on(cfg, D);
    if (!shared && !gpay && (cfg->zero != 1 || unit_bytes > piece))
        p->bytes[TD_MEM_COMM] += (size_t)td_comm_inflight() * td_min_sz(piece, unit_bytes);
    if (gpay) { /* top-k: the units are the buckets */
        size_t *lo = td_alloc(sizeof(size_t) * 2 * (size_t)t->n_units, TD_MEM_OTHER);
        for (int u = 0; u < t->n_units; u++) lo[u] = t->unit_offset[u], lo[t->n_units + u] = td_unit_numel(t, u);
        td_gpay_plan(cfg, D, t, t->n_units, lo, lo + t->n_units, p);
        td_free(lo);
    }
    if (cfg->zero == 3) p->bytes[TD_MEM_GATHER] = POOL * max_block + u0 + uf;
}

static void zero_hook(void *ctx, td_unit_event ev, int unit);

static void zero_create(td_dp *dp) {
    struct td_zero *z = td_alloc(sizeof *z, TD_MEM_OTHER);
    dp->impl = z;
    const td_param_table *t = dp->t;
    int U = t->n_units;
    z->stage = dp->cfg.zero;
    z->L = t->cfg.L;
    TD_ASSERT(t->unit_align % dp->D == 0);
    z->shard_off = td_alloc(sizeof(size_t) * (size_t)(U + 1), TD_MEM_OTHER);
    for (int u = 0; u < U; u++) {
        z->shard_off[u + 1] = z->shard_off[u] + slice_len(dp, u);
        if (u >= 1) z->max_block = td_max_sz(z->max_block, td_unit_numel(t, u));
    }
    z->shard_n = z->shard_off[U];
    z->ranges = td_alloc(sizeof(td_step_range) * (size_t)U, TD_MEM_OTHER);
    dp->m = td_alloc(z->shard_n * sizeof(float), TD_MEM_OPTIM);
    dp->v = td_alloc(z->shard_n * sizeof(float), TD_MEM_OPTIM);

    if (z->stage == 3) {
        z->pshard = td_dp_alloc_shared(dp, z->shard_n, td_dp_param_cat(&dp->cfg));
        /* counter-based init: the slices equal those of a full init */
        for (int u = 0; u < U; u++) {
            size_t lo = my_slice_off(dp, u);
            td_param_init_range(t, dp->cfg.seed, lo, lo + slice_len(dp, u), z->pshard + z->shard_off[u]);
        }
        for (int i = 0; i < POOL + 2; i++) {
            size_t n = i < POOL ? z->max_block : td_unit_numel(t, i == POOL ? 0 : z->L + 1);
            z->pslots[i].buf = td_alloc(n * sizeof(float), TD_MEM_GATHER);
            z->pslots[i].req = td_request_new();
            z->pslots[i].unit = -1;
        }
        z->gather_of = td_alloc(sizeof(int) * (size_t)U, TD_MEM_OTHER);
        for (int u = 0; u < U; u++) z->gather_of[u] = -1;
    } else {
        dp->params = td_dp_alloc_shared(dp, t->numel, td_dp_param_cat(&dp->cfg)); /* all-gathered in place */
        dp->params_shared = dp->D > 1;
        td_param_init_range(t, dp->cfg.seed, 0, t->numel, dp->params);
        if (dp->D > 1) td_broadcast(dp->comm, dp->params, t->numel, TD_F32, 0);
    }
    if (z->stage == 1) {
        dp->grads = td_dp_alloc_shared(dp, t->numel, TD_MEM_GRADS); /* reduce-scattered */
        dp->grads_shared = dp->D > 1;
        z->gshard = NULL;
        z->rs_out = td_alloc(z->shard_n * sizeof(float), TD_MEM_COMM);
        z->unit_req = td_alloc(sizeof(td_request *) * (size_t)U, TD_MEM_OTHER);
        for (int u = 0; u < U; u++) z->unit_req[u] = td_request_new();
        size_t *lo = td_alloc(sizeof(size_t) * 2 * (size_t)U, TD_MEM_OTHER);
        for (int u = 0; u < U; u++) lo[u] = t->unit_offset[u], lo[U + u] = td_unit_numel(t, u);
        z->pay = td_gpay_create(dp, U, lo, lo + U);
        td_free(lo);
    } else {
        z->gshard = td_alloc(z->shard_n * sizeof(float), TD_MEM_GRADS);
        for (int i = 0; i < POOL + 1; i++) {
            z->gslots[i].full =
                td_dp_alloc_shared(dp, i < POOL ? z->max_block : td_unit_numel(t, 0), TD_MEM_COMM);
            z->gslots[i].req = td_request_new();
            z->gslots[i].unit = -1;
        }
    }
    /* the step's ranges: slice r of every unit */
    for (int u = 0; u < U; u++) {
        size_t lo = my_slice_off(dp, u), k = z->shard_off[u];
        float *p = z->stage == 3 ? z->pshard + k : dp->params + lo;
        z->ranges[u] = (td_step_range){lo, slice_len(dp, u), p, dp->m + k, dp->v + k};
    }
    td_gpt_bind_flat(dp->model, dp->params, dp->grads);
    dp->model->hook = zero_hook;
    dp->model->hook_ctx = dp;
}

static void zero_destroy(td_dp *dp) {
    struct td_zero *z = dp->impl;
    if (z->unit_req)
        for (int u = 0; u < dp->n_units; u++) td_request_free(z->unit_req[u]);
    for (int i = 0; i < POOL + 1; i++) {
        if (z->gslots[i].full) td_dp_free_shared(dp, z->gslots[i].full, TD_MEM_COMM);
        if (z->gslots[i].req) td_request_free(z->gslots[i].req);
    }
    for (int i = 0; i < POOL + 2; i++) {
        td_free(z->pslots[i].buf);
        if (z->pslots[i].req) td_request_free(z->pslots[i].req);
    }
    td_free(z->unit_req);
    td_gpay_free(dp, z->pay);
    td_free(z->rs_out);
    td_free(z->gshard);
    if (z->pshard) td_dp_free_shared(dp, z->pshard, td_dp_param_cat(&dp->cfg));
    td_free(z->gather_of);
    td_free(z->shard_off);
    td_free(z->ranges);
    td_free(z);
    dp->impl = NULL;
}

/* ---- stage 3 parameter gathers ---------------------------------------- */

static int pslot_for(struct td_zero *z, int unit) {
    if (unit == 0) return POOL;
    if (unit == z->L + 1) return POOL + 1;
    for (int i = 0; i < POOL; i++)
        if (z->pslots[i].unit < 0) return i;
    return -1;
}

/* Starts gathering `unit` if it is not gathered or in flight and a buffer is free. */
static void gather_start(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    if (unit < 0 || unit >= dp->n_units || z->gather_of[unit] >= 0) return;
    int s = pslot_for(z, unit);
    if (s < 0 || z->pslots[s].unit >= 0) return;
    gather_slot *g = &z->pslots[s];
    g->unit = unit;
    z->gather_of[unit] = s;
    size_t n = slice_len(dp, unit);
    if (dp->D == 1) {
        memcpy(g->buf, z->pshard + z->shard_off[unit], n * sizeof(float));
        return;
    }
    td_all_gather_start(g->req, dp->comm, z->pshard + z->shard_off[unit], g->buf, n, TD_F32);
}

static void gather_wait(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    gather_start(dp, unit);
    int s = z->gather_of[unit];
    TD_ASSERT(s >= 0); /* a buffer must be free: the order of events guarantees it */
    td_wait(z->pslots[s].req);
    dp->model->unit_params[unit] = z->pslots[s].buf;
}

static void gather_release(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    int s = z->gather_of[unit];
    if (s < 0) return;
    td_wait(z->pslots[s].req);
    z->pslots[s].unit = -1;
    z->gather_of[unit] = -1;
    dp->model->unit_params[unit] = NULL;
}

/* ---- stage 2/3 gradient buffers ---------------------------------------- */

static void gslot_drain(td_dp *dp, grad_slot *s) {
    struct td_zero *z = dp->impl;
    if (s->unit < 0) return;
    td_wait(s->req);
    size_t n = slice_len(dp, s->unit);
    float *dst = z->gshard + z->shard_off[s->unit];
    const float *src = s->full + (size_t)dp->r * n;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
    s->unit = -1;
    s->scattering = 0;
}

static void grads_begin(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    grad_slot *s = NULL;
    if (unit == 0) {
        s = &z->gslots[POOL];
        gslot_drain(dp, s);
    } else {
        for (int i = 0; i < POOL && !s; i++)
            if (z->gslots[i].unit < 0) s = &z->gslots[i];
        if (!s) { /* drain the older in-flight reduce-scatter */
            s = &z->gslots[0];
            gslot_drain(dp, s);
            grad_slot tmp = z->gslots[0];
            z->gslots[0] = z->gslots[1]; /* keep slot 0 the oldest */
            z->gslots[1] = tmp;
            s = &z->gslots[1];
        }
    }
    memset(s->full, 0, td_unit_numel(dp->t, unit) * sizeof(float));
    s->unit = unit;
    s->req = s->req;
    dp->model->unit_grads[unit] = s->full;
}

static grad_slot *gslot_of(struct td_zero *z, int unit) {
    for (int i = 0; i < POOL + 1; i++)
        if (z->gslots[i].unit == unit) return &z->gslots[i];
    return NULL;
}

/* One reduce-scatter in flight at a time: MPI progresses only inside our
 * calls, so a second one would not finish sooner, while each in-flight one
 * holds the comm layer's piece scratch. The previous unit's reduce-scatter
 * has had a whole block's backward to complete. */
static void grads_end(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    grad_slot *s = gslot_of(z, unit);
    TD_ASSERT(s);
    for (int i = 0; i < POOL + 1; i++)
        if (&z->gslots[i] != s && z->gslots[i].scattering) gslot_drain(dp, &z->gslots[i]);
    s->scattering = 1;
    if (dp->D > 1) {
        uint64_t sent0 = td_comm_sent_bytes();
        td_reduce_scatter_start(s->req, dp->comm, s->full, s->full + (size_t)dp->r * slice_len(dp, unit),
                                slice_len(dp, unit), TD_F32);
        td_dp_count_grad(dp, sent0, td_unit_numel(dp->t, unit));
    }
    dp->model->unit_grads[unit] = NULL;
}

/* Stage 1: unit u's gradient reduction, fp32 reduce-scatter into rs_out or
 * top-k pairs all-gathered (finished in unit_reduce_finish). */
static void unit_reduce_start(td_dp *dp, int u) {
    struct td_zero *z = dp->impl;
    if (z->pay) {
        td_gpay_start(dp, z->pay, u, z->unit_req[u]);
        return;
    }
    uint64_t sent0 = td_comm_sent_bytes();
    td_reduce_scatter_start(z->unit_req[u], dp->comm, dp->grads + dp->t->unit_offset[u],
                            z->rs_out + z->shard_off[u], slice_len(dp, u), TD_F32);
    td_dp_count_grad(dp, sent0, td_unit_numel(dp->t, u));
}

/* After unit u's request completed: with top-k every rank holds the dense
 * sum of the unit, of which its slice is its shard. */
static void unit_reduce_finish(td_dp *dp, int u) {
    struct td_zero *z = dp->impl;
    if (!z->pay) return;
    td_gpay_finish(dp, z->pay, u);
    memcpy(z->rs_out + z->shard_off[u], dp->grads + my_slice_off(dp, u), slice_len(dp, u) * sizeof(float));
}

/* ---- the hook ----------------------------------------------------------- */

static void zero_hook(void *ctx, td_unit_event ev, int unit) {
    td_dp *dp = ctx;
    struct td_zero *z = dp->impl;
    int L = z->L;
    if (z->stage == 3) {
        if (ev == TD_FWD_BEGIN) {
            gather_wait(dp, unit);
            gather_start(dp, unit == L + 1 ? -1 : unit + 1); /* prefetch */
        } else if (ev == TD_FWD_END) {
            int keep = dp->training && (unit == 0 || unit == L + 1);
            if (!keep) gather_release(dp, unit);
        } else if (ev == TD_BWD_BEGIN) {
            gather_wait(dp, unit);
            if (unit == L + 1) gather_start(dp, L);
            else if (unit >= 2) gather_start(dp, unit - 1);
            grads_begin(dp, unit);
        } else {
            grads_end(dp, unit);
            gather_release(dp, unit);
        }
        return;
    }
    if (z->stage == 2) {
        if (ev == TD_BWD_BEGIN) grads_begin(dp, unit);
        else if (ev == TD_BWD_END) grads_end(dp, unit);
        return;
    }
    /* stage 1: full gradients; reduce-scatter each unit on the last micro-batch */
    if (ev == TD_BWD_END && dp->sync_this_micro && dp->D > 1 && !dp->cfg.no_overlap) {
        if (unit + 1 < dp->n_units) td_wait(z->unit_req[unit + 1]); /* one in flight, as above */
        unit_reduce_start(dp, unit);
    }
    for (int u = 0; u < dp->n_units && z->unit_req; u++)
        if (td_request_active(z->unit_req[u])) td_test(z->unit_req[u]);
}

/* ---- the step ----------------------------------------------------------- */

static double zero_finish(td_dp *dp, int step, float lr) {
    struct td_zero *z = dp->impl;
    double t0 = td_now_ms();
    float *g = z->gshard;
    if (z->stage == 1) {
        for (int u = 0; u < dp->n_units; u++) {
            size_t off = dp->t->unit_offset[u];
            if (dp->D == 1) {
                memcpy(z->rs_out + z->shard_off[u], dp->grads + off, slice_len(dp, u) * sizeof(float));
            } else {
                if (!td_request_active(z->unit_req[u]) && dp->cfg.no_overlap) unit_reduce_start(dp, u);
                td_wait(z->unit_req[u]);
                unit_reduce_finish(dp, u);
            }
        }
        g = z->rs_out;
        memset(dp->grads, 0, dp->t->numel * sizeof(float));
    } else {
        for (int i = 0; i < POOL + 1; i++) gslot_drain(dp, &z->gslots[i]);
    }
    if (dp->R > 1) { /* hybrid sharding: the shards' sums, summed over the replicas */
        uint64_t sent0 = td_comm_sent_bytes();
        td_allreduce(dp->rep, g, z->shard_n, TD_F32, TD_SUM);
        td_dp_count_grad(dp, sent0, z->shard_n);
    }
    dp->exposed_ms = td_now_ms() - t0;
    /* every element lives in exactly one rank's shard of a replica: the
     * shard's ranges partition the model (and the norm sums over the shard) */
    td_step_group grp = td_dp_step_group(dp, dp->comm, dp->D, 1);
    td_step_result res = td_step_apply(&grp, g, z->ranges, dp->n_units, step, lr);
    if (z->stage != 1) memset(z->gshard, 0, z->shard_n * sizeof(float));
    if (res.bad_row >= 0) { /* no update */
        td_dp_record_nonfinite(dp, step, res.bad_row);
        return res.norm;
    }
    if (z->stage != 3 && dp->D > 1) /* everyone needs the updated weights */
        for (int u = 0; u < dp->n_units; u++) {
            size_t off = dp->t->unit_offset[u], n = slice_len(dp, u);
            td_all_gather(dp->comm, dp->params + off + (size_t)dp->r * n, dp->params + off, n, TD_F32);
        }
    return res.norm;
}

/* One unit to dp rank 0: the owners' slices
 * are all-gathered into one unit-sized buffer, so no rank ever holds more
 * than its shards plus one unit. */
static const float *zero_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    struct td_zero *z = dp->impl;
    if (section == 0 && z->stage < 3) /* every rank holds the full parameters */
        return dp->r == 0 && dp->rep_r == 0 ? dp->params + dp->t->unit_offset[u] : NULL;
    const float *mine = (section == 0 ? z->pshard : section == 1 ? dp->m : dp->v) + z->shard_off[u];
    size_t n = slice_len(dp, u);
    if (dp->D > 1)
        td_all_gather(dp->comm, mine, scratch, n, TD_F32);
    else
        memcpy(scratch, mine, n * sizeof(float));
    return dp->r == 0 && dp->rep_r == 0 ? scratch : NULL; /* one replica's copy */
}

static int zero_full_params(const td_dp *dp) { return dp->cfg.zero < 3; }

/* Each rank owns slice r of every unit of every section; below stage 3 it
 * also holds (and on load fills) the whole parameter buffer. Under hybrid
 * sharding the first replica owns (saves) them; every replica loads. */
static void zero_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx) {
    struct td_zero *z = dp->impl;
    if (owner_only && dp->rep_r > 0) return;
    if (section == 0 && z->stage < 3 && !owner_only) {
        cb(ctx, 0, dp->t->numel, dp->params);
        return;
    }
    float *base = section == 0 ? (z->stage < 3 ? NULL : z->pshard) : section == 1 ? dp->m : dp->v;
    for (int u = 0; u < dp->n_units; u++) {
        size_t n = slice_len(dp, u), lo = my_slice_off(dp, u);
        if (n == 0) continue;
        cb(ctx, lo, n, base ? base + z->shard_off[u] : dp->params + lo);
    }
}

static float *zero_rank_state(td_dp *dp, int k) {
    struct td_zero *z = dp->impl;
    return z->pay ? td_gpay_rank_state(z->pay, k) : NULL;
}

const td_dp_ops td_dp_zero_ops = {
    .plan = zero_plan,
    .create = zero_create,
    .destroy = zero_destroy,
    .finish_step = zero_finish,
    .gather_unit = zero_gather_unit,
    .full_params = zero_full_params,
    .ranges = zero_ranges,
    .rank_state = zero_rank_state,
};
