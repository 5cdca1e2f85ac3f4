/* The gradient-reduction payloads' pieces (trident/grad_payload.h) and
 * collectives, against direct computations:
 *   1. top-k selection against a sort by (|v| descending, index ascending),
 *      on random data, on data full of ties and with NaNs: the same indices;
 *   2. packing with error feedback loses nothing: sent + residual equals
 *      gradient + old residual, element by element, exactly;
 *   3. top-k over the group: every rank's pairs all-gathered and summed in
 *      rank order equal the sum recomputed from every rank's data, bitwise,
 *      on every rank;
 *   4. td_topk_take: the indices of td_topk_select, sent + left = the input
 *      exactly, nothing left where sent;
 *   5. the update scheme's error feedback over 30 steps: every rank adds a
 *      step's update to what it has not sent, takes the top-k, and applies the
 *      mean of the gathered pairs; the applied total plus the ranks' mean
 *      residual equals the mean of all updates (double reference), and every
 *      rank holds the same bits;
 *   6. bf16 reduction: gradients rounded to bf16 (nearest even), all-reduced
 *      with fp32 accumulation, equal bf16(exact sum of the bf16 inputs)
 *      bitwise. The inputs (8 significant bits, exponents within 2^-10..2^0)
 *      sum exactly in fp32 at up to 4 ranks, so one final rounding is the
 *      only rounding; at 3+ ranks the test also counts elements where
 *      summing in bf16 (rounding after each add) would differ, so it can
 *      tell the two apart.
 * Run under mpirun (2-4 ranks); exits non-zero with the worst element. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/grad_payload.h"

static int fails = 0;

static uint64_t rng_state;
static double urand(void) { /* splitmix64 in [0, 1) */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

static const float *g_keys;
static uint32_t key_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x7fffffffu;
}
static int by_mag_then_index(const void *a, const void *b) {
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint32_t ki = key_of(g_keys[i]), kj = key_of(g_keys[j]);
    if (ki != kj) return ki > kj ? -1 : 1;
    return i < j ? -1 : 1;
}
static int ascending(const void *a, const void *b) {
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    return i < j ? -1 : i > j;
}

/* kind 0: random floats, 1: a few distinct magnitudes (ties), 2: random with NaNs */
static void fill(float *v, size_t n, int kind) {
    static const float few[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -0.0f};
    for (size_t i = 0; i < n; i++) {
        if (kind == 1)
            v[i] = few[(size_t)(urand() * 7)];
        else
            v[i] = (float)((urand() - 0.5) * pow(2.0, -12.0 * urand()));
        if (kind == 2 && urand() < 0.01) v[i] = NAN;
    }
}

static void check_select(void) {
    int worst_case = -1;
    for (int c = 0; c < 300; c++) {
        size_t n = 1 + (size_t)(urand() * 3000), k = 1 + (size_t)(urand() * (double)n);
        if (c % 10 == 0) k = n;
        float *v = malloc(n * 4);
        uint32_t *ref = malloc(n * 4), *got = malloc(k * 4);
        fill(v, n, c % 3);
        for (size_t i = 0; i < n; i++) ref[i] = (uint32_t)i;
        g_keys = v;
        qsort(ref, n, 4, by_mag_then_index);
        qsort(ref, k, 4, ascending);
        td_topk_select(v, n, k, got);
        if (memcmp(ref, got, k * 4) != 0 && worst_case < 0) {
            size_t j = 0;
            while (ref[j] == got[j]) j++;
            printf("FAIL select case %d (n %zu, k %zu, kind %d): position %zu index %u, want %u\n", c,
                   n, k, c % 3, j, got[j], ref[j]);
            worst_case = c;
            fails++;
        }
        free(v), free(ref), free(got);
    }
    if (worst_case < 0) printf("top-k select: 300 cases equal the sort (ties by index, NaN first)\n");
}

static void check_pack(void) {
    size_t n = 5000, k = td_topk_count(0.01, n);
    float *g = malloc(n * 4), *g0 = malloc(n * 4), *res = malloc(n * 4), *res0 = malloc(n * 4);
    float *pairs = malloc(2 * k * 4), *sent = calloc(n, 4);
    uint32_t *idx = malloc(k * 4);
    fill(g, n, 0);
    fill(res, n, 0);
    memcpy(g0, g, n * 4);
    memcpy(res0, res, n * 4);
    td_topk_pack(g, res, n, k, idx, pairs);
    for (size_t j = 0; j < k; j++) {
        uint32_t i;
        memcpy(&i, &pairs[2 * j], 4);
        sent[i] = pairs[2 * j + 1];
    }
    size_t bad = n;
    for (size_t i = 0; i < n; i++) /* exactly one side is non-zero, so the sum is exact */
        if (sent[i] + res[i] != g0[i] + res0[i] || (sent[i] != 0 && res[i] != 0)) bad = i;
    if (k != 50 || bad < n) {
        printf("FAIL pack: k %zu (want 50); element %zu sent %g + residual %g, want %g\n", k, bad,
               bad < n ? sent[bad] : 0, bad < n ? res[bad] : 0, bad < n ? g0[bad] + res0[bad] : 0);
        fails++;
    } else {
        printf("top-k pack: sent + residual = gradient + old residual on all %zu elements\n", n);
    }
    free(g), free(g0), free(res), free(res0), free(pairs), free(sent), free(idx);
}

static void check_take(void) {
    size_t n = 7000, k = td_topk_count(0.01, n);
    float *v = malloc(n * 4), *v0 = malloc(n * 4), *pairs = malloc(2 * k * 4), *sent = calloc(n, 4);
    uint32_t *idx = malloc(k * 4), *want = malloc(k * 4);
    fill(v, n, 1); /* ties: the order must be select's */
    for (size_t i = 0; i < n; i += 3) v[i] *= (float)(1.0 + urand());
    memcpy(v0, v, n * 4);
    td_topk_select(v0, n, k, want);
    td_topk_take(v, n, k, idx, pairs);
    size_t bad = n;
    for (size_t j = 0; j < k; j++) {
        uint32_t i;
        memcpy(&i, &pairs[2 * j], 4);
        if (i != want[j]) bad = j;
        else sent[i] = pairs[2 * j + 1];
    }
    if (bad < n) {
        printf("FAIL take: pair %zu has index %u, select says %u\n", bad, idx[bad], want[bad]);
        fails++;
    } else {
        for (size_t i = 0; i < n; i++) /* one side is zero: the sum is exact */
            if (sent[i] + v[i] != v0[i] || (sent[i] != 0 && v[i] != 0)) bad = i;
        if (bad < n) {
            printf("FAIL take: element %zu sent %g + left %g, want %g\n", bad, sent[bad], v[bad], v0[bad]);
            fails++;
        } else {
            printf("top-k take: select's %zu indices, sent + left = input on all %zu elements\n", k, n);
        }
    }
    free(v), free(v0), free(pairs), free(sent), free(idx), free(want);
}

static void check_update_feedback(td_comm *w, int rank, int D) {
    enum { STEPS = 30 };
    size_t n = 4000, k = td_topk_count(0.01, n);
    float *acc = calloc(n, 4), *params = calloc(n, 4), *u = malloc(n * 4), *pairs = malloc(2 * k * 4);
    float *gathered = malloc((size_t)D * 2 * k * 4), *sum = malloc(n * 4), *res_all = malloc((size_t)D * n * 4);
    double *want = calloc(n, sizeof(double));
    uint32_t *idx = malloc(k * 4);
    rng_state = 99; /* every rank makes every rank's updates, for the reference */
    for (int s = 0; s < STEPS; s++)
        for (int r = 0; r < D; r++) {
            fill(u, n, 0);
            for (size_t i = 0; i < n; i++) want[i] += (double)u[i] / D;
            if (r != rank) continue;
            for (size_t i = 0; i < n; i++) acc[i] += u[i];
        }
    /* the same updates again, now exchanged step by step */
    memset(acc, 0, n * 4);
    rng_state = 99;
    for (int s = 0; s < STEPS; s++) {
        for (int r = 0; r < D; r++) {
            fill(u, n, 0);
            if (r == rank)
                for (size_t i = 0; i < n; i++) acc[i] += u[i];
        }
        td_topk_take(acc, n, k, idx, pairs);
        td_all_gather(w, pairs, gathered, 2 * k, TD_F32);
        td_topk_unpack_sum(sum, n, gathered, D, k);
        for (size_t i = 0; i < n; i++) params[i] += sum[i] / (float)D;
    }
    td_all_gather(w, acc, res_all, n, TD_F32);
    /* tolerance: 30 float additions of values below 1 per element, each
     * rounding by 2^-24 of a total below ~30: 1e-4 absolute is ample, and
     * a lost pair (a value of ~0.1-1) is far above it */
    double worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double got = params[i];
        for (int r = 0; r < D; r++) got += (double)res_all[(size_t)r * n + i] / D;
        if (fabs(got - want[i]) > worst) worst = fabs(got - want[i]), at = i;
    }
    float *p0 = malloc(n * 4); /* rank 0's params: every rank must hold the same bits */
    memcpy(p0, params, n * 4);
    td_broadcast(w, p0, n, TD_F32, 0);
    int same = memcmp(p0, params, n * 4) == 0;
    if (worst > 1e-4 || !same) {
        printf("FAIL rank %d update feedback: element %zu off by %g (tolerance 1e-4)%s\n", rank, at, worst,
               same ? "" : "; params differ from rank 0's");
        fails++;
    } else if (rank == 0) {
        printf("top-k update feedback over %d ranks, %d steps: applied + residual = all updates (worst %.2g), "
               "params identical\n", D, STEPS, worst);
    }
    free(acc), free(params), free(u), free(pairs), free(gathered), free(sum), free(res_all), free(want),
        free(idx), free(p0);
}

static void check_topk_group(td_comm *w, int rank, int D) {
    size_t n = 20000, k = td_topk_count(0.01, n);
    float *all = malloc((size_t)D * n * 4), *pairs = malloc(2 * k * 4);
    float *gathered = malloc((size_t)D * 2 * k * 4), *got = malloc(n * 4), *want = calloc(n, 4);
    uint32_t *idx = malloc(k * 4);
    rng_state = 42; /* every rank makes every rank's gradient */
    for (int r = 0; r < D; r++) fill(all + (size_t)r * n, n, 0);
    td_topk_pack(all + (size_t)rank * n, NULL, n, k, idx, pairs);
    td_all_gather(w, pairs, gathered, 2 * k, TD_F32);
    td_topk_unpack_sum(got, n, gathered, D, k);
    for (int r = 0; r < D; r++) { /* the reference: select again, add in rank order */
        td_topk_select(all + (size_t)r * n, n, k, idx);
        for (size_t j = 0; j < k; j++) want[idx[j]] += all[(size_t)r * n + idx[j]];
    }
    size_t bad = n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0) bad = i;
    if (bad < n) {
        printf("FAIL rank %d top-k sum: element %zu %.9g, want %.9g\n", rank, bad, got[bad], want[bad]);
        fails++;
    } else if (rank == 0) {
        printf("top-k over %d ranks: %zu pairs each, the rank-ordered sum bitwise on every rank\n", D, k);
    }
    free(all), free(pairs), free(gathered), free(got), free(want), free(idx);
}

static void check_bf16(td_comm *w, int rank, int D) {
    size_t n = 100000; /* several pieces and shared-ring chunks */
    float *x = malloc((size_t)D * n * 4);
    uint16_t *h = malloc(n * 2);
    rng_state = 7;
    for (size_t i = 0; i < (size_t)D * n; i++) /* |x| in [2^-10, 1]: see the header */
        x[i] = (float)((urand() < 0.5 ? -1 : 1) * pow(2.0, -10.0 * urand()));
    for (size_t i = 0; i < n; i++) h[i] = td_f32_to_bf16(x[(size_t)rank * n + i]);
    td_allreduce(w, h, n, TD_BF16, TD_SUM);
    size_t bad = n, differ = 0;
    uint16_t bad_want = 0;
    for (size_t i = 0; i < n; i++) {
        double exact = 0.0;
        uint16_t stepwise = 0;
        for (int r = 0; r < D; r++) {
            float b = td_bf16_to_f32(td_f32_to_bf16(x[(size_t)r * n + i]));
            exact += b;
            stepwise = r == 0 ? td_f32_to_bf16(b) : td_f32_to_bf16(td_bf16_to_f32(stepwise) + b);
        }
        uint16_t want = td_f32_to_bf16((float)exact); /* exact in float: one rounding */
        if (h[i] != want) bad = i, bad_want = want;
        differ += stepwise != want;
    }
    if (bad < n) {
        printf("FAIL rank %d bf16 sum: element %zu 0x%04x (%g), want 0x%04x\n", rank, bad, h[bad],
               td_bf16_to_f32(h[bad]), bad_want);
        fails++;
    } else if (D >= 3 && differ == 0) {
        printf("FAIL: no element where bf16 accumulation differs; the data cannot tell\n");
        fails++;
    } else if (rank == 0) {
        printf("bf16 reduction over %d ranks: %zu elements = bf16(exact sum), bitwise (%zu would "
               "differ if summed in bf16)\n", D, n, differ);
    }
    free(x), free(h);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_comm *w = td_comm_world();
    int rank = td_comm_rank(w), D = td_comm_size(w);
    rng_state = 1;
    check_select();
    check_pack();
    check_topk_group(w, rank, D);
    check_take();
    check_update_feedback(w, rank, D);
    check_bf16(w, rank, D);
    td_comm_finalize();
    return fails ? 1 : 0;
}
