/* The 16-bit blocked attention (attention.h; attention_lowp.c: block
 * products as bf16 / fp16 GEMMs with fp32 accumulation, P and dS rounded to
 * 16 bits before their GEMMs). Oracles:
 *  1. the double reference (attn_dref.h) on the rounded inputs, with a
 *     bound per element derived from the kernel's roundings (below);
 *  2. the fp32 blocked kernel on the same rounded inputs (its backward
 *     given the rounded out, as the 16-bit one is): the same bound plus the
 *     fp32 kernel's own tolerance against double;
 *  3. self-consistency: the same rows read through strided views (row
 *     strides past the heads, q_rows / kv_rows pitches) bitwise equal to
 *     dense ones, 1 vs 2 threads bitwise, ring pieces (accumulate = 1)
 *     against the double reference with the merges' roundings added.
 * Bounds. u is the type's unit roundoff (bf16 2^-8, fp16 2^-11) and eta
 * the absolute error of rounding a value below the normal range (fp16:
 * 2^-25, half its subnormal spacing; bf16: 0, its range is fp32's): a
 * rounding moves x by at most u|x| + eta. First order in u:
 *  out_i = sum_j p^_j v_j / l with p^_j = round(p_j), p_j = exp(s_j - m)
 *   <= 1 and l >= 1 (the max term is 1; later rescales only shrink it), so
 *   |out - exact| <= u sum_j P_ij |v_j| + eta sum_j |v_j| =: bo_i.
 *  Backward, P = exp(s - lse) (normalised) and dS = P (dP - D) scale are
 *   rounded before their GEMMs; D is taken with the ROUNDED out o^, which
 *   moves it by dD_i <= sum_d |dO_id| |o^_id - o_id| and dS by P scale dD_i:
 *   bv_j = sum_i (u P_ij + eta) |dO_i|,
 *   bk_j = sum_i (u |dS_ij| + eta + P_ij scale dD_i) |q_i|,
 *   bq_i = sum_j (u |dS_ij| + eta + P_ij scale dD_i) |k_j|.
 *  Each output is then rounded once (gradients as old + new): + u |exp| +
 *  eta, the bound itself by (1 + u). On top, the fp32 arithmetic's own
 *  distance: TOL_FWD / TOL_BWD (|g| + FLOOR rms(g)) of the fp32 part g, as
 *  test_attention_blocked.c derives them (twice that against the fp32
 *  kernel, which has its own). Ring pieces: each merge rounds the merged
 *  out, a convex combination of v, so pieces x (u max_j |v_j| + eta) more.
 * The bound is worst-case (all roundings aligned); a wrong scale, mask or
 * missed key block is off by O(0.1), many times the bound (~1e-2 bf16). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_dref.h"
#include "test_util.h"
#include "trident/attention.h"
#include "trident/kernels.h"

#define TOL_FWD 1e-5
#define TOL_BWD 2e-5
#define FLOOR 0.1

typedef struct {
    int f16;
    double u, eta;
} lp;

/* The bounds of the header before the final rounding (attn_dref.h),
 * zeroed first; dD from |o^ - o|, o^ the 16-bit kernel's rounded out. */
static void bounds(double *bo, double *bq, double *bk, double *bv, const double *oh, const prob *p,
                   const lp *t) {
    double *ro = TU_NEW(double, p->nq), *rl = TU_NEW(double, p->nl), *oe = TU_NEW(double, p->nq);
    dref(ro, rl, NULL, NULL, NULL, NULL, p->dq_, p->dk_, p->dv_, &p->s);
    for (size_t i = 0; i < p->nq; i++) oe[i] = fabs(oh[i] - ro[i]);
    memset(bo, 0, p->nq * 8), memset(bq, 0, p->nq * 8);
    memset(bk, 0, p->nk * 8), memset(bv, 0, p->nk * 8);
    attn_lp_bounds(bo, bq, bk, bv, oe, p->dq_, p->dk_, p->dv_, p->dd, &p->s, t->u, t->eta);
}

static void to16(const lp *t, void *d, const float *s, size_t n) {
    if (t->f16)
        td_f16_from_float_n(d, s, n);
    else
        td_bf16_from_float_n(d, s, n);
}
static void from16(const lp *t, float *d, const void *s, size_t n) {
    if (t->f16)
        td_f16_to_float_n(d, s, n);
    else
        td_bf16_to_float_n(d, s, n);
}
static double *d16(const lp *t, const uint16_t *s, size_t n) {
    float *f = TU_NEW(float, n);
    from16(t, f, s, n);
    return tu_to_double(f, n);
}

static void fwd16(const lp *t, uint16_t *o, float *l, uint16_t *const *x, const td_attn_shape *s,
                  int acc) {
    if (t->f16)
        td_attn_f16_forward(o, l, x[0], x[1], x[2], s, acc);
    else
        td_attn_bf16_forward(o, l, x[0], x[1], x[2], s, acc);
}
static void bwd16(const lp *t, uint16_t *const *g, const uint16_t *dout, const uint16_t *o,
                  const float *l, uint16_t *const *x, const td_attn_shape *s) {
    if (t->f16)
        td_attn_f16_backward(g[0], g[1], g[2], dout, o, l, x[0], x[1], x[2], s);
    else
        td_attn_bf16_backward(g[0], g[1], g[2], dout, o, l, x[0], x[1], x[2], s);
}

static double rms(const double *x, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    return n ? sqrt(ss / n) : 0;
}

/* |got - exp| <= (1 + u) b + u |exp| + eta + tol32 (|g| + FLOOR rms(g)),
 * g the part computed in fp32 (exp less the gradient's old value). */
static void check_bound(const char *name, const float *got, const double *exp, const double *g,
                        const double *b, size_t n, const lp *t, double tol32) {
    double fl = FLOOR * rms(g, n), worst = 0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = (1 + t->u) * b[i] + t->u * fabs(exp[i]) + t->eta + tol32 * (fabs(g[i]) + fl);
        double r = fabs((double)got[i] - exp[i]) / lim;
        if (!(r <= 1.0)) bad = 1;
        if (!(r <= worst)) worst = r, wi = i;
    }
    TU_EXPECT(!bad, "%s: [%zu] got %.9g expected %.9g (%.2f x its bound)", name, wi,
              (double)got[wi], exp[wi], worst);
    printf("%s  %-52s n=%-6zu max |err| / bound %.3f\n", bad ? "FAIL" : "PASS", name, n, worst);
}

#define check_lse(name, got, exp, n, tol) attn_check_lse(name, got, exp, n, tol, FLOOR)

static char lbl[160];
#define L(...) (snprintf(lbl, sizeof lbl, __VA_ARGS__), lbl)

/* The tensors of p rounded to 16 bits (p's float and double copies become
 * the rounded values): x = q, k, v; dout; g = starting dq, dk, dv. */
typedef struct {
    uint16_t *x[3], *dout, *g[3];
    double *g0[3];
} inputs;

static inputs round_inputs(prob *p, const lp *t) {
    inputs in;
    float *f[4] = {p->q, p->k, p->v, p->dout};
    double **dd[4] = {&p->dq_, &p->dk_, &p->dv_, &p->dd};
    size_t n[4] = {p->nq, p->nk, p->nk, p->nq};
    for (int i = 0; i < 4; i++) {
        uint16_t *h = TU_NEW(uint16_t, n[i]);
        to16(t, h, f[i], n[i]);
        from16(t, f[i], h, n[i]);
        *dd[i] = tu_to_double(f[i], n[i]);
        if (i < 3)
            in.x[i] = h;
        else
            in.dout = h;
    }
    for (int i = 0; i < 3; i++) {
        size_t m = i ? p->nk : p->nq;
        float *r = TU_NEW(float, m);
        in.g[i] = TU_NEW(uint16_t, m);
        tu_randn(r, m, 900 + i, 0.05f); /* small: the gradient, not the old value, dominates */
        to16(t, in.g[i], r, m);
        in.g0[i] = d16(t, in.g[i], m);
    }
    return in;
}

static uint16_t *copy16(const uint16_t *s, size_t n) {
    uint16_t *d = TU_NEW(uint16_t, n);
    memcpy(d, s, n * 2);
    return d;
}

/* rows [B, rows, width] dense into [B, pitch, stride] (other cells junk). */
static uint16_t *spread(const uint16_t *s, int B, int rows, int width, int pitch, int stride) {
    uint16_t *d = TU_NEW(uint16_t, (size_t)B * pitch * stride);
    for (size_t i = 0; i < (size_t)B * pitch * stride; i++) d[i] = 0x7fc0; /* NaN in both types */
    for (int b = 0; b < B; b++)
        for (int r = 0; r < rows; r++)
            memcpy(d + ((size_t)b * pitch + r) * stride, s + ((size_t)b * rows + r) * width,
                   width * 2);
    return d;
}
static float *gather(const lp *t, const uint16_t *s, int B, int rows, int width, int pitch,
                     int stride) {
    uint16_t *h = TU_NEW(uint16_t, (size_t)B * rows * width);
    for (int b = 0; b < B; b++)
        for (int r = 0; r < rows; r++)
            memcpy(h + ((size_t)b * rows + r) * width, s + ((size_t)b * pitch + r) * stride,
                   width * 2);
    float *f = TU_NEW(float, (size_t)B *rows *width);
    from16(t, f, h, (size_t)B * rows * width);
    return f;
}

static void test_lowp_docs(const lp *t, int B, int Tq, int Tk, int NH, int NKV, int hs, long qp,
                           long kp, td_attn_mask mask, const int *const *cuts, int len) {
    int mark = tu_mark();
    prob p = make(B, Tq, Tk, NH, NKV, hs, qp, kp, mask, 800 + Tq + Tk);
    attn_set_docs(&p.s, len, cuts);
    inputs in = round_inputs(&p, t);
    const char *ty = t->f16 ? "fp16" : "bf16";
    char tag[80];
    snprintf(tag, sizeof tag, "%s Tq%d Tk%d NH%d/%d %s%s q%ld", ty, Tq, Tk, NH, NKV,
             mask == TD_ATTN_CAUSAL ? "causal" : "none", cuts ? " docs" : "", qp);
    /* the 16-bit kernel */
    uint16_t *oh = TU_NEW(uint16_t, p.nq), *g[3];
    float *lh = TU_NEW(float, p.nl);
    for (int i = 0; i < 3; i++) g[i] = copy16(in.g[i], i ? p.nk : p.nq);
    fwd16(t, oh, lh, in.x, &p.s, 0);
    bwd16(t, g, in.dout, oh, lh, in.x, &p.s);
    /* double reference and bounds */
    double *ro = TU_NEW(double, p.nq), *rl = TU_NEW(double, p.nl);
    double *rg[3] = {TU_NEW(double, p.nq), TU_NEW(double, p.nk), TU_NEW(double, p.nk)};
    dref(ro, rl, rg[0], rg[1], rg[2], p.dd, p.dq_, p.dk_, p.dv_, &p.s);
    double *b[4] = {TU_NEW(double, p.nq), TU_NEW(double, p.nq), TU_NEW(double, p.nk),
                    TU_NEW(double, p.nk)};
    double *ohd = d16(t, oh, p.nq);
    bounds(b[0], b[1], b[2], b[3], ohd, &p, t);
    float *of = TU_NEW(float, p.nq);
    from16(t, of, oh, p.nq);
    check_bound(L("%s out vs double", tag), of, ro, ro, b[0], p.nq, t, TOL_FWD);
    check_lse(L("%s lse vs double", tag), lh, rl, p.nl, TOL_FWD);
    /* the fp32 kernel on the same inputs; its backward from the same start, with the rounded out */
    float *o32 = TU_NEW(float, p.nq), *l32 = TU_NEW(float, p.nl), *f32[3];
    td_attn_forward(o32, l32, p.q, p.k, p.v, &p.s, 0);
    double *od = tu_to_double(o32, p.nq);
    check_bound(L("%s out vs fp32 kernel", tag), of, od, od, b[0], p.nq, t, 2 * TOL_FWD);
    check_lse(L("%s lse vs fp32 kernel", tag), lh, tu_to_double(l32, p.nl), p.nl, 2 * TOL_FWD);
    for (int k = 0; k < 3; k++) {
        size_t m = k ? p.nk : p.nq;
        from16(t, f32[k] = TU_NEW(float, m), in.g[k], m);
    }
    td_attn_backward(f32[0], f32[1], f32[2], p.dout, of, lh, p.q, p.k, p.v, &p.s);
    const char *gn[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        size_t m = i ? p.nk : p.nq;
        double *e = TU_NEW(double, m);
        for (size_t j = 0; j < m; j++) e[j] = in.g0[i][j] + rg[i][j];
        float *gf = TU_NEW(float, m);
        from16(t, gf, g[i], m);
        check_bound(L("%s %s vs double", tag, gn[i]), gf, e, rg[i], b[i + 1], m, t, TOL_BWD);
        check_bound(L("%s %s vs fp32 kernel", tag, gn[i]), gf, tu_to_double(f32[i], m), rg[i],
                    b[i + 1], m, t, 2 * TOL_BWD);
    }
    /* strided views: rows 8 elements wider, 3 more rows per batch element */
    td_attn_shape v = p.s;
    int wq = NH * hs, wk = NKV * hs;
    v.q_stride = v.o_stride = wq + 8, v.kv_stride = wk + 8, v.q_rows = Tq + 3, v.kv_rows = Tk + 3;
    uint16_t *x[3] = {spread(in.x[0], B, Tq, wq, Tq + 3, wq + 8),
                      spread(in.x[1], B, Tk, wk, Tk + 3, wk + 8),
                      spread(in.x[2], B, Tk, wk, Tk + 3, wk + 8)};
    uint16_t *gv[3] = {spread(in.g[0], B, Tq, wq, Tq + 3, wq + 8),
                       spread(in.g[1], B, Tk, wk, Tk + 3, wk + 8),
                       spread(in.g[2], B, Tk, wk, Tk + 3, wk + 8)};
    uint16_t *ov = spread(oh, B, Tq, wq, Tq + 3, wq + 8),
             *dv = spread(in.dout, B, Tq, wq, Tq + 3, wq + 8);
    float *lv = TU_NEW(float, p.nl);
    fwd16(t, ov, lv, x, &v, 0);
    bwd16(t, gv, dv, ov, lv, x, &v);
    float *a = TU_NEW(float, p.nq);
    from16(t, a, oh, p.nq);
    tu_check_bitwise(L("%s views = dense: out", tag), gather(t, ov, B, Tq, wq, Tq + 3, wq + 8), a,
                     p.nq);
    tu_check_bitwise(L("%s views = dense: lse", tag), lv, lh, p.nl);
    for (int i = 0; i < 3; i++) {
        int rows = i ? Tk : Tq, w = i ? wk : wq;
        size_t m = (size_t)B * rows * w;
        float *d = TU_NEW(float, m);
        from16(t, d, g[i], m);
        tu_check_bitwise(L("%s views = dense: %s", tag, gn[i]),
                         gather(t, gv[i], B, rows, w, rows + 3, w + 8), d, m);
    }
    /* 2 threads vs 1 */
    td_kernels_set_threads(2);
    uint16_t *o2 = TU_NEW(uint16_t, p.nq), *g2[3];
    float *l2 = TU_NEW(float, p.nl);
    for (int i = 0; i < 3; i++) g2[i] = copy16(in.g[i], i ? p.nk : p.nq);
    fwd16(t, o2, l2, in.x, &p.s, 0);
    bwd16(t, g2, in.dout, o2, l2, in.x, &p.s);
    td_kernels_set_threads(1);
    TU_EXPECT(!memcmp(o2, oh, p.nq * 2) && !memcmp(l2, lh, p.nl * 4) &&
                  !memcmp(g2[0], g[0], p.nq * 2) && !memcmp(g2[1], g[1], p.nk * 2) &&
                  !memcmp(g2[2], g[2], p.nk * 2),
              "%s: 2 threads differ from 1", tag);
    printf("      %s: 2 threads vs 1 checked bitwise (out, lse, dq, dk, dv)\n", tag);
    attn_set_docs(&p.s, 0, NULL);
    tu_release(mark);
}

static void test_lowp(const lp *t, int B, int Tq, int Tk, int NH, int NKV, int hs, long qp, long kp,
                      td_attn_mask mask) {
    test_lowp_docs(t, B, Tq, Tk, NH, NKV, hs, qp, kp, mask, NULL, 0);
}

/* Ring pieces: K/V in `pieces` dense pieces merged with accumulate = 1. */
static void test_ring(const lp *t, int pieces) {
    int mark = tu_mark(), B = 2, Tq = 150, Tk = 300, NKV = 2, hs = 16;
    prob p = make(B, Tq, Tk, 4, NKV, hs, 100, 0, TD_ATTN_CAUSAL, 950);
    inputs in = round_inputs(&p, t);
    uint16_t *o = TU_NEW(uint16_t, p.nq);
    float *l = TU_NEW(float, p.nl);
    int w = NKV * hs, per = (Tk + pieces - 1) / pieces;
    for (int c = 0; c < pieces; c++) {
        int j0 = c * per, n = Tk - j0 < per ? Tk - j0 : per;
        uint16_t *pk = TU_NEW(uint16_t, (size_t)B * n * w),
                 *pv = TU_NEW(uint16_t, (size_t)B * n * w);
        for (int b = 0; b < B; b++) {
            memcpy(pk + (size_t)b * n * w, in.x[1] + ((size_t)b * Tk + j0) * w, (size_t)n * w * 2);
            memcpy(pv + (size_t)b * n * w, in.x[2] + ((size_t)b * Tk + j0) * w, (size_t)n * w * 2);
        }
        td_attn_shape s = p.s;
        s.Tk = n, s.k_pos = j0;
        uint16_t *x[3] = {in.x[0], pk, pv};
        fwd16(t, o, l, x, &s, c > 0);
    }
    double *ro = TU_NEW(double, p.nq), *rl = TU_NEW(double, p.nl), *b[4];
    dref(ro, rl, NULL, NULL, NULL, NULL, p.dq_, p.dk_, p.dv_, &p.s);
    for (int i = 0; i < 4; i++) b[i] = TU_NEW(double, i < 2 ? p.nq : p.nk);
    bounds(b[0], b[1], b[2], b[3], ro, &p, t);
    /* the merges' roundings: pieces x (u max_j |v_j| + eta), per kv column */
    for (size_t r = 0; r < (size_t)B * Tq; r++)
        for (int c = 0; c < 4 * hs; c++) {
            double mv = 0;
            for (int j = 0; j < Tk; j++)
                mv = fmax(
                    mv, fabs(p.dv_[((size_t)(r / Tq) * Tk + j) * w + (c / hs / 2) * hs + c % hs]));
            b[0][r * 4 * hs + c] += pieces * (t->u * mv + t->eta);
        }
    float *of = TU_NEW(float, p.nq);
    from16(t, of, o, p.nq);
    check_bound(L("%s ring %d pieces out vs double", t->f16 ? "fp16" : "bf16", pieces), of, ro, ro,
                b[0], p.nq, t, TOL_FWD);
    check_lse(L("%s ring %d pieces lse vs double", t->f16 ? "fp16" : "bf16", pieces), l, rl, p.nl,
              TOL_FWD);
    tu_release(mark);
}

int main(void) {
    td_kernels_set_threads(1);
    lp types[2] = {{0, 1.0 / 256, 0.0}, {1, 1.0 / 2048, 1.0 / 33554432}};
    for (int k = 0; k < 2; k++) {
        const lp *t = &types[k];
        /* several query and key blocks, T not a multiple of a block, GQA,
         * an offset, rows that see no key, no mask, Tq != Tk, one key */
        test_lowp(t, 2, 150, 300, 4, 2, 16, 100, 0, TD_ATTN_CAUSAL);
        test_lowp(t, 1, 70, 200, 4, 1, 32, 0, 20, TD_ATTN_CAUSAL);
        test_lowp(t, 1, 33, 140, 2, 2, 64, 0, 0, TD_ATTN_NONE);
        test_lowp(t, 2, 130, 130, 3, 3, 16, 0, 0, TD_ATTN_CAUSAL);
        test_lowp(t, 1, 5, 1, 2, 2, 8, 0, 0, TD_ATTN_CAUSAL);
        test_ring(t, 3);
        /* document masking (the reference's explicit mask of document ids):
         * documents inside and across key blocks, whole blocks skipped, a
         * context-parallel piece at offsets */
        static const int c0[] = {1, 30, 70, 128, 129, -1}, c1[] = {64, 65, 66, 100, -1};
        static const int c3[] = {10, 140, 141, 190, 250, -1};
        const int *const two[] = {c0, c1}, *const one[] = {c3};
        test_lowp_docs(t, 2, 130, 130, 3, 3, 16, 0, 0, TD_ATTN_CAUSAL, two, 130);
        test_lowp_docs(t, 1, 150, 300, 4, 2, 16, 100, 0, TD_ATTN_CAUSAL, one, 300);
    }
    td_attn_release_scratch();
    return tu_finish("test_attention_lowp");
}
