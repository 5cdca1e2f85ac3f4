/* Muon (Keller Jordan's modded-nanogpt speedrun): the momentum update of one
 * 2-D matrix orthogonalized by 5 Newton-Schulz iterations: fp32, its products
 * through the project's sgemm (td_matmul_forward, whose bits do not depend on
 * the thread count); or, in bf16 runs, the speedrun's own bf16 iterations
 * (td_muon_ns_bf16: one body with the 16-bit type as a descriptor). The _ref
 * is the fp32 algorithm in double throughout, in plain loops. */
#include <math.h>
#include <stdlib.h>

#include "internal.h" /* td_lp_type */
#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

/* the speedrun's quintic coefficients (zeropower_via_newtonschulz5) */
#define NS_A 3.4445
#define NS_B (-4.7750)
#define NS_C 2.0315

/* X [r, c] with r <= c, row-major, in place: 5 x (A = X X^T; B = b A + c A A;
 * X = a X + B X). T is float (the kernel) or double (the reference). */
#define NS_ITERATE(T, X, r, c, steps)                                                              \
    do {                                                                                           \
        T *A = malloc(sizeof(T) * (size_t)(r) * (size_t)(r));                                      \
        T *B = malloc(sizeof(T) * (size_t)(r) * (size_t)(r));                                      \
        T *Y = malloc(sizeof(T) * (size_t)(r) * (size_t)(c));                                      \
        TD_ASSERT(A && B && Y);                                                                    \
        for (int it = 0; it < (steps); it++) {                                                     \
            for (int i = 0; i < (r); i++)                                                          \
                for (int j = 0; j <= i; j++) {                                                     \
                    double s = 0.0;                                                                \
                    for (int k = 0; k < (c); k++)                                                  \
                        s += (double)X[(size_t)i * (c) + k] * X[(size_t)j * (c) + k];              \
                    A[(size_t)i * (r) + j] = A[(size_t)j * (r) + i] = (T)s;                        \
                }                                                                                  \
            for (int i = 0; i < (r); i++)                                                          \
                for (int j = 0; j < (r); j++) {                                                    \
                    double s = 0.0;                                                                \
                    for (int k = 0; k < (r); k++)                                                  \
                        s += (double)A[(size_t)i * (r) + k] * A[(size_t)k * (r) + j];              \
                    B[(size_t)i * (r) + j] = (T)(NS_B * A[(size_t)i * (r) + j] + NS_C * s);        \
                }                                                                                  \
            for (int i = 0; i < (r); i++)                                                          \
                for (int j = 0; j < (c); j++) {                                                    \
                    double s = 0.0;                                                                \
                    for (int k = 0; k < (r); k++)                                                  \
                        s += (double)B[(size_t)i * (r) + k] * X[(size_t)k * (c) + j];              \
                    Y[(size_t)i * (c) + j] = (T)(NS_A * X[(size_t)i * (c) + j] + s);               \
                }                                                                                  \
            for (size_t q = 0; q < (size_t)(r) * (size_t)(c); q++) X[q] = Y[q];                    \
        }                                                                                          \
        free(A), free(B), free(Y);                                                                 \
    } while (0)

/* G / (||G||_F + 1e-7), transposed to [min, max] when rows > cols, iterated,
 * and written back in G's layout. */
#define NS_BODY(T, x, rows, cols, steps)                                                           \
    do {                                                                                           \
        size_t n = (size_t)(rows) * (size_t)(cols);                                                \
        double ss = 0.0;                                                                           \
        for (size_t q = 0; q < n; q++) ss += (double)x[q] * x[q];                                  \
        double inv = 1.0 / (sqrt(ss) + 1e-7);                                                      \
        int tr = (rows) > (cols), r = tr ? (cols) : (rows), c = tr ? (rows) : (cols);              \
        T *X = malloc(sizeof(T) * n);                                                              \
        TD_ASSERT(X);                                                                              \
        for (int i = 0; i < (rows); i++)                                                           \
            for (int j = 0; j < (cols); j++) {                                                     \
                size_t d = tr ? (size_t)j * (rows) + i : (size_t)i * (cols) + j;                   \
                X[d] = (T)(x[(size_t)i * (cols) + j] * inv);                                       \
            }                                                                                      \
        NS_ITERATE(T, X, r, c, steps);                                                             \
        for (int i = 0; i < (rows); i++)                                                           \
            for (int j = 0; j < (cols); j++)                                                       \
                x[(size_t)i * (cols) + j] =                                                        \
                    X[tr ? (size_t)j * (rows) + i : (size_t)i * (cols) + j];                       \
        free(X);                                                                                   \
    } while (0)

/* The kernel's iterations through the project's sgemm (td_matmul_forward,
 * thread-count independent): A = X X^T, A A = A A^T (A is symmetric), and
 * B X = B (X^T)^T with X^T formed once per iteration. */
static void ns_iterate_sgemm(float *X, int r, int c, int steps) {
    float *A = malloc(sizeof(float) * (size_t)r * (size_t)r);
    float *AA = malloc(sizeof(float) * (size_t)r * (size_t)r);
    float *Xt = malloc(sizeof(float) * (size_t)r * (size_t)c);
    float *Y = malloc(sizeof(float) * (size_t)r * (size_t)c);
    TD_ASSERT(A && AA && Xt && Y);
    for (int it = 0; it < steps; it++) {
        td_matmul_forward(A, X, X, NULL, r, c, r);
        td_matmul_forward(AA, A, A, NULL, r, r, r);
        for (size_t q = 0; q < (size_t)r * (size_t)r; q++) A[q] = (float)(NS_B * A[q] + NS_C * AA[q]);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) Xt[(size_t)j * r + i] = X[(size_t)i * c + j];
        td_matmul_forward(Y, A, Xt, NULL, r, r, c);
        for (size_t q = 0; q < (size_t)r * (size_t)c; q++) X[q] = (float)(NS_A * X[q] + Y[q]);
    }
    free(A), free(AA), free(Xt), free(Y);
}

/* x rounded to the 16-bit type in place (tmp: n of its elements) */
static void lp_round(const td_lp_type *t, float *x, size_t n, void *tmp) {
    t->from_f32_1t(tmp, x, n);
    t->to_f32_1t(x, tmp, n);
}

/* The speedrun's iterations on a 16-bit X (X = G.bfloat16() and every
 * tensor after it bf16), as its eager ops compute them: each product's
 * inputs are 16-bit values, accumulated in fp32 (the sgemm; products of
 * bf16 values are exact in fp32) and rounded once; each elementwise op in
 * fp32 with fp32 coefficients (CUDA's opmath) and rounded. B = b A + c A @ A
 * is Python's (c A) @ A. X holds 16-bit values in fp32 on entry and exit. */
static void ns_iterate_lowp(const td_lp_type *t, float *X, int r, int c, int steps) {
    const float a = (float)NS_A, b = (float)NS_B, cc = (float)NS_C;
    size_t rr = (size_t)r * (size_t)r, rc = (size_t)r * (size_t)c;
    float *A = malloc(sizeof(float) * rr), *B = malloc(sizeof(float) * rr), *AA = malloc(sizeof(float) * rr);
    float *Xt = malloc(sizeof(float) * rc), *Y = malloc(sizeof(float) * rc);
    void *tmp = malloc(t->size * td_max_sz(rr, rc));
    TD_ASSERT(A && B && AA && Xt && Y && tmp);
    for (int it = 0; it < steps; it++) {
        td_matmul_forward(A, X, X, NULL, r, c, r); /* A = X X^T */
        lp_round(t, A, rr, tmp);
        for (size_t q = 0; q < rr; q++) B[q] = cc * A[q];
        lp_round(t, B, rr, tmp);
        td_matmul_forward(AA, B, A, NULL, r, r, r); /* (c A) A = (c A) (A^T)^T, A symmetric */
        lp_round(t, AA, rr, tmp);
        for (size_t q = 0; q < rr; q++) B[q] = b * A[q];
        lp_round(t, B, rr, tmp);
        for (size_t q = 0; q < rr; q++) B[q] += AA[q];
        lp_round(t, B, rr, tmp);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) Xt[(size_t)j * r + i] = X[(size_t)i * c + j];
        td_matmul_forward(Y, B, Xt, NULL, r, r, c); /* B X */
        lp_round(t, Y, rc, tmp);
        for (size_t q = 0; q < rc; q++) X[q] = a * X[q];
        lp_round(t, X, rc, tmp);
        for (size_t q = 0; q < rc; q++) X[q] += Y[q];
        lp_round(t, X, rc, tmp);
    }
    free(A), free(B), free(AA), free(Xt), free(Y), free(tmp);
}

/* t NULL: fp32 (the sgemm iterations on G / (||G|| + 1e-7)); else the
 * speedrun's 16-bit ones: X = G rounded, ||X|| accumulated wide and
 * rounded, + 1e-7 rounded, X / it rounded. */
static void ns_body(const td_lp_type *t, float *x, int rows, int cols, int steps) {
    TD_ASSERT(rows > 0 && cols > 0 && steps >= 0);
    size_t n = (size_t)rows * (size_t)cols;
    int tr = rows > cols, r = tr ? cols : rows, c = tr ? rows : cols;
    float *X = malloc(sizeof(float) * n);
    void *tmp = t ? malloc(t->size * n) : NULL;
    TD_ASSERT(X && (tmp || !t));
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) X[tr ? (size_t)j * rows + i : (size_t)i * cols + j] = x[(size_t)i * cols + j];
    if (t) lp_round(t, X, n, tmp);
    double ss = 0.0; /* in x's order for fp32: the kernel's bits before bf16 */
    for (size_t q = 0; q < n; q++) ss += t ? (double)X[q] * X[q] : (double)x[q] * x[q];
    if (!t) {
        double inv = 1.0 / (sqrt(ss) + 1e-7);
        for (size_t q = 0; q < n; q++) X[q] = (float)(X[q] * inv);
        ns_iterate_sgemm(X, r, c, steps);
    } else {
        float nrm = (float)sqrt(ss);
        lp_round(t, &nrm, 1, tmp);
        nrm += 1e-7f;
        lp_round(t, &nrm, 1, tmp);
        for (size_t q = 0; q < n; q++) X[q] /= nrm;
        lp_round(t, X, n, tmp);
        ns_iterate_lowp(t, X, r, c, steps);
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) x[(size_t)i * cols + j] = X[tr ? (size_t)j * rows + i : (size_t)i * cols + j];
    free(X);
    free(tmp);
}

void td_muon_ns(float *x, int rows, int cols, int steps) { ns_body(NULL, x, rows, cols, steps); }
void td_muon_ns_bf16(float *x, int rows, int cols, int steps) { ns_body(&TD_LP_BF16, x, rows, cols, steps); }

void td_muon_ns_ref(double *x, int rows, int cols, int steps) {
    TD_ASSERT(rows > 0 && cols > 0 && steps >= 0);
    NS_BODY(double, x, rows, cols, steps);
}

/* The speedrun's Muon.step split in its elementwise halves, so that a
 * sharded layout runs them on its shards and only the orthogonalization on
 * the matrix's owner (src/parallel/muon_shard.c): the same float
 * expressions whole or in pieces, so the bits agree. */
void td_muon_momentum(float *u, const float *g, float *buf, size_t n, float momentum,
                      int nesterov, float grad_scale) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        buf[i] += (1.0f - momentum) * (gi - buf[i]);
        u[i] = nesterov ? gi + momentum * (buf[i] - gi) : buf[i];
    }
}

/* rows, cols: the whole logical matrix's, for the speedrun's shape scale */
void td_muon_apply(float *p, const float *u, size_t n, int rows, int cols, float lr, float wd) {
    float step_size = lr * sqrtf(rows > cols ? (float)rows / (float)cols : 1.0f);
    float keep = 1.0f - lr * wd;
    for (size_t i = 0; i < n; i++) p[i] = p[i] * keep - step_size * u[i];
}
