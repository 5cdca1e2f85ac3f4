/* Expert parallelism (ep.h): the model's mixture-of-experts communication
 * over the grid's groups. The routing statistics are summed over grad (the
 * ranks whose tokens make up the micro-batch); tokens travel to their
 * experts' ranks over ep. */
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/ep.h"
#include "trident/parallel.h"

/* TEMPORARY until comm's all-to-all-v lands: point-to-point, 2-byte elements. */
static void a2av(td_comm *c, const void *send, const size_t *sc, const size_t *sd, void *recv, const size_t *rc,
                 const size_t *rd) {
    int n = td_comm_size(c), me = td_comm_rank(c);
    td_request *rq[2 * TD_MOE_MAX_EP];
    int k = 0;
    for (int r = 0; r < n; r++) {
        if (r == me) {
            memcpy((char *)recv + 2 * rd[r], (const char *)send + 2 * sd[r], 2 * sc[r]);
            continue;
        }
        if (rc[r]) rq[k] = td_request_new(), td_recv_start(rq[k], c, (char *)recv + 2 * rd[r], rc[r], TD_BF16, r, 77), k++;
        if (sc[r]) rq[k] = td_request_new(), td_send_start(rq[k], c, (const char *)send + 2 * sd[r], sc[r], TD_BF16, r, 77), k++;
    }
    for (int i = 0; i < k; i++) td_wait(rq[i]), td_request_free(rq[i]);
}

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

static void counts(void *ctx, const int *send, int *recv, int n) {
    td_ep *e = ctx;
    int P = td_comm_size(e->g->ep_comm);
    size_t sc[TD_MOE_MAX_EP], sd[TD_MOE_MAX_EP];
    for (int r = 0; r < P; r++) sc[r] = (size_t)n * 2, sd[r] = (size_t)r * n * 2;
    a2av(e->g->ep_comm, send, sc, sd, recv, sc, sd);
    e->calls++;
}

/* Rows travel as 2-byte elements (every row has an even number of bytes):
 * no conversion, the bytes as they are. */
static void exchange(void *ctx, const void *send, const int *send_rows, void *recv, const int *recv_rows,
                     size_t row_bytes) {
    td_ep *e = ctx;
    int n = td_comm_size(e->g->ep_comm);
    size_t sc[TD_MOE_MAX_EP], sd[TD_MOE_MAX_EP], rc[TD_MOE_MAX_EP], rd[TD_MOE_MAX_EP];
    size_t so = 0, ro = 0, per = row_bytes / 2, me = (size_t)td_comm_rank(e->g->ep_comm);
    TD_ASSERT(row_bytes % 2 == 0 && n <= TD_MOE_MAX_EP);
    for (int r = 0; r < n; r++) {
        sc[r] = (size_t)send_rows[r] * per, sd[r] = so, so += sc[r];
        rc[r] = (size_t)recv_rows[r] * per, rd[r] = ro, ro += rc[r];
    }
    a2av(e->g->ep_comm, send, sc, sd, recv, rc, rd);
    e->calls++;
    e->bytes_off_rank += 2 * (so - sc[me]);
}

void td_ep_bind_model(td_ep *e, const td_grid *g, td_model_comm *ops) {
    memset(e, 0, sizeof *e);
    e->g = g;
    ops->moe_ctx = e;
    ops->moe_stats_allreduce = stats_allreduce;
    ops->moe_stats_exscan = stats_exscan;
    if (g->ep_comm) {
        ops->ep_counts = counts;
        ops->ep_exchange = exchange;
    }
}

void td_ep_reset_stats(td_ep *e) { e->calls = 0, e->bytes_off_rank = 0; }

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
