/* The model's kernels in its precision (--precision): one call site per op
 * in block.c and embed_head.c, and here the choice of kernel family.
 * FP32 calls exactly the kernels.h functions the model always called, so
 * fp32 training keeps its bits; BF16 and FP16 call their kernel family
 * (kernels_bf16.h, kernels_f16.h: activations in the 16-bit type, math in
 * fp32, GEMMs through oneDNN with fp32 accumulation; fp16's converted to
 * fp32, no fp16 GEMM on this CPU). The
 * GEMMs are also timed here when td_gpt_gemm_stats_enable is on (the
 * benchmark's achieved GEMM rate). */
#include <string.h>

#include "internal.h"
#include "trident/attention.h"
#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"
#include "trident/rope.h"

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

/* The reduced-precision kernel family of each precision: kernels_bf16.h and
 * kernels_f16.h have the same signatures, and td_bf16 and td_f16 are both
 * uint16_t, so one table type holds either (no casts). */
typedef uint16_t h16;
typedef struct {
    td_ktype k;
    void (*round_n)(h16 *dst, const float *src, size_t n);
    void (*widen_n)(float *dst, const h16 *src, size_t n);
    void (*mm_fwd)(void *out, td_ktype out_type, const h16 *inp, const h16 *w, const float *bias,
                   int N, int C, int OC);
    void (*mm_bwd)(void *dinp, td_ktype dinp_type, float *dw, float *dbias, const h16 *dout,
                   const h16 *inp, const h16 *w, int N, int C, int OC);
    void (*ln_fwd)(h16 *out, float *mean, float *rstd, const h16 *inp, const float *w,
                   const float *b, int N, int C);
    void (*ln_bwd)(h16 *dinp, float *dw, float *db, const h16 *dout, const h16 *inp,
                   const float *w, const float *mean, const float *rstd, int N, int C);
    void (*gelu_fwd)(h16 *out, const h16 *inp, size_t n);
    void (*gelu_bwd)(h16 *dinp, const h16 *inp, const h16 *dout, size_t n);
    void (*res_fwd)(h16 *out, const h16 *a, const h16 *b, size_t n);
    void (*att_fwd)(h16 *out, float *lse, const h16 *q, const h16 *k, const h16 *v,
                    const td_attn_shape *s, int accumulate);
    void (*att_bwd)(h16 *dq, h16 *dk, h16 *dv, const h16 *dout, const h16 *out, const float *lse,
                    const h16 *q, const h16 *k, const h16 *v, const td_attn_shape *s);
    void (*rms_fwd)(h16 *out, float *rstd, const h16 *inp, const float *w, int N, int C, float eps);
    void (*rms_bwd)(h16 *dinp, float *dw, const h16 *dout, const h16 *inp, const float *w,
                    const float *rstd, int N, int C);
    void (*swiglu_fwd)(h16 *h, const h16 *gu, int N, int F);
    void (*swiglu_bwd)(h16 *dgu, const h16 *dh, const h16 *gu, int N, int F);
    void (*rope_fwd)(h16 *x, const float *cs, int B, int T, int stride, int col, int heads, int hs);
    void (*rope_bwd)(h16 *g, const float *cs, int B, int T, int stride, int col, int heads, int hs);
} lp_family;

static const lp_family BF16 = {
    TD_K_BF16, td_bf16_from_float_n, td_bf16_to_float_n, td_matmul_bf16_forward,
    td_matmul_bf16_backward, td_layernorm_bf16_forward, td_layernorm_bf16_backward,
    td_gelu_bf16_forward, td_gelu_bf16_backward, td_residual_bf16_forward,
    td_attn_bf16_forward, td_attn_bf16_backward, td_rmsnorm_bf16_forward, td_rmsnorm_bf16_backward,
    td_swiglu_bf16_forward, td_swiglu_bf16_backward, td_rope_bf16_forward, td_rope_bf16_backward,
};

static const lp_family F16 = {
    TD_K_F16, td_f16_from_float_n, td_f16_to_float_n, td_matmul_f16_forward,
    td_matmul_f16_backward, td_layernorm_f16_forward, td_layernorm_f16_backward,
    td_gelu_f16_forward, td_gelu_f16_backward, td_residual_f16_forward,
    td_attn_f16_forward, td_attn_f16_backward, td_rmsnorm_f16_forward, td_rmsnorm_f16_backward,
    td_swiglu_f16_forward, td_swiglu_f16_backward, td_rope_f16_forward, td_rope_f16_backward,
};

static const lp_family *fam(const td_gpt *m) {
    TD_ASSERT(m->d.lp);
    return m->d.prec == TD_PREC_FP16 ? &F16 : &BF16;
}

void td_m_round_n(const td_gpt *m, td_act *dst, const float *src, size_t n) {
    fam(m)->round_n(dst, src, n);
}

void td_m_widen_n(const td_gpt *m, float *dst, const td_act *src, size_t n) {
    fam(m)->widen_n(dst, src, n);
}

static const void *weight_lp(td_gpt *m, int unit, td_tensor_kind k) {
    return (const char *)td_m_unit_lp(m, unit) + m->off[k] * m->d.es;
}

void td_m_matmul_forward_at(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                            td_tensor_kind wk, size_t woff, const float *bias, int N, int C, int OC) {
    double t0 = stats_begin();
    if (!m->d.lp)
        td_matmul_forward(out, inp, td_m_w(m, unit, wk) + woff, bias, N, C, OC);
    else
        fam(m)->mm_fwd(out, out32 ? TD_K_F32 : fam(m)->k, inp,
                       (const h16 *)weight_lp(m, unit, wk) + woff, bias, N, C, OC);
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
    if (!m->d.lp)
        td_matmul_backward(dinp, dw, dbias, dout, inp, dinp ? td_m_w(m, unit, wk) + woff : NULL, N, C, OC);
    else
        fam(m)->mm_bwd(dinp, dinp32 ? TD_K_F32 : fam(m)->k, dw, dbias, dout, inp,
                       dinp ? (const h16 *)weight_lp(m, unit, wk) + woff : NULL, N, C, OC);
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
    int rms = m->arch->norm == TD_NORM_RMS;
    float eps = m->cfg.norm_eps;
    if (!m->d.lp && rms)
        td_rmsnorm_forward(out, rstd, inp, w, N, m->d.C, eps);
    else if (!m->d.lp)
        td_layernorm_forward(out, mean, rstd, inp, w, b, N, m->d.C);
    else if (rms)
        fam(m)->rms_fwd(out, rstd, inp, w, N, m->d.C, eps);
    else
        fam(m)->ln_fwd(out, mean, rstd, inp, w, b, N, m->d.C);
}

void td_m_norm_op_backward(const td_gpt *m, td_act *dinp, float *dw, float *db, const td_act *dout,
                           const td_act *inp, const float *w, const float *mean, const float *rstd, int N) {
    int rms = m->arch->norm == TD_NORM_RMS;
    if (!m->d.lp && rms)
        td_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, m->d.C);
    else if (!m->d.lp)
        td_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
    else if (rms)
        fam(m)->rms_bwd(dinp, dw, dout, inp, w, rstd, N, m->d.C);
    else
        fam(m)->ln_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
}

/* The MLP's activation: GELU of fc [N,F] (out [N,F]), or SwiGLU of the
 * fused gate|up [N,2F] (out [N,F]). */
void td_m_mlp_act_forward(const td_gpt *m, td_act *out, const td_act *inp, int N, int F) {
    int swiglu = m->arch->mlp == TD_MLP_SWIGLU;
    size_t n = (size_t)N * F;
    if (!m->d.lp && swiglu)
        td_swiglu_forward(out, inp, N, F);
    else if (!m->d.lp)
        td_gelu_forward(out, inp, n);
    else if (swiglu)
        fam(m)->swiglu_fwd(out, inp, N, F);
    else
        fam(m)->gelu_fwd(out, inp, n);
}

/* dinp ([N,F1], zeroed by the caller) from dout [N,F]: GELU's backward
 * adds, SwiGLU's writes. */
void td_m_mlp_act_backward(const td_gpt *m, td_act *dinp, const td_act *inp, const td_act *dout,
                           int N, int F) {
    int swiglu = m->arch->mlp == TD_MLP_SWIGLU;
    size_t n = (size_t)N * F;
    if (!m->d.lp && swiglu)
        td_swiglu_backward(dinp, dout, inp, N, F);
    else if (!m->d.lp)
        td_gelu_backward(dinp, inp, dout, n);
    else if (swiglu)
        fam(m)->swiglu_bwd(dinp, dout, inp, N, F);
    else
        fam(m)->gelu_bwd(dinp, inp, dout, n);
}

/* Rotary positions on q and k of the fused qkv [N, QKV] (in place), or
 * the backward on their gradients in dqkv; nothing for a family without. */
void td_m_rope(const td_gpt *m, td_act *qkv, int backward) {
    if (!m->arch->rope) return;
    const td_gpt_dims *d = &m->d;
    int parts[2][2] = {{0, d->Ha}, {d->Ca, d->KVa}}; /* (column, heads) of q and of k */
    for (int i = 0; i < 2; i++) {
        int col = parts[i][0], heads = parts[i][1];
        if (!d->lp && !backward)
            td_rope_forward(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
        else if (!d->lp)
            td_rope_backward(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
        else if (!backward)
            fam(m)->rope_fwd(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
        else
            fam(m)->rope_bwd(qkv, m->rope_cs, d->B, d->T, d->QKV, col, heads, d->hs);
    }
}

void td_m_residual_forward(const td_gpt *m, td_act *out, const td_act *a, const td_act *b,
                           size_t n) {
    if (!m->d.lp)
        td_residual_forward(out, a, b, n);
    else
        fam(m)->res_fwd(out, a, b, n);
}

/* Causal self-attention over the fused qkv[B,T,QKV] of this rank's heads
 * (q: Ha heads at column 0, k and v: KVa heads each at Ca and Ca + KVa hs;
 * GPT-2's KVa = Ha), by the blocked kernel in one call per batch
 * (positions 0..T-1): only the output and the per-row log-sum-exp
 * lse[B,Ha,T] are saved, never the [T,T] scores. */
static td_attn_shape attn_shape(const td_gpt_dims *d) {
    td_attn_shape s = {.B = d->B, .Tq = d->T, .Tk = d->T, .NH = d->Ha, .NKV = d->KVa,
                       .hs = d->hs, .q_stride = d->QKV, .kv_stride = d->QKV,
                       .o_stride = d->Ca, .q_pos = 0, .k_pos = 0, .mask = TD_ATTN_CAUSAL};
    return s;
}

/* Under cp the sequence's other chunks are on other ranks: the parallel
 * layer's ring attention (td_model_comm). */
void td_m_attention_forward(const td_gpt *m, td_act *out, float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(d);
    size_t kc = (size_t)d->Ca, vc = kc + (size_t)d->KVa * d->hs;
    if (d->cp > 1) {
        m->comm->cp_attention_forward(m->comm->cp_ctx, out, lse, qkv, &s, d->prec);
    } else if (!d->lp) {
        const float *q = qkv;
        td_attn_forward(out, lse, q, q + kc, q + vc, &s, 0);
    } else {
        const h16 *q = qkv;
        fam(m)->att_fwd(out, lse, q, q + kc, q + vc, &s, 0);
    }
}

/* The blocked backward adds into dq, dk, dv, so dqkv starts from zero. */
void td_m_attention_backward(const td_gpt *m, td_act *dqkv, const td_act *dout, const td_act *out,
                             const float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(d);
    size_t kc = (size_t)d->Ca, vc = kc + (size_t)d->KVa * d->hs;
    if (d->cp > 1) {
        m->comm->cp_attention_backward(m->comm->cp_ctx, dqkv, dout, out, lse, qkv, &s, d->prec);
        return;
    }
    memset(dqkv, 0, (size_t)d->N * d->QKV * d->es);
    if (!d->lp) {
        const float *q = qkv;
        float *dq = dqkv;
        td_attn_backward(dq, dq + kc, dq + vc, dout, out, lse, q, q + kc, q + vc, &s);
    } else {
        const h16 *q = qkv;
        h16 *dq = dqkv;
        fam(m)->att_bwd(dq, dq + kc, dq + vc, dout, out, lse, q, q + kc, q + vc, &s);
    }
}
