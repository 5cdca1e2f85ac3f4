/* Linear layer: out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC].
 *
 * Fast path: one single-threaded cblas_sgemm per OpenMP thread on a disjoint
 * slice of the output, so no element is ever summed by two threads: forward
 * and dinp split the N rows, dw (and dbias) split the OC rows of dw.
 *
 * Determinism: dbias sums rows 0..N-1 in order (ours). For the sgemm parts,
 * OpenBLAS 0.3.21's Haswell kernels (OPENBLAS_CORETYPE=Haswell, also what
 * Zen gets) give every element the same bits whether a call covers all rows
 * or a slice of them, PROVIDED the slice boundaries fall on multiples of 24
 * rows of the row-major output (presumably the 3 x 8 column packing block
 * of the column-major product); boundaries on multiples of 8/16/32 change
 * bits (measured over 120 shapes, NN/NT/TN, with and without the coretype
 * variable on this Zen 3). Splitting the other dimension was not
 * bit-stable for any alignment. So all slices start on multiples of TD_MM_ALIGN =
 * 48 (also whole 16-row tiles and 64-byte lines) and the results are bitwise
 * identical for any thread count; tests/unit/test_kernels.c checks this. A
 * different BLAS or kernel may need a different alignment. */
#include <cblas.h>
#include <omp.h>

#include "internal.h"
#include "trident/base.h"

#define TD_MM_ALIGN 48

/* out[n0:n1] = inp[n0:n1] @ w^T + bias */
static void mm_fwd_rows(float *out, const float *inp, const float *w, const float *bias, int C,
                        int OC, int n0, int n1) {
    int rows = n1 - n0;
    if (rows <= 0) return;
    float *o = out + (size_t)n0 * OC;
    /* Filling with the bias and using beta=1 is one pass over out; beta=0
     * would make OpenBLAS run its own zeroing pass first. */
    float beta = 0.0f;
    if (bias) {
        for (int n = 0; n < rows; n++)
            for (int j = 0; j < OC; j++) o[(size_t)n * OC + j] = bias[j];
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f,
                inp + (size_t)n0 * C, C, w, C, beta, o, OC);
}

void td_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC) {
    int nt = td_k_threads_for((size_t)N * OC * (C / 8 + 1));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int lo, hi;
        td_k_split(N, omp_get_num_threads(), omp_get_thread_num(), TD_MM_ALIGN, &lo, &hi);
        mm_fwd_rows(out, inp, w, bias, C, OC, lo, hi);
    }
}

/* dinp[n0:n1] += dout[n0:n1] @ w */
static void mm_bwd_dinp(float *dinp, const float *dout, const float *w, int C, int OC, int n0,
                        int n1) {
    if (n1 <= n0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, C, OC, 1.0f,
                dout + (size_t)n0 * OC, OC, w, C, 1.0f, dinp + (size_t)n0 * C, C);
}

/* dw[oc0:oc1] += dout[:, oc0:oc1]^T @ inp; dbias[oc0:oc1] += column sums */
static void mm_bwd_dw(float *dw, float *dbias, const float *dout, const float *inp, int N,
                      int C, int OC, int oc0, int oc1) {
    if (oc1 <= oc0) return;
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc1 - oc0, C, N, 1.0f, dout + oc0,
                    OC, inp, C, 1.0f, dw + (size_t)oc0 * C, C);
    if (!dbias) return;
    /* Double accumulators, 64 columns at a time (registers/L1): the N-term
     * row sum is then exact to the final float rounding. */
    for (int j0 = oc0; j0 < oc1; j0 += 64) {
        int len = j0 + 64 < oc1 ? 64 : oc1 - j0;
        double acc[64] = {0};
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC + j0;
            for (int j = 0; j < len; j++) acc[j] += d[j];
        }
        for (int j = 0; j < len; j++) dbias[j0 + j] = (float)(dbias[j0 + j] + acc[j]);
    }
}

/* Row boundary b (0..nt) of dinp, chosen so that thread i's share of rows
 * plus its share of dw's OC rows is 2/nt of the work (the two products cost
 * the same): with OC = 128 and 48-row slices dw splits 96/32, so dinp
 * splits 192/576 and both threads do half. Rounded to TD_MM_ALIGN and
 * made non-decreasing (running max), so the row slices stay disjoint. */
static int mm_row_bound(int N, int OC, int nt, int b) {
    if (b <= 0) return 0;
    if (b >= nt) return N;
    long best = 0;
    for (int j = 1; j <= b; j++) {
        int lo, hi;
        td_k_split(OC, nt, j, TD_MM_ALIGN, &lo, &hi); /* lo = OC boundary j */
        double frac = 2.0 * j / nt - (double)lo / OC;
        frac = frac < 0.0 ? 0.0 : frac > 1.0 ? 1.0 : frac;
        long r = (long)(frac * N / TD_MM_ALIGN + 0.5) * TD_MM_ALIGN;
        if (r > best) best = r;
    }
    return (int)(best < N ? best : N);
}

void td_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC) {
    int nt = td_k_threads_for((size_t)N * OC * (C / 8 + 1));
    int balance = dinp && dw; /* else each product alone splits evenly */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int i = omp_get_thread_num(), k = omp_get_num_threads(), lo, hi;
        if (dinp) {
            if (balance) {
                lo = mm_row_bound(N, OC, k, i);
                hi = mm_row_bound(N, OC, k, i + 1);
            } else {
                td_k_split(N, k, i, TD_MM_ALIGN, &lo, &hi);
            }
            mm_bwd_dinp(dinp, dout, w, C, OC, lo, hi);
        }
        td_k_split(OC, k, i, TD_MM_ALIGN, &lo, &hi);
        mm_bwd_dw(dw, dbias, dout, inp, N, C, OC, lo, hi);
    }
}

/* ---- reference: plain loops, no BLAS, no threads (the test oracle) ---- */

void td_matmul_forward_ref(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float s = bias ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++) s += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = s;
        }
}

void td_matmul_backward_ref(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)n * OC + o];
            for (int c = 0; c < C; c++) {
                if (dinp) dinp[(size_t)n * C + c] += w[(size_t)o * C + c] * d;
                if (dw) dw[(size_t)o * C + c] += inp[(size_t)n * C + c] * d;
            }
            if (dbias) dbias[o] += d;
        }
}
