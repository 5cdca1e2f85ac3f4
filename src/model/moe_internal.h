/* The mixture of experts' private parts, shared by moe.c (the state,
 * routing, forward and backward) and moe_exchange.c (the experts' GEMMs and
 * the expert-parallel exchange). */
#ifndef TRIDENT_MODEL_MOE_INTERNAL_H
#define TRIDENT_MODEL_MOE_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "trident/backend.h"
#include "trident/moe.h"

/* A block's saved tensors. The device block (mem, td_moe_block_bytes) holds
 * the router's logits and scores, a slot for the router's bias, the routing
 * decisions and the statistics, then the rows; the host mirror (hmem) holds
 * the same routing half, fetched and sent as one named copy each way per
 * router call (TD_HOST_MOE): [logits, scores, bias] down, [idx .. stats]
 * up. The host fields below are the mirror's; d_* are the device's. */
struct td_moe_acts {
    int N;
    void *mem;              /* device: the one allocation (td_moe_block_bytes) */
    void *hmem;             /* host: the routing half's mirror, then cnt and rcnt */
    float *logits, *scores; /* [N,E] router output and its softmax / sigmoid */
    float *bias;            /* [E] the router's bias as it was at routing (a copy) */
    int *idx;               /* [N,K] chosen experts */
    float *gate;            /* [N,K] their scores */
    float *wts;             /* [N,K] combine weights: gate, renormalised with norm_topk */
    int *pos;               /* [N,K] row of the assignment in the send order, -1 dropped */
    float *stats;           /* [2E + 3] the routing statistics, reduced (reduce_stats) */
    int *cnt;               /* [ep, El] rows sent to rank r's expert j (host only) */
    int *rcnt;              /* [ep, El] rows received from rank r for local expert j (host only) */
    float *d_logits, *d_scores, *d_bias, *d_gate, *d_wts, *d_stats; /* the device's */
    int *d_idx, *d_pos;
    int R;                  /* rows received */
    td_act *xsend, *ysend;  /* [cap_send, C] dispatched inputs, returned outputs */
    td_act *xs, *h, *a, *y; /* [cap_recv, C|F1|F|C] expert-major (ep 1: xsend, ysend) */
    td_act *sh_h, *sh_a;    /* [N, S F1], [N, S F] the shared experts' hidden */
};

struct td_moe_state {
    td_moe_acts **pool; /* every td_moe_acts made, freed with the model */
    int n_pool, cap_pool;
    size_t cap;           /* rows of each scratch buffer below */
    void *scratch;        /* the one allocation (td_moe_scratch_bytes) */
    td_act *b0, *b1, *b2; /* [cap, max(C, F1, S F1)] */
    td_act *t0, *t1, *t2; /* [TILE, max(C, F1)] reduced precision's padded tiles */
    td_act *b3;           /* [N, S F1] the shared experts' backward (S > 0) */
    float *f0;            /* [cap + 1, C] fp32 rows (the combine's sum), at least 2E floats */
    float *hf;            /* host: max(N, 2E) floats (margins, place()'s counts) */
    float dloss;          /* the loss's gradient per token (td_gpt_backward's) */
    float aux_w;          /* the aux and z losses' weight in it (td_gpt_set_aux_weight) */
    int quiet;            /* a recomputing forward: statistics already counted */
    int resets;           /* td_gpt_moe_stats_reset calls: the step, for TRIDENT_FAULT=route-flip */
    int flip;             /* this step's routing is broken on purpose (route-flip) */
    td_moe_stats st;
};

static inline int n_local(const td_gpt *m) { return m->cfg.moe.E / m->table->ep; }
static inline size_t F1e(const td_gpt *m) {
    return (size_t)m->cfg.moe.F * (size_t)td_arch_mlp_parts(m->cfg.arch);
}

/* ---- rows in the model's precision ---- */

static inline td_act *row(const td_gpt *m, const td_act *p, size_t i, size_t width) {
    return td_m_at(m, p, i * width);
}

/* The backend's row of the model's precision. */
static inline const td_ops *moe_ops(const td_gpt *m) {
    return td_ops_for(!m->d.lp ? TD_K_F32 : m->d.prec == TD_PREC_FP16 ? TD_K_F16 : TD_K_BF16);
}

/* ---- moe_exchange.c ---- */

#define TD_MOE_TILE 128 /* rows of an expert GEMM under reduced precision */

/* out [n,OC] = inp [n,C] @ w^T + bias for an expert (weight slice from
 * element woff); in tiles of 128 rows under reduced precision. */
void td_moe_mm_forward(td_gpt *m, td_act *out, const td_act *inp, int u, td_tensor_kind wk,
                       size_t woff, const float *bias, int n, int C, int OC);
/* dinp [n,C] (zero on entry) and dw, dbias (added) of that GEMM. */
void td_moe_mm_backward(td_gpt *m, td_act *dinp, float *dw, float *dbias, const td_act *dout,
                        const td_act *inp, int u, td_tensor_kind wk, size_t woff, int n, int C,
                        int OC);
/* send (rows in send order, [ep, El] runs a->cnt) to the experts' ranks,
 * arriving source-major in tmp (started: td_moe_dispatch_finish puts them
 * expert-major into dst); or back: the expert-major send permuted into
 * tmp, returned in send order into dst (started and waited). */
void td_moe_dispatch_start(td_gpt *m, td_moe_acts *a, td_act *dst, const td_act *send, td_act *tmp,
                           int back);
void td_moe_dispatch_finish(td_gpt *m, const td_moe_acts *a, td_act *dst, const td_act *tmp);

#endif
