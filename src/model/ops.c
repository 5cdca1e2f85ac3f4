/* The model's kernels in its precision (--precision): one call site per op
 * in block.c and embed_head.c, and here the choice of kernel family.
 * FP32 calls exactly the kernels.h functions the model always called, so
 * fp32 training keeps its bits; BF16 calls kernels_bf16.h (activations in
 * bf16, math in fp32, GEMMs through oneDNN with fp32 accumulation). The
 * GEMMs are also timed here when td_gpt_gemm_stats_enable is on (the
 * benchmark's achieved GEMM rate). */
#include "internal.h"
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

void td_m_round_n(const td_gpt *m, td_act *dst, const float *src, size_t n) {
    switch (m->d.prec) {
    case TD_PREC_BF16: td_bf16_from_float_n(dst, src, n); return;
    default: TD_ASSERT(0 && "td_m_round_n: not a reduced precision");
    }
}

void td_m_widen_n(const td_gpt *m, float *dst, const td_act *src, size_t n) {
    switch (m->d.prec) {
    case TD_PREC_BF16: td_bf16_to_float_n(dst, src, n); return;
    default: TD_ASSERT(0 && "td_m_widen_n: not a reduced precision");
    }
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
        td_matmul_bf16_forward(out, out32 ? TD_K_F32 : TD_K_BF16, inp, weight_lp(m, unit, wk), bias, N,
                               C, OC);
    stats_end(t0, 2.0 * N * C * OC);
}

void td_m_matmul_backward(td_gpt *m, void *dinp, int dinp32, float *dw, float *dbias,
                          const td_act *dout, const td_act *inp, int unit, td_tensor_kind wk,
                          int N, int C, int OC) {
    double t0 = stats_begin();
    if (!m->d.lp)
        td_matmul_backward(dinp, dw, dbias, dout, inp, dinp ? td_m_w(m, unit, wk) : NULL, N, C, OC);
    else
        td_matmul_bf16_backward(dinp, dinp32 ? TD_K_F32 : TD_K_BF16, dw, dbias, dout, inp,
                                dinp ? weight_lp(m, unit, wk) : NULL, N, C, OC);
    stats_end(t0, 2.0 * N * C * OC * ((dinp ? 1 : 0) + (dw ? 1 : 0)));
}

void td_m_layernorm_forward(const td_gpt *m, td_act *out, float *mean, float *rstd,
                            const td_act *inp, const float *w, const float *b, int N) {
    if (!m->d.lp)
        td_layernorm_forward(out, mean, rstd, inp, w, b, N, m->d.C);
    else
        td_layernorm_bf16_forward(out, mean, rstd, inp, w, b, N, m->d.C);
}

void td_m_layernorm_backward(const td_gpt *m, td_act *dinp, float *dw, float *db,
                             const td_act *dout, const td_act *inp, const float *w,
                             const float *mean, const float *rstd, int N) {
    if (!m->d.lp)
        td_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
    else
        td_layernorm_bf16_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, m->d.C);
}

void td_m_gelu_forward(const td_gpt *m, td_act *out, const td_act *inp, size_t n) {
    if (!m->d.lp)
        td_gelu_forward(out, inp, n);
    else
        td_gelu_bf16_forward(out, inp, n);
}

void td_m_gelu_backward(const td_gpt *m, td_act *dinp, const td_act *inp, const td_act *dout,
                        size_t n) {
    if (!m->d.lp)
        td_gelu_backward(dinp, inp, dout, n);
    else
        td_gelu_bf16_backward(dinp, inp, dout, n);
}

void td_m_residual_forward(const td_gpt *m, td_act *out, const td_act *a, const td_act *b,
                           size_t n) {
    if (!m->d.lp)
        td_residual_forward(out, a, b, n);
    else
        td_residual_bf16_forward(out, a, b, n);
}

void td_m_attention_forward(const td_gpt *m, td_act *out, td_act *att, const td_act *qkv) {
    const td_gpt_dims *d = &m->d;
    if (!d->lp)
        td_attention_forward(out, att, qkv, d->B, d->T, d->Ca, d->Ha);
    else
        td_attention_bf16_forward(out, att, qkv, d->B, d->T, d->Ca, d->Ha);
}

void td_m_attention_backward(const td_gpt *m, td_act *dqkv, const td_act *dout,
                             const td_act *qkv, const td_act *att) {
    const td_gpt_dims *d = &m->d;
    if (!d->lp)
        td_attention_backward(dqkv, m->s.datt, dout, qkv, att, d->B, d->T, d->Ca, d->Ha);
    else
        td_attention_bf16_backward(dqkv, dout, qkv, att, d->B, d->T, d->Ca, d->Ha);
}
