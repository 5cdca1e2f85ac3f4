/* bf16 conversions and the oneDNN bf16 GEMMs (kernels_bf16.h).
 *
 * Conversions: td_bf16_from_float (and its vectorised _n form) against the
 * plain definition td_bf16_from_float_ref on every special value, rounding
 * ties on both parities, carries into the exponent and into inf, every
 * subnormal pattern class, and 2^24 evenly spread bit patterns; round trips
 * of all 65536 bf16 values.
 *
 * GEMMs: td_matmul_bf16_forward/backward against the fp32 _ref loops run on
 * the same bf16 inputs converted to fp32 (td_matmul_bf16_*_ref). A product of
 * two bf16 values (8-bit significands) is exact in fp32 (24 bits), so the two
 * differ only by the order of the fp32 sums:
 *  TOL_F32 1e-4 relative with the rms floor (FLOOR): sums of K <= 1536
 *   terms, error ~ sqrt(K) * 2^-24 of the rms, the worst element a few times
 *   that: <= ~1e-5 of the rms, 1e-4 x (|x| + 0.1 rms) covers it.
 *  TOL_BF16 = 2^-7 + TOL_F32: a bf16 output is the rounding of an fp32 value
 *   (unit roundoff 2^-8, so each side is within 2^-8 |x| of its fp32 sum);
 *   two fp32 values a few ulp apart can round to neighbouring bf16 values,
 *   one bf16 ulp = at most 2^-7 relative apart.
 * At the model's shapes (N = 2048 rows) the oracle is the fp32 OpenBLAS
 * kernel td_matmul_forward/backward on the converted inputs (the _ref loops
 * would take minutes), same tolerances; and the outputs at 1 and 2 threads
 * are compared bitwise (thread-count determinism, reported in README). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

#define FLOOR 0.1
#define TOL_F32 1e-4
#define TOL_BF16 (1.0 / 128 + TOL_F32)

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- conversions ---------------------------------------------------------- */

static int g_cvt_bad = 0;
static void cvt_one(uint32_t u, td_bf16 want_or_0xffff_for_ref) {
    float x = bits_f(u);
    td_bf16 ref = td_bf16_from_float_ref(x), got = td_bf16_from_float(x), got_n;
    td_bf16_from_float_n(&got_n, &x, 1);
    td_bf16 want = want_or_0xffff_for_ref == 0xffff ? ref : want_or_0xffff_for_ref;
    if (ref != want || got != want || got_n != want) {
        if (g_cvt_bad++ < 5)
            printf("      bits 0x%08x (%g): want 0x%04x ref 0x%04x scalar 0x%04x vector 0x%04x\n", u,
                   (double)x, want, ref, got, got_n);
    }
}

static void test_conversions(void) {
    int mark = tu_mark();
    /* hand-checked cases: {fp32 bits, expected bf16} */
    static const uint32_t cases[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000},  /* +-0 */
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80},  /* +-inf */
        {0x3f800000, 0x3f80},                        /* 1 */
        {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82},  /* ties: even stays, odd rounds up */
        {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80},  /* just above / below a tie */
        {0x3fff8000, 0x4000},                        /* carry into the exponent */
        {0x7f7fffff, 0x7f80}, {0x7f7f8000, 0x7f80},  /* FLT_MAX and its tie: inf */
        {0x7f7f7fff, 0x7f7f},                        /* largest value that stays finite */
        {0x00000001, 0x0000}, {0x00008000, 0x0000},  /* smallest subnormals: to 0 (tie, even) */
        {0x00018000, 0x0002}, {0x00008001, 0x0001},  /* subnormal tie odd; above a tie */
        {0x007fffff, 0x0080},                        /* largest subnormal: to the smallest normal */
        {0x7fc00000, 0x7fc0}, {0xffc00000, 0xffc0},  /* quiet NaNs */
        {0x7f800001, 0x7fc0}, {0x7fbfffff, 0x7fff},  /* signalling NaN, low payload: stays NaN */
        {0xff800001, 0xffc0},
    };
    g_cvt_bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cvt_one(cases[i][0], (td_bf16)cases[i][1]);
    tu_checks++;
    if (g_cvt_bad) tu_failures++;
    printf("%s  %-52s %zu cases, %d wrong\n", g_cvt_bad ? "FAIL" : "PASS",
           "bf16 rounding: hand-checked specials and ties", sizeof cases / sizeof cases[0], g_cvt_bad);

    /* 2^24 bit patterns with a stride coprime to 2^32 covering all exponents,
     * plus every low-16-bit pattern of a few high halves (all ties and
     * near-ties) through the vector form in bulk */
    g_cvt_bad = 0;
    enum { M = 1 << 24 };
    float *x = TU_NEW(float, M);
    td_bf16 *got = TU_NEW(td_bf16, M);
    for (uint32_t i = 0; i < M; i++) x[i] = bits_f(i * 2654435761u);
    td_bf16_from_float_n(got, x, M);
    size_t bad = 0;
    for (uint32_t i = 0; i < M; i++) {
        td_bf16 r = td_bf16_from_float_ref(x[i]);
        if (r != got[i] || r != td_bf16_from_float(x[i])) {
            if (bad++ < 5) printf("      x %a: ref 0x%04x vector 0x%04x\n", (double)x[i], r, got[i]);
        }
    }
    static const uint32_t highs[] = {0x0000, 0x0001, 0x3f80, 0x3f81, 0x7f7f, 0x7f80, 0xff7f, 0x8000, 0x807f};
    for (size_t h = 0; h < sizeof highs / sizeof highs[0]; h++) {
        for (uint32_t lo = 0; lo < 65536; lo++) x[lo] = bits_f(highs[h] << 16 | lo);
        td_bf16_from_float_n(got, x, 65536);
        for (uint32_t lo = 0; lo < 65536; lo++)
            if (got[lo] != td_bf16_from_float_ref(x[lo]) && bad++ < 5)
                printf("      bits 0x%08x: vector 0x%04x ref 0x%04x\n", highs[h] << 16 | lo, got[lo],
                       td_bf16_from_float_ref(x[lo]));
    }
    tu_checks++;
    if (bad) tu_failures++;
    printf("%s  %-52s %zu wrong\n", bad ? "FAIL" : "PASS",
           "bf16 rounding: 2^24 spread patterns + 9 x 2^16 low halves", bad);

    /* every bf16 value: to fp32 and back is the identity (NaN: stays NaN) */
    bad = 0;
    td_bf16 *all = TU_NEW(td_bf16, 65536), *back = TU_NEW(td_bf16, 65536);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (td_bf16)i;
    td_bf16_to_float_n(x, all, 65536);
    td_bf16_from_float_n(back, x, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
        int ok = nan ? isnan(x[i]) && (back[i] & 0x7fc0) == 0x7fc0 && (back[i] & 0x8000) == (i & 0x8000)
                     : back[i] == i && x[i] == td_bf16_to_float(all[i]);
        if (!ok && bad++ < 5) printf("      0x%04x -> %g -> 0x%04x\n", i, (double)x[i], back[i]);
    }
    tu_checks++;
    if (bad) tu_failures++;
    printf("%s  %-52s %zu wrong\n", bad ? "FAIL" : "PASS", "bf16 round trip of all 65536 values", bad);
    tu_release(mark);
}

/* ---- GEMMs -------------------------------------------------------------- */

static td_bf16 *rand_bf16(size_t n, uint64_t stream, float scale) {
    float *f = TU_NEW(float, n);
    tu_randn(f, n, stream, scale);
    td_bf16 *b = TU_NEW(td_bf16, n);
    td_bf16_from_float_n(b, f, n);
    return b;
}

static float *bf16_as_f32(const td_bf16 *b, size_t n) {
    float *f = TU_NEW(float, n);
    td_bf16_to_float_n(f, b, n);
    return f;
}

/* Output of type t as fp32 for the comparisons. */
static float *out_f32(const void *p, td_ktype t, size_t n) {
    return t == TD_K_F32 ? (float *)p : bf16_as_f32(p, n);
}

/* fast vs ref on one shape: forward with and without bias, backward adding
 * into nonzero dinp/dw/dbias (so the sum post-op is exercised), for each
 * output type. */
static void matmul_case(int N, int C, int OC, td_ktype t) {
    int mark = tu_mark();
    const char *tn = t == TD_K_BF16 ? "bf16" : "f32";
    double tol = t == TD_K_BF16 ? TOL_BF16 : TOL_F32;
    size_t ts = t == TD_K_BF16 ? 2 : 4;
    td_bf16 *inp = rand_bf16((size_t)N * C, 1, 1.0f), *w = rand_bf16((size_t)OC * C, 2, 0.05f);
    td_bf16 *dout = rand_bf16((size_t)N * OC, 3, 1.0f);
    float *bias = TU_NEW(float, OC);
    tu_randn(bias, OC, 4, 0.1f);
    char name[128];
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        void *o = tu_alloc((size_t)N * OC * ts), *r = tu_alloc((size_t)N * OC * ts);
        td_matmul_bf16_forward(o, t, inp, w, with_bias ? bias : NULL, N, C, OC);
        td_matmul_bf16_forward_ref(r, t, inp, w, with_bias ? bias : NULL, N, C, OC);
        snprintf(name, sizeof name, "matmul_bf16 fwd %dx%dx%d ->%s%s", N, C, OC, tn, with_bias ? " +bias" : "");
        tu_check_close_f(name, out_f32(o, t, (size_t)N * OC), out_f32(r, t, (size_t)N * OC),
                         (size_t)N * OC, tol, FLOOR);
    }
    /* backward: start from nonzero gradients, fast and ref from the same */
    void *di = tu_alloc((size_t)N * C * ts), *dir = tu_alloc((size_t)N * C * ts);
    float *dw = TU_NEW(float, (size_t)OC * C), *db = TU_NEW(float, OC);
    tu_randn(dw, (size_t)OC * C, 5, 1.0f);
    tu_randn(db, OC, 6, 1.0f);
    if (t == TD_K_F32)
        tu_randn(di, (size_t)N * C, 7, 0.1f);
    else
        memcpy(di, rand_bf16((size_t)N * C, 7, 0.1f), (size_t)N * C * 2);
    memcpy(dir, di, (size_t)N * C * ts);
    float *dwr = tu_copy(dw, (size_t)OC * C), *dbr = tu_copy(db, OC);
    td_matmul_bf16_backward(di, t, dw, db, dout, inp, w, N, C, OC);
    td_matmul_bf16_backward_ref(dir, t, dwr, dbr, dout, inp, w, N, C, OC);
    snprintf(name, sizeof name, "matmul_bf16 bwd %dx%dx%d dinp(%s) +=", N, C, OC, tn);
    tu_check_close_f(name, out_f32(di, t, (size_t)N * C), out_f32(dir, t, (size_t)N * C),
                     (size_t)N * C, tol, FLOOR);
    snprintf(name, sizeof name, "matmul_bf16 bwd %dx%dx%d dw(f32) +=", N, C, OC);
    tu_check_close_f(name, dw, dwr, (size_t)OC * C, TOL_F32, FLOOR);
    snprintf(name, sizeof name, "matmul_bf16 bwd %dx%dx%d dbias(f32) +=", N, C, OC);
    tu_check_close_f(name, db, dbr, OC, TOL_F32, FLOOR);
    tu_release(mark);
}

/* One model shape: fp32 OpenBLAS kernel on the converted inputs as the
 * oracle; then 1 vs 2 threads bitwise. */
static void model_shape(int N, int C, int OC) {
    int mark = tu_mark();
    char name[128];
    td_bf16 *inp = rand_bf16((size_t)N * C, 11, 1.0f), *w = rand_bf16((size_t)OC * C, 12, 0.05f);
    td_bf16 *dout = rand_bf16((size_t)N * OC, 13, 1.0f);
    float *fi = bf16_as_f32(inp, (size_t)N * C), *fw = bf16_as_f32(w, (size_t)OC * C);
    float *fd = bf16_as_f32(dout, (size_t)N * OC);
    float *bias = TU_NEW(float, OC);
    tu_randn(bias, OC, 14, 0.1f);
    size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    /* results per thread count: out f32 | out bf16 | dinp bf16 | dw f32 */
    float *res[2], *exp = TU_NEW(float, no), *edi = TU_NEW(float, ni), *edw = TU_NEW(float, nw);
    td_kernels_set_threads(2);
    td_matmul_forward(exp, fi, fw, bias, N, C, OC);
    td_matmul_backward(edi, edw, NULL, fd, fi, fw, N, C, OC);
    for (int nt = 1; nt <= 2; nt++) {
        td_kernels_set_threads(nt);
        float *r = res[nt - 1] = TU_NEW(float, no + no / 2 + ni / 2 + nw);
        td_bf16 *ob = (td_bf16 *)(r + no), *dib = ob + no;
        float *dw = r + no + no / 2 + ni / 2;
        memset(dib, 0, ni * 2);
        td_matmul_bf16_forward(r, TD_K_F32, inp, w, bias, N, C, OC);
        td_matmul_bf16_forward(ob, TD_K_BF16, inp, w, bias, N, C, OC);
        td_matmul_bf16_backward(dib, TD_K_BF16, dw, NULL, dout, inp, w, N, C, OC);
    }
    snprintf(name, sizeof name, "model %dx%dx%d fwd f32 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, res[0], exp, no, TOL_F32, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d fwd bf16 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, bf16_as_f32((td_bf16 *)(res[0] + no), no), exp, no, TOL_BF16, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d dinp bf16 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, bf16_as_f32((td_bf16 *)(res[0] + no) + no, ni), edi, ni, TOL_BF16, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d dw f32 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, res[0] + no + no / 2 + ni / 2, edw, nw, TOL_F32, FLOOR);
    /* all four outputs as raw bits (the bf16 halves as floats' bytes) */
    snprintf(name, sizeof name, "model %dx%dx%d all outputs: 2 threads vs 1", N, C, OC);
    tu_check_bitwise(name, res[1], res[0], no + no / 2 + ni / 2 + nw);
    td_kernels_set_threads(1);
    tu_release(mark);
}

static void print_line(const char *line, void *ctx) { printf("      %s\n", line); }

int main(void) {
    td_kernels_set_threads(1);
    test_conversions();
    const int shapes[][3] = {{4, 8, 16}, {37, 61, 29}, {64, 384, 80}, {96, 128, 384}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 2; t++) matmul_case(shapes[i][0], shapes[i][1], shapes[i][2], (td_ktype)t);
    /* L6 H6 C384 T256 batch 8: qkv, attention proj, fc, fc proj, head (V=65 -> Vp=80) */
    const int model[][3] = {{2048, 384, 1152}, {2048, 384, 384}, {2048, 384, 1536},
                            {2048, 1536, 384}, {2048, 384, 80}};
    for (size_t i = 0; i < sizeof model / sizeof model[0]; i++)
        model_shape(model[i][0], model[i][1], model[i][2]);
    printf("      primitives created:\n");
    td_matmul_bf16_describe(print_line, NULL);
    td_matmul_bf16_release();
    return tu_finish("test_kernels_bf16");
}
