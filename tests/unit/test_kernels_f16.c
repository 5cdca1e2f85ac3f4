/* fp16 conversions and the fp16 GEMMs (kernels_f16.h).
 *
 * Conversions: the F16C forms (td_f16_from_float, the vectorised _n form)
 * against the portable definition td_f16_from_float_ref on hand-checked
 * specials; on every rounding boundary of the whole fp16 range (for each
 * pair of neighbouring finite fp16 values, their midpoint and the fp32
 * values one ulp either side of it, both signs: every tie, the
 * subnormal/normal seam and the overflow edge at 65520); on every low-16-bit
 * pattern of a few high halves; and on 2^22 evenly spread fp32 patterns.
 * fp16 -> fp32: all 65536 values through the vector, scalar and portable
 * forms against ldexp, and back (identity for non-NaN). The same with
 * MXCSR's FTZ and DAZ set, which must not change any of it.
 *
 * GEMMs: td_matmul_f16_forward/backward against the fp32 _ref loops on the
 * same fp16 inputs converted to fp32 (td_matmul_f16_*_ref). A product of
 * two fp16 values (11-bit significands, 22 bits) is exact in fp32 (24), so
 * the two differ only by the order of the fp32 sums:
 *  TOL_F32 1e-4 relative with the rms floor (FLOOR): sums of K <= 1536
 *   terms, error ~ sqrt(K) 2^-24 of the rms, the worst element a few times
 *   that: <= ~1e-5 of the rms; 1e-4 x (|x| + 0.1 rms) covers it.
 *  TOL_F16 = 2^-10 + TOL_F32: an fp16 output is the rounding of an fp32
 *   value (unit roundoff 2^-11, so each side is within 2^-11 |x| of its
 *   fp32 sum); two fp32 values a few ulp apart can round to neighbouring
 *   fp16 values, one fp16 ulp = at most 2^-10 relative apart (normal range;
 *   the data's results are O(1), the subnormal spacing 2^-24 sits far
 *   below the rms floor).
 * At the model's shapes (N = 2048 rows) the oracle is the fp32 OpenBLAS
 * kernel on the converted inputs, same tolerances; 1 vs 2 threads bitwise.
 * Overflow: an fp16 output beyond 65504 must be inf (no saturation), an
 * fp32 output of the same GEMM the exact value. Memory: the converting
 * path's buffer equals td_matmul_f16_convert_bytes (planned = measured). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_f16.h"

#define FLOOR 0.1
#define TOL_F32 1e-4
#define TOL_F16 (1.0 / 1024 + TOL_F32)

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void verdict(const char *name, size_t bad, const char *what) {
    tu_checks++;
    if (bad) tu_failures++;
    printf("%s  %-52s %s%zu wrong\n", bad ? "FAIL" : "PASS", name, what, bad);
}

/* ---- conversions ---------------------------------------------------------- */

/* x through ref, scalar and vector must all give `want`. */
static size_t cvt_one(float x, td_f16 want) {
    td_f16 ref = td_f16_from_float_ref(x), got = td_f16_from_float(x), got_n;
    td_f16_from_float_n(&got_n, &x, 1);
    if (ref == want && got == want && got_n == want) return 0;
    printf("      bits 0x%08x (%a): want 0x%04x ref 0x%04x scalar 0x%04x vector 0x%04x\n",
           f_bits(x), (double)x, want, ref, got, got_n);
    return 1;
}

static size_t hand_cases(void) {
    static const uint32_t cases[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, /* +-0 */
        {0x7f800000, 0x7c00}, {0xff800000, 0xfc00}, /* +-inf */
        {0x3f800000, 0x3c00},                       /* 1 */
        {0x3f801000, 0x3c00}, {0x3f803000, 0x3c02}, /* ties at 1: even stays, odd rounds up */
        {0x3f801001, 0x3c01}, {0x3f800fff, 0x3c00}, /* just above / below a tie */
        {0x3ffff000, 0x4000},                       /* carry into the exponent: 2 */
        {0x477fe000, 0x7bff}, {0x477fefff, 0x7bff}, /* 65504 = max; just below the tie */
        {0x477ff000, 0x7c00}, {0xc77ff000, 0xfc00}, /* 65520: tie with odd 0x7bff -> inf */
        {0x7f7fffff, 0x7c00},                       /* FLT_MAX: inf, not saturated */
        {0x38800000, 0x0400},                       /* 2^-14, the smallest normal */
        {0x387fc000, 0x03ff},                       /* the largest subnormal */
        {0x387fe000, 0x0400},                       /* tie, odd 0x03ff: up to the normal */
        {0x33800000, 0x0001}, {0xb3800000, 0x8001}, /* 2^-24, the smallest subnormal */
        {0x33000000, 0x0000}, {0x33000001, 0x0001}, /* 2^-25: tie to even 0; just above */
        {0x33c00000, 0x0002}, {0x34200000, 0x0002}, /* 1.5, 2.5 x 2^-24: ties to even */
        {0x00000001, 0x0000}, {0x80000001, 0x8000}, /* fp32 subnormals: signed zero */
        {0x7fc00000, 0x7e00}, {0xffc00000, 0xfe00}, /* quiet NaNs */
        {0x7f800001, 0x7e00}, {0xff800001, 0xfe00}, /* signalling, low payload: stays NaN */
        {0x7fbfe000, 0x7fff},                       /* top payload bits kept */
    };
    size_t bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        bad += cvt_one(bits_f(cases[i][0]), (td_f16)cases[i][1]);
    return bad;
}

/* Every rounding boundary: for each finite fp16 h >= 0 and its successor s
 * (0x7c00 = inf after 65504, where the "next value" is 2^16), the midpoint
 * (exact in fp32: 12 significant bits) goes to whichever of h, s is even,
 * and one fp32 ulp below / above it to h / s; h itself to h. Both signs.
 * Ref and scalar per value, the vector form over the whole array. */
static size_t boundaries(void) {
    enum { NB = 0x7c00 * 8 };
    float *x = TU_NEW(float, NB);
    td_f16 *want = TU_NEW(td_f16, NB), *got = TU_NEW(td_f16, NB);
    size_t k = 0, bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        float lo = td_f16_to_float_ref((td_f16)h);
        float hi = h == 0x7bff ? 65536.0f : td_f16_to_float_ref((td_f16)(h + 1));
        float mid = (float)(((double)lo + hi) / 2);
        uint32_t even = (h & 1u) ? h + 1 : h;
        for (uint32_t sb = 0; sb <= 0x8000; sb += 0x8000) {
            float sg = sb ? -1.0f : 1.0f;
            x[k] = sg * lo, want[k++] = (td_f16)(h | sb);
            x[k] = sg * mid, want[k++] = (td_f16)(even | sb);
            x[k] = sg * nextafterf(mid, 0.0f), want[k++] = (td_f16)(h | sb);
            x[k] = sg * nextafterf(mid, INFINITY), want[k++] = (td_f16)((h + 1) | sb);
        }
    }
    td_f16_from_float_n(got, x, NB);
    for (size_t i = 0; i < NB; i++) {
        td_f16 r = td_f16_from_float_ref(x[i]), sc = td_f16_from_float(x[i]);
        if ((r != want[i] || sc != want[i] || got[i] != want[i]) && bad++ < 5)
            printf("      bits 0x%08x (%a): want 0x%04x ref 0x%04x scalar 0x%04x vector 0x%04x\n",
                   f_bits(x[i]), (double)x[i], want[i], r, sc, got[i]);
    }
    return bad;
}

/* Bulk: the vector form over arrays against ref and scalar. */
static size_t bulk_patterns(float *x, td_f16 *got, size_t M) {
    size_t bad = 0;
    for (uint32_t i = 0; i < M; i++) x[i] = bits_f(i * 2654435761u);
    td_f16_from_float_n(got, x, M);
    for (uint32_t i = 0; i < M; i++) {
        td_f16 r = td_f16_from_float_ref(x[i]);
        if ((r != got[i] || r != td_f16_from_float(x[i])) && bad++ < 5)
            printf("      x 0x%08x: ref 0x%04x vector 0x%04x\n", f_bits(x[i]), r, got[i]);
    }
    /* every low half of high halves at the seams: 1, 2^-14, 2^-24, 2^-25,
     * 65504, inf/NaN, zero, negatives */
    static const uint32_t highs[] = {0x3f80, 0x3f81, 0x3880, 0x387f, 0x3380, 0x3300,
                                     0x477f, 0x7f80, 0x7fc0, 0x0000, 0xb87f, 0xc77f};
    for (size_t h = 0; h < sizeof highs / sizeof highs[0]; h++) {
        for (uint32_t lo = 0; lo < 65536; lo++) x[lo] = bits_f(highs[h] << 16 | lo);
        td_f16_from_float_n(got, x, 65536);
        for (uint32_t lo = 0; lo < 65536; lo++)
            if (got[lo] != td_f16_from_float_ref(x[lo]) && bad++ < 5)
                printf("      bits 0x%08x: vector 0x%04x ref 0x%04x\n", highs[h] << 16 | lo,
                       got[lo], td_f16_from_float_ref(x[lo]));
    }
    return bad;
}

/* Every fp16 value: to fp32 (vector, scalar, portable) equals its value by
 * definition, and back is the identity; NaN stays NaN of the same sign. */
static size_t all_values(float *x, td_f16 *back) {
    size_t bad = 0;
    td_f16 *all = TU_NEW(td_f16, 65536);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (td_f16)i;
    td_f16_to_float_n(x, all, 65536);
    td_f16_from_float_n(back, x, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t e = (i >> 10) & 0x1f, m = i & 0x3ff;
        int nan = e == 0x1f && m;
        double want = e == 0x1f ? INFINITY : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
        if (i & 0x8000) want = -want;
        float s = td_f16_to_float(all[i]), r = td_f16_to_float_ref(all[i]);
        int same_bits = f_bits(s) == f_bits(x[i]) && f_bits(r) == f_bits(x[i]);
        int ok = nan ? isnan(x[i]) && same_bits && (back[i] & 0x7e00) == 0x7e00 &&
                           (back[i] & 0x8000) == (i & 0x8000) &&
                           back[i] == td_f16_from_float_ref(x[i])
                     : same_bits && (double)x[i] == want && back[i] == i &&
                           td_f16_from_float(x[i]) == i && td_f16_from_float_ref(x[i]) == i &&
                           !!signbit(x[i]) == !!(i & 0x8000);
        if (!ok && bad++ < 5)
            printf("      0x%04x -> %a (scalar %a, ref %a, want %a) -> 0x%04x\n", i, (double)x[i],
                   (double)s, (double)r, want, back[i]);
    }
    return bad;
}

static void test_conversions(void) {
    int mark = tu_mark();
    enum { M = 1 << 22 };
    float *x = TU_NEW(float, M);
    td_f16 *got = TU_NEW(td_f16, M);
    verdict("f16 rounding: hand-checked specials, ties, seams", hand_cases(), "");
    verdict("f16 rounding: every midpoint +-1 ulp, both signs", boundaries(), "");
    verdict("f16 rounding: 2^22 spread + 12 x 2^16 low halves", bulk_patterns(x, got, M), "");
    verdict("f16 all 65536 values: to fp32 exact, and back", all_values(x, got), "");
#if defined(__SSE__)
    /* flush-to-zero and denormals-are-zero set: F16C ignores them (and the
     * portable forms are integer code), so subnormals survive */
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040u);
    size_t bad = hand_cases() + boundaries() + all_values(x, got);
    _mm_setcsr(csr);
    verdict("f16 conversions with MXCSR FTZ+DAZ set: unchanged", bad, "");
#endif
    tu_release(mark);
}

/* ---- GEMMs -------------------------------------------------------------- */

static td_f16 *rand_f16(size_t n, uint64_t stream, float scale) {
    float *f = TU_NEW(float, n);
    tu_randn(f, n, stream, scale);
    td_f16 *h = TU_NEW(td_f16, n);
    td_f16_from_float_n(h, f, n);
    return h;
}

static float *f16_as_f32(const td_f16 *h, size_t n) {
    float *f = TU_NEW(float, n);
    td_f16_to_float_n(f, h, n);
    return f;
}

static float *out_f32(const void *p, td_ktype t, size_t n) {
    return t == TD_K_F32 ? (float *)p : f16_as_f32(p, n);
}

/* fast vs ref on one shape: forward with and without bias, backward adding
 * into nonzero dinp/dw/dbias, for each output type. */
static void matmul_case(int N, int C, int OC, td_ktype t) {
    int mark = tu_mark();
    const char *tn = t == TD_K_F16 ? "f16" : "f32";
    double tol = t == TD_K_F16 ? TOL_F16 : TOL_F32;
    size_t ts = t == TD_K_F16 ? 2 : 4;
    td_f16 *inp = rand_f16((size_t)N * C, 1, 1.0f), *w = rand_f16((size_t)OC * C, 2, 0.05f);
    td_f16 *dout = rand_f16((size_t)N * OC, 3, 1.0f);
    float *bias = TU_NEW(float, OC);
    tu_randn(bias, OC, 4, 0.1f);
    char name[128];
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        void *o = tu_alloc((size_t)N * OC * ts), *r = tu_alloc((size_t)N * OC * ts);
        td_matmul_f16_forward(o, t, inp, w, with_bias ? bias : NULL, N, C, OC);
        td_matmul_f16_forward_ref(r, t, inp, w, with_bias ? bias : NULL, N, C, OC);
        snprintf(name, sizeof name, "matmul_f16 fwd %dx%dx%d ->%s%s", N, C, OC, tn,
                 with_bias ? " +bias" : "");
        tu_check_close_f(name, out_f32(o, t, (size_t)N * OC), out_f32(r, t, (size_t)N * OC),
                         (size_t)N * OC, tol, FLOOR);
    }
    void *di = tu_alloc((size_t)N * C * ts), *dir = tu_alloc((size_t)N * C * ts);
    float *dw = TU_NEW(float, (size_t)OC * C), *db = TU_NEW(float, OC);
    tu_randn(dw, (size_t)OC * C, 5, 1.0f);
    tu_randn(db, OC, 6, 1.0f);
    if (t == TD_K_F32)
        tu_randn(di, (size_t)N * C, 7, 0.1f);
    else
        memcpy(di, rand_f16((size_t)N * C, 7, 0.1f), (size_t)N * C * 2);
    memcpy(dir, di, (size_t)N * C * ts);
    float *dwr = tu_copy(dw, (size_t)OC * C), *dbr = tu_copy(db, OC);
    td_matmul_f16_backward(di, t, dw, db, dout, inp, w, N, C, OC);
    td_matmul_f16_backward_ref(dir, t, dwr, dbr, dout, inp, w, N, C, OC);
    snprintf(name, sizeof name, "matmul_f16 bwd %dx%dx%d dinp(%s) +=", N, C, OC, tn);
    tu_check_close_f(name, out_f32(di, t, (size_t)N * C), out_f32(dir, t, (size_t)N * C),
                     (size_t)N * C, tol, FLOOR);
    snprintf(name, sizeof name, "matmul_f16 bwd %dx%dx%d dw(f32) +=", N, C, OC);
    tu_check_close_f(name, dw, dwr, (size_t)OC * C, TOL_F32, FLOOR);
    /* dbias: both sum the same fp32 values in double, rows in order, and
     * round once: equal up to the one float rounding of each side */
    snprintf(name, sizeof name, "matmul_f16 bwd %dx%dx%d dbias(f32) +=", N, C, OC);
    tu_check_close_f(name, db, dbr, OC, TOL_F32, FLOOR);
    tu_release(mark);
}

/* One model shape: fp32 OpenBLAS on the converted inputs as the oracle;
 * then 1 vs 2 threads bitwise. */
static void model_shape(int N, int C, int OC) {
    int mark = tu_mark();
    char name[128];
    td_f16 *inp = rand_f16((size_t)N * C, 11, 1.0f), *w = rand_f16((size_t)OC * C, 12, 0.05f);
    td_f16 *dout = rand_f16((size_t)N * OC, 13, 1.0f);
    float *fi = f16_as_f32(inp, (size_t)N * C), *fw = f16_as_f32(w, (size_t)OC * C);
    float *fd = f16_as_f32(dout, (size_t)N * OC);
    float *bias = TU_NEW(float, OC);
    tu_randn(bias, OC, 14, 0.1f);
    size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    /* per thread count: out f32 | out f16 | dinp f16 | dw f32 */
    float *res[2], *exp = TU_NEW(float, no), *edi = TU_NEW(float, ni), *edw = TU_NEW(float, nw);
    td_kernels_set_threads(2);
    td_matmul_forward(exp, fi, fw, bias, N, C, OC);
    td_matmul_backward(edi, edw, NULL, fd, fi, fw, N, C, OC);
    for (int nt = 1; nt <= 2; nt++) {
        td_kernels_set_threads(nt);
        float *r = res[nt - 1] = TU_NEW(float, no + no / 2 + ni / 2 + nw);
        td_f16 *oh = (td_f16 *)(r + no), *dih = oh + no;
        float *dw = r + no + no / 2 + ni / 2;
        td_matmul_f16_forward(r, TD_K_F32, inp, w, bias, N, C, OC);
        td_matmul_f16_forward(oh, TD_K_F16, inp, w, bias, N, C, OC);
        td_matmul_f16_backward(dih, TD_K_F16, dw, NULL, dout, inp, w, N, C, OC);
    }
    snprintf(name, sizeof name, "model %dx%dx%d fwd f32 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, res[0], exp, no, TOL_F32, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d fwd f16 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, f16_as_f32((td_f16 *)(res[0] + no), no), exp, no, TOL_F16, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d dinp f16 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, f16_as_f32((td_f16 *)(res[0] + no) + no, ni), edi, ni, TOL_F16, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d dw f32 vs OpenBLAS fp32", N, C, OC);
    tu_check_close_f(name, res[0] + no + no / 2 + ni / 2, edw, nw, TOL_F32, FLOOR);
    snprintf(name, sizeof name, "model %dx%dx%d all outputs: 2 threads vs 1", N, C, OC);
    tu_check_bitwise(name, res[1], res[0], no + no / 2 + ni / 2 + nw);
    td_kernels_set_threads(1);
    tu_release(mark);
}

/* fp16 output overflow: 16 products of 256 x 256 sum to 2^20 > 65504. */
static void overflow_case(void) {
    int mark = tu_mark();
    enum { N = 3, C = 16, OC = 5 };
    td_f16 *inp = TU_NEW(td_f16, N * C), *w = TU_NEW(td_f16, OC * C);
    for (int i = 0; i < N * C; i++) inp[i] = td_f16_from_float(i % 2 ? 256.0f : -256.0f);
    for (int i = 0; i < OC * C; i++) w[i] = td_f16_from_float(i % 2 ? 256.0f : -256.0f);
    td_f16 *oh = TU_NEW(td_f16, N * OC);
    float *of = TU_NEW(float, N * OC);
    td_matmul_f16_forward(oh, TD_K_F16, inp, w, NULL, N, C, OC);
    td_matmul_f16_forward(of, TD_K_F32, inp, w, NULL, N, C, OC);
    size_t bad = 0;
    for (int i = 0; i < N * OC; i++) {
        /* row n and column o share the sign pattern (C even): +2^20 */
        float f = td_f16_to_float(oh[i]);
        if (!(isinf(f) && f > 0) || of[i] != 1048576.0f) bad++;
    }
    verdict("matmul_f16 fwd overflow: f16 out inf, f32 out 2^20", bad, "");
    tu_release(mark);
}

/* The converting path's memory: from a released layer, the four kinds of
 * call at one shape leave exactly the planned conversion buffer
 * (td_matmul_f16_convert_bytes) plus oneDNN's scratchpad allocated, and
 * never more at any moment (no per-call allocations). */
static void convert_bytes_case(int N, int C, int OC) {
    int mark = tu_mark();
    td_f16 *inp = rand_f16((size_t)N * C, 51, 1.0f), *w = rand_f16((size_t)OC * C, 52, 0.05f);
    td_f16 *dout = rand_f16((size_t)N * OC, 53, 1.0f);
    td_f16 *oh = TU_NEW(td_f16, (size_t)N * OC), *dih = TU_NEW(td_f16, (size_t)N * C);
    float *of = TU_NEW(float, (size_t)N * OC), *dif = TU_NEW(float, (size_t)N * C);
    float *dw = TU_NEW(float, (size_t)OC * C), *db = TU_NEW(float, OC);
    size_t plan = td_matmul_f16_convert_bytes(N, C, OC);
    td_matmul_bf16_release();
    td_mem_reset_peaks();
    size_t base = td_mem_current(TD_MEM_OTHER);
    td_matmul_f16_forward(oh, TD_K_F16, inp, w, NULL, N, C, OC);
    size_t conv_fwd = td_matmul_convert_scratch_bytes();
    td_matmul_f16_forward(of, TD_K_F32, inp, w, NULL, N, C, OC);
    td_matmul_f16_backward(dih, TD_K_F16, dw, db, dout, inp, w, N, C, OC);
    td_matmul_f16_backward(dif, TD_K_F32, dw, db, dout, inp, w, N, C, OC);
    size_t conv = td_matmul_convert_scratch_bytes(), onednn = td_matmul_bf16_scratch_bytes();
    size_t held = td_mem_current(TD_MEM_OTHER) - base, peak = td_mem_peak(TD_MEM_OTHER) - base;
    /* where oneDNN had an fp16 matmul nothing would be converted */
    size_t want = td_f16_native() ? 0 : plan;
    int ok = conv_fwd == want && conv == want && held == conv + onednn && peak == held;
    char name[96];
    snprintf(name, sizeof name, "f16 convert buffer %dx%dx%d = plan %zu", N, C, OC, plan);
    tu_checks++;
    if (!ok) tu_failures++;
    printf("%s  %-52s after fwd %zu, all 4 %zu; held %zu = +oneDNN %zu; peak %zu\n",
           ok ? "PASS" : "FAIL", name, conv_fwd, conv, held, onednn, peak);
    tu_release(mark);
}

static void print_line(const char *line, void *ctx) { printf("      %s\n", line); }

int main(void) {
    td_kernels_set_threads(1);
    test_conversions();
    printf("      oneDNN fp16 matmul here: %s\n", td_f16_native() ? "native" : "none (converted)");
    const int shapes[][3] = {{4, 8, 16}, {37, 61, 29}, {64, 384, 80}, {96, 128, 384}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 2; t++)
            matmul_case(shapes[i][0], shapes[i][1], shapes[i][2], t ? TD_K_F16 : TD_K_F32);
    overflow_case();
    convert_bytes_case(37, 61, 29);
    convert_bytes_case(512, 384, 1536);
    /* L6 H6 C384 T256 batch 8, the fc projection (the longest sums, the
     * largest dinp): the converting path is the fp32 primitive between
     * elementwise conversions; one model shape keeps the test short */
    const int model[][3] = {{2048, 1536, 384}};
    for (size_t i = 0; i < sizeof model / sizeof model[0]; i++)
        model_shape(model[i][0], model[i][1], model[i][2]);
    printf("      primitives created:\n");
    td_matmul_bf16_describe(print_line, NULL);
    td_matmul_bf16_release();
    return tu_finish("test_kernels_f16");
}
