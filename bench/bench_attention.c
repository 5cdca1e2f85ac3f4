/* Attention alone, forward + backward: the blocked kernel (attention.h)
 * against the materialized one (td_attention_*, which stores att[B,NH,T,T]
 * and its gradient), fp32 and bf16, at C = 256, NH = 4 (hs 64), B = 1 and
 * T = 1024, 4096, 16384 (or the T values given after the thread count).
 * Times are the best of >= 3 calls (>= 300 ms) after one warm-up call:
 * interference only slows a call. The materialized kernel is refused where
 * its att plus datt would exceed LIMIT bytes. Prints figures and ratios of
 * one run; never fails on speed. Usage: bench_attention [threads] [T...];
 * $BENCH_C and $BENCH_NH override C and NH (e.g. GPT-2 small: 768, 12). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trident/attention.h"
#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

#define LIMIT (2.0 * 1024 * 1024 * 1024) /* bytes of att + datt the materialized run may use */

typedef struct {
    int T, C, NH, bf;
    float *qkv, *out, *dout, *dqkv, *lse, *att, *datt; /* fp32: [T,3C] [T,C] [T,C] [T,3C] ... */
    td_bf16 *qkvb, *outb, *doutb, *dqkvb, *attb;       /* bf16 twins */
} job;

static void run_blocked(job *j) {
    int C = j->C;
    td_attn_shape s = {1, j->T, j->T, j->NH, j->NH, C / j->NH, 3 * C, 3 * C, C, 0, 0, TD_ATTN_CAUSAL, 0, 0, NULL, 0};
    if (j->bf) {
        td_attn_bf16_forward(j->outb, j->lse, j->qkvb, j->qkvb + C, j->qkvb + 2 * C, &s, 0);
        td_attn_bf16_backward(j->dqkvb, j->dqkvb + C, j->dqkvb + 2 * C, j->doutb, j->outb, j->lse,
                              j->qkvb, j->qkvb + C, j->qkvb + 2 * C, &s);
    } else {
        td_attn_forward(j->out, j->lse, j->qkv, j->qkv + C, j->qkv + 2 * C, &s, 0);
        td_attn_backward(j->dqkv, j->dqkv + C, j->dqkv + 2 * C, j->dout, j->out, j->lse, j->qkv,
                         j->qkv + C, j->qkv + 2 * C, &s);
    }
}

static void run_mat(job *j) {
    if (j->bf) {
        td_attention_bf16_forward(j->outb, j->attb, j->qkvb, 1, j->T, j->C, j->NH);
        td_attention_bf16_backward(j->dqkvb, j->doutb, j->qkvb, j->attb, 1, j->T, j->C, j->NH);
    } else {
        td_attention_forward(j->out, j->att, j->qkv, 1, j->T, j->C, j->NH);
        td_attention_backward(j->dqkv, j->datt, j->dout, j->qkv, j->att, 1, j->T, j->C, j->NH);
    }
}

static double best_ms(void (*f)(job *), job *j) {
    f(j); /* warm-up: scratch growth, page faults, oneDNN primitives */
    double best = 1e30, start = td_now_ms();
    for (int rep = 0; rep < 3 || td_now_ms() - start < 300.0; rep++) {
        double a = td_now_ms();
        f(j);
        double dt = td_now_ms() - a;
        if (dt < best) best = dt;
    }
    return best;
}

static void *fill(size_t n, int bf, uint64_t stream) {
    void *p = td_alloc(n * (bf ? 2 : 4), TD_MEM_OTHER);
    float *f = bf ? td_alloc(n * 4, TD_MEM_OTHER) : p;
    for (size_t i = 0; i < n; i++) f[i] = (float)td_rng_normal(7, stream, i);
    if (bf) td_bf16_from_float_n(p, f, n), td_free(f);
    return p;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2, C = 256, NH = 4;
    if (getenv("BENCH_C")) C = atoi(getenv("BENCH_C"));
    if (getenv("BENCH_NH")) NH = atoi(getenv("BENCH_NH"));
    int Ts[16] = {1024, 4096, 16384}, nT = 3;
    if (argc > 2) {
        nT = 0;
        for (int i = 2; i < argc && nT < 16; i++) Ts[nT++] = atoi(argv[i]);
    }
    td_kernels_set_threads(threads);
    printf("attention fwd+bwd, B=1 C=%d NH=%d hs=%d causal, %d threads (best of >=3 calls)\n", C,
           NH, C / NH, threads);
    printf("%-5s %6s %12s %12s %8s %14s %14s\n", "type", "T", "blocked ms", "mat ms", "mat/blk",
           "blk out+lse B", "mat att B");
    for (int ti = 0; ti < nT; ti++)
        for (int bf = 0; bf < 2; bf++) {
            int T = Ts[ti];
            size_t nq = (size_t)T * 3 * C, no = (size_t)T * C, natt = (size_t)NH * T * T;
            int es = bf ? 2 : 4;
            job j = {.T = T, .C = C, .NH = NH, .bf = bf};
            j.lse = td_alloc((size_t)NH * T * 4, TD_MEM_OTHER);
            if (bf) {
                j.qkvb = fill(nq, 1, 1), j.doutb = fill(no, 1, 2);
                j.outb = td_alloc(no * 2, TD_MEM_OTHER), j.dqkvb = td_alloc(nq * 2, TD_MEM_OTHER);
            } else {
                j.qkv = fill(nq, 0, 1), j.dout = fill(no, 0, 2);
                j.out = td_alloc(no * 4, TD_MEM_OTHER), j.dqkv = td_alloc(nq * 4, TD_MEM_OTHER);
            }
            double blk = best_ms(run_blocked, &j);
            /* saved by the forward for the backward: out + lse vs att (+ its
             * gradient scratch, fp32 datt or the bf16 path's internal one) */
            double saved_blk = (double)no * es + (double)NH * T * 4;
            double att_bytes = (double)natt * es, mat_need = att_bytes + (double)natt * 4;
            char mat[32] = "refused", ratio[16] = "-";
            if (mat_need <= LIMIT) {
                if (bf)
                    j.attb = td_alloc(natt * 2, TD_MEM_OTHER);
                else
                    j.att = td_alloc(natt * 4, TD_MEM_OTHER),
                    j.datt = td_alloc(natt * 4, TD_MEM_OTHER);
                double m = best_ms(run_mat, &j);
                snprintf(mat, sizeof mat, "%.1f", m);
                snprintf(ratio, sizeof ratio, "%.2f", m / blk);
                td_free(j.att), td_free(j.datt), td_free(j.attb);
                j.att = j.datt = NULL, j.attb = NULL;
            }
            printf("%-5s %6d %12.1f %12s %8s %14.0f %14.0f", bf ? "bf16" : "fp32", T, blk, mat,
                   ratio, saved_blk, att_bytes);
            if (mat_need > LIMIT)
                printf("  (materialized needs %.1f GiB for att + datt > %.0f GiB limit)",
                       mat_need / (1024.0 * 1024 * 1024), LIMIT / (1024.0 * 1024 * 1024));
            printf("\n");
            fflush(stdout);
            td_free(j.qkv), td_free(j.dout), td_free(j.out), td_free(j.dqkv);
            td_free(j.qkvb), td_free(j.doutb), td_free(j.outb), td_free(j.dqkvb), td_free(j.lse);
            td_attn_release_scratch();
            td_lowp_release_scratch();
        }
    return 0;
}
