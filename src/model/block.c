/* One transformer block of one micro-batch, forward and backward:
 *   res2 = x + attproj(attention(qkv(ln1(x))))
 *   res3 = res2 + fcproj(gelu(fc(ln2(res2))))
 * Megatron's conjugate operators sit at the sub-block boundaries (model.h,
 * td_model_comm): g after each row-parallel projection in forward, f on the
 * input gradient of each column-parallel projection in backward. */
#include <string.h>

#include "internal.h"
#include "trident/kernels.h"

void td_block_forward(td_gpt *m, int l, const float *x, td_block_acts *a) {
    const td_gpt_config *c = &m->cfg;
    int B = m->B, T = c->T, C = c->C, NH = c->H, N = B * T, u = td_m_block_unit(l);
#define W(k) td_m_w(m, u, k)
    td_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, W(TD_T_LN1W), W(TD_T_LN1B), N, C);
    td_matmul_forward(a->qkv, a->ln1, W(TD_T_QKVW), W(TD_T_QKVB), N, C, 3 * C);
    td_attention_forward(a->atty, a->att, a->qkv, B, T, C, NH);
    td_matmul_forward(a->attproj, a->atty, W(TD_T_ATTPROJW), W(TD_T_ATTPROJB), N, C, C);
    td_m_tp_allreduce(m, a->attproj, (size_t)N * C, TD_REDUCE_SUM); /* g */
    td_residual_forward(a->res2, x, a->attproj, (size_t)N * C);
    td_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(TD_T_LN2W), W(TD_T_LN2B), N,
                         C);
    td_matmul_forward(a->fch, a->ln2, W(TD_T_FCW), W(TD_T_FCB), N, C, 4 * C);
    td_gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    td_matmul_forward(a->fcproj, a->fch_gelu, W(TD_T_FCPROJW), W(TD_T_FCPROJB), N, 4 * C, C);
    td_m_tp_allreduce(m, a->fcproj, (size_t)N * C, TD_REDUCE_SUM); /* g */
    td_residual_forward(a->res3, a->res2, a->fcproj, (size_t)N * C);
#undef W
}

void td_block_backward(td_gpt *m, int l, const float *x, const td_block_acts *a, float *dres) {
    const td_gpt_config *c = &m->cfg;
    int B = m->B, T = c->T, C = c->C, NH = c->H, N = B * T, u = td_m_block_unit(l);
    td_gpt_scratch *s = &m->s;
#define W(k) td_m_w(m, u, k)
#define G(k) td_m_g(m, u, k)
    /* MLP branch */
    memset(s->dfchg, 0, sizeof(float) * N * 4 * C);
    td_matmul_backward(s->dfchg, G(TD_T_FCPROJW), G(TD_T_FCPROJB), dres, a->fch_gelu,
                       W(TD_T_FCPROJW), N, 4 * C, C);
    memset(s->dfch, 0, sizeof(float) * N * 4 * C);
    td_gelu_backward(s->dfch, a->fch, s->dfchg, (size_t)N * 4 * C);
    memset(s->dln, 0, sizeof(float) * N * C);
    td_matmul_backward(s->dln, G(TD_T_FCW), G(TD_T_FCB), s->dfch, a->ln2, W(TD_T_FCW), N, C, 4 * C);
    td_m_tp_allreduce(m, s->dln, (size_t)N * C, TD_REDUCE_SUM); /* f */
    /* dres already holds d(res2) through the identity; the norm adds its part */
    td_layernorm_backward(dres, G(TD_T_LN2W), G(TD_T_LN2B), s->dln, a->res2, W(TD_T_LN2W),
                          a->ln2_mean, a->ln2_rstd, N, C);
    /* attention branch */
    memset(s->datty, 0, sizeof(float) * N * C);
    td_matmul_backward(s->datty, G(TD_T_ATTPROJW), G(TD_T_ATTPROJB), dres, a->atty,
                       W(TD_T_ATTPROJW), N, C, C);
    memset(s->dqkv, 0, sizeof(float) * N * 3 * C);
    td_attention_backward(s->dqkv, s->datt, s->datty, a->qkv, a->att, B, T, C, NH);
    memset(s->dln, 0, sizeof(float) * N * C);
    td_matmul_backward(s->dln, G(TD_T_QKVW), G(TD_T_QKVB), s->dqkv, a->ln1, W(TD_T_QKVW), N, C,
                       3 * C);
    td_m_tp_allreduce(m, s->dln, (size_t)N * C, TD_REDUCE_SUM); /* f */
    td_layernorm_backward(dres, G(TD_T_LN1W), G(TD_T_LN1B), s->dln, x, W(TD_T_LN1W), a->ln1_mean,
                          a->ln1_rstd, N, C);
#undef W
#undef G
}
