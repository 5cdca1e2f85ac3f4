/* The ends of the model: token (+ learned position) embedding, and the
 * final norm + LM head (tied to the embedding, or its own) + cross-entropy.
 *
 * Vocab-parallel (Megatron): each tp rank holds rows [vocab_lo, vocab_lo +
 * Vl) of wte. The embedding looks up the tokens of its shard (zeros for the
 * rest) and the partial lookups are summed over tp like a row-parallel
 * output; positions are added after, once. The head computes only its
 * shard's logits [N,Vl] and the loss never materializes the full row: each
 * row's max, sum of exponentials and target logit are reduced over tp
 * between the stages of the cross-entropy (td_xent_*); with tp = 1 the
 * stages give the fused kernel's bits. */
#include <string.h>

#include "internal.h"
#include "trident/backend.h"

enum { EMBED_UNIT = 0 };
static int head_unit(const td_gpt *m) { return m->cfg.L + 1; }

/* Under reduced precision the lookup and the position add run in fp32
 * (the partial lookups are summed over tp in fp32) and the sum is rounded
 * into the activation once. */
void td_embed_forward(td_gpt *m, const int *inputs, td_embed_acts *a) {
    const td_gpt_dims *d = &m->d;
    float *part = d->sp || d->lp ? m->s.full : a->encoded;
    float *rows = !d->lp ? a->encoded : d->sp ? m->s.dln_local : part;
    m->ops->emb_fwd(part, inputs, td_m_w(m, EMBED_UNIT, TD_T_WTE), d->vocab_lo, d->Vl,
                               d->N, d->C);
    td_m_reduce_rows(m, part, rows);
    const float *wpe = td_m_w(m, EMBED_UNIT, TD_T_WPE); /* NULL: rotary positions instead */
    /* --doc-positions reset: each of the micro-batch's N rows its own
     * position (pos_fwd's period T taken as N: row n reads doc_pos[n]) */
    if (wpe && m->doc_pos) m->ops->pos_fwd(rows, wpe, m->doc_pos, d->row0, d->Ns, d->N, d->C);
    else if (wpe) m->ops->pos_fwd(rows, wpe, m->pos, d->row0, d->Ns, d->T, d->C);
    if (d->lp) td_m_round_n(m, a->encoded, rows, (size_t)d->Ns * d->C);
}

void td_embed_backward(td_gpt *m, const int *inputs, const td_act *dres) {
    const td_gpt_dims *d = &m->d;
    const td_act *dfull = td_m_gather_grad(m, dres); /* every shard of wte sees every row */
    const float *g = dfull;
    if (d->lp) { /* widened into s->dln, free at this point of the backward */
        td_m_widen_n(m, m->s.dln, dfull, (size_t)d->N * d->C);
        g = m->s.dln;
    }
    m->ops->emb_bwd(td_m_g(m, EMBED_UNIT, TD_T_WTE), g, inputs, d->vocab_lo, d->Vl, d->N,
                                d->C);
    /* from all N rows: the position gradient is the same on every tp rank */
    float *gwpe = td_m_g(m, EMBED_UNIT, TD_T_WPE);
    /* --doc-positions reset: rows share positions, so the gradient is the
     * lookup's scatter-add with positions for ids: emb_bwd's, thread-count
     * independent (each wpe row's terms added in row order) */
    if (gwpe && m->doc_pos) m->ops->emb_bwd(gwpe, g, m->doc_pos, 0, m->cfg.T, d->N, d->C);
    else if (gwpe) m->ops->pos_bwd(gwpe, g, m->pos, 0, d->N, d->T, d->C);
}

/* The logits are fp32 in every precision (the GEMM writes them so), and so
 * is the whole cross-entropy. */
double td_head_forward(td_gpt *m, const td_act *x, const int *targets, td_head_acts *a) {
    const td_gpt_dims *d = &m->d;
    int N = d->N, C = d->C, u = head_unit(m);
    /* the head's input: all rows */
    td_m_norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, x, td_m_w(m, u, TD_T_LNFW),
                      td_m_w(m, u, TD_T_LNFB));
    /* the LM head's rows of this rank (wte's when tied): logits[N,Vl] = lnf @ head^T */
    td_m_matmul_forward(m, a->logits, 1, a->lnf, m->head_unit, m->head_kind, NULL, N, C, d->Vl);
    if (!targets) return 0.0;
    /* (td_gpt_upload_tokens checked every target < V; one < 0 is ignored) */
    const td_ops *o = m->ops;
    o->xent_max(a->row_max, a->logits, N, d->Vreal, d->Vl);
    td_m_tp_allreduce(m, a->row_max, (size_t)N, TD_REDUCE_MAX);
    o->xent_exp_sum(a->row_sum, a->tgt_logit, a->logits, a->logits, a->row_max, targets,
                    d->vocab_lo, N, d->Vreal, d->Vl);
    td_m_tp_allreduce(m, a->row_sum, (size_t)N, TD_REDUCE_SUM);
    td_m_tp_allreduce(m, a->tgt_logit, (size_t)N, TD_REDUCE_SUM);
    o->xent_finish(a->losses, a->logits, a->row_sum, a->tgt_logit, a->row_max, targets, N, d->Vreal,
                   d->Vl);
    /* summed on the device in row order (the host loop's bits), one scalar down */
    double sum;
    o->sum(m->loss_sum, a->losses, (size_t)N);
    td_dev_download(&sum, m->loss_sum, sizeof sum, TD_HOST_SCALARS);
    td_dev_sync();
    return sum;
}

void td_head_backward(td_gpt *m, const td_act *x, const int *targets, td_head_acts *a, float dloss,
                      td_act *dres) {
    const td_gpt_dims *d = &m->d;
    int N = d->N, C = d->C, u = head_unit(m);
    td_gpt_scratch *s = &m->s;
    m->ops->fill(s->dlosses, dloss, (size_t)N);
    /* dlogits overwrite the probabilities in place */
    m->ops->xent_bwd(a->logits, a->logits, targets, d->vocab_lo, s->dlosses, N, d->Vreal, d->Vl);
    const td_act *dlogits = a->logits;
    if (d->lp) { /* the GEMM reads them in the reduced type */
        td_m_round_n(m, s->dlogits_lp, a->logits, (size_t)N * d->Vl);
        dlogits = s->dlogits_lp;
    }
    td_dev_zero(s->dln, sizeof(float) * (size_t)N * C);
    td_m_matmul_backward(m, s->dln, 1, td_m_g(m, m->head_unit, m->head_kind), NULL, dlogits, a->lnf,
                         m->head_unit, m->head_kind, N, C, d->Vl);
    td_dev_zero(dres, d->es * (size_t)d->Ns * C);
    td_m_norm_backward(m, dres, x, a->lnf_mean, a->lnf_rstd, td_m_w(m, u, TD_T_LNFW),
                       td_m_g(m, u, TD_T_LNFW), td_m_g(m, u, TD_T_LNFB));
}
