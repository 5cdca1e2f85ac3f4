/* Automatic stage partition: contiguous groups of layer costs with the
 * smallest largest group (the pipeline's slowest stage sets its pace). */
#include <math.h>
#include <stdlib.h>

#include "trident/base.h"
#include "trident/schedule.h"

double td_pp_partition(const double *cost, int n, int parts, int *first) {
    TD_ASSERT(n >= 1 && parts >= 1 && parts <= n);
    for (int i = 0; i < n; i++) TD_ASSERT(isfinite(cost[i]) && cost[i] >= 0);
    size_t N = (size_t)n + 1;
    /* seg[i * N + j]: sum of items [i, j), added left to right, so every
     * comparison below is between the same floating-point values */
    double *seg = malloc(N * N * sizeof *seg);
    /* best[k * N + i]: the smallest largest group splitting items [i, n)
     * into k non-empty groups (k <= n - i) */
    double *best = malloc((size_t)(parts + 1) * N * sizeof *best);
    TD_CHECK(seg && best, "partition: out of memory for %d items", n);
    for (int i = 0; i <= n; i++) {
        seg[i * N + i] = 0;
        for (int j = i + 1; j <= n; j++) seg[i * N + j] = seg[i * N + j - 1] + cost[j - 1];
    }
    for (int i = 0; i < n; i++) best[1 * N + i] = seg[i * N + n];
    for (int k = 2; k <= parts; k++)
        for (int i = 0; i + k <= n; i++) {
            double b = INFINITY;
            for (int e = i + 1; e + k - 1 <= n; e++) {
                double rest = best[(k - 1) * N + e], here = seg[i * N + e];
                double m = here > rest ? here : rest;
                if (m < b) b = m;
            }
            best[k * N + i] = b;
        }
    double opt = best[parts * N + 0];
    /* The earliest end of each group that still allows an optimal rest gives
     * the lexicographically smallest vector of ends. */
    first[0] = 0;
    for (int g = 0; g < parts - 1; g++) {
        int i = first[g], left = parts - g - 1, e = i + 1;
        while (!(seg[i * N + e] <= opt && best[left * N + e] <= opt)) e++;
        TD_ASSERT(e + left <= n);
        first[g + 1] = e;
    }
    first[parts] = n;
    free(seg);
    free(best);
    return opt;
}
