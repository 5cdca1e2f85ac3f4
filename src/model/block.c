/* One transformer block of one micro-batch, forward and backward:
 *   res2 = x + attproj(attention(qkv(ln1(x))))
 *   res3 = res2 + fcproj(gelu(fc(ln2(res2))))
 * Under tensor parallelism (Megatron) qkv and fc are column-parallel (this
 * rank's heads and MLP features), attproj and fcproj row-parallel (their
 * partial sums are reduced by the g operator); their biases are added once,
 * by tp rank 0, before the reduction. See td_model_comm for where f and g
 * sit and how sequence parallelism turns them into all-gathers and
 * reduce-scatters (internal.h: td_m_gather_rows, td_m_reduce_rows). */
#include <string.h>

#include "internal.h"
#include "trident/kernels.h"

/* A LayerNorm feeding a column-parallel projection (ln_1, ln_2 and, from
 * embed_head.c, ln_f): this rank's rows of
 * x[Ns,C] normalised into its rows of out[N,C], which then holds every row. */
void td_m_norm_forward(td_gpt *m, float *out, float *mean, float *rstd, const float *x,
                       const float *w, const float *b) {
    td_layernorm_forward(td_m_my_rows(m, out), mean, rstd, x, w, b, m->d.Ns, m->d.C);
    td_m_gather_rows(m, out);
}

/* The backward through a column-parallel projection's input and the
 * LayerNorm before it: s->dln [N,C] holds this rank's partial input gradient;
 * it is reduced to this rank's rows and the norm's backward adds the
 * gradient of its input x[Ns,C] into dres. */
void td_m_norm_backward(td_gpt *m, float *dres, const float *x, const float *mean,
                        const float *rstd, const float *w, float *gw, float *gb) {
    td_gpt_scratch *s = &m->s;
    float *dln = m->d.sp ? s->dln_local : s->dln;
    td_m_reduce_rows(m, s->dln, dln);
    td_m_norm_grad_begin(m);
    td_layernorm_backward(dres, td_m_norm_grad(m, gw, 0), td_m_norm_grad(m, gb, 1), dln, x, w, mean,
                          rstd, m->d.Ns, m->d.C);
    td_m_norm_grad_end(m, gw, gb);
}

/* A row-parallel projection: out[Ns,C] = reduce(inp[N,K] @ w^T) + bias. */
static void row_parallel_forward(td_gpt *m, float *out, const float *inp, const float *w,
                                 const float *bias, int K) {
    const td_gpt_dims *d = &m->d;
    float *part = d->sp ? m->s.full : out;
    td_matmul_forward(part, inp, w, d->tp_rank == 0 ? bias : NULL, d->N, K, d->C);
    td_m_reduce_rows(m, part, out);
}

/* Its backward: dout [Ns,C] is gathered to all N rows (the backward of the
 * reduce-scatter) and gives the input gradient dinp[N,K] (overwritten), the
 * weight's and the bias's; the bias gradient comes from all rows on every
 * rank, so it is the same everywhere without a reduction. */
static void row_parallel_backward(td_gpt *m, float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, int K) {
    const td_gpt_dims *d = &m->d;
    const float *dfull = td_m_gather_grad(m, dout);
    memset(dinp, 0, sizeof(float) * (size_t)d->N * K);
    td_matmul_backward(dinp, dw, db, dfull, inp, w, d->N, K, d->C);
}

void td_block_forward(td_gpt *m, int l, const float *x, td_block_acts *a) {
    const td_gpt_dims *d = &m->d;
    int u = td_m_block_unit(l), N = d->N, C = d->C;
    size_t ns = (size_t)d->Ns * C;
#define W(k) td_m_w(m, u, k)
    td_m_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, W(TD_T_LN1W), W(TD_T_LN1B));
    td_matmul_forward(a->qkv, a->ln1, W(TD_T_QKVW), W(TD_T_QKVB), N, C, 3 * d->Ca);
    td_attention_forward(a->atty, a->att, a->qkv, d->B, d->T, d->Ca, d->Ha);
    row_parallel_forward(m, a->attproj, a->atty, W(TD_T_ATTPROJW), W(TD_T_ATTPROJB), d->Ca);
    td_residual_forward(a->res2, x, a->attproj, ns);
    td_m_norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(TD_T_LN2W), W(TD_T_LN2B));
    td_matmul_forward(a->fch, a->ln2, W(TD_T_FCW), W(TD_T_FCB), N, C, d->F);
    td_gelu_forward(a->fch_gelu, a->fch, (size_t)N * d->F);
    row_parallel_forward(m, a->fcproj, a->fch_gelu, W(TD_T_FCPROJW), W(TD_T_FCPROJB), d->F);
    td_residual_forward(a->res3, a->res2, a->fcproj, ns);
#undef W
}

void td_block_backward(td_gpt *m, int l, const float *x, const td_block_acts *a, float *dres) {
    const td_gpt_dims *d = &m->d;
    int u = td_m_block_unit(l), N = d->N, C = d->C;
    td_gpt_scratch *s = &m->s;
#define W(k) td_m_w(m, u, k)
#define G(k) td_m_g(m, u, k)
    /* MLP branch; dres holds d(res3) = d(res2) through the identity */
    row_parallel_backward(m, s->dfchg, G(TD_T_FCPROJW), G(TD_T_FCPROJB), dres, a->fch_gelu,
                          W(TD_T_FCPROJW), d->F);
    memset(s->dfch, 0, sizeof(float) * (size_t)N * d->F);
    td_gelu_backward(s->dfch, a->fch, s->dfchg, (size_t)N * d->F);
    memset(s->dln, 0, sizeof(float) * (size_t)N * C);
    td_matmul_backward(s->dln, G(TD_T_FCW), G(TD_T_FCB), s->dfch, a->ln2, W(TD_T_FCW), N, C, d->F);
    td_m_norm_backward(m, dres, a->res2, a->ln2_mean, a->ln2_rstd, W(TD_T_LN2W), G(TD_T_LN2W),
                       G(TD_T_LN2B));
    /* attention branch */
    row_parallel_backward(m, s->datty, G(TD_T_ATTPROJW), G(TD_T_ATTPROJB), dres, a->atty,
                          W(TD_T_ATTPROJW), d->Ca);
    memset(s->dqkv, 0, sizeof(float) * (size_t)N * 3 * d->Ca);
    td_attention_backward(s->dqkv, s->datt, s->datty, a->qkv, a->att, d->B, d->T, d->Ca, d->Ha);
    memset(s->dln, 0, sizeof(float) * (size_t)N * C);
    td_matmul_backward(s->dln, G(TD_T_QKVW), G(TD_T_QKVB), s->dqkv, a->ln1, W(TD_T_QKVW), N, C,
                       3 * d->Ca);
    td_m_norm_backward(m, dres, x, a->ln1_mean, a->ln1_rstd, W(TD_T_LN1W), G(TD_T_LN1W),
                       G(TD_T_LN1B));
#undef W
#undef G
}
