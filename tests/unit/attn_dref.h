/* The double-precision attention reference and random problems shared by
 * the blocked attention tests (test_attention_blocked.c: fp32 kernel,
 * test_attention_lowp.c: bf16 / fp16). Header-only, static. */
#ifndef TD_TEST_ATTN_DREF_H
#define TD_TEST_ATTN_DREF_H

#include <math.h>
#include <stdlib.h>

#include "test_util.h"
#include "trident/attention.h"

/* lse values that are -inf in the reference must be exactly -inf; the
 * finite ones are compared with tolerance tol (tu_check_close with floor,
 * after the -inf are set to 0). */
static inline void attn_check_lse(const char *name, const float *got, const double *exp, size_t n, double tol,
                                  double floor) {
    float *g = tu_copy(got, n);
    double *e = TU_NEW(double, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (isinf(exp[i]))
            bad |= !(isinf(g[i]) && g[i] < 0), g[i] = 0, e[i] = 0;
        else
            e[i] = exp[i];
    }
    TU_EXPECT(!bad, "%s: a row without visible keys must have lse = -inf", name);
    tu_check_close(name, g, e, n, tol, floor);
}

/* ---- double reference ---- */

/* Document masking's explicit mask: the document id of each global
 * position of each sequence ([B, doc_len]), or NULL (one document). The
 * kernels take the derived starts (s->doc_start); the reference compares
 * ids, so it shares nothing with the kernels' range logic. */
static const int *g_doc_id;

static inline int dvis(const td_attn_shape *s, int b, int i, int j) {
    if (g_doc_id) {
        const int *id = g_doc_id + (size_t)b * s->doc_len;
        if (id[s->q_pos + i] != id[s->k_pos + j]) return 0;
    }
    return s->mask == TD_ATTN_NONE || s->k_pos + j <= s->q_pos + i;
}

/* Documents for a problem whose global sequences have `len` positions:
 * sequence b gets a new document at each position listed in cuts[b]
 * (ascending, ended by -1). Sets g_doc_id and the shape's doc_start
 * (derived: the first position with the same id). NULL cuts: none. */
static inline void attn_set_docs(td_attn_shape *s, int len, const int *const *cuts) {
    if (!cuts) {
        g_doc_id = NULL, s->doc_start = NULL, s->doc_len = 0;
        return;
    }
    int *id = TU_NEW(int, (size_t)s->B * len), *st = TU_NEW(int, (size_t)s->B * len);
    for (int b = 0; b < s->B; b++) {
        int d = 0, c = 0;
        for (int t = 0; t < len; t++) {
            if (cuts[b][c] == t) d++, c++;
            id[(size_t)b * len + t] = d;
        }
        for (int t = 0; t < len; t++) {
            int f = t;
            while (f > 0 && id[(size_t)b * len + f - 1] == id[(size_t)b * len + t]) f--;
            st[(size_t)b * len + t] = f;
        }
    }
    g_doc_id = id, s->doc_start = st, s->doc_len = len;
}

/* out, lse as the header defines them; when dout != NULL also ADDS the
 * analytic gradients into dq, dk, dv (same layouts as q, k, v). */
static inline void dref(double *out, double *lse, double *dq, double *dk, double *dv,
                        const double *dout, const double *q, const double *k, const double *v,
                        const td_attn_shape *s) {
    int hs = s->hs, G = s->NH / s->NKV;
    double scale = 1.0 / sqrt((double)hs), p[1024], dp[1024];
    if (s->Tk > 1024) abort(); /* the row buffers below */
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int i = 0; i < s->Tq; i++) {
                const double *qi = q + ((size_t)b * s->Tq + i) * s->q_stride + h * hs;
                size_t kb = (size_t)b * s->Tk * s->kv_stride + (h / G) * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < s->Tk; j++) {
                    p[j] = -INFINITY;
                    if (!dvis(s, b, i, j)) continue;
                    double a = 0;
                    for (int d = 0; d < hs; d++) a += qi[d] * k[kb + (size_t)j * s->kv_stride + d];
                    p[j] = a * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < s->Tk; j++) sum += (p[j] = dvis(s, b, i, j) ? exp(p[j] - mx) : 0);
                double *o = out + ((size_t)b * s->Tq + i) * s->o_stride + h * hs;
                lse[((size_t)b * s->NH + h) * s->Tq + i] = sum > 0 ? mx + log(sum) : -INFINITY;
                for (int j = 0; j < s->Tk; j++) p[j] = sum > 0 ? p[j] / sum : 0;
                for (int d = 0; d < hs; d++) {
                    double a = 0;
                    for (int j = 0; j < s->Tk; j++)
                        a += p[j] * v[kb + (size_t)j * s->kv_stride + d];
                    o[d] = a;
                }
                if (!dout) continue;
                const double *go = dout + ((size_t)b * s->Tq + i) * s->o_stride + h * hs;
                double D = 0;
                for (int d = 0; d < hs; d++) D += go[d] * o[d];
                double *gq = dq + ((size_t)b * s->Tq + i) * s->q_stride + h * hs;
                for (int j = 0; j < s->Tk; j++) {
                    size_t kj = kb + (size_t)j * s->kv_stride;
                    dp[j] = 0;
                    for (int d = 0; d < hs; d++) dp[j] += go[d] * v[kj + d];
                    double ds = p[j] * (dp[j] - D) * scale;
                    for (int d = 0; d < hs; d++) {
                        dv[kj + d] += p[j] * go[d];
                        gq[d] += ds * k[kj + d];
                        dk[kj + d] += ds * qi[d];
                    }
                }
            }
}

/* A problem: separate q [B,Tq,NH*hs], k, v [B,Tk,NKV*hs], dout, with
 * random data; float and double copies. */
typedef struct {
    td_attn_shape s;
    size_t nq, nk, nl;
    float *q, *k, *v, *dout;
    double *dq_, *dk_, *dv_, *dd; /* double copies of q, k, v, dout */
} prob;

static inline prob make(int B, int Tq, int Tk, int NH, int NKV, int hs, long qp, long kp,
                        td_attn_mask mask, uint64_t seed) {
    prob p = {.s = {B, Tq, Tk, NH, NKV, hs, NH * hs, NKV * hs, NH * hs, qp, kp, mask}};
    p.nq = (size_t)B * Tq * NH * hs, p.nk = (size_t)B * Tk * NKV * hs, p.nl = (size_t)B * NH * Tq;
    p.q = TU_NEW(float, p.nq), p.k = TU_NEW(float, p.nk), p.v = TU_NEW(float, p.nk);
    p.dout = TU_NEW(float, p.nq);
    tu_randn(p.q, p.nq, seed, 1.0f), tu_randn(p.k, p.nk, seed + 1, 1.0f);
    tu_randn(p.v, p.nk, seed + 2, 1.0f), tu_randn(p.dout, p.nq, seed + 3, 1.0f);
    p.dq_ = tu_to_double(p.q, p.nq), p.dk_ = tu_to_double(p.k, p.nk);
    p.dv_ = tu_to_double(p.v, p.nk), p.dd = tu_to_double(p.dout, p.nq);
    return p;
}

/* Per-element bounds of the 16-bit kernels' distance from the exact values
 * before each output's final rounding (derived in test_attention_lowp.c's
 * header; u, eta: the type's unit roundoff and absolute floor), ADDED into
 * bo (layout of out), bq (of q), bk, bv (of k, v), which may share one
 * fused array: bo_i = sum_j (u P_ij + eta) |v_j|, bv_j = sum_i (u P_ij +
 * eta) |dO_i|, bk_j = sum_i w_ij |q_i|, bq_i = sum_j w_ij |k_j| with w_ij =
 * u |dS_ij| + eta + P_ij scale dD_i, dD_i = sum_d |dO_id| oerr_id, oerr a
 * bound on the distance of the out the backward is given from the exact
 * one (layout of out). */
static inline void attn_lp_bounds(double *bo, double *bq, double *bk, double *bv,
                                  const double *oerr, const double *q, const double *k,
                                  const double *v, const double *dout, const td_attn_shape *s,
                                  double u, double eta) {
    int hs = s->hs, G = s->NH / s->NKV;
    double sc = 1.0 / sqrt((double)hs), P[1024];
    if (s->Tk > 1024) abort(); /* the row buffer */
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->NH; h++)
            for (int i = 0; i < s->Tq; i++) {
                size_t qi = ((size_t)b * s->Tq + i) * s->q_stride + h * hs;
                size_t oi = ((size_t)b * s->Tq + i) * s->o_stride + h * hs;
                size_t kb = (size_t)b * s->Tk * s->kv_stride + (h / G) * hs;
                double mx = -INFINITY, sum = 0, D = 0, dD = 0;
                for (int j = 0; j < s->Tk; j++) {
                    double a = 0;
                    for (int d = 0; d < hs; d++)
                        a += q[qi + d] * k[kb + (size_t)j * s->kv_stride + d];
                    P[j] = dvis(s, b, i, j) ? a * sc : -INFINITY;
                    mx = fmax(mx, P[j]);
                }
                for (int j = 0; j < s->Tk; j++) sum += (P[j] = dvis(s, b, i, j) ? exp(P[j] - mx) : 0);
                for (int j = 0; j < s->Tk; j++) P[j] = sum > 0 ? P[j] / sum : 0;
                for (int d = 0; d < hs; d++) {
                    double o = 0;
                    for (int j = 0; j < s->Tk; j++)
                        o += P[j] * v[kb + (size_t)j * s->kv_stride + d];
                    D += dout[oi + d] * o, dD += fabs(dout[oi + d]) * oerr[oi + d];
                }
                for (int j = 0; j < s->Tk; j++) {
                    if (!dvis(s, b, i, j)) continue;
                    size_t kj = kb + (size_t)j * s->kv_stride;
                    double dp = 0;
                    for (int d = 0; d < hs; d++) dp += dout[oi + d] * v[kj + d];
                    double ds = fabs(P[j] * (dp - D) * sc);
                    double wp = u * P[j] + eta, ws = u * ds + eta + P[j] * sc * dD;
                    for (int d = 0; d < hs; d++) {
                        bo[oi + d] += wp * fabs(v[kj + d]);
                        bv[kj + d] += wp * fabs(dout[oi + d]);
                        bk[kj + d] += ws * fabs(q[qi + d]);
                        bq[qi + d] += ws * fabs(k[kj + d]);
                    }
                }
            }
}

#endif
