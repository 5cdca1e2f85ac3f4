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
 *              same position on every node, through MPI (pieces.c);
 *   4. all-gather inside the node, in place, straight between the buffers;
 *   5. unstage into the payload (bf16 rounded once, from the fp32 sum).
 * Summation order of element i: the node sums in node-rank order, then MPI's
 * all-reduce of the node sums over the node-crossing group (the flat MPI path
 * makes the same promise: every rank gets the same bits, since one MPI result
 * is broadcast in step 3 and every rank copies the same blocks in step 4).
 *
 * A started (nonblocking) all-reduce on such a group runs to completion when
 * it starts: its three steps are collectives over other groups. */
#include <string.h>

#include "comm_internal.h"

int td_hier_takes(const td_comm *c, td_redop op, size_t count) {
    /* max is not a sum that a reduce-scatter can split: MPI does it */
    return c->transport == TD_TRANSPORT_HIER && op == TD_SUM && count > 0;
}

void td_hier_allreduce(td_comm *c, void *buf, size_t count, td_dtype dt, td_redop op,
                       const char *file, int line) {
    td_comm *in = c->intra, *x = c->inter;
    int m = in->size, me = in->rank;
    td_comm_flush(c); /* pieces started earlier on c go out first, as for any call on c */
    if (!c->stage) c->stage = td_shm_stage(in->shm, &c->stage_elems);
    size_t round = td_min_sz(td_comm_piece_bytes() / sizeof(float) * (size_t)m,
                             c->stage_elems - 16 * (size_t)m);    size_t es = td_dtype_size(dt);
    uint64_t seq = td_trace_begin(TD_OP_ALLREDUCE, c, dt, count * es, -1, file, line);
    td_trace_count_sent(count * es);
    td_trace_nested(1); /* the steps below are this call's, counted above */
    float *st = c->stage;
    for (size_t o = 0; o < count; o += round) {
        size_t n = td_min_sz(round, count - o);
        size_t s = ((n + (size_t)m - 1) / (size_t)m + 15) & ~(size_t)15;
        if (dt == TD_BF16)
            td_bf16_to_f32_n(st, (const uint16_t *)buf + o, n);
        else
            memcpy(st, (const float *)buf + o, n * sizeof(float));
        memset(st + n, 0, (s * (size_t)m - n) * sizeof(float));
        float *mine = st + (size_t)me * s;
        td_reduce_scatter(in, st, mine, s, TD_F32);
        td_allreduce(x, mine, s, TD_F32, op);
        td_all_gather(in, mine, st, s, TD_F32);
        if (dt == TD_BF16)
            td_f32_to_bf16_n((uint16_t *)buf + o, st, n);
        else
            memcpy((float *)buf + o, st, n * sizeof(float));
    }
    td_trace_nested(0);
    td_trace_end(seq);
}

void td_hier_free(td_comm *c) {
    c->stage = NULL; /* intra's ring: freed with it */
    c->stage_elems = 0;
    td_comm_free(c->intra);
    td_comm_free(c->inter);
    c->intra = c->inter = NULL;
}
