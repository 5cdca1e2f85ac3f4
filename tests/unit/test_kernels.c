/* Kernel tests. Oracles, in order of authority:
 *  1. double-precision forward references written here (independent of the
 *     float code), and central finite differences of them for every
 *     backward: objective = sum(out * dout) for random dout;
 *  2. the *_ref kernels (plain loops) for the fast matmul/attention;
 *  3. the 1-thread result for 2 and 3 threads.
 * Plus the API contracts: backward adds into gradients (two calls = 2x),
 * NULL gradients are skipped, softmax_xent masks padded vocab and may run in
 * place. Exit status 1 on any failure; every check prints one line.
 *
 * Tolerances: |got - exp| <= tol * (|exp| + FLOOR * rms(exp)), see
 * tu_check_close (float error of a sum scales with its terms, so elements
 * small by cancellation get the rms-sized floor):
 *  TOL_FWD 1e-5: float forward vs double. Each output is a few roundings
 *   or a sum of <= 64 terms, error ~ sqrt(64) * 6e-8 ~ 5e-7; a wrong
 *   constant (eps, scale, GELU form) is >= 1e-3 off.
 *  TOL_FD 2e-5: float backward vs FD of the double forward. FD in double
 *   with h ~ 1e-6 is exact to ~1e-9; what remains is float rounding of the
 *   backward, which cancels more (layernorm's three-term dinp): observed
 *   <= 3e-6, so 2e-5 leaves room and still catches any wrong term.
 *  TOL_FAST 1e-5: fast vs _ref, both float, different summation order,
 *   sums of <= 64 terms at the small test sizes.
 *  TOL_FAST_BIG 1e-4: the same at the benchmark/odd sizes, where the _ref
 *   loops add up to 771 terms one by one: error ~ sqrt(K) ulp of the rms,
 *   the worst of ~5e5 elements ~5e-6 of the rms = 5e-5 against the floor.
 *  TOL_TWICE 1e-5: second call of a backward vs twice the first. Exact for
 *   kernels that sum first and add once; the _ref loops add term by term
 *   into the output, so their rounding differs by the same ~sqrt(K) ulp.
 * Thread counts are compared bitwise: every kernel is made so (see the
 * header comment of each kernel file; matmul relies on a measured property
 * of OpenBLAS's Haswell sgemm, documented in matmul.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"

#define TOL_FWD 1e-5
#define TOL_FD 2e-5
#define TOL_FAST 1e-5
#define TOL_FAST_BIG 1e-4
#define TOL_TWICE 1e-5
#define FLOOR 0.1 /* rms fraction used with every tolerance above */

/* ---- double-precision references ---------------------------------------- */

static void dref_embedding(double *out, const int *tok, const double *wte, const double *wpe,
                           int B, int T, int C) {
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = wte[(size_t)tok[n] * C + c] + wpe[(size_t)(n % T) * C + c];
}

static void dref_layernorm(double *out, double *mean, double *rstd, const double *x,
                           const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xr[c] - m) * s * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

static void dref_matmul(double *out, const double *x, const double *w, const double *bias,
                        int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += x[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
}

static void dref_attention(double *out, double *att, const double *qkv, int B, int T, int C,
                           int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double p[T], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += q[d] * k[d];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j < T; j++) {
                    p[j] = j <= t ? p[j] / sum : 0.0;
                    if (att) att[(((size_t)b * NH + h) * T + t) * T + j] = p[j];
                }
                for (int d = 0; d < hs; d++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += p[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d];
                    out[((size_t)b * T + t) * C + h * hs + d] = s;
                }
            }
}

static double dref_gelu1(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* losses[N] (0 where the target is < 0: ignored); probs[N,Vp] (padded
 * columns 0), or NULL */
static void dref_xent(double *loss, double *probs, const double *logits, const int *tgt, int N,
                      int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const double *x = logits + (size_t)n * Vp;
        double mx = x[0], sum = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, x[v]);
        for (int v = 0; v < V; v++) sum += exp(x[v] - mx);
        loss[n] = tgt[n] < 0 ? 0.0 : log(sum) + mx - x[tgt[n]];
        if (probs)
            for (int v = 0; v < Vp; v++)
                probs[(size_t)n * Vp + v] = v < V ? exp(x[v] - mx) / sum : 0.0;
    }
}

static double ddot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- finite differences: tu_fd_of (test_util.h) ---- */

/* "backward called twice gives 2x": g2 after two calls vs 2 * g1 */
static void check_twice(const char *name, const float *g1, const float *g2, size_t n) {
    float *e = TU_NEW(float, n);
    for (size_t i = 0; i < n; i++) e[i] = 2.0f * g1[i];
    tu_check_close_f(name, g2, e, n, TOL_TWICE, FLOOR);
}

static char *nm(const char *a, const char *b) { /* short-lived label */
    static char buf[4][96];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s %s", a, b);
    return buf[k];
}

/* ---- embedding ---------------------------------------------------------------- */

struct emb_ctx { int B, T, C; const int *tok; double *wte, *wpe, *dout, *tmp; };
static double emb_obj(void *p) {
    struct emb_ctx *c = p;
    dref_embedding(c->tmp, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
    return ddot(c->tmp, c->dout, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void) {
    int B = 2, T = 5, C = 20, V = 7, N = B * T, mark = tu_mark();
    int *tok = TU_NEW(int, N);
    tu_rand_ints(tok, N, 1, V); /* 10 tokens from 7: repeats exercise the scatter-add */
    float *wte = TU_NEW(float, V * C), *wpe = TU_NEW(float, T * C), *out = TU_NEW(float, N * C);
    float *dout = TU_NEW(float, N * C), *dwte = TU_NEW(float, V * C), *dwpe = TU_NEW(float, T * C);
    tu_randn(wte, V * C, 2, 1.0f);
    tu_randn(wpe, T * C, 3, 1.0f);
    tu_randn(dout, N * C, 4, 1.0f);
    struct emb_ctx c = {B, T, C, tok, tu_to_double(wte, V * C), tu_to_double(wpe, T * C),
                        tu_to_double(dout, N * C), TU_NEW(double, N * C)};
    td_embedding_forward(out, tok, wte, wpe, B, T, C);
    dref_embedding(c.tmp, tok, c.wte, c.wpe, B, T, C);
    /* one float add: correctly rounded, so within half an ulp */
    tu_check_close("embedding fwd vs double", out, c.tmp, N * C, 1e-7, 0);
    td_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    tu_check_close("embedding bwd dwte vs FD", dwte, tu_fd_of(c.wte, V * C, emb_obj, &c), V * C,
                   TOL_FD, FLOOR);
    tu_check_close("embedding bwd dwpe vs FD", dwpe, tu_fd_of(c.wpe, T * C, emb_obj, &c), T * C,
                   TOL_FD, FLOOR);
    float *g1 = tu_copy(dwte, V * C), *p1 = tu_copy(dwpe, T * C);
    td_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    check_twice("embedding bwd twice = 2x (dwte)", g1, dwte, V * C);
    check_twice("embedding bwd twice = 2x (dwpe)", p1, dwpe, T * C);
    float *z = TU_NEW(float, V * C);
    td_embedding_backward(z, NULL, dout, tok, B, T, C);
    tu_check_bitwise("embedding bwd dwpe=NULL: dwte unchanged", z, g1, V * C);
    tu_release(mark);
}

/* Positions per row, as --doc-positions reset makes them for learned
 * positions (embed_head.c): rows repeat positions (each document restarts
 * at 0), the forward is position_forward with the N rows for its period,
 * the gradient the lookup's scatter-add with positions for ids
 * (embedding_shard_backward over all T rows of wpe). Oracle: the
 * definition, each wpe row's terms added in row order, which the kernels
 * must give bitwise at 1, 2 and 3 threads (N * C >= TD_K_PAR_MIN_ELEMS, so
 * they do split); the sp half (rows from n0) too. */
static void doc_positions_case(void) {
    int B = 4, T = 64, C = 64, N = B * T, mark = tu_mark();
    int *pos = TU_NEW(int, N);
    for (int n = 0, p = 0; n < N; n++, p++) { /* documents of 1..13 rows, cut at sequence ends */
        if (n % T == 0 || td_rng_u64(6, 1, (uint64_t)n) % 13 == 0) p = 0;
        pos[n] = p;
    }
    float *wpe = TU_NEW(float, T * C), *dout = TU_NEW(float, N * C);
    tu_randn(wpe, T * C, 7, 1.0f);
    tu_randn(dout, N * C, 8, 1.0f);
    float *want = TU_NEW(float, N * C), *gwant = TU_NEW(float, T * C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            want[n * C + c] = 0.5f + wpe[pos[n] * C + c];
            gwant[pos[n] * C + c] += dout[n * C + c];
        }
    float *o = TU_NEW(float, N * C), *g = TU_NEW(float, T * C);
    for (int nt = 1; nt <= 3; nt++) {
        td_kernels_set_threads(nt);
        for (int i = 0; i < N * C; i++) o[i] = 0.5f;
        memset(g, 0, sizeof(float) * T * C);
        td_position_forward(o, wpe, pos, 0, N / 2, N, C); /* as two sp ranks: rows 0.. and N/2.. */
        td_position_forward(o + (size_t)(N / 2) * C, wpe, pos, N / 2, N - N / 2, N, C);
        td_embedding_shard_backward(g, dout, pos, 0, T, N, C);
        char name[96];
        snprintf(name, sizeof name, "positions per row fwd = definition (%d threads)", nt);
        tu_check_bitwise(name, o, want, N * C);
        snprintf(name, sizeof name, "positions per row bwd = definition (%d threads)", nt);
        tu_check_bitwise(name, g, gwant, T * C);
    }
    td_kernels_set_threads(1);
    tu_release(mark);
}

/* The vocab-parallel parts (a shard of wte rows, positions from a row
 * offset): summed over shards they must give the fused kernel's bits, the
 * last shard holding rows beyond V (padding), and the backward over shards
 * and over row halves the fused gradients' bits (same terms, same order). */
static void test_embedding_shards(void) {
    int B = 2, T = 5, C = 20, V = 7, N = B * T, rows = 3, shards = 3, mark = tu_mark();
    int *tok = TU_NEW(int, N);
    tu_rand_ints(tok, N, 1, V);
    tok[0] = V - 1, tok[1] = 0; /* the ends of the vocabulary */
    int Vp = rows * shards;     /* 9 >= V: the last shard holds rows 6, 7, 8 of which 7, 8 pad */
    float *wte = TU_NEW(float, Vp * C), *wpe = TU_NEW(float, T * C), *dout = TU_NEW(float, N * C);
    tu_randn(wte, V * C, 2, 1.0f);
    tu_randn(wpe, T * C, 3, 1.0f);
    tu_randn(dout, N * C, 4, 1.0f);
    float *fused = TU_NEW(float, N * C), *sum = TU_NEW(float, N * C), *part = TU_NEW(float, N * C);
    td_embedding_forward(fused, tok, wte, wpe, B, T, C);
    for (int r = 0; r < shards; r++) {
        td_embedding_shard_forward(part, tok, wte + (size_t)r * rows * C, r * rows, rows, N, C);
        for (int i = 0; i < N * C; i++) sum[i] = r ? sum[i] + part[i] : part[i];
    }
    /* positions on two row blocks, as sequence parallelism splits them */
    td_position_forward(sum, wpe, NULL, 0, N / 2, T, C);
    td_position_forward(sum + (size_t)(N / 2) * C, wpe, NULL, N / 2, N - N / 2, T, C);
    tu_check_bitwise("embedding shards + positions = fused (fwd)", sum, fused, N * C);
    float *dwte = TU_NEW(float, Vp * C), *dwpe = TU_NEW(float, T * C);
    float *swte = TU_NEW(float, Vp * C), *swpe = TU_NEW(float, T * C);
    td_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    for (int r = 0; r < shards; r++)
        td_embedding_shard_backward(swte + (size_t)r * rows * C, dout, tok, r * rows, rows, N, C);
    td_position_backward(swpe, dout, NULL, 0, N / 2, T, C);
    td_position_backward(swpe, dout + (size_t)(N / 2) * C, NULL, N / 2, N - N / 2, T, C);
    tu_check_bitwise("embedding shards bwd dwte = fused", swte, dwte, Vp * C);
    tu_check_bitwise("positions bwd over row halves dwpe = fused", swpe, dwpe, T * C);
    /* explicit positions, as a context-parallel rank holds a sequence: T/2
     * local rows = chunks 1 and 2 of 4 (global rows T/4.. and T/2..) of a
     * T-row table; oracle: the definition, one row at a time */
    {
        int Tl = T / 2, Nl = B * Tl, q = T / 4, *pos = TU_NEW(int, Tl);
        for (int t = 0; t < Tl; t++) pos[t] = t < q ? q + t : 2 * q + (t - q);
        float *o = TU_NEW(float, Nl * C), *want = TU_NEW(float, Nl * C);
        float *g = TU_NEW(float, T * C), *gwant = TU_NEW(float, T * C);
        td_position_forward(o, wpe, pos, 0, Nl, Tl, C);
        td_position_backward(g, dout, pos, 0, Nl, Tl, C);
        for (int n = 0; n < Nl; n++)
            for (int c = 0; c < C; c++) {
                want[n * C + c] = wpe[pos[n % Tl] * C + c];
                gwant[pos[n % Tl] * C + c] += dout[n * C + c];
            }
        tu_check_bitwise("positions at explicit ids fwd = definition", o, want, Nl * C);
        tu_check_bitwise("positions at explicit ids bwd = definition", g, gwant, T * C);
    }
    tu_release(mark);
    doc_positions_case();
}

/* ---- layernorm ---------------------------------------------------------------- */

struct ln_ctx { int N, C; double *x, *w, *b, *dout, *tmp; };
static double ln_obj(void *p) {
    struct ln_ctx *c = p;
    dref_layernorm(c->tmp, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
    return ddot(c->tmp, c->dout, (size_t)c->N * c->C);
}

static void test_layernorm(void) {
    int N = 11, C = 37, mark = tu_mark(); /* C = 2*16 + 5: lane loop and tail */
    float *x = TU_NEW(float, N * C), *w = TU_NEW(float, C), *b = TU_NEW(float, C);
    float *out = TU_NEW(float, N * C), *mean = TU_NEW(float, N), *rstd = TU_NEW(float, N);
    float *dout = TU_NEW(float, N * C), *dx = TU_NEW(float, N * C), *dw = TU_NEW(float, C),
          *db = TU_NEW(float, C);
    tu_randn(x, N * C, 10, 1.0f);
    /* Row scales 1e-2..10: at std 1e-2 the variance is 1e-4, so eps = 1e-5
     * moves rstd by 5% and a wrong eps cannot pass. Offsets of up to 3 std
     * keep the rows well conditioned (see test_layernorm_offset). */
    for (int n = 0; n < N; n++) {
        float sc = powf(10.0f, -2.0f + 3.0f * n / (N - 1)), off = 0.6f * (n - 5) * sc;
        for (int c = 0; c < C; c++) x[n * C + c] = off + sc * x[n * C + c];
    }
    tu_randn(w, C, 11, 0.3f);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    tu_randn(b, C, 12, 0.3f);
    tu_randn(dout, N * C, 13, 1.0f);
    struct ln_ctx c = {N, C, tu_to_double(x, N * C), tu_to_double(w, C), tu_to_double(b, C),
                       tu_to_double(dout, N * C), TU_NEW(double, N * C)};
    double *dmean = TU_NEW(double, N), *drstd = TU_NEW(double, N);
    td_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    dref_layernorm(c.tmp, dmean, drstd, c.x, c.w, c.b, N, C);
    tu_check_close("layernorm fwd out vs double", out, c.tmp, N * C, TOL_FWD, FLOOR);
    tu_check_close("layernorm fwd mean vs double", mean, dmean, N, TOL_FWD, FLOOR);
    tu_check_close("layernorm fwd rstd vs double", rstd, drstd, N, TOL_FWD, 0);
    td_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    tu_check_close("layernorm bwd dinp vs FD", dx, tu_fd_of(c.x, N * C, ln_obj, &c), N * C, TOL_FD,
                   FLOOR);
    tu_check_close("layernorm bwd dw vs FD", dw, tu_fd_of(c.w, C, ln_obj, &c), C, TOL_FD, FLOOR);
    tu_check_close("layernorm bwd db vs FD", db, tu_fd_of(c.b, C, ln_obj, &c), C, TOL_FD, FLOOR);
    float *dx1 = tu_copy(dx, N * C), *dw1 = tu_copy(dw, C), *db1 = tu_copy(db, C);
    td_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    check_twice("layernorm bwd twice = 2x (dinp)", dx1, dx, N * C);
    check_twice("layernorm bwd twice = 2x (dw)", dw1, dw, C);
    check_twice("layernorm bwd twice = 2x (db)", db1, db, C);
    float *z = TU_NEW(float, C);
    td_layernorm_backward(NULL, z, NULL, dout, x, w, mean, rstd, N, C);
    tu_check_bitwise("layernorm bwd dinp=db=NULL: dw unchanged", z, dw1, C);
    tu_release(mark);
}

/* Rows far from zero (mean/std = 300..3000): the float inputs themselves
 * only resolve mean * 6e-8, so any float layernorm is off by ~ratio * 6e-8
 * (<= 2e-4) in normalised units; a one-pass E[x^2] - E[x]^2 variance is off
 * by ~ratio^2 * 6e-8 (>= 5e-3, up to 100%). Tolerance 1e-3 against the
 * rms separates the two. */
static void test_layernorm_offset(void) {
    int N = 4, C = 64, mark = tu_mark();
    float *x = TU_NEW(float, N * C), *w = TU_NEW(float, C), *b = TU_NEW(float, C);
    float *out = TU_NEW(float, N * C), *mean = TU_NEW(float, N), *rstd = TU_NEW(float, N);
    tu_randn(x, N * C, 14, 1.0f);
    for (int n = 0; n < N; n++) {
        float sc = n < 2 ? 0.01f : 0.1f, off = n % 2 ? -30.0f : 30.0f;
        for (int c = 0; c < C; c++) x[n * C + c] = off + sc * x[n * C + c];
    }
    for (int c = 0; c < C; c++) w[c] = 1.0f, b[c] = 0.0f;
    double *dx = tu_to_double(x, N * C), *dw = tu_to_double(w, C), *db = tu_to_double(b, C);
    double *ref = TU_NEW(double, N * C), *dmean = TU_NEW(double, N), *drstd = TU_NEW(double, N);
    td_layernorm_forward(out, mean, rstd, x, w, b, N, C);
    dref_layernorm(ref, dmean, drstd, dx, dw, db, N, C);
    tu_check_close("layernorm fwd mean/std = 3000: out", out, ref, N * C, 1e-3, 1.0);
    tu_check_close("layernorm fwd mean/std = 3000: rstd", rstd, drstd, N, 1e-3, 0);
    tu_release(mark);
}

/* ---- matmul -------------------------------------------------------------------- */

struct mm_ctx { int N, C, OC; double *x, *w, *bias, *dout, *tmp; };
static double mm_obj(void *p) {
    struct mm_ctx *c = p;
    dref_matmul(c->tmp, c->x, c->w, c->bias, c->N, c->C, c->OC);
    return ddot(c->tmp, c->dout, (size_t)c->N * c->OC);
}

typedef void (*mm_fwd_fn)(float *, const float *, const float *, const float *, int, int, int);
typedef void (*mm_bwd_fn)(float *, float *, float *, const float *, const float *,
                          const float *, int, int, int);

static void test_matmul(void) {
    int N = 37, C = 24, OC = 40, mark = tu_mark();
    float *x = TU_NEW(float, N * C), *w = TU_NEW(float, OC * C), *bias = TU_NEW(float, OC);
    float *dout = TU_NEW(float, N * OC);
    tu_randn(x, N * C, 20, 1.0f);
    tu_randn(w, OC * C, 21, 0.3f);
    tu_randn(bias, OC, 22, 1.0f);
    tu_randn(dout, N * OC, 23, 1.0f);
    struct mm_ctx c = {N, C, OC, tu_to_double(x, N * C), tu_to_double(w, OC * C),
                       tu_to_double(bias, OC), tu_to_double(dout, N * OC),
                       TU_NEW(double, N * OC)};
    double *gx = tu_fd_of(c.x, N * C, mm_obj, &c), *gw = tu_fd_of(c.w, OC * C, mm_obj, &c);
    double *gb = tu_fd_of(c.bias, OC, mm_obj, &c);
    double *ref = TU_NEW(double, N * OC), *ref_nb = TU_NEW(double, N * OC);
    dref_matmul(ref, c.x, c.w, c.bias, N, C, OC);
    dref_matmul(ref_nb, c.x, c.w, NULL, N, C, OC);
    const char *names[2] = {"matmul fast", "matmul ref"};
    mm_fwd_fn fwd[2] = {td_matmul_forward, td_matmul_forward_ref};
    mm_bwd_fn bwd[2] = {td_matmul_backward, td_matmul_backward_ref};
    float *out[2], *dx[2], *dw[2], *db[2];
    for (int k = 0; k < 2; k++) {
        out[k] = TU_NEW(float, N * OC);
        dx[k] = TU_NEW(float, N * C), dw[k] = TU_NEW(float, OC * C), db[k] = TU_NEW(float, OC);
        fwd[k](out[k], x, w, NULL, N, C, OC);
        tu_check_close(nm(names[k], "fwd bias=NULL vs double"), out[k], ref_nb, N * OC, TOL_FWD,
                       FLOOR);
        fwd[k](out[k], x, w, bias, N, C, OC);
        tu_check_close(nm(names[k], "fwd vs double"), out[k], ref, N * OC, TOL_FWD, FLOOR);
        bwd[k](dx[k], dw[k], db[k], dout, x, w, N, C, OC);
        tu_check_close(nm(names[k], "bwd dinp vs FD"), dx[k], gx, N * C, TOL_FD, FLOOR);
        tu_check_close(nm(names[k], "bwd dw vs FD"), dw[k], gw, OC * C, TOL_FD, FLOOR);
        tu_check_close(nm(names[k], "bwd dbias vs FD"), db[k], gb, OC, TOL_FD, FLOOR);
    }
    tu_check_close_f("matmul fast vs ref fwd", out[0], out[1], N * OC, TOL_FAST, FLOOR);
    tu_check_close_f("matmul fast vs ref bwd dinp", dx[0], dx[1], N * C, TOL_FAST, FLOOR);
    tu_check_close_f("matmul fast vs ref bwd dw", dw[0], dw[1], OC * C, TOL_FAST, FLOOR);
    tu_check_close_f("matmul fast vs ref bwd dbias", db[0], db[1], OC, TOL_FAST, FLOOR);
    for (int k = 0; k < 2; k++) {
        float *x1 = tu_copy(dx[k], N * C), *w1 = tu_copy(dw[k], OC * C), *b1 = tu_copy(db[k], OC);
        bwd[k](dx[k], dw[k], db[k], dout, x, w, N, C, OC);
        check_twice(nm(names[k], "bwd twice = 2x (dinp)"), x1, dx[k], N * C);
        check_twice(nm(names[k], "bwd twice = 2x (dw)"), w1, dw[k], OC * C);
        check_twice(nm(names[k], "bwd twice = 2x (dbias)"), b1, db[k], OC);
        float *zw = TU_NEW(float, OC * C), *zb = TU_NEW(float, OC);
        bwd[k](NULL, zw, zb, dout, x, w, N, C, OC);
        tu_check_bitwise(nm(names[k], "bwd dinp=NULL: dw unchanged"), zw, w1, OC * C);
        tu_check_bitwise(nm(names[k], "bwd dinp=NULL: dbias unchanged"), zb, b1, OC);
    }
    tu_release(mark);
}

/* ---- attention ------------------------------------------------------------------ */

struct att_ctx { int B, T, C, NH; double *qkv, *dout, *tmp; };
static double att_obj(void *p) {
    struct att_ctx *c = p;
    dref_attention(c->tmp, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return ddot(c->tmp, c->dout, (size_t)c->B * c->T * c->C);
}

typedef void (*att_fwd_fn)(float *, float *, const float *, int, int, int, int);
typedef void (*att_bwd_fn)(float *, float *, const float *, const float *, const float *, int,
                           int, int, int);

static void test_attention(void) {
    int B = 2, T = 7, C = 12, NH = 3, N = B * T, mark = tu_mark();
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = TU_NEW(float, N * 3 * C), *dout = TU_NEW(float, N * C);
    tu_randn(qkv, N * 3 * C, 30, 1.0f);
    tu_randn(dout, N * C, 31, 1.0f);
    struct att_ctx c = {B, T, C, NH, tu_to_double(qkv, N * 3 * C), tu_to_double(dout, N * C),
                        TU_NEW(double, N * C)};
    double *ref = TU_NEW(double, N * C), *ref_att = TU_NEW(double, natt);
    dref_attention(ref, ref_att, c.qkv, B, T, C, NH);
    double *g = tu_fd_of(c.qkv, N * 3 * C, att_obj, &c);
    const char *names[2] = {"attention fast", "attention ref"};
    att_fwd_fn fwd[2] = {td_attention_forward, td_attention_forward_ref};
    att_bwd_fn bwd[2] = {td_attention_backward, td_attention_backward_ref};
    float *out[2], *att[2], *dqkv[2];
    for (int k = 0; k < 2; k++) {
        out[k] = TU_NEW(float, N * C), att[k] = TU_NEW(float, natt);
        dqkv[k] = TU_NEW(float, N * 3 * C);
        float *datt = TU_NEW(float, natt);
        for (size_t i = 0; i < natt; i++) att[k][i] = NAN; /* must all be written */
        fwd[k](out[k], att[k], qkv, B, T, C, NH);
        tu_check_close(nm(names[k], "fwd out vs double"), out[k], ref, N * C, TOL_FWD, FLOOR);
        tu_check_close(nm(names[k], "fwd att vs double"), att[k], ref_att, natt, TOL_FWD, FLOOR);
        float *upper = TU_NEW(float, natt);
        size_t nu = 0;
        for (size_t p = 0; p < (size_t)B * NH; p++)
            for (int t = 0; t < T; t++)
                for (int j = t + 1; j < T; j++) upper[nu++] = att[k][(p * T + t) * T + j];
        tu_check_zero(nm(names[k], "fwd att above diagonal"), upper, nu);
        bwd[k](dqkv[k], datt, dout, qkv, att[k], B, T, C, NH);
        tu_check_close(nm(names[k], "bwd dqkv vs FD"), dqkv[k], g, N * 3 * C, TOL_FD, FLOOR);
        float *d1 = tu_copy(dqkv[k], N * 3 * C);
        bwd[k](dqkv[k], datt, dout, qkv, att[k], B, T, C, NH);
        check_twice(nm(names[k], "bwd twice = 2x (dqkv)"), d1, dqkv[k], N * 3 * C);
    }
    tu_check_close_f("attention fast vs ref fwd out", out[0], out[1], N * C, TOL_FAST, FLOOR);
    tu_check_close_f("attention fast vs ref fwd att", att[0], att[1], natt, TOL_FAST, FLOOR);
    tu_check_close_f("attention fast vs ref bwd dqkv", dqkv[0], dqkv[1], N * 3 * C, TOL_FAST,
                     FLOOR);
    tu_release(mark);
}

/* ---- gelu, residual ------------------------------------------------------------ */

struct ew_ctx { size_t n; int op; double *x, *y, *dout, *tmp; };
static double ew_obj(void *p) {
    struct ew_ctx *c = p;
    for (size_t i = 0; i < c->n; i++)
        c->tmp[i] = c->op == 0 ? dref_gelu1(c->x[i]) : c->x[i] + c->y[i];
    return ddot(c->tmp, c->dout, c->n);
}

static void test_gelu(void) {
    int n = 301, mark = tu_mark();
    float *x = TU_NEW(float, n), *out = TU_NEW(float, n), *dout = TU_NEW(float, n),
          *dx = TU_NEW(float, n);
    /* a grid over [-12, 12] (both tails, where 1 + tanh cancels or
     * saturates) plus random points */
    for (int i = 0; i < 201; i++) x[i] = -12.0f + 24.0f * i / 200.0f;
    tu_randn(x + 201, n - 201, 40, 2.0f);
    tu_randn(dout, n, 41, 1.0f);
    struct ew_ctx c = {n, 0, tu_to_double(x, n), NULL, tu_to_double(dout, n), TU_NEW(double, n)};
    double *ref = TU_NEW(double, n);
    for (int i = 0; i < n; i++) ref[i] = dref_gelu1(c.x[i]);
    td_gelu_forward(out, x, n);
    tu_check_close("gelu fwd vs double", out, ref, n, TOL_FWD, FLOOR);
    td_gelu_backward(dx, x, dout, n);
    tu_check_close("gelu bwd vs FD", dx, tu_fd_of(c.x, n, ew_obj, &c), n, TOL_FD, FLOOR);
    float *d1 = tu_copy(dx, n);
    td_gelu_backward(dx, x, dout, n);
    check_twice("gelu bwd twice = 2x", d1, dx, n);
    tu_release(mark);
}

static void test_residual(void) {
    int n = 53, mark = tu_mark();
    float *a = TU_NEW(float, n), *b = TU_NEW(float, n), *out = TU_NEW(float, n);
    float *dout = TU_NEW(float, n), *da = TU_NEW(float, n), *db = TU_NEW(float, n);
    tu_randn(a, n, 50, 1.0f);
    tu_randn(b, n, 51, 1.0f);
    tu_randn(dout, n, 52, 1.0f);
    struct ew_ctx c = {n, 1, tu_to_double(a, n), tu_to_double(b, n), tu_to_double(dout, n),
                       TU_NEW(double, n)};
    double *ref = TU_NEW(double, n);
    for (int i = 0; i < n; i++) ref[i] = c.x[i] + c.y[i];
    td_residual_forward(out, a, b, n);
    tu_check_close("residual fwd vs double", out, ref, n, 1e-7, 0); /* one rounding */
    td_residual_backward(da, db, dout, n);
    tu_check_close("residual bwd da vs FD", da, tu_fd_of(c.x, n, ew_obj, &c), n, TOL_FD, FLOOR);
    tu_check_close("residual bwd db vs FD", db, tu_fd_of(c.y, n, ew_obj, &c), n, TOL_FD, FLOOR);
    float *a1 = tu_copy(da, n);
    td_residual_backward(da, NULL, dout, n);
    check_twice("residual bwd twice = 2x (da), db=NULL", a1, da, n);
    tu_release(mark);
}

/* ---- softmax + cross-entropy -------------------------------------------------- */

struct xe_ctx { int N, V, Vp; const int *tgt; double *logits, *dloss, *tmp; };
static double xe_obj(void *p) {
    struct xe_ctx *c = p;
    dref_xent(c->tmp, NULL, c->logits, c->tgt, c->N, c->V, c->Vp);
    return ddot(c->tmp, c->dloss, c->N);
}

/* ignore > 0: every ignore-th target (from row 1) is -1, ignored: loss 0
 * and, by the finite differences of the double reference, dlogits 0 */
static void xent_case(const char *tag, int N, int V, int Vp, float scale, int ignore) {
    int mark = tu_mark();
    size_t nl = (size_t)N * Vp;
    float *logits = TU_NEW(float, nl), *probs = TU_NEW(float, nl), *losses = TU_NEW(float, N);
    float *dloss = TU_NEW(float, N), *dl = TU_NEW(float, nl);
    int *tgt = TU_NEW(int, N);
    tu_randn(logits, nl, 60, scale);
    for (int n = 0; n < N; n++) {
        /* padded columns hold poison: leaking into the max or the sum
         * flattens or swamps the softmax */
        for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = 1e4f;
        /* last row shifted by 1000: fails without the max subtraction */
        if (n == N - 1)
            for (int v = 0; v < V; v++) logits[(size_t)n * Vp + v] += 1000.0f;
    }
    tu_rand_ints(tgt, N, 61, V);
    for (int n = 1; ignore > 0 && n < N; n += ignore) tgt[n] = -1;
    tu_randn(dloss, N, 62, 1.0f);
    struct xe_ctx c = {N, V, Vp, tgt, tu_to_double(logits, nl), tu_to_double(dloss, N),
                       TU_NEW(double, N)};
    double *rl = TU_NEW(double, N), *rp = TU_NEW(double, nl);
    dref_xent(rl, rp, c.logits, tgt, N, V, Vp);
    td_softmax_xent_forward(losses, probs, logits, tgt, N, V, Vp);
    tu_check_close(nm(tag, "fwd losses vs double"), losses, rl, N, TOL_FWD, FLOOR);
    tu_check_close(nm(tag, "fwd probs vs double"), probs, rp, nl, TOL_FWD, FLOOR);
    float *pad = TU_NEW(float, (size_t)N * (Vp - V) + 1);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad[(size_t)n * (Vp - V) + v - V] = probs[(size_t)n * Vp + v];
    tu_check_zero(nm(tag, "fwd padded probs"), pad, (size_t)N * (Vp - V));
    /* in place: probs aliasing logits must give the same bits */
    float *inpl = tu_copy(logits, nl), *l2 = TU_NEW(float, N);
    td_softmax_xent_forward(l2, inpl, inpl, tgt, N, V, Vp);
    tu_check_bitwise(nm(tag, "fwd in place (probs == logits)"), inpl, probs, nl);
    tu_check_bitwise(nm(tag, "fwd in place losses"), l2, losses, N);
    /* backward WRITES: garbage already in dlogits must not survive */
    for (size_t i = 0; i < nl; i++) dl[i] = 7.0f;
    td_softmax_xent_backward(dl, probs, tgt, dloss, N, V, Vp);
    /* FD over all Vp columns: the padded ones must come out exactly 0 */
    tu_check_close(nm(tag, "bwd dlogits vs FD"), dl, tu_fd_of(c.logits, nl, xe_obj, &c), nl,
                   TOL_FD, FLOOR);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad[(size_t)n * (Vp - V) + v - V] = dl[(size_t)n * Vp + v];
    tu_check_zero(nm(tag, "bwd padded dlogits"), pad, (size_t)N * (Vp - V));
    td_softmax_xent_backward(inpl, inpl, tgt, dloss, N, V, Vp);
    tu_check_bitwise(nm(tag, "bwd in place (dlogits == probs)"), inpl, dl, nl);
    tu_release(mark);
}

/* The staged cross-entropy over vocabulary shards [lo, lo + Vl) with the
 * reductions (max, sums) done between the stages, as the vocab-parallel head
 * does over tp: losses, probabilities and dlogits against double. The last
 * shard of the second case holds only padding (V = 0 there). */
static void xent_shard_case(const char *tag, int N, int V, int Vp, int shards, int ignore) {
    int mark = tu_mark(), Vl = Vp / shards;
    size_t nl = (size_t)N * Vp;
    float *logits = TU_NEW(float, nl), *dloss = TU_NEW(float, N);
    int *tgt = TU_NEW(int, N);
    tu_randn(logits, nl, 70, 3.0f);
    tu_rand_ints(tgt, N, 71, V);
    tgt[0] = V - 1; /* the last real column, in a shard of its own or beside padding */
    for (int n = 1; ignore > 0 && n < N; n += ignore) tgt[n] = -1; /* as in xent_case */
    tu_randn(dloss, N, 72, 1.0f);
    double *rl = TU_NEW(double, N), *rp = TU_NEW(double, nl);
    dref_xent(rl, rp, tu_to_double(logits, nl), tgt, N, V, Vp);
    /* each shard's logits as its own [N, Vl] buffer */
    float *sh = TU_NEW(float, nl), *mx = TU_NEW(float, N), *m1 = TU_NEW(float, N);
    float *sum = TU_NEW(float, N), *xt = TU_NEW(float, N), *s1 = TU_NEW(float, N), *x1 = TU_NEW(float, N);
    float *losses = TU_NEW(float, N);
    int real[16];
    for (int r = 0; r < shards; r++) {
        int v = V - r * Vl;
        real[r] = v < 0 ? 0 : v > Vl ? Vl : v;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vl; j++) sh[(size_t)r * N * Vl + (size_t)n * Vl + j] = logits[(size_t)n * Vp + r * Vl + j];
    }
    for (int r = 0; r < shards; r++) {
        td_xent_max(m1, sh + (size_t)r * N * Vl, N, real[r], Vl);
        for (int n = 0; n < N; n++) mx[n] = r == 0 || m1[n] > mx[n] ? m1[n] : mx[n];
    }
    for (int r = 0; r < shards; r++) {
        td_xent_exp_sum(s1, x1, sh + (size_t)r * N * Vl, sh + (size_t)r * N * Vl, mx, tgt, r * Vl, N, real[r], Vl);
        for (int n = 0; n < N; n++) sum[n] = r ? sum[n] + s1[n] : s1[n], xt[n] = r ? xt[n] + x1[n] : x1[n];
    }
    float *probs = TU_NEW(float, nl), *dl = TU_NEW(float, nl);
    for (int r = 0; r < shards; r++) {
        float *p = sh + (size_t)r * N * Vl;
        td_xent_finish(losses, p, sum, xt, mx, tgt, N, real[r], Vl);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vl; j++) probs[(size_t)n * Vp + r * Vl + j] = p[(size_t)n * Vl + j];
        td_xent_backward(p, p, tgt, r * Vl, dloss, N, real[r], Vl);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vl; j++) dl[(size_t)n * Vp + r * Vl + j] = p[(size_t)n * Vl + j];
    }
    tu_check_close(nm(tag, "losses vs double"), losses, rl, N, TOL_FWD, FLOOR);
    tu_check_close(nm(tag, "probs vs double"), probs, rp, nl, TOL_FWD, FLOOR);
    double *rd = TU_NEW(double, nl); /* dlogits = (p - onehot) * dloss in double */
    for (int n = 0; n < N; n++)
        for (int v = 0; v < Vp; v++)
            rd[(size_t)n * Vp + v] = tgt[n] < 0 ? 0.0 : (rp[(size_t)n * Vp + v] - (v == tgt[n])) * dloss[n] * (v < V);
    tu_check_close(nm(tag, "dlogits vs double"), dl, rd, nl, TOL_FWD, FLOOR);
    tu_release(mark);
}

static void test_softmax_xent(void) {
    xent_case("softmax_xent V=5 Vp=8", 6, 5, 8, 2.0f, 0);
    /* the benchmark vocabulary, logits spread wide: exp over a large range */
    xent_case("softmax_xent V=65 Vp=128", 16, 65, 128, 4.0f, 0);
    xent_shard_case("xent 2 vocab shards V=65 Vp=128", 16, 65, 128, 2, 0);
    xent_shard_case("xent 3 vocab shards V=5 Vp=12 (last all padding)", 6, 5, 12, 3, 0);
    /* ignored targets (< 0), as trident eval masks a partial window's tail */
    xent_case("softmax_xent V=65 Vp=128 every 3rd target ignored", 16, 65, 128, 4.0f, 3);
    xent_shard_case("xent 2 vocab shards every 3rd target ignored", 16, 65, 128, 2, 3);
}

int main(void) {
    td_kernels_set_threads(1);
    test_embedding();
    test_embedding_shards();
    test_layernorm();
    test_layernorm_offset();
    test_matmul();
    test_attention();
    test_gelu();
    test_residual();
    test_softmax_xent();
    return tu_finish("test_kernels");
}
