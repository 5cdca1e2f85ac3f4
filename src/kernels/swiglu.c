/* SwiGLU (Llama's MLP; Hugging Face's LlamaMLP before down_proj):
 * h = silu(g) * u, silu(g) = g sigmoid(g), on the fused gate|up activation
 * gu[N, 2F] (row n: g in columns [0, F), u in [F, 2F)).
 *
 * Backward: dg = dh u silu'(g), du = dh silu(g), with
 *   silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)),  s = sigmoid(g).
 * sigmoid is 1 / (1 + e), e = e^-g through td_k_expf (vectorises; clamps its
 * argument to [-80, 80]), and 1 - s is computed as e s, which has no
 * cancellation where s ~ 1. Large |g| is safe: e stays in
 * [1.8e-35, 5.5e34], so 1 + e, s = 1 / (1 + e) and e s are finite normal
 * floats for every g, never inf / inf or 0 * inf. Where the clamp acts,
 * g is clamped too so that its products stay bounded: silu = max(g, -80) s
 * and silu' = s (1 + clamp(g, -80, 80) e s). Then for g > 80, s = 1, silu
 * = g exactly and silu' = 1 (the exact values differ from these by less
 * than 80 e^-80 ~ 1.5e-33 relative); for g < -80 (and -inf), silu and
 * silu' are ~ -1.4e-33 where the exact values are smaller still (and
 * subnormal, which the kernels avoid as slow): at most 1.5e-33 absolute
 * off, for any g. Without the clamp of g, g = -1e30 would give silu =
 * g e^-80 = -1.8e-5. NaN gives NaN; +inf gives silu = inf.
 *
 * Every element is computed alone, rows are split over threads: results are
 * bitwise identical for any thread count. */
#include <math.h>

#include "internal.h"
#include "trident/base.h"

/* x clamped to [lo, hi] in td_k_ford's integer domain (vectorises). */
static inline float clampf(float x, float lo, float hi) {
    int32_t o = td_k_ford(x), a = td_k_ford(lo), b = td_k_ford(hi);
    o = o < a ? a : o;
    o = o > b ? b : o;
    return td_k_fromord(o);
}

void td_swiglu_forward(float *h, const float *gu, int N, int F) {
    int nt = td_k_threads_for((size_t)N * F);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict g = gu + (size_t)n * 2 * F, *restrict u = g + F;
        float *restrict o = h + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            float x = g[f];
            o[f] = clampf(x, -80.0f, INFINITY) / (1.0f + td_k_expf(-x)) * u[f];
        }
    }
}

/* No restrict: dgu may alias gu (each element pair is read before it is
 * written, and pairs are disjoint). */
void td_swiglu_backward(float *dgu, const float *dh, const float *gu, int N, int F) {
    int nt = td_k_threads_for((size_t)N * F);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        const float *d = dh + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
        for (int f = 0; f < F; f++) {
            float x = g[f], y = u[f], dd = d[f];
            float e = td_k_expf(-x);
            float s = 1.0f / (1.0f + e);
            float xl = clampf(x, -80.0f, INFINITY), xc = clampf(x, -80.0f, 80.0f);
            float ds = s * (1.0f + xc * (e * s)); /* 1 - s = e s */
            dg[f] = dd * y * ds;
            du[f] = dd * (xl * s);
        }
    }
}

/* ---- the oracles: plain loops, libm's expf, the textbook stable sigmoid
 * (e^-|g| never overflows; no clamp, so g < -80 gives the exact tiny
 * subnormal values) ---- */

static float ref_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

void td_swiglu_forward_ref(float *h, const float *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            float x = gu[(size_t)n * 2 * F + f], y = gu[(size_t)n * 2 * F + F + f];
            h[(size_t)n * F + f] = x * ref_sigmoid(x) * y;
        }
}

void td_swiglu_backward_ref(float *dgu, const float *dh, const float *gu, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            size_t ig = (size_t)n * 2 * F + f, iu = ig + F;
            float x = gu[ig], y = gu[iu], dd = dh[(size_t)n * F + f], s = ref_sigmoid(x);
            dgu[ig] = dd * y * (s * (1.0f + x * (1.0f - s)));
            dgu[iu] = dd * (x * s);
        }
}
