/* The ends of the model: token + position embedding, and the final
 * LayerNorm + tied LM head + cross-entropy. The loss is computed in stages so
 * that a vocab-parallel head can reduce each row's max, sum of exponentials
 * and target logit over tp in between (td_model_comm); with no table the
 * stages give the fused kernel's bits. */
#include <string.h>

#include "internal.h"
#include "trident/base.h"
#include "trident/kernels.h"

enum { EMBED_UNIT = 0 };
static int head_unit(const td_gpt *m) { return m->cfg.L + 1; }

void td_embed_forward(td_gpt *m, const int *inputs, td_embed_acts *a) {
    const td_gpt_config *c = &m->cfg;
    td_embedding_forward(a->encoded, inputs, td_m_w(m, EMBED_UNIT, TD_T_WTE),
                         td_m_w(m, EMBED_UNIT, TD_T_WPE), m->B, c->T, c->C);
}

void td_embed_backward(td_gpt *m, const int *inputs, const float *dres) {
    const td_gpt_config *c = &m->cfg;
    td_embedding_backward(td_m_g(m, EMBED_UNIT, TD_T_WTE), td_m_g(m, EMBED_UNIT, TD_T_WPE), dres,
                          inputs, m->B, c->T, c->C);
}

double td_head_forward(td_gpt *m, const float *x, const int *targets, td_head_acts *a) {
    const td_gpt_config *c = &m->cfg;
    int N = m->B * c->T, C = c->C, V = c->V, Vp = c->Vp, u = head_unit(m);
    td_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, td_m_w(m, u, TD_T_LNFW),
                         td_m_w(m, u, TD_T_LNFB), N, C);
    /* LM head tied to wte: logits[N,Vp] = lnf @ wte^T */
    td_matmul_forward(a->logits, a->lnf, td_m_w(m, EMBED_UNIT, TD_T_WTE), NULL, N, C, Vp);
    if (!targets) return 0.0;
    for (int i = 0; i < N; i++) TD_ASSERT(targets[i] >= 0 && targets[i] < V);
    td_xent_max(a->row_max, a->logits, N, V, Vp);
    td_m_tp_allreduce(m, a->row_max, (size_t)N, TD_REDUCE_MAX);
    td_xent_exp_sum(a->row_sum, a->tgt_logit, a->logits, a->logits, a->row_max, targets, N, V, Vp);
    td_m_tp_allreduce(m, a->row_sum, (size_t)N, TD_REDUCE_SUM);
    td_m_tp_allreduce(m, a->tgt_logit, (size_t)N, TD_REDUCE_SUM);
    td_xent_finish(a->losses, a->logits, a->row_sum, a->tgt_logit, a->row_max, targets, N, V, Vp);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return sum;
}

void td_head_backward(td_gpt *m, const float *x, const int *targets, td_head_acts *a, float dloss,
                      float *dres) {
    const td_gpt_config *c = &m->cfg;
    int N = m->B * c->T, C = c->C, u = head_unit(m);
    td_gpt_scratch *s = &m->s;
    for (int i = 0; i < N; i++) s->dlosses[i] = dloss;
    /* dlogits overwrite the probabilities in place */
    td_softmax_xent_backward(a->logits, a->logits, targets, s->dlosses, N, c->V, c->Vp);
    memset(s->dln, 0, sizeof(float) * N * C);
    td_matmul_backward(s->dln, td_m_g(m, EMBED_UNIT, TD_T_WTE), NULL, a->logits, a->lnf,
                       td_m_w(m, EMBED_UNIT, TD_T_WTE), N, C, c->Vp);
    td_m_tp_allreduce(m, s->dln, (size_t)N * C, TD_REDUCE_SUM); /* f: the head's input */
    memset(dres, 0, sizeof(float) * N * C);
    td_layernorm_backward(dres, td_m_g(m, u, TD_T_LNFW), td_m_g(m, u, TD_T_LNFB), s->dln, x,
                          td_m_w(m, u, TD_T_LNFW), a->lnf_mean, a->lnf_rstd, N, C);
}
