/* The machine's measured sgemm rate: the denominator of MFU. */
#include <cblas.h>
#include <omp.h>

#include "trident/base.h"
#include "trident/kernels.h"

void openblas_set_num_threads(int n);

/* `threads` single-threaded OpenBLAS GEMMs of N^3 running at once in this
 * process (the kernels drive OpenBLAS the same way), total GFLOP/s. ~50 ms
 * of warm-up first (an idle core starts slow), then the best of `rounds`.
 * threads = 1 is the per-core rate MFU is measured against; larger counts
 * show whether in-process concurrency reaches threads x that rate (here it
 * varied between 1.6x and 1.95x for 2 threads from run to run). */
static double measure(int threads, int N, int rounds) {
    openblas_set_num_threads(1);
    double best = 1e30;
#pragma omp parallel num_threads(threads)
    {
        float *a, *b, *c;
#pragma omp critical /* the allocator's accounting is not thread-safe */
        {
            a = td_alloc(sizeof(float) * (size_t)N * N, TD_MEM_OTHER);
            b = td_alloc(sizeof(float) * (size_t)N * N, TD_MEM_OTHER);
            c = td_alloc(sizeof(float) * (size_t)N * N, TD_MEM_OTHER);
        }
        for (int i = 0; i < N * N; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
        double start = td_now_ms();
        while (td_now_ms() - start < 50.0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        /* rounds of ~2 ms at 20 GFLOP/s (40 MFLOP): small sizes repeat
         * inside a round, so the timer's resolution does not matter */
        int inner = (int)(40e6 / (2.0 * N * N * N)) + 1;
        for (int rep = 0; rep < rounds; rep++) {
#pragma omp barrier
            double t0 = td_now_ms();
            for (int k = 0; k < inner; k++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
#pragma omp barrier
#pragma omp master
            {
                double dt = (td_now_ms() - t0) / inner;
                if (dt < best) best = dt;
            }
        }
#pragma omp critical
        {
            td_free(a);
            td_free(b);
            td_free(c);
        }
    }
    return threads * 2.0 * N * N * (double)N / (best * 1e-3) / 1e9;
}

double td_sgemm_peak_gflops(int threads) {
    static double cached[64];
    TD_ASSERT(threads >= 1 && threads < 64);
    if (cached[threads] == 0.0) cached[threads] = measure(threads, 512, 10);
    return cached[threads];
}

double td_sgemm_rate_gflops(int threads, int n) {
    TD_ASSERT(threads >= 1 && threads < 64 && n >= 1);
    return measure(threads, n, 100); /* more rounds: some catch a shared machine idle */
}
