/* Muon's kernels (kernels/muon.c: td_muon_ns, td_muon_ns_bf16) and the CPU
 * rows' muon entries. Oracles, written here in double from the speedrun's
 * zeropower_via_newtonschulz5 and Muon.step (not the kernel's macro):
 *  - the Newton-Schulz orthogonalization on random matrices, wide, tall
 *    and square; and the kernel's own double _ref; the bf16 kernel against
 *    the speedrun's bf16 iterations (test_ns_bf16: bitwise);
 *  - two Muon steps (momentum lerp, Nesterov, decay, the shape scale) of
 *    the row's muon entry, with and without Nesterov; each row's entry
 *    is its parts, its Newton-Schulz its precision's (bf16 in bf16).
 * Tolerance TOL 2e-4 of the largest element: fp32 storage rounds each of
 * the 5 iterations' A, B and X (~6e-8 relative each) and the quintic's
 * slope is at most a = 3.4445 per iteration, 3.4^5 x 6e-8 ~ 3e-5; a wrong
 * coefficient, scale or transpose is off by >= 1e-2. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/backend.h"
#include "trident/kernels.h"
#include "trident/optim.h"

#define TOL 2e-4

static unsigned long long rng = 12345;
static double urand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(rng >> 11) / 9007199254740992.0) * 2.0 - 1.0;
}

/* v rounded to bf16 (8 significant bits, to nearest even), in double */
static double rb(double v) {
    if (v == 0.0 || !isfinite(v)) return v;
    int e;
    double m = frexp(v, &e);
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}
static double id(double v) { return v; }

/* X [r, c] (r <= c) in double: 5 x (A = X X^T; B = bA + cAA; X = aX + BX).
 * bf: the speedrun's bf16 iterations (X = G.bfloat16(), each op's result
 * rounded to bf16, B = b A + (c A) @ A as Python parses it, the scalars
 * fp32 as CUDA's opmath). */
static void ns_oracle_t(double *g, int rows, int cols, int bf) {
    double (*q)(double) = bf ? rb : id;
    int tr = rows > cols, r = tr ? cols : rows, c = tr ? rows : cols;
    size_t n = (size_t)rows * cols;
    double *X = malloc(n * sizeof *X), *A = malloc((size_t)r * r * sizeof *A),
           *B = malloc((size_t)r * r * sizeof *B), *Y = malloc(n * sizeof *Y);
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += g[i] * g[i];
    if (bf) {
        ss = 0.0;
        for (size_t i = 0; i < n; i++) ss += rb(g[i]) * rb(g[i]);
    }
    double nrm = bf ? rb(rb(sqrt(ss)) + 1e-7) : sqrt(ss) + 1e-7;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double v = q(q(g[(size_t)i * cols + j]) / nrm);
            if (tr) X[(size_t)j * rows + i] = v; /* X = G^T */
            else X[(size_t)i * cols + j] = v;
        }
    const double a = bf ? (float)3.4445 : 3.4445, b = bf ? (float)-4.7750 : -4.7750, cc = bf ? (float)2.0315 : 2.0315;
    for (int it = 0; it < 5; it++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double s = 0;
                for (int k = 0; k < c; k++) s += X[(size_t)i * c + k] * X[(size_t)j * c + k];
                A[(size_t)i * r + j] = q(s);
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double s = 0;
                for (int k = 0; k < r; k++) s += q(cc * A[(size_t)i * r + k]) * A[(size_t)k * r + j];
                B[(size_t)i * r + j] = bf ? rb(rb(b * A[(size_t)i * r + j]) + rb(s)) : b * A[(size_t)i * r + j] + s;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                double s = 0;
                for (int k = 0; k < r; k++) s += B[(size_t)i * r + k] * X[(size_t)k * c + j];
                Y[(size_t)i * c + j] = q(q(a * X[(size_t)i * c + j]) + q(s));
            }
        memcpy(X, Y, n * sizeof *X);
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) g[(size_t)i * cols + j] = tr ? X[(size_t)j * rows + i] : X[(size_t)i * cols + j];
    free(X), free(A), free(B), free(Y);
}

static void ns_oracle(double *g, int rows, int cols) { ns_oracle_t(g, rows, cols, 0); }

static void check(const char *what, const float *got, const double *exp, size_t n) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(exp[i]));
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(got[i] - exp[i]));
    tu_checks++;
    int ok = err <= TOL * mx && mx > 0;
    if (!ok) tu_failures++;
    printf("%s %s: max err %.3g of max %.3g\n", ok ? "ok  " : "FAIL", what, err, mx);
}

static const int SHAPES[][2] = {{8, 8}, {6, 20}, {20, 6}, {1, 5}, {24, 96}};

static void test_ns(void) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int R = SHAPES[s][0], C = SHAPES[s][1];
        size_t n = (size_t)R * C;
        float *x = TU_NEW(float, n);
        double *o = TU_NEW(double, n), *rf = TU_NEW(double, n);
        for (size_t i = 0; i < n; i++) x[i] = (float)urand(), o[i] = rf[i] = x[i];
        td_muon_ns(x, R, C, 5);
        ns_oracle(o, R, C);
        td_muon_ns_ref(rf, R, C, 5);
        char what[64];
        snprintf(what, sizeof what, "ns %dx%d vs oracle", R, C);
        check(what, x, o, n);
        float *rff = TU_NEW(float, n);
        for (size_t i = 0; i < n; i++) rff[i] = (float)rf[i];
        snprintf(what, sizeof what, "ns_ref %dx%d vs oracle", R, C);
        check(what, rff, o, n);
    }
}

/* The bf16 kernel (td_muon_ns_bf16, bf16 runs) against the speedrun's
 * bf16 iterations in double (ns_oracle_t, bf): bitwise. Both round the same
 * values at the same points; they could part only where the sgemm's fp32
 * sum of <= 96 products of bf16 values (each exact in fp32) and the double
 * sum round to different bf16 values, and these shapes have no such element
 * (the sums of short bf16 products are mostly exact in fp32). No tolerance
 * short of that means anything: one rounding moved, e.g. c (A A) for
 * (c A) A, changes most elements by up to ~6% of the largest, as much as
 * the bf16 iterations differ from fp64 ones (printed) or from fp32 ones. */
static void test_ns_bf16(void) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int R = SHAPES[s][0], C = SHAPES[s][1];
        size_t n = (size_t)R * C;
        float *x = TU_NEW(float, n);
        double *o = TU_NEW(double, n), *o64 = TU_NEW(double, n);
        for (size_t i = 0; i < n; i++) x[i] = (float)urand(), o[i] = o64[i] = x[i];
        td_muon_ns_bf16(x, R, C, 5);
        ns_oracle_t(o, R, C, 1);
        ns_oracle_t(o64, R, C, 0);
        double mx = 0, err = 0, e64 = 0;
        int diff = 0;
        for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(o[i]));
        for (size_t i = 0; i < n; i++)
            err = fmax(err, fabs(x[i] - o[i])), diff += x[i] != o[i], e64 = fmax(e64, fabs(o64[i] - o[i]));
        tu_checks++;
        if (diff) tu_failures++;
        printf("%s ns bf16 %dx%d vs bf16 oracle: %d of %zu elements differ, max err %.3g of max %.3g "
               "(the bf16 oracle vs the fp64 one: %.3g of max)\n",
               diff ? "FAIL" : "ok  ", R, C, diff, n, err, mx, e64 / mx);
    }
}

/* Muon.step (the speedrun's): buf.lerp_(g, 1 - m); u = nesterov ?
 * g.lerp_(buf, m) : buf; p *= 1 - lr wd; p -= lr sqrt(max(1, R/C)) NS(u) */
static void test_update(const td_ops *ops, int nesterov) {
    const int R = 12, C = 5;
    size_t n = (size_t)R * C;
    float *p = TU_NEW(float, n), *g = TU_NEW(float, n), *m = TU_NEW(float, n);
    double *pd = TU_NEW(double, n), *md = TU_NEW(double, n), *u = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) p[i] = (float)urand(), pd[i] = p[i];
    const float lr = 0.05f, mom = 0.9f, wd = 0.1f, gs = 0.5f;
    for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)urand();
        td_muon_span sp = {p, m, g, R, C, wd};
        td_muon_hyper h = {lr, mom, gs, nesterov};
        ops->muon(&sp, 1, &h);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            md[i] += (1.0 - mom) * (gi - md[i]);
            u[i] = nesterov ? gi + mom * (md[i] - gi) : md[i];
        }
        ns_oracle(u, R, C);
        double sc = lr * sqrt((double)R / C);
        for (size_t i = 0; i < n; i++) pd[i] = pd[i] * (1.0 - lr * wd) - sc * u[i];
    }
    check(nesterov ? "muon update (nesterov) p" : "muon update p", p, pd, n);
    check(nesterov ? "muon update (nesterov) buf" : "muon update buf", m, md, n);
}

/* The three parts a sharded layout runs (src/parallel/muon_shard.c):
 * momentum and update on slices cut at arbitrary places, Newton-Schulz on
 * the whole matrix, give ops->muon's bits for the whole matrix. */
static void test_parts(const td_ops *ops) {
    const int R = 7, C = 9;
    const size_t n = (size_t)R * C, cut[] = {0, 10, 11, 40, n};
    float *p = TU_NEW(float, n), *g = TU_NEW(float, n), *m = TU_NEW(float, n);
    float *p2 = TU_NEW(float, n), *m2 = TU_NEW(float, n), *u = TU_NEW(float, n);
    for (size_t i = 0; i < n; i++) p[i] = p2[i] = (float)urand(), m[i] = m2[i] = (float)urand();
    for (size_t i = 0; i < n; i++) g[i] = (float)urand();
    td_muon_hyper h = {0.05f, 0.9f, 0.5f, 1};
    td_muon_span sp = {p, m, g, R, C, 0.1f};
    ops->muon(&sp, 1, &h);
    for (int k = 0; k < 4; k++)
        ops->muon_momentum(u + cut[k], g + cut[k], m2 + cut[k], cut[k + 1] - cut[k], &h);
    ops->muon_ns(u, R, C);
    for (int k = 0; k < 4; k++)
        ops->muon_apply(p2 + cut[k], u + cut[k], cut[k + 1] - cut[k], R, C, h.lr, 0.1f);
    tu_checks++;
    if (memcmp(p, p2, n * sizeof(float)) || memcmp(m, m2, n * sizeof(float)))
        tu_failures++, printf("FAIL muon parts on slices differ from the whole-matrix step\n");
}

/* Muon's rows: the blocks' matrices; not the embeddings, the untied head
 * (in the final unit, layer L), the router, 1-D rows. */
static void test_rows(void) {
    static const struct {
        td_tensor_kind kind;
        int ndim, layer, want;
    } cases[] = {{TD_T_QKVW, 2, 0, 1}, {TD_T_FCPROJW, 2, 1, 1}, {TD_T_GATEW, 2, 0, 1},
                 {TD_T_EXPFCW, 2, 0, 1}, {TD_T_HEAD, 2, 2, 0}, {TD_T_WTE, 2, -1, 0},
                 {TD_T_WPE, 2, -1, 0}, {TD_T_ROUTERW, 2, 0, 0}, {TD_T_LN1W, 1, 0, 0},
                 {TD_T_QKVB, 1, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        td_param p;
        memset(&p, 0, sizeof p);
        p.kind = cases[i].kind, p.ndim = cases[i].ndim, p.layer = cases[i].layer;
        tu_checks++;
        if (td_muon_row(&p) != cases[i].want)
            tu_failures++, printf("FAIL td_muon_row: kind %d layer %d gives %d\n", cases[i].kind, cases[i].layer, !cases[i].want);
    }
}

int main(void) {
    test_rows();
    test_ns();
    test_ns_bf16();
    const td_ops *f32 = td_ops_cpu(TD_K_F32);
    test_update(f32, 1);
    test_update(f32, 0);
    /* every row: its muon entry is its three parts; its Newton-Schulz bf16
     * in the bf16 row (bf16 runs), fp32 in the fp32 and fp16 rows */
    for (int k = TD_K_F32; k <= TD_K_F16; k++) {
        const td_ops *ops = td_ops_cpu((td_ktype)k);
        test_parts(ops);
        float x[35], y[35];
        for (int i = 0; i < 35; i++) x[i] = y[i] = (float)urand();
        ops->muon_ns(x, 5, 7);
        if (k == TD_K_BF16) td_muon_ns_bf16(y, 5, 7, 5);
        else td_muon_ns(y, 5, 7, 5);
        tu_checks++;
        if (memcmp(x, y, sizeof x)) tu_failures++, printf("FAIL row %d: muon_ns is not its precision's kernel\n", k);
    }
    tu_free_all();
    printf("%d checks, %d failures\n", tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}
