/* The mixture of experts' device ops (kernels_moe.h, through the CPU
 * backend's rows of backend.h) against double references: the router's
 * scores, the dispatch's gather, the combine and its backward, the
 * dispatch's backward (scatter-add), and the router's gradient against
 * central finite differences of the loss it is the gradient of.
 *
 * Tolerances: the ops compute in fp32 with sums of at most E or C terms in
 * double or K terms in float, so 1e-5 relative (with a 1e-3 rms floor for
 * cancellation) is a few hundred ulps of slack and still catches a wrong
 * weight, row or term (errors >= 1e-2). The finite differences (h = 1e-3,
 * central, in double) are exact to ~1e-7 for these smooth functions; the
 * fp32 gradient is compared at 1e-4 relative with a 1e-2 floor. Rows moved
 * without arithmetic, and products of one float multiplication, are
 * compared bitwise. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/backend.h"
#include "trident/kernels_bf16.h"
#include "trident/kernels_moe.h"

enum { N = 12, E = 6, K = 2, C = 10 };

/* A routing: idx distinct per token, pos a permutation of the kept
 * assignments with every fifth dropped. */
static void routing(int *idx, int *pos, float *wts, int *kept) {
    int next = 0;
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int j = t * K + k;
            idx[j] = (t + 3 * k) % E;
            pos[j] = j % 5 == 4 ? -1 : next++;
            wts[j] = 0.25f + 0.125f * (float)((t + k) % 5);
        }
    /* reverse the send order: rows do not stay in token order */
    for (int j = 0; j < N * K; j++)
        if (pos[j] >= 0) pos[j] = next - 1 - pos[j];
    *kept = next;
}

static void test_scores(const td_ops *o) {
    float *lg = TU_NEW(float, N * E), *sc = TU_NEW(float, N * E);
    double *ref = TU_NEW(double, N * E);
    tu_randn(lg, N * E, 1, 2.0f);
    for (int softmax = 0; softmax < 2; softmax++) {
        o->moe_scores(sc, lg, N, E, softmax);
        for (int t = 0; t < N; t++) {
            double s = 0.0;
            for (int i = 0; i < E; i++) s += exp((double)lg[t * E + i]);
            for (int i = 0; i < E; i++) {
                double x = lg[t * E + i];
                ref[t * E + i] = softmax ? exp(x) / s : 1.0 / (1.0 + exp(-x));
            }
        }
        tu_check_close(softmax ? "moe_scores softmax vs double" : "moe_scores sigmoid vs double", sc,
                       ref, N * E, 1e-6, 0.0);
    }
    double lse_ref = 0.0;
    for (int i = 0; i < E; i++) lse_ref += exp((double)lg[i]);
    float got = (float)td_moe_log_sum_exp(lg, E);
    double want = log(lse_ref);
    tu_check_close("moe log_sum_exp vs double", &got, &want, 1, 1e-6, 0.0);
}

/* widen a row of the precision k */
static double at(td_ktype k, const void *p, size_t i) {
    return k == TD_K_F32 ? (double)((const float *)p)[i] : (double)td_bf16_to_float(((const td_bf16 *)p)[i]);
}

static void fill(td_ktype k, void *p, size_t n, uint64_t stream) {
    float *f = TU_NEW(float, n);
    tu_randn(f, n, stream, 1.0f);
    if (k == TD_K_F32)
        memcpy(p, f, n * 4);
    else
        td_bf16_from_float_n(p, f, n);
}

static void test_rows(td_ktype k) {
    const td_ops *o = td_ops_cpu(k);
    size_t es = o->es;
    int idx[N * K], pos[N * K], kept;
    float wts[N * K];
    routing(idx, pos, wts, &kept);
    char name[96];
    const char *kn = k == TD_K_F32 ? "f32" : "bf16";

    /* gather: every kept row is its token's, bitwise */
    void *x = tu_alloc(es * N * C), *xs = tu_alloc(es * (size_t)kept * C);
    fill(k, x, (size_t)N * C, 2);
    o->moe_gather(xs, x, pos, N, K, C);
    int bad = 0;
    for (int j = 0; j < N * K; j++)
        if (pos[j] >= 0 && memcmp((char *)xs + es * (size_t)pos[j] * C, (char *)x + es * (size_t)(j / K) * C, es * C))
            bad++;
    tu_checks++;
    snprintf(name, sizeof name, "moe_gather %s: rows bitwise", kn);
    printf("%s  %-52s %d rows wrong\n", bad ? "FAIL" : "PASS", name, bad);
    tu_failures += bad != 0;

    /* combine, with the shared experts' rows read in place at row0 + r */
    void *y = tu_alloc(es * (size_t)kept * C);
    fill(k, y, (size_t)kept * C, 3);
    int row0 = 4, Ns = N - row0;
    for (int shared = 0; shared < 2; shared++) {
        float *out = TU_NEW(float, N * C);
        tu_randn(out, N * C, 4, 1.0f);
        double *ref = TU_NEW(double, Ns * C);
        for (int r = 0; r < Ns; r++)
            for (int c = 0; c < C; c++) {
                int t = row0 + r;
                double v = shared ? out[t * C + c] : 0.0;
                for (int kk = 0; kk < K; kk++)
                    if (pos[t * K + kk] >= 0) v += wts[t * K + kk] * at(k, y, (size_t)pos[t * K + kk] * C + c);
                ref[r * C + c] = v;
            }
        o->moe_combine(out, shared, y, pos, wts, row0, Ns, K, C);
        snprintf(name, sizeof name, "moe_combine %s shared=%d vs double", kn, shared);
        tu_check_close(name, out, ref, (size_t)Ns * C, 1e-5, 1e-3);
    }

    /* its backward: dw = dout . y (0 when dropped), dy = w dout rounded */
    void *dout = tu_alloc(es * N * C), *dy = tu_alloc(es * (size_t)kept * C);
    fill(k, dout, (size_t)N * C, 5);
    float *dw = TU_NEW(float, N * K);
    double *dwr = TU_NEW(double, N * K);
    float *dyg = TU_NEW(float, (size_t)kept * C), *dye = TU_NEW(float, (size_t)kept * C);
    for (int j = 0; j < N * K; j++) {
        dw[j] = 99.0f;
        double s = 0.0;
        for (int c = 0; c < C && pos[j] >= 0; c++) {
            s += at(k, dout, (size_t)(j / K) * C + c) * at(k, y, (size_t)pos[j] * C + c);
            float p = wts[j] * (float)at(k, dout, (size_t)(j / K) * C + c);
            dye[(size_t)pos[j] * C + c] = k == TD_K_F32 ? p : td_bf16_to_float(td_bf16_from_float(p));
        }
        dwr[j] = s;
    }
    o->moe_combine_bwd(dw, dy, dout, y, pos, wts, N, K, C);
    for (size_t i = 0; i < (size_t)kept * C; i++) dyg[i] = (float)at(k, dy, i);
    snprintf(name, sizeof name, "moe_combine_bwd %s dw vs double", kn);
    tu_check_close(name, dw, dwr, N * K, 1e-5, 1e-3);
    snprintf(name, sizeof name, "moe_combine_bwd %s dy bitwise", kn);
    tu_check_bitwise(name, dyg, dye, (size_t)kept * C);

    /* the dispatch's backward: dst[t] += dx[pos] */
    float *dst = TU_NEW(float, N * C);
    tu_randn(dst, N * C, 6, 1.0f);
    double *dref = tu_to_double(dst, N * C);
    for (int j = 0; j < N * K; j++)
        for (int c = 0; c < C && pos[j] >= 0; c++) dref[(j / K) * C + c] += at(k, y, (size_t)pos[j] * C + c);
    o->moe_scatter_add(dst, y, pos, N, K, C);
    snprintf(name, sizeof name, "moe_scatter_add %s vs double", kn);
    tu_check_close(name, dst, dref, N * C, 1e-5, 1e-3);
}

/* The loss whose logits' gradient moe_router_bwd is, in double, with the
 * routing (idx) and the statistics fixed. */
static double phi(const double *lg, const int *idx, const float *dw, const float *st,
                  const td_moe_router_shape *s) {
    double ntot = st[2 * E], v = 0.0;
    for (int t = 0; t < N; t++) {
        const double *l = lg + t * E;
        double sc[E], mx = l[0], sum = 0.0;
        for (int i = 1; i < E; i++) mx = fmax(mx, l[i]);
        for (int i = 0; i < E; i++) sum += exp(l[i] - mx);
        double lse = mx + log(sum);
        for (int i = 0; i < E; i++) sc[i] = s->softmax ? exp(l[i] - lse) : 1.0 / (1.0 + exp(-l[i]));
        double gs = 0.0;
        for (int k = 0; k < K; k++) gs += sc[idx[t * K + k]];
        for (int k = 0; k < K; k++) {
            double g = sc[idx[t * K + k]];
            v += dw[t * K + k] * (s->norm_topk ? g / gs : g);
        }
        for (int i = 0; i < E; i++) v += s->dloss * s->aux_coef * E * (st[i] / (ntot * K)) * sc[i];
        v += s->dloss * s->z_coef * lse * lse;
    }
    return v;
}

static void test_router_bwd(void) {
    const td_ops *o = td_ops_cpu(TD_K_F32);
    float *lg = TU_NEW(float, N * E), *sc = TU_NEW(float, N * E), *dl = TU_NEW(float, N * E);
    float *dw = TU_NEW(float, N * K), *gate = TU_NEW(float, N * K), *wts = TU_NEW(float, N * K);
    float st[2 * E + 3];
    int idx[N * K], pos[N * K], kept;
    double *lgd = TU_NEW(double, N * E), *fd = TU_NEW(double, N * E);
    tu_randn(lg, N * E, 7, 1.0f);
    tu_randn(dw, N * K, 8, 1.0f);
    routing(idx, pos, wts, &kept);
    memset(st, 0, sizeof st);
    for (int j = 0; j < N * K; j++) st[idx[j]] += 1.0f;
    st[2 * E] = (float)N;
    for (int softmax = 0; softmax < 2; softmax++) {
        td_moe_router_shape s = {N, E, K, softmax, softmax, 0.01f, 0.05f, 1.0f / N};
        o->moe_scores(sc, lg, N, E, softmax);
        for (int t = 0; t < N; t++) {
            double gs = 0.0;
            for (int k = 0; k < K; k++) gs += gate[t * K + k] = sc[t * E + idx[t * K + k]];
            for (int k = 0; k < K; k++) wts[t * K + k] = softmax ? (float)(gate[t * K + k] / gs) : gate[t * K + k];
        }
        o->moe_router_bwd(dl, dw, lg, sc, idx, gate, wts, st, &s);
        for (int i = 0; i < N * E; i++) lgd[i] = lg[i];
        for (int i = 0; i < N * E; i++) {
            double h = 1e-3, x = lgd[i];
            lgd[i] = x + h;
            double up = phi(lgd, idx, dw, st, &s);
            lgd[i] = x - h;
            double dn = phi(lgd, idx, dw, st, &s);
            lgd[i] = x;
            fd[i] = (up - dn) / (2 * h);
        }
        tu_check_close(softmax ? "moe_router_bwd softmax, normalised top-K vs finite diff"
                               : "moe_router_bwd sigmoid vs finite differences",
                       dl, fd, N * E, 1e-4, 1e-2);
    }
}

int main(void) {
    for (int k = 0; k < 3; k++) {
        const td_ops *o = td_ops_cpu((td_ktype)k);
        tu_checks++;
        int all = o->moe_scores && o->moe_gather && o->moe_combine && o->moe_combine_bwd &&
                  o->moe_scatter_add && o->moe_router_bwd;
        printf("%s  cpu row %d has every moe entry\n", all ? "PASS" : "FAIL", k);
        tu_failures += !all;
    }
    test_scores(td_ops_cpu(TD_K_F32));
    test_rows(TD_K_F32);
    test_rows(TD_K_BF16);
    test_router_bwd();
    tu_free_all();
    printf("%d/%d checks passed\n", tu_checks - tu_failures, tu_checks);
    return tu_failures ? 1 : 0;
}
