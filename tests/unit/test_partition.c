/* td_pp_partition against brute force over every contiguous split: the same
 * smallest largest group and, among equal ones, the lexicographically
 * smallest vector of group ends. Group sums add items left to right in both,
 * so the comparison is exact (==), not within a tolerance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/schedule.h"

#define MAXN 12

static double group_sum(const double *c, int a, int b) {
    double s = 0;
    for (int i = a; i < b; i++) s += c[i];
    return s;
}

/* All 2^(n-1) cut sets with parts - 1 cuts; best[] gets the ends. */
static double brute(const double *c, int n, int parts, int *best) {
    double opt = -1;
    for (unsigned mask = 0; mask < 1u << (n - 1); mask++) {
        if (__builtin_popcount(mask) != parts - 1) continue;
        int first[MAXN + 1], g = 0;
        first[g++] = 0;
        for (int i = 1; i < n; i++)
            if (mask >> (i - 1) & 1) first[g++] = i;
        first[g] = n;
        double m = 0;
        for (int k = 0; k < parts; k++) {
            double s = group_sum(c, first[k], first[k + 1]);
            if (s > m) m = s;
        }
        int better = opt < 0 || m < opt;
        if (!better && m == opt)
            for (int k = 1; k < parts; k++)
                if (first[k] != best[k]) {
                    better = first[k] < best[k];
                    break;
                }
        if (better) {
            opt = m;
            memcpy(best, first, sizeof(int) * (parts + 1));
        }
    }
    return opt;
}

static int failures = 0;

static void check(const double *c, int n, int parts, const char *what) {
    int got[MAXN + 1], want[MAXN + 1];
    double g = td_pp_partition(c, n, parts, got);
    double w = brute(c, n, parts, want);
    double m = 0;
    int shape = got[0] == 0 && got[parts] == n;
    for (int k = 0; k < parts; k++) {
        shape &= got[k] < got[k + 1];
        double s = group_sum(c, got[k], got[k + 1]);
        if (s > m) m = s;
    }
    int ok = shape && g == w && m == g && memcmp(got, want, sizeof(int) * (parts + 1)) == 0;
    if (!ok && failures++ < 5) {
        printf("FAIL %s n %d parts %d: max %.17g (split's own max %.17g), brute force %.17g; ends", what, n, parts, g, m,
               w);
        for (int k = 0; k <= parts; k++) printf(" %d/%d", got[k], want[k]);
        printf(" (got/want)\ncosts:");
        for (int i = 0; i < n; i++) printf(" %g", c[i]);
        printf("\n");
    }
}

int main(void) {
    int cases = 0, ties = 0;
    for (int t = 0; t < 2000; t++) {
        double c[MAXN];
        int n = 2 + (int)(td_rng_u64(7, 1, t) % (MAXN - 1));
        int parts = 1 + (int)(td_rng_u64(7, 2, t) % (uint64_t)n);
        /* a third small integers (many equal splits: the tie rule), a third
         * reals, a third reals with a big last item (a large-vocabulary head) */
        int style = t % 3;
        for (int i = 0; i < n; i++) {
            uint64_t r = td_rng_u64(7, 3 + i, t);
            c[i] = style == 0 ? (double)(r % 4) : 0.1 + td_rng_uniform(7, 3 + i, t);
        }
        if (style == 2) c[n - 1] *= 2.0 + n;
        int want[MAXN + 1];
        double w = brute(c, n, parts, want);
        /* count cases where some other split reaches the same maximum */
        int equal = 0;
        for (unsigned mask = 0; mask < 1u << (n - 1) && equal < 2; mask++) {
            if (__builtin_popcount(mask) != parts - 1) continue;
            int f[MAXN + 1], g = 0;
            f[g++] = 0;
            for (int i = 1; i < n; i++)
                if (mask >> (i - 1) & 1) f[g++] = i;
            f[g] = n;
            double m = 0;
            for (int k = 0; k < parts; k++) {
                double s = group_sum(c, f[k], f[k + 1]);
                if (s > m) m = s;
            }
            equal += m == w;
        }
        ties += equal > 1;
        check(c, n, parts, "random");
        cases++;
    }
    printf("%s %d random cost vectors (n 2..%d, parts 1..n) equal brute force; %d had tied optima\n",
           failures ? "FAIL" : "ok  ", cases, MAXN, ties);
    /* embedding, 8 blocks, a head as heavy as 5 blocks: with 4 stages the
     * head must stand alone (it exceeds any group of blocks but the whole) */
    double gpt[10] = {0.5, 1, 1, 1, 1, 1, 1, 1, 1, 5};
    int first[5];
    int before = failures;
    check(gpt, 10, 4, "big head");
    double m = td_pp_partition(gpt, 10, 4, first);
    int ok = failures == before && first[3] == 9 && m == 5;
    if (!ok && failures == before) failures++;
    printf("%s big last item (head 5 x a block), 4 stages: ends %d %d %d %d, max %g; the head alone in the last stage\n",
           ok ? "ok  " : "FAIL", first[1], first[2], first[3], first[4], m);
    printf("%s\n", failures ? "test_partition: FAILED" : "test_partition: all passed");
    return failures ? 1 : 0;
}
