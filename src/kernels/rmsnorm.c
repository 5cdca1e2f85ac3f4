/* RMSNorm over the last dimension (Llama; Hugging Face's LlamaRMSNorm):
 * out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), no centring, no bias.
 *
 * Backward. With y_c = w_c x_c r, r = (m + eps)^(-1/2), m = sum_j x_j^2 / C:
 * dr/dx_j = -r^3 x_j / C, so
 *   dL/dx_j = r w_j dy_j - r^3 x_j / C * sum_c w_c dy_c x_c
 *           = r (dn_j - xh_j * mean_c(dn_c xh_c)),  dn = w dy, xh = x r,
 * the layernorm formula without its mean(dn) term; dL/dw_c = sum_n dy x r.
 *
 * The mean of squares uses td_k_dot's fixed-order lanes (as layernorm's row
 * sums): its terms are all positive, so there is no cancellation and the
 * relative error is a few ulp times the lane length. Determinism as in
 * layernorm.c: rows are independent; dw is reduced over rows by threads that
 * own disjoint column slices and add rows in order 0..N-1 in double, so every
 * output is bitwise identical for any thread count. */
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "trident/base.h"

void td_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps) {
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict o = out + (size_t)n * C;
        float s = 1.0f / sqrtf(td_k_dot(x, x, C) / C + eps);
        /* (x r) w: Hugging Face's order, weight * normalized */
        for (int c = 0; c < C; c++) o[c] = x[c] * s * w[c];
        if (rstd) rstd[n] = s;
    }
}

/* dinp rows [n0, n1); tmp[2C] scratch. */
static void rms_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w,
                         const float *rstd, int C, int n0, int n1, float *restrict tmp) {
    float *restrict dn = tmp, *restrict xh = tmp + C;
    for (int n = n0; n < n1; n++) {
        const float *restrict x = inp + (size_t)n * C;
        const float *restrict g = dout + (size_t)n * C;
        float *restrict dx = dinp + (size_t)n * C;
        float s = rstd[n];
        for (int c = 0; c < C; c++) {
            xh[c] = x[c] * s;
            dn[c] = w[c] * g[c];
        }
        float dn_xh_mean = td_k_dot(dn, xh, C) / C;
        for (int c = 0; c < C; c++) dx[c] += (dn[c] - xh[c] * dn_xh_mean) * s;
    }
}

/* dw columns [c0, c1): sums over all rows, 64 columns at a time in double
 * accumulators (an N-term float running sum would lose ~sqrt(N) ulp). */
static void rms_bwd_cols(float *dw, const float *dout, const float *inp, const float *rstd, int N,
                         int C, int c0, int c1) {
    for (int j0 = c0; j0 < c1; j0 += 64) {
        int len = j0 + 64 < c1 ? 64 : c1 - j0;
        double aw[64] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + j0;
            const float *g = dout + (size_t)n * C + j0;
            float s = rstd[n];
            for (int j = 0; j < len; j++) aw[j] += (double)(x[j] * s * g[j]);
        }
        for (int j = 0; j < len; j++) dw[j0 + j] = (float)(dw[j0 + j] + aw[j]);
    }
}

void td_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C) {
    int nt = td_k_threads_for((size_t)N * C);
    float *tmp = dinp ? td_alloc((size_t)nt * 2 * td_round_up(C, 16) * sizeof(float), TD_MEM_OTHER)
                      : NULL; /* [nt][2, C] */
    /* Rows for dinp and column slices for dw in the same region: they write
     * disjoint buffers, so no barrier is needed between them. */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int i = omp_get_thread_num(), k = omp_get_num_threads(), lo, hi;
        if (dinp) {
            td_k_split(N, k, i, 1, &lo, &hi);
            rms_bwd_rows(dinp, dout, inp, w, rstd, C, lo, hi,
                         tmp + (size_t)i * 2 * td_round_up(C, 16));
        }
        if (dw) {
            td_k_split(C, k, i, 16, &lo, &hi);
            rms_bwd_cols(dw, dout, inp, rstd, N, C, lo, hi);
        }
    }
    td_free(tmp);
}

/* ---- the oracles: plain loops, one float running sum per row ---- */

void td_rmsnorm_forward_ref(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float s = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[c] * s * w[c];
        if (rstd) rstd[n] = s;
    }
}

void td_rmsnorm_backward_ref(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        float s = rstd[n], d = 0.0f;
        for (int c = 0; c < C; c++) d += w[c] * g[c] * (x[c] * s);
        d /= C;
        for (int c = 0; c < C; c++) {
            if (dinp) dinp[(size_t)n * C + c] += (w[c] * g[c] - x[c] * s * d) * s;
            if (dw) dw[c] += g[c] * x[c] * s;
        }
    }
}
