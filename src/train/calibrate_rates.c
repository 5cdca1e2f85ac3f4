/* The compute side of `plan --calibrate` (calibrate_rates.h). Each rate is
 * the best of a few rounds after a warm-up round: on a shared machine, the
 * rounds least disturbed by other work. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/backend.h"
#include "trident/kernels.h"
#include "trident/model.h"
#include "trident/optim.h"
#include "calibrate_rates.h"

/* Beyond the last-level cache of most machines (tens of MiB): a model's
 * weights and activations are streamed from memory every pass. */
#define STREAM_BYTES ((size_t)128 << 20)

/* Runs `threads` OpenMP threads side by side, as ranks share the machine:
 * each sets up its own operands, then all run `rounds` rounds together
 * (each thread's kernels single-threaded); round 0 warms up (first touch,
 * idle cores). Returns the threads' work per second (threads x g_work over
 * the best later round's wall time: on a shared machine, the round least
 * disturbed by other work). setup runs under a
 * lock (the allocator's accounting is not thread-safe) and sets g_work, the
 * work of one thread's round in the caller's unit. */
typedef struct {
    void *(*setup)(void);
    void (*round)(void *state, int round);
    void (*teardown)(void *state);
    int rounds;
} side_by_side;
static double g_work;

static double rate_side_by_side(int threads, const side_by_side *f) {
    int saved = td_kernels_threads();
    td_kernels_set_threads(1);
    double best = 1e30;
#pragma omp parallel num_threads(threads)
    {
        void *st;
#pragma omp critical
        st = f->setup();
        for (int round = 0; round < f->rounds; round++) {
#pragma omp barrier
            double t0 = td_now_ms();
            f->round(st, round);
#pragma omp barrier
#pragma omp master
            {
                double dt = td_now_ms() - t0;
                if (round > 0 && dt < best) best = dt;
            }
        }
#pragma omp critical
        f->teardown(st);
    }
    td_kernels_set_threads(saved);
    return threads * g_work / (best * 1e-3);
}

/* Copies of g_copy_bytes (cache-resident for small sizes), repeated within
 * a round of ~64 MiB; 101 rounds (short ones: some catch every thread
 * running). Work: bytes read + written. */
static size_t g_copy_bytes;
typedef struct { char *a, *b; size_t bytes; int inner; } copy_state;

static void *copy_setup(void) {
    copy_state *s = td_alloc(sizeof *s, TD_MEM_OTHER);
    s->bytes = g_copy_bytes;
    s->inner = (int)(((size_t)64 << 20) / s->bytes);
    if (s->inner < 1) s->inner = 1;
    s->a = td_alloc(s->bytes, TD_MEM_OTHER);
    s->b = td_alloc(s->bytes, TD_MEM_OTHER);
    memset(s->a, 1, s->bytes);
    memset(s->b, 2, s->bytes);
    g_work = 2.0 * (double)s->bytes * s->inner;
    return s;
}
static void copy_round(void *state, int round) {
    (void)round;
    copy_state *s = state;
    for (int k = 0; k < s->inner; k++) {
        memcpy(s->b, s->a, s->bytes);
        s->a[k % s->bytes] = s->b[(k + 1) % s->bytes]; /* keep every copy */
    }
}
static void copy_teardown(void *state) {
    copy_state *s = state;
    td_free(s->a);
    td_free(s->b);
    td_free(s);
}

double td_calib_copy_gbs(int threads, size_t bytes) {
    g_copy_bytes = bytes;
    side_by_side f = {copy_setup, copy_round, copy_teardown, 101};
    return rate_side_by_side(threads, &f) / 1e9;
}

/* Linear layers of n x n x n: input, weight, output and their gradients
 * (bias-free: the bias is an elementwise pass the planner charges apart),
 * as many as fill STREAM_BYTES. Work: 6 n^3 FLOPs per layer. */
static int g_linear_n;
typedef struct { int n, layers; float *buf; } linear_state;

static void *linear_setup(void) {
    linear_state *s = td_alloc(sizeof *s, TD_MEM_OTHER);
    s->n = g_linear_n;
    size_t per = 5 * (size_t)s->n * s->n;
    s->layers = STREAM_BYTES / (per * sizeof(float)) < 2 ? 2 : (int)(STREAM_BYTES / (per * sizeof(float)));
    s->buf = td_alloc(per * s->layers * sizeof(float), TD_MEM_OTHER);
    for (size_t i = 0; i < per * s->layers; i++) s->buf[i] = (float)(i % 7) * 0.01f;
    g_work = 6.0 * (double)s->n * s->n * s->n * s->layers;
    return s;
}
static void linear_round(void *state, int round) {
    (void)round;
    linear_state *s = state;
    size_t nn = (size_t)s->n * s->n, per = 5 * nn;
    /* host buffers: the CPU row (this measures the host's rates) */
    for (int l = 0; l < s->layers; l++) { /* forward through the layers */
        float *x = s->buf + per * l, *w = x + nn, *out = w + nn;
        td_ops_cpu(TD_K_F32)->mm_fwd(out, TD_K_F32, x, w, NULL, s->n, s->n, s->n);
    }
    for (int l = s->layers - 1; l >= 0; l--) { /* backward in reverse, gradients accumulated */
        float *x = s->buf + per * l, *w = x + nn, *out = w + nn, *dx = out + nn, *dw = dx + nn;
        td_ops_cpu(TD_K_F32)->mm_bwd(dx, TD_K_F32, dw, NULL, out, x, w, s->n, s->n, s->n);
    }
}
static void linear_teardown(void *state) {
    linear_state *s = state;
    td_free(s->buf);
    td_free(s);
}

double td_calib_linear_gflops(int threads, int n) {
    g_linear_n = n;
    side_by_side f = {linear_setup, linear_round, linear_teardown, 4};
    return rate_side_by_side(threads, &f) / 1e9;
}

/* The optimizer over two 512-wide blocks: 6.3M parameters, 100 MB of
 * parameters, gradients and moments, through the table the trainer's
 * optimizer reads. Work: the elements. */
typedef struct { td_param_table t; float *p; double sink; } optim_state;

static void *optim_setup(void) {
    optim_state *s = td_alloc(sizeof *s, TD_MEM_OTHER);
    td_gpt_config cfg = {.L = 2, .H = 4, .C = 512, .T = 64, .V = 64};
    td_gpt_config_finish(&cfg);
    td_param_table_build(&s->t, &cfg, 1);
    s->p = td_alloc(4 * s->t.numel * sizeof(float), TD_MEM_OTHER);
    for (size_t i = 0; i < 4 * s->t.numel; i++) s->p[i] = (float)(i % 5) * 0.01f;
    s->sink = 0;
    g_work = (double)s->t.numel;
    return s;
}
static void optim_round(void *state, int round) {
    optim_state *s = state;
    size_t n = s->t.numel;
    float *p = s->p, *g = p + n, *m = g + n, *v = m + n;
    td_optim_config o = {.lr = 1e-4f, .min_lr = 1e-5f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .clip = 1.0f, .warmup = 0, .max_steps = 100};
    double norm = sqrt(td_sumsq(g, n)); /* the clipping norm reads every gradient first */
    td_adamw_update(p, g, m, v, 0, n, &s->t, &o, o.lr, round + 1, norm > 0 ? 1.0f : 0.0f);
    s->sink += norm;
}
static void optim_teardown(void *state) {
    optim_state *s = state;
    td_free(s->p);
    td_param_table_free(&s->t);
    td_free(s);
}

double td_calib_optimizer_melems(int threads) {
    side_by_side f = {optim_setup, optim_round, optim_teardown, 4};
    return rate_side_by_side(threads, &f) / 1e6;
}
