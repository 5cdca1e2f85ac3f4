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
} lp_family;

static const lp_family BF16 = {
    TD_K_BF16, td_bf16_from_float_n, td_bf16_to_float_n, td_matmul_bf16_forward,
    td_matmul_bf16_backward, td_layernorm_bf16_forward, td_layernorm_bf16_backward,
    td_gelu_bf16_forward, td_gelu_bf16_backward, td_residual_bf16_forward,
    td_attn_bf16_forward, td_attn_bf16_backward,
};

static const lp_family F16 = {
    TD_K_F16, td_f16_from_float_n, td_f16_to_float_n, td_matmul_f16_forward,
    td_matmul_f16_backward, td_layernorm_f16_forward, td_layernorm_f16_backward,
    td_gelu_f16_forward, td_gelu_f16_backward, td_residual_f16_forward,
    td_attn_f16_forward, td_attn_f16_backward,
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

void td_m_matmul_forward(td_gpt *m, void *out, int out32, const td_act *inp, int unit,
                         td_tensor_kind wk, const float *bias, int N, int C, int OC) {
    double t0 = stats_begin();
    if (!m->d.lp)
        td_matmul_forward(out, inp, td_m_w(m, unit, wk), bias, N, C, OC);
    else
        fam(m)->mm_fwd(out, out32 ? TD_K_F32 : fam(m)->k, inp, weight_lp(m, unit, wk), bias, N, C, OC);
    stats_end(t0, 2.0 * N * C * OC);
}

void td_m_matmul_backward(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                          const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                          int N, int C, int OC) {
    double t0 = stats_begin();
    if (!m->d.lp)
        td_matmul_backward(dinp, dw, dbias, dout, inp, dinp ? td_m_w(m, unit, wk) : NULL, N, C, OC);
    else
        fam(m)->mm_bwd(dinp, dinp32 ? TD_K_F32 : fam(m)->k, dw, dbias, dout, inp,
                       dinp ? weight_lp(m, unit, wk) : NULL, N, C, OC);
    stats_end(t0, 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dw ? 1 : 0)));
}

void td_m_layernorm_forward(const td_gpt *m, td_act *out, float *mean, float *rstd,
                            const td_act *inp, const float *w, const float *b, int N) {
    if (!m->d.lp)
        td_layernorm_forward(out, mean, rstd, inp, w, b, N, m->d.C);
    else
        fam(m)->ln_fwd(out, mean, rstd, inp, w, b, N, m->d.C);
}

void td_m_layernorm_backward(const td_gpt *m, td_act *dinp, float *dw, float *db,
                             const td_act *dout, const td_act *inp, const float *w,
                             const float *mean, const float *rstd, int N) {
    if (!m->d.lp)
        td_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
    else
        fam(m)->ln_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
}

void td_m_gelu_forward(const td_gpt *m, td_act *out, const td_act *inp, size_t n) {
    if (!m->d.lp)
        td_gelu_forward(out, inp, n);
    else
        fam(m)->gelu_fwd(out, inp, n);
}

void td_m_gelu_backward(const td_gpt *m, td_act *dinp, const td_act *inp, const td_act *dout,
                        size_t n) {
    if (!m->d.lp)
        td_gelu_backward(dinp, inp, dout, n);
    else
        fam(m)->gelu_bwd(dinp, inp, dout, n);
}

void td_m_residual_forward(const td_gpt *m, td_act *out, const td_act *a, const td_act *b,
                           size_t n) {
    if (!m->d.lp)
        td_residual_forward(out, a, b, n);
    else
        fam(m)->res_fwd(out, a, b, n);
}

/* Causal self-attention over the fused qkv[B,T,3Ca] of this rank's heads,
 * by the blocked kernel in one call per batch (positions 0..T-1): only the
 * output and the per-row log-sum-exp lse[B,Ha,T] are saved, never the
 * [T,T] scores. */
static td_attn_shape attn_shape(const td_gpt_dims *d) {
    td_attn_shape s = {.B = d->B, .Tq = d->T, .Tk = d->T, .NH = d->Ha, .NKV = d->Ha,
                       .hs = d->Ca / d->Ha, .q_stride = 3 * d->Ca, .kv_stride = 3 * d->Ca,
                       .o_stride = d->Ca, .q_pos = 0, .k_pos = 0, .mask = TD_ATTN_CAUSAL};
    return s;
}

/* Under cp the sequence's other chunks are on other ranks: the parallel
 * layer's ring attention (td_model_comm). */
void td_m_attention_forward(const td_gpt *m, td_act *out, float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(d);
    size_t Ca = (size_t)d->Ca;
    if (d->cp > 1) {
        m->comm->cp_attention_forward(m->comm->cp_ctx, out, lse, qkv, &s, d->prec);
    } else if (!d->lp) {
        const float *q = qkv;
        td_attn_forward(out, lse, q, q + Ca, q + 2 * Ca, &s, 0);
    } else {
        const h16 *q = qkv;
        fam(m)->att_fwd(out, lse, q, q + Ca, q + 2 * Ca, &s, 0);
    }
}

/* The blocked backward adds into dq, dk, dv, so dqkv starts from zero. */
void td_m_attention_backward(const td_gpt *m, td_act *dqkv, const td_act *dout, const td_act *out,
                             const float *lse, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    td_attn_shape s = attn_shape(d);
    size_t Ca = (size_t)d->Ca;
    if (d->cp > 1) {
        m->comm->cp_attention_backward(m->comm->cp_ctx, dqkv, dout, out, lse, qkv, &s, d->prec);
        return;
    }
    memset(dqkv, 0, (size_t)d->N * 3 * Ca * d->es);
    if (!d->lp) {
        const float *q = qkv;
        float *dq = dqkv;
        td_attn_backward(dq, dq + Ca, dq + 2 * Ca, dout, out, lse, q, q + Ca, q + 2 * Ca, &s);
    } else {
        const h16 *q = qkv;
        h16 *dq = dqkv;
        fam(m)->att_bwd(dq, dq + Ca, dq + 2 * Ca, dout, out, lse, q, q + Ca, q + 2 * Ca, &s);
    }
}
