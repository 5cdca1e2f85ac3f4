/* The machine's measured sgemm rate: the denominator of MFU. */
#include <cblas.h>

#include "trident/base.h"
#include "trident/kernels.h"

void openblas_set_num_threads(int n);

/* Single-threaded OpenBLAS on a 512^3 GEMM (the kernels call it the same
 * way), best of a few repetitions, in GFLOP/s. */
static double measure_one_thread(void) {
    enum { N = 512 };
    float *a = td_alloc(sizeof(float) * N * N, TD_MEM_OTHER);
    float *b = td_alloc(sizeof(float) * N * N, TD_MEM_OTHER);
    float *c = td_alloc(sizeof(float) * N * N, TD_MEM_OTHER);
    for (int i = 0; i < N * N; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    openblas_set_num_threads(1);
    double best = 1e30;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = td_now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        double dt = td_now_ms() - t0;
        if (dt < best) best = dt;
    }
    td_free(a);
    td_free(b);
    td_free(c);
    return 2.0 * N * N * (double)N / (best * 1e-3) / 1e9;
}

double td_sgemm_peak_gflops(void) {
    static double cached;
    if (cached == 0.0) cached = measure_one_thread();
    return cached;
}
