/* Expert parallelism (ep.h): the model's mixture-of-experts communication
 * over the grid's groups. The routing statistics are summed over grad (the
 * ranks whose tokens make up the micro-batch); tokens travel to their
 * experts' ranks over ep. */
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/ep.h"

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
    if (g->ep_comm) {
        ops->ep_counts = counts;
        ops->ep_exchange = exchange;
    }
}

void td_ep_reset_stats(td_ep *e) { e->calls = 0, e->bytes_off_rank = 0; }
