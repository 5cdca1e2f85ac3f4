/* Token + position embedding.
 *
 * Backward is a scatter-add (rows of dwte hit by repeated tokens). Instead
 * of atomics or per-thread copies of dwte, threads own disjoint column
 * slices of C and every thread walks all rows in order 0..N-1: each dwte and
 * dwpe element then receives its terms in a fixed order, so results are
 * bitwise identical for any thread count. */
#include <omp.h>

#include "internal.h"
#include "trident/base.h"

void td_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C) {
    int N = B * T;
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        int tok = tokens[n];
        TD_ASSERT(tok >= 0);
        const float *restrict e = wte + (size_t)tok * C;
        const float *restrict p = wpe + (size_t)(n % T) * C;
        float *restrict o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

void td_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C) {
    int N = B * T;
    int nt = td_k_threads_for((size_t)N * C);
    if (nt > 1 && C < 16 * nt) nt = 1; /* too narrow to split by columns */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int lo, hi;
        td_k_split(C, omp_get_num_threads(), omp_get_thread_num(), 16, &lo, &hi);
        for (int n = 0; n < N && lo < hi; n++) {
            const float *restrict g = dout + (size_t)n * C;
            if (dwte) {
                float *restrict d = dwte + (size_t)tokens[n] * C;
                for (int c = lo; c < hi; c++) d[c] += g[c];
            }
            if (dwpe) {
                float *restrict d = dwpe + (size_t)(n % T) * C;
                for (int c = lo; c < hi; c++) d[c] += g[c];
            }
        }
    }
}
