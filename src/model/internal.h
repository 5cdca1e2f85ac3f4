/* Shared by the model's files: a tensor's weights and gradient by kind, and
 * the communication table's operations at Megatron's conjugate points. */
#ifndef TRIDENT_MODEL_INTERNAL_H
#define TRIDENT_MODEL_INTERNAL_H

#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/model.h"

/* ---- the families' tables (arch.c) ---- */
typedef enum { TD_PLACE_EMBED, TD_PLACE_BLOCK, TD_PLACE_FINAL } td_place; /* unit 0, l+1, L+1 */
/* a global extent: 0 (a vector's second), C, V, T, 3C, F, KV * head size */
typedef enum { TD_DIM_0, TD_DIM_C, TD_DIM_V, TD_DIM_T, TD_DIM_3C, TD_DIM_F, TD_DIM_KVC,
               /* mixture of experts: E; an expert's F; E x its first projection
                * (F, or 2F for SwiGLU's gate|up); E F; E C; the shared experts'
                * S F and S x first projection */
               TD_DIM_E, TD_DIM_FE, TD_DIM_EF1, TD_DIM_EF, TD_DIM_EC, TD_DIM_SF, TD_DIM_SF1 } td_dim;
/* Which blocks have a row: every block, dense blocks only (the MLP), mixture
 * of experts blocks only, those with shared experts only. */
typedef enum { TD_MOE_ANY, TD_MOE_DENSE, TD_MOE_ONLY, TD_MOE_SHARED } td_moe_place;
/* normal(0, 0.02), the residual projections' 0.02/sqrt(2L) (GPT-2), 0, 1 */
typedef enum { TD_INIT_NORMAL, TD_INIT_RESID, TD_INIT_ZERO, TD_INIT_ONE } td_init;
typedef enum { TD_NORM_LAYER, TD_NORM_RMS } td_norm_kind;
typedef enum { TD_MLP_GELU, TD_MLP_SWIGLU } td_mlp_kind;

typedef struct {
    td_tensor_kind kind;
    const char *name; /* the checkpoint name; block rows: a format of the layer */
    td_place place;
    td_dim d0, d1;
    td_tp_split split;
    int groups;       /* fused parts along the split dimension, each split alone */
    td_init init;
    int untied_only;  /* the row exists only when the head is not tied */
    td_moe_place moe;
} td_arch_row;

typedef struct td_arch_desc {
    td_arch arch;
    const char *name;
    const td_arch_row *rows;
    int n_rows;
    td_norm_kind norm;  /* LayerNorm (w, b) or RMSNorm (w) */
    td_mlp_kind mlp;    /* GELU of fc, or SwiGLU of the fused gate|up */
    int rope;           /* rotary positions on q and k (no learned positions) */
    td_tensor_kind qkv; /* the first row of the fused q|k|v weight */
    td_tensor_kind fc;  /* the first row of the MLP's first projection */
} td_arch_desc;

const td_arch_desc *td_arch_desc_of(td_arch a);
/* The family's row of a kind, NULL when it has none. */
const td_arch_row *td_arch_row_of(td_arch a, td_tensor_kind kind);
int td_arch_dim(const td_gpt_config *c, td_dim d);
/* 2 for SwiGLU's gate|up, 1 for GELU's fc: the MLP's first projection's parts */
int td_arch_mlp_parts(td_arch a);
/* Block l (0..L-1) has row r (mixture-of-experts blocks trade the MLP's). */
int td_arch_row_in_block(const td_arch_row *r, const td_gpt_config *c, int l);

/* Unit of block l (units: 0 embeddings, 1..L blocks, L+1 final norm). */
static inline int td_m_block_unit(int l) { return l + 1; }

/* A tensor's weights and gradient in its unit; NULL for a kind the model's
 * family does not have (a bias of Llama's: the kernels then add none). */
static inline const float *td_m_w(const td_gpt *m, int unit, td_tensor_kind k) {
    return m->off[k] == TD_NO_TENSOR ? NULL : m->unit_params[unit] + m->off[k];
}

static inline float *td_m_g(const td_gpt *m, int unit, td_tensor_kind k) {
    return m->off[k] == TD_NO_TENSOR ? NULL : m->unit_grads[unit] + m->off[k];
}

static inline void td_m_tp_allreduce(const td_gpt *m, float *buf, size_t n, td_reduce_op op) {
    if (m->d.tp > 1) m->comm->tp_allreduce(m->comm->ctx, buf, n, op);
}

/* Element i of an activation buffer (td_gpt_dims.es bytes each). */
static inline td_act *td_m_at(const td_gpt *m, const td_act *p, size_t i) {
    return (char *)p + i * m->d.es;
}

/* Where this rank's Ns rows sit inside a full [N,C] activation buffer. */
static inline td_act *td_m_my_rows(const td_gpt *m, td_act *full) {
    return td_m_at(m, full, (size_t)m->d.row0 * (size_t)m->d.C);
}
/* The same in an fp32 [N,C] buffer. */
static inline float *td_m_my_rows_f32(const td_gpt *m, float *full) {
    return full + (size_t)m->d.row0 * (size_t)m->d.C;
}

/* Into a tensor-parallel region (forward f, backward of g): full[N,C] of
 * activations, whose own rows the caller has written at td_m_my_rows,
 * receives every rank's rows. A no-op without sequence parallelism (full is
 * replicated). An all-gather only moves bytes, so reduced-precision rows
 * travel as fp32 pairs (dims_of checks the count is even). */
static inline void td_m_gather_rows(const td_gpt *m, td_act *full) {
    if (m->d.sp) {
        size_t n = (size_t)m->d.Ns * (size_t)m->d.C * m->d.es / sizeof(float);
        m->comm->seq_all_gather(m->comm->ctx, full, td_m_my_rows(m, full), n);
    }
}

/* Out of a tensor-parallel region (forward g, backward f): the partial
 * sums part[N,C] are summed over tp into this rank's rows out[Ns,C]:
 * an all-reduce in place (out == part) or a reduce-scatter. */
static inline void td_m_reduce_rows(const td_gpt *m, float *part, float *out) {
    if (m->d.tp == 1) {
        TD_ASSERT(out == part);
    } else if (m->d.sp) {
        m->comm->seq_reduce_scatter(m->comm->ctx, out, part, (size_t)m->d.Ns * (size_t)m->d.C);
    } else {
        TD_ASSERT(out == part);
        m->comm->tp_allreduce(m->comm->ctx, part, (size_t)m->d.N * (size_t)m->d.C, TD_REDUCE_SUM);
    }
}

/* The backward of a g: the gradient dout[Ns,C] of this rank's rows, as all
 * N rows (gathered into scratch with sequence parallelism; dout itself
 * otherwise, where every rank holds every row). */
static inline const td_act *td_m_gather_grad(const td_gpt *m, const td_act *dout) {
    if (!m->d.sp) return dout;
    td_dev_copy(td_m_my_rows(m, m->s.full), dout, m->d.es * (size_t)m->d.Ns * (size_t)m->d.C);
    td_m_gather_rows(m, m->s.full);
    return m->s.full;
}

/* A LayerNorm's weight and bias gradients: with sequence parallelism each
 * rank sees only its rows, so they are computed into scratch, summed over
 * tp and then added (the parameters are replicated and so must their
 * gradients be); otherwise straight into the gradient buffers. */
static inline float *td_m_norm_grad(const td_gpt *m, float *g, int which) {
    return m->d.sp ? m->s.dnorm + (size_t)which * (size_t)m->d.C : g;
}
static inline void td_m_norm_grad_begin(const td_gpt *m) {
    if (m->d.sp) td_dev_zero(m->s.dnorm, 2 * (size_t)m->d.C * sizeof(float));
}
static inline void td_m_norm_grad_end(const td_gpt *m, float *gw, float *gb) {
    if (!m->d.sp) return;
    size_t C = (size_t)m->d.C;
    td_m_tp_allreduce(m, m->s.dnorm, 2 * C, TD_REDUCE_SUM);
    m->ops->add(gw, m->s.dnorm, C);
    if (gb) m->ops->add(gb, m->s.dnorm + C, C); /* RMSNorm has no bias */
}

/* block.c: the family's norm feeding a column-parallel projection (ln_1,
 * ln_2, ln_f), forward and backward. */
void td_m_norm_forward(td_gpt *m, td_act *out, float *mean, float *rstd, const td_act *x,
                       const float *w, const float *b);
void td_m_norm_backward(td_gpt *m, td_act *dres, const td_act *x, const float *mean,
                        const float *rstd, const float *w, float *gw, float *gb);

/* ---- the kernels in the model's precision (ops.c) ------------------------
 * Under FP32 each is the kernels.h call the model has always made (same
 * bits); under BF16/FP16 the kernels_bf16.h family: activations in the
 * reduced type, math and parameters in fp32. The GEMMs name their weight by
 * (unit, kind): the fp32 weight or the unit's compute copy. out32 / dinp32:
 * the output is fp32 whatever the precision (a partial sum to be reduced). */
void *td_m_unit_lp(td_gpt *m, int u); /* gpt.c: unit u's compute copy, made fresh */
void td_m_round_n(const td_gpt *m, td_act *dst, const float *src, size_t n);
void td_m_widen_n(const td_gpt *m, float *dst, const td_act *src, size_t n);
void td_m_matmul_forward(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                         td_tensor_kind wk, const float *bias, int N, int C, int OC);
void td_m_matmul_backward(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                          const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                          int N, int C, int OC);
/* the family's norm kernel alone (ops.c: LayerNorm, or RMSNorm ignoring mean and b) */
void td_m_norm_op_forward(const td_gpt *m, td_act *out, float *mean, float *rstd, const td_act *inp,
                          const float *w, const float *b, int N);
void td_m_norm_op_backward(const td_gpt *m, td_act *dinp, float *dw, float *db, const td_act *dout,
                           const td_act *inp, const float *w, const float *mean, const float *rstd, int N);
void td_m_mlp_act_forward(const td_gpt *m, td_act *out, const td_act *inp, int N, int F);
void td_m_mlp_act_backward(const td_gpt *m, td_act *dinp, const td_act *inp, const td_act *dout,
                           int N, int F);
/* The GEMMs of a weight's slice from element woff (an expert of a stack). */
void td_m_matmul_forward_at(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                            td_tensor_kind wk, size_t woff, const float *bias, int N, int C, int OC);
void td_m_matmul_backward_at(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                             const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                             size_t woff, int N, int C, int OC);
void td_m_rope(const td_gpt *m, td_act *qkv, int backward);
void td_m_residual_forward(const td_gpt *m, td_act *out, const td_act *a, const td_act *b,
                           size_t n);
void td_m_attention_forward(const td_gpt *m, td_act *out, float *lse, const td_act *qkv);
void td_m_attention_backward(const td_gpt *m, td_act *dqkv, const td_act *dout, const td_act *out,
                             const float *lse, const td_act *qkv);

/* ---- mixture of experts (moe.c) ---- */
typedef struct td_moe_acts td_moe_acts;
void td_moe_state_create(td_gpt *m);  /* nothing for a dense model */
/* Bytes of one block's saved tensors at the dispatch's worst case, and of
 * the model's scratch (td_gpt_activation_bytes counts them). */
size_t td_moe_block_bytes(const td_gpt_dims *d, const td_gpt_config *c, int ep);
size_t td_moe_scratch_bytes(const td_gpt_dims *d, const td_gpt_config *c, int ep);
void td_moe_state_destroy(td_gpt *m);
/* Block l's MLP: from ba->ln2 [N,C] to ba->fcproj [Ns,C] (this rank's rows). */
void td_moe_forward(td_gpt *m, int l, td_block_acts *ba);
/* Its backward: dout [N,C], the output gradient of all rows; adds the
 * gradient of ln2 into dln [N,C] (fp32; on tp rank 0, the others add
 * nothing: dln is summed over tp) and the weights' into their gradients. */
void td_moe_backward(td_gpt *m, int l, const td_block_acts *ba, const td_act *dout, float *dln);
/* A recomputing forward: statistics and loss are not counted again. */
void td_moe_set_quiet(td_gpt *m, int quiet);
/* One token's router: scores sc[E] from its logits lg[E] (softmax or
 * sigmoid, td_moe_router) and the top K of score + bias (NULL: none), ties
 * to the lower id, into idx[K] with their scores g[K]. Training's routing
 * and the decoder's (decode.c) share it, so sampling routes as training. */
void td_moe_route_token(int router, int E, int K, const float *lg, const float *bias, float *sc, int *idx,
                        float *g);

#endif
