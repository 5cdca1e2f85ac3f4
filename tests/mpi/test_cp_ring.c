/* Ring attention (trident/cp.h) over the world as the cp group, against
 * the blocked kernel's single call on the whole sequence (its oracles are
 * tests/unit/test_attention_blocked's), restricted to each rank's rows:
 * out, lse, and dqkv (dq of the local rows, dk and dv summed over every
 * rank's queries). Every rank builds the same global data from one seed.
 *
 * Shapes: T = 2n x 6 (chunks of 6 rows, one kernel block) and 2n x 70
 * (chunks of 70: a full and a partial 64-row block), B 2, 2 heads of 8.
 * Also the ring on a 1-rank group (cp = 1), its blocks in lent scratch, the split helpers, the bytes
 * against td_cp_ring_formula, and the predicate that refuses a T the 2n
 * chunks do not divide.
 *
 * Tolerances (|got - exp| <= tol (|exp| + 0.1 rms(exp)), tu_check_close):
 *  fp32 out, lse: TOL_FWD 1e-5, the pieces-vs-one-call bound of
 *   test_attention_blocked (other summation orders of the same <= 560-term
 *   softmax sums, plus the merge's exp/log1p roundings ~1e-7);
 *  fp32 dq, dk, dv: TOL_BWD 5e-5, its TOL_RING_DQ: a row of dS sums to zero,
 *   so each gradient is a cancelling sum, here cut at other places;
 *  bf16: every merge of the forward and every hop's addition into dK/dV
 *   rounds the running value to bf16 (half an ulp, 2^-9 relative), and a
 *   query chunk meets at most 2n key chunks: 2n x 2^-9 of the values being
 *   rounded, against the 16-bit kernel's single call on the same bf16
 *   inputs. Those running values are partial sums of the tensor's own size
 *   (rms), not of each final element, which may be near 0 after the last
 *   merge; so the bound is 2n x 2^-9 with the floor at the whole rms
 *   (FLOOR_LP 1.0). The gradients add their own roundings (dq and dK/dV
 *   rounded once per pair call: up to 2n) to the forward's error, which
 *   they inherit through D = rowsum(dout * out): (4n + 1) x 2^-9. On top,
 *   per element, the 16-bit kernel's own roundings (P and dS rounded before
 *   their GEMMs), bounded by attn_lp_bounds (tests/unit/attn_dref.h,
 *   derived in test_attention_lowp.c) for the single call and for the ring
 *   alike: twice the bound, (1 + u) for its own rounding; the ring's
 *   backward gets its own out, so dD there uses |out - exact| <= the
 *   single call's distance + the forward tolerance above. A missed or
 *   doubled block is off by O(1/n) of the rms: >= 0.25 at n = 4, against
 *   bounds of 0.016 and 0.033 plus the per-element terms (~2^-7 of sum_j
 *   P_ij |v_j|, ~0.01). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../unit/attn_dref.h"
#include "../unit/test_util.h"
#include "trident/attention.h"
#include "trident/comm.h"
#include "trident/cp.h"
#include "trident/kernels_bf16.h"

#define TOL_FWD 1e-5
#define TOL_BWD 5e-5
#define FLOOR 0.1
#define FLOOR_LP 1.0

enum { B = 2, NH = 2, HS = 8, C = NH * HS };

static char g_name[96];
static const char *L(const char *what, int n, int T, const char *prec) {
    snprintf(g_name, sizeof g_name, "cp %d T %d %s: %s", n, T, prec, what);
    return g_name;
}

/* The whole-sequence oracle (fp32, or bf16 on the same rounded inputs). */
typedef struct {
    float *out, *lse, *dqkv; /* [B,T,C], [B,NH,T], [B,T,3C], fp32 values */
} whole;

static void widen(float *dst, const td_bf16 *src, size_t n) { td_bf16_to_float_n(dst, src, n); }

static whole oracle(const float *qkv, const float *dout, int T, int lp) {
    whole w = {TU_NEW(float, (size_t)B * T * C), TU_NEW(float, (size_t)B * NH * T),
               TU_NEW(float, (size_t)B * T * 3 * C)};
    td_attn_shape s = {.B = B, .Tq = T, .Tk = T, .NH = NH, .NKV = NH, .hs = HS, .q_stride = 3 * C,
                       .kv_stride = 3 * C, .o_stride = C, .mask = TD_ATTN_CAUSAL};
    if (!lp) {
        td_attn_forward(w.out, w.lse, qkv, qkv + C, qkv + 2 * C, &s, 0);
        td_attn_backward(w.dqkv, w.dqkv + C, w.dqkv + 2 * C, dout, w.out, w.lse, qkv, qkv + C,
                         qkv + 2 * C, &s);
        return w;
    }
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    td_bf16 *q = TU_NEW(td_bf16, nq), *g = TU_NEW(td_bf16, no), *o = TU_NEW(td_bf16, no),
            *d = TU_NEW(td_bf16, nq); /* d zero: bf16 0 is all-zero bits */
    td_bf16_from_float_n(q, qkv, nq);
    td_bf16_from_float_n(g, dout, no);
    td_attn_bf16_forward(o, w.lse, q, q + C, q + 2 * C, &s, 0);
    td_attn_bf16_backward(d, d + C, d + 2 * C, g, o, w.lse, q, q + C, q + 2 * C, &s);
    widen(w.out, o, no);
    widen(w.dqkv, d, nq);
    return w;
}

/* This rank's ring result, as fp32 values. */
static whole ring(td_comm *cp, const float *qkv, const float *dout, int T, int lp) {
    int n = td_comm_size(cp), r = td_comm_rank(cp), Tl = T / n;
    size_t nq = (size_t)B * Tl * 3 * C, no = (size_t)B * Tl * C;
    float *lq = TU_NEW(float, nq), *lg = TU_NEW(float, no);
    td_cp_take_local(lq, qkv, B, T, n, r, 3 * C * sizeof(float));
    td_cp_take_local(lg, dout, B, T, n, r, C * sizeof(float));
    whole w = {TU_NEW(float, no), TU_NEW(float, (size_t)B * NH * Tl), TU_NEW(float, nq)};
    td_cp_shape s = {B, Tl, C, NH, lp ? TD_PREC_BF16 : TD_PREC_FP32, 0, NULL, 0};
    td_cp_ring *g = td_cp_ring_new(cp);
    uint64_t fwd, bwd;
    td_cp_ring_formula(&s, n, &fwd, &bwd);
    if (!lp) {
        td_cp_attn_forward(g, w.out, w.lse, lq, &s);
        TU_EXPECT(td_cp_ring_stats(g).bytes_sent == fwd, "forward sent %llu B, formula %llu",
                  (unsigned long long)td_cp_ring_stats(g).bytes_sent, (unsigned long long)fwd);
        td_cp_ring_reset_stats(g);
        td_cp_attn_backward(g, w.dqkv, lg, w.out, w.lse, lq, &s);
        TU_EXPECT(td_cp_ring_stats(g).bytes_sent == bwd, "backward sent %llu B, formula %llu",
                  (unsigned long long)td_cp_ring_stats(g).bytes_sent, (unsigned long long)bwd);
    } else {
        td_bf16 *q = TU_NEW(td_bf16, nq), *gr = TU_NEW(td_bf16, no), *o = TU_NEW(td_bf16, no),
                *d = TU_NEW(td_bf16, nq);
        td_bf16_from_float_n(q, lq, nq);
        td_bf16_from_float_n(gr, lg, no);
        td_cp_attn_forward(g, o, w.lse, q, &s);
        td_cp_attn_backward(g, d, gr, o, w.lse, q, &s);
        widen(w.out, o, no);
        widen(w.dqkv, d, nq);
    }
    td_cp_ring_free(g);
    return w;
}

/* |got - exp| <= tol (|exp| + floor rms(exp)) + extra_i (NULL: none). */
static void check_plus(const char *name, const float *got, const float *exp, const double *extra,
                       size_t n, double tol, double floor) {
    double ss = 0, worst = 0;
    for (size_t i = 0; i < n; i++) ss += (double)exp[i] * exp[i];
    double fl = n ? floor * sqrt(ss / n) : 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double r =
            fabs((double)got[i] - exp[i]) / (tol * (fabs(exp[i]) + fl) + (extra ? extra[i] : 0));
        if (!(r <= worst)) worst = r, wi = i;
    }
    TU_EXPECT(worst <= 1.0, "%s: [%zu] got %.9g expected %.9g (%.2f x its bound)", name, wi,
              (double)got[wi], (double)exp[wi], worst);
    printf("%s  %-52s n=%-6zu max |err| / bound %.3f\n", worst <= 1.0 ? "PASS" : "FAIL", name, n,
           worst);
}

/* The 16-bit kernel's per-element terms for the bf16 comparison (header):
 * eo [B,T,C] for out, eg [B,T,3C] for dqkv, on the rounded inputs. */
static void lp_terms(double *eo, double *eg, const float *qkv, const float *dout, const float *out1,
                     int T, double tf) {
    const double u = 1.0 / 256;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    td_bf16 *h = TU_NEW(td_bf16, nq);
    float *f = TU_NEW(float, nq);
    td_bf16_from_float_n(h, qkv, nq), widen(f, h, nq);
    double *x = tu_to_double(f, nq);
    td_bf16_from_float_n(h, dout, no), widen(f, h, no);
    double *g = tu_to_double(f, no), *o = TU_NEW(double, no), *l = TU_NEW(double, (size_t)B *NH *T);
    td_attn_shape s = {.B = B,
                       .Tq = T,
                       .Tk = T,
                       .NH = NH,
                       .NKV = NH,
                       .hs = HS,
                       .q_stride = 3 * C,
                       .kv_stride = 3 * C,
                       .o_stride = C,
                       .mask = TD_ATTN_CAUSAL};
    dref(o, l, NULL, NULL, NULL, NULL, x, x + C, x + 2 * C, &s);
    double ss = 0, *oe = TU_NEW(double, no);
    for (size_t i = 0; i < no; i++) ss += (double)out1[i] * out1[i];
    double rms = sqrt(ss / no);
    memset(eo, 0, no * 8), memset(eg, 0, nq * 8);
    double *junk = TU_NEW(double, nq);
    attn_lp_bounds(eo, junk, junk + C, junk + 2 * C, oe, x, x + C, x + 2 * C, g, &s, u, 0);
    /* the out the backward gets: the single call's, or the ring's, within
     * the forward tolerance and 2 (1 + u) eo of it */
    for (size_t i = 0; i < no; i++)
        oe[i] = fabs(out1[i] - o[i]) + tf * (fabs(out1[i]) + FLOOR_LP * rms) + 2 * (1 + u) * eo[i];
    attn_lp_bounds(junk, eg, eg + C, eg + 2 * C, oe, x, x + C, x + 2 * C, g, &s, u, 0);
    for (size_t i = 0; i < no; i++) eo[i] *= 2 * (1 + u);
    for (size_t i = 0; i < nq; i++) eg[i] *= 2 * (1 + u);
}

static void check(td_comm *cp, int T, int lp, uint64_t seed) {
    int mark = tu_mark(), n = td_comm_size(cp), r = td_comm_rank(cp), Tl = T / n, Tc = Tl / 2;
    float *qkv = TU_NEW(float, (size_t)B * T * 3 * C), *dout = TU_NEW(float, (size_t)B * T * C);
    tu_randn(qkv, (size_t)B * T * 3 * C, seed, 1.0f);
    tu_randn(dout, (size_t)B * T * C, seed + 1, 1.0f);
    whole want = oracle(qkv, dout, T, lp), got = ring(cp, qkv, dout, T, lp);
    /* the oracle at this rank's rows; lse in the ring's [2 chunks][B, NH, Tc] */
    float *wo = TU_NEW(float, (size_t)B * Tl * C), *wd = TU_NEW(float, (size_t)B * Tl * 3 * C);
    float *wl = TU_NEW(float, (size_t)B * NH * Tl);
    td_cp_take_local(wo, want.out, B, T, n, r, C * sizeof(float));
    td_cp_take_local(wd, want.dqkv, B, T, n, r, 3 * C * sizeof(float));
    long pos[2];
    td_cp_chunk_pos(T, n, r, pos);
    for (int c = 0; c < 2; c++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < Tc; i++)
                    wl[((size_t)(c * B + b) * NH + h) * Tc + i] = want.lse[((size_t)b * NH + h) * T + pos[c] + i];
    const char *p = lp ? "bf16" : "fp32";
    double tf = lp ? 2.0 * n / 512 : TOL_FWD, tb = lp ? (4.0 * n + 1) / 512 : TOL_BWD;
    double *eo = NULL, *eg = NULL;
    if (lp) {
        double *ao = TU_NEW(double, (size_t)B *T *C), *ag = TU_NEW(double, (size_t)B *T * 3 * C);
        lp_terms(ao, ag, qkv, dout, want.out, T, tf);
        eo = TU_NEW(double, (size_t)B *Tl *C), eg = TU_NEW(double, (size_t)B *Tl * 3 * C);
        td_cp_take_local(eo, ao, B, T, n, r, C * sizeof(double));
        td_cp_take_local(eg, ag, B, T, n, r, 3 * C * sizeof(double));
    }
    check_plus(L("out", n, T, p), got.out, wo, eo, (size_t)B * Tl * C, tf, lp ? FLOOR_LP : FLOOR);
    tu_check_close_f(L("lse", n, T, p), got.lse, wl, (size_t)B * NH * Tl, TOL_FWD, FLOOR); /* fp32 in both */
    check_plus(L("dqkv", n, T, p), got.dqkv, wd, eg, (size_t)B * Tl * 3 * C, tb,
               lp ? FLOOR_LP : FLOOR);
    tu_release(mark);
}

/* A lent scratch (td_cp_ring_lend) holds the four blocks: the same bits as
 * the ring's own buffers, no byte written past the four blocks, and no
 * TD_MEM_COMM of the ring's own; a lent scratch too small for them is left
 * alone and the ring's own buffers serve, with the same bits. */
static void check_lend(td_comm *cp, int T) {
    int mark = tu_mark(), n = td_comm_size(cp), Tl = T / n;
    size_t nq = (size_t)B * Tl * 3 * C, no = (size_t)B * Tl * C, nl = (size_t)B * NH * Tl;
    size_t blocks = 4 * (size_t)B * Tl * 2 * C * sizeof(float), guard = 256;
    float *q = TU_NEW(float, nq), *dout = TU_NEW(float, no);
    tu_randn(q, nq, 41, 1.0f);
    tu_randn(dout, no, 42, 1.0f);
    float *o[3], *l[3], *d[3];
    unsigned char *ws = TU_NEW(unsigned char, blocks + guard);
    for (int k = 0; k < 3; k++) {
        o[k] = TU_NEW(float, no), l[k] = TU_NEW(float, nl), d[k] = TU_NEW(float, nq);
        memset(ws, 0xA5, blocks + guard);
        td_cp_shape s = {B, Tl, C, NH, TD_PREC_FP32, 0, NULL, 0};
        td_cp_ring *g = td_cp_ring_new(cp);
        /* k 0: its own buffers; 1: lent exactly enough; 2: lent one byte short */
        if (k) td_cp_ring_lend(g, ws, k == 1 ? blocks : blocks - 1);
        size_t comm0 = td_mem_current(TD_MEM_COMM);
        td_cp_attn_forward(g, o[k], l[k], q, &s);
        td_cp_attn_backward(g, d[k], dout, o[k], l[k], q, &s);
        size_t own = td_mem_current(TD_MEM_COMM) - comm0;
        int untouched = 1;
        for (size_t i = k == 1 ? blocks : 0; i < blocks + guard; i++) untouched &= ws[i] == 0xA5;
        if (n > 1) {
            TU_EXPECT(k == 1 ? own == 0 : own == blocks, "cp %d lend %d: the ring holds %zu B of its own", n, k, own);
            TU_EXPECT(untouched, "cp %d lend %d: bytes written %s", n, k,
                      k == 1 ? "past the four blocks" : "into a scratch too small");
        }
        td_cp_ring_free(g);
        if (k) {
            TU_EXPECT(!memcmp(o[k], o[0], no * sizeof(float)) && !memcmp(l[k], l[0], nl * sizeof(float)) &&
                          !memcmp(d[k], d[0], nq * sizeof(float)),
                      "cp %d lend %d: results differ from the ring's own buffers", n, k);
        }
    }
    tu_release(mark);
}

/* take then put restores this rank's rows and leaves the others alone. */
static void check_split(int n, int r) {
    int T = 4 * n, mark = tu_mark();
    float *x = TU_NEW(float, (size_t)B * T), *l = TU_NEW(float, (size_t)B * T / n),
          *y = TU_NEW(float, (size_t)B * T);
    for (int i = 0; i < B * T; i++) x[i] = (float)i, y[i] = -1.0f;
    td_cp_take_local(l, x, B, T, n, r, sizeof(float));
    td_cp_put_local(y, l, B, T, n, r, sizeof(float));
    long pos[2];
    td_cp_chunk_pos(T, n, r, pos);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int mine = (t >= pos[0] && t < pos[0] + 2) || (t >= pos[1] && t < pos[1] + 2);
            float e = mine ? x[b * T + t] : -1.0f;
            ok &= y[b * T + t] == e;
        }
    TU_EXPECT(ok, "cp %d rank %d: put(take(x)) is not x on the rank's rows alone", n, r);
    TU_EXPECT(pos[0] == 2L * r && pos[1] == 2L * (2 * n - 1 - r), "cp %d rank %d: chunks at %ld, %ld", n,
              r, pos[0], pos[1]);
    tu_release(mark);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_comm *w = td_comm_world();
    int n = td_comm_size(w), r = td_comm_rank(w);
    TU_EXPECT(!td_cp_seq_ok(2 * n * 6 + 2, n) && td_cp_seq_ok(2 * n * 6, n) && !td_cp_seq_ok(6, 4),
              "td_cp_seq_ok accepts a T its 2n chunks do not divide, or refuses one they do");
    check_split(n, r);
    for (int lp = 0; lp <= 1; lp++) {
        check(w, 2 * n * 6, lp, 11);
        check(w, 2 * n * 70, lp, 21);
    }
    check_lend(w, 2 * n * 70);
    td_comm *self = td_comm_split(w, r, 0, "cp1"); /* each rank alone: cp = 1 */
    check(self, 2 * 70, 0, 31);
    td_comm_free(self);
    td_attn_release_scratch();
    int rc = tu_finish("test_cp_ring");
    td_comm_finalize();
    return rc;
}
