/* The transports as rows (td_transport_ops in comm_internal.h): what each
 * does with a group's ops beyond the MPI piece engine, and how the start
 * report names it. The choice of row for a group is nodes.c's. */
#include <stdio.h>

#include "comm_internal.h"

/* ---- shared memory ----------------------------------------------------- */

/* On a group with a shared ring, every all-reduce, reduce-scatter and
 * all-gather publishes its descriptor (shm_agree.c). Takes r when it runs in
 * shared memory: every all-reduce (straight between shared buffers, else
 * through the ring), and fp32 reduce-scatter / all-gather whose input lies
 * in a shared buffer. Returns 0 otherwise (MPI pieces then, which wait for
 * the peers' descriptors when r->agree). */
static int shm_begin(td_request *r) {
    static const td_shm_kind kinds[TD_OP_N] = {[TD_OP_ALLREDUCE] = TD_SHM_ALLREDUCE,
                                               [TD_OP_REDUCE_SCATTER] = TD_SHM_REDUCE_SCATTER,
                                               [TD_OP_ALL_GATHER] = TD_SHM_ALL_GATHER};
    td_shm *s = r->comm->shm;
    r->agree = 0;
    if (!s || r->count == 0) return 0;
    if (r->op != TD_OP_ALLREDUCE && r->op != TD_OP_REDUCE_SCATTER && r->op != TD_OP_ALL_GATHER)
        return 0;
    const void *send = r->op == TD_OP_ALLREDUCE ? r->buf : r->send;
    if (td_shm_begin(&r->shm, s, kinds[r->op], send, r->buf, r->count, r->dt, r->redop,
                     td_comm_shm(), r->seq, r->file, r->line))
        return 1;
    r->agree = 1;
    return 0;
}

static int shm_progress(td_request *r, int *moved) {
    int done = td_shm_progress(&r->shm);
    *moved = r->shm.moved;
    return done;
}

/* Blocking: through shared memory when shm_begin takes the op; an MPI op on
 * the group first waits for the peers' descriptors. */
static int shm_run(td_request *r) {
    td_comm_flush(r->comm); /* MPI pieces started earlier on the group go out first */
    if (!shm_begin(r)) {
        if (r->agree) td_shm_agree_wait(&r->shm);
        r->agree = 0;
        return 0;
    }
    td_shm_run(&r->shm); /* polls the other requests while it waits */
    return 1;
}

/* What shm_begin sends through the ring with device buffers (never straight
 * between shared buffers: device memory never lies in one) is staged chunk
 * by chunk in the ring's slots (shm.c). */
static int shm_stages(const td_request *r) {
    static const int kinds[TD_OP_N] = {[TD_OP_ALLREDUCE] = TD_SHM_ALLREDUCE + 1,
                                       [TD_OP_REDUCE_SCATTER] = TD_SHM_REDUCE_SCATTER + 1,
                                       [TD_OP_ALL_GATHER] = TD_SHM_ALL_GATHER + 1};
    if (!r->comm->shm || r->count == 0 || !td_comm_shm() || !kinds[r->op]) return 0;
    const void *send = r->op == TD_OP_ALLREDUCE ? r->buf : r->send;
    return td_shm_ring_stages((td_shm_kind)(kinds[r->op] - 1), send, r->buf, r->dt);
}

static int shm_a2a_begin(td_request *r, size_t send_bytes) {
    return td_a2a_shm_begin(r, send_bytes);
}

static void shm_describe(const td_comm *c, char *out, size_t cap) {
    (void)c;
    snprintf(out, cap, "shared memory (one node)");
}

/* ---- hierarchical ------------------------------------------------------ */

static int hier_begin(td_request *r) {
    return r->op == TD_OP_ALLREDUCE && td_hier_takes(r->comm, r->redop, r->count);
}

/* A hierarchical all-reduce stages a device payload round by round in the
 * node ring's slots (hier.c). */
static int hier_stages(const td_request *r) {
    return r->op == TD_OP_ALLREDUCE && td_hier_takes(r->comm, r->redop, r->count);
}

static void hier_describe(const td_comm *c, char *out, size_t cap) {
    snprintf(out, cap,
             "hierarchical (%d nodes x %d: all-reduce through shared memory inside a node, "
             "MPI across)",
             c->n_nodes, c->per_node);
}

/* ---- MPI and self ------------------------------------------------------ */

static void mpi_describe(const td_comm *c, char *out, size_t cap) {
    snprintf(out, cap, "MPI (%d node%s)", c->n_nodes, c->n_nodes == 1 ? "" : "s");
}

static void self_describe(const td_comm *c, char *out, size_t cap) {
    (void)c;
    snprintf(out, cap, "self");
}

/* A group of one runs the MPI pieces on its one-member communicator (MPI
 * copies, or does nothing, in place). */
static const td_transport_ops g_rows[] = {
    [TD_TRANSPORT_SELF] = {.id = TD_TRANSPORT_SELF, .name = "self", .host_only = 1,
                           .describe = self_describe},
    [TD_TRANSPORT_SHM] = {.id = TD_TRANSPORT_SHM, .name = "shared memory", .host_only = 1,
                          .begin = shm_begin, .progress = shm_progress, .run = shm_run,
                          .a2a_begin = shm_a2a_begin, .stages = shm_stages,
                          .describe = shm_describe},
    [TD_TRANSPORT_HIER] = {.id = TD_TRANSPORT_HIER, .name = "hierarchical (shared memory and MPI)",
                           .host_only = 1, .begin = hier_begin, .progress = td_hier_progress,
                           .stages = hier_stages, .describe = hier_describe},
    [TD_TRANSPORT_MPI] = {.id = TD_TRANSPORT_MPI, .name = "MPI", .host_only = 1,
                          .describe = mpi_describe},
};

const td_transport_ops *td_transport_row(td_transport t) {
    TD_ASSERT((unsigned)t < sizeof g_rows / sizeof g_rows[0]);
    return &g_rows[t];
}

td_transport td_comm_transport(const td_comm *c) { return c->transport; }

const char *td_comm_transport_desc(const td_comm *c, char *out, size_t cap) {
    c->ops->describe(c, out, cap);
    return out;
}
