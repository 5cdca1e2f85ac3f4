/* Hierarchical all-reduce, for groups whose members span nodes with the same
 * number (2+) on each (td_transport HIER).
 *
 * Why: across nodes the network is the slow link. A flat all-reduce moves
 * each rank's whole payload over it; here the members of a node first
 * combine theirs through shared memory, and each then carries only 1/m of
 * the node's sum across (m members per node), in parallel with the others.
 *
 * Per round of up to m pieces (td_comm_piece_bytes() of fp32 each: the
 * cross-node step then moves one MPI piece per rank), n elements, with m
 * members per node and shard s = n/m rounded up to 16 elements (whole cache
 * lines):
 *   1. stage:  the payload goes into this rank's part of a shared fp32
 *              buffer of the node group (bf16 widened), zero-padded to m*s:
 *              the node group's staging-ring slots, which it holds anyway
 *              and uses for nothing else (so no memory is added);
 *   2. reduce-scatter inside the node, straight between the shared buffers
 *              (shm_direct.c): member p sums block p over the node's members
 *              in node-rank order;
 *   3. all-reduce of that block across nodes, among the members with the
 *              same position on every node: one MPI_Iallreduce;
 *   4. all-gather inside the node, in place, straight between the buffers;
 *   5. unstage into the payload (bf16 rounded once, from the fp32 sum).
 * A device payload (td_dev_is_device) is staged in step 1 by a download
 * (TD_HOST_COMM) and unstaged in step 5 by an upload: the node ring's
 * slots are its staging pool, a round at a time, so stage.c stages nothing
 * for it (the row's `stages`).
 * Summation order of element i: over a node's members in node-rank order,
 * then MPI's all-reduce of the node sums (every member of it gets the same
 * result, which the flat MPI path relies on too), so every rank ends with the
 * same bits.
 *
 * It runs inside the request engine (request.c progresses it like a ring
 * op), so a started all-reduce overlaps the caller's work as on the other
 * transports; a blocking one is start + wait. The steps use the group's own
 * node and cross-node groups, which nothing else touches, one all-reduce of
 * the group at a time (in start order, the same on every rank). */
#include <string.h>

#include "comm_internal.h"

enum { P_RS = 0, P_X, P_AG };

int td_hier_takes(const td_comm *c, td_redop op, size_t count) {
    /* max is not a sum that a reduce-scatter can split (MPI does it); with
     * the shared-memory paths off, so is everything */
    return c->transport == TD_TRANSPORT_HIER && op == TD_SUM && count > 0 && td_comm_shm();
}

/* Stages round r->hier_o of the payload and starts its reduce-scatter. */
static void round_begin(td_request *r) {
    td_comm *c = r->comm, *in = c->intra;
    size_t m = (size_t)in->size;
    if (!c->stage) c->stage = td_shm_stage(in->shm, &c->stage_elems); /* every member, 1st op */
    size_t round = td_min_sz(td_comm_piece_bytes() / sizeof(float) * m, c->stage_elems - 16 * m);
    size_t n = td_min_sz(round, r->count - r->hier_o), s = ((n + m - 1) / m + 15) & ~(size_t)15;
    float *st = c->stage;
    if (td_dev_is_device(r->buf, NULL, NULL)) { /* the ring's slots stage the round */
        size_t es = td_dtype_size(r->dt);
        td_shm_as_pool(in->shm, TD_F32); /* bf16 widens and rounds in place */
        td_dev_download(st, (const char *)r->buf + r->hier_o * es, n * es, TD_HOST_COMM);
        td_dev_event_wait(td_dev_event_record()); /* landed before the node reads it */
        if (r->dt == TD_BF16) td_bf16_to_f32_inplace(st, n);
    } else if (r->dt == TD_BF16) {
        td_bf16_to_f32_n(st, (const uint16_t *)r->buf + r->hier_o, n);
    } else {
        memcpy(st, (const float *)r->buf + r->hier_o, n * sizeof(float));
    }
    memset(st + n, 0, (s * m - n) * sizeof(float));
    r->hier_n = n;
    r->hier_s = s;
    r->hier_phase = P_RS;
    float *mine = st + (size_t)in->rank * s;
    /* inside the ring's region: always straight between the buffers */
    TD_ASSERT(td_shm_begin(&r->shm, in->shm, TD_SHM_REDUCE_SCATTER, st, mine, s, TD_F32, TD_SUM,
                           1, r->seq, r->file, r->line));
}

/* One step of the phase machine; 1 when it moved. */
static int step(td_request *r) {
    td_comm *c = r->comm, *in = c->intra;
    float *mine = c->stage + (size_t)in->rank * r->hier_s;
    int done = 0;
    switch (r->hier_phase) {
    case P_RS:
        if (!td_shm_progress(&r->shm)) return r->shm.moved;
        TD_MPI(MPI_Iallreduce(MPI_IN_PLACE, mine, (int)r->hier_s, MPI_FLOAT, MPI_SUM, c->inter->mpi,
                              &r->hier_mpi));
        r->hier_phase = P_X;
        return 1;
    case P_X:
        TD_MPI(MPI_Test(&r->hier_mpi, &done, MPI_STATUS_IGNORE));
        if (!done) return 0;
        TD_ASSERT(td_shm_begin(&r->shm, in->shm, TD_SHM_ALL_GATHER, mine, c->stage, r->hier_s,
                               TD_F32, TD_SUM, 1, r->seq, r->file, r->line));
        r->hier_phase = P_AG;
        return 1;
    default:
        if (!td_shm_progress(&r->shm)) return r->shm.moved;
        if (td_dev_is_device(r->buf, NULL, NULL)) {
            /* in place: the all-gather is complete on every rank, and nobody
             * reads this rank's stage again before its next round's op */
            size_t es = td_dtype_size(r->dt);
            if (r->dt == TD_BF16) td_f32_to_bf16_inplace(c->stage, r->hier_n);
            td_dev_upload((char *)r->buf + r->hier_o * es, c->stage, r->hier_n * es, TD_HOST_COMM);
            td_dev_stream_wait(td_dev_event_record());
        } else if (r->dt == TD_BF16) {
            td_f32_to_bf16_n((uint16_t *)r->buf + r->hier_o, c->stage, r->hier_n);
        } else {
            memcpy((float *)r->buf + r->hier_o, c->stage, r->hier_n * sizeof(float));
        }
        r->hier_o += r->hier_n;
        if (r->hier_o < r->count)
            round_begin(r);
        else
            r->hier_phase = -1; /* complete */
        return 1;
    }
}

int td_hier_progress(td_request *r, int *moved) {
    td_comm *c = r->comm;
    *moved = 0;
    if (c->hier_owner && c->hier_owner != r) return 0; /* an earlier one runs first */
    if (!c->hier_owner) {
        c->hier_owner = r;
        r->hier_o = 0;
        round_begin(r);
        *moved = 1;
    }
    while (r->hier_phase >= 0 && step(r)) *moved = 1;
    if (r->hier_phase >= 0) return 0;
    c->hier_owner = NULL;
    return 1;
}

void td_hier_free(td_comm *c) {
    c->stage = NULL; /* intra's ring: freed with it */
    c->stage_elems = 0;
    td_comm_free(c->intra);
    td_comm_free(c->inter);
    c->intra = c->inter = NULL;
}
