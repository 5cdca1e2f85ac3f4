/* `trident plan --calibrate [--out FILE]`: measures this machine and saves
 * the profile the planner's `local` cluster reads (formats_profile.h).
 * Run it under mpirun with as many ranks as the layouts to plan (2-4): the
 * first rank measures GEMM rates per thread count and size and memory
 * bandwidth while the others wait; then point-to-point between ranks 0 and 1
 * and all-reduce / all-gather over groups of 2 .. n ranks, each as an
 * alpha-beta fit of a small and a large payload through trident's own
 * calls on shared buffers, as the trainer's gradients are. The planner never
 * links this file (it needs no communicator, docs/design.md principle 6). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/files.h"
#include "trident/comm.h"
#include "trident/flags.h"
#include "trident/kernels.h"
#include "trident/planner.h"
#include "calibrate_rates.h"

/* one timed call of a collective or a ping-pong (peer: rank 1) */
typedef void (*call_fn)(td_comm *c, float *buf, float *out, size_t count, int peer);

static void do_allreduce(td_comm *c, float *buf, float *out, size_t count, int peer) {
    (void)out, (void)peer;
    td_allreduce(c, buf, count, TD_F32, TD_SUM);
}
static void do_allgather(td_comm *c, float *buf, float *out, size_t count, int peer) {
    (void)peer;
    td_all_gather(c, buf, out, count / (size_t)td_comm_size(c), TD_F32);
}
static void do_pingpong(td_comm *c, float *buf, float *out, size_t count, int peer) {
    (void)out;
    if (td_comm_rank(c) == 0) {
        td_send(c, buf, count, TD_F32, peer, 7);
        td_recv(c, buf, count, TD_F32, peer, 8);
    } else if (td_comm_rank(c) == peer) {
        td_recv(c, buf, count, TD_F32, 0, 7);
        td_send(c, buf, count, TD_F32, 0, 8);
    }
}

/* Seconds of one call: the slowest rank's mean, best of 3 trials. */
static double time_call(td_comm *c, call_fn f, float *buf, float *out, size_t count, int iters) {
    double best = 1e30;
    f(c, buf, out, count, 1); /* warm-up: first touch, MPI set-up */
    for (int trial = 0; trial < 3; trial++) {
        td_barrier(c);
        double t0 = td_now_ms();
        for (int i = 0; i < iters; i++) f(c, buf, out, count, 1);
        float t = (float)((td_now_ms() - t0) / 1e3 / iters);
        td_allreduce(c, &t, 1, TD_F32, TD_MAX);
        if (t < best) best = t;
    }
    return best;
}

/* alpha (us) and bus GB/s through t(bytes) = alpha + bus_factor bytes / bw
 * from a small and a large payload; alpha is clamped at 0 (a shared
 * machine's noise can put the line's foot below it). */
static void fit(td_comm *c, call_fn f, double bus, float *buf, float *out, double *alpha_us, double *gbs) {
    /* large: 32 MiB, beyond the caches, as a model's gradients are */
    size_t n = (size_t)td_comm_size(c), small = 1024 * n, large = ((size_t)32 << 20) / 4 / n * n;
    double ts = time_call(c, f, buf, out, small, 200), tl = time_call(c, f, buf, out, large, 4);
    double bs = bus * 4.0 * small, bl = bus * 4.0 * large;
    double bw = tl > ts ? (bl - bs) / (tl - ts) : bl / tl;
    *gbs = bw / 1e9;
    *alpha_us = fmax(0, (ts - bs / bw) * 1e6);
}

/* A barrier whose waiters sleep: rank 0 measures the cores alone, and an
 * MPI barrier's waiters would spin on them (4 ranks on 2 cores took a third
 * of rank 0's GEMM rate here). It has no timeout of its own (rank 0's
 * measurements take seconds to minutes with the cores): if rank 0 dies, the
 * heartbeat (src/comm/heartbeat.c) ends the waiters with its report. */
static void quiet_wait(td_comm *w) {
    float token = 1;
    if (td_comm_rank(w) == 0) {
        for (int r = 1; r < td_comm_size(w); r++) td_send(w, &token, 1, TD_F32, r, 9);
        return;
    }
    td_request *q = td_request_new();
    td_recv_start(q, w, &token, 1, TD_F32, 0, 9);
    while (!td_test(q)) usleep(2000);
    td_request_free(q);
}

static void mkdirs_for(const char *path) {
    char d[512];
    snprintf(d, sizeof d, "%s", path);
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(d, 0755);
            *p = '/';
        }
}

int td_calibrate_main(int argc, char **argv) {
    const char *out = NULL;
    int calibrate = 0, max_threads = 0;
    td_flag flags[] = {
        {"--calibrate", TD_FLAG_BOOL, &calibrate, "measure this machine for --cluster local", NULL},
        {"--out", TD_FLAG_STR, &out, "where to save the profile (default: td_plan_profile_path)", NULL},
        {"--max-threads", TD_FLAG_INT, &max_threads, "largest thread count to measure (the cores)", "[1, 63]"},
    };
    td_flags_parse("plan --calibrate", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    char path[512];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else
        td_plan_profile_path(path, sizeof path);
    /* refused before the measuring: the rename at the end would replace a
     * FIFO or a device, and a directory fails only after minutes */
    struct stat st;
    TD_CHECK(stat(path, &st) != 0 || S_ISREG(st.st_mode),
             "plan --calibrate --out %s is %s, not a regular file; name a file for the profile", path,
             td_file_kind(st.st_mode));
    td_comm *w = td_comm_world();
    int rank = td_comm_rank(w), n = td_comm_size(w);
    td_profile p;
    memset(&p, 0, sizeof p);
    p.cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    p.mem_bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    int tmax = max_threads ? max_threads : p.cores < 63 ? p.cores : 63;
    if (rank == 0) {
        /* compute alone: the other ranks sleep in quiet_wait below */
        static const int sizes[] = {32, 64, 128, 256, 512};
        for (int t = 1; t <= tmax; t = t < tmax && 2 * t > tmax ? tmax : 2 * t) {
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && p.n_gemm < TD_PROFILE_MAX; k++) {
                p.gemm[p.n_gemm].threads = t, p.gemm[p.n_gemm].n = sizes[k];
                p.gemm[p.n_gemm++].gflops = td_calib_linear_gflops(t, sizes[k]);
            }
            /* in the L2 cache, in the L3 and beyond it, on most machines */
            static const size_t copy_sizes[] = {(size_t)256 << 10, (size_t)4 << 20, (size_t)64 << 20};
            for (size_t k = 0; k < 3 && p.n_bw < TD_PROFILE_MAX; k++) {
                p.bw[p.n_bw].threads = t, p.bw[p.n_bw].bytes = (double)copy_sizes[k];
                p.bw[p.n_bw++].gbs = td_calib_copy_gbs(t, copy_sizes[k]);
            }
            if (p.n_opt < TD_PROFILE_MAX) {
                p.opt[p.n_opt].threads = t;
                p.opt[p.n_opt++].melems = td_calib_optimizer_melems(t);
            }
            if (t == tmax) break;
        }
    }
    quiet_wait(w);
    size_t cap = ((size_t)32 << 20) + 4096;
    float *buf = td_comm_alloc_shared(w, cap, TD_MEM_COMM), *gat = td_alloc(cap, TD_MEM_COMM);
    memset(buf, 0, cap);
    if (n >= 2) {
        double a, g;
        fit(w, do_pingpong, 2.0, buf, gat, &a, &g); /* a round trip moves the message twice */
        p.p2p_alpha_us = a / 2, p.p2p_gbs = g;
        for (int k = 2; k <= n && p.n_coll + 2 <= TD_PROFILE_MAX; k++) {
            td_comm *sub = td_comm_split(w, rank < k ? 0 : -1, rank, "calibrate");
            float *sb = sub ? td_comm_alloc_shared(sub, cap, TD_MEM_COMM) : NULL;
            if (sub) {
                memset(sb, 0, cap);
                for (int op = 0; op < TD_PROF_NOPS; op++) {
                    double bus = op == TD_PROF_ALLREDUCE ? 2.0 * (k - 1) / k : (double)(k - 1) / k;
                    fit(sub, op == TD_PROF_ALLREDUCE ? do_allreduce : do_allgather, bus, sb, gat, &a, &g);
                    p.coll[p.n_coll].op = op, p.coll[p.n_coll].ranks = k;
                    p.coll[p.n_coll].alpha_us = a, p.coll[p.n_coll++].gbs = g;
                }
                td_comm_free_shared(sub, sb, TD_MEM_COMM);
                td_comm_free(sub);
            }
            td_barrier(w);
        }
    } else { /* one process: nothing between ranks to measure; memory copies stand in */
        p.p2p_alpha_us = 1, p.p2p_gbs = p.bw[p.n_bw - 1].gbs / 2;
    }
    td_comm_free_shared(w, buf, TD_MEM_COMM);
    td_free(gat);
    if (rank != 0) return 0;
    if (n < 2)
        td_log("trident: warning: plan --calibrate ran in one process: no point-to-point or collective "
               "figures (run it under mpirun -np 2 or more for them)\n");
    char *text = td_profile_format(&p);
    TD_CHECK(text, "plan --calibrate: out of memory");
    td_profile again;
    td_err e;
    TD_CHECK(td_profile_parse(text, strlen(text), &again, &e) == 0, "internal: the profile written does not parse: %s",
             e.msg);
    mkdirs_for(path);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const char *why;
    FILE *f = td_fopen_output(tmp, &why);
    TD_CHECK(f, "--out %s: cannot write the profile there (%s: %s)", path, tmp, why);
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    TD_CHECK(ok && rename(tmp, path) == 0, "--out %s: writing the profile failed", path);
    printf("calibration profile for --cluster local saved to %s (%d cores, %.1f GB):\n", path, p.cores,
           p.mem_bytes / 1e9);
    for (int k = 0; k < p.n_gemm; k++)
        printf("  gemm threads %d n %4d: %8.2f GFLOP/s\n", p.gemm[k].threads, p.gemm[k].n, p.gemm[k].gflops);
    for (int k = 0; k < p.n_bw; k++)
        printf("  memory copy threads %d of %6.0f KiB each: %.2f GB/s\n", p.bw[k].threads, p.bw[k].bytes / 1024,
               p.bw[k].gbs);
    for (int k = 0; k < p.n_opt; k++)
        printf("  optimizer step threads %d: %.1f M elements/s\n", p.opt[k].threads, p.opt[k].melems);
    printf("  point-to-point: %.2f us + bytes / %.2f GB/s\n", p.p2p_alpha_us, p.p2p_gbs);
    for (int k = 0; k < p.n_coll; k++)
        printf("  %-9s %d ranks: %.2f us + bus bytes / %.2f GB/s\n", td_prof_op_name(p.coll[k].op),
               p.coll[k].ranks, p.coll[k].alpha_us, p.coll[k].gbs);
    free(text);
    return 0;
}
