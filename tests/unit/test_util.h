/* Small helpers for unit tests: random fills, array comparisons that print
 * one summary line per check and the worst element on failure, and a
 * free-everything arena so sanitizer builds see no leaks. Header-only. */
#ifndef TRIDENT_TEST_UTIL_H
#define TRIDENT_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"

static int tu_failures = 0, tu_checks = 0;

/* ---- arena ---- */
#define TU_MAX_ALLOCS 4096
static void *tu_ptrs[TU_MAX_ALLOCS];
static int tu_nptrs = 0;

/* Zero-filled, freed by tu_free_all(). */
static inline void *tu_alloc(size_t bytes) {
    if (tu_nptrs == TU_MAX_ALLOCS) {
        fprintf(stderr, "test_util: too many allocations\n");
        exit(1);
    }
    void *p = td_alloc(bytes, TD_MEM_OTHER);
    tu_ptrs[tu_nptrs++] = p;
    return p;
}
#define TU_NEW(type, n) ((type *)tu_alloc(sizeof(type) * (size_t)(n)))

/* Frees everything allocated since tu_mark() returned `mark`. */
static inline int tu_mark(void) { return tu_nptrs; }
static inline void tu_release(int mark) {
    while (tu_nptrs > mark) td_free(tu_ptrs[--tu_nptrs]);
}
static inline void tu_free_all(void) { tu_release(0); }

/* ---- data ---- */
#define TU_SEED 20240611ULL

/* x[i] = scale * N(0,1); `stream` names the tensor so tests are reproducible
 * and tensors independent. */
static inline void tu_randn(float *x, size_t n, uint64_t stream, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)td_rng_normal(TU_SEED, stream, i);
}

static inline void tu_rand_ints(int *x, size_t n, uint64_t stream, int hi) {
    for (size_t i = 0; i < n; i++) x[i] = (int)(td_rng_u64(TU_SEED, stream, i) % (uint64_t)hi);
}

static inline double *tu_to_double(const float *f, size_t n) {
    double *d = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

static inline float *tu_copy(const float *f, size_t n) {
    float *c = TU_NEW(float, n);
    memcpy(c, f, n * sizeof(float));
    return c;
}

/* ---- comparisons ---- */

/* Passes when every |got - exp| <= rtol * (|exp| + floor_frac * rms(exp)).
 * The floor is there because float errors of sums scale with the size of
 * the terms (~ the rms of the results), not with each result: an element
 * that is small through cancellation cannot have full relative accuracy.
 * floor_frac = 0 demands plain relative accuracy. NaN always fails. */
static inline int tu_check_close(const char *name, const float *got, const double *exp, size_t n,
                          double rtol, double floor_frac) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += exp[i] * exp[i];
    double floor_abs = n ? floor_frac * sqrt(ss / n) : 0.0, worst = 0.0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - exp[i]), den = fabs(exp[i]) + floor_abs;
        /* an exact-zero expectation with no floor demands an exact zero */
        double err = den > 0.0 ? diff / den : (diff == 0.0 ? 0.0 : INFINITY);
        if (!(err <= rtol)) bad = 1; /* catches NaN */
        if (!(err <= worst)) worst = err, wi = i;
        if (isnan(err)) break;
    }
    tu_checks++;
    if (!bad) {
        printf("PASS  %-52s n=%-6zu max err %.2e (tol %.0e)\n", name, n, worst, rtol);
        return 1;
    }
    tu_failures++;
    printf("FAIL  %-52s n=%-6zu max err %.2e (tol %.0e)\n", name, n, worst, rtol);
    printf("      worst [%zu]: got %.9g expected %.9g (err %.3e, floor %.3e)\n", wi,
           (double)got[wi], exp[wi], worst, floor_abs);
    return 0;
}

/* Same with a float expectation (fast vs _ref, twice vs once, ...). */
static inline int tu_check_close_f(const char *name, const float *got, const float *exp, size_t n,
                            double rtol, double floor_frac) {
    double *e = (double *)malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) e[i] = exp[i];
    int ok = tu_check_close(name, got, e, n, rtol, floor_frac);
    free(e);
    return ok;
}

/* Bitwise equality (memcmp: -0 vs +0 and NaN payloads count). */
static inline int tu_check_bitwise(const char *name, const float *got, const float *exp, size_t n) {
    tu_checks++;
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &exp[i], sizeof(float)) != 0) {
            if (!diff) first = i;
            diff++;
        }
    if (!diff) {
        printf("PASS  %-52s n=%-6zu bitwise equal\n", name, n);
        return 1;
    }
    tu_failures++;
    printf("FAIL  %-52s n=%-6zu %zu elements differ bitwise\n", name, n, diff);
    printf("      first [%zu]: got %.9g expected %.9g\n", first, (double)got[first],
           (double)exp[first]);
    return 0;
}

/* Every element exactly +0 or -0. */
static inline int tu_check_zero(const char *name, const float *got, size_t n) {
    tu_checks++;
    for (size_t i = 0; i < n; i++)
        if (got[i] != 0.0f) {
            tu_failures++;
            printf("FAIL  %-52s n=%-6zu [%zu] = %.9g, expected 0\n", name, n, i, (double)got[i]);
            return 0;
        }
    printf("PASS  %-52s n=%-6zu all exactly 0\n", name, n);
    return 1;
}

/* Prints the verdict, frees the arena, returns the process exit code. */
static inline int tu_finish(const char *suite) {
    tu_free_all();
    printf("%s: %d checks, %d failed\n", suite, tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}

/* ---- checks ---- */
/* One check: counts it, and on failure prints file:line and the message. */
#define TU_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            tu_failures++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                           \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* ---- finite differences ---- */
/* The objective reads the inputs through ctx; tu_fd_of perturbs x in place
 * and restores it. */
typedef double (*tu_objective_fn)(void *ctx);

/* d f / d x[i] for every i, central differences in double, in a new array.
 * h ~ 1e-6 |x|: the truncation error (h^2 f''') and rounding (1e-16 |f| / h)
 * both stay below ~1e-9, far under the float errors being tested. */
static inline double *tu_fd_of(double *x, size_t n, tu_objective_fn f, void *ctx) {
    double *g = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * fmax(1.0, fabs(x0));
        double xp = x0 + h, xm = x0 - h;
        x[i] = xp;
        double fp = f(ctx);
        x[i] = xm;
        double fm = f(ctx);
        x[i] = x0;
        g[i] = (fp - fm) / (xp - xm);
    }
    return g;
}

#endif
