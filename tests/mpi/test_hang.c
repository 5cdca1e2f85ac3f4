/* A collective that one rank never enters must end the job within the comm
 * timeout, with a report that names the stuck call, its group and its world
 * ranks. Expected to FAIL: registered through expect_fail.sh, which checks
 * the non-zero exit, the time taken and the report text.
 *
 *   test_hang blocking     rank 0: td_allreduce on "dp"   (watchdog thread)
 *   test_hang nonblocking  rank 0: start + td_wait        (polling wait)
 *   test_hang recv         rank 0: td_recv from rank 1    (p2p wait)
 *   test_hang a2a          rank 0: td_all_to_all_v on "dp" (a plain buffer:
 *                          MPI messages after the descriptors agree)
 *   test_hang shared       rank 0: td_allreduce inside a td_comm_alloc_shared
 *                          buffer (straight between buffers: the shm wait)
 * Rank 1 meanwhile sleeps 30 s outside MPI; mpirun kills it after the abort.
 * With a second argument rank 1 fails instead, and the heartbeat, not the
 * comm timeout (60 s then), must end rank 0's wait with a report naming it:
 *   test_hang MODE kill    rank 1 SIGKILLs itself (a death)
 *   test_hang MODE stop    rank 1 SIGSTOPs itself (silence; 2 s heartbeat timeout)
 *   test_hang mismatch     both ranks all-reduce a shared buffer, with
 *                          different counts: one clear error, not garbage
 * Transport disagreements (each rank's path is chosen from where its buffer
 * lies): one clear error naming both descriptors, not a hang:
 *   test_hang placement    rank 1 all-reduces a plain buffer (staging ring)
 *                          where rank 0 passes a shared one (direct)
 *   test_hang placement_rs reduce-scatter, rank 0 shared (direct), rank 1
 *                          plain (MPI), blocking
 *   test_hang placement_nb all-gather started nonblocking, rank 0 plain
 *                          (MPI pieces), rank 1 shared (direct)
 *   test_hang dtype        all-reduce of a plain buffer, fp32 on rank 0,
 *                          bf16 on rank 1 (both through the ring)
 * All-to-all-v whose counts disagree (rank 1 sends 3 elements to rank 0,
 * which expects 4): one line naming both ranks, not a hang or short data:
 *   test_hang a2a_count_mpi     plain buffers (MPI messages)
 *   test_hang a2a_count_shared  send buffers in a shared one (direct) */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/comm.h"

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_comm *w = td_comm_world();
    int me = td_comm_rank(w);
    const char *mode = argc > 1 ? argv[1] : "blocking";
    TD_CHECK(td_comm_size(w) == 2, "run test_hang with 2 ranks");
    const char *fails = argc > 2 ? argv[2] : NULL;
    TD_CHECK(!fails || !strcmp(fails, "kill") || !strcmp(fails, "stop"),
             "unknown failure '%s'; use kill or stop", fails);
    td_comm_set_timeout(fails ? 60.0 : 2.0);
    td_comm_set_heartbeat_timeout(2.0);
    td_comm *dp = td_comm_split(w, 0, me, "dp");
    float x[1024];
    memset(x, 0, sizeof x);
    td_allreduce(dp, x, 16, TD_F32, TD_SUM); /* a few good calls for the ring */
    float *sh = td_comm_alloc_shared(dp, sizeof x, TD_MEM_OTHER);
    td_allreduce(dp, sh, 16, TD_F32, TD_SUM);
    td_barrier(w);
    if (!strcmp(mode, "mismatch")) {
        td_allreduce(dp, sh, me ? 512 : 1024, TD_F32, TD_SUM);
        fprintf(stderr, "test_hang: mismatched all-reduce returned\n");
        td_comm_finalize();
        return 0;
    }
    if (!strncmp(mode, "placement", 9) || !strcmp(mode, "dtype")) {
        float *plain = x, *shared = sh, *mine = me ? plain : shared; /* rank 0 shared */
        if (!strcmp(mode, "placement")) {
            td_allreduce(dp, mine, 256, TD_F32, TD_SUM);
        } else if (!strcmp(mode, "placement_rs")) {
            td_reduce_scatter(dp, mine, mine + me * 128, 128, TD_F32);
        } else if (!strcmp(mode, "placement_nb")) {
            float *in = me ? shared : plain; /* rank 0 plain this time */
            td_request *q = td_request_new();
            td_all_gather_start(q, dp, in + me * 128, in, 128, TD_F32);
            td_wait(q);
            td_request_free(q);
        } else {
            td_allreduce(dp, plain, 256, me ? TD_BF16 : TD_F32, TD_SUM);
        }
        fprintf(stderr, "test_hang: mismatched %s returned\n", mode);
        td_comm_finalize();
        return 0;
    }
    if (!strncmp(mode, "a2a_count", 9)) {
        float *send = !strcmp(mode, "a2a_count_shared") ? sh : x;
        size_t sc[2] = {4, 4}, rc[2] = {4, 4}, displs[2] = {0, 4};
        sc[0] = me ? 3 : 4; /* rank 1 sends 3 to rank 0, which expects 4 */
        td_all_to_all_v(dp, send, sc, displs, x + 512, rc, displs, TD_F32);
        fprintf(stderr, "test_hang: mismatched all-to-all returned\n");
        td_comm_finalize();
        return 0;
    }
    if (me == 1 && fails) raise(!strcmp(fails, "kill") ? SIGKILL : SIGSTOP);
    if (me == 1) {
        sleep(30);
        fprintf(stderr, "test_hang: rank 1 woke up: the job was not ended\n");
        td_comm_finalize();
        return 0;
    }
    if (!strcmp(mode, "blocking")) {
        td_allreduce(dp, x, 1024, TD_F32, TD_SUM);
    } else if (!strcmp(mode, "nonblocking")) {
        td_request *q = td_request_new();
        td_allreduce_start(q, dp, x, 1024, TD_F32, TD_SUM);
        td_wait(q);
    } else if (!strcmp(mode, "shared")) {
        td_allreduce(dp, sh, 1024, TD_F32, TD_SUM);
    } else if (!strcmp(mode, "recv")) {
        td_recv(w, x, 1024, TD_F32, 1, 5);
    } else if (!strcmp(mode, "a2a")) {
        size_t counts[2] = {256, 256}, displs[2] = {0, 256};
        td_all_to_all_v(dp, x, counts, displs, x + 512, counts, displs, TD_F32);
    } else {
        td_fail("unknown mode '%s'; use blocking, nonblocking, recv, shared or mismatch", mode);
    }
    fprintf(stderr, "test_hang: rank 0 finished a call that could not finish\n");
    td_comm_finalize();
    return 0;
}
