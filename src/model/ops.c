/* The model's kernels in its precision (--precision): one call site per op
 * in block.c and embed_head.c, each through the backend's row of the
 * precision (backend.h's td_ops; the CPU's rows are kernels.h for FP32 and
 * the kernels_bf16.h families for BF16 and FP16: activations in the 16-bit
 * type, math in fp32, GEMMs through oneDNN with fp32 accumulation). The
 * GEMMs are also timed here when td_gpt_gemm_stats_enable is on (the
 * benchmark's achieved GEMM rate). */
#include <string.h>

#include "internal.h"
#include "trident/attention.h"
#include "trident/backend.h"
#include "trident/base.h"

static int g_stats;
static double g_flops, g_ms;

void td_gpt_gemm_stats_enable(int on) { g_stats = on; }
void td_gpt_gemm_stats(double *flops, double *ms, int reset) {
    if (flops) *flops = g_flops;
    if (ms) *ms = g_ms;
    if (reset) g_flops = 0.0, g_ms = 0.0;
}

static double stats_begin(void) { return g_stats ? td_now_ms() : 0.0; }
static void stats_end(double t0, double flops) {
    if (!g_stats) return;
    g_ms += td_now_ms() - t0;
    g_flops += flops;
}

/* Every op goes through the run's backend row of the model's precision
 * (m->ops, td_ops_for at create): the CPU's rows call exactly the kernels
 * the model called before the table, so every precision keeps its bits. */
void td_m_round_n(const td_gpt *m, td_act *dst, const float *src, size_t n) {
    m->ops->round_n(dst, src, n);
}

void td_m_widen_n(const td_gpt *m, float *dst, const td_act *src, size_t n) {
    m->ops->widen_n(dst, src, n);
}

/* A GEMM's weight in the row's type: the fp32 parameters themselves, or
 * the unit's 16-bit compute copy at the same element offset. */
static const void *weight(td_gpt *m, int unit, td_tensor_kind k, size_t woff) {
    if (!m->d.lp) return td_m_w(m, unit, k) + woff;
    return (const char *)td_m_unit_lp(m, unit) + (m->off[k] + woff) * m->d.es;
}

void td_m_matmul_forward_at(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                            td_tensor_kind wk, size_t woff, const float *bias, int N, int C, int OC) {
    double t0 = stats_begin();
    m->ops->mm_fwd(out, out32 ? TD_K_F32 : m->ops->k, inp, weight(m, unit, wk, woff), bias, N, C, OC);
    stats_end(t0, 2.0 * N * C * OC);
}

void td_m_matmul_forward(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                         td_tensor_kind wk, const float *bias, int N, int C, int OC) {
    td_m_matmul_forward_at(m, out, out32, inp, unit, wk, 0, bias, N, C, OC);
}

void td_m_matmul_backward_at(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                             const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                             size_t woff, int N, int C, int OC) {
    double t0 = stats_begin();
    m->ops->mm_bwd(dinp, dinp32 ? TD_K_F32 : m->ops->k, dw, dbias, dout, inp,
                   dinp ? weight(m, unit, wk, woff) : NULL, N, C, OC);
    stats_end(t0, 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dw ? 1 : 0)));
}

void td_m_matmul_backward(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                          const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                          int N, int C, int OC) {
    td_m_matmul_backward_at(m, dinp, dinp32, dw, dbias, dout, inp, unit, wk, 0, N, C, OC);
}

/* The family's norm: LayerNorm (w, b; mean and rstd saved) or RMSNorm (w;
 * rstd saved, mean and b unused). */
void td_m_norm_op_forward(const td_gpt *m, td_act *out, float *mean, float *rstd, const td_act *inp,
                          const float *w, const float *b, int N) {
    if (m->arch->norm == TD_NORM_RMS)
        m->ops->rms_fwd(out, rstd, inp, w, N, m->d.C, m->cfg.norm_eps);
    else
        m->ops->ln_fwd(out, mean, rstd, inp, w, b, N, m->d.C);
}

void td_m_norm_op_backward(const td_gpt *m, td_act *dinp, float *dw, float *db, const td_act *dout,
                           const td_act *inp, const float *w, const float *mean, const float *rstd, int N) {
    if (m->arch->norm == TD_NORM_RMS)
        m->ops->rms_bwd(dinp, dw, dout, inp, w, rstd, N, m->d.C);
    else
        m->ops->ln_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
}

/* The MLP's activation: GELU of fc [N,F] (out [N,F]), or SwiGLU of the
 * fused gate|up [N,2F] (out [N,F]). */
void td_m_mlp_act_forward(const td_gpt *m, td_act *out, const td_act *inp, int N, int F) {
    if (m->arch->mlp == TD_MLP_SWIGLU)
        m->ops->swiglu_fwd(out, inp, N, F);
    else
        m->ops->gelu_fwd(out, inp, (size_t)N * F);
}

/* dinp ([N,F1], zeroed by the caller) from dout [N,F]: GELU's backward
 * adds, SwiGLU's writes. */
void td_m_mlp_act_backward(const td_gpt *m, td_act *dinp, const td_act *inp, const td_act *dout,
                           int N, int F) {
    if (m->arch->mlp == TD_MLP_SWIGLU)
        m->ops->swiglu_bwd(dinp, dout, inp, N, F);
    else
        m->ops->gelu_bwd(dinp, inp, dout, (size_t)N * F);
}

/* Rotary positions on q and k of the fused qkv [N, QKV] (in place), or
 * the backward on their gradients in dqkv; nothing for a family without. */
void td_m_rope(const td_gpt *m, td_act *qkv, int backward) {
    if (!m->arch->rope) return;
    const td_gpt_dims *d = &m->d;
    int parts[2][2] = {{0, d->Ha}, {d->Ca, d->KVa}}; /* (column, heads) of q and of k */
    for (int i = 0; i < 2; i++) {
        int col = parts[i][0], heads = parts[i][1];
        if (m->rope_doc) { /* --doc-positions reset: each sequence its own table */
            for (int b = 0; b < d->B; b++) {
                void *x = (char *)qkv + (size_t)b * d->T * d->QKV * d->es;
                const float *cs = m->rope_doc + (size_t)b * d->T * d->hs;
                if (!backward) m->ops->rope_fwd(x, cs, 1, d->T, d->QKV, col, heads, d->hs);
                else m->ops->rope_bwd(x, cs, 1, d->T, d->QKV, col, heads, d->hs);
            }
        } else if (!backward)
            m->ops->rope_fwd(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
        else
            m->ops->rope_bwd(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
    }
}

void td_m_residual_forward(const td_gpt *m, td_act *out, const td_act *a, const td_act *b,
                           size_t n) {
    m->ops->res_fwd(out, a, b, n);
}

/* Causal self-attention over the fused qkv[B,T,QKV] of this rank's heads
 * (q: Ha heads at column 0, k and v: KVa heads each at Ca and Ca + KVa hs;
 * GPT-2's KVa = Ha), by the blocked kernel in one call per batch
 * (positions 0..T-1): only the output and the per-row log-sum-exp
 * lse[B,Ha,T] are saved, never the [T,T] scores. */
static td_attn_shape attn_shape(const td_gpt *m) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = {.B = d->B, .Tq = d->T, .Tk = d->T, .NH = d->Ha, .NKV = d->KVa,
                       .hs = d->hs, .q_stride = d->QKV, .kv_stride = d->QKV,
                       .o_stride = d->Ca, .q_pos = 0, .k_pos = 0, .mask = TD_ATTN_CAUSAL,
                       .doc_start = m->doc_start, .doc_len = m->cfg.T};
    return s;
}

/* Under cp the sequence's other chunks are on other ranks: the parallel
 * layer's ring attention (td_model_comm). */
void td_m_attention_forward(const td_gpt *m, td_act *out, float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(m);
    size_t kc = (size_t)d->Ca, vc = kc + (size_t)d->KVa * d->hs;
    if (d->cp > 1)
        m->comm->cp_attention_forward(m->comm->cp_ctx, out, lse, qkv, &s, d->prec);
    else
        m->ops->att_fwd(out, lse, qkv, td_m_at(m, qkv, kc), td_m_at(m, qkv, vc), &s, 0);
}

/* The blocked backward adds into dq, dk, dv, so dqkv starts from zero. */
void td_m_attention_backward(const td_gpt *m, td_act *dqkv, const td_act *dout, const td_act *out,
                             const float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(m);
    size_t kc = (size_t)d->Ca, vc = kc + (size_t)d->KVa * d->hs;
    if (d->cp > 1) {
        m->comm->cp_attention_backward(m->comm->cp_ctx, dqkv, dout, out, lse, qkv, &s, d->prec);
        return;
    }
    td_dev_zero(dqkv, (size_t)d->N * d->QKV * d->es);
    m->ops->att_bwd(dqkv, td_m_at(m, dqkv, kc), td_m_at(m, dqkv, vc), dout, out, lse, qkv,
                    td_m_at(m, qkv, kc), td_m_at(m, qkv, vc), &s);
}
