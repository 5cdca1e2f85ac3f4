/* The CPU backend: host memory through the accounting allocator and the
 * kernels of src/kernels, one row per precision. The rows are thin
 * wrappers (the table's activations are void*), so every precision calls
 * exactly the kernels the model called before the table: same bits. */
#include <math.h>
#include <string.h>

#include "trident/attention.h"
#include "trident/backend.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"
#include "trident/kernels_moe.h"
#include "trident/rope.h"

/* ---- fp32 --------------------------------------------------------------- */

static void f32_round_n(void *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void f32_widen_n(float *dst, const void *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }

static void f32_mm_fwd(void *out, td_ktype out_type, const void *inp, const void *w,
                       const float *bias, int N, int C, int OC) {
    TD_ASSERT(out_type == TD_K_F32);
    td_matmul_forward(out, inp, w, bias, N, C, OC);
}
static void f32_mm_bwd(void *dinp, td_ktype dinp_type, float *dw, float *dbias, const void *dout,
                       const void *inp, const void *w, int N, int C, int OC) {
    TD_ASSERT(dinp_type == TD_K_F32);
    td_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
}
static void f32_ln_fwd(void *out, float *mean, float *rstd, const void *inp, const float *w,
                       const float *b, int N, int C) {
    td_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
static void f32_ln_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C) {
    td_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void f32_rms_fwd(void *out, float *rstd, const void *inp, const float *w, int N, int C,
                        float eps) {
    td_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
}
static void f32_rms_bwd(void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                        const float *rstd, int N, int C) {
    td_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
}
static void f32_gelu_fwd(void *out, const void *inp, size_t n) { td_gelu_forward(out, inp, n); }
static void f32_gelu_bwd(void *dinp, const void *inp, const void *dout, size_t n) {
    td_gelu_backward(dinp, inp, dout, n);
}
static void f32_swiglu_fwd(void *h, const void *gu, int N, int F) { td_swiglu_forward(h, gu, N, F); }
static void f32_swiglu_bwd(void *dgu, const void *dh, const void *gu, int N, int F) {
    td_swiglu_backward(dgu, dh, gu, N, F);
}
static void f32_res_fwd(void *out, const void *a, const void *b, size_t n) {
    td_residual_forward(out, a, b, n);
}
static void f32_rope_fwd(void *x, const float *cs, int B, int T, int stride, int col, int heads,
                         int hs) {
    td_rope_forward(x, cs, B, T, stride, col, heads, hs);
}
static void f32_rope_bwd(void *g, const float *cs, int B, int T, int stride, int col, int heads,
                         int hs) {
    td_rope_backward(g, cs, B, T, stride, col, heads, hs);
}
static void f32_att_fwd(void *out, float *lse, const void *q, const void *k, const void *v,
                        const td_attn_shape *s, int accumulate) {
    td_attn_forward(out, lse, q, k, v, s, accumulate);
}
static void f32_att_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out,
                        const float *lse, const void *q, const void *k, const void *v,
                        const td_attn_shape *s) {
    td_attn_backward(dq, dk, dv, dout, out, lse, q, k, v, s);
}

/* ---- bf16 and fp16: the two families have the same signatures ---------- */

#define LOWP_ROW(T, P)                                                                             \
    static void P##_round_n(void *dst, const float *src, size_t n) {                             \
        td_##P##_from_float_n(dst, src, n);                                                        \
    }                                                                                              \
    static void P##_widen_n(float *dst, const void *src, size_t n) { td_##P##_to_float_n(dst, src, n); } \
    static void P##_mm_fwd(void *out, td_ktype out_type, const void *inp, const void *w,          \
                           const float *bias, int N, int C, int OC) {                              \
        td_matmul_##P##_forward(out, out_type, inp, w, bias, N, C, OC);                            \
    }                                                                                              \
    static void P##_mm_bwd(void *dinp, td_ktype dinp_type, float *dw, float *dbias,               \
                           const void *dout, const void *inp, const void *w, int N, int C, int OC) { \
        td_matmul_##P##_backward(dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);              \
    }                                                                                              \
    static void P##_ln_fwd(void *out, float *mean, float *rstd, const void *inp, const float *w,  \
                           const float *b, int N, int C) {                                         \
        td_layernorm_##P##_forward(out, mean, rstd, inp, w, b, N, C);                              \
    }                                                                                              \
    static void P##_ln_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,   \
                           const float *w, const float *mean, const float *rstd, int N, int C) {   \
        td_layernorm_##P##_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);                 \
    }                                                                                              \
    static void P##_rms_fwd(void *out, float *rstd, const void *inp, const float *w, int N, int C, \
                            float eps) {                                                           \
        td_rmsnorm_##P##_forward(out, rstd, inp, w, N, C, eps);                                    \
    }                                                                                              \
    static void P##_rms_bwd(void *dinp, float *dw, const void *dout, const void *inp,             \
                            const float *w, const float *rstd, int N, int C) {                     \
        td_rmsnorm_##P##_backward(dinp, dw, dout, inp, w, rstd, N, C);                             \
    }                                                                                              \
    static void P##_gelu_fwd(void *out, const void *inp, size_t n) {                              \
        td_gelu_##P##_forward(out, inp, n);                                                        \
    }                                                                                              \
    static void P##_gelu_bwd(void *dinp, const void *inp, const void *dout, size_t n) {           \
        td_gelu_##P##_backward(dinp, inp, dout, n);                                                \
    }                                                                                              \
    static void P##_swiglu_fwd(void *h, const void *gu, int N, int F) {                           \
        td_swiglu_##P##_forward(h, gu, N, F);                                                      \
    }                                                                                              \
    static void P##_swiglu_bwd(void *dgu, const void *dh, const void *gu, int N, int F) {         \
        td_swiglu_##P##_backward(dgu, dh, gu, N, F);                                               \
    }                                                                                              \
    static void P##_res_fwd(void *out, const void *a, const void *b, size_t n) {                  \
        td_residual_##P##_forward(out, a, b, n);                                                   \
    }                                                                                              \
    static void P##_rope_fwd(void *x, const float *cs, int B, int T, int stride, int col,         \
                             int heads, int hs) {                                                  \
        td_rope_##P##_forward(x, cs, B, T, stride, col, heads, hs);                                \
    }                                                                                              \
    static void P##_rope_bwd(void *g, const float *cs, int B, int T, int stride, int col,         \
                             int heads, int hs) {                                                  \
        td_rope_##P##_backward(g, cs, B, T, stride, col, heads, hs);                               \
    }                                                                                              \
    static void P##_att_fwd(void *out, float *lse, const void *q, const void *k, const void *v,   \
                            const td_attn_shape *s, int accumulate) {                              \
        td_attn_##P##_forward(out, lse, q, k, v, s, accumulate);                                   \
    }                                                                                              \
    static void P##_att_bwd(void *dq, void *dk, void *dv, const void *dout, const void *out,      \
                            const float *lse, const void *q, const void *k, const void *v,        \
                            const td_attn_shape *s) {                                              \
        td_attn_##P##_backward(dq, dk, dv, dout, out, lse, q, k, v, s);                            \
    }

LOWP_ROW(td_bf16, bf16)
LOWP_ROW(td_f16, f16)

/* ---- the optimizer's range operations (fp32 state in every row) -------- */

static void cpu_sumsq(double *dst, const float *x, size_t n) { *dst = td_range_sumsq(x, n); }
static void cpu_first_nonfinite(int64_t *dst, const float *x, size_t n) {
    *dst = td_range_first_nonfinite(x, n);
}

/* Bias corrections in double, as torch computes them in Python floats. */
static void cpu_adamw(const td_adamw_span *s, int n, const td_adamw_hyper *h) {
    TD_ASSERT(h->step >= 1);
    float bc1 = (float)(1.0 - pow(h->beta1, h->step));
    float bc2_sqrt = (float)sqrt(1.0 - pow(h->beta2, h->step));
    for (int i = 0; i < n; i++)
        td_range_adamw(s[i].p, s[i].g, s[i].m, s[i].v, s[i].n, h->lr, h->beta1, h->beta2, h->eps,
                       s[i].wd, bc1, bc2_sqrt, h->grad_scale);
}

/* muon: each span on its own, the step's halves around the row's
 * Newton-Schulz: bf16 iterations in the bf16 row (the speedrun's), fp32 in
 * the fp32 and fp16 rows (fp16 runs: see docs/recipe-muon.md) */
static void cpu_muon_momentum(float *u, const float *g, float *m, size_t n, const td_muon_hyper *h) {
    td_muon_momentum(u, g, m, n, h->momentum, h->nesterov, h->grad_scale);
}

static void f32_muon_ns(float *x, int rows, int cols) { td_muon_ns(x, rows, cols, 5); }
static void bf16_muon_ns(float *x, int rows, int cols) { td_muon_ns_bf16(x, rows, cols, 5); }
#define f16_muon_ns f32_muon_ns

static void muon_spans(const td_muon_span *s, int n, const td_muon_hyper *h, void (*ns)(float *, int, int)) {
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)s[i].rows * (size_t)s[i].cols;
        float *u = td_alloc(sizeof(float) * k, TD_MEM_OTHER);
        cpu_muon_momentum(u, s[i].g, s[i].m, k, h);
        ns(u, s[i].rows, s[i].cols);
        td_muon_apply(s[i].p, u, k, s[i].rows, s[i].cols, h->lr, s[i].wd);
        td_free(u);
    }
}
static void f32_muon(const td_muon_span *s, int n, const td_muon_hyper *h) { muon_spans(s, n, h, f32_muon_ns); }
static void bf16_muon(const td_muon_span *s, int n, const td_muon_hyper *h) { muon_spans(s, n, h, bf16_muon_ns); }
#define f16_muon f32_muon

/* ---- model-ops: the model's former host loops ------------------------- */

static void cpu_sum(double *dst, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *dst = s;
}
static void cpu_fill(float *x, float v, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* ---- moe: kernels_moe.h's functions take the row's type ------------- */

#define MOE_ROW(K, P)                                                                              \
    static void P##_moe_gather(void *dst, const void *src, const int *pos, int N, int Kk, int C) { \
        td_moe_gather(K, dst, src, pos, N, Kk, C);                                                 \
    }                                                                                              \
    static void P##_moe_combine(float *out, int shared, const void *y, const int *pos,             \
                                const float *wts, int row0, int Ns, int Kk, int C) {               \
        td_moe_combine(K, out, shared, y, pos, wts, row0, Ns, Kk, C);                              \
    }                                                                                              \
    static void P##_moe_combine_bwd(float *dw, void *dy, const void *dout, const void *y,          \
                                    const int *pos, const float *wts, int N, int Kk, int C) {      \
        td_moe_combine_backward(K, dw, dy, dout, y, pos, wts, N, Kk, C);                           \
    }                                                                                              \
    static void P##_moe_scatter_add(float *dst, const void *dx, const int *pos, int N, int Kk,     \
                                    int C) {                                                       \
        td_moe_scatter_add(K, dst, dx, pos, N, Kk, C);                                             \
    }

MOE_ROW(TD_K_F32, f32)
MOE_ROW(TD_K_BF16, bf16)
MOE_ROW(TD_K_F16, f16)

/* The precision-independent entries every row shares. */
#define COMMON_ENTRIES                                                                             \
    .emb_fwd = td_embedding_shard_forward, .emb_bwd = td_embedding_shard_backward,                \
    .pos_fwd = td_position_forward, .pos_bwd = td_position_backward, .xent_max = td_xent_max,     \
    .xent_exp_sum = td_xent_exp_sum, .xent_finish = td_xent_finish, .xent_bwd = td_xent_backward, \
    .sumsq = cpu_sumsq, .first_nonfinite = cpu_first_nonfinite, .scale = td_range_scale,          \
    .add = td_range_add, .adamw = cpu_adamw, MODEL_OPS_ENTRIES, .moe_scores = td_moe_router_scores, \
    .moe_router_bwd = td_moe_router_backward,                                 \
    .muon_momentum = cpu_muon_momentum, .muon_apply = td_muon_apply
/* model-ops */
#define MODEL_OPS_ENTRIES .sum = cpu_sum, .fill = cpu_fill

#define ROW(K, ES, P)                                                                              \
    {                                                                                              \
        .k = K, .es = ES, .round_n = P##_round_n, .widen_n = P##_widen_n, .mm_fwd = P##_mm_fwd,    \
        .mm_bwd = P##_mm_bwd, .ln_fwd = P##_ln_fwd, .ln_bwd = P##_ln_bwd, .rms_fwd = P##_rms_fwd,  \
        .rms_bwd = P##_rms_bwd, .gelu_fwd = P##_gelu_fwd, .gelu_bwd = P##_gelu_bwd,                \
        .swiglu_fwd = P##_swiglu_fwd, .swiglu_bwd = P##_swiglu_bwd, .res_fwd = P##_res_fwd,        \
        .rope_fwd = P##_rope_fwd, .rope_bwd = P##_rope_bwd, .att_fwd = P##_att_fwd,                \
        .att_bwd = P##_att_bwd, .moe_gather = P##_moe_gather, .moe_combine = P##_moe_combine,      \
        .moe_combine_bwd = P##_moe_combine_bwd, .moe_scatter_add = P##_moe_scatter_add,            \
        .muon = P##_muon, .muon_ns = P##_muon_ns, COMMON_ENTRIES                                  \
    }

static const td_ops g_rows[3] = {ROW(TD_K_F32, 4, f32), ROW(TD_K_BF16, 2, bf16), ROW(TD_K_F16, 2, f16)};

static const td_ops *cpu_ops(td_ktype k) {
    TD_ASSERT(k >= 0 && k < 3);
    return &g_rows[k];
}

const td_backend td_backend_cpu = {.device = TD_DEVICE_CPU, .ops = cpu_ops};
