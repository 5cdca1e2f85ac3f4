/* Expert parallelism (ep.h): the model's mixture-of-experts communication
 * over the grid's groups. The routing statistics are summed over grad (the
 * ranks whose tokens make up the micro-batch); tokens travel to their
 * experts' ranks over ep. */
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/ep.h"
#include "trident/parallel.h"

static void stats_allreduce(void *ctx, float *buf, size_t n) {
    td_ep *e = ctx;
    if (td_grid_grad_ranks(e->g) > 1) td_allreduce(e->g->grad_comm, buf, n, TD_F32, TD_SUM);
}

static void stats_exscan(void *ctx, const float *in, float *out, size_t n) {
    td_ep *e = ctx;
    int G = td_grid_grad_ranks(e->g), me = G > 1 ? td_comm_rank(e->g->grad_comm) : 0;
    memset(out, 0, sizeof(float) * n);
    if (G == 1) return;
    float *all = td_alloc(sizeof(float) * n * (size_t)G, TD_MEM_OTHER);
    td_all_gather(e->g->grad_comm, in, all, n, TD_F32);
    for (int r = 0; r < me; r++)
        for (size_t i = 0; i < n; i++) out[i] += all[(size_t)r * n + i];
    td_free(all);
}

/* One exchange in flight at a time: the model starts it, computes the
 * shared experts, then waits (model.h). */
static void counts_start(void *ctx, const int *send, int *recv, int n) {
    td_ep *e = ctx;
    td_all_to_all_start(e->req, e->g->ep_comm, send, recv, (size_t)n * sizeof(int) / 2, TD_BF16);
    e->calls++;
}

/* Rows travel as 2-byte elements (every row has an even number of bytes):
 * no conversion, the bytes as they are. */
static void exchange_start(void *ctx, const void *send, const int *send_rows, void *recv, const int *recv_rows,
                           size_t row_bytes) {
    td_ep *e = ctx;
    int n = td_comm_size(e->g->ep_comm);
    size_t so = 0, ro = 0, per = row_bytes / 2, me = (size_t)td_comm_rank(e->g->ep_comm);
    TD_ASSERT(row_bytes % 2 == 0 && n <= TD_MOE_MAX_EP);
    for (int r = 0; r < n; r++) {
        e->sc[r] = (size_t)send_rows[r] * per, e->sd[r] = so, so += e->sc[r];
        e->rc[r] = (size_t)recv_rows[r] * per, e->rd[r] = ro, ro += e->rc[r];
    }
    uint64_t sent0 = td_comm_sent_bytes();
    td_all_to_all_v_start(e->req, e->g->ep_comm, send, e->sc, e->sd, recv, e->rc, e->rd, TD_BF16);
    e->calls++;
    /* what the comm layer counted as this rank's, less the block it keeps */
    e->bytes_off_rank += td_comm_sent_bytes() - sent0 - 2 * e->sc[me];
    (void)so;
}

static void wait_exchange(void *ctx) {
    td_ep *e = ctx;
    td_wait(e->req);
}

void td_ep_bind_model(td_ep *e, const td_grid *g, td_model_comm *ops) {
    memset(e, 0, sizeof *e);
    e->g = g;
    e->req = td_request_new();
    ops->moe_ctx = e;
    ops->moe_stats_allreduce = stats_allreduce;
    ops->moe_stats_exscan = stats_exscan;
    if (g->ep_comm) {
        ops->ep_counts_start = counts_start;
        ops->ep_exchange_start = exchange_start;
        ops->ep_wait = wait_exchange;
    }
}

void td_ep_reset_stats(td_ep *e) { e->calls = 0, e->bytes_off_rank = 0; }

void td_ep_free(td_ep *e) {
    if (e->req) td_request_free(e->req);
    e->req = NULL;
}

/* ---- a unit put together from the ep group's experts ---- */

const float *td_ep_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t, const td_param_table *canon,
                               int section, int u, float *scratch, const td_param_table **layout) {
    *layout = canon;
    TD_ASSERT(t->ep > 1 && g->ep_comm);
    size_t n = td_unit_numel(t, u), unit = 0, cn = td_unit_numel(canon, u), cunit = 0;
    for (int k = 0; k < t->n_units; k++) unit = td_max_sz(unit, td_unit_numel(t, k));
    for (int k = 0; k < canon->n_units; k++) cunit = td_max_sz(cunit, td_unit_numel(canon, k));
    /* the unit with this rank's experts on every rank of edp rank 0 (the
     * first ep run, whose tp peers are of it too), into scratch[0, unit) */
    const float *at = td_dp_gather_unit(dp, section, u, scratch);
    if (!at) return NULL;
    float *all = scratch + unit, *mine = all + (size_t)t->tp * unit, *eps = mine + cunit, *out = eps + (size_t)t->ep * cunit;
    /* this rank's experts and its tp peers' slices in the canonical layout ... */
    if (t->tp > 1) td_all_gather(g->axis[TD_TP].comm, at, all, n, TD_F32);
    else memcpy(all, at, n * sizeof(float));
    td_tp_place_unit(t, canon, u, all, mine);
    /* ... and the ep group's experts beside them */
    td_all_gather(g->ep_comm, mine, eps, cn, TD_F32);
    if (g->world_rank != td_comm_world_rank_of(g->grad_comm, 0) || g->axis[TD_TP].rank != 0) return NULL;
    memcpy(out, mine, cn * sizeof(float));
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i], *c = &canon->rows[i];
        if (p->unit != u || p->split != TD_SPLIT_EXPERT) continue;
        size_t off = c->offset - canon->unit_offset[u];
        for (int r = 1; r < t->ep; r++) /* rank r's experts: rows [r E/ep, (r + 1) E/ep) of the stack */
            memcpy(out + off + (size_t)r * p->numel, eps + (size_t)r * cn + off + (size_t)r * p->numel,
                   p->numel * sizeof(float));
    }
    return out;
}
