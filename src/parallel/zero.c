/* ZeRO stages 1-3 over the dp group.
 *
 * Every unit u of the (padded) flat layout is split into D equal slices;
 * dp rank r owns slice r of every unit. Its shard buffers (AdamW m and v,
 * the gradient shard, and at stage 3 the parameters) are those slices packed
 * unit after unit: shard_off[u] = sum of the slice sizes before u.
 *
 * Under expert parallelism the ranks of the dp group hold different experts
 * at the same offsets, so a unit is up to three pieces (td_param_unit_pieces:
 * dense rows, expert stack, dense rows): the dense pieces are split over the
 * D ranks of the dp group as above, the expert stack over the ED ranks of
 * edp that hold the same experts, each piece's collectives over its own
 * group; the shard buffers pack the owned slices piece after piece. Without
 * ep every unit is one piece, over dp.
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
 * backward: static and identical on every rank. One unit's reduce-scatters
 * are in flight at a time, and of them one piece at a time (the chain): each
 * holds the comm layer's staging while in flight, and one at a time keeps
 * the peak that the memory plan states. */
#include <string.h>

#include "dp_internal.h"
#include "trident/backend.h"
#include "trident/state_plan.h"

#define POOL 2 /* block buffers in flight: the one in use + one prefetched/draining */

typedef struct {
    size_t lo, n;    /* the piece's flat range (of unit `unit`) */
    size_t slice;    /* n / parts: each rank's share */
    size_t mine;     /* flat offset of this rank's slice */
    size_t off;      /* the slice's place in the shard buffers */
    td_comm *comm;   /* its group: dp, or edp for an expert stack */
    int parts, rank; /* the group's size and this rank's place */
    int unit;
} zpiece;

typedef struct {
    float *full;       /* [max block numel] gradient of one unit (stages 2, 3); the
                        * reduce-scatter runs in place: slice r receives the sum */
    int unit;          /* -1 free */
    int scattering;    /* its reduce-scatter has started */
} grad_slot;

typedef struct {
    float *buf;        /* gathered parameters of one unit */
    td_request *req[TD_UNIT_PIECES];
    int unit;          /* -1 free */
} gather_slot;

struct td_zero {
    int stage, L;
    zpiece *pc;        /* [n_pc] every unit's pieces in flat order */
    int n_pc;
    int *first;        /* [n_units + 1] unit u's pieces are [first[u], first[u + 1]) */
    size_t shard_n;    /* packed shard elements */
    size_t max_block;
    float *gshard;     /* [shard_n] gradient shard (sum over micro-batches) */
    float *pshard;     /* [shard_n] stage 3 parameters */
    td_request **req;  /* [n_pc] each piece's gradient reduction */
    /* the chain: the reduce-scatters of one unit's pieces [chain, chain_end)
     * not started yet, of its gradient chain_grad (unit-shaped) */
    int chain, chain_end;
    float *chain_grad;
    float *rs_out;     /* [shard_n] stage-1 reduce-scatter output */
    td_gpay *pay;      /* stage 1 with top-k: each unit's pairs all-gathered instead */
    /* stages 2, 3: gradient buffers; index POOL is unit 0's own */
    grad_slot gslots[POOL + 1];
    /* stage 3: gathered parameters; POOL = unit 0, POOL + 1 = final norm */
    gather_slot pslots[POOL + 2];
    int *gather_of;    /* [n_units] pslot holding the unit, -1 none */
    td_step_range *ranges; /* [n_pc] the owned slices, for the step */
    td_step_piece *spieces; /* [n_pc] the pieces as the step sees them (Muon's owners) */
};

/* ---- the pieces and the plan ------------------------------------------- */

/* Ranks over which the expert stacks are sharded: edp (dp x cp / ep). */
static int expert_ranks(const td_layout *lay, int D) {
    return lay->ep > 1 ? td_layout_grad_ranks(lay) / lay->ep : D;
}

static void zero_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t,
                      td_mem_plan *p) {
    int D = td_layout_shard_ranks(lay), ED = expert_ranks(lay, D), shared = D > 1 && lay->dp_shares_memory;
    size_t max_block = 0;
    int L = t->cfg.L;
    for (int u = 1; u <= L + 1; u++) max_block = td_max_sz(max_block, td_unit_numel(t, u));
    size_t u0 = td_unit_numel(t, 0) * sizeof(float), uf = td_unit_numel(t, L + 1) * sizeof(float);
    max_block *= sizeof(float);
    int gpay = cfg->zero == 1 && td_gpay_on(cfg, D);
    /* the pieces: dense rows over dp, expert stacks over edp. Through MPI
     * the comm layer stages each reduce-scatter piece while it is in
     * flight (one at a time) unless its group shares the buffer (the dp
     * group on one node; never edp, whose ranks' buffers are dp's) */
    double dense = 0, experts = 0;
    size_t sh = 0, staging = 0, lo[TD_UNIT_PIECES], len[TD_UNIT_PIECES];
    int ex[TD_UNIT_PIECES];
    for (int u = 0; u < t->n_units; u++)
        for (int k = 0, n = td_param_unit_pieces(t, u, lo, len, ex); k < n; k++) {
            int parts = ex[k] ? ED : D;
            *(ex[k] ? &experts : &dense) += (double)len[k];
            sh += len[k] / (size_t)parts * sizeof(float);
            if (parts > 1 && !gpay && (ex[k] || !shared))
                staging = td_max_sz(staging, td_comm_reduce_scatter_staging(len[k] / (size_t)parts, parts,
                                                                            cfg->zero != 1));
        }
    /* what each stage shards: the one function the planner calls too; the
     * buffers as zero_create makes them, td_dp_alloc_shared's (a shared
     * window, host memory, when D > 1 on the cpu device; device memory on
     * any other) apart from the device's */
    td_state_elem e = td_state_elem_engine(cfg->master);
    td_state_bytes a = td_state_plan(dense, D, cfg->zero, e), b = td_state_plan(experts, ED, cfg->zero, e);
    int fwd = cfg->forward_only;
    void (*shared_buf)(td_mem_plan *, td_mem_cat, size_t) = D > 1 && !td_backend_is_device() ? td_plan_host : td_plan_dev;
    if (!fwd) { /* the moments m and v, one shard each */
        size_t optim = (size_t)a.optim + (size_t)b.optim;
        td_plan_dev(p, TD_MEM_OPTIM, optim / 2);
        td_plan_dev(p, TD_MEM_OPTIM, optim / 2);
    }
    shared_buf(p, td_dp_param_cat(cfg), (size_t)(a.params + a.master) + (size_t)(b.params + b.master));
    if (fwd) {
    } else if (cfg->zero == 1) {
        shared_buf(p, TD_MEM_GRADS, (size_t)a.grads + (size_t)b.grads);
        td_plan_dev(p, TD_MEM_COMM, sh); /* reduce-scatter output */
    } else {
        td_plan_dev(p, TD_MEM_GRADS, (size_t)a.grads + (size_t)b.grads);
        for (int i = 0; i < POOL; i++) shared_buf(p, TD_MEM_COMM, max_block);
        shared_buf(p, TD_MEM_COMM, u0);
    }
    if (!fwd) td_plan_host(p, TD_MEM_COMM, (size_t)td_comm_inflight() * staging);
    if (gpay && !fwd) { /* top-k: the units are the buckets */
        size_t *r = td_alloc(sizeof(size_t) * 2 * (size_t)t->n_units, TD_MEM_OTHER);
        for (int u = 0; u < t->n_units; u++) r[u] = t->unit_offset[u], r[t->n_units + u] = td_unit_numel(t, u);
        td_gpay_plan(cfg, D, t, t->n_units, r, r + t->n_units, p);
        td_free(r);
    }
    if (cfg->zero == 3) { /* the gathered units: POOL blocks, the first and the last */
        for (int i = 0; i < POOL; i++) td_plan_dev(p, TD_MEM_GATHER, max_block);
        td_plan_dev(p, TD_MEM_GATHER, u0);
        td_plan_dev(p, TD_MEM_GATHER, uf);
    }
}

/* Every unit's pieces with their groups, shard offsets and step ranges. */
static void pieces_build(td_dp *dp, struct td_zero *z) {
    const td_param_table *t = dp->t;
    int U = t->n_units, ex[TD_UNIT_PIECES];
    size_t lo[TD_UNIT_PIECES], len[TD_UNIT_PIECES];
    z->pc = td_alloc(sizeof(zpiece) * TD_UNIT_PIECES * (size_t)U, TD_MEM_OTHER);
    z->first = td_alloc(sizeof(int) * (size_t)(U + 1), TD_MEM_OTHER);
    for (int u = 0; u < U; u++) {
        z->first[u] = z->n_pc;
        for (int k = 0, n = td_param_unit_pieces(t, u, lo, len, ex); k < n; k++) {
            zpiece *q = &z->pc[z->n_pc++];
            q->unit = u, q->lo = lo[k], q->n = len[k];
            q->comm = ex[k] ? dp->ecomm : dp->comm;
            q->parts = ex[k] ? dp->ED : dp->D;
            q->rank = ex[k] ? dp->er : dp->r;
            TD_ASSERT(q->n % (size_t)q->parts == 0); /* the table pads units and expert stacks */
            q->slice = q->n / (size_t)q->parts;
            q->mine = q->lo + (size_t)q->rank * q->slice;
            q->off = z->shard_n;
            z->shard_n += q->slice;
        }
        if (u >= 1) z->max_block = td_max_sz(z->max_block, td_unit_numel(t, u));
    }
    z->first[U] = z->n_pc;
    z->ranges = td_alloc(sizeof(td_step_range) * (size_t)z->n_pc, TD_MEM_OTHER);
    z->spieces = td_alloc(sizeof(td_step_piece) * (size_t)z->n_pc, TD_MEM_OTHER);
    for (int i = 0; i < z->n_pc; i++) {
        const zpiece *q = &z->pc[i];
        z->spieces[i] = (td_step_piece){q->lo, q->n, q->comm, q->parts, q->rank};
    }
}

/* The parameters from rank 0 of each piece's group: replicas start
 * identical whatever their seeds (expert stacks: those of the ranks holding
 * the same experts). */
static void params_broadcast(td_dp *dp, struct td_zero *z) {
    if (!dp->ecomm) {
        if (dp->D > 1) td_broadcast(dp->comm, dp->params, dp->t->numel, TD_F32, 0);
        return;
    }
    for (int i = 0; i < z->n_pc; i++)
        if (z->pc[i].parts > 1) td_broadcast(z->pc[i].comm, dp->params + z->pc[i].lo, z->pc[i].n, TD_F32, 0);
}

static void zero_hook(void *ctx, td_unit_event ev, int unit);

static void zero_create(td_dp *dp) {
    struct td_zero *z = td_alloc(sizeof *z, TD_MEM_OTHER);
    dp->impl = z;
    const td_param_table *t = dp->t;
    int U = t->n_units;
    z->stage = dp->cfg.zero;
    z->L = t->cfg.L;
    TD_ASSERT(t->unit_align % dp->D == 0 && (dp->R == 1 || !dp->ecomm)); /* rules table: ep-dp-shard */
    pieces_build(dp, z);
    int fwd = dp->cfg.forward_only; /* no gradient, no moment */
    if (!fwd) {
        dp->m = td_dev_alloc(z->shard_n * sizeof(float), TD_MEM_OPTIM, "AdamW m shard");
        dp->v = td_dev_alloc(z->shard_n * sizeof(float), TD_MEM_OPTIM, "AdamW v shard");
    }

    if (z->stage == 3) {
        z->pshard = td_dp_alloc_shared(dp, z->shard_n, td_dp_param_cat(&dp->cfg), "ZeRO-3 parameter shard");
        /* counter-based init: the slices equal those of a full init */
        for (int i = 0; i < z->n_pc; i++) {
            const zpiece *q = &z->pc[i];
            td_param_init_range_dev(t, dp->cfg.seed, q->mine, q->mine + q->slice, z->pshard + q->off);
        }
        for (int i = 0; i < POOL + 2; i++) {
            size_t n = i < POOL ? z->max_block : td_unit_numel(t, i == POOL ? 0 : z->L + 1);
            z->pslots[i].buf = td_dev_alloc(n * sizeof(float), TD_MEM_GATHER, "ZeRO-3 gathered unit");
            for (int k = 0; k < TD_UNIT_PIECES; k++) z->pslots[i].req[k] = td_request_new();
            z->pslots[i].unit = -1;
        }
        z->gather_of = td_alloc(sizeof(int) * (size_t)U, TD_MEM_OTHER);
        for (int u = 0; u < U; u++) z->gather_of[u] = -1;
    } else {
        dp->params = td_dp_alloc_shared(dp, t->numel, td_dp_param_cat(&dp->cfg), "parameters"); /* all-gathered in place */
        dp->params_shared = dp->D > 1;
        td_param_init_range_dev(t, dp->cfg.seed, 0, t->numel, dp->params);
        params_broadcast(dp, z);
    }
    z->req = td_alloc(sizeof(td_request *) * (size_t)z->n_pc, TD_MEM_OTHER);
    for (int i = 0; i < z->n_pc; i++) z->req[i] = td_request_new();
    if (fwd) {
        z->gshard = NULL;
    } else if (z->stage == 1) {
        dp->grads = td_dp_alloc_shared(dp, t->numel, TD_MEM_GRADS, "gradients"); /* reduce-scattered */
        dp->grads_shared = dp->D > 1;
        z->gshard = NULL;
        z->rs_out = td_dev_alloc(z->shard_n * sizeof(float), TD_MEM_COMM, "ZeRO-1 gradient shard");
        size_t *lo = td_alloc(sizeof(size_t) * 2 * (size_t)U, TD_MEM_OTHER);
        for (int u = 0; u < U; u++) lo[u] = t->unit_offset[u], lo[U + u] = td_unit_numel(t, u);
        z->pay = td_gpay_create(dp, U, lo, lo + U);
        TD_ASSERT(!z->pay || z->n_pc == U); /* rules table: ep-payload */
        td_free(lo);
    } else {
        z->gshard = td_dev_alloc(z->shard_n * sizeof(float), TD_MEM_GRADS, "ZeRO gradient shard");
        for (int i = 0; i < POOL + 1; i++) {
            z->gslots[i].full =
                td_dp_alloc_shared(dp, i < POOL ? z->max_block : td_unit_numel(t, 0), TD_MEM_COMM,
                                   "ZeRO gradient unit");
            z->gslots[i].unit = -1;
        }
    }
    /* the step's ranges: this rank's slice of every piece */
    for (int i = 0; i < z->n_pc; i++) {
        const zpiece *q = &z->pc[i];
        float *p = z->stage == 3 ? z->pshard + q->off : dp->params + q->mine;
        z->ranges[i] = (td_step_range){q->mine, q->slice, p, fwd ? NULL : dp->m + q->off, fwd ? NULL : dp->v + q->off,
                                       NULL};
    }
    td_gpt_bind_flat(dp->model, dp->params, dp->grads);
    dp->model->hook = zero_hook;
    dp->model->hook_ctx = dp;
}

static void zero_destroy(td_dp *dp) {
    struct td_zero *z = dp->impl;
    for (int i = 0; i < z->n_pc; i++) td_request_free(z->req[i]);
    for (int i = 0; i < POOL + 1; i++)
        if (z->gslots[i].full) td_dp_free_shared(dp, z->gslots[i].full, TD_MEM_COMM);
    for (int i = 0; i < POOL + 2; i++) {
        td_dev_free(z->pslots[i].buf);
        for (int k = 0; k < TD_UNIT_PIECES; k++)
            if (z->pslots[i].req[k]) td_request_free(z->pslots[i].req[k]);
    }
    td_free(z->req);
    td_gpay_free(dp, z->pay);
    td_dev_free(z->rs_out);
    td_dev_free(z->gshard);
    if (z->pshard) td_dp_free_shared(dp, z->pshard, td_dp_param_cat(&dp->cfg));
    td_free(z->gather_of);
    td_free(z->pc);
    td_free(z->first);
    td_free(z->ranges);
    td_free(z->spieces);
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
    for (int i = z->first[unit]; i < z->first[unit + 1]; i++) {
        const zpiece *q = &z->pc[i];
        float *dst = g->buf + (q->lo - dp->t->unit_offset[unit]);
        if (q->parts == 1)
            td_dev_copy(dst, z->pshard + q->off, q->slice * sizeof(float));
        else
            td_all_gather_start(g->req[i - z->first[unit]], q->comm, z->pshard + q->off, dst, q->slice, TD_F32);
    }
}

static void gather_done(gather_slot *g) {
    for (int k = 0; k < TD_UNIT_PIECES; k++) td_wait(g->req[k]);
}

static void gather_wait(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    gather_start(dp, unit);
    int s = z->gather_of[unit];
    TD_ASSERT(s >= 0); /* a buffer must be free: the order of events guarantees it */
    gather_done(&z->pslots[s]);
    dp->model->unit_params[unit] = z->pslots[s].buf;
}

static void gather_release(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    int s = z->gather_of[unit];
    if (s < 0) return;
    gather_done(&z->pslots[s]);
    z->pslots[s].unit = -1;
    z->gather_of[unit] = -1;
    dp->model->unit_params[unit] = NULL;
}

/* ---- gradient reduction: the chain ------------------------------------ */

/* Piece i's gradient reduction from its unit's gradient `ug`: fp32
 * reduce-scatter into rs_out (stage 1) or in place (stages 2, 3), or top-k
 * pairs all-gathered (finished in zero_finish). */
static void reduce_start(td_dp *dp, int i, float *ug) {
    struct td_zero *z = dp->impl;
    const zpiece *q = &z->pc[i];
    float *in = ug + (q->lo - dp->t->unit_offset[q->unit]);
    float *out = z->stage == 1 ? z->rs_out + q->off : in + (size_t)q->rank * q->slice;
    if (q->parts == 1) { /* the whole piece is this rank's */
        if (z->stage == 1) td_dev_copy(out, in, q->slice * sizeof(float));
        return;
    }
    if (z->pay) {
        td_gpay_start(dp, z->pay, q->unit, z->req[i]);
        return;
    }
    uint64_t sent0 = td_comm_sent_bytes();
    td_reduce_scatter_start(z->req[i], q->comm, in, out, q->slice, TD_F32);
    td_dp_count_grad(dp, sent0, q->n);
}

/* Starts the chain's next piece, once the one before it is done. Called at
 * every hook event: the same points on every rank, so every group sees its
 * collectives in one order. */
static void chain_step(td_dp *dp) {
    struct td_zero *z = dp->impl;
    if (z->chain >= z->chain_end) return;
    if (z->chain > 0) td_wait(z->req[z->chain - 1]);
    reduce_start(dp, z->chain, z->chain_grad);
    z->chain++;
}

static void chain_finish(td_dp *dp) {
    struct td_zero *z = dp->impl;
    while (z->chain < z->chain_end) chain_step(dp);
    if (z->chain > 0) td_wait(z->req[z->chain - 1]);
}

/* One unit's reduction in flight at a time: MPI progresses only inside our
 * calls, so a second one would not finish sooner, while each in-flight one
 * holds the comm layer's piece scratch. */
static void chain_begin(td_dp *dp, int unit, float *ug) {
    struct td_zero *z = dp->impl;
    chain_finish(dp);
    z->chain = z->first[unit], z->chain_end = z->first[unit + 1], z->chain_grad = ug;
    chain_step(dp);
}

/* ---- stage 2/3 gradient buffers ---------------------------------------- */

static void add(float *dst, const float *src, size_t n) { td_ops_for(TD_K_F32)->add(dst, src, n); }

static void gslot_drain(td_dp *dp, grad_slot *s) {
    struct td_zero *z = dp->impl;
    if (s->unit < 0) return;
    if (s->scattering) chain_finish(dp); /* the chain is its unit's */
    for (int i = z->first[s->unit]; i < z->first[s->unit + 1]; i++) {
        const zpiece *q = &z->pc[i];
        float *dst = z->gshard + q->off;
        const float *src = s->full + (q->mine - dp->t->unit_offset[s->unit]);
        add(dst, src, q->slice);
    }
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
    td_dev_zero(s->full, td_unit_numel(dp->t, unit) * sizeof(float));
    s->unit = unit;
    dp->model->unit_grads[unit] = s->full;
}

static grad_slot *gslot_of(struct td_zero *z, int unit) {
    for (int i = 0; i < POOL + 1; i++)
        if (z->gslots[i].unit == unit) return &z->gslots[i];
    return NULL;
}

/* The previous unit's reduce-scatter has had a whole block's backward to
 * complete. */
static void grads_end(td_dp *dp, int unit) {
    struct td_zero *z = dp->impl;
    grad_slot *s = gslot_of(z, unit);
    TD_ASSERT(s);
    for (int i = 0; i < POOL + 1; i++)
        if (&z->gslots[i] != s && z->gslots[i].scattering) gslot_drain(dp, &z->gslots[i]);
    s->scattering = 1;
    if (dp->D > 1) chain_begin(dp, unit, s->full);
    dp->model->unit_grads[unit] = NULL;
}

/* ---- the hook ----------------------------------------------------------- */

static void zero_hook(void *ctx, td_unit_event ev, int unit) {
    td_dp *dp = ctx;
    struct td_zero *z = dp->impl;
    int L = z->L;
    chain_step(dp);
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
    if (ev == TD_BWD_END && dp->sync_this_micro && dp->D > 1 && !dp->cfg.no_overlap)
        chain_begin(dp, unit, dp->grads + dp->t->unit_offset[unit]);
    if (z->chain > 0 && td_request_active(z->req[z->chain - 1])) td_test(z->req[z->chain - 1]);
}

/* ---- the step ----------------------------------------------------------- */

static double zero_finish(td_dp *dp, int step, float lr) {
    struct td_zero *z = dp->impl;
    const td_param_table *t = dp->t;
    double t0 = td_now_ms();
    float *g = z->gshard;
    if (z->stage == 1) {
        if (dp->D == 1 || dp->cfg.no_overlap)
            for (int u = 0; u < dp->n_units; u++) chain_begin(dp, u, dp->grads + t->unit_offset[u]);
        chain_finish(dp);
        /* with top-k every rank holds the dense sum of each unit, of which
         * its slice is its shard */
        for (int u = 0; u < dp->n_units && z->pay; u++) {
            td_gpay_finish(dp, z->pay, u);
            td_dev_copy(z->rs_out + z->pc[u].off, dp->grads + z->pc[u].mine, z->pc[u].slice * sizeof(float));
        }
        g = z->rs_out;
        td_dev_zero(dp->grads, t->numel * sizeof(float));
    } else {
        for (int i = 0; i < POOL + 1; i++) gslot_drain(dp, &z->gslots[i]);
    }
    if (dp->R > 1) { /* hybrid sharding: the shards' sums, summed over the replicas */
        uint64_t sent0 = td_comm_sent_bytes();
        td_allreduce(dp->rep, g, z->shard_n, TD_F32, TD_SUM);
        td_dp_count_grad(dp, sent0, z->shard_n);
    }
    dp->exposed_ms = td_now_ms() - t0;
    /* every element lives in exactly one rank's shard of a replica (an
     * expert's in one of the ranks holding it): the shard's ranges
     * partition the model, and the norm sums over the dp group */
    td_step_group grp = td_dp_step_group(dp, dp->comm, dp->D, 1);
    grp.pieces = z->spieces;
    td_step_result res = td_step_apply(&grp, g, z->ranges, z->n_pc, step, lr);
    if (z->stage != 1) td_dev_zero(z->gshard, z->shard_n * sizeof(float));
    if (res.bad_row >= 0) { /* no update */
        td_dp_record_nonfinite(dp, step, res.bad_row);
        return res.norm;
    }
    if (z->stage != 3) /* everyone needs the updated weights */
        for (int i = 0; i < z->n_pc; i++) {
            const zpiece *q = &z->pc[i];
            if (q->parts > 1) td_all_gather(q->comm, dp->params + q->mine, dp->params + q->lo, q->slice, TD_F32);
        }
    return res.norm;
}

/* One unit to dp rank 0 (under ep to every rank of edp rank 0, with its own
 * experts): the owners' slices are all-gathered into one unit-sized buffer,
 * so no rank ever holds more than its shards plus one unit. */
static const float *zero_gather_unit(td_dp *dp, int section, int u, float *scratch) {
    struct td_zero *z = dp->impl;
    int root = dp->er == 0 && dp->rep_r == 0; /* one replica's copy */
    if (section == 0 && z->stage < 3) /* every rank holds the full parameters */
        return root ? dp->params + dp->t->unit_offset[u] : NULL;
    const float *base = section == 0 ? z->pshard : section == 1 ? dp->m : dp->v;
    for (int i = z->first[u]; i < z->first[u + 1]; i++) {
        const zpiece *q = &z->pc[i];
        float *dst = scratch + (q->lo - dp->t->unit_offset[u]);
        if (q->parts > 1) {
            /* the slice comes to the host first: a device's gather would stage
             * the whole piece landing in host memory at once, and the plan's
             * staging (td_run_staging_shape) holds only the step's pieces */
            float *mine = td_alloc(q->slice * sizeof(float), TD_MEM_OTHER);
            td_dev_download(mine, base + q->off, q->slice * sizeof(float), TD_HOST_CKPT);
            td_dev_sync(); /* the gather reads it */
            td_all_gather(q->comm, mine, dst, q->slice, TD_F32);
            td_free(mine);
        } else
            td_dev_download(dst, base + q->off, q->slice * sizeof(float), TD_HOST_CKPT);
    }
    return root ? scratch : NULL;
}

static int zero_full_params(const td_dp *dp) { return dp->cfg.zero < 3; }

/* Each rank owns its slice of every piece of every section; below stage 3
 * it also holds (and on load fills) the whole parameter buffer. Under
 * hybrid sharding the first replica owns (saves) them; every replica loads. */
static void zero_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx) {
    struct td_zero *z = dp->impl;
    if (owner_only && dp->rep_r > 0) return;
    if (section == 0 && z->stage < 3 && !owner_only) {
        cb(ctx, 0, dp->t->numel, dp->params);
        return;
    }
    float *base = section == 0 ? (z->stage < 3 ? NULL : z->pshard) : section == 1 ? dp->m : dp->v;
    for (int i = 0; i < z->n_pc; i++) {
        const zpiece *q = &z->pc[i];
        if (q->slice == 0) continue;
        cb(ctx, q->mine, q->slice, base ? base + q->off : dp->params + q->mine);
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
