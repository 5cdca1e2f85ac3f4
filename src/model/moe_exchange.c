/* A mixture of experts' GEMMs and its expert-parallel exchange
 * (moe_internal.h). */
#include "moe_internal.h"

/* ---- an expert's GEMMs ---- */

/* Under reduced precision each GEMM shape is a oneDNN primitive of its own
 * (matmul_bf16.c caches them), and an expert's row count changes every
 * step: its rows go through in tiles of TILE, the last one zero-padded in
 * scratch to a multiple of TAIL rows, so every expert GEMM has one of a few
 * shapes (TILE / TAIL per GEMM). The padding's zero rows add nothing to the
 * weight gradients' sums and each row's output is its own, so the results
 * are those of padding to TILE, at up to TILE - TAIL fewer rows per expert
 * (bench/moe_gemm_bench.c). fp32 (OpenBLAS) takes any count in one call. */
#define TILE TD_MOE_TILE
#define TAIL 16

void td_moe_mm_forward(td_gpt *m, td_act *out, const td_act *inp, int u, td_tensor_kind wk,
                       size_t woff, const float *bias, int n, int C, int OC) {
    if (!m->d.lp) {
        td_m_matmul_forward_at(m, out, 0, inp, u, wk, woff, bias, n, C, OC);
        return;
    }
    struct td_moe_state *s = m->moe;
    int full = n / TILE * TILE, rest = n - full;
    for (int r = 0; r < full; r += TILE)
        td_m_matmul_forward_at(m, row(m, out, (size_t)r, (size_t)OC), 0,
                               row(m, inp, (size_t)r, (size_t)C), u, wk, woff, bias, TILE, C, OC);
    if (!rest) return;
    int last = (rest + TAIL - 1) / TAIL * TAIL;
    td_dev_zero(s->t0, m->d.es * (size_t)last * C);
    td_dev_copy(s->t0, row(m, inp, (size_t)full, (size_t)C), m->d.es * (size_t)rest * C);
    td_m_matmul_forward_at(m, s->t1, 0, s->t0, u, wk, woff, bias, last, C, OC);
    td_dev_copy(row(m, out, (size_t)full, (size_t)OC), s->t1, m->d.es * (size_t)rest * OC);
}

/* dinp [n,C] (zero on entry) and dw, dbias (added) of out = inp @ w^T. */
void td_moe_mm_backward(td_gpt *m, td_act *dinp, float *dw, float *dbias, const td_act *dout,
                        const td_act *inp, int u, td_tensor_kind wk, size_t woff, int n, int C,
                        int OC) {
    if (!m->d.lp) {
        td_m_matmul_backward_at(m, dinp, 0, dw, dbias, dout, inp, u, wk, woff, n, C, OC);
        return;
    }
    struct td_moe_state *s = m->moe;
    int full = n / TILE * TILE, rest = n - full;
    for (int r = 0; r < full; r += TILE)
        td_m_matmul_backward_at(m, row(m, dinp, (size_t)r, (size_t)C), 0, dw, dbias,
                                row(m, dout, (size_t)r, (size_t)OC),
                                row(m, inp, (size_t)r, (size_t)C), u, wk, woff, TILE, C, OC);
    if (!rest) return;
    size_t es = m->d.es;
    size_t last = (size_t)(rest + TAIL - 1) / TAIL * TAIL;
    td_dev_zero(s->t0, es * last * OC);
    td_dev_copy(s->t0, row(m, dout, (size_t)full, (size_t)OC), es * (size_t)rest * OC);
    td_dev_zero(s->t1, es * last * C);
    td_dev_copy(s->t1, row(m, inp, (size_t)full, (size_t)C), es * (size_t)rest * C);
    td_dev_zero(s->t2, es * last * C);
    td_m_matmul_backward_at(m, s->t2, 0, dw, dbias, s->t0, s->t1, u, wk, woff, (int)last, C, OC);
    td_dev_copy(row(m, dinp, (size_t)full, (size_t)C), s->t2, es * (size_t)rest * C);
}

/* ---- expert parallelism: the exchange and the expert-major order ---- */

/* Rows of rank r's block j in a source-major buffer ([r][j] runs) moved
 * to or from expert-major ([j][r]): device copies of runs the host's
 * counts place. */
static void permute(const td_gpt *m, td_act *dst, const td_act *src, const int *rcnt, size_t width,
                    int to_expert_major) {
    int ep = m->table->ep, El = n_local(m);
    size_t src_off = 0;
    for (int r = 0; r < ep; r++)
        for (int j = 0; j < El; j++) {
            size_t em = 0; /* expert-major offset of (j, r) */
            for (int jj = 0; jj < j; jj++)
                for (int rr = 0; rr < ep; rr++) em += (size_t)rcnt[rr * El + jj];
            for (int rr = 0; rr < r; rr++) em += (size_t)rcnt[rr * El + j];
            size_t n = (size_t)rcnt[r * El + j];
            if (to_expert_major)
                td_dev_copy(row(m, dst, em, width), row(m, src, src_off, width), m->d.es * width * n);
            else
                td_dev_copy(row(m, dst, src_off, width), row(m, src, em, width), m->d.es * width * n);
            src_off += n;
        }
}

/* Rows per peer of the [ep, El] counts. */
static void rows_per_rank(const td_gpt *m, const int *cnt, int *out) {
    int ep = m->table->ep, El = n_local(m);
    for (int r = 0; r < ep; r++) {
        out[r] = 0;
        for (int j = 0; j < El; j++) out[r] += cnt[r * El + j];
    }
}

/* send (rows in send order, [ep, El] runs cnt) to the experts' ranks,
 * arriving source-major in tmp (started: dispatch_finish puts them
 * expert-major into dst); or back: the expert-major send permuted into
 * tmp, returned in send order into dst (started and waited). */
void td_moe_dispatch_start(td_gpt *m, td_moe_acts *a, td_act *dst, const td_act *send, td_act *tmp,
                           int back) {
    size_t C = (size_t)m->d.C;
    int sr[TD_MOE_MAX_EP], rr[TD_MOE_MAX_EP];
    rows_per_rank(m, a->cnt, sr);
    rows_per_rank(m, a->rcnt, rr);
    if (!back) {
        m->comm->ep_exchange_start(m->comm->moe_ctx, send, sr, tmp, rr, m->d.es * C);
    } else {
        permute(m, tmp, send, a->rcnt, C, 0);
        m->comm->ep_exchange_start(m->comm->moe_ctx, tmp, rr, dst, sr, m->d.es * C);
        m->comm->ep_wait(m->comm->moe_ctx);
    }
}

void td_moe_dispatch_finish(td_gpt *m, const td_moe_acts *a, td_act *dst, const td_act *tmp) {
    m->comm->ep_wait(m->comm->moe_ctx);
    permute(m, dst, tmp, a->rcnt, (size_t)m->d.C, 1);
}
