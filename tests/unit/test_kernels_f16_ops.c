/* The fp16 non-GEMM kernels (src/kernels/lowp_ops.c, the implementation
 * bf16 shares) against the fp32 kernels of kernels.h run on the same
 * fp16-valued inputs (converted to fp32), and 1 vs 2 threads bitwise.
 *
 * Tolerances:
 *  ROUND: |got - exp| <= 2^-11 |exp| + 2^-25 for every fp16 output. fp16
 *   keeps 11 significand bits, so rounding to nearest moves a normal x in
 *   [2^e, 2^(e+1)) by at most half an ulp = 2^(e-11) <= 2^-11 |x| (unit
 *   roundoff u = 2^-11); below 2^-14 the spacing is the fixed subnormal
 *   step 2^-24, so the error is at most 2^-25 there (softmax probabilities
 *   and attention weights reach that range). The fp16 kernels compute
 *   exactly the fp32 kernel's value and round it once (gradients added
 *   into an fp16 buffer: old fp16 value + fp32 term, rounded once), so one
 *   rounding bounds the difference; a wrong term or a second rounding
 *   exceeds it somewhere in 10^4-10^5 elements. The data stays below 65504.
 *  TOL_PSUM = 1e-5 with the 0.1 rms floor, fp32 parameter gradients of
 *   layernorm: the tile sums (in double, as the fp32 kernel) are added into
 *   the float output, one float rounding per tile (<= 4 here): <= 4 x 2^-24
 *   ~ 2.4e-7 of the magnitude of the sums; 1e-5 leaves room for
 *   cancellation and still catches a lost tile (>= 10% off).
 *  Embedding gradients, layernorm statistics and the losses are compared
 *   bitwise: the tiles visit rows in the fp32 kernel's order and compute
 *   from the same fp32 values.
 * fp16 specifics: a sum beyond 65504 becomes inf (no saturation: the loss
 * scaler needs to see it), and subnormal gradients pass through a residual
 * backward unchanged (gradual underflow, no flush to zero). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_f16.h"

#define ROUND_REL (1.0 / 2048)
#define ROUND_ABS 0x1p-25
#define TOL_PSUM 1e-5
#define FLOOR 0.1

/* An fp16 tensor and its exact fp32 value. */
typedef struct {
    td_f16 *h;
    float *f;
} pair;

static pair rand_pair(size_t n, uint64_t stream, float scale) {
    pair p = {TU_NEW(td_f16, n), TU_NEW(float, n)};
    tu_randn(p.f, n, stream, scale);
    td_f16_from_float_n(p.h, p.f, n);
    td_f16_to_float_n(p.f, p.h, n);
    return p;
}

/* One rounding of exp: |got - exp| <= ROUND_REL |exp| + ROUND_ABS. */
static void check_round(const char *name, const td_f16 *got, const float *exp, size_t n) {
    double worst = 0.0;
    size_t wi = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = td_f16_to_float(got[i]), e = exp[i];
        double err = fabs(g - e) / (ROUND_REL * fabs(e) + ROUND_ABS); /* in units of the bound */
        if (!(err <= 1.0)) bad++;                                      /* NaN fails */
        if (!(err <= worst)) worst = err, wi = i;
    }
    tu_checks++;
    if (bad) tu_failures++;
    printf("%s  %-52s n=%-6zu worst %.2f of the bound\n", bad ? "FAIL" : "PASS", name, n, worst);
    if (bad)
        printf("      worst [%zu]: got %.9g expected %.9g; %zu over\n", wi,
               (double)td_f16_to_float(got[wi]), (double)exp[wi], bad);
}

/* The outputs of one run, kept to compare thread counts byte for byte. */
#define MAX_OUT 8
typedef struct {
    const void *p[MAX_OUT];
    size_t bytes[MAX_OUT];
    int n;
} outputs;
static void keep(outputs *o, const void *p, size_t bytes) {
    if (o->n == MAX_OUT) {
        printf("too many outputs\n");
        exit(1);
    }
    o->p[o->n] = p;
    o->bytes[o->n++] = bytes;
}

/* Each case runs the fp16 kernels (and, when `check`, the fp32 kernels and
 * the comparisons) and records its fp16-side outputs. */
typedef void (*case_fn)(int check, outputs *o);

static void case_gelu_residual(int check, outputs *o) {
    const size_t n = 200003; /* 4 tiles, the last partial, odd length */
    pair x = rand_pair(n, 1, 2.0f), y = rand_pair(n, 2, 1.0f), g = rand_pair(n, 3, 1.0f);
    pair dx = rand_pair(n, 4, 0.1f), da = rand_pair(n, 5, 0.1f), db = rand_pair(n, 6, 0.1f);
    td_f16 *out = TU_NEW(td_f16, n), *sum = TU_NEW(td_f16, n);
    td_gelu_f16_forward(out, x.h, n);
    td_gelu_f16_backward(dx.h, x.h, g.h, n);
    td_residual_f16_forward(sum, x.h, y.h, n);
    td_residual_f16_backward(da.h, db.h, g.h, n);
    keep(o, out, n * 2), keep(o, dx.h, n * 2), keep(o, sum, n * 2), keep(o, da.h, n * 2),
        keep(o, db.h, n * 2);
    if (!check) return;
    float *fo = TU_NEW(float, n), *fs = TU_NEW(float, n);
    td_gelu_forward(fo, x.f, n);
    td_gelu_backward(dx.f, x.f, g.f, n);
    td_residual_forward(fs, x.f, y.f, n);
    td_residual_backward(da.f, db.f, g.f, n);
    check_round("gelu_f16 fwd vs fp32", out, fo, n);
    check_round("gelu_f16 bwd (+= dinp) vs fp32", dx.h, dx.f, n);
    check_round("residual_f16 fwd vs fp32", sum, fs, n);
    check_round("residual_f16 bwd da += vs fp32", da.h, da.f, n);
    check_round("residual_f16 bwd db += vs fp32", db.h, db.f, n);
}

static void case_layernorm(int check, outputs *o) {
    const int N = 513, C = 384; /* 170-row tiles: 4, the last of 3 rows */
    size_t n = (size_t)N * C;
    pair x = rand_pair(n, 11, 1.0f), g = rand_pair(n, 12, 1.0f), dx = rand_pair(n, 13, 0.1f);
    for (int r = 0; r < N; r++) /* rows with an offset: the centring matters */
        for (int c = 0; c < C; c++) x.f[(size_t)r * C + c] += (float)(r % 7);
    td_f16_from_float_n(x.h, x.f, n);
    td_f16_to_float_n(x.f, x.h, n);
    float *w = TU_NEW(float, C), *b = TU_NEW(float, C), *dw = TU_NEW(float, C), *dbb = TU_NEW(float, C);
    tu_randn(w, C, 14, 1.0f);
    tu_randn(b, C, 15, 1.0f);
    tu_randn(dw, C, 16, 1.0f);
    tu_randn(dbb, C, 17, 1.0f);
    float *dw_f = tu_copy(dw, C), *db_f = tu_copy(dbb, C);
    td_f16 *out = TU_NEW(td_f16, n);
    float *mean = TU_NEW(float, N), *rstd = TU_NEW(float, N);
    td_layernorm_f16_forward(out, mean, rstd, x.h, w, b, N, C);
    td_layernorm_f16_backward(dx.h, dw, dbb, g.h, x.h, w, mean, rstd, N, C);
    keep(o, out, n * 2), keep(o, mean, N * 4), keep(o, rstd, N * 4), keep(o, dx.h, n * 2),
        keep(o, dw, C * 4), keep(o, dbb, C * 4);
    if (!check) return;
    float *fo = TU_NEW(float, n), *fm = TU_NEW(float, N), *fr = TU_NEW(float, N);
    td_layernorm_forward(fo, fm, fr, x.f, w, b, N, C);
    td_layernorm_backward(dx.f, dw_f, db_f, g.f, x.f, w, fm, fr, N, C);
    check_round("layernorm_f16 fwd vs fp32", out, fo, n);
    tu_check_bitwise("layernorm_f16 mean (fp32, same rows) vs fp32", mean, fm, N);
    tu_check_bitwise("layernorm_f16 rstd (fp32, same rows) vs fp32", rstd, fr, N);
    check_round("layernorm_f16 bwd dinp += vs fp32", dx.h, dx.f, n);
    tu_check_close_f("layernorm_f16 bwd dw (fp32, 4 tiles) vs fp32", dw, dw_f, C, TOL_PSUM, FLOOR);
    tu_check_close_f("layernorm_f16 bwd db (fp32, 4 tiles) vs fp32", dbb, db_f, C, TOL_PSUM, FLOOR);
}

static void case_attention(int check, outputs *o) {
    const int B = 3, T = 33, C = 48, NH = 4;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    pair qkv = rand_pair(nq, 21, 1.0f), g = rand_pair(no, 22, 1.0f), dq = rand_pair(nq, 23, 0.1f);
    td_f16 *out = TU_NEW(td_f16, no), *att = TU_NEW(td_f16, na);
    td_attention_f16_forward(out, att, qkv.h, B, T, C, NH);
    td_attention_f16_backward(dq.h, g.h, qkv.h, att, B, T, C, NH);
    keep(o, out, no * 2), keep(o, att, na * 2), keep(o, dq.h, nq * 2);
    if (!check) return;
    float *fo = TU_NEW(float, no), *fa = TU_NEW(float, na), *datt = TU_NEW(float, na);
    td_attention_forward(fo, fa, qkv.f, B, T, C, NH);
    check_round("attention_f16 fwd out vs fp32", out, fo, no);
    check_round("attention_f16 fwd att (probabilities) vs fp32", att, fa, na);
    /* the backward reads the saved probabilities: give the fp32 kernel the
     * same (fp16) ones */
    td_f16_to_float_n(fa, att, na);
    td_attention_backward(dq.f, datt, g.f, qkv.f, fa, B, T, C, NH);
    check_round("attention_f16 bwd dqkv += vs fp32 (same att)", dq.h, dq.f, nq);
}

static void case_embedding(int check, outputs *o) {
    const int B = 4, T = 100, C = 384, V = 50; /* 400 rows: tiles of 170 */
    size_t n = (size_t)B * T * C;
    int *tok = TU_NEW(int, B * T);
    tu_rand_ints(tok, B * T, 31, V);
    float *wte = TU_NEW(float, (size_t)V * C), *wpe = TU_NEW(float, (size_t)T * C);
    tu_randn(wte, (size_t)V * C, 32, 1.0f);
    tu_randn(wpe, (size_t)T * C, 33, 1.0f);
    pair g = rand_pair(n, 34, 1.0f);
    float *dwte = TU_NEW(float, (size_t)V * C), *dwpe = TU_NEW(float, (size_t)T * C);
    tu_randn(dwte, (size_t)V * C, 35, 1.0f);
    tu_randn(dwpe, (size_t)T * C, 36, 1.0f);
    float *dwte_f = tu_copy(dwte, (size_t)V * C), *dwpe_f = tu_copy(dwpe, (size_t)T * C);
    td_f16 *out = TU_NEW(td_f16, n);
    td_embedding_f16_forward(out, tok, wte, wpe, B, T, C);
    td_embedding_f16_backward(dwte, dwpe, g.h, tok, B, T, C);
    keep(o, out, n * 2), keep(o, dwte, (size_t)V * C * 4), keep(o, dwpe, (size_t)T * C * 4);
    if (!check) return;
    float *fo = TU_NEW(float, n);
    td_embedding_forward(fo, tok, wte, wpe, B, T, C);
    td_embedding_backward(dwte_f, dwpe_f, g.f, tok, B, T, C);
    check_round("embedding_f16 fwd vs fp32", out, fo, n);
    tu_check_bitwise("embedding_f16 bwd dwte += (fp32) vs fp32", dwte, dwte_f, (size_t)V * C);
    tu_check_bitwise("embedding_f16 bwd dwpe += (fp32) vs fp32", dwpe, dwpe_f, (size_t)T * C);
}

static void case_xent(int check, outputs *o) {
    const int N = 1000, V = 65, Vp = 80; /* tiles of 819 rows */
    size_t n = (size_t)N * Vp;
    pair x = rand_pair(n, 41, 3.0f);
    int *tgt = TU_NEW(int, N);
    tu_rand_ints(tgt, N, 42, V);
    float *dloss = TU_NEW(float, N), *loss = TU_NEW(float, N);
    for (int i = 0; i < N; i++) dloss[i] = 1.0f / N;
    td_f16 *probs = TU_NEW(td_f16, n), *dl = TU_NEW(td_f16, n);
    td_softmax_xent_f16_forward(loss, probs, x.h, tgt, N, V, Vp);
    td_softmax_xent_f16_backward(dl, probs, tgt, dloss, N, V, Vp);
    keep(o, loss, N * 4), keep(o, probs, n * 2), keep(o, dl, n * 2);
    /* in place, as the model runs it: probs over logits, dlogits over probs */
    td_f16 *inplace = TU_NEW(td_f16, n);
    memcpy(inplace, x.h, n * 2);
    float *loss2 = TU_NEW(float, N);
    td_softmax_xent_f16_forward(loss2, inplace, inplace, tgt, N, V, Vp);
    int same_fwd = !memcmp(inplace, probs, n * 2) && !memcmp(loss2, loss, N * 4);
    td_softmax_xent_f16_backward(inplace, inplace, tgt, dloss, N, V, Vp);
    int same = same_fwd && !memcmp(inplace, dl, n * 2);
    if (!check) return;
    tu_checks++;
    if (!same) tu_failures++;
    printf("%s  %-52s\n", same ? "PASS" : "FAIL", "softmax_xent_f16 in place = out of place, bitwise");
    float *fl = TU_NEW(float, N), *fp = TU_NEW(float, n), *fd = TU_NEW(float, n);
    td_softmax_xent_forward(fl, fp, x.f, tgt, N, V, Vp);
    tu_check_bitwise("softmax_xent_f16 losses (fp32) vs fp32", loss, fl, N);
    check_round("softmax_xent_f16 probs vs fp32", probs, fp, n);
    td_f16_to_float_n(fp, probs, n); /* same saved probabilities */
    td_softmax_xent_backward(fd, fp, tgt, dloss, N, V, Vp);
    check_round("softmax_xent_f16 bwd dlogits vs fp32 (same probs)", dl, fd, n);
}

/* The range edges: sums past 65504 overflow to inf in the forward and the
 * backward (not clamped to 65504), and subnormal gradients added to zero
 * come back bitwise (not flushed). */
static void case_range(int check, outputs *o) {
    const size_t n = 1024;
    td_f16 *a = TU_NEW(td_f16, n), *b = TU_NEW(td_f16, n), *sum = TU_NEW(td_f16, n);
    td_f16 *g = TU_NEW(td_f16, n), *da = TU_NEW(td_f16, n), *db = TU_NEW(td_f16, n);
    for (size_t i = 0; i < n; i++) {
        a[i] = td_f16_from_float(40000.0f + (float)i);
        b[i] = td_f16_from_float(i % 2 ? 30000.0f : -30000.0f);
        g[i] = (td_f16)(1 + i % 0x3ff); /* every positive subnormal pattern */
        db[i] = td_f16_from_float(65504.0f);
    }
    td_residual_f16_forward(sum, a, b, n);
    td_residual_f16_backward(da, db, g, n);
    keep(o, sum, n * 2), keep(o, da, n * 2), keep(o, db, n * 2);
    if (!check) return;
    size_t bad_fwd = 0, bad_sub = 0, bad_inf = 0;
    for (size_t i = 0; i < n; i++) {
        float s = td_f16_to_float(sum[i]), want = td_f16_to_float(a[i]) + td_f16_to_float(b[i]);
        /* odd i: >= 70000, inf; even i: ~10000, multiples of 16 (a, b are
         * multiples of 32 and 16), exact in fp16 (spacing 8 there) */
        bad_fwd += i % 2 ? !(isinf(s) && s > 0) : s != want;
        bad_sub += da[i] != g[i];
        /* 65504 + a subnormal is 65504 again (far below half an ulp) */
        bad_inf += db[i] != td_f16_from_float(65504.0f);
    }
    tu_checks += 3;
    tu_failures += (bad_fwd > 0) + (bad_sub > 0) + (bad_inf > 0);
    printf("%s  %-52s %zu wrong\n", bad_fwd ? "FAIL" : "PASS", "residual_f16 fwd: > 65504 is inf, not 65504", bad_fwd);
    printf("%s  %-52s %zu wrong\n", bad_sub ? "FAIL" : "PASS", "residual_f16 bwd: subnormal grads kept bitwise", bad_sub);
    printf("%s  %-52s %zu wrong\n", bad_inf ? "FAIL" : "PASS", "residual_f16 bwd: 65504 + subnormal stays 65504", bad_inf);
    /* and a gradient that overflows: 65504 + 65504 */
    td_f16 big = td_f16_from_float(65504.0f), acc = big;
    td_residual_f16_backward(&acc, NULL, &big, 1);
    float f = td_f16_to_float(acc);
    tu_checks++;
    if (!(isinf(f) && f > 0)) tu_failures++;
    printf("%s  %-52s got %g\n", isinf(f) && f > 0 ? "PASS" : "FAIL",
           "residual_f16 bwd: 65504 += 65504 is inf", (double)f);
}

static void run_case(const char *name, case_fn fn) {
    int mark = tu_mark();
    outputs o1 = {0}, o2 = {0};
    td_kernels_set_threads(2);
    fn(1, &o2);
    td_kernels_set_threads(1);
    fn(0, &o1);
    size_t bad = 0;
    for (int i = 0; i < o1.n; i++)
        bad += o1.bytes[i] != o2.bytes[i] || memcmp(o1.p[i], o2.p[i], o1.bytes[i]);
    tu_checks++;
    if (bad) tu_failures++;
    char label[96];
    snprintf(label, sizeof label, "%s: all outputs 2 threads vs 1", name);
    printf("%s  %-52s %d outputs, %zu differ bitwise\n", bad ? "FAIL" : "PASS", label, o1.n, bad);
    tu_release(mark);
}

int main(void) {
    run_case("gelu+residual", case_gelu_residual);
    run_case("layernorm", case_layernorm);
    run_case("attention", case_attention);
    run_case("embedding", case_embedding);
    run_case("softmax_xent", case_xent);
    run_case("fp16 range edges", case_range);
    return tu_finish("test_kernels_f16_ops");
}
