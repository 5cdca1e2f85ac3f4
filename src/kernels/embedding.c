/* Token + position embedding.
 *
 * Backward is a scatter-add (rows of dwte hit by repeated tokens). Instead
 * of atomics or per-thread copies of dwte, each thread owns a contiguous
 * range of dwte rows (vocab ids, balanced by token counts) and of dwpe rows
 * (positions), and walks the tokens in order 0..N-1 (b = 0..B-1 for dwpe):
 * every element receives its terms in a fixed order, so results are
 * bitwise identical for any thread count. (Splitting the C columns instead
 * was 2-5x slower on 2 threads than on 1: each thread's row segments sit
 * next to the other's and the prefetchers bounce the lines between cores.) */
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

void td_embedding_shard_forward(float *out, const int *tokens, const float *wte, int lo, int rows,
                                int N, int C) {
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        int tok = tokens[n];
        TD_ASSERT(tok >= 0);
        float *restrict o = out + (size_t)n * C;
        if (tok < lo || tok - lo >= rows) {
            for (int c = 0; c < C; c++) o[c] = 0.0f;
            continue;
        }
        const float *restrict e = wte + (size_t)(tok - lo) * C;
        for (int c = 0; c < C; c++) o[c] = e[c];
    }
}

void td_position_forward(float *out, const float *wpe, const int *pos, int n0, int N, int T,
                         int C) {
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        int t = (n0 + n) % T;
        const float *restrict p = wpe + (size_t)(pos ? pos[t] : t) * C;
        float *restrict o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] += p[c];
    }
}

/* Vocab-id boundaries bound[0..nt] giving each thread about N/nt tokens. */
static void emb_vocab_split(int *bound, const int *tokens, int N, int nt) {
    int vmax = 0;
    for (int n = 0; n < N; n++) {
        TD_ASSERT(tokens[n] >= 0);
        vmax = tokens[n] > vmax ? tokens[n] : vmax;
    }
    int *count = td_alloc(sizeof(int) * ((size_t)vmax + 1), TD_MEM_OTHER); /* [vmax+1] */
    for (int n = 0; n < N; n++) count[tokens[n]]++;
    int v = 0;
    long seen = 0;
    bound[0] = 0;
    for (int i = 1; i < nt; i++) {
        while (v <= vmax && seen + count[v] <= (long)N * i / nt) seen += count[v++];
        bound[i] = v;
    }
    bound[nt] = vmax + 1;
    td_free(count);
}

void td_embedding_shard_backward(float *dwte, const float *dout, const int *tokens, int lo, int rows,
                                 int N, int C) {
    int nt = td_k_threads_for((size_t)N * C);
    if (nt > 64) nt = 64;
    int vb[65]; /* dwte row ranges per thread */
    if (nt > 1) emb_vocab_split(vb, tokens, N, nt);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int i = omp_get_thread_num(), k = omp_get_num_threads();
        int v0 = k > 1 ? vb[i] : 0, v1 = k > 1 ? vb[i + 1] : 0x7fffffff;
        for (int n = 0; n < N; n++) {
            int tok = tokens[n];
            if (tok < v0 || tok >= v1 || tok < lo || tok - lo >= rows) continue;
            const float *restrict g = dout + (size_t)n * C;
            float *restrict d = dwte + (size_t)(tok - lo) * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void td_position_backward(float *dwpe, const float *dout, const int *pos, int n0, int N, int T,
                          int C) {
    int nt = td_k_threads_for((size_t)N * C);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t0, t1;
        td_k_split(T, omp_get_num_threads(), omp_get_thread_num(), 1, &t0, &t1);
        for (int t = t0; t < t1; t++) {
            float *restrict d = dwpe + (size_t)(pos ? pos[t] : t) * C; /* pos: distinct rows */
            /* rows n with (n0 + n) % T == t, in increasing n */
            int first = ((t - n0) % T + T) % T;
            for (int n = first; n < N; n += T) {
                const float *restrict g = dout + (size_t)n * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}

void td_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C) {
    int N = B * T;
    int nt = td_k_threads_for((size_t)N * C);
    if (nt > 64) nt = 64;
    int vb[65]; /* dwte row ranges per thread */
    if (dwte && nt > 1) emb_vocab_split(vb, tokens, N, nt);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int i = omp_get_thread_num(), k = omp_get_num_threads();
        int v0 = k > 1 ? vb[i] : 0, v1 = k > 1 ? vb[i + 1] : 0x7fffffff;
        if (dwte)
            for (int n = 0; n < N; n++) {
                int tok = tokens[n];
                if (tok < v0 || tok >= v1) continue;
                const float *restrict g = dout + (size_t)n * C;
                float *restrict d = dwte + (size_t)tok * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        if (dwpe) {
            int t0, t1;
            td_k_split(T, k, i, 1, &t0, &t1);
            for (int t = t0; t < t1; t++) {
                float *restrict d = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    const float *restrict g = dout + ((size_t)b * T + t) * C;
                    for (int c = 0; c < C; c++) d[c] += g[c];
                }
            }
        }
    }
}
