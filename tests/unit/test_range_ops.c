/* The optimizer's range operations of the CPU backend's rows (backend.h's
 * sumsq, first_nonfinite, scale, add, adamw, adamw_given; range_ops.c).
 * Oracles:
 *  - the contracts written out here as plain loops in the same float
 *    operation order (torch.optim.AdamW's update, td_sumsq's blocks of 4096
 *    summed in sequence): bitwise, as the golden runs need;
 *  - double-precision AdamW: TOL_ADAM 1e-5 relative with an rms floor (a
 *    handful of roundings per element, ~1e-7; a wrong bias correction or
 *    decay is >= 1e-3 off);
 *  - the 1-thread result for 3 threads, bitwise;
 *  - every row (fp32, bf16, fp16) has the same entries.
 * Sizes straddle the 4096-element blocks and the OpenMP threshold (65536). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/backend.h"
#include "trident/kernels.h"

#define TOL_ADAM 1e-5
#define FLOOR 0.1

static const size_t SIZES[] = {1, 4095, 4097, 70001};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

static double sumsq_contract(const float *x, size_t n) {
    double total = 0.0;
    for (size_t s = 0; s < n; s += 4096) {
        double acc = 0.0;
        for (size_t i = s; i < n && i < s + 4096; i++) acc += (double)x[i] * x[i];
        total += acc;
    }
    return total;
}

static void check_double(const char *name, double got, double exp) {
    tu_checks++;
    int ok = memcmp(&got, &exp, sizeof got) == 0;
    if (!ok) tu_failures++;
    printf("%s  %-52s %.17g vs %.17g\n", ok ? "PASS" : "FAIL", name, got, exp);
}

static void check_int(const char *name, long long got, long long exp) {
    tu_checks++;
    if (got != exp) tu_failures++;
    printf("%s  %-52s %lld vs %lld\n", got == exp ? "PASS" : "FAIL", name, got, exp);
}

static void test_sumsq(const td_ops *o) {
    for (size_t k = 0; k < N_SIZES; k++) {
        size_t n = SIZES[k];
        float *x = TU_NEW(float, n);
        tu_randn(x, n, 1 + k, 3.0f);
        double got, got3;
        td_kernels_set_threads(1);
        o->sumsq(&got, x, n);
        td_kernels_set_threads(3);
        o->sumsq(&got3, x, n);
        char name[64];
        snprintf(name, sizeof name, "sumsq n=%zu vs blocks of 4096", n);
        check_double(name, got, sumsq_contract(x, n));
        snprintf(name, sizeof name, "sumsq n=%zu 3 threads vs 1", n);
        check_double(name, got3, got);
    }
    double z = -1.0;
    o->sumsq(&z, NULL, 0);
    check_double("sumsq n=0", z, 0.0);
}

static void test_first_nonfinite(const td_ops *o) {
    size_t n = 70001;
    float *x = TU_NEW(float, n);
    tu_randn(x, n, 7, 1.0f);
    int64_t got;
    o->first_nonfinite(&got, x, n);
    check_int("first_nonfinite, all finite", got, -1);
    /* the first of two in one block, one in a later block, the last element */
    const size_t at[][2] = {{5000, 6000}, {4096, 70000}, {70000, 70000}, {0, 9}};
    const float bad[] = {NAN, INFINITY, -INFINITY, NAN};
    for (int c = 0; c < 4; c++) {
        float *y = tu_copy(x, n);
        y[at[c][0]] = bad[c];
        y[at[c][1]] = -bad[c];
        o->first_nonfinite(&got, y, n);
        char name[64];
        snprintf(name, sizeof name, "first_nonfinite %g at %zu and %zu", (double)bad[c], at[c][0], at[c][1]);
        check_int(name, got, (long long)at[c][0]);
    }
    float big = 3.4e38f;
    o->first_nonfinite(&got, &big, 1);
    check_int("first_nonfinite, FLT_MAX-sized is finite", got, -1);
}

static void test_scale_add(const td_ops *o) {
    size_t n = 70001;
    float *x = TU_NEW(float, n), *y = TU_NEW(float, n), *e = TU_NEW(float, n);
    tu_randn(x, n, 11, 1.0f);
    tu_randn(y, n, 12, 1.0f);
    float *s = tu_copy(x, n);
    o->scale(s, 0.37f, n);
    for (size_t i = 0; i < n; i++) e[i] = x[i] * 0.37f;
    tu_check_bitwise("scale vs x * s", s, e, n);
    float *a = tu_copy(x, n);
    o->add(a, y, n);
    for (size_t i = 0; i < n; i++) e[i] = x[i] + y[i];
    tu_check_bitwise("add vs dst + src", a, e, n);
}

/* torch.optim.AdamW's update in float, written out (the golden bits'). */
static void adamw_contract(float *p, const float *g, float *m, float *v, size_t n, const td_adamw_hyper *h,
                           float wd) {
    float bc1 = (float)(1.0 - pow(h->beta1, h->step)), bc2_sqrt = (float)sqrt(1.0 - pow(h->beta2, h->step));
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * h->grad_scale;
        m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * gi;
        v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * gi * gi;
        p[i] = p[i] * (1.0f - h->lr * wd) - (h->lr / bc1) * m[i] / (sqrtf(v[i]) / bc2_sqrt + h->eps);
    }
}

static void adamw_double(double *p, const float *g, double *m, double *v, size_t n, const td_adamw_hyper *h,
                         double wd) {
    double b1 = h->beta1, b2 = h->beta2;
    for (size_t i = 0; i < n; i++) {
        double gi = (double)g[i] * h->grad_scale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / (1 - pow(b1, h->step)), vh = v[i] / (1 - pow(b2, h->step));
        p[i] = p[i] * (1 - (double)h->lr * wd) - h->lr * mh / (sqrt(vh) + h->eps);
    }
}

static void test_adamw(const td_ops *o) {
    size_t n0 = 4097, n1 = 70001, n = n0 + n1;
    float *p = TU_NEW(float, n), *g = TU_NEW(float, n), *m = TU_NEW(float, n), *v = TU_NEW(float, n);
    tu_randn(p, n, 21, 1.0f);
    tu_randn(g, n, 22, 0.1f);
    tu_randn(m, n, 23, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = 1e-4f * (float)fabs(td_rng_normal(TU_SEED, 24, i));
    td_adamw_hyper h = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.5f, 7};
    /* two spans, the second decayed, as td_adamw_update splits rows */
    float *P = tu_copy(p, n), *M = tu_copy(m, n), *V = tu_copy(v, n);
    td_adamw_span sp[2] = {{P, M, V, g, n0, 0.0f}, {P + n0, M + n0, V + n0, g + n0, n1, 0.1f}};
    td_kernels_set_threads(1);
    o->adamw(sp, 2, &h);
    float *ep = tu_copy(p, n), *em = tu_copy(m, n), *ev = tu_copy(v, n);
    adamw_contract(ep, g, em, ev, n0, &h, 0.0f);
    adamw_contract(ep + n0, g + n0, em + n0, ev + n0, n1, &h, 0.1f);
    tu_check_bitwise("adamw p vs the update written out", P, ep, n);
    tu_check_bitwise("adamw m vs the update written out", M, em, n);
    tu_check_bitwise("adamw v vs the update written out", V, ev, n);
    double *dp = tu_to_double(p, n), *dm = tu_to_double(m, n), *dv = tu_to_double(v, n);
    adamw_double(dp, g, dm, dv, n0, &h, 0.0);
    adamw_double(dp + n0, g + n0, dm + n0, dv + n0, n1, &h, 0.1);
    tu_check_close("adamw p vs double", P, dp, n, TOL_ADAM, FLOOR);
    tu_check_close("adamw v vs double", V, dv, n, TOL_ADAM, FLOOR);
    float *P3 = tu_copy(p, n), *M3 = tu_copy(m, n), *V3 = tu_copy(v, n);
    td_adamw_span sp3[2] = {{P3, M3, V3, g, n0, 0.0f}, {P3 + n0, M3 + n0, V3 + n0, g + n0, n1, 0.1f}};
    td_kernels_set_threads(3);
    o->adamw(sp3, 2, &h);
    tu_check_bitwise("adamw p 3 threads vs 1", P3, P, n);
    /* the given update: (p + u) (1 - lr wd), m and v untouched */
    float *Q = tu_copy(p, n), *Mq = tu_copy(m, n);
    td_adamw_span gs[1] = {{Q, Mq, NULL, g, n, 0.1f}};
    o->adamw_given(gs, 1, &h);
    for (size_t i = 0; i < n; i++) ep[i] = (p[i] + g[i]) * (1.0f - h.lr * 0.1f);
    tu_check_bitwise("adamw_given vs (p + u) (1 - lr wd)", Q, ep, n);
    tu_check_bitwise("adamw_given leaves m", Mq, m, n);
    td_kernels_set_threads(1);
}

int main(void) {
    const td_ops *f32 = td_ops_cpu(TD_K_F32);
    test_sumsq(f32);
    test_first_nonfinite(f32);
    test_scale_add(f32);
    test_adamw(f32);
    /* the optimizer's state is fp32 in every row: the same entries */
    for (int k = TD_K_BF16; k <= TD_K_F16; k++) {
        const td_ops *o = td_ops_cpu((td_ktype)k);
        int same = o->sumsq == f32->sumsq && o->first_nonfinite == f32->first_nonfinite && o->scale == f32->scale &&
                   o->add == f32->add && o->adamw == f32->adamw && o->adamw_given == f32->adamw_given;
        check_int(k == TD_K_BF16 ? "bf16 row's range ops are fp32's" : "fp16 row's range ops are fp32's", same, 1);
    }
    tu_free_all();
    return tu_finish("range_ops");
}
