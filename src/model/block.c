/* One transformer block of one micro-batch, forward and backward:
 *   res2 = x + attproj(attention(rope(qkv(ln1(x)))))
 *   res3 = res2 + fcproj(act(fc(ln2(res2))))
 * in the family's choices (arch.c): GPT-2's LayerNorm, no rope and GELU of
 * fc; Llama's RMSNorm, rotary q and k, grouped-query attention and SwiGLU
 * of the fused gate|up, without biases (td_m_w gives NULL for them).
 * Under tensor parallelism (Megatron) qkv and fc are column-parallel (this
 * rank's heads and MLP features), attproj and fcproj row-parallel (their
 * partial sums are reduced by the g operator); their biases are added once,
 * by tp rank 0, before the reduction. See td_model_comm for where f and g
 * sit and how sequence parallelism turns them into all-gathers and
 * reduce-scatters (internal.h: td_m_gather_rows, td_m_reduce_rows). */
#include <string.h>

#include "internal.h"

/* The family's norm (LayerNorm or RMSNorm) feeding a column-parallel
 * projection (ln_1, ln_2 and, from embed_head.c, ln_f): this rank's rows of
 * x[Ns,C] normalised into its rows of out[N,C], which then holds every row. */
void td_m_norm_forward(td_gpt *m, td_act *out, float *mean, float *rstd, const td_act *x,
                       const float *w, const float *b) {
    td_m_norm_op_forward(m, td_m_my_rows(m, out), mean, rstd, x, w, b, m->d.Ns);
    td_m_gather_rows(m, out);
}

/* The backward through a column-parallel projection's input and the
 * norm before it: s->dln [N,C] (fp32) holds this rank's partial input
 * gradient; it is reduced to this rank's rows (in fp32: a sum over tp) and
 * the norm's backward adds the gradient of its input x[Ns,C] into dres. */
void td_m_norm_backward(td_gpt *m, td_act *dres, const td_act *x, const float *mean,
                        const float *rstd, const float *w, float *gw, float *gb) {
    td_gpt_scratch *s = &m->s;
    float *dln = m->d.sp ? s->dln_local : s->dln;
    td_m_reduce_rows(m, s->dln, dln);
    const td_act *dout = dln;
    if (m->d.lp) { /* the norm's kernel reads activation gradients */
        td_m_round_n(m, s->dln_lp, dln, (size_t)m->d.Ns * m->d.C);
        dout = s->dln_lp;
    }
    td_m_norm_grad_begin(m);
    td_m_norm_op_backward(m, dres, td_m_norm_grad(m, gw, 0), td_m_norm_grad(m, gb, 1), dout, x, w,
                            mean, rstd, m->d.Ns);
    td_m_norm_grad_end(m, gw, gb);
}

/* A row-parallel projection: out[Ns,C] = reduce(inp[N,K] @ w^T) + bias.
 * The partial sums are fp32 (summed over tp in fp32, then rounded under
 * reduced precision). */
static void row_parallel_forward(td_gpt *m, td_act *out, const td_act *inp, int u,
                                 td_tensor_kind wk, const float *bias, int K) {
    const td_gpt_dims *d = &m->d;
    float *part = d->sp || d->lp ? m->s.full : out;
    td_m_matmul_forward(m, part, 1, inp, u, wk, d->tp_rank == 0 ? bias : NULL, d->N, K, d->C);
    if (!d->lp) {
        td_m_reduce_rows(m, part, out);
        return;
    }
    float *rows = d->sp ? m->s.dln_local : part;
    td_m_reduce_rows(m, part, rows);
    td_m_round_n(m, out, rows, (size_t)d->Ns * d->C);
}

/* Its backward, input half: dout [Ns,C] is gathered to all N rows (the
 * backward of the reduce-scatter) and gives the input gradient dinp[N,K]
 * (overwritten). Returns the gathered output gradient [N,C], which the
 * weight half needs: copied into keep[N,C] when keep is given (a stash that
 * outlives the scratch and dout), else where it lies (m->s.full or dout). */
static const td_act *row_parallel_backward_input(td_gpt *m, td_act *dinp, const td_act *dout,
                                                 int u, td_tensor_kind wk, int K, td_act *keep) {
    const td_gpt_dims *d = &m->d;
    const td_act *dfull = td_m_gather_grad(m, dout);
    if (keep) {
        td_dev_copy(keep, dfull, d->es * (size_t)d->N * d->C);
        dfull = keep;
    }
    td_dev_zero(dinp, d->es * (size_t)d->N * K);
    td_m_matmul_backward(m, dinp, 0, NULL, NULL, dfull, NULL, u, wk, d->N, K, d->C);
    return dfull;
}

void td_block_forward(td_gpt *m, int l, const td_act *x, td_block_acts *a) {
    const td_gpt_dims *d = &m->d;
    int u = td_m_block_unit(l), N = d->N, C = d->C;
    size_t ns = (size_t)d->Ns * C;
#define W(k) td_m_w(m, u, k)
    td_m_norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, W(TD_T_LN1W), W(TD_T_LN1B));
    td_m_matmul_forward(m, a->qkv, 0, a->ln1, u, m->arch->qkv, W(TD_T_QKVB), N, C, d->QKV);
    td_m_rope(m, a->qkv, 0);
    td_m_attention_forward(m, a->atty, a->lse, a->qkv);
    row_parallel_forward(m, a->attproj, a->atty, u, TD_T_ATTPROJW, W(TD_T_ATTPROJB), d->Ca);
    td_m_residual_forward(m, a->res2, x, a->attproj, ns);
    td_m_norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W(TD_T_LN2W), W(TD_T_LN2B));
    if (td_gpt_moe_layer(&m->cfg, l)) {
        td_moe_forward(m, l, a);
    } else {
        td_m_matmul_forward(m, a->fch, 0, a->ln2, u, m->arch->fc, W(TD_T_FCB), N, C, d->F1);
        td_m_mlp_act_forward(m, a->fch_gelu, a->fch, N, d->F);
        row_parallel_forward(m, a->fcproj, a->fch_gelu, u, TD_T_FCPROJW, W(TD_T_FCPROJB), d->F);
    }
    td_m_residual_forward(m, a->res3, a->res2, a->fcproj, ns);
#undef W
}

/* A block's backward is made of four pieces per sub-block (MLP, then
 * attention): the input half of the row-parallel projection, the
 * column-parallel projection's input gradient (into s->dln), the linear
 * layers' weight half, and the LayerNorm's backward (which adds into dres).
 * The input halves and the norms hold all the communication; the weight
 * half is two matmul backward calls without dinp, which give the same
 * bits as the fused call (matmul.c: 48-row slices; test_kernel_threads). */

/* MLP, input half: dres [Ns,C] holds d(res3) (= d(res2) through the
 * identity). The fc output gradient goes to dfch[N,F1]; returns the
 * gathered fcproj output gradient [N,C] (in keep when given). Leaves the
 * partial gradient of ln2 in s->dln. */
static const td_act *mlp_backward_input(td_gpt *m, int u, const td_block_acts *a,
                                        const td_act *dres, td_act *dfch, td_act *keep) {
    const td_gpt_dims *d = &m->d;
    td_gpt_scratch *s = &m->s;
    const td_act *dfcproj = row_parallel_backward_input(m, s->dfchg, dres, u, TD_T_FCPROJW, d->F, keep);
    td_dev_zero(dfch, d->es * (size_t)d->N * d->F1);
    td_m_mlp_act_backward(m, dfch, a->fch, s->dfchg, d->N, d->F);
    td_dev_zero(s->dln, sizeof(float) * (size_t)d->N * d->C);
    td_m_matmul_backward(m, s->dln, 1, NULL, NULL, dfch, NULL, u, m->arch->fc, d->N, d->C, d->F1);
    return dfcproj;
}

/* MLP, weight half: fcproj's and fc's weight and bias gradients from their
 * saved inputs (a) and output gradients dfcproj[N,C], dfch[N,F1]. Every
 * rank sees all N rows here, so no reduction follows (the row-parallel
 * bias gradient is the same on every tp rank). */
static void mlp_backward_weight(td_gpt *m, int u, const td_block_acts *a, const td_act *dfcproj,
                                const td_act *dfch) {
    const td_gpt_dims *d = &m->d;
    td_m_matmul_backward(m, NULL, 0, td_m_g(m, u, TD_T_FCPROJW), td_m_g(m, u, TD_T_FCPROJB), dfcproj,
                         a->fch_gelu, u, TD_T_FCPROJW, d->N, d->F, d->C);
    td_m_matmul_backward(m, NULL, 0, td_m_g(m, u, m->arch->fc), td_m_g(m, u, TD_T_FCB), dfch, a->ln2, u,
                         m->arch->fc, d->N, d->C, d->F1);
}

/* Attention, input half: dres holds d(res2); the QKV output gradient goes
 * to dqkv[N,QKV] (with rotary positions: the gradient of q and k before
 * their turn); returns the gathered attproj output gradient [N,C] (in
 * keep when given). Leaves the partial gradient of ln1 in s->dln. */
static const td_act *attn_backward_input(td_gpt *m, int u, const td_block_acts *a,
                                         const td_act *dres, td_act *dqkv, td_act *keep) {
    const td_gpt_dims *d = &m->d;
    td_gpt_scratch *s = &m->s;
    const td_act *dattproj =
        row_parallel_backward_input(m, s->datty, dres, u, TD_T_ATTPROJW, d->Ca, keep);
    td_dev_zero(dqkv, d->es * (size_t)d->N * d->QKV);
    td_m_attention_backward(m, dqkv, s->datty, a->atty, a->lse, a->qkv);
    td_m_rope(m, dqkv, 1);
    td_dev_zero(s->dln, sizeof(float) * (size_t)d->N * d->C);
    td_m_matmul_backward(m, s->dln, 1, NULL, NULL, dqkv, NULL, u, m->arch->qkv, d->N, d->C, d->QKV);
    return dattproj;
}

static void attn_backward_weight(td_gpt *m, int u, const td_block_acts *a, const td_act *dattproj,
                                 const td_act *dqkv) {
    const td_gpt_dims *d = &m->d;
    td_m_matmul_backward(m, NULL, 0, td_m_g(m, u, TD_T_ATTPROJW), td_m_g(m, u, TD_T_ATTPROJB),
                         dattproj, a->atty, u, TD_T_ATTPROJW, d->N, d->Ca, d->C);
    td_m_matmul_backward(m, NULL, 0, td_m_g(m, u, m->arch->qkv), td_m_g(m, u, TD_T_QKVB), dqkv, a->ln1, u,
                         m->arch->qkv, d->N, d->C, d->QKV);
}

/* The input half of block l, and with keep == NULL the whole backward. The
 * whole backward runs each weight half right after its input half, on the
 * output gradients where they lie in scratch (s->dfch, s->dqkv, and
 * s->full or dres itself for the row-parallel ones): before the LayerNorm's
 * backward adds into dres (which, without sequence parallelism, IS the
 * fcproj output gradient) and while they are in cache, so it copies
 * nothing. With a stash, the output gradients are written to it instead and
 * the weight halves are left to td_block_backward_weight. */
static void block_backward(td_gpt *m, int l, const td_act *x, const td_block_acts *a, td_act *dres,
                           td_block_wstash *keep) {
    td_gpt_scratch *s = &m->s;
    int u = td_m_block_unit(l);
#define W(k) td_m_w(m, u, k)
#define G(k) td_m_g(m, u, k)
    td_act *dfch = keep ? keep->dfch : s->dfch, *dqkv = keep ? keep->dqkv : s->dqkv;
    if (td_gpt_moe_layer(&m->cfg, l)) { /* whole in the input half: W has nothing of it */
        td_dev_zero(s->dln, sizeof(float) * (size_t)m->d.N * m->d.C);
        td_moe_backward(m, l, a, td_m_gather_grad(m, dres), s->dln);
    } else {
        const td_act *dfcproj = mlp_backward_input(m, u, a, dres, dfch, keep ? keep->dfcproj : NULL);
        if (!keep) mlp_backward_weight(m, u, a, dfcproj, dfch);
    }
    td_m_norm_backward(m, dres, a->res2, a->ln2_mean, a->ln2_rstd, W(TD_T_LN2W), G(TD_T_LN2W),
                       G(TD_T_LN2B));
    const td_act *dattproj = attn_backward_input(m, u, a, dres, dqkv, keep ? keep->dattproj : NULL);
    if (!keep) attn_backward_weight(m, u, a, dattproj, dqkv);
    td_m_norm_backward(m, dres, x, a->ln1_mean, a->ln1_rstd, W(TD_T_LN1W), G(TD_T_LN1W),
                       G(TD_T_LN1B));
#undef W
#undef G
}

void td_block_backward(td_gpt *m, int l, const td_act *x, const td_block_acts *a, td_act *dres) {
    block_backward(m, l, x, a, dres, NULL);
}

/* ---- split backward (zero-bubble pipelines) ---- */

size_t td_block_wstash_bytes(const td_gpt_dims *d) {
    return d->es * (size_t)d->N * ((size_t)d->QKV + 2 * (size_t)d->C + (size_t)d->F1);
}

void td_block_wstash_carve(td_block_wstash *w, const td_gpt_dims *d, void *buf) {
    size_t N = (size_t)d->N;
    char *p = buf;
    w->dqkv = p;
    w->dattproj = p += d->es * N * d->QKV;
    w->dfch = p += d->es * N * d->C;
    w->dfcproj = p += d->es * N * d->F1;
}

void td_block_backward_input(td_gpt *m, int l, const td_act *x, const td_block_acts *a, td_act *dres,
                             td_block_wstash *w) {
    TD_ASSERT(w && w->dqkv && w->dattproj && w->dfch && w->dfcproj);
    block_backward(m, l, x, a, dres, w);
}

void td_block_backward_weight(td_gpt *m, int l, const td_block_acts *a, const td_block_wstash *w) {
    int u = td_m_block_unit(l);
    if (!td_gpt_moe_layer(&m->cfg, l)) mlp_backward_weight(m, u, a, w->dfcproj, w->dfch);
    attn_backward_weight(m, u, a, w->dattproj, w->dqkv);
}
