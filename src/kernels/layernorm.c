/* LayerNorm over the last dimension, eps = 1e-5, biased variance (PyTorch).
 *
 * Row statistics use fixed-order lane sums (td_k_sum), the variance is taken
 * of the centred values (two passes: no E[x^2]-E[x]^2 cancellation).
 * Determinism: rows are independent; dw/db are reduced over rows by threads
 * that own disjoint column slices and add rows in order 0..N-1, so all
 * outputs are bitwise identical for any thread count. */
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "trident/base.h"

#define TD_LN_EPS 1e-5f

void td_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict o = out + (size_t)n * C;
        float m = td_k_sum(x, C) / C;
        /* centred values go through `o` so the variance pass reads them */
        for (int c = 0; c < C; c++) o[c] = x[c] - m;
        float var = td_k_dot(o, o, C) / C;
        float s = 1.0f / sqrtf(var + TD_LN_EPS);
        for (int c = 0; c < C; c++) o[c] = o[c] * s * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* dinp rows [n0, n1); tmp[2C] scratch. */
static void ln_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w,
                        const float *mean, const float *rstd, int C, int n0, int n1,
                        float *restrict tmp) {
    float *restrict dn = tmp, *restrict xh = tmp + C;
    for (int n = n0; n < n1; n++) {
        const float *restrict x = inp + (size_t)n * C;
        const float *restrict g = dout + (size_t)n * C;
        float *restrict dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        for (int c = 0; c < C; c++) {
            xh[c] = (x[c] - m) * s;
            dn[c] = w[c] * g[c];
        }
        float dn_mean = td_k_sum(dn, C) / C;
        float dn_xh_mean = td_k_dot(dn, xh, C) / C;
        for (int c = 0; c < C; c++) dx[c] += (dn[c] - dn_mean - xh[c] * dn_xh_mean) * s;
    }
}

/* dw, db columns [c0, c1): sums over all rows, 64 columns at a time in
 * double accumulators (an N-term float running sum would lose ~sqrt(N) ulp). */
static void ln_bwd_cols(float *dw, float *db, const float *dout, const float *inp,
                        const float *mean, const float *rstd, int N, int C, int c0, int c1) {
    for (int j0 = c0; j0 < c1; j0 += 64) {
        int len = j0 + 64 < c1 ? 64 : c1 - j0;
        double aw[64] = {0}, ab[64] = {0};
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C + j0;
            const float *g = dout + (size_t)n * C + j0;
            float m = mean[n], s = rstd[n];
            for (int j = 0; j < len; j++) {
                aw[j] += (double)((x[j] - m) * s * g[j]);
                ab[j] += g[j];
            }
        }
        if (dw)
            for (int j = 0; j < len; j++) dw[j0 + j] = (float)(dw[j0 + j] + aw[j]);
        if (db)
            for (int j = 0; j < len; j++) db[j0 + j] = (float)(db[j0 + j] + ab[j]);
    }
}

void td_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C) {
    int nt = td_k_threads_for((size_t)N * C);
    float *tmp = dinp ? td_alloc((size_t)nt * 2 * td_round_up(C, 16) * sizeof(float),
                                 TD_MEM_OTHER)
                      : NULL; /* [nt][2, C] */
    /* Rows for dinp and column slices for dw/db in the same region: they
     * write disjoint buffers, so no barrier is needed between them. */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int i = omp_get_thread_num(), k = omp_get_num_threads(), lo, hi;
        if (dinp) {
            td_k_split(N, k, i, 1, &lo, &hi);
            ln_bwd_rows(dinp, dout, inp, w, mean, rstd, C, lo, hi,
                        tmp + (size_t)i * 2 * td_round_up(C, 16));
        }
        if (dw || db) {
            td_k_split(C, k, i, 16, &lo, &hi);
            ln_bwd_cols(dw, db, dout, inp, mean, rstd, N, C, lo, hi);
        }
    }
    td_free(tmp);
}
