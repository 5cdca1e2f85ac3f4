/* `trident bench comm`: bus bandwidth of each collective per payload size,
 * one raw MPI call of the whole payload beside trident's pieces, then a
 * piece-size sweep of all-reduce that the default piece size follows.
 *
 * Bus bandwidth as nccl-tests defines it, so numbers compare across rank
 * counts: all-reduce bytes*2(n-1)/n/t, reduce-scatter, all-gather and
 * all-to-all bytes*(n-1)/n/t (bytes = the whole gathered / scattered buffer,
 * an all-to-all's send buffer: equal blocks, as MPI_Alltoallv beside it),
 * broadcast bytes/t. A time is the slowest rank's mean over the iterations of a trial;
 * the best of the trials is kept, and the raw and trident trials alternate so
 * drifts of a shared machine hit both alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_BCAST, OP_ALL_TO_ALL_V, N_OPS };
/* raw: one MPI call (raw_plain: on plain buffers); td: blocking trident call
 * on shared buffers; nb: the same
 * as start + wait; plain: blocking trident call on plain buffers;
 * inb: raw MPI_Iallreduce + MPI_Wait of each piece (libnbc without our polling);
 * pieces(_nb): trident call (start + wait) with the shared-memory ring off. */
enum {
    IMPL_RAW,
    IMPL_TD,
    IMPL_NB,
    IMPL_INB,
    IMPL_PIECES,
    IMPL_PIECES_NB,
    IMPL_PLAIN,
    IMPL_RAW_PLAIN
};

static const char *g_names[N_OPS] = {"allreduce", "reduce_scatter", "all_gather", "broadcast",
                                     "all_to_all_v"};

typedef struct {
    td_comm *c;
    int n;
    float *a, *b;   /* [max_bytes/4] each, plain memory (td_alloc) */
    float *sa, *sb; /* the same from td_comm_alloc_shared, as the trainer's gradients */
    td_request *q;
    size_t *cnt, *dsp; /* [n]: all-to-all blocks of the payload size at hand */
    int *icnt, *idsp;  /* the same for MPI_Alltoallv */
} bench;

/* Equal all-to-all blocks of `per` elements, back to back. */
static void a2a_blocks(bench *B, size_t per) {
    for (int j = 0; j < B->n; j++) {
        B->cnt[j] = per, B->dsp[j] = per * (size_t)j;
        B->icnt[j] = (int)per, B->idsp[j] = (int)(per * (size_t)j);
    }
}

static void run_once(bench *B, int op, int impl, size_t bytes) {
    MPI_Comm m = B->c->mpi;
    size_t count = bytes / 4, per = count / (size_t)B->n; /* per-rank block of rs / ag / a2a */
    if (op == OP_ALL_TO_ALL_V) a2a_blocks(B, per);
    if (impl == IMPL_INB) { /* allreduce only: MPI's nonblocking pieces, waited on */
        size_t pe = td_max_sz(1, td_comm_piece_bytes() / 4);
        for (size_t o = 0; o < count; o += pe) {
            MPI_Request r;
            int n = (int)td_min_sz(pe, count - o);
            TD_MPI(MPI_Iallreduce(MPI_IN_PLACE, B->a + o, n, MPI_FLOAT, MPI_SUM, m, &r));
            TD_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
        return;
    }
    if (impl == IMPL_RAW || impl == IMPL_RAW_PLAIN) {
        /* raw: the very buffers trident's own calls use (same payload, same
         * memory); raw plain: td_alloc memory, huge pages, MPI's best case */
        float *a = impl == IMPL_RAW ? B->sa : B->a, *b = impl == IMPL_RAW ? B->sb : B->b;
        switch (op) {
        case OP_ALLREDUCE:
            TD_MPI(MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM, m));
            break;
        case OP_REDUCE_SCATTER:
            TD_MPI(MPI_Reduce_scatter_block(a, b, (int)per, MPI_FLOAT, MPI_SUM, m));
            break;
        case OP_ALL_GATHER:
            TD_MPI(MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, m));
            break;
        case OP_BCAST:
            TD_MPI(MPI_Bcast(a, (int)count, MPI_FLOAT, 0, m));
            break;
        case OP_ALL_TO_ALL_V:
            TD_MPI(
                MPI_Alltoallv(a, B->icnt, B->idsp, MPI_FLOAT, b, B->icnt, B->idsp, MPI_FLOAT, m));
            break;
        }
        return;
    }
    td_request *q = impl == IMPL_NB || impl == IMPL_PIECES_NB ? B->q : NULL;
    /* trident's own calls run on the shared buffers; plain and pieces on
     * the same plain buffers as raw MPI */
    int shared = impl == IMPL_TD || impl == IMPL_NB;
    float *a = shared ? B->sa : B->a, *b = shared ? B->sb : B->b;
    int shm = td_comm_shm();
    /* MPI in pieces even where a ring is open */
    if (impl == IMPL_PIECES || impl == IMPL_PIECES_NB) td_comm_set_shm(0);
    switch (op) {
    case OP_ALLREDUCE:
        if (q)
            td_allreduce_start(q, B->c, a, count, TD_F32, TD_SUM);
        else
            td_allreduce(B->c, a, count, TD_F32, TD_SUM);
        break;
    case OP_REDUCE_SCATTER:
        if (q)
            td_reduce_scatter_start(q, B->c, a, b, per, TD_F32);
        else
            td_reduce_scatter(B->c, a, b, per, TD_F32);
        break;
    case OP_ALL_GATHER:
        if (q)
            td_all_gather_start(q, B->c, a, b, per, TD_F32);
        else
            td_all_gather(B->c, a, b, per, TD_F32);
        break;
    case OP_BCAST:
        if (q)
            td_broadcast_start(q, B->c, a, count, TD_F32, 0);
        else
            td_broadcast(B->c, a, count, TD_F32, 0);
        break;
    case OP_ALL_TO_ALL_V:
        if (q)
            td_all_to_all_v_start(q, B->c, a, B->cnt, B->dsp, b, B->cnt, B->dsp, TD_F32);
        else
            td_all_to_all_v(B->c, a, B->cnt, B->dsp, b, B->cnt, B->dsp, TD_F32);
        break;
    }
    if (q) td_wait(q);
    td_comm_set_shm(shm);
}

/* Seconds per call: the slowest rank's mean over `iters` calls. */
static double trial(bench *B, int op, int impl, size_t bytes, int iters) {
    TD_MPI(MPI_Barrier(B->c->mpi));
    double t0 = td_now_ms();
    for (int i = 0; i < iters; i++) run_once(B, op, impl, bytes);
    double t = (td_now_ms() - t0) / 1000.0 / iters, tmax = 0;
    TD_MPI(MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, B->c->mpi));
    return tmax;
}

static double bus_factor(int op, int n) {
    if (op == OP_ALLREDUCE) return 2.0 * (n - 1) / n;
    if (op == OP_BCAST) return 1.0;
    return (double)(n - 1) / n;
}

static int auto_iters(size_t bytes, int iters) {
    if (iters > 0) return iters;
    size_t k = ((size_t)256 << 20) / td_max_sz(bytes, 1); /* ~256 MiB per trial */
    return (int)td_max_sz(3, td_min_sz(k, 200));
}

/* Best-of-trials bus bandwidth (GB/s) for each impl in impls[0..k), and in
 * *first that of impls[0]'s first call (the warm-up: MPI's temporary buffers
 * are page-faulted in on a first large call, which later calls reuse). */
static void measure(bench *B, int op, size_t bytes, int iters, int trials, const int *impls,
                    const int *inflight, int k, double *gbs, double *first) {
    double best[8];
    TD_ASSERT(k <= 8);
    for (int j = 0; j < k; j++) {
        td_comm_set_inflight(inflight ? inflight[j] : 0);
        double s = trial(B, op, impls[j], bytes, 1); /* warm-up: first-touch, MPI set-up */
        if (j == 0 && first) *first = (double)bytes * bus_factor(op, B->n) / s / 1e9;
        best[j] = 1e30;
    }
    for (int t = 0; t < trials; t++)
        for (int j = 0; j < k; j++) {
            td_comm_set_inflight(inflight ? inflight[j] : 0);
            double s = trial(B, op, impls[j], bytes, iters);
            if (s < best[j]) best[j] = s;
        }
    td_comm_set_inflight(0);
    for (int j = 0; j < k; j++) gbs[j] = (double)bytes * bus_factor(op, B->n) / best[j] / 1e9;
}

/* --hier: all-reduce on a group split with hierarchical all-reduce on,
 * beside the same ranks split with it off (flat: MPI in pieces), and one raw
 * MPI call; trials alternate. Needs ranks on 2+ nodes with equal counts
 * (e.g. TRIDENT_RANKS_PER_NODE=2 on 4 ranks). */
static int hier_bench(size_t lo, size_t hi, int iters, int trials) {
    td_comm *w = td_comm_world();
    td_comm_set_hier(0);
    td_comm *flat = td_comm_split(w, 0, td_comm_rank(w), "flat");
    td_comm_set_hier(1);
    td_comm *hier = td_comm_split(w, 0, td_comm_rank(w), "hier");
    char d[160], pb[32], sb[32];
    if (td_comm_transport(hier) != TD_TRANSPORT_HIER) {
        td_log("trident: error: bench comm --hier: the ranks do not form 2+ nodes with equal "
               "counts (%s); set TRIDENT_RANKS_PER_NODE, e.g. 2 on 4 ranks\n",
               td_comm_transport_desc(hier, d, sizeof d));
        td_comm_free(flat), td_comm_free(hier);
        return TD_EXIT_USAGE;
    }
    bench F = {.c = flat, .n = td_comm_size(flat), .a = td_alloc(hi, TD_MEM_COMM)};
    bench H = F;
    H.c = hier;
    td_log("trident bench comm --hier: %d ranks, %s; fp32 all-reduce bus bandwidth in GB/s, "
           "best of %d trials, piece %s\n  flat = MPI in pieces over all ranks; hier = "
           "trident's hierarchical all-reduce; raw = one MPI_Allreduce of the whole payload\n"
           "%10s %9s %9s %9s %8s\n",
           F.n, td_comm_transport_desc(hier, d, sizeof d), trials,
           td_fmt_bytes(pb, sizeof pb, (double)td_comm_piece_bytes()), "size", "raw", "flat",
           "hier", "hier/flat");
    for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
        size_t b = td_max_sz(bytes / 4 * 4, 4);
        int it = auto_iters(b, iters);
        double best[3] = {1e30, 1e30, 1e30};
        bench *Bs[3] = {&F, &F, &H};
        const int impls[3] = {IMPL_RAW_PLAIN, IMPL_PLAIN, IMPL_PLAIN};
        for (int j = 0; j < 3; j++) trial(Bs[j], OP_ALLREDUCE, impls[j], b, 1); /* warm-up */
        for (int t = 0; t < trials; t++)
            for (int j = 0; j < 3; j++) {
                double sec = trial(Bs[j], OP_ALLREDUCE, impls[j], b, it);
                if (sec < best[j]) best[j] = sec;
            }
        double g[3];
        for (int j = 0; j < 3; j++) g[j] = (double)b * bus_factor(OP_ALLREDUCE, F.n) / best[j] / 1e9;
        td_log("%10s %9.3f %9.3f %9.3f %7.2fx\n", td_fmt_bytes(sb, sizeof sb, (double)b), g[0],
               g[1], g[2], g[2] / g[1]);
    }
    td_free(F.a);
    td_comm_free(flat);
    td_comm_free(hier);
    return 0;
}

int td_comm_bench_run(const td_comm_bench_opts *opt) {
    size_t lo = opt->lo, hi = opt->hi;
    int iters = opt->iters, trials = opt->trials, sweep = opt->sweep;
    const char *ops = opt->ops; /* comma-separated op names; NULL = all */
    TD_CHECK(lo >= 4 && lo <= hi && hi <= ((size_t)1 << 30),
             "bench comm: need 4 <= --min <= --max <= 1G");
    TD_CHECK(trials >= 1 && iters >= 0, "bench comm: --trials >= 1 and --iters >= 1");
    if (opt->piece) td_comm_set_piece_bytes(opt->piece);

    if (td_comm_size(td_comm_world()) < 2) {
        td_log("trident: error: bench comm measures traffic between ranks; run it under "
               "mpirun -np 2 (or more)\n");
        return TD_EXIT_USAGE;
    }
    if (opt->hier) return hier_bench(lo, hi, iters, trials);
    bench B = {.c = td_comm_world(), .n = td_comm_size(td_comm_world()), .q = td_request_new()};
    B.cnt = calloc((size_t)B.n, sizeof *B.cnt), B.dsp = calloc((size_t)B.n, sizeof *B.dsp);
    B.icnt = calloc((size_t)B.n, sizeof *B.icnt), B.idsp = calloc((size_t)B.n, sizeof *B.idsp);
    TD_ASSERT(B.cnt && B.dsp && B.icnt && B.idsp);
    B.a = td_alloc(hi, TD_MEM_COMM);
    B.b = td_alloc(hi, TD_MEM_COMM);
    B.sa = td_comm_alloc_shared(B.c, hi, TD_MEM_COMM);
    B.sb = td_comm_alloc_shared(B.c, hi, TD_MEM_COMM);
    char pb[32], sb[32];
    const char *alg = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    td_log("trident bench comm: %d ranks, fp32, piece %s, nonblocking in-flight %d, best of %d "
           "trials%s; bus bandwidth in GB/s (nccl-tests definition)%s%s\n",
           B.n, td_fmt_bytes(pb, sizeof pb, (double)td_comm_piece_bytes()), td_comm_inflight(),
           trials, iters ? "" : ", ~256 MiB per trial", alg ? "; libnbc iallreduce algorithm " : "",
           alg ? alg : "");
    int shm = B.c->shm != NULL;
    td_log("  raw = one MPI call of the whole payload on the buffers trident uses;\n"
           "  raw plain = the same on td_alloc buffers (huge pages: MPI's best case here);\n"
           "  trident = blocking call on buffers from td_comm_alloc_shared, as the trainer's "
           "gradients (%s);\n"
           "  plain = blocking call on the plain buffers (%s);\n"
           "  pieces = blocking call through MPI in pieces, plain buffers; nb = trident start + "
           "wait;\n"
           "  ratio = trident / raw; vs plain = trident / raw plain; raw 1st = the first raw "
           "call of that size alone\n",
           shm ? "all-reduce, reduce-scatter, all-gather and all-to-all straight between the "
                 "ranks' buffers, broadcast MPI in pieces"
               : "MPI in pieces: no shared ring (ranks on several nodes, or TRIDENT_COMM_SHM=0)",
           shm ? "all-reduce through the staging ring, all-to-all one MPI message per peer"
               : "MPI in pieces");
    const int impls[6] = {IMPL_RAW, IMPL_RAW_PLAIN, IMPL_TD, IMPL_PLAIN, IMPL_PIECES, IMPL_NB};
    for (int op = 0; op < N_OPS; op++) {
        if (ops && !strstr(ops, g_names[op])) continue;
        td_log("\n%-14s %10s %7s %7s %7s %7s %7s %7s %7s %8s %7s\n", g_names[op], "size", "raw",
               "raw", "trident", "plain", "pieces", "nb", "ratio", "vs plain", "raw");
        td_log("%-14s %10s %7s %7s %7s %7s %7s %7s %7s %8s %7s\n", "", "", "", "plain", "", "", "",
               "", "", "", "1st");
        for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
            size_t b = bytes / (4 * (size_t)B.n) * 4 * (size_t)B.n; /* whole blocks per rank */
            if (b == 0) continue;
            double g[6], first = 0;
            measure(&B, op, b, auto_iters(b, iters), trials, impls, NULL, 6, g, &first);
            td_log("%-14s %10s %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %6.2fx %7.2fx %7.2f\n", "",
                   td_fmt_bytes(sb, sizeof sb, (double)b), g[0], g[1], g[2], g[3], g[4], g[5],
                   g[2] / g[0], g[2] / g[1], first);
        }
    }
    size_t b = hi / (4 * (size_t)B.n) * 4 * (size_t)B.n;
    if (sweep && shm) {
        size_t keep = td_comm_shm_chunk();
        td_log("\nshm chunk sweep: allreduce of %s through the shared-memory ring\n%10s %9s\n",
               td_fmt_bytes(sb, sizeof sb, (double)b), "chunk", "trident");
        const int sw_impls[1] = {IMPL_PLAIN};
        for (size_t p = (size_t)16 << 10; p <= ((size_t)1 << 20); p *= 2) {
            td_comm_set_shm_chunk(p);
            double g[1];
            measure(&B, OP_ALLREDUCE, b, auto_iters(b, iters), trials, sw_impls, NULL, 1, g, NULL);
            td_log("%10s %9.3f\n", td_fmt_bytes(pb, sizeof pb, (double)p), g[0]);
        }
        td_comm_set_shm_chunk(keep);
    }
    if (sweep) {
        size_t keep = td_comm_piece_bytes();
        td_log("\npiece sweep: allreduce of %s through MPI (raw single call: measured above)\n",
               td_fmt_bytes(sb, sizeof sb, (double)b));
        td_log("%10s %9s %9s %9s %9s %9s\n", "piece", "pieces", "nb x1", "nb x2", "nb x4",
               "Iar+Wait");
        const int sw_impls[5] = {IMPL_PIECES, IMPL_PIECES_NB, IMPL_PIECES_NB, IMPL_PIECES_NB,
                                 IMPL_INB};
        const int sw_inflight[5] = {0, 1, 2, 4, 0};
        for (size_t p = (size_t)64 << 10; p <= ((size_t)16 << 20) && p <= b; p *= 2) {
            td_comm_set_piece_bytes(p);
            double g[5];
            measure(&B, OP_ALLREDUCE, b, auto_iters(b, iters), trials, sw_impls, sw_inflight, 5, g,
                    NULL);
            td_log("%10s %9.3f %9.3f %9.3f %9.3f %9.3f\n", td_fmt_bytes(pb, sizeof pb, (double)p),
                   g[0], g[1], g[2], g[3], g[4]);
        }
        td_comm_set_piece_bytes(keep);
        td_log("  nb xK = trident start + wait through MPI with K pieces in flight; Iar+Wait = "
               "MPI_Iallreduce + MPI_Wait per piece, no trident polling\n");
    }
    td_request_free(B.q);
    free(B.cnt), free(B.dsp), free(B.icnt), free(B.idsp);
    td_comm_free_shared(B.c, B.sa, TD_MEM_COMM);
    td_comm_free_shared(B.c, B.sb, TD_MEM_COMM);
    td_free(B.a);
    td_free(B.b);
    return 0;
}
