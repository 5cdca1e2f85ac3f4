/* The Llama kernels: RMSNorm and SwiGLU (kernels.h, kernels_bf16.h,
 * kernels_f16.h). Oracles, in order of authority:
 *  1. double-precision forwards written here, the backward formulas in
 *     double, and central finite differences (FD) of the double forwards
 *     (objective sum(out * dout) for random dout);
 *  2. the *_ref loops for the fast kernels;
 *  3. the 1-thread result for 2 threads (bitwise);
 *  4. for the 16-bit kernels, the fp32 kernel on the same 16-bit-valued
 *     inputs.
 *
 * Bounds are per element, derived from the arithmetic (first order in the
 * unit roundoff u = 2^-24, plus 1 u of slack for the second-order terms);
 * each check prints its worst error as a fraction of its bound.
 *  RMSNorm forward. td_k_dot's path to the sum of squares is 1 product,
 *   C/16 lane adds, 4 tree levels and C%16 tail adds: kf = C/16 + C%16 + 5
 *   roundings; the _ref loop's one running sum kr = C + 1. A sum of
 *   positive terms loses at most k u relative, /C and + eps one u each,
 *   sqrt halves and adds one, 1/x adds one: rstd is within
 *   e_s(k) = ((k + 3) / 2 + 3) u relative, and out = x rstd w (two more
 *   products) within e_s(k) + 3 u relative, per element (no cancellation).
 *  RMSNorm dinp. With dn = w dout, xh = x rstd, A = mean|dn xh|: the mean
 *   m = mean(dn xh) is within (k + e_s/u + 3) u A (k roundings of the dot,
 *   the products' and rstd's errors), xh m within (k + 2 e_s/u + 5) u
 *   |xh| A, dn - xh m adds u (|dn| + |xh| A), the final * rstd adds
 *   (e_s + u) and the += one rounding of the result: |err| <= (k + 3 e_s/u
 *   + 8) u mag + u |dinp|, mag = rstd (|dn| + |xh| A). k = kf for the fast
 *   kernel (its dot has kf roundings), C + 3 for the _ref loop.
 *  RMSNorm dw = dw0 + sum_n dout x rstd: each term has 2 roundings plus
 *   rstd's error, the double row sum is exact to 2^-53 N, the final add one
 *   u: (e_s/u + 3) u sum|terms| + u |dw|; the _ref's N float adds into dw
 *   add N u (|dw0| + sum|terms|).
 *  SwiGLU. E = 2 u bounds expf's relative error: td_k_expf measured
 *   1.37 u at worst, glibc's expf (the _ref's) 1.0 u, over every float in
 *   [-80, 80] (scratch sweeps when this was written). Fast: s = 1/(1 + e)
 *   within E + 2 u, h = g/(1 + e) * u within E + 3 u, du = dh (g s) within
 *   E + 4 u, all relative (products only), +1 u slack: 6 u, 7 u. _ref:
 *   e/(1 + e) puts E in numerator and denominator: s within 2 E + 2 u, so h
 *   and du within 2 E + 4 u (+1: 9 u). dg = dh u s (1 + g e s): e s is
 *   within 2 E + 3 u, g e s 2 E + 4 u, the sum is within that times |g e s|
 *   plus u (1 + |g e s|), * s adds E + 3 u, the two products 2 u:
 *   (3 E + 11 u) |dh u| s (1 + |g| (1 - s)) (no relative bound: silu' has a
 *   zero at g ~ -1.28). The _ref's 1 - s is a subtraction, whose absolute
 *   error s (2 E + 2 u) is then multiplied by |g|: (4 E + 11 u) |dh u| s
 *   (1 + |g|).
 *  Large |g| (beyond the clamp at +-80): the fast kernel is off by at most
 *   80 e^-80 ~ 1.5e-33 absolute per unit factor (swiglu.c); 2e-33 |factor|.
 *  FD. Central differences in double with h ~ 1e-6 |x| are exact to ~1e-9
 *   of the gradient's scale (test_util.h's tu_fd_of); FD_TOL = 1e-6
 *   relative with the 0.1 rms floor leaves 1000x and still misses no
 *   formula error (a dropped term is >= 1e-2 of the rms; the deliberately
 *   wrong backwards below must fail). The float backward against FD gets
 *   its arithmetic bound plus this.
 *  16-bit. Rounding to nearest moves a value x by at most u_t |x| + eta_t:
 *   u_t = 2^-8 (bf16) or 2^-11 (fp16), eta_t half the subnormal spacing,
 *   2^-134 (bf16) or 2^-25 (fp16). The 16-bit kernels compute exactly the
 *   fp32 kernel's value on the tile and round it once, so one rounding
 *   bounds every 16-bit output against the fp32 kernel on the same
 *   16-bit-valued inputs (dinp: old value + fp32 terms, rounded once); one
 *   derivation for both types. rstd is compared bitwise (same fp32 rows).
 *   dw gets one float add per tile of rows: T tiles differ from the fp32
 *   kernel's single add by at most T u (|dw0| + sum|terms|). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

#define U 0x1p-24
#define E_EXP (2 * U)
#define FD_TOL 1e-6
#define FLOOR 0.1
#define BIG_ABS 2e-33

/* ---- the check: |got - exp| <= bnd per element ------------------------------- */

/* expect_fail: the check passes when some element is out of bounds (a
 * deliberately wrong result must be caught). */
static void check_bnd(const char *name, const double *got, const double *exp, const double *bnd,
                      size_t n, int expect_fail) {
    double worst = 0.0;
    size_t wi = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(got[i] - exp[i]) / bnd[i];
        if (got[i] == exp[i]) r = 0.0; /* also inf == inf, 0 bounds */
        if (!(r <= 1.0)) bad++;        /* NaN fails */
        if (!(r <= worst)) worst = r, wi = i;
    }
    int ok = expect_fail ? bad > 0 : bad == 0;
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%s  %-58s n=%-6zu worst %.3g of the bound%s\n", ok ? "PASS" : "FAIL", name, n, worst,
           expect_fail ? (bad ? " (caught)" : " (NOT caught)") : "");
    if (!ok && !expect_fail)
        printf("      worst [%zu]: got %.9g expected %.9g bound %.3g; %zu over\n", wi, got[wi],
               exp[wi], bnd[wi], bad);
}

static double *dbl(const float *f, size_t n) { return tu_to_double(f, n); }
static double *dnew(size_t n) { return TU_NEW(double, n); }

/* b[i] = a * m[i] + c * |e[i]| */
static double *bnd_of(double a, const double *m, double c, const double *e, size_t n) {
    double *b = dnew(n);
    for (size_t i = 0; i < n; i++) b[i] = (m ? a * m[i] : 0.0) + (e ? c * fabs(e[i]) : 0.0);
    return b;
}

static double rms(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / n) : 0.0;
}

/* b[i] += FD_TOL (|fd[i]| + FLOOR rms(fd)): the FD allowance */
static void add_fd(double *b, const double *fd, size_t n) {
    double fl = FLOOR * rms(fd, n);
    for (size_t i = 0; i < n; i++) b[i] += FD_TOL * (fabs(fd[i]) + fl);
}

/* ---- finite differences ---------------------------------------------------------- */


/* ---- RMSNorm ------------------------------------------------------------------------ */

static void dref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C,
                         double eps) {
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += r[c] * r[c];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = r[c] * s * w[c];
        if (rstd) rstd[n] = s;
    }
}

/* The backward formula in double (written, not added), with the
 * magnitudes the bounds need: mdx = rstd (|dn| + |xh| A), mdw = sum|terms|. */
static void dref_rmsnorm_bwd(double *dx, double *dw, double *mdx, double *mdw, const double *dout,
                             const double *x, const double *w, int N, int C, double eps) {
    for (int c = 0; c < C; c++) dw[c] = mdw[c] = 0;
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C, *g = dout + (size_t)n * C;
        double ss = 0, m = 0, A = 0;
        for (int c = 0; c < C; c++) ss += r[c] * r[c];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) m += w[c] * g[c] * r[c] * s, A += fabs(w[c] * g[c] * r[c] * s);
        m /= C, A /= C;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            dx[i] = s * (w[c] * g[c] - r[c] * s * m);
            mdx[i] = s * (fabs(w[c] * g[c]) + fabs(r[c] * s) * A);
            dw[c] += g[c] * r[c] * s;
            mdw[c] += fabs(g[c] * r[c] * s);
        }
    }
}

struct rms_ctx {
    int N, C;
    double eps, *x, *w, *dout, *tmp;
};
static double rms_obj(void *p) {
    struct rms_ctx *c = p;
    dref_rmsnorm(c->tmp, NULL, c->x, c->w, c->N, c->C, c->eps);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->N * c->C; i++) s += c->tmp[i] * c->dout[i];
    return s;
}

static double e_s(int k) { return ((k + 3) / 2.0 + 3) * U; }
static int kf_of(int C) { return C / 16 + C % 16 + 5; }

/* dst = a + b (the expectation of a += kernel) */
static double *plus(const float *a, const double *b, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
    return d;
}

static char *nm(const char *a, const char *b) {
    static char buf[4][128];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s %s", a, b);
    return buf[k];
}

static void test_rmsnorm(int N, int C, float eps, int fd) {
    int mark = tu_mark();
    size_t n = (size_t)N * C;
    char lab[48];
    snprintf(lab, sizeof lab, "rmsnorm N=%d C=%d eps=%g", N, C, (double)eps);
    float *x = TU_NEW(float, n), *w = TU_NEW(float, C), *dout = TU_NEW(float, n);
    float *dx0 = TU_NEW(float, n), *dw0 = TU_NEW(float, C);
    tu_randn(x, n, 100 + C, 1.0f);
    /* Row scales 1e-2..10: at 1e-2 the mean square is 1e-4, so eps = 1e-5
     * moves rstd by 5% and eps = 1e-6 by 0.5%: a wrong eps cannot pass. */
    for (int r = 0; r < N; r++) {
        float sc = N > 1 ? powf(10.0f, -2.0f + 3.0f * r / (N - 1)) : 1e-2f;
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] *= sc;
    }
    tu_randn(w, C, 101, 0.3f);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    tu_randn(dout, n, 102, 1.0f);
    tu_randn(dx0, n, 103, 1.0f);
    tu_randn(dw0, C, 104, 1.0f);
    double *xd = dbl(x, n), *wd = dbl(w, C), *gd = dbl(dout, n);
    double *out_e = dnew(n), *rstd_e = dnew(N);
    dref_rmsnorm(out_e, rstd_e, xd, wd, N, C, eps);
    double *dx_e = dnew(n), *dw_e = dnew(C), *mdx = dnew(n), *mdw = dnew(C);
    dref_rmsnorm_bwd(dx_e, dw_e, mdx, mdw, gd, xd, wd, N, C, eps);
    int kf = kf_of(C), kr = C + 1;

    /* forward: fast and _ref against double, then against each other */
    float *out = TU_NEW(float, n), *rstd = TU_NEW(float, N);
    float *out_r = TU_NEW(float, n), *rstd_r = TU_NEW(float, N);
    td_rmsnorm_forward(out, rstd, x, w, N, C, eps);
    td_rmsnorm_forward_ref(out_r, rstd_r, x, w, N, C, eps);
    check_bnd(nm(lab, "fwd out vs double"), dbl(out, n), out_e,
              bnd_of(0, NULL, e_s(kf) + 3 * U, out_e, n), n, 0);
    check_bnd(nm(lab, "fwd rstd vs double"), dbl(rstd, N), rstd_e,
              bnd_of(0, NULL, e_s(kf), rstd_e, N), N, 0);
    check_bnd(nm(lab, "fwd_ref out vs double"), dbl(out_r, n), out_e,
              bnd_of(0, NULL, e_s(kr) + 3 * U, out_e, n), n, 0);
    check_bnd(nm(lab, "fwd out fast vs _ref"), dbl(out, n), dbl(out_r, n),
              bnd_of(0, NULL, e_s(kf) + e_s(kr) + 6 * U, out_e, n), n, 0);
    float *out_nr = TU_NEW(float, n);
    td_rmsnorm_forward(out_nr, NULL, x, w, N, C, eps);
    tu_check_bitwise(nm(lab, "fwd rstd=NULL: same out"), out_nr, out, n);

    /* eps matters: the other Llama eps must fail against this reference */
    if (N > 1) {
        td_rmsnorm_forward(out_nr, NULL, x, w, N, C, eps == 1e-5f ? 1e-6f : 1e-5f);
        check_bnd(nm(lab, "fwd with the other eps is caught"), dbl(out_nr, n), out_e,
                  bnd_of(0, NULL, e_s(kf) + 3 * U, out_e, n), n, 1);
    }

    /* backward (adds into dx0, dw0), fast and _ref, same rstd (the fast one) */
    float *dx = tu_copy(dx0, n), *dw = tu_copy(dw0, C);
    float *dx_r = tu_copy(dx0, n), *dw_r = tu_copy(dw0, C);
    td_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
    td_rmsnorm_backward_ref(dx_r, dw_r, dout, x, w, rstd, N, C);
    double es = e_s(kf) / U;
    double *dx_x = plus(dx0, dx_e, n), *dw_x = plus(dw0, dw_e, C);
    double *bdx = bnd_of((kf + 3 * es + 8) * U, mdx, U, dx_x, n);
    double *bdx_r = bnd_of((C + 3 + 3 * es + 8) * U, mdx, U, dx_x, n);
    double *bdw = bnd_of((es + 3) * U, mdw, U, dw_x, C);
    double *mdw_r = dnew(C);
    for (int c = 0; c < C; c++) mdw_r[c] = fabs(dw0[c]) + mdw[c];
    double *bdw_r = bnd_of((es + 3 + N) * U, mdw_r, 0, NULL, C);
    check_bnd(nm(lab, "bwd dinp += vs double formula"), dbl(dx, n), dx_x, bdx, n, 0);
    check_bnd(nm(lab, "bwd dw += vs double formula"), dbl(dw, C), dw_x, bdw, C, 0);
    check_bnd(nm(lab, "bwd_ref dinp += vs double formula"), dbl(dx_r, n), dx_x, bdx_r, n, 0);
    check_bnd(nm(lab, "bwd_ref dw += vs double formula"), dbl(dw_r, C), dw_x, bdw_r, C, 0);
    double *b2 = dnew(n), *b3 = dnew(C);
    for (size_t i = 0; i < n; i++) b2[i] = bdx[i] + bdx_r[i];
    for (int c = 0; c < C; c++) b3[c] = bdw[c] + bdw_r[c];
    check_bnd(nm(lab, "bwd dinp fast vs _ref"), dbl(dx, n), dbl(dx_r, n), b2, n, 0);
    check_bnd(nm(lab, "bwd dw fast vs _ref"), dbl(dw, C), dbl(dw_r, C), b3, C, 0);

    /* a wrong dinp (rstd's dependence on x forgotten: rstd w dout) is caught */
    float *dx_bad = tu_copy(dx0, n);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            dx_bad[(size_t)r * C + c] += rstd[r] * w[c] * dout[(size_t)r * C + c];
    check_bnd(nm(lab, "bwd wrong dinp (no mean term) is caught"), dbl(dx_bad, n), dx_x, bdx, n, 1);

    /* NULL outputs are skipped and change nothing else */
    float *dx1 = tu_copy(dx0, n), *dw1 = tu_copy(dw0, C);
    td_rmsnorm_backward(dx1, NULL, dout, x, w, rstd, N, C);
    td_rmsnorm_backward(NULL, dw1, dout, x, w, rstd, N, C);
    tu_check_bitwise(nm(lab, "bwd dw=NULL: same dinp"), dx1, dx, n);
    tu_check_bitwise(nm(lab, "bwd dinp=NULL: same dw"), dw1, dw, C);

    if (fd) { /* the formula and the kernel against FD of the double forward */
        struct rms_ctx cx = {N, C, eps, xd, wd, gd, dnew(n)};
        double *fx = tu_fd_of(xd, n, rms_obj, &cx), *fw = tu_fd_of(wd, C, rms_obj, &cx);
        double *z = bnd_of(0, NULL, 0, NULL, n), *zw = bnd_of(0, NULL, 0, NULL, C);
        add_fd(z, fx, n), add_fd(zw, fw, C);
        check_bnd(nm(lab, "double formula dinp vs FD"), dx_e, fx, z, n, 0);
        check_bnd(nm(lab, "double formula dw vs FD"), dw_e, fw, zw, C, 0);
        double *fx0 = plus(dx0, fx, n), *fw0 = plus(dw0, fw, C);
        add_fd(bdx, fx, n), add_fd(bdw, fw, C);
        check_bnd(nm(lab, "bwd dinp += vs FD"), dbl(dx, n), fx0, bdx, n, 0);
        check_bnd(nm(lab, "bwd dw += vs FD"), dbl(dw, C), fw0, bdw, C, 0);
    }
    tu_release(mark);
}

/* ---- SwiGLU --------------------------------------------------------------------------- */

/* s = sigmoid(x) and 1 - s, in double without overflow or cancellation */
static void dsig(double x, double *s, double *oms) {
    if (x >= 0) {
        double e = exp(-x);
        *s = 1 / (1 + e), *oms = e / (1 + e);
    } else {
        double e = exp(x);
        *s = e / (1 + e), *oms = 1 / (1 + e);
    }
}

static void dref_swiglu(double *h, const double *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double x = gu[(size_t)n * 2 * F + f], y = gu[(size_t)n * 2 * F + F + f], s, o;
            dsig(x, &s, &o);
            h[(size_t)n * F + f] = x * s * y;
        }
}

/* dgu (written) and the magnitudes of the bounds: mg = |dh u| s (1 + |g|
 * (1 - s)) (fast), mgr = |dh u| s (1 + |g|) (_ref), mu = |dh silu(g)|,
 * and mh = |silu(g) u| at gu's u positions and g's positions resp. */
static void dref_swiglu_bwd(double *dgu, double *mg, double *mgr, const double *dh,
                            const double *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            size_t ig = (size_t)n * 2 * F + f, iu = ig + F;
            double x = gu[ig], y = gu[iu], d = dh[(size_t)n * F + f], s, o;
            dsig(x, &s, &o);
            dgu[ig] = d * y * s * (1 + x * o);
            dgu[iu] = d * x * s;
            mg[ig] = fabs(d * y) * s * (1 + fabs(x) * o);
            mgr[ig] = fabs(d * y) * s * (1 + fabs(x));
            mg[iu] = mgr[iu] = fabs(d * x * s);
        }
}

struct sw_ctx {
    int N, F;
    double *gu, *dh, *tmp;
};
static double sw_obj(void *p) {
    struct sw_ctx *c = p;
    dref_swiglu(c->tmp, c->gu, c->N, c->F);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->N * c->F; i++) s += c->tmp[i] * c->dh[i];
    return s;
}

/* Bounds of dgu: coefficient cg on mg at g's columns, cu on mu at u's. */
static double *bnd_dgu(const double *mg, double cg, double cu, int N, int F) {
    double *b = dnew((size_t)N * 2 * F);
    for (size_t i = 0; i < (size_t)N * 2 * F; i++)
        b[i] = ((i % (2 * F)) < (size_t)F ? cg : cu) * mg[i];
    return b;
}

static void test_swiglu(int N, int F, int fd) {
    int mark = tu_mark();
    size_t nh = (size_t)N * F, ng = 2 * nh;
    char lab[48];
    snprintf(lab, sizeof lab, "swiglu N=%d F=%d", N, F);
    float *gu = TU_NEW(float, ng), *dh = TU_NEW(float, nh);
    tu_randn(gu, ng, 200 + F, 1.0f);
    for (int r = 0; r < N; r++) /* g ~ 4 N(0,1): both tails of the sigmoid */
        for (int f = 0; f < F; f++) gu[(size_t)r * 2 * F + f] *= 4.0f;
    tu_randn(dh, nh, 201, 1.0f);
    double *gud = dbl(gu, ng), *dhd = dbl(dh, nh), *h_e = dnew(nh);
    double *dgu_e = dnew(ng), *mg = dnew(ng), *mgr = dnew(ng);
    dref_swiglu(h_e, gud, N, F);
    dref_swiglu_bwd(dgu_e, mg, mgr, dhd, gud, N, F);

    float *h = TU_NEW(float, nh), *h_r = TU_NEW(float, nh);
    td_swiglu_forward(h, gu, N, F);
    td_swiglu_forward_ref(h_r, gu, N, F);
    check_bnd(nm(lab, "fwd h vs double"), dbl(h, nh), h_e, bnd_of(0, NULL, E_EXP + 4 * U, h_e, nh),
              nh, 0);
    check_bnd(nm(lab, "fwd_ref h vs double"), dbl(h_r, nh), h_e,
              bnd_of(0, NULL, 2 * E_EXP + 5 * U, h_e, nh), nh, 0);
    check_bnd(nm(lab, "fwd h fast vs _ref"), dbl(h, nh), dbl(h_r, nh),
              bnd_of(0, NULL, 3 * E_EXP + 9 * U, h_e, nh), nh, 0);

    /* backward WRITES: NaN beforehand must be gone */
    float *dgu = TU_NEW(float, ng), *dgu_r = TU_NEW(float, ng);
    for (size_t i = 0; i < ng; i++) dgu[i] = dgu_r[i] = NAN;
    td_swiglu_backward(dgu, dh, gu, N, F);
    td_swiglu_backward_ref(dgu_r, dh, gu, N, F);
    double *b = bnd_dgu(mg, 3 * E_EXP + 11 * U, E_EXP + 5 * U, N, F);
    double *br = bnd_dgu(mgr, 4 * E_EXP + 11 * U, 2 * E_EXP + 5 * U, N, F);
    check_bnd(nm(lab, "bwd dgu (written) vs double formula"), dbl(dgu, ng), dgu_e, b, ng, 0);
    check_bnd(nm(lab, "bwd_ref dgu (written) vs double formula"), dbl(dgu_r, ng), dgu_e, br, ng, 0);
    double *bb = dnew(ng);
    for (size_t i = 0; i < ng; i++) bb[i] = b[i] + br[i];
    check_bnd(nm(lab, "bwd dgu fast vs _ref"), dbl(dgu, ng), dbl(dgu_r, ng), bb, ng, 0);

    /* in place (dgu over gu) gives the same bits */
    float *ip = tu_copy(gu, ng);
    td_swiglu_backward(ip, dh, ip, N, F);
    tu_check_bitwise(nm(lab, "bwd in place (dgu = gu) = out of place"), ip, dgu, ng);

    /* a wrong dg (silu' taken as sigmoid, the g s (1 - s) term dropped) */
    float *bad = tu_copy(dgu, ng);
    for (int r = 0; r < N; r++)
        for (int f = 0; f < F; f++) {
            size_t ig = (size_t)r * 2 * F + f;
            float x = gu[ig];
            bad[ig] = dh[(size_t)r * F + f] * gu[ig + F] / (1.0f + expf(-x));
        }
    check_bnd(nm(lab, "bwd wrong dg (silu' = sigmoid) is caught"), dbl(bad, ng), dgu_e, b, ng, 1);

    if (fd) {
        struct sw_ctx cx = {N, F, gud, dhd, dnew(nh)};
        double *fg = tu_fd_of(gud, ng, sw_obj, &cx), *z = bnd_of(0, NULL, 0, NULL, ng);
        add_fd(z, fg, ng);
        check_bnd(nm(lab, "double formula dgu vs FD"), dgu_e, fg, z, ng, 0);
        add_fd(b, fg, ng);
        check_bnd(nm(lab, "bwd dgu vs FD"), dbl(dgu, ng), fg, b, ng, 0);
    }
    tu_release(mark);
}

/* g beyond the clamp of td_k_expf: finite results, within the derived
 * absolute slack of the exact values (fast), and the _ref loop too. u and dh
 * below 1 keep silu(FLT_MAX) u and dh silu(FLT_MAX) finite. */
static void test_swiglu_large(void) {
    const float gs[] = {20, 50, 79.9f, 80, 80.5f, 88, 100, 1e4f, 65504, 1e30f, FLT_MAX};
    enum { K = sizeof gs / sizeof gs[0], F = 2 * K };
    const float uu = 0.5f, dd = 0.75f;
    int mark = tu_mark();
    float *gu = TU_NEW(float, 2 * F), *dh = TU_NEW(float, F), *h = TU_NEW(float, F);
    float *h_r = TU_NEW(float, F), *dgu = TU_NEW(float, 2 * F), *dgu_r = TU_NEW(float, 2 * F);
    for (int i = 0; i < K; i++) gu[i] = gs[i], gu[K + i] = -gs[i];
    for (int f = 0; f < F; f++) gu[F + f] = uu, dh[f] = dd;
    td_swiglu_forward(h, gu, 1, F);
    td_swiglu_backward(dgu, dh, gu, 1, F);
    td_swiglu_forward_ref(h_r, gu, 1, F);
    td_swiglu_backward_ref(dgu_r, dh, gu, 1, F);
    int finite = 1;
    for (int f = 0; f < F; f++)
        finite &= isfinite(h[f]) && isfinite(dgu[f]) && isfinite(dgu[F + f]);
    tu_checks++;
    if (!finite) tu_failures++;
    printf("%s  %-58s\n", finite ? "PASS" : "FAIL",
           "swiglu |g| up to FLT_MAX: h, dg, du all finite");
    double *gud = dbl(gu, 2 * F), *dhd = dbl(dh, F), *h_e = dnew(F);
    double *dgu_e = dnew(2 * F), *mg = dnew(2 * F), *mgr = dnew(2 * F);
    dref_swiglu(h_e, gud, 1, F);
    dref_swiglu_bwd(dgu_e, mg, mgr, dhd, gud, 1, F);
    double *bh = bnd_of(0, NULL, E_EXP + 4 * U, h_e, F);
    double *bg = bnd_dgu(mg, 3 * E_EXP + 11 * U, E_EXP + 5 * U, 1, F);
    double *bhr = bnd_of(0, NULL, 2 * E_EXP + 5 * U, h_e, F);
    double *bgr = bnd_dgu(mgr, 4 * E_EXP + 11 * U, 2 * E_EXP + 5 * U, 1, F);
    /* fast: 2e-33 per unit of the factor (h: u, dg: dh u, du: dh) */
    for (int f = 0; f < F; f++)
        bh[f] += BIG_ABS * uu, bg[f] += BIG_ABS * dd * uu, bg[F + f] += BIG_ABS * dd;
    /* _ref: below g = -87.3 expf's result is subnormal and rounds by up to
     * 2^-150 absolute, which the products scale by |g| (beyond |g| = 104 it
     * is 0 and the exact value is below 104 e^-104 < 2^-143), each later
     * subnormal product adds 2^-150: (2 + min(|g|, 104)) 2^-149 per unit */
    for (int f = 0; f < F; f++) {
        double a = (2 + fmin(fabs(gu[f]), 104.0)) * 0x1p-149;
        bhr[f] += a * uu, bgr[f] += a * dd * uu, bgr[F + f] += a * dd;
    }
    check_bnd("swiglu large |g| fwd h vs double (+2e-33 abs)", dbl(h, F), h_e, bh, F, 0);
    check_bnd("swiglu large |g| bwd dgu vs double (+2e-33 abs)", dbl(dgu, 2 * F), dgu_e, bg, 2 * F,
              0);
    check_bnd("swiglu large |g| fwd_ref h vs double", dbl(h_r, F), h_e, bhr, F, 0);
    check_bnd("swiglu large |g| bwd_ref dgu vs double", dbl(dgu_r, 2 * F), dgu_e, bgr, 2 * F, 0);
    tu_release(mark);
}

/* ---- threads: 1 vs 2 bitwise, the fast fp32 kernels -------------------------------- */

static void test_threads(void) {
    const int N = 300, C = 771, F = 771; /* above TD_K_PAR_MIN_ELEMS, odd widths */
    int mark = tu_mark();
    size_t n = (size_t)N * C, nh = (size_t)N * F;
    float *x = TU_NEW(float, n), *w = TU_NEW(float, C), *g = TU_NEW(float, n);
    float *gu = TU_NEW(float, 2 * nh), *dh = TU_NEW(float, nh);
    tu_randn(x, n, 300, 1.0f), tu_randn(w, C, 301, 1.0f), tu_randn(g, n, 302, 1.0f);
    tu_randn(gu, 2 * nh, 303, 3.0f), tu_randn(dh, nh, 304, 1.0f);
    float *o[2], *r[2], *dx[2], *dw[2], *h[2], *dgu[2];
    for (int t = 0; t < 2; t++) {
        td_kernels_set_threads(t + 1);
        o[t] = TU_NEW(float, n), r[t] = TU_NEW(float, N), h[t] = TU_NEW(float, nh);
        dx[t] = TU_NEW(float, n), dw[t] = TU_NEW(float, C), dgu[t] = TU_NEW(float, 2 * nh);
        tu_randn(dx[t], n, 305, 1.0f), tu_randn(dw[t], C, 306, 1.0f);
        td_rmsnorm_forward(o[t], r[t], x, w, N, C, 1e-5f);
        td_rmsnorm_backward(dx[t], dw[t], g, x, w, r[t], N, C);
        td_swiglu_forward(h[t], gu, N, F);
        td_swiglu_backward(dgu[t], dh, gu, N, F);
    }
    td_kernels_set_threads(1);
    tu_check_bitwise("rmsnorm 300x771 fwd out, 2 threads vs 1", o[1], o[0], n);
    tu_check_bitwise("rmsnorm 300x771 fwd rstd, 2 threads vs 1", r[1], r[0], N);
    tu_check_bitwise("rmsnorm 300x771 bwd dinp, 2 threads vs 1", dx[1], dx[0], n);
    tu_check_bitwise("rmsnorm 300x771 bwd dw, 2 threads vs 1", dw[1], dw[0], C);
    tu_check_bitwise("swiglu 300x771 fwd h, 2 threads vs 1", h[1], h[0], nh);
    tu_check_bitwise("swiglu 300x771 bwd dgu, 2 threads vs 1", dgu[1], dgu[0], 2 * nh);
    tu_release(mark);
}

/* ---- 16-bit: one derivation, both types ------------------------------------------- */

/* td_bf16 and td_f16 are both uint16_t, so one descriptor type holds
 * either family's functions. */
typedef struct {
    const char *name;
    double u, eta; /* unit roundoff, half the smallest subnormal spacing */
    void (*to)(float *, const uint16_t *, size_t);
    void (*from)(uint16_t *, const float *, size_t);
    void (*rms_fwd)(uint16_t *, float *, const uint16_t *, const float *, int, int, float);
    void (*rms_bwd)(uint16_t *, float *, const uint16_t *, const uint16_t *, const float *,
                    const float *, int, int);
    void (*sw_fwd)(uint16_t *, const uint16_t *, int, int);
    void (*sw_bwd)(uint16_t *, const uint16_t *, const uint16_t *, int, int);
} lp_t;
static const lp_t LP_BF16 = {"bf16",
                             0x1p-8,
                             0x1p-134,
                             td_bf16_to_float_n,
                             td_bf16_from_float_n,
                             td_rmsnorm_bf16_forward,
                             td_rmsnorm_bf16_backward,
                             td_swiglu_bf16_forward,
                             td_swiglu_bf16_backward};
static const lp_t LP_F16 = {"fp16",
                            0x1p-11,
                            0x1p-25,
                            td_f16_to_float_n,
                            td_f16_from_float_n,
                            td_rmsnorm_f16_forward,
                            td_rmsnorm_f16_backward,
                            td_swiglu_f16_forward,
                            td_swiglu_f16_backward};

/* a 16-bit tensor of scale * N(0,1) and its exact fp32 value */
static uint16_t *lp_rand(const lp_t *t, float **f, size_t n, uint64_t stream, float scale) {
    uint16_t *h = TU_NEW(uint16_t, n);
    *f = TU_NEW(float, n);
    tu_randn(*f, n, stream, scale);
    t->from(h, *f, n);
    t->to(*f, h, n);
    return h;
}

static void lp_check_round(const lp_t *t, const char *name, const uint16_t *got, const float *exp,
                           size_t n) {
    float *g = TU_NEW(float, n);
    t->to(g, got, n);
    double *b = dnew(n);
    for (size_t i = 0; i < n; i++) b[i] = t->u * fabs(exp[i]) + t->eta;
    check_bnd(name, dbl(g, n), dbl(exp, n), b, n, 0);
}

enum { LN = 513, LC = 384, LT = 4, SN = 300, SF = 200 }; /* LT tiles of 170 rows of 384 */

static void test_lowp(const lp_t *t) {
    int mark = tu_mark();
    size_t n = (size_t)LN * LC, nh = (size_t)SN * SF, ng = 2 * nh;
    float *xf, *gf, *dx0f, *guf, *dhf;
    uint16_t *x = lp_rand(t, &xf, n, 400, 1.0f), *g = lp_rand(t, &gf, n, 401, 1.0f);
    uint16_t *dx0 = lp_rand(t, &dx0f, n, 402, 0.1f), *gu = lp_rand(t, &guf, ng, 403, 3.0f);
    uint16_t *dh = lp_rand(t, &dhf, nh, 404, 1.0f);
    float *w = TU_NEW(float, LC), *dw0 = TU_NEW(float, LC);
    tu_randn(w, LC, 405, 1.0f), tu_randn(dw0, LC, 406, 1.0f);
    uint16_t *out[2], *dx[2], *h[2], *dgu[2], *ip[2];
    float *rstd[2], *dw[2];
    for (int k = 0; k < 2; k++) { /* k = 0: 2 threads, k = 1: 1 thread */
        td_kernels_set_threads(2 - k);
        out[k] = TU_NEW(uint16_t, n), rstd[k] = TU_NEW(float, LN), dw[k] = tu_copy(dw0, LC);
        dx[k] = TU_NEW(uint16_t, n), memcpy(dx[k], dx0, n * 2);
        h[k] = TU_NEW(uint16_t, nh), dgu[k] = TU_NEW(uint16_t, ng);
        ip[k] = TU_NEW(uint16_t, ng), memcpy(ip[k], gu, ng * 2);
        t->rms_fwd(out[k], rstd[k], x, w, LN, LC, 1e-5f);
        t->rms_bwd(dx[k], dw[k], g, x, w, rstd[k], LN, LC);
        t->sw_fwd(h[k], gu, SN, SF);
        t->sw_bwd(dgu[k], dh, gu, SN, SF);
        t->sw_bwd(ip[k], dh, ip[k], SN, SF); /* in place: dgu over gu */
    }
    int same = !memcmp(out[0], out[1], n * 2) && !memcmp(rstd[0], rstd[1], LN * 4) &&
               !memcmp(dx[0], dx[1], n * 2) && !memcmp(dw[0], dw[1], LC * 4) &&
               !memcmp(h[0], h[1], nh * 2) && !memcmp(dgu[0], dgu[1], ng * 2) &&
               !memcmp(ip[0], ip[1], ng * 2);
    tu_checks++;
    if (!same) tu_failures++;
    printf("%s  %s %-53s\n", same ? "PASS" : "FAIL", t->name,
           "all outputs, 2 threads vs 1, bitwise");
    int inplace = !memcmp(ip[1], dgu[1], ng * 2);
    tu_checks++;
    if (!inplace) tu_failures++;
    printf("%s  %s %-53s\n", inplace ? "PASS" : "FAIL", t->name,
           "swiglu bwd in place = out of place, bitwise");

    /* the fp32 kernels on the same 16-bit-valued inputs */
    float *fo = TU_NEW(float, n), *fr = TU_NEW(float, LN), *fdx = tu_copy(dx0f, n);
    float *fdw = tu_copy(dw0, LC), *fh = TU_NEW(float, nh), *fdg = TU_NEW(float, ng);
    td_rmsnorm_forward(fo, fr, xf, w, LN, LC, 1e-5f);
    td_rmsnorm_backward(fdx, fdw, gf, xf, w, fr, LN, LC);
    td_swiglu_forward(fh, guf, SN, SF);
    td_swiglu_backward(fdg, dhf, guf, SN, SF);
    lp_check_round(t, nm(t->name, "rmsnorm fwd out vs fp32 (one rounding)"), out[1], fo, n);
    tu_check_bitwise(nm(t->name, "rmsnorm fwd rstd (fp32) vs fp32"), rstd[1], fr, LN);
    lp_check_round(t, nm(t->name, "rmsnorm bwd dinp += vs fp32 (one rounding)"), dx[1], fdx, n);
    double *mdw = dnew(LC), *bdw = dnew(LC);
    for (int c = 0; c < LC; c++) mdw[c] = fabs(dw0[c]);
    for (int r = 0; r < LN; r++)
        for (int c = 0; c < LC; c++)
            mdw[c] += fabs((double)gf[(size_t)r * LC + c] * xf[(size_t)r * LC + c] * fr[r]);
    for (int c = 0; c < LC; c++) bdw[c] = (LT + 1) * U * mdw[c];
    check_bnd(nm(t->name, "rmsnorm bwd dw += (fp32, 4 tiles) vs fp32"), dbl(dw[1], LC),
              dbl(fdw, LC), bdw, LC, 0);
    lp_check_round(t, nm(t->name, "swiglu fwd h vs fp32 (one rounding)"), h[1], fh, nh);
    lp_check_round(t, nm(t->name, "swiglu bwd dgu vs fp32 (one rounding)"), dgu[1], fdg, ng);
    tu_release(mark);
}

int main(void) {
    td_kernels_set_threads(1);
    test_rmsnorm(11, 37, 1e-5f, 1); /* C = 2*16 + 5: lanes and tail */
    test_rmsnorm(11, 37, 1e-6f, 0);
    test_rmsnorm(1, 5, 1e-5f, 1);   /* N = 1, C below one lane block */
    test_rmsnorm(3, 771, 1e-5f, 1); /* 48 lane blocks + 3 */
    test_swiglu(9, 37, 1);
    test_swiglu(1, 5, 1);
    test_swiglu(4, 771, 0);
    test_swiglu_large();
    test_threads();
    test_lowp(&LP_BF16);
    test_lowp(&LP_F16);
    td_lowp_release_scratch();
    return tu_finish("test_kernels_llama");
}
