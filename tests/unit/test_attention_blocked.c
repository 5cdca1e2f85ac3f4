/* The blocked attention kernel (trident/attention.h). Oracles, in order of
 * authority (as test_kernels.c):
 *  1. a double-precision reference written here (offsets, causal / none,
 *     GQA, Tq != Tk) for out, lse and the analytic dq, dk, dv; and central
 *     finite differences of its forward for the backward at a small size;
 *     Document masking (doc_start) against the reference's explicit mask
 *     of document ids, with the same tolerances (fewer visible keys: the
 *     bounds above hold a fortiori);
 *  2. the materialized td_attention_forward/backward and their _ref loops
 *     for the model's case (NKV = NH, causal, offsets 0, fused qkv);
 *  3. self-consistency: ring-style pieces (accumulate) vs one call, per-piece
 *     backward summed vs one call, 1 vs 2 threads bitwise;
 * (bf16 / fp16: test_attention_lowp.c.)
 * Tolerances: |got - exp| <= tol (|exp| + FLOOR rms(exp)) (tu_check_close):
 *  TOL_FWD 1e-5: out and lse vs double. An output is a softmax-weighted sum
 *   of <= 130 keys, each weight a few roundings (td_k_expf: a few ulp), the
 *   running rescale one more per key block: ~sqrt(130) * 6e-8 * few ~ 2e-6;
 *   a wrong scale or mask is >= 1e-3 off.
 *  TOL_BWD 2e-5: float gradients vs the double analytic gradient / FD:
 *   dS = P (dP - D) cancels (as layernorm's backward in test_kernels, where
 *   <= 3e-6 was observed), so the TOL_FD of test_kernels.c.
 *  With one key (Tk = 1) dq and dk are exactly 0 (P = 1, dP = D): the
 *   float residue of dP - D is ~sqrt(hs) u |dP| ~ 4 * 6e-8 * 4 ~ 1e-6,
 *   times scale 1/4 and |k| <= 4: ABS_ONEKEY 1e-5 absolute, while any
 *   wrong term is O(0.1).
 *  TOL_BWD_FAST 5e-5: float backward vs the materialized kernel. That one
 *   takes D = <P, dP> (exactly dP for a row with one key, so dS = 0
 *   exactly); the blocked kernel takes D = <dO, O>, another rounding of the
 *   same number, so dS = P (dP - D) keeps a cancellation residue of
 *   ~sqrt(hs) u |dP| scale |k| ~ 5e-7 absolute (observed 4.8e-7 at T 130,
 *   hs 16), which is 2e-5 of the 0.1-rms floor (0.024) there; 5e-5 leaves
 *   2.5x and a wrong term is >= 1e-2 off.
 *  TOL_FAST 1e-5: two float computations of the same sums in other orders
 *   (materialized vs blocked, pieces vs one call): a few ulp per term of
 *   <= 130-term sums, plus the merge's exp/log1p roundings (~1e-7).
 *  TOL_RING_DQ 5e-5: dq of the pieces against one call. A row of dS sums
 *   to zero (sum_j P_ij (dP_ij - D_i) = D_i - D_i), so dq_i = sum_j dS_ij
 *   k_j cancels as in the materialized comparison above, and the pieces
 *   cut the key blocks at other places (another summation order of that
 *   cancelling sum): TOL_BWD_FAST's residue. Observed 1.1e-5 with one
 *   OpenBLAS sgemm micro-kernel and < 1e-5 with another; dk and dv sum
 *   over the same query rows in the same order and keep TOL_FAST. A
 *   missed or doubled key block is >= 1e-2 off.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_dref.h"
#include "test_util.h"
#include "trident/attention.h"
#include "trident/kernels.h"

#define TOL_FWD 1e-5
#define TOL_BWD 2e-5
#define TOL_FAST 1e-5
#define TOL_BWD_FAST 5e-5
#define TOL_RING_DQ TOL_BWD_FAST
#define ABS_ONEKEY 1e-5
#define FLOOR 0.1

#define check_lse(name, got, exp, n) attn_check_lse(name, got, exp, n, TOL_FWD, FLOOR)

static char lbl[160];
#define L(...) (snprintf(lbl, sizeof lbl, __VA_ARGS__), lbl)

/* 1. against the double reference: forward and analytic backward. */
static void test_vs_double_docs(int B, int Tq, int Tk, int NH, int NKV, int hs, long qp, long kp,
                                td_attn_mask mask, const int *const *cuts, int len) {
    int mark = tu_mark();
    prob p = make(B, Tq, Tk, NH, NKV, hs, qp, kp, mask, 100 + Tq + Tk);
    attn_set_docs(&p.s, len, cuts);
    double *ro = TU_NEW(double, p.nq), *rl = TU_NEW(double, p.nl);
    double *rq = TU_NEW(double, p.nq), *rk = TU_NEW(double, p.nk), *rv = TU_NEW(double, p.nk);
    dref(ro, rl, rq, rk, rv, p.dd, p.dq_, p.dk_, p.dv_, &p.s);
    float *out = TU_NEW(float, p.nq), *lse = TU_NEW(float, p.nl);
    for (size_t i = 0; i < p.nq; i++) out[i] = NAN; /* must all be written */
    td_attn_forward(out, lse, p.q, p.k, p.v, &p.s, 0);
    const char *mk = cuts ? (mask == TD_ATTN_CAUSAL ? "causal docs" : "none docs")
                          : mask == TD_ATTN_CAUSAL ? "causal" : "none";
    tu_check_close(L("fwd out Tq%d Tk%d NH%d/%d %s q%ld k%ld", Tq, Tk, NH, NKV, mk, qp, kp), out,
                   ro, p.nq, TOL_FWD, FLOOR);
    check_lse(L("fwd lse Tq%d Tk%d NH%d/%d %s q%ld k%ld", Tq, Tk, NH, NKV, mk, qp, kp), lse, rl,
              p.nl);
    float *dq = TU_NEW(float, p.nq), *dk = TU_NEW(float, p.nk), *dv = TU_NEW(float, p.nk);
    td_attn_backward(dq, dk, dv, p.dout, out, lse, p.q, p.k, p.v, &p.s);
    if (Tk == 1) { /* exact 0 in exact arithmetic: absolute bound */
        float mq = 0, mk2 = 0;
        for (size_t i = 0; i < p.nq; i++) mq = fmaxf(mq, fabsf(dq[i]));
        for (size_t i = 0; i < p.nk; i++) mk2 = fmaxf(mk2, fabsf(dk[i]));
        TU_EXPECT(mq <= ABS_ONEKEY && mk2 <= ABS_ONEKEY, "one key: |dq| %g |dk| %g > %g", mq, mk2,
                  ABS_ONEKEY);
        printf("      one key Tq%d %s: max |dq| %.2e |dk| %.2e (bound %.0e)\n", Tq, mk, mq, mk2,
               ABS_ONEKEY);
    } else {
        tu_check_close(L("bwd dq Tq%d Tk%d NH%d/%d %s", Tq, Tk, NH, NKV, mk), dq, rq, p.nq, TOL_BWD,
                       FLOOR);
        tu_check_close(L("bwd dk Tq%d Tk%d NH%d/%d %s", Tq, Tk, NH, NKV, mk), dk, rk, p.nk, TOL_BWD,
                       FLOOR);
    }
    tu_check_close(L("bwd dv Tq%d Tk%d NH%d/%d %s", Tq, Tk, NH, NKV, mk), dv, rv, p.nk, TOL_BWD,
                   FLOOR);
    /* backward adds: a second call doubles (sums made first, added once
     * per key block for dk/dv, per key block into dq: a few roundings) */
    float *d1 = tu_copy(dq, p.nq);
    td_attn_backward(dq, dk, dv, p.dout, out, lse, p.q, p.k, p.v, &p.s);
    for (size_t i = 0; i < p.nq; i++) d1[i] *= 2.0f;
    tu_check_close_f(L("bwd twice = 2x dq Tq%d Tk%d", Tq, Tk), dq, d1, p.nq, TOL_FAST, FLOOR);
    attn_set_docs(&p.s, 0, NULL);
    tu_release(mark);
}

static void test_vs_double(int B, int Tq, int Tk, int NH, int NKV, int hs, long qp, long kp,
                           td_attn_mask mask) {
    test_vs_double_docs(B, Tq, Tk, NH, NKV, hs, qp, kp, mask, NULL, 0);
}

/* 1c. document masking against the reference's explicit mask (document
 * ids compared): documents that cut key blocks of 64 in the middle, that
 * cover whole key blocks (skipped), one-token documents, a document
 * starting at the last position; as one call and as a context-parallel
 * piece (offsets into longer global sequences). */
static void test_docs(void) {
    static const int c0[] = {1, 30, 70, 128, 129, -1}, c1[] = {64, 65, 66, 100, -1};
    static const int c2[] = {-1}, c3[] = {10, 140, 141, 190, -1};
    const int *const two[] = {c0, c1}, *const one[] = {c3}, *const none[] = {c2, c0};
    test_vs_double_docs(2, 130, 130, 4, 4, 16, 0, 0, TD_ATTN_CAUSAL, two, 130);
    test_vs_double_docs(2, 130, 130, 4, 2, 16, 0, 0, TD_ATTN_CAUSAL, two, 130);
    test_vs_double_docs(2, 7, 7, 4, 2, 8, 0, 0, TD_ATTN_CAUSAL, none, 7);
    /* a cp piece: queries [130, 195) against keys [3, 133) of 200 positions */
    test_vs_double_docs(1, 65, 130, 6, 2, 16, 130, 3, TD_ATTN_CAUSAL, one, 200);
    test_vs_double_docs(1, 30, 100, 4, 1, 16, 0, 20, TD_ATTN_CAUSAL, one, 200);
}

/* 1b. central finite differences of the double forward's sum(out * dout). */
struct fd_ctx {
    prob *p;
    double *o, *l;
};
static double fd_obj(struct fd_ctx *c) {
    dref(c->o, c->l, NULL, NULL, NULL, NULL, c->p->dq_, c->p->dk_, c->p->dv_, &c->p->s);
    double a = 0;
    for (size_t i = 0; i < c->p->nq; i++) a += c->o[i] * c->p->dd[i];
    return a;
}
static void fd_grad(double *g, double *x, size_t n, struct fd_ctx *c) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double fp = fd_obj(c);
        x[i] = x0 - h;
        double fm = fd_obj(c);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * h);
    }
}
static void test_fd(void) {
    int mark = tu_mark();
    prob p = make(1, 5, 9, 4, 2, 8, 6, 0, TD_ATTN_CAUSAL, 300); /* Tq != Tk, GQA, offset */
    struct fd_ctx c = {&p, TU_NEW(double, p.nq), TU_NEW(double, p.nl)};
    double *gq = TU_NEW(double, p.nq), *gk = TU_NEW(double, p.nk), *gv = TU_NEW(double, p.nk);
    fd_grad(gq, p.dq_, p.nq, &c), fd_grad(gk, p.dk_, p.nk, &c), fd_grad(gv, p.dv_, p.nk, &c);
    float *out = TU_NEW(float, p.nq), *lse = TU_NEW(float, p.nl);
    float *dq = TU_NEW(float, p.nq), *dk = TU_NEW(float, p.nk), *dv = TU_NEW(float, p.nk);
    td_attn_forward(out, lse, p.q, p.k, p.v, &p.s, 0);
    td_attn_backward(dq, dk, dv, p.dout, out, lse, p.q, p.k, p.v, &p.s);
    tu_check_close("bwd dq vs FD (GQA, q_pos 6)", dq, gq, p.nq, TOL_BWD, FLOOR);
    tu_check_close("bwd dk vs FD (GQA, q_pos 6)", dk, gk, p.nk, TOL_BWD, FLOOR);
    tu_check_close("bwd dv vs FD (GQA, q_pos 6)", dv, gv, p.nk, TOL_BWD, FLOOR);
    tu_release(mark);
}

/* 2. the materialized kernel (fast and _ref) on fused qkv. */
static void test_vs_materialized(int B, int T, int C, int NH) {
    int mark = tu_mark(), N = B * T, hs = C / NH;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = TU_NEW(float, N * 3 * C), *dout = TU_NEW(float, N *C);
    tu_randn(qkv, N * 3 * C, 400 + T, 1.0f), tu_randn(dout, N * C, 401 + T, 1.0f);
    td_attn_shape s = {B, T, T, NH, NH, hs, 3 * C, 3 * C, C, 0, 0, TD_ATTN_CAUSAL, 0, 0, NULL, 0};
    float *out = TU_NEW(float, N *C), *lse = TU_NEW(float, B *NH *T);
    float *dqkv = TU_NEW(float, N * 3 * C);
    td_attn_forward(out, lse, qkv, qkv + C, qkv + 2 * C, &s, 0);
    td_attn_backward(dqkv, dqkv + C, dqkv + 2 * C, dout, out, lse, qkv, qkv + C, qkv + 2 * C, &s);
    for (int r = 0; r < 2; r++) {
        float *mo = TU_NEW(float, N *C), *att = TU_NEW(float, natt), *datt = TU_NEW(float, natt);
        float *md = TU_NEW(float, N * 3 * C);
        (r ? td_attention_forward_ref : td_attention_forward)(mo, att, qkv, B, T, C, NH);
        (r ? td_attention_backward_ref : td_attention_backward)(md, datt, dout, qkv, att, B, T, C,
                                                                NH);
        const char *w = r ? "_ref" : "fast";
        tu_check_close_f(L("vs materialized %s T%d fwd out", w, T), out, mo, N * C, TOL_FAST,
                         FLOOR);
        tu_check_close_f(L("vs materialized %s T%d bwd dqkv", w, T), dqkv, md, N * 3 * C,
                         TOL_BWD_FAST, FLOOR);
    }
    tu_release(mark);
}

/* 3. ring style: K/V in n pieces (accumulate), backward per piece with the
 * final out/lse, against one call. Also load-balanced causal chunks: the
 * query chunk [q_pos, q_pos + Tq) against key pieces before, overlapping
 * and after it (fully masked: lse -inf, untouched by the merge). */
static void test_ring(int Tq, int Tk, long qp, int pieces) {
    int mark = tu_mark();
    prob p = make(2, Tq, Tk, 4, 2, 16, qp, 0, TD_ATTN_CAUSAL, 500 + pieces);
    float *o1 = TU_NEW(float, p.nq), *l1 = TU_NEW(float, p.nl);
    float *q1 = TU_NEW(float, p.nq), *k1 = TU_NEW(float, p.nk), *v1 = TU_NEW(float, p.nk);
    td_attn_forward(o1, l1, p.q, p.k, p.v, &p.s, 0);
    td_attn_backward(q1, k1, v1, p.dout, o1, l1, p.q, p.k, p.v, &p.s);
    /* pieces as separate dense arrays, as a ring would receive them */
    float *on = TU_NEW(float, p.nq), *ln = TU_NEW(float, p.nl), *qn = TU_NEW(float, p.nq);
    float *kn = TU_NEW(float, p.nk), *vn = TU_NEW(float, p.nk);
    int w = p.s.kv_stride, per = (Tk + pieces - 1) / pieces;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < pieces; c++) {
            int j0 = c * per, n = Tk - j0 < per ? Tk - j0 : per;
            if (n <= 0) continue;
            float *pk = TU_NEW(float, 2 * n * w), *pv = TU_NEW(float, 2 * n * w);
            float *gk = TU_NEW(float, 2 * n * w), *gv = TU_NEW(float, 2 * n * w);
            for (int b = 0; b < 2; b++) {
                memcpy(pk + (size_t)b * n * w, p.k + ((size_t)b * Tk + j0) * w, n * w * 4);
                memcpy(pv + (size_t)b * n * w, p.v + ((size_t)b * Tk + j0) * w, n * w * 4);
            }
            td_attn_shape s = p.s;
            s.Tk = n, s.k_pos = j0;
            if (pass == 0) {
                td_attn_forward(on, ln, p.q, pk, pv, &s, c > 0);
            } else {
                td_attn_backward(qn, gk, gv, p.dout, o1, l1, p.q, pk, pv, &s);
                for (int b = 0; b < 2; b++)
                    for (size_t i = 0; i < (size_t)n * w; i++) {
                        kn[((size_t)b * Tk + j0) * w + i] = gk[(size_t)b * n * w + i];
                        vn[((size_t)b * Tk + j0) * w + i] = gv[(size_t)b * n * w + i];
                    }
            }
        }
    int minf = 0, ninf = 0;
    for (size_t i = 0; i < p.nl; i++) minf += isinf(l1[i]), ninf += isinf(ln[i]);
    TU_EXPECT(minf == ninf, "ring Tq%d q_pos %ld: -inf rows one call %d, pieces %d", Tq, qp, minf,
              ninf);
    for (size_t i = 0; i < p.nl; i++)
        if (isinf(l1[i])) l1[i] = ln[i] = 0; /* compared above */
    tu_check_close_f(L("ring %d pieces q_pos %ld fwd out", pieces, qp), on, o1, p.nq, TOL_FAST,
                     FLOOR);
    tu_check_close_f(L("ring %d pieces q_pos %ld fwd lse", pieces, qp), ln, l1, p.nl, TOL_FAST,
                     FLOOR);
    tu_check_close_f(L("ring %d pieces q_pos %ld bwd dq", pieces, qp), qn, q1, p.nq, TOL_RING_DQ,
                     FLOOR);
    tu_check_close_f(L("ring %d pieces q_pos %ld bwd dk", pieces, qp), kn, k1, p.nk, TOL_FAST,
                     FLOOR);
    tu_check_close_f(L("ring %d pieces q_pos %ld bwd dv", pieces, qp), vn, v1, p.nk, TOL_FAST,
                     FLOOR);
    tu_release(mark);
}

/* A fully masked pair (keys all after the queries): lse -inf, out 0, and
 * merged into an existing pair it changes nothing, bitwise; backward adds 0. */
static void test_masked_pair(void) {
    int mark = tu_mark();
    prob p = make(1, 40, 70, 4, 4, 16, 0, 100, TD_ATTN_CAUSAL, 600);
    float *out = TU_NEW(float, p.nq), *lse = TU_NEW(float, p.nl);
    td_attn_forward(out, lse, p.q, p.k, p.v, &p.s, 0);
    tu_check_zero("masked pair: out = 0", out, p.nq);
    int ok = 1;
    for (size_t i = 0; i < p.nl; i++) ok &= isinf(lse[i]) && lse[i] < 0;
    TU_EXPECT(ok, "masked pair: every lse is -inf");
    td_attn_forward(out, lse, p.q, p.k, p.v, &p.s, 1); /* -inf merged with -inf */
    tu_check_zero("masked pair merged into masked: out = 0 (no NaN)", out, p.nq);
    td_attn_shape s = p.s;
    s.k_pos = 0; /* a visible pair, then the masked one merged into it */
    td_attn_forward(out, lse, p.q, p.k, p.v, &s, 0);
    float *o0 = tu_copy(out, p.nq), *l0 = tu_copy(lse, p.nl);
    td_attn_forward(out, lse, p.q, p.k, p.v, &p.s, 1);
    tu_check_bitwise("masked pair merged: out unchanged", out, o0, p.nq);
    tu_check_bitwise("masked pair merged: lse unchanged", lse, l0, p.nl);
    float *dq = TU_NEW(float, p.nq), *dk = TU_NEW(float, p.nk), *dv = TU_NEW(float, p.nk);
    td_attn_backward(dq, dk, dv, p.dout, out, lse, p.q, p.k, p.v, &p.s);
    tu_check_zero("masked pair bwd: dq", dq, p.nq);
    tu_check_zero("masked pair bwd: dk", dk, p.nk);
    tu_release(mark);
}

/* 3c. 1 vs 2 threads, bitwise, at a size that runs parallel. */
static void test_threads(void) {
    int mark = tu_mark();
    prob p = make(2, 200, 200, 4, 2, 32, 0, 0, TD_ATTN_CAUSAL, 700);
    float *r[2][5];
    for (int t = 0; t < 2; t++) {
        td_kernels_set_threads(t + 1);
        for (int i = 0; i < 5; i++) r[t][i] = TU_NEW(float, i == 1 ? p.nl : i < 3 ? p.nq : p.nk);
        tu_randn(r[t][2], p.nq, 701, 1.0f); /* gradients start nonzero: add-into */
        td_attn_forward(r[t][0], r[t][1], p.q, p.k, p.v, &p.s, 0);
        td_attn_backward(r[t][2], r[t][3], r[t][4], p.dout, r[t][0], r[t][1], p.q, p.k, p.v, &p.s);
    }
    td_kernels_set_threads(1);
    const char *nm[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++)
        tu_check_bitwise(L("2 threads vs 1: %s", nm[i]), r[1][i], r[0][i],
                         i == 1  ? p.nl
                         : i < 3 ? p.nq
                                 : p.nk);
    tu_release(mark);
}

int main(void) {
    td_kernels_set_threads(1);
    /* T not a multiple of the block size; offsets; no mask; GQA; Tq != Tk */
    int Ts[4] = {1, 7, 65, 130};
    for (int i = 0; i < 4; i++) {
        test_vs_double(2, Ts[i], Ts[i], 4, 4, 16, 0, 0, TD_ATTN_CAUSAL);
        test_vs_double(1, Ts[i], Ts[i], 4, 2, 16, 0, 0, TD_ATTN_NONE);
    }
    test_vs_double(2, 65, 130, 6, 2, 16, 70, 3, TD_ATTN_CAUSAL); /* keys start before */
    test_vs_double(1, 30, 100, 4, 1, 16, 0, 20, TD_ATTN_CAUSAL); /* early rows see nothing */
    test_vs_double(1, 33, 17, 4, 4, 8, 5, 40, TD_ATTN_NONE);
    test_docs();
    test_fd();
    test_vs_materialized(2, 7, 12, 3);
    test_vs_materialized(1, 130, 64, 4);
    for (int pc = 2; pc <= 4; pc += 2) {
        test_ring(130, 130, 0, pc);  /* one sequence split into key pieces */
        test_ring(65, 195, 130, pc); /* load-balanced chunk: queries after most keys */
    }
    test_masked_pair();
    test_threads();
    td_attn_release_scratch();
    return tu_finish("test_attention_blocked");
}
