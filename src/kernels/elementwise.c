/* Elementwise ops: GELU (tanh approximation) and the residual add.
 *
 * GELU uses the identity 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + e^{-2u}):
 * the same function, but without the cancellation of 1 + tanh u for
 * negative u (which costs float tanh forms up to ~1e-7 absolute, i.e. large
 * relative error where GELU is small), and with 1 - sigmoid = e * sigmoid
 * for the derivative. e^{-2u} goes through td_k_expf, which vectorises;
 * glibc's tanhf/expf are scalar-only and GELU sees 4*N*C elements per layer
 * each way. Loops are flat and branch-free; every element is computed
 * alone, so results are bitwise identical for any thread count. */
#include "internal.h"
#include "trident/base.h"

#define TD_GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define TD_GELU_A 0.044715f

/* Chunks of this many elements per OpenMP iteration: whole vectors and
 * cache lines per chunk, little scheduling overhead. */
#define TD_EW_CHUNK 4096

void td_gelu_forward(float *out, const float *inp, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_EW_CHUNK - 1) / TD_EW_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_EW_CHUNK, i1 = td_min_sz(i0 + TD_EW_CHUNK, n);
        for (size_t i = i0; i < i1; i++) {
            float x = inp[i];
            float u = TD_GELU_S * (x + TD_GELU_A * x * x * x);
            out[i] = x / (1.0f + td_k_expf(-2.0f * u));
        }
    }
}

void td_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_EW_CHUNK - 1) / TD_EW_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_EW_CHUNK, i1 = td_min_sz(i0 + TD_EW_CHUNK, n);
        for (size_t i = i0; i < i1; i++) {
            float x = inp[i];
            float u = TD_GELU_S * (x + TD_GELU_A * x * x * x);
            float e = td_k_expf(-2.0f * u);
            float sg = 1.0f / (1.0f + e); /* sigmoid(2u) = 0.5 (1 + tanh u) */
            float du = TD_GELU_S * (1.0f + 3.0f * TD_GELU_A * x * x);
            /* d/dx [x sg] = sg + 2 x sg (1 - sg) du, with 1 - sg = e sg;
             * multiplied left to right so no intermediate is subnormal */
            float grad = sg + 2.0f * x * du * sg * (e * sg);
            dinp[i] += grad * dout[i];
        }
    }
}

void td_residual_forward(float *out, const float *a, const float *b, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_EW_CHUNK - 1) / TD_EW_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_EW_CHUNK, i1 = td_min_sz(i0 + TD_EW_CHUNK, n);
        for (size_t i = i0; i < i1; i++) out[i] = a[i] + b[i];
    }
}

void td_residual_backward(float *da, float *db, const float *dout, size_t n) {
    int nt = td_k_threads_for(n);
    long nchunks = (long)((n + TD_EW_CHUNK - 1) / TD_EW_CHUNK);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long ch = 0; ch < nchunks; ch++) {
        size_t i0 = (size_t)ch * TD_EW_CHUNK, i1 = td_min_sz(i0 + TD_EW_CHUNK, n);
        if (da)
            for (size_t i = i0; i < i1; i++) da[i] += dout[i];
        if (db)
            for (size_t i = i0; i < i1; i++) db[i] += dout[i];
    }
}
