/* The guard device's ops rows: each entry of the CPU's row wrapped, opening
 * only the pages its arguments' extents span, running the CPU entry, and
 * closing them (guard.c's enter and leave). An extent follows from the op's
 * shape arguments, so an op that strays outside it, into the rest of the
 * same buffer, faults as a host access would (backend.h says what page
 * granularity lets through). */
#include <stdlib.h>
#include <string.h>

#include "guard_internal.h"
#include "trident/backend.h"

/* ---- extents --------------------------------------------------------------
 * An op's rule collects its ranges here (this thread's, reset per call)
 * before the enter. */

static _Thread_local td_dev_range *g_want;
static _Thread_local int g_nw, g_cw;

static void want(const void *p, size_t bytes) {
    if (g_nw == g_cw) {
        g_cw = g_cw ? 2 * g_cw : 32;
        g_want = realloc(g_want, (size_t)g_cw * sizeof *g_want);
        TD_ASSERT(g_want);
    }
    g_want[g_nw++] = (td_dev_range){p, bytes};
}

/* A strided view: `rows` rows of `width` elements, `stride` apart, from
 * element `col` of p: the span from the first row's first element to the
 * last row's last (the gaps between rows are opened too). */
static void want_rows(const void *p, size_t es, size_t col, size_t rows, size_t stride,
                      size_t width) {
    if (rows && width) want((const char *)p + col * es, ((rows - 1) * stride + width) * es);
}

/* Attention's views (attention.h): q, dq at q_stride and out, dout at
 * o_stride hold NH heads of the Tq rows of each batch element, q_rows
 * apart; k, v, dk, dv NKV heads of the Tk rows, kv_rows apart. */
static void want_att_q(const void *p, const td_attn_shape *s, size_t es, int stride) {
    size_t per_b = (size_t)(s->q_rows > 0 ? s->q_rows : s->Tq);
    if (s->B > 0 && s->Tq > 0)
        want_rows(p, es, 0, (size_t)(s->B - 1) * per_b + (size_t)s->Tq, (size_t)stride,
                  (size_t)s->NH * (size_t)s->hs);
}
static void want_att_kv(const void *p, const td_attn_shape *s, size_t es) {
    size_t per_b = (size_t)(s->kv_rows > 0 ? s->kv_rows : s->Tk);
    if (s->B > 0 && s->Tk > 0)
        want_rows(p, es, 0, (size_t)(s->B - 1) * per_b + (size_t)s->Tk, (size_t)s->kv_stride,
                  (size_t)s->NKV * (size_t)s->hs);
}

/* Document masking's starts, [B, doc_len] int32, when given. */
static void want_att_doc(const td_attn_shape *s) {
    if (s->doc_start && s->B > 0) want(s->doc_start, (size_t)s->B * (size_t)s->doc_len * sizeof(int));
}

/* adamw's spans: a host array of device ranges (p, m, v, g of n floats). */
static void want_spans(const td_adamw_span *sp, int n) {
    for (int i = 0; i < n; i++) {
        size_t b = sp[i].n * sizeof(float);
        want(sp[i].p, b), want(sp[i].m, b), want(sp[i].v, b), want(sp[i].g, b);
    }
}

/* muon's spans: p, m, g of rows x cols floats each. */
static void want_muon(const td_muon_span *sp, int n) {
    for (int i = 0; i < n; i++) {
        size_t b = (size_t)sp[i].rows * (size_t)sp[i].cols * sizeof(float);
        want(sp[i].p, b), want(sp[i].m, b), want(sp[i].g, b);
    }
}

static size_t kt_size(td_ktype t) { return t == TD_K_F32 ? sizeof(float) : 2; }

/* ---- the table ------------------------------------------------------------
 * GUARD_OPS lists each entry of td_ops with its parameters, its extent rule
 * and its call arguments. A rule is a list of R(pointer, bytes) (bytes:
 * TD_DEV_REST for the rest of the pointer's buffer, where the rows an op
 * reaches are picked by data) and the helpers above; es is the row's
 * activation size, FS / IS / DS fp32's, int's and double's (each product
 * starts with one, so it is computed in size_t). A new entry of td_ops
 * needs one line here with a rule (td_guard_build_rows refuses a row with a
 * CPU entry that has no wrapper, or a wrapper with an empty rule). */

#define R(p, bytes) want((p), (bytes))
#define FS sizeof(float)
#define IS sizeof(int)
#define DS sizeof(double)
#define REST TD_DEV_REST

#define GUARD_OPS(X, P)                                                                            \
    X(P, round_n, (void *dst, const float *src, size_t n), (R(dst, es * n), R(src, FS * n)),       \
      (dst, src, n))                                                                               \
    X(P, widen_n, (float *dst, const void *src, size_t n), (R(dst, FS * n), R(src, es * n)),       \
      (dst, src, n))                                                                               \
    X(P, mm_fwd, (void *out, td_ktype ot, const void *inp, const void *w, const float *bias, int N, \
                  int C, int OC),                                                                  \
      (R(out, kt_size(ot) * N * OC), R(inp, es * N * C), R(w, es * OC * C), R(bias, FS * OC)),     \
      (out, ot, inp, w, bias, N, C, OC))                                                           \
    X(P, mm_bwd, (void *dinp, td_ktype dt, float *dw, float *dbias, const void *dout,             \
                  const void *inp, const void *w, int N, int C, int OC),                           \
      (R(dinp, kt_size(dt) * N * C), R(dw, FS * OC * C), R(dbias, FS * OC), R(dout, es * N * OC),  \
       R(inp, es * N * C), R(w, es * OC * C)),                                                     \
      (dinp, dt, dw, dbias, dout, inp, w, N, C, OC))                                               \
    X(P, ln_fwd, (void *out, float *mean, float *rstd, const void *inp, const float *w,           \
                  const float *b, int N, int C),                                                   \
      (R(out, es * N * C), R(mean, FS * N), R(rstd, FS * N), R(inp, es * N * C), R(w, FS * C),     \
       R(b, FS * C)),                                                                              \
      (out, mean, rstd, inp, w, b, N, C))                                                          \
    X(P, ln_bwd, (void *dinp, float *dw, float *db, const void *dout, const void *inp,            \
                  const float *w, const float *mean, const float *rstd, int N, int C),             \
      (R(dinp, es * N * C), R(dw, FS * C), R(db, FS * C), R(dout, es * N * C), R(inp, es * N * C), \
       R(w, FS * C), R(mean, FS * N), R(rstd, FS * N)),                                            \
      (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                              \
    X(P, rms_fwd, (void *out, float *rstd, const void *inp, const float *w, int N, int C,         \
                   float eps),                                                                     \
      (R(out, es * N * C), R(rstd, FS * N), R(inp, es * N * C), R(w, FS * C)),                     \
      (out, rstd, inp, w, N, C, eps))                                                              \
    X(P, rms_bwd, (void *dinp, float *dw, const void *dout, const void *inp, const float *w,      \
                   const float *rstd, int N, int C),                                               \
      (R(dinp, es * N * C), R(dw, FS * C), R(dout, es * N * C), R(inp, es * N * C), R(w, FS * C),  \
       R(rstd, FS * N)),                                                                           \
      (dinp, dw, dout, inp, w, rstd, N, C))                                                        \
    X(P, gelu_fwd, (void *out, const void *inp, size_t n), (R(out, es * n), R(inp, es * n)),       \
      (out, inp, n))                                                                               \
    X(P, gelu_bwd, (void *dinp, const void *inp, const void *dout, size_t n),                     \
      (R(dinp, es * n), R(inp, es * n), R(dout, es * n)), (dinp, inp, dout, n))                    \
    /* gu [N, 2F]: gate | up */                                                                    \
    X(P, swiglu_fwd, (void *h, const void *gu, int N, int F), (R(h, es * N * F), R(gu, es * N * F * 2)), \
      (h, gu, N, F))                                                                               \
    X(P, swiglu_bwd, (void *dgu, const void *dh, const void *gu, int N, int F),                   \
      (R(dgu, es * N * F * 2), R(dh, es * N * F), R(gu, es * N * F * 2)), (dgu, dh, gu, N, F))     \
    X(P, res_fwd, (void *out, const void *a, const void *b, size_t n),                            \
      (R(out, es * n), R(a, es * n), R(b, es * n)), (out, a, b, n))                                \
    /* rope.h: B*T rows `st` apart, heads*hs columns from col; cs [T, hs] */                       \
    X(P, rope_fwd, (void *x, const float *cs, int B, int T, int st, int col, int heads, int hs),  \
      (want_rows(x, es, (size_t)col, (size_t)B * T, (size_t)st, (size_t)heads * hs),               \
       R(cs, FS * T * hs)),                                                                        \
      (x, cs, B, T, st, col, heads, hs))                                                           \
    X(P, rope_bwd, (void *g, const float *cs, int B, int T, int st, int col, int heads, int hs),  \
      (want_rows(g, es, (size_t)col, (size_t)B * T, (size_t)st, (size_t)heads * hs),               \
       R(cs, FS * T * hs)),                                                                        \
      (g, cs, B, T, st, col, heads, hs))                                                           \
    X(P, att_fwd, (void *out, float *lse, const void *q, const void *k, const void *v,            \
                   const td_attn_shape *s, int acc),                                               \
      (want_att_q(out, s, es, s->o_stride), R(lse, FS * s->B * s->NH * s->Tq),                     \
       want_att_q(q, s, es, s->q_stride), want_att_kv(k, s, es), want_att_kv(v, s, es),            \
       want_att_doc(s)),                                                                           \
      (out, lse, q, k, v, s, acc))                                                                 \
    X(P, att_bwd, (void *dq, void *dk, void *dv, const void *dout, const void *out,               \
                   const float *lse, const void *q, const void *k, const void *v,                  \
                   const td_attn_shape *s),                                                        \
      (want_att_q(dq, s, es, s->q_stride), want_att_kv(dk, s, es), want_att_kv(dv, s, es),         \
       want_att_q(dout, s, es, s->o_stride), want_att_q(out, s, es, s->o_stride),                  \
       R(lse, FS * s->B * s->NH * s->Tq), want_att_q(q, s, es, s->q_stride),                       \
       want_att_kv(k, s, es), want_att_kv(v, s, es), want_att_doc(s)),                             \
      (dq, dk, dv, dout, out, lse, q, k, v, s))                                                    \
    /* the shard's whole table [rows, C]: which rows are read depends on the ids */               \
    X(P, emb_fwd, (float *out, const int *tok, const float *wte, int lo, int rows, int N, int C), \
      (R(out, FS * N * C), R(tok, IS * N), R(wte, FS * rows * C)), (out, tok, wte, lo, rows, N, C)) \
    X(P, emb_bwd, (float *dwte, const float *dout, const int *tok, int lo, int rows, int N,       \
                   int C),                                                                         \
      (R(dwte, FS * rows * C), R(dout, FS * N * C), R(tok, IS * N)),                               \
      (dwte, dout, tok, lo, rows, N, C))                                                           \
    /* wpe rows 0..T-1, or pos[t] (global positions, data): the rest of its buffer */             \
    X(P, pos_fwd, (float *out, const float *wpe, const int *pos, int n0, int N, int T, int C),    \
      (R(out, FS * N * C), R(wpe, pos ? REST : FS * T * C), R(pos, IS * T)),                       \
      (out, wpe, pos, n0, N, T, C))                                                                \
    X(P, pos_bwd, (float *dwpe, const float *dout, const int *pos, int n0, int N, int T, int C),  \
      (R(dwpe, pos ? REST : FS * T * C), R(dout, FS * N * C), R(pos, IS * T)),                     \
      (dwpe, dout, pos, n0, N, T, C))                                                              \
    X(P, xent_max, (float *mx, const float *logits, int N, int V, int Vp),                        \
      (R(mx, FS * N), R(logits, FS * N * Vp)), (mx, logits, N, V, Vp))                             \
    X(P, xent_exp_sum, (float *sum, float *xt, float *probs, const float *logits,                 \
                        const float *mx, const int *tg, int lo, int N, int V, int Vp),             \
      (R(sum, FS * N), R(xt, FS * N), R(probs, FS * N * Vp), R(logits, FS * N * Vp), R(mx, FS * N), \
       R(tg, IS * N)),                                                                             \
      (sum, xt, probs, logits, mx, tg, lo, N, V, Vp))                                              \
    X(P, xent_finish, (float *losses, float *probs, const float *sum, const float *xt,            \
                       const float *mx, const int *tg, int N, int V, int Vp),                      \
      (R(losses, FS * N), R(probs, FS * N * Vp), R(sum, FS * N), R(xt, FS * N), R(mx, FS * N),     \
       R(tg, IS * N)),                                                                             \
      (losses, probs, sum, xt, mx, tg, N, V, Vp))                                                  \
    X(P, xent_bwd, (float *dlogits, const float *probs, const int *tg, int lo, const float *dloss, \
                    int N, int V, int Vp),                                                         \
      (R(dlogits, FS * N * Vp), R(probs, FS * N * Vp), R(tg, IS * N), R(dloss, FS * N)),           \
      (dlogits, probs, tg, lo, dloss, N, V, Vp))                                                   \
    X(P, sumsq, (double *dst, const float *x, size_t n), (R(dst, DS), R(x, FS * n)), (dst, x, n))  \
    X(P, first_nonfinite, (int64_t *dst, const float *x, size_t n),                               \
      (R(dst, sizeof(int64_t)), R(x, FS * n)), (dst, x, n))                                        \
    X(P, scale, (float *x, float s, size_t n), (R(x, FS * n)), (x, s, n))                         \
    X(P, add, (float *dst, const float *src, size_t n), (R(dst, FS * n), R(src, FS * n)),          \
      (dst, src, n))                                                                               \
    X(P, adamw, (const td_adamw_span *sp, int n, const td_adamw_hyper *h), (want_spans(sp, n)),   \
      (sp, n, h))                                                                                  \
    X(P, sum, (double *dst, const float *x, size_t n), (R(dst, DS), R(x, FS * n)), (dst, x, n))    \
    X(P, fill, (float *x, float v, size_t n), (R(x, FS * n)), (x, v, n))                          \
    /* moe (kernels_moe.h): the rows pos[] picks in the send order are data: */                   \
    /* the rest of their buffer */                                                                 \
    X(P, moe_scores, (float *sc, const float *lg, int N, int E, int sm),                          \
      (R(sc, FS * N * E), R(lg, FS * N * E)), (sc, lg, N, E, sm))                                  \
    X(P, moe_gather, (void *dst, const void *src, const int *pos, int N, int K, int C),           \
      (R(dst, REST), R(src, es * N * C), R(pos, IS * N * K)), (dst, src, pos, N, K, C))            \
    /* out [row0 + Ns, C] when shared (read at row0 + r), else [Ns, C] */                          \
    X(P, moe_combine, (float *out, int sh, const void *y, const int *pos, const float *wts,        \
                       int row0, int Ns, int K, int C),                                            \
      (R(out, FS * ((sh ? row0 : 0) + Ns) * C), R(y, REST), R(pos + (size_t)row0 * K, IS * Ns * K), \
       R(wts + (size_t)row0 * K, FS * Ns * K)),                                                    \
      (out, sh, y, pos, wts, row0, Ns, K, C))                                                      \
    X(P, moe_combine_bwd, (float *dw, void *dy, const void *dout, const void *y, const int *pos,  \
                           const float *wts, int N, int K, int C),                                 \
      (R(dw, FS * N * K), R(dy, REST), R(dout, es * N * C), R(y, REST), R(pos, IS * N * K),        \
       R(wts, FS * N * K)),                                                                        \
      (dw, dy, dout, y, pos, wts, N, K, C))                                                        \
    X(P, moe_scatter_add, (float *dst, const void *dx, const int *pos, int N, int K, int C),      \
      (R(dst, FS * N * C), R(dx, REST), R(pos, IS * N * K)), (dst, dx, pos, N, K, C))              \
    /* stats [2E + 3] */                                                                           \
    X(P, moe_router_bwd, (float *dl, const float *dw, const float *lg, const float *sc,           \
                          const int *idx, const float *gate, const float *wts, const float *st,   \
                          const td_moe_router_shape *s),                                           \
      (R(dl, FS * s->N * s->E), R(dw, FS * s->N * s->K), R(lg, FS * s->N * s->E),                  \
       R(sc, FS * s->N * s->E), R(idx, IS * s->N * s->K), R(gate, FS * s->N * s->K),               \
       R(wts, FS * s->N * s->K), R(st, FS * (2 * s->E + 3))),                                      \
      (dl, dw, lg, sc, idx, gate, wts, st, s))                                                     \
    /* muon: p, m, g of rows x cols floats per span */                                             \
    X(P, muon, (const td_muon_span *sp, int n, const td_muon_hyper *h), (want_muon(sp, n)),       \
      (sp, n, h))                                                                                 \
    X(P, muon_momentum, (float *u, const float *g, float *m, size_t n, const td_muon_hyper *h),   \
      (R(u, FS * n), R(g, FS * n), R(m, FS * n)), (u, g, m, n, h))                                 \
    X(P, muon_ns, (float *x, int rows, int cols), (R(x, FS * (size_t)rows * (size_t)cols)),       \
      (x, rows, cols))                                                                             \
    X(P, muon_apply, (float *p, const float *u, size_t n, int rows, int cols, float lr, float wd), \
      (R(p, FS * n), R(u, FS * n)), (p, u, n, rows, cols, lr, wd))

#define GUARD_ID(...) __VA_ARGS__

#define GUARD_KT_f32 TD_K_F32
#define GUARD_KT_bf16 TD_K_BF16
#define GUARD_KT_f16 TD_K_F16

/* The row each wrapper calls: the CPU's, or a test's (td_guard_set_inner). */
static const td_ops *g_inner[3];

#define GUARD_WRAP(P, name, PARAMS, RULE, ARGS)                                                    \
    static void P##_##name PARAMS {                                                                \
        const size_t es = g_inner[GUARD_KT_##P]->es;                                               \
        (void)es;                                                                                  \
        g_nw = 0;                                                                                  \
        GUARD_ID RULE;                                                                             \
        td_guard_enter(g_want, g_nw);                                                              \
        g_inner[GUARD_KT_##P]->name ARGS;                                                          \
        td_guard_leave();                                                                          \
    }
GUARD_OPS(GUARD_WRAP, f32)
GUARD_OPS(GUARD_WRAP, bf16)
GUARD_OPS(GUARD_WRAP, f16)

static td_ops g_rows[3];

typedef void (*guard_fn)(void);
/* td_ops past `es` is function pointers only: a CPU entry the guard row
 * lacks is an entry added to td_ops without its GUARD_OPS line. */
static void guard_ops_check(const td_ops *row, const td_ops *cpu) {
    size_t first = offsetof(td_ops, round_n), n = (sizeof(td_ops) - first) / sizeof(guard_fn);
    for (size_t i = 0; i < n; i++) {
        guard_fn a, b;
        memcpy(&a, (const char *)row + first + i * sizeof a, sizeof a);
        memcpy(&b, (const char *)cpu + first + i * sizeof b, sizeof b);
        if (b && !a)
            td_fail("--device guard: td_ops entry %zu (after es) has no guard wrapper: add its "
                    "line to GUARD_OPS in src/backend/guard_ops.c", i);
    }
}

/* A rule must name the extents (an empty "()" would open nothing, or, if
 * the op touched only host memory, let a later change pass unguarded). */
static void guard_rule_check(const char *name, const char *rule) {
    if (strspn(rule, "() \t\n") == strlen(rule))
        td_fail("--device guard: td_ops entry %s has no extent rule: give its GUARD_OPS line in "
                "src/backend/guard_ops.c the ranges its arguments span", name);
}

#define GUARD_SET(P, name, PARAMS, RULE, ARGS)                                                     \
    row->name = cpu->name ? P##_##name : NULL;                                                     \
    guard_rule_check(#name, #RULE);

#define GUARD_BUILD_ROW(P)                                                                         \
    do {                                                                                           \
        const td_ops *cpu = td_ops_cpu(GUARD_KT_##P);                                              \
        td_ops *row = &g_rows[GUARD_KT_##P];                                                       \
        g_inner[GUARD_KT_##P] = cpu;                                                               \
        row->k = cpu->k;                                                                           \
        row->es = cpu->es;                                                                         \
        GUARD_OPS(GUARD_SET, P)                                                                    \
        guard_ops_check(row, cpu);                                                                 \
    } while (0)

void td_guard_build_rows(void) {
    GUARD_BUILD_ROW(f32);
    GUARD_BUILD_ROW(bf16);
    GUARD_BUILD_ROW(f16);
}

const td_ops *td_guard_row(td_ktype k) {
    TD_ASSERT(k >= 0 && k < 3);
    return &g_rows[k];
}

void td_guard_set_inner(td_ktype k, const td_ops *inner) {
    TD_ASSERT(k >= 0 && k < 3 && g_inner[k]); /* after td_backend_use(TD_DEVICE_GUARD) */
    g_inner[k] = inner ? inner : td_ops_cpu(k);
}
