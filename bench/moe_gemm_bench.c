/* The experts' GEMMs of one mixture-of-experts layer (bench/bench_moe.sh):
 * E GEMMs of variable row counts, as src/model/moe.c runs them, against one
 * GEMM of the same total rows and the same shapes, forward and backward;
 * the gap is the cost of the variable sizes.
 *
 * Shapes: the model, L6 C384 T256 batch 8 (N = 2048 tokens), E 8
 * experts of F 768 (GPT-2's GELU MLP: fc C -> F, proj F -> C, biases), top
 * K 2, so N K = 4096 rows in all. The row counts per expert are drawn like a
 * router's: each token picks K distinct experts from fixed probabilities
 * (a multinomial without replacement), for three sets of probabilities:
 * even (every expert N K / E rows: no variable size at all), mild (linear
 * 0.5x .. 1.5x of an even share) and skewed (geometric, 2^(-i/1.5), about
 * what the trainer's early steps show).
 *
 * Timed, per projection, in moe.c's order (experts_forward,
 * experts_backward): forward = fc then proj of every expert; backward = proj
 * then fc, each one call computing dinp (zeroed first, as moe.c does), dw
 * and dbias. "one" runs the same two (four) GEMMs on all N K rows with
 * expert 0's weights and the same zeroing. Engines:
 *   fp32          td_matmul_* (OpenBLAS; moe.c passes any row count)
 *   bf16 tiled    td_matmul_bf16_* in tiles of 128 rows, the rest
 *                 zero-padded in scratch to a multiple of 16 rows: exactly
 *                 moe.c's expert_mm_* (8 shapes per GEMM)
 *   bf16 pad128   the same with the rest padded to a whole tile of 128,
 *                 as moe.c did before d3631b5 (the same bits: zero rows
 *                 add nothing to a sum and each row's output is its own)
 *   bf16 16..1K   each call the largest of 1024, 512, ..., 16 rows that
 *                 fits in the rows left, the rest padded to 16: fewer,
 *                 larger calls, but the weight gradients' sums are split
 *                 differently (not the same bits)
 *   bf16 untiled  td_matmul_bf16_* on each expert's exact row count (a
 *                 oneDNN primitive per count, created on first use: the
 *                 timed calls reuse them, so this is the GEMMs alone)
 *   bf16 one      td_matmul_bf16_* on the N K rows
 * and, per distribution, what untiled would cost in a trainer whose counts
 * change every step: its first call on counts never seen (every primitive
 * created), beside tiled's at the same counts (first_call).
 * Times: best and median over >= 9 iterations (>= 300 ms) after a warm-up,
 * each iteration timing grouped and one back to back; the ratio grouped /
 * one (1.00 = no cost for variable sizes) is the median of the
 * iterations' ratios (and, beside it, the ratio of the bests).
 *
 * `moe_gemm_bench flops L H C T V E K F` prints instead the trainer's
 * model FLOPs per token (td_gpt_flops_per_token, what MFU divides by) of
 * the dense GPT-2 and of the MoE model with those sizes.
 * Never fails on speed; exit 0 unless something cannot run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"
#include "trident/model.h"

#define TILE 128 /* moe.c's (and its TAIL is 16) */

enum { NTOK = 2048, C_ = 384, F_ = 768, E_ = 8, K_ = 2, R_ = NTOK * K_ };

typedef struct {
    int cnt[E_];
    size_t off[E_];
    /* fp32 */
    float *w1, *w2, *b1, *b2, *gw1, *gw2, *gb1, *gb2; /* [E,F,C] [E,C,F] [E,F] [E,C]; grads */
    float *xs, *h, *a, *y, *dy, *da, *dh, *dxs;        /* [R, C|F] */
    /* bf16 */
    td_bf16 *w1b, *w2b, *xsb, *hb, *ab, *yb, *dyb, *dab, *dhb, *dxsb;
    td_bf16 *t0, *t1, *t2; /* [TILE, max(C, F)] padded tiles */
} bench;

static void *fill32(size_t n, uint64_t stream, float scale) {
    float *p = td_alloc(n * sizeof(float), TD_MEM_OTHER);
    for (size_t i = 0; i < n; i++) p[i] = scale * (float)td_rng_normal(20261204ULL, stream, i);
    return p;
}

static td_bf16 *to_bf16(const float *src, size_t n) {
    td_bf16 *p = td_alloc(n * sizeof(td_bf16), TD_MEM_OTHER);
    td_bf16_from_float_n(p, src, n);
    return p;
}

static void *zeros(size_t bytes) {
    void *p = td_alloc(bytes, TD_MEM_OTHER);
    memset(p, 0, bytes);
    return p;
}

static void bench_init(bench *b) {
    size_t wn = (size_t)E_ * F_ * C_, rc = (size_t)R_ * C_, rf = (size_t)R_ * F_;
    b->w1 = fill32(wn, 1, 0.02f), b->w2 = fill32(wn, 2, 0.02f);
    b->b1 = fill32((size_t)E_ * F_, 3, 0.02f), b->b2 = fill32((size_t)E_ * C_, 4, 0.02f);
    b->gw1 = zeros(wn * 4), b->gw2 = zeros(wn * 4), b->gb1 = zeros((size_t)E_ * F_ * 4), b->gb2 = zeros((size_t)E_ * C_ * 4);
    b->xs = fill32(rc, 5, 1.0f), b->a = fill32(rf, 6, 1.0f), b->dy = fill32(rc, 7, 1e-3f), b->dh = fill32(rf, 8, 1e-3f);
    b->h = zeros(rf * 4), b->y = zeros(rc * 4), b->da = zeros(rf * 4), b->dxs = zeros(rc * 4);
    b->w1b = to_bf16(b->w1, wn), b->w2b = to_bf16(b->w2, wn);
    b->xsb = to_bf16(b->xs, rc), b->ab = to_bf16(b->a, rf), b->dyb = to_bf16(b->dy, rc), b->dhb = to_bf16(b->dh, rf);
    b->hb = zeros(rf * 2), b->yb = zeros(rc * 2), b->dab = zeros(rf * 2), b->dxsb = zeros(rc * 2);
    size_t t = (size_t)TILE * (F_ > C_ ? F_ : C_);
    b->t0 = zeros(t * 2), b->t1 = zeros(t * 2), b->t2 = zeros(t * 2);
}

/* ---- the row counts: K distinct experts per token from probabilities p ---- */

static void draw_counts(bench *b, const double *p, uint64_t stream) {
    memset(b->cnt, 0, sizeof b->cnt);
    for (int t = 0; t < NTOK; t++) {
        int taken[E_] = {0};
        for (int k = 0; k < K_; k++) {
            double left = 0.0;
            for (int i = 0; i < E_; i++) left += taken[i] ? 0.0 : p[i];
            double u = td_rng_uniform(20261204ULL, stream, (uint64_t)t * K_ + k) * left, acc = 0.0;
            int pick = -1;
            for (int i = 0; i < E_; i++) {
                if (taken[i]) continue;
                pick = i;
                acc += p[i];
                if (u < acc) break;
            }
            taken[pick] = 1;
            b->cnt[pick]++;
        }
    }
    size_t o = 0;
    for (int i = 0; i < E_; i++) b->off[i] = o, o += (size_t)b->cnt[i];
}

/* ---- the engines ---- */


enum { ENG_F32, ENG_BF16_TILED, ENG_BF16_PAD128, ENG_BF16_POW2, ENG_BF16_UNTILED, NENG };
static const char *eng_name[NENG] = {"fp32", "bf16 tiled", "bf16 pad128", "bf16 16..1K", "bf16 untiled"};
/* the tiled engines' smallest and largest tile, and the rows the last call
 * is padded to a multiple of */
static const int tile_min[NENG] = {0, TILE, TILE, 16, 0}, tile_max[NENG] = {0, TILE, TILE, 1024, 0},
                 tile_pad[NENG] = {0, 16, TILE, 16, 0};

/* The rows of the next GEMM call of a tiled expert: the largest power of
 * two from lo up to hi that fits in the rows left (lo = hi = TILE: moe.c's
 * expert_mm_*); fewer than lo left go in one last, zero-padded call. */
static int tile_rows(int left, int lo, int hi) {
    int t = hi;
    while (t > lo && t > left) t /= 2;
    return t;
}

/* GEMM calls of an expert of n rows, and its rows with the padding. */
static int tile_calls(int n, int lo, int hi, int pad, int *rows) {
    int calls = 0, r = 0;
    for (; n - r >= lo; calls++) r += tile_rows(n - r, lo, hi);
    *rows = r + (n - r + pad - 1) / pad * pad;
    return calls + (r < n);
}

/* moe.c's expert_mm_forward under reduced precision (lo = hi = TILE, pad
 * 16): whole tiles, then the rest zero-padded to a multiple of pad rows in
 * scratch. */
static void tiled_forward(bench *b, td_bf16 *out, const td_bf16 *inp, const td_bf16 *w, const float *bias, int n,
                          int C, int OC, int lo, int hi, int pad) {
    int r = 0;
    for (int t; n - r >= lo; r += t) {
        t = tile_rows(n - r, lo, hi);
        td_matmul_bf16_forward(out + (size_t)r * OC, TD_K_BF16, inp + (size_t)r * C, w, bias, t, C, OC);
    }
    int full = r, rest = n - full, last = (rest + pad - 1) / pad * pad;
    if (!rest) return;
    memset(b->t0, 0, 2 * (size_t)last * C);
    memcpy(b->t0, inp + (size_t)full * C, 2 * (size_t)rest * C);
    td_matmul_bf16_forward(b->t1, TD_K_BF16, b->t0, w, bias, last, C, OC);
    memcpy(out + (size_t)full * OC, b->t1, 2 * (size_t)rest * OC);
}

/* moe.c's expert_mm_backward: dinp zero on entry. */
static void tiled_backward(bench *b, td_bf16 *dinp, float *dw, float *dbias, const td_bf16 *dout,
                           const td_bf16 *inp, const td_bf16 *w, int n, int C, int OC, int lo, int hi, int pad) {
    int r = 0;
    for (int t; n - r >= lo; r += t) {
        t = tile_rows(n - r, lo, hi);
        td_matmul_bf16_backward(dinp + (size_t)r * C, TD_K_BF16, dw, dbias, dout + (size_t)r * OC,
                                inp + (size_t)r * C, w, t, C, OC);
    }
    int full = r, rest = n - full, last = (rest + pad - 1) / pad * pad;
    if (!rest) return;
    memset(b->t0, 0, 2 * (size_t)last * OC);
    memcpy(b->t0, dout + (size_t)full * OC, 2 * (size_t)rest * OC);
    memset(b->t1, 0, 2 * (size_t)last * C);
    memcpy(b->t1, inp + (size_t)full * C, 2 * (size_t)rest * C);
    memset(b->t2, 0, 2 * (size_t)last * C);
    td_matmul_bf16_backward(b->t2, TD_K_BF16, dw, dbias, b->t0, b->t1, w, last, C, OC);
    memcpy(dinp + (size_t)full * C, b->t2, 2 * (size_t)rest * C);
}

/* Expert j's (or, with one, all rows') forward: fc then proj. */
static void fwd(bench *b, int eng, int j, int one) {
    int n = one ? R_ : b->cnt[j];
    size_t o = one ? 0 : b->off[j];
    if (n == 0) return;
    size_t w1 = (size_t)j * F_ * C_, w2 = (size_t)j * C_ * F_;
    const float *b1 = b->b1 + (size_t)j * F_, *b2 = b->b2 + (size_t)j * C_;
    if (eng == ENG_F32) {
        td_matmul_forward(b->h + o * F_, b->xs + o * C_, b->w1 + w1, b1, n, C_, F_);
        td_matmul_forward(b->y + o * C_, b->a + o * F_, b->w2 + w2, b2, n, F_, C_);
    } else if (tile_min[eng] && !one) {
        int lo = tile_min[eng], hi = tile_max[eng], pad = tile_pad[eng];
        tiled_forward(b, b->hb + o * F_, b->xsb + o * C_, b->w1b + w1, b1, n, C_, F_, lo, hi, pad);
        tiled_forward(b, b->yb + o * C_, b->ab + o * F_, b->w2b + w2, b2, n, F_, C_, lo, hi, pad);
    } else {
        td_matmul_bf16_forward(b->hb + o * F_, TD_K_BF16, b->xsb + o * C_, b->w1b + w1, b1, n, C_, F_);
        td_matmul_bf16_forward(b->yb + o * C_, TD_K_BF16, b->ab + o * F_, b->w2b + w2, b2, n, F_, C_);
    }
}

/* Expert j's backward as experts_backward runs it: proj then fc, each dinp
 * zeroed, then dinp, dw and dbias in one call. */
static void bwd(bench *b, int eng, int j, int one) {
    int n = one ? R_ : b->cnt[j];
    size_t o = one ? 0 : b->off[j];
    if (n == 0) return;
    size_t w1 = (size_t)j * F_ * C_, w2 = (size_t)j * C_ * F_;
    float *gw1 = b->gw1 + w1, *gw2 = b->gw2 + w2, *gb1 = b->gb1 + (size_t)j * F_, *gb2 = b->gb2 + (size_t)j * C_;
    if (eng == ENG_F32) {
        memset(b->da + o * F_, 0, 4 * (size_t)n * F_);
        td_matmul_backward(b->da + o * F_, gw2, gb2, b->dy + o * C_, b->a + o * F_, b->w2 + w2, n, F_, C_);
        memset(b->dxs + o * C_, 0, 4 * (size_t)n * C_);
        td_matmul_backward(b->dxs + o * C_, gw1, gb1, b->dh + o * F_, b->xs + o * C_, b->w1 + w1, n, C_, F_);
    } else if (tile_min[eng] && !one) {
        int lo = tile_min[eng], hi = tile_max[eng], pad = tile_pad[eng];
        memset(b->dab + o * F_, 0, 2 * (size_t)n * F_);
        tiled_backward(b, b->dab + o * F_, gw2, gb2, b->dyb + o * C_, b->ab + o * F_, b->w2b + w2, n, F_, C_, lo,
                       hi, pad);
        memset(b->dxsb + o * C_, 0, 2 * (size_t)n * C_);
        tiled_backward(b, b->dxsb + o * C_, gw1, gb1, b->dhb + o * F_, b->xsb + o * C_, b->w1b + w1, n, C_, F_, lo,
                       hi, pad);
    } else {
        memset(b->dab + o * F_, 0, 2 * (size_t)n * F_);
        td_matmul_bf16_backward(b->dab + o * F_, TD_K_BF16, gw2, gb2, b->dyb + o * C_, b->ab + o * F_, b->w2b + w2,
                                n, F_, C_);
        memset(b->dxsb + o * C_, 0, 2 * (size_t)n * C_);
        td_matmul_bf16_backward(b->dxsb + o * C_, TD_K_BF16, gw1, gb1, b->dhb + o * F_, b->xsb + o * C_,
                                b->w1b + w1, n, C_, F_);
    }
}

static void run(bench *b, int eng, int backward, int one) {
    for (int j = 0; j < (one ? 1 : E_); j++) (backward ? bwd : fwd)(b, eng, j, one);
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return a < c ? -1 : a > c;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double ms_of(bench *b, int eng, int backward, int one) {
    double a = td_now_ms();
    run(b, eng, backward, one);
    return td_now_ms() - a;
}

enum { MAXREP = 2048 };
/* Per pass (fwd, bwd, fwd+bwd): grouped and one GEMM's best and median ms,
 * and the median of the ratios of each iteration's pair. The four calls of
 * an iteration run back to back (grouped fwd, one fwd, grouped bwd, one
 * bwd), >= 9 iterations and >= 300 ms after a 50 ms warm-up, so a slower
 * spell of the shared machine hits both sides of a ratio alike. */
typedef struct {
    double g_best, g_med, o_best, o_med, ratio_med;
} timing;

static void time_pairs(bench *b, int eng, timing out[3]) {
    int one_eng = eng == ENG_F32 ? ENG_F32 : ENG_BF16_UNTILED;
    double t0 = td_now_ms();
    while (td_now_ms() - t0 < 50.0)
        for (int bw = 0; bw < 2; bw++) run(b, eng, bw, 0), run(b, one_eng, bw, 1);
    static double g[3][MAXREP], o[3][MAXREP], r[3][MAXREP];
    int n = 0;
    double start = td_now_ms();
    while ((n < 9 || td_now_ms() - start < 300.0) && n < MAXREP) {
        for (int bw = 0; bw < 2; bw++) g[bw][n] = ms_of(b, eng, bw, 0), o[bw][n] = ms_of(b, one_eng, bw, 1);
        g[2][n] = g[0][n] + g[1][n], o[2][n] = o[0][n] + o[1][n];
        for (int k = 0; k < 3; k++) r[k][n] = g[k][n] / o[k][n];
        n++;
    }
    for (int k = 0; k < 3; k++) {
        out[k].ratio_med = median(r[k], n);
        out[k].g_med = median(g[k], n), out[k].g_best = g[k][0];
        out[k].o_med = median(o[k], n), out[k].o_best = o[k][0];
    }
}

/* What untiled would cost in a trainer, whose counts change every step: for
 * DRAWS fresh draws of counts from p (never seen before, so every untiled
 * shape is a new primitive: created, JIT-compiled), the first untiled
 * forward+backward, beside the tiled one at the same counts once its
 * shapes are made (a tiled trainer meets the same few shapes every step).
 * Medians over the draws; the cache is released before each. */
enum { DRAWS = 5 };
static void first_call(bench *b, const double *p, double *untiled_ms, double *tiled_ms) {
    double u[DRAWS], t[DRAWS];
    for (int k = 0; k < DRAWS; k++) {
        draw_counts(b, p, 1000 + (uint64_t)k);
        td_matmul_bf16_release();
        run(b, ENG_BF16_TILED, 0, 0), run(b, ENG_BF16_TILED, 1, 0);
        double a = td_now_ms();
        run(b, ENG_BF16_TILED, 0, 0), run(b, ENG_BF16_TILED, 1, 0);
        t[k] = td_now_ms() - a;
        a = td_now_ms();
        run(b, ENG_BF16_UNTILED, 0, 0), run(b, ENG_BF16_UNTILED, 1, 0);
        u[k] = td_now_ms() - a;
    }
    td_matmul_bf16_release();
    *untiled_ms = median(u, DRAWS), *tiled_ms = median(t, DRAWS);
}

static int flops_main(int argc, char **argv) {
    if (argc != 10) {
        fprintf(stderr, "usage: moe_gemm_bench flops L H C T V E K F\n");
        return 2;
    }
    int v[8];
    for (int i = 0; i < 8; i++) v[i] = atoi(argv[2 + i]);
    td_gpt_config dense = {.L = v[0], .H = v[1], .C = v[2], .T = v[3], .V = v[4]}, moe = dense;
    moe.moe.E = v[5], moe.moe.K = v[6], moe.moe.F = v[7];
    td_gpt_config_finish(&dense);
    td_gpt_config_finish(&moe);
    printf("dense %.0f moe %.0f\n", td_gpt_flops_per_token(&dense), td_gpt_flops_per_token(&moe));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "flops")) return flops_main(argc, argv);
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1) threads = 1;
    td_kernels_set_threads(threads);
    bench b;
    bench_init(&b);
    printf("# moe_gemm_bench: one MoE layer's expert GEMMs, E %d x (fc %dx%d, proj %dx%d, biases), %d tokens x top-%d "
           "= %d rows, %d threads; oneDNN bf16 %s\n",
           E_, C_, F_, F_, C_, NTOK, K_, R_, threads, td_bf16_native() ? "native" : "NOT native");
    printf("# ms: best / median of >= 9 interleaved iterations; ratio = grouped / one GEMM of the same total rows: "
           "median of the iterations' ratios; ratio of the bests\n");
    const char *dname[] = {"even", "mild", "skewed"};
    for (int d = 0; d < 3; d++) {
        if (d == 0) { /* exactly N K / E rows each: whole tiles, no variable size */
            for (int i = 0; i < E_; i++) b.cnt[i] = R_ / E_, b.off[i] = (size_t)i * (R_ / E_);
        } else {
            double p[E_];
            for (int i = 0; i < E_; i++) p[i] = d == 1 ? 0.5 + (double)i / (E_ - 1) : pow(2.0, -i / 1.5);
            draw_counts(&b, p, (uint64_t)d);
        }
        int lo = R_, hi = 0, rows[NENG] = {0}, calls[NENG] = {0};
        printf("\n%s: rows per expert", dname[d]);
        for (int i = 0; i < E_; i++) {
            printf(" %d", b.cnt[i]);
            lo = b.cnt[i] < lo ? b.cnt[i] : lo, hi = b.cnt[i] > hi ? b.cnt[i] : hi;
            for (int e = 1; e < NENG; e++) {
                int rr = b.cnt[i];
                calls[e] += tile_min[e] ? tile_calls(b.cnt[i], tile_min[e], tile_max[e], tile_pad[e], &rr) : b.cnt[i] > 0;
                rows[e] += rr;
            }
        }
        printf(" (min %.2f, max %.2f of an even share)\n", lo / (double)(R_ / E_), hi / (double)(R_ / E_));
        printf("  GEMM calls per projection and pass (rows with padding):");
        for (int e = 1; e < NENG; e++)
            printf("%s %s %d (%+.1f%%)", e > 1 ? "," : "", eng_name[e], calls[e], 100.0 * (rows[e] - R_) / R_);
        printf("; one 1\n");
        printf("  %-14s %-7s %17s %17s %15s\n", "engine", "pass", "grouped ms", "one GEMM ms", "ratio");
        for (int eng = 0; eng < NENG; eng++) {
            timing t[3];
            time_pairs(&b, eng, t);
            const char *pass[3] = {"fwd", "bwd", "fwd+bwd"};
            for (int k = 0; k < 3; k++)
                printf("  %-14s %-7s %8.2f / %6.2f %8.2f / %6.2f %6.2fx; %5.2fx\n", eng_name[eng], pass[k],
                       t[k].g_best, t[k].g_med, t[k].o_best, t[k].o_med, t[k].ratio_med, t[k].g_best / t[k].o_best);
        }
        double fu, ft, pu[E_];
        for (int i = 0; i < E_; i++) pu[i] = d == 0 ? 1.0 : d == 1 ? 0.5 + (double)i / (E_ - 1) : pow(2.0, -i / 1.5);
        first_call(&b, pu, &fu, &ft);
        printf("  counts never seen before (median of %d draws, fwd+bwd): untiled %.1f ms (a primitive made per count), "
               "tiled %.1f ms\n", DRAWS, fu, ft);
    }
    return 0;
}
