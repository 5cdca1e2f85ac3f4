/* Rotary position embeddings (rope.h, src/kernels/rope.c).
 *
 * Oracles, in order of authority:
 *  1. hand-derived inv_freq tables, and double-precision computations written
 *     here: theta^(-2i/hs) and Llama 3.1's scaling in double, the turn in
 *     double with the kernel's fp32 angles (the angle is part of the
 *     definition HF fixes: fp32(pos) * inv_freq rounded to fp32), and
 *     central finite differences of that double forward for the backward;
 *  2. invariants that need no reference: each pair keeps its norm, the
 *     backward undoes the forward, columns outside the heads are untouched;
 *  3. the _ref loops (bitwise), the 1-thread results (bitwise), one call
 *     over the whole sequence for context parallelism's chunks (bitwise),
 *     and the fp32 kernel for the 16-bit ones (one rounding).
 *
 * Error model (u = 2^-24, fp32's unit roundoff). Every fp32 check is per
 * PAIR (x[i], x[i + hs/2]), of norm r (the input pair's), and bounds the
 * 2-norm of the pair's error by K u r:
 *  - glibc's cosf/sinf are within 1 ulp of cos/sin of their fp32 argument
 *    (glibc manual, "Known Maximum Errors": 1 ulp on x86_64; the current
 *    implementations measure < 0.6). |cos| <= 1 has ulp <= 2^-24, so
 *    |dc|, |ds| <= u: the pair moves by |[[dc,-ds],[ds,dc]] x| =
 *    sqrt(dc^2 + ds^2) r <= sqrt2 u r.
 *  - the two products of each component: u (|x1 c| + |x2 s|); as a pair,
 *    u sqrt(r^2 + 4|x1 x2 c s|) <= sqrt2 u r (|x1 x2| <= r^2/2, |cs| <= 1/2).
 *  - the sum of each component: u |out|, u r as a pair.
 *  TOL_TURN = 4 (>= 2 sqrt2 + 1 = 3.83): forward or backward vs the
 *   double turn with the same fp32 angles; also bounds | |out| - r | (the
 *   norm check, which needs no reference).
 *  TOL_ROUNDTRIP = 8: backward(forward(x)) vs x. With the computed c~, s~,
 *   R~^T R~ = (c~^2 + s~^2) I and |c~^2 + s~^2 - 1| <= 2 sqrt2 u (+u^2);
 *   the two passes' roundings (products and sum, no trig error) add
 *   (sqrt2 + 1) u r each: 2.83 + 2 x 2.41 = 7.66.
 *  Exact (0 x u) where rows, threads or the table must not matter.
 * A wrong position moves the high-frequency pairs (inv_freq[0] = 1 rad per
 * position) by ~r, a swapped sign or half by O(r): far outside these. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"
#include "trident/rope.h"

#define U32 (1.0 / 16777216.0) /* 2^-24 */
#define TOL_TURN 4.0
#define TOL_ROUNDTRIP 8.0

/* A buffer of B*T rows of `stride` floats, heads at col + h*hs. */
typedef struct {
    int B, T, stride, col, heads, hs;
} lay;

static size_t lay_n(lay L) { return (size_t)L.B * L.T * L.stride; }

/* Offset of element j of head h in row n. */
static size_t at(lay L, long n, int h, int j) {
    return (size_t)n * L.stride + L.col + (size_t)h * L.hs + j;
}

/* ang[t * half + i]: the kernel's fp32 angle, as a double. */
static double *fp32_angles(const int *pos, const float *inv, int T, int hs) {
    int half = hs / 2;
    double *a = TU_NEW(double, (size_t)T *half);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) a[(size_t)t * half + i] = (double)((float)pos[t] * inv[i]);
    return a;
}

/* y = x with every head turned by +angle (fwd) or -angle (bwd), in double. */
static void dref_turn(double *y, const double *x, lay L, const double *ang, int backward) {
    int half = L.hs / 2;
    memcpy(y, x, lay_n(L) * sizeof(double));
    for (long n = 0; n < (long)L.B * L.T; n++)
        for (int h = 0; h < L.heads; h++)
            for (int i = 0; i < half; i++) {
                double a = ang[(size_t)(n % L.T) * half + i], c = cos(a), s = sin(a);
                if (backward) s = -s;
                size_t i1 = at(L, n, h, i), i2 = at(L, n, h, i + half);
                y[i1] = x[i1] * c - x[i2] * s;
                y[i2] = x[i2] * c + x[i1] * s;
            }
}

/* Max over the pairs of |got - exp| / (u r), r the pair norm of x; fails
 * above k. A zero pair must come out exactly. */
static double pair_err(const float *got, const double *exp, const float *x, lay L) {
    int half = L.hs / 2;
    double worst = 0.0;
    for (long n = 0; n < (long)L.B * L.T; n++)
        for (int h = 0; h < L.heads; h++)
            for (int i = 0; i < half; i++) {
                size_t i1 = at(L, n, h, i), i2 = at(L, n, h, i + half);
                double d1 = got[i1] - exp[i1], d2 = got[i2] - exp[i2];
                double r = hypot((double)x[i1], (double)x[i2]), d = hypot(d1, d2);
                double e = r > 0 ? d / (U32 * r) : (d == 0 ? 0.0 : INFINITY);
                if (!(e <= worst)) worst = e;
            }
    return worst;
}

static void check_pairs(const char *name, const float *got, const double *exp, const float *x,
                        lay L, double k) {
    double e = pair_err(got, exp, x, L);
    TU_EXPECT(e <= k, "%s: pair error %.3f u r > %.1f u r", name, e, k);
    printf("%s  %-60s max %.3f u r (tol %.1f)\n", e <= k ? "PASS" : "FAIL", name, e, k);
}

/* Elements outside [col, col + heads*hs) of every row: unchanged, bitwise. */
static void check_outside(const char *name, const void *got, const void *orig, lay L, size_t es) {
    size_t diff = 0;
    for (long n = 0; n < (long)L.B * L.T; n++)
        for (int j = 0; j < L.stride; j++) {
            if (j >= L.col && j < L.col + L.heads * L.hs) continue;
            size_t o = ((size_t)n * L.stride + j) * es;
            diff += memcmp((const char *)got + o, (const char *)orig + o, es) != 0;
        }
    TU_EXPECT(diff == 0, "%s: %zu elements outside the heads changed", name, diff);
    printf("%s  %-60s %zu changed\n", diff ? "FAIL" : "PASS", name, diff);
}

static void check_bits(const char *name, const void *a, const void *b, size_t bytes) {
    int same = memcmp(a, b, bytes) == 0;
    TU_EXPECT(same, "%s: differs bitwise", name);
    printf("%s  %-60s %zu bytes bitwise %s\n", same ? "PASS" : "FAIL", name, bytes,
           same ? "equal" : "DIFFERENT");
}

/* ---- inv_freq ------------------------------------------------------------ */

static void test_inv_freq(void) {
    int mark = tu_mark();
    /* Hand-derived: exponents 2i/hs exact in fp32 and theta^e exact, so the
     * table is the fp32 reciprocal of an exact integer. hs 8, theta 10000:
     * 10000^{0, 1/4, 1/2, 3/4} = 1, 10, 100, 1000. hs 4, theta 16: 1, 4. */
    float t8[4], t4[2];
    const float e8[4] = {1.0f, 1.0f / 10.0f, 1.0f / 100.0f, 1.0f / 1000.0f}, e4[2] = {1.0f, 0.25f};
    td_rope_inv_freq(t8, 10000.0, 8);
    td_rope_inv_freq(t4, 16.0, 4);
    check_bits("inv_freq hs 8 theta 1e4 = 1/{1,10,100,1000}", t8, e8, sizeof t8);
    check_bits("inv_freq hs 4 theta 16 = {1, 1/4}", t4, e4, sizeof t4);

    /* Against theta^(-2i/hs) in double. fp32 steps: e = fp32(2i) / fp32(hs)
     * is off by <= u e <= u, which scales theta^e by exp(ln(theta) u):
     * ln 5e5 = 13.1 u relative; theta^e, taken in double and rounded once,
     * adds u; the reciprocal u: <= 15.1 u -> bound 16 u relative. */
    const double thetas[2] = {10000.0, 500000.0};
    for (int k = 0; k < 2; k++) {
        int hs = 128, half = hs / 2;
        float *inv = TU_NEW(float, half);
        td_rope_inv_freq(inv, thetas[k], hs);
        double worst = 0;
        for (int i = 0; i < half; i++) {
            double d = pow(thetas[k], -2.0 * i / hs);
            worst = fmax(worst, fabs(inv[i] - d) / (d * U32));
        }
        char name[96];
        snprintf(name, sizeof name, "inv_freq hs 128 theta %g vs double", thetas[k]);
        TU_EXPECT(worst <= 16.0, "%s: %.2f u > 16 u", name, worst);
        printf("%s  %-60s max %.2f u relative (tol 16)\n", worst <= 16.0 ? "PASS" : "FAIL", name,
               worst);
    }
    tu_release(mark);
}

/* Llama 3.1's scaling, computed here in double from its definition. */
static double dref_llama3(double inv, double factor, double low, double high, double orig) {
    double low_wl = orig / low, high_wl = orig / high, wl = 2.0 * M_PI / inv;
    if (wl < high_wl) return inv;
    if (wl > low_wl) return inv / factor;
    double smooth = (orig / wl - low) / (high - low);
    return (1.0 - smooth) * inv / factor + smooth * inv;
}

/* Llama 3.1's table as PyTorch computes it with HF's code (fp32, CPU):
 * tests/unit/rope_hf_table.py's output (torch 1.13). The fp32 steps of
 * rope.h reproduce it bit for bit; an importer can rely on that. (cos/sin
 * of the angles then differ from torch's SLEEF by at most 1 ulp; measured
 * at positions 0, 1, 8191, 131071: 15 of 512 entries.) */
static const uint32_t HF_LLAMA31_INV_FREQ[64] = {
    0x3f800000u, 0x3f508ac1u, 0x3f29e1c6u, 0x3f0a6384u, 0x3ee177bcu, 0x3eb7ab7du, 0x3e959ee3u,
    0x3e73c461u, 0x3e4693b0u, 0x3e21c3a0u, 0x3e03c6a0u, 0x3dd6b19cu, 0x3daee4adu, 0x3d8e7898u,
    0x3d681e67u, 0x3d3d1684u, 0x3d1a08c8u, 0x3cfaf53fu, 0x3ccc6f49u, 0x3ca68939u, 0x3c87a9c3u,
    0x3c5d06ecu, 0x3c340d6du, 0x3c12ac7fu, 0x3beef74fu, 0x3bc2aa76u, 0x3b9e9402u, 0x3b812e35u,
    0x3b527720u, 0x3b0dfd06u, 0x3ab3d11du, 0x3a60979eu, 0x3a0995d2u, 0x39a3f108u, 0x393b2dd2u,
    0x38c86886u, 0x38a3418du, 0x3884fdbfu, 0x3858ac81u, 0x38308199u, 0x380fc8f8u, 0x37ea426fu,
    0x37bed4f4u, 0x379b7475u, 0x377d45c3u, 0x374e51f5u, 0x3728126bu, 0x3708ea0fu, 0x36df10c4u,
    0x36b5b687u, 0x369406cbu, 0x36712b80u, 0x36447610u, 0x36200a69u, 0x36025f34u, 0x35d46808u,
    0x35ad07a7u, 0x358cf400u, 0x3565a54du, 0x353b12c7u, 0x351864a7u, 0x34f848c2u, 0x34ca41b0u,
    0x34a4c2ffu,
};

static void test_llama3(void) {
    int mark = tu_mark();
    const int hs = 128, half = hs / 2;
    const double theta = 500000.0, factor = 8, low = 1, high = 4, orig = 8192;
    float *inv = TU_NEW(float, half);
    td_rope_inv_freq(inv, theta, hs);
    float *base = tu_copy(inv, half);
    td_rope_llama3_scale(inv, hs, factor, low, high, orig);
    /* Bound, relative, for the blended entries (the others are the base
     * table's, 16 u, or it / 8, exactly). wavelen = fl(fl(1/inv) fl(2pi)):
     * 16 u (inv) + u + 0.47 u (fl(2pi)) + u = 18.5 u; orig / wavelen as
     * fl(fl(1/wavelen) orig): 20.5 u of a value in [1, 4], <= 82 u
     * absolute; - 1 (<= 3 u: result <= 3), / 3 and its rounding (u):
     * smooth off by <= 85/3 + 1 = 29.3 u. inv' = inv g(s), g = (1 - s)/8 +
     * s in [1/8, 1], g' = 7/8: 7/8 x 29.3 u / (1/8) = 205 u relative, plus
     * inv's 16 u and the final expression's roundings (4, on positive
     * terms: <= 3 u): 224 u. A wrong branch, a missing /factor or swapped
     * (1 - s) and s is off by >= 10% (1.7e6 u) for some entry. Also checks
     * each entry's branch. */
    double worst = 0;
    int kept = 0, divided = 0, blended = 0, wrong_branch = 0;
    for (int i = 0; i < half; i++) {
        double d = pow(theta, -2.0 * i / hs), e = dref_llama3(d, factor, low, high, orig);
        worst = fmax(worst, fabs(inv[i] - e) / (e * U32));
        double wl = 2.0 * M_PI / d;
        if (wl < orig / high)
            kept++, wrong_branch += inv[i] != base[i];
        else if (wl > orig / low)
            divided++, wrong_branch += inv[i] != base[i] / 8.0f;
        else
            blended++;
    }
    TU_EXPECT(worst <= 224.0, "llama3 scaling: %.1f u > 224 u", worst);
    printf("%s  %-60s max %.2f u relative (tol 224)\n", worst <= 224.0 ? "PASS" : "FAIL",
           "llama3 scaling (8, 1, 4, 8192; 5e5, 128) vs double", worst);
    /* Llama 3.1's table: i <= 28 kept (wavelen < 2048), 29..34 blended,
     * >= 35 divided (wavelen = 2 pi 5e5^(i/64), 2048 at i = 28.2, 8192 at
     * i = 35.0); kept and divided entries are the base table bit for bit
     * (and / 8, exact for a power of two). */
    TU_EXPECT(kept == 29 && blended == 6 && divided == 29 && wrong_branch == 0,
              "llama3 branches: kept %d blended %d divided %d, %d entries not base or base/8", kept,
              blended, divided, wrong_branch);
    printf("%s  %-60s kept %d, blended %d, divided %d\n",
           kept == 29 && blended == 6 && divided == 29 && !wrong_branch ? "PASS" : "FAIL",
           "llama3 branches: 29 kept, 6 blended, 29 divided, exact", kept, blended, divided);
    check_bits("llama3.1 table = torch's (HF's code), bitwise", inv, HF_LLAMA31_INV_FREQ,
               sizeof HF_LLAMA31_INV_FREQ);
    tu_release(mark);
}

/* ---- the fp32 turn --------------------------------------------------------- */

/* Fused qkv with grouped-query attention: q NH heads at 0, k NKV heads at
 * C, v NKV heads at C + NKV*hs (never touched). Positions: the start of the
 * sequence, then rows near 131072, where angles reach 1.3e5 rad. */
static void test_fused_gqa(void) {
    int mark = tu_mark();
    const int B = 2, T = 48, NH = 4, NKV = 2, hs = 64, C = NH * hs, W = C + 2 * NKV * hs;
    lay Q = {B, T, W, 0, NH, hs}, K = {B, T, W, C, NKV, hs};
    lay QK = {B, T, W, 0, NH + NKV, hs}; /* q and k are adjacent: both at once */
    size_t n = lay_n(Q);
    int *pos = TU_NEW(int, T);
    for (int t = 0; t < T; t++) pos[t] = t < T / 2 ? t : 131072 - T + t;
    float *inv = TU_NEW(float, hs / 2), *cs = TU_NEW(float, (size_t)T *hs);
    td_rope_inv_freq(inv, 10000.0, hs);
    td_rope_table(cs, pos, inv, T, hs);
    double *ang = fp32_angles(pos, inv, T, hs);

    float *x = TU_NEW(float, n), *g = TU_NEW(float, n);
    tu_randn(x, n, 1, 1.0f);
    tu_randn(g, n, 2, 1.0f);
    double *xd = tu_to_double(x, n), *gd = tu_to_double(g, n), *y = TU_NEW(double, n);

    /* forward: q and k calls, against the double turn of both */
    float *xf = tu_copy(x, n);
    td_rope_forward(xf, cs, B, T, W, 0, NH, hs);
    td_rope_forward(xf, cs, B, T, W, C, NKV, hs);
    dref_turn(y, xd, QK, ang, 0);
    check_pairs("fwd q (NH 4 at 0) vs double, same fp32 angles", xf, y, x, Q, TOL_TURN);
    check_pairs("fwd k (NKV 2 at C) vs double, same fp32 angles", xf, y, x, K, TOL_TURN);
    check_outside("fwd q,k: v columns untouched", xf, x, QK, sizeof(float));

    /* the norm of each pair, without any reference */
    double *xn = tu_to_double(x, n); /* |out| per pair as the "expected" r */
    {
        double worst = 0;
        for (long r = 0; r < (long)B * T; r++)
            for (int h = 0; h < NH + NKV; h++)
                for (int i = 0; i < hs / 2; i++) {
                    size_t i1 = at(QK, r, h, i), i2 = at(QK, r, h, i + hs / 2);
                    double r0 = hypot(xn[i1], xn[i2]), r1 = hypot(xf[i1], xf[i2]);
                    worst = fmax(worst, fabs(r1 - r0) / (U32 * r0));
                }
        TU_EXPECT(worst <= TOL_TURN, "pair norms: %.3f u > %.1f u", worst, TOL_TURN);
        printf("%s  %-60s max %.3f u r (tol %.1f)\n", worst <= TOL_TURN ? "PASS" : "FAIL",
               "fwd keeps each pair's norm", worst, TOL_TURN);
    }

    /* fast vs _ref, bitwise: same fp32 operations per element */
    float *xr = tu_copy(x, n);
    td_rope_forward_ref(xr, pos, inv, B, T, W, 0, NH, hs);
    td_rope_forward_ref(xr, pos, inv, B, T, W, C, NKV, hs);
    check_bits("fwd table+fast vs _ref", xf, xr, n * sizeof(float));

    /* q and k in one call (adjacent) = two calls */
    float *x2 = tu_copy(x, n);
    td_rope_forward(x2, cs, B, T, W, 0, NH + NKV, hs);
    check_bits("fwd q+k in one call vs two calls", x2, xf, n * sizeof(float));

    /* backward of forward: identity */
    td_rope_backward(xf, cs, B, T, W, 0, NH, hs);
    td_rope_backward(xf, cs, B, T, W, C, NKV, hs);
    check_pairs("bwd(fwd(x)) = x", xf, xd, x, QK, TOL_ROUNDTRIP);
    check_outside("bwd(fwd(x)): v columns untouched", xf, x, QK, sizeof(float));

    /* backward alone vs the double transpose, and vs _ref */
    float *gf = tu_copy(g, n), *gr = tu_copy(g, n);
    td_rope_backward(gf, cs, B, T, W, 0, NH + NKV, hs);
    dref_turn(y, gd, QK, ang, 1);
    check_pairs("bwd dq,dk vs double turn by -angle", gf, y, g, QK, TOL_TURN);
    td_rope_backward_ref(gr, pos, inv, B, T, W, 0, NH, hs);
    td_rope_backward_ref(gr, pos, inv, B, T, W, C, NKV, hs);
    check_bits("bwd table+fast vs _ref", gf, gr, n * sizeof(float));
    tu_release(mark);
}

/* Backward vs central finite differences of the double forward (which has
 * the kernel's fp32 angles): objective f(x) = sum(fwd(x) * g). f is linear,
 * so the differences are exact but for double rounding: |f| <~ 1e2 here,
 * h = 1e-3, 1e-16 x 1e2 / 1e-3 ~ 1e-11 absolute, 1e-4 u, nothing beside
 * TOL_TURN. Every element of every row is perturbed, outside the heads too
 * (their gradient is g itself, untouched by the backward). */
struct fd_ctx {
    lay L;
    const double *ang, *g;
    double *x, *y;
};
static double fd_obj(struct fd_ctx *c) {
    dref_turn(c->y, c->x, c->L, c->ang, 0);
    double s = 0;
    for (size_t i = 0; i < lay_n(c->L); i++) s += c->y[i] * c->g[i];
    return s;
}

static void test_fd(void) {
    int mark = tu_mark();
    lay L = {2, 3, 20, 2, 2, 8}; /* columns 2..17 turned, 0,1,18,19 not */
    const int pos[3] = {5, 1000, 70000};
    size_t n = lay_n(L);
    float *inv = TU_NEW(float, L.hs / 2), *cs = TU_NEW(float, (size_t)L.T *L.hs);
    td_rope_inv_freq(inv, 10000.0, L.hs);
    td_rope_table(cs, pos, inv, L.T, L.hs);
    float *x = TU_NEW(float, n), *g = TU_NEW(float, n);
    tu_randn(x, n, 3, 1.0f);
    tu_randn(g, n, 4, 1.0f);
    struct fd_ctx c = {L, fp32_angles(pos, inv, L.T, L.hs), tu_to_double(g, n), tu_to_double(x, n),
                       TU_NEW(double, n)};
    double *fd = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) {
        double x0 = c.x[i], h = 1e-3;
        c.x[i] = x0 + h;
        double fp = fd_obj(&c);
        c.x[i] = x0 - h;
        double fm = fd_obj(&c);
        c.x[i] = x0;
        fd[i] = (fp - fm) / (2 * h);
    }
    float *gb = tu_copy(g, n);
    td_rope_backward(gb, cs, L.B, L.T, L.stride, L.col, L.heads, L.hs);
    check_pairs("bwd vs finite differences of the double fwd", gb, fd, g, L, TOL_TURN);
    /* outside the heads the gradient is g: FD must agree to its 1e-11 */
    double worst = 0;
    for (long r = 0; r < (long)L.B * L.T; r++)
        for (int j = 0; j < L.stride; j++)
            if (j < L.col || j >= L.col + L.heads * L.hs) {
                size_t i = (size_t)r * L.stride + j;
                worst = fmax(worst, fabs(gb[i] - fd[i]));
            }
    TU_EXPECT(worst <= 1e-9, "FD outside heads: %.2e", worst);
    printf("%s  %-60s max %.2e (tol 1e-9)\n", worst <= 1e-9 ? "PASS" : "FAIL",
           "bwd outside the heads = g = FD", worst);
    tu_release(mark);
}

/* Llama 3.1 heads (hs 128, theta 5e5, llama3 scaling) up to position
 * 131071: the fp32-angle check as above, and the distance to a turn by
 * fully double angles pos * inv_d (inv_d the double llama3 table). That
 * one is information about fp32 angles, HF's and ours alike; it is
 * checked only against its own derived bound r (|d angle| + TOL_TURN u),
 * d angle = double angle - the kernel's fp32 angle, per element (a turn
 * by a + d moves a pair by <= r |d|). */
static void test_llama31_positions(void) {
    int mark = tu_mark();
    const int hs = 128, half = hs / 2, T = 64, B = 1, heads = 2;
    lay L = {B, T, heads * hs, 0, heads, hs};
    size_t n = lay_n(L);
    int *pos = TU_NEW(int, T);
    for (int t = 0; t < T; t++) pos[t] = t < 8 ? t : t < 16 ? 8192 + t : 131072 - T + t;
    float *inv = TU_NEW(float, half), *cs = TU_NEW(float, (size_t)T *hs);
    td_rope_inv_freq(inv, 500000.0, hs);
    td_rope_llama3_scale(inv, hs, 8, 1, 4, 8192);
    td_rope_table(cs, pos, inv, T, hs);
    float *x = TU_NEW(float, n);
    tu_randn(x, n, 5, 1.0f);
    double *xd = tu_to_double(x, n), *y = TU_NEW(double, n), *yd = TU_NEW(double, n);
    float *xf = tu_copy(x, n);
    td_rope_forward(xf, cs, B, T, L.stride, 0, heads, hs);
    double *ang = fp32_angles(pos, inv, T, hs), *angd = TU_NEW(double, (size_t)T *half);
    double max_dang = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double d = dref_llama3(pow(500000.0, -2.0 * i / hs), 8, 1, 4, 8192);
            angd[(size_t)t * half + i] = pos[t] * d;
            max_dang = fmax(max_dang, fabs(angd[(size_t)t * half + i] - ang[(size_t)t * half + i]));
        }
    dref_turn(y, xd, L, ang, 0);
    check_pairs("llama3.1 fwd to pos 131071 vs double, same fp32 angles", xf, y, x, L, TOL_TURN);
    dref_turn(yd, xd, L, angd, 0);
    /* per pair: |got - yd| <= r (|d angle| + 4 u) */
    double worst_info = 0, worst_ratio = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                size_t i1 = at(L, t, h, i), i2 = at(L, t, h, i + half);
                double r = hypot(xd[i1], xd[i2]);
                double d = hypot(xf[i1] - yd[i1], xf[i2] - yd[i2]);
                double da = fabs(angd[(size_t)t * half + i] - ang[(size_t)t * half + i]);
                worst_info = fmax(worst_info, d / r);
                worst_ratio = fmax(worst_ratio, d / (r * (da + TOL_TURN * U32)));
            }
    TU_EXPECT(worst_ratio <= 1.0, "vs double angles: %.3f of the bound", worst_ratio);
    printf("%s  %-60s %.6f of r(|da| + 4u)\n", worst_ratio <= 1.0 ? "PASS" : "FAIL",
           "llama3.1 fwd vs fully double angles, within r |d angle|", worst_ratio);
    printf("INFO  fp32 vs double angles to pos 131071: max |d angle| %.3e rad, "
           "max |out - out_double| / r %.3e\n",
           max_dang, worst_info);
    tu_release(mark);
}

/* Context parallelism's layout: a sequence of 4 chunks over 2 ranks, rank
 * r holding chunks r and 3 - r (rows of two distant position ranges). Each
 * rank's local buffer turned with its own positions must equal, bitwise,
 * its rows of the whole sequence turned in one call (position 100000 on:
 * large angles). */
static void test_cp_split(void) {
    int mark = tu_mark();
    const int B = 2, ch = 16, N = 2, Tg = 2 * N * ch, hs = 64, W = 3 * 2 * hs;
    const int p0 = 100000;
    float *inv = TU_NEW(float, hs / 2);
    td_rope_inv_freq(inv, 500000.0, hs);
    int *gpos = TU_NEW(int, Tg);
    for (int t = 0; t < Tg; t++) gpos[t] = p0 + t;
    float *csg = TU_NEW(float, (size_t)Tg *hs);
    td_rope_table(csg, gpos, inv, Tg, hs);
    size_t ng = (size_t)B * Tg * W;
    float *xg = TU_NEW(float, ng);
    tu_randn(xg, ng, 6, 1.0f);
    float *x0 = tu_copy(xg, ng);
    td_rope_forward(xg, csg, B, Tg, W, 0, 2, hs);
    td_rope_forward(xg, csg, B, Tg, W, 2 * hs, 1, hs);
    int ok = 1;
    for (int r = 0; r < N; r++) {
        int Tl = 2 * ch, *pos = TU_NEW(int, Tl);
        float *xl = TU_NEW(float, (size_t)B *Tl *W), *csl = TU_NEW(float, (size_t)Tl *hs);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                int chunk = t < ch ? r : 2 * N - 1 - r, gt = chunk * ch + t % ch;
                pos[t] = p0 + gt;
                memcpy(xl + ((size_t)b * Tl + t) * W, x0 + ((size_t)b * Tg + gt) * W,
                       W * sizeof(float));
            }
        td_rope_table(csl, pos, inv, Tl, hs);
        td_rope_forward(xl, csl, B, Tl, W, 0, 2, hs);
        td_rope_forward(xl, csl, B, Tl, W, 2 * hs, 1, hs);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++) {
                int chunk = t < ch ? r : 2 * N - 1 - r, gt = chunk * ch + t % ch;
                ok &= !memcmp(xl + ((size_t)b * Tl + t) * W, xg + ((size_t)b * Tg + gt) * W,
                              W * sizeof(float));
            }
    }
    TU_EXPECT(ok, "cp split differs from the whole sequence");
    printf("%s  %-60s\n", ok ? "PASS" : "FAIL",
           "cp 2: chunks {r, 3-r} with own positions = whole, bitwise");
    /* and the positions do matter: the same local rows with contiguous
     * positions 0.. give something else (the check above can fail) */
    float *xc = tu_copy(x0, ng), *csc = TU_NEW(float, (size_t)Tg *hs);
    int *cpos = TU_NEW(int, Tg);
    for (int t = 0; t < Tg; t++) cpos[t] = t;
    td_rope_table(csc, cpos, inv, Tg, hs);
    td_rope_forward(xc, csc, B, Tg, W, 0, 2, hs);
    int differs = memcmp(xc, xg, ng * sizeof(float)) != 0;
    TU_EXPECT(differs, "positions 0.. gave the same as 100000..");
    printf("%s  %-60s\n", differs ? "PASS" : "FAIL", "positions change the result (control)");
    tu_release(mark);
}

/* ---- 16-bit ----------------------------------------------------------------- */

/* The 16-bit kernels against the fp32 kernel on the same 16-bit-valued
 * inputs: the result must be exactly the rounding of the fp32 result
 * (bitwise: both kernels compute the same fp32 values; the 16-bit one
 * rounds once), hence within one rounding of it: |got - exp| <= u16 |exp|
 * (u16 = 2^-8 bf16, 2^-11 fp16; half an ulp relative, normal range) or,
 * for fp16 results below 2^-14 (subnormal: spacing 2^-24), <= 2^-25. */
typedef struct {
    const char *name;
    size_t size;
    void (*from)(void *, const float *, size_t);
    void (*to)(float *, const void *, size_t);
    void (*fwd)(void *, const float *, int, int, int, int, int, int);
    void (*bwd)(void *, const float *, int, int, int, int, int, int);
    double u, sub_abs;
} lp;

static void bf_from(void *d, const float *s, size_t n) { td_bf16_from_float_n(d, s, n); }
static void bf_to(float *d, const void *s, size_t n) { td_bf16_to_float_n(d, s, n); }
static void h_from(void *d, const float *s, size_t n) { td_f16_from_float_n(d, s, n); }
static void h_to(float *d, const void *s, size_t n) { td_f16_to_float_n(d, s, n); }
static void bf_fwd(void *x, const float *cs, int B, int T, int W, int col, int H, int hs) {
    td_rope_bf16_forward(x, cs, B, T, W, col, H, hs);
}
static void bf_bwd(void *x, const float *cs, int B, int T, int W, int col, int H, int hs) {
    td_rope_bf16_backward(x, cs, B, T, W, col, H, hs);
}
static void h_fwd(void *x, const float *cs, int B, int T, int W, int col, int H, int hs) {
    td_rope_f16_forward(x, cs, B, T, W, col, H, hs);
}
static void h_bwd(void *x, const float *cs, int B, int T, int W, int col, int H, int hs) {
    td_rope_f16_backward(x, cs, B, T, W, col, H, hs);
}
static const lp LP_BF16 = {"bf16", 2, bf_from, bf_to, bf_fwd, bf_bwd, 1.0 / 256, 0.0};
static const lp LP_F16 = {"fp16", 2, h_from, h_to, h_fwd, h_bwd, 1.0 / 2048, 1.0 / 33554432};

static void check_lp(const lp *t, const char *what, const void *got, const float *exp, size_t n) {
    float *g = TU_NEW(float, n);
    void *r = tu_alloc(n * t->size);
    t->to(g, got, n);
    t->from(r, exp, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - exp[i]), b = fmax(t->u * fabs(exp[i]), t->sub_abs);
        double e = b > 0 ? d / b : (d == 0 ? 0 : INFINITY);
        if (!(e <= worst)) worst = e;
    }
    char name[128];
    snprintf(name, sizeof name, "%s %s vs fp32, one rounding", t->name, what);
    TU_EXPECT(worst <= 1.0, "%s: %.3f of the bound", name, worst);
    printf("%s  %-60s max %.3f of u|exp| (tol 1)\n", worst <= 1.0 ? "PASS" : "FAIL", name, worst);
    snprintf(name, sizeof name, "%s %s = rounding of the fp32 result", t->name, what);
    check_bits(name, got, r, n * t->size);
}

/* hs 64 in the fused GQA layout, and hs 1040 (520 pairs: the kernel's
 * 256-pair pieces, the last partial) */
static void test_lowp(const lp *t) {
    int mark = tu_mark();
    struct {
        int B, T, NH, NKV, hs;
    } shapes[2] = {{2, 24, 4, 2, 64}, {1, 3, 1, 1, 1040}};
    for (int k = 0; k < 2; k++) {
        int B = shapes[k].B, T = shapes[k].T, NH = shapes[k].NH, NKV = shapes[k].NKV;
        int hs = shapes[k].hs, C = NH * hs, W = C + 2 * NKV * hs;
        lay QK = {B, T, W, 0, NH + NKV, hs};
        size_t n = lay_n(QK);
        int *pos = TU_NEW(int, T);
        for (int i = 0; i < T; i++) pos[i] = i % 2 ? 131000 + i : i;
        float *inv = TU_NEW(float, hs / 2), *cs = TU_NEW(float, (size_t)T *hs);
        td_rope_inv_freq(inv, 500000.0, hs);
        td_rope_table(cs, pos, inv, T, hs);
        /* 16-bit inputs and their exact fp32 values; g scaled small, as
         * loss-scaled fp16 gradients can be, to reach fp16's subnormals */
        float *xf = TU_NEW(float, n), *gf = TU_NEW(float, n);
        void *x = tu_alloc(n * t->size), *g = tu_alloc(n * t->size);
        tu_randn(xf, n, 7, 1.0f);
        tu_randn(gf, n, 8, t->sub_abs > 0 ? 1e-4f : 1.0f);
        t->from(x, xf, n), t->to(xf, x, n);
        t->from(g, gf, n), t->to(gf, g, n);
        void *x0 = tu_alloc(n * t->size), *g0 = tu_alloc(n * t->size);
        memcpy(x0, x, n * t->size), memcpy(g0, g, n * t->size);
        t->fwd(x, cs, B, T, W, 0, NH, hs);
        t->fwd(x, cs, B, T, W, C, NKV, hs);
        td_rope_forward(xf, cs, B, T, W, 0, NH + NKV, hs);
        t->bwd(g, cs, B, T, W, 0, NH, hs);
        t->bwd(g, cs, B, T, W, C, NKV, hs);
        td_rope_backward(gf, cs, B, T, W, 0, NH + NKV, hs);
        char what[64];
        snprintf(what, sizeof what, "fwd hs %d", hs);
        check_lp(t, what, x, xf, n);
        snprintf(what, sizeof what, "bwd hs %d", hs);
        check_lp(t, what, g, gf, n);
        char name[96];
        snprintf(name, sizeof name, "%s hs %d: v columns untouched (fwd, bwd)", t->name, hs);
        check_outside(name, x, x0, QK, t->size);
        check_outside(name, g, g0, QK, t->size);
    }
    tu_release(mark);
}

/* ---- threads --------------------------------------------------------------- */

/* Everything at a size that forks (>= 16384 elements per call), run with 1
 * and with 2 threads: all outputs bitwise equal. */
typedef struct {
    float *cs, *x, *g;
    td_bf16 *xb;
    td_f16 *xh;
} thr_out;

static thr_out thread_run(void) {
    const int B = 2, T = 256, NH = 8, NKV = 4, hs = 64, C = NH * hs, W = C + 2 * NKV * hs;
    size_t n = (size_t)B * T * W;
    thr_out o = {TU_NEW(float, (size_t)T *hs), TU_NEW(float, n), TU_NEW(float, n),
                 TU_NEW(td_bf16, n), TU_NEW(td_f16, n)};
    int *pos = TU_NEW(int, T);
    for (int t = 0; t < T; t++) pos[t] = (t * 7919) % 131072; /* scattered */
    float *inv = TU_NEW(float, hs / 2);
    td_rope_inv_freq(inv, 500000.0, hs);
    td_rope_llama3_scale(inv, hs, 8, 1, 4, 8192);
    td_rope_table(o.cs, pos, inv, T, hs);
    tu_randn(o.x, n, 9, 1.0f);
    tu_randn(o.g, n, 10, 1.0f);
    td_bf16_from_float_n(o.xb, o.x, n);
    td_f16_from_float_n(o.xh, o.x, n);
    td_rope_forward(o.x, o.cs, B, T, W, 0, NH, hs);
    td_rope_forward(o.x, o.cs, B, T, W, C, NKV, hs);
    td_rope_backward(o.g, o.cs, B, T, W, 0, NH + NKV, hs);
    td_rope_bf16_forward(o.xb, o.cs, B, T, W, 0, NH, hs);
    td_rope_bf16_backward(o.xb, o.cs, B, T, W, C, NKV, hs);
    td_rope_f16_forward(o.xh, o.cs, B, T, W, 0, NH + NKV, hs);
    td_rope_f16_backward(o.xh, o.cs, B, T, W, C, NKV, hs);
    return o;
}

static void test_threads(void) {
    int mark = tu_mark();
    const size_t n = (size_t)2 * 256 * (8 * 64 + 2 * 4 * 64), nc = (size_t)256 * 64;
    td_kernels_set_threads(1);
    thr_out a = thread_run();
    td_kernels_set_threads(2);
    thr_out b = thread_run();
    td_kernels_set_threads(1);
    check_bits("cos/sin table: 2 threads vs 1", b.cs, a.cs, nc * sizeof(float));
    check_bits("fp32 fwd: 2 threads vs 1", b.x, a.x, n * sizeof(float));
    check_bits("fp32 bwd: 2 threads vs 1", b.g, a.g, n * sizeof(float));
    check_bits("bf16 fwd+bwd: 2 threads vs 1", b.xb, a.xb, n * sizeof(td_bf16));
    check_bits("fp16 fwd+bwd: 2 threads vs 1", b.xh, a.xh, n * sizeof(td_f16));
    tu_release(mark);
}

int main(void) {
    test_inv_freq();
    test_llama3();
    test_fused_gqa();
    test_fd();
    test_llama31_positions();
    test_cp_split();
    test_lowp(&LP_BF16);
    test_lowp(&LP_F16);
    test_threads();
    return tu_finish("test_rope");
}
