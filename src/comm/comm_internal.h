/* Internals shared by the comm sources: the group and request structs, the
 * MPI error check, the trace ring and the piece engine. Nothing outside
 * src/comm includes this (the public API is trident/comm.h). */
#ifndef TRIDENT_COMM_INTERNAL_H
#define TRIDENT_COMM_INTERNAL_H

#include <mpi.h>

#include "trident/backend.h" /* td_dev_event: staging of device buffers */
#include "trident/base.h"
#include "trident/comm.h"

#define TD_COMM_LABEL 64  /* "dp{0,1}" */
#define TD_COMM_NOTE 48   /* td_comm_note's text, with its NUL */
#define TD_MAX_INFLIGHT 8 /* slots per request; the budget is td_comm_inflight() */
#define TD_TRACE_RING 64

/* Every MPI call goes through this: a failure prints the call, the place and
 * MPI's own message, dumps the trace ring and MPI_Abort()s the job. */
#define TD_MPI(call)                                                                               \
    do {                                                                                           \
        int td_mpi_rc_ = (call);                                                                   \
        if (td_mpi_rc_ != MPI_SUCCESS) td_mpi_failed(td_mpi_rc_, #call, __FILE__, __LINE__);       \
    } while (0)
_Noreturn void td_mpi_failed(int rc, const char *what, const char *file, int line);

/* A transport (td_transport): how a group's ops travel, as a row of
 * functions the request engine (request.c) calls. Each group's row is chosen
 * when the group is created (nodes.c), alike on every member, and never
 * changes. NULL entries: the MPI piece engine (pieces.c, alltoall.c's
 * messages) does the work, so the MPI row is all NULL. A device-native
 * transport (NCCL) is a row with host_only 0: the engine then hands it the
 * caller's device buffers as they are; host_only rows get host copies of
 * them (stage.c) or refuse them. */
typedef struct td_transport_ops {
    td_transport id;
    const char *name; /* "MPI", "shared memory", ...: in refusals */
    int host_only;    /* 1: reads and writes host memory only (device buffers are staged) */
    /* A nonblocking collective (not all-to-all) begun, its buffers set: 1
     * when the transport runs it (progress then drives it), 0 when the MPI
     * pieces do; it may set r->agree (the pieces wait for the peers'
     * descriptors). NULL: 0. */
    int (*begin)(struct td_request *r);
    /* An op that begin or a2a_begin took: does what it can without waiting;
     * 1 when complete, *moved when it made progress. Required when begin or
     * a2a_begin can return 1. */
    int (*progress)(struct td_request *r, int *moved);
    /* A blocking collective (any op but send/recv/all-to-all): 1 when the
     * transport ran it to completion here; 0 when MPI's blocking collectives
     * run it piece by piece (having waited for any descriptors it
     * published). NULL: begin decides, and what it takes runs through the
     * request engine (start + wait). */
    int (*run)(struct td_request *r);
    /* An all-to-all begun, its tables copied (alltoall.c): 1 when the
     * transport runs it (progress), 0 when MPI messages do (r->agree may be
     * set). NULL: 0. */
    int (*a2a_begin)(struct td_request *r, size_t send_bytes);
    /* 1 when the row stages r's device buffers itself, in pieces through
     * host memory of its own (the shared ring), so stage.c leaves them as
     * they are. NULL: 0. */
    int (*stages)(const struct td_request *r);
    /* The start report's words for the group (td_comm_transport_desc). */
    void (*describe)(const struct td_comm *c, char *out, size_t cap);
} td_transport_ops;

/* The row of a transport (transport.c). */
const td_transport_ops *td_transport_row(td_transport t);

struct td_comm {
    MPI_Comm mpi;
    int rank, size;
    int *world_ranks;          /* [size]: world rank of each member */
    char name[16];             /* "dp" */
    char label[TD_COMM_LABEL]; /* "dp{0,1}": name and world ranks, for messages */
    int inflight;              /* pieces of nonblocking collectives now in MPI */
    unsigned walk_stamp;       /* progress walk that found an earlier collective still issuing */
    int n_active;              /* active requests on this group */
    struct td_shm *shm;        /* shared staging ring when all members share a node, else NULL */
    /* chosen at the split, alike on every member (nodes.c) */
    td_transport transport;
    const td_transport_ops *ops; /* its row */
    int n_nodes, per_node;  /* nodes the members span; members on each (hier: all equal) */
    struct td_comm *intra;  /* hier: the members on my node (shared memory) */
    struct td_comm *inter;  /* hier: the members with my position on the other nodes (MPI) */
    float *stage;           /* hier: fp32 staging: intra's ring slots (td_shm_stage) */
    struct td_request *hier_owner; /* hier: the all-reduce now using stage, intra, inter */
    size_t stage_elems;
    /* all-to-all ops started on the group: picks each one's MPI tag */
    unsigned a2a_ops;
};

/* ---- nodes and transports (nodes.c) ------------------------------------ */
/* Node of every world rank: TRIDENT_RANKS_PER_NODE, else the host (MPI's
 * shared-memory split). Collective over world, at td_comm_init. */
void td_nodes_init(void);
void td_nodes_free(void);
/* launcher.c: a task srun started without PMIx (MPI_Init would fail with
 * Open MPI's page of text) exits TD_EXIT_USAGE with one line from task 0
 * naming srun --mpi=pmix. Returns otherwise. Before MPI_Init. */
void td_launcher_check(void);
/* Collective over c->mpi, with c's ranks and label set: picks c's transport
 * (and opens its ring or its node / cross-node groups). */
void td_comm_choose_transport(td_comm *c);
/* A group of our own (comm.c): MPI communicator wrapped, transport chosen. */
td_comm *td_comm_wrap(MPI_Comm mpi, const char *name);

/* ---- hierarchical all-reduce (hier.c) ---------------------------------- */
/* 1 when an all-reduce of this kind on c runs hierarchically. */
int td_hier_takes(const td_comm *c, td_redop op, size_t count);
/* An active hierarchical all-reduce: does what it can without waiting (in
 * start order per group); 1 when complete. *moved: it made progress. */
int td_hier_progress(td_request *r, int *moved);
void td_hier_free(td_comm *c);

/* ---- shared memory (shm.c) --------------------------------------------- */
/* Staging ring per rank: slots of fp32, reused round-robin by chunk number. */
#define TD_SHM_SLOTS 4
#define TD_SHM_SLOT_BYTES ((size_t)1 << 20)
#define TD_SHM_DEFAULT_CHUNK ((size_t)256 << 10)
typedef struct td_shm td_shm;
/* Collective over mpi: the ring, or NULL when the members are not all on one
 * node (or TRIDENT_COMM_SHM=0, or a group of one). */
td_shm *td_shm_open(MPI_Comm mpi, int rank, int size, const char *label, const int *world_ranks);
void td_shm_close(td_shm *s);
/* The ring's slots, as a shared buffer that direct reduce-scatter and
 * all-gather take (the hierarchical all-reduce stages in them: a node group
 * of a hierarchical group runs no ring ops). Collective: every member calls
 * it at the same point, the first time. This rank's part, *elems fp32. */
float *td_shm_stage(td_shm *s, size_t *elems);
/* The ring's slots serve as the staging pool of device payloads of dtype dt
 * (counted once in TD_MEM_COMM and td_comm_staging_bytes; bf16 adds the
 * piece results are rounded in). */
void td_shm_as_pool(td_shm *s, td_dtype dt);
/* What a shared-memory op computes. */
typedef enum {
    TD_SHM_ALLREDUCE = 0,
    TD_SHM_REDUCE_SCATTER,
    TD_SHM_ALL_GATHER,
    TD_SHM_ALL_TO_ALL
} td_shm_kind;
typedef struct {
    td_shm *shm;
    td_shm_kind kind;
    void *buf;        /* all-reduce: in and out */
    const void *send; /* reduce-scatter, all-gather (direct only): the shared input */
    size_t count, chunk_elems;
    td_dtype dt;
    td_redop redop;
    uint64_t gen0, n_chunks; /* ring: this op's chunks in the group's stream */
    int direct;              /* straight between shared buffers, no ring */
    int dev;                 /* ring: buf is device memory, staged chunk by chunk in the slots */
    int checked;             /* ring: the peers' descriptors matched */
    const char *file;        /* call site, for the descriptor */
    int line;
    uint64_t k;              /* direct: this op's number in the group */
    int part_done;           /* direct: this rank's part is reduced */
    int moved;               /* the last td_shm_progress did some work */
    uint64_t seq;            /* trace record, for reports */
    /* all-to-all: the receive side's counts (alltoall.c) */
    const struct td_a2a *a2a;
} td_shm_op;
/* Starts an all-reduce, reduce-scatter or all-gather (arguments as the
 * td_*_start calls; all-reduce: send = buf) on a group with a ring, and
 * publishes its descriptor: every rank must begin the same ops on a group in
 * the same order, and each checks its peers' descriptors before data moves.
 * Returns 1 when the op runs in shared memory: every all-reduce (fp32 data
 * inside a td_comm_alloc_shared buffer of the group straight between the
 * buffers, the rest through the ring), fp32 reduce-scatter / all-gather whose
 * send buffer lies inside one. Returns 0 when the caller must use MPI (or
 * use_shm is 0): then op stands for the MPI op, whose pieces wait for
 * td_shm_agreed(op). */
int td_shm_begin(td_shm_op *op, td_shm *s, td_shm_kind kind, const void *send, void *buf,
                 size_t count, td_dtype dt, td_redop redop, int use_shm, uint64_t seq,
                 const char *file, int line);
/* 1 when an op of this kind with these buffers runs through the ring
 * staging device memory chunk by chunk: an all-reduce of a device buffer;
 * an fp32 reduce-scatter or all-gather whose send and receive buffers are
 * both device memory. */
int td_shm_ring_stages(td_shm_kind kind, const void *send, const void *buf, td_dtype dt);
/* Ring and MPI ops: 1 once op k is checked against every peer (in order:
 * every earlier op of the group is checked here first), 0 when a peer has
 * not started it yet. Marks it finished for the group's counters. */
int td_shm_agreed(td_shm_op *op);
/* Blocks (polling other requests) until td_shm_agreed. */
void td_shm_agree_wait(td_shm_op *op);
/* Does what it can without waiting; 1 when the op is complete. */
int td_shm_progress(td_shm_op *op);
/* Until complete; aborts naming the op's trace record after the comm timeout. */
void td_shm_run(td_shm_op *op);
/* One idle turn of a wait: spins briefly, then yields the core and polls the
 * other requests; aborts naming record seq once nothing moved for the comm
 * timeout. *idle counts idle turns (0 after progress), *since is set here. */
void td_shm_idle(unsigned *idle, double *since, uint64_t seq);

typedef enum {
    TD_OP_ALLREDUCE = 0,
    TD_OP_REDUCE,
    TD_OP_BCAST,
    TD_OP_REDUCE_SCATTER,
    TD_OP_ALL_GATHER,
    TD_OP_SEND,
    TD_OP_RECV,
    TD_OP_BARRIER,
    TD_OP_ALL_TO_ALL_V,
    TD_OP_ALL_TO_ALL,
    TD_OP_N
} td_op;

const char *td_op_name(td_op op);
static inline int td_op_is_p2p(td_op op) { return op == TD_OP_SEND || op == TD_OP_RECV; }
static inline int td_op_is_a2a(td_op op) {
    return op == TD_OP_ALL_TO_ALL_V || op == TD_OP_ALL_TO_ALL;
}

struct td_request {
    int active;
    td_op op;
    td_comm *comm;
    td_dtype dt;
    td_redop redop;
    void *buf;        /* in/out buffer; the output of reduce_scatter / all_gather */
    const void *send; /* input of reduce_scatter / all_gather / send */
    size_t count;     /* elements, as the caller gave them */
    int peer;         /* root of reduce/bcast, peer of send/recv (group rank) */
    int tag, source;
    int direct;   /* reduce_scatter: one fp32 piece, MPI reads `send` itself */
    int in_place; /* all_gather: send == recv + rank*count */
    size_t piece_elems, n_pieces, next_piece, done_pieces;
    MPI_Request mpi[TD_MAX_INFLIGHT];
    size_t slot_piece[TD_MAX_INFLIGHT];      /* piece in the slot, SIZE_MAX when free */
    MPI_Datatype slot_type[TD_MAX_INFLIGHT]; /* p2p: derived type to free, else MPI_DATATYPE_NULL */
    size_t scratch_need;                     /* bytes per slot for this op */
    void *scratch[TD_MAX_INFLIGHT];          /* fp32 staging (bf16 reduce, packing) */
    size_t scratch_bytes[TD_MAX_INFLIGHT];
    int *ints;     /* displs[size] (all_gather), then counts[slot][size] */
    int ints_size; /* entries in ints */
    int own;       /* run by the group's transport row (its begin or a2a_begin took it), not the MPI pieces */
    int agree;     /* MPI op on a group with a ring: pieces wait for the descriptors */
    /* all-to-all: its tables and MPI messages (alltoall.c) */
    struct td_a2a *a2a;
    int hier_phase; /* a hierarchical all-reduce's state (hier.c): */
    size_t hier_o, hier_n, hier_s; /* this round's offset, length, shard */
    MPI_Request hier_mpi;
    const char *file; /* call site */
    int line;
    td_shm_op shm;
    /* staging of device buffers for a host-only row (stage.c): pool blocks
     * held, the event after the downloads (waited on before the row reads
     * the copies), and the outputs uploaded at completion */
    int stg_wait, stg_n, stg_nup;
    td_dev_event stg_ev;
    int stg_block[2];
    struct {
        void *dev;
        const void *host;
        size_t bytes;
    } stg_up[2];
    uint64_t seq;            /* trace record */
    int tl_on;               /* started while the timeline records: its start time is tl_t0 */
    double tl_t0;            /* td_timeline_now_us() at the start */
    td_request *prev, *next; /* list of active requests, in start order */
};

/* ---- init state (comm.c) ----------------------------------------------- */
int td_comm_world_rank(void);
double td_comm_since_init_ms(void);
/* Issues every piece still waiting on c (bounded in-flight, so this waits for
 * some to finish); a collective on c may follow on every rank in the same order. */
void td_comm_flush(td_comm *c);

/* ---- trace (trace.c) --------------------------------------------------- */
uint64_t td_trace_begin(td_op op, const td_comm *c, td_dtype dt, size_t bytes, int peer,
                        const char *file, int line);
void td_trace_end(uint64_t seq);
/* "test_hang.c" of "/src/tests/test_hang.c" (a call site's __FILE__). */
const char *td_base_name(const char *file);
/* Adds to td_comm_sent_bytes(). */
void td_trace_count_sent(size_t bytes);
/* One stuck call: print the message and the ring, then end the job
 * (td_comm_abort, any thread). */
_Noreturn void td_trace_stuck(uint64_t seq);
/* A peer failed (heartbeat thread): "trident: rank R: <what>", the comm call
 * in flight here and the ring, then _exit(1). */
_Noreturn void td_trace_peer_lost(const char *what);
/* Watchdog for calls that block inside MPI: armed around them. */
void td_watchdog_start(void);
void td_watchdog_stop(void);
void td_watchdog_arm(uint64_t seq);
void td_watchdog_disarm(void);

/* ---- heartbeat (heartbeat.c) -------------------------------------------- */
/* Collective over world at init: connects the ranks to the hub and starts
 * the watch thread (nothing for one rank or TRIDENT_HEARTBEAT=0). */
void td_heartbeat_start(MPI_Comm world);
/* Normal end: goodbyes, then the thread stops. */
void td_heartbeat_stop(void);
/* This rank is about to end the job with its own report: the others keep
 * quiet instead of reporting it as a death. Any thread. */
void td_heartbeat_abort_notice(void);
/* Ends the job after an error on this rank (the report is out): abort
 * notice, then MPI_Abort where the threading level allows this thread to
 * call MPI (the main thread under FUNNELED), else _exit (mpirun ends the
 * job on a non-zero exit). */
_Noreturn void td_comm_abort(int code);

/* ---- bf16 and dtypes (bf16.c) ------------------------------------------ */
void td_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void td_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
/* The same in place (buf holds n fp32 / n bf16 at its start; same bits). */
void td_bf16_to_f32_inplace(void *buf, size_t n);
void td_f32_to_bf16_inplace(void *buf, size_t n);
MPI_Datatype td_mpi_type(td_dtype dt);
const char *td_dtype_name(td_dtype dt); /* "fp32", "bf16", "u64" */

/* ---- pieces (pieces.c) ------------------------------------------------- */
static inline int td_ranges_overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}
/* Splits the request into pieces and sizes its scratch for `slots` slots. */
void td_piece_plan(td_request *r, int slots);
/* Stages piece p in slot s and hands it to MPI: the blocking call when
 * `blocking` (then it is finished too), else the nonblocking one. */
void td_piece_run(td_request *r, int s, size_t p, int blocking);
/* After MPI completed the piece in slot s: unstage (bf16 back, unpack). */
void td_piece_finish(td_request *r, int s);
void td_piece_release(td_request *r); /* frees scratch, derived types, all-to-all tables */
/* `count` elements of dt as one MPI message even above INT_MAX: sets *type
 * and returns the MPI count; *derived is the type to free once the message
 * completed (MPI_DATATYPE_NULL when dt itself serves). */
int td_mpi_count_type(td_dtype dt, size_t count, MPI_Datatype *type, MPI_Datatype *derived);

/* ---- all-to-all (alltoall.c) ------------------------------------------- */
/* The first tag of the range all-to-all messages use (user tags below). */
#define TD_A2A_TAGS 4096
void td_a2a_tags_init(MPI_Comm world);
/* r begun (op, comm, dt, send, buf, seq): copies and checks the tables
 * (NULL tables: `fixed` elements per peer, blocks back to back) and starts
 * the exchange. 0: it is complete already (a group of one); 1: r must be
 * progressed, by the group's transport row when r->own, else by
 * td_a2a_progress. */
int td_a2a_start(td_request *r, const size_t *send_counts, const size_t *send_displs,
                 const size_t *recv_counts, const size_t *recv_displs, size_t fixed);
/* The shared-memory row's a2a_begin: announces r on the group's ring, straight
 * between the send buffers when this rank's lies in a shared region (1),
 * else through MPI once the descriptors agree (0). */
int td_a2a_shm_begin(td_request *r, size_t send_bytes);
/* The MPI exchange of r: does what it can without waiting; 1 when complete. */
int td_a2a_progress(td_request *r, int *moved);

/* ---- staging of device buffers (stage.c) ------------------------------- */
/* r begun with the caller's buffers (r->send, r->buf; all-to-all: their
 * extents in bytes, a2a_send / a2a_recv, else ignored): when the group's row
 * reads host memory only, each buffer that is device memory is replaced by
 * a host copy from the staging pool, its inputs downloaded (TD_HOST_COMM)
 * and an event recorded after them (r->stg_wait). A device whose memory is
 * host memory (cpu) stages nothing. */
void td_stage_begin(td_request *r, size_t a2a_send, size_t a2a_recv);
/* Before the row or MPI reads a copy: the downloads have landed. */
void td_stage_wait(td_request *r);
static inline void td_stage_ready(td_request *r) {
    if (r->stg_wait) td_stage_wait(r);
}
/* At completion (idempotent): the outputs uploaded (TD_HOST_COMM), the
 * compute stream made to wait for them, the copies back in the pool. */
void td_stage_end(td_request *r);
/* A staged receive that completed with status st (derived: its derived
 * type, or MPI_DATATYPE_NULL): only what arrived is uploaded (a shorter
 * message leaves the rest of the device buffer as it was, as on the host). */
void td_stage_received(td_request *r, const MPI_Status *st, MPI_Datatype derived);
/* At finalize: the pool's memory goes back. */
void td_stage_shutdown(void);
/* A shared ring starts (bytes > 0) or stops (< 0) serving as staging pool
 * (shm.c): counted in td_comm_staging_bytes. */
void td_stage_pool_add(ptrdiff_t bytes);
/* 1 once td_comm_staging_reserve ran: the pool no longer grows (a ring that
 * was not reserved, or a bf16 piece that was not, is an internal error). */
int td_stage_reserved(void);
/* The groups open now (comm.c), in no particular order. */
int td_comm_open_groups(struct td_comm ***out);
/* A pointer that a host-only path is about to read or write (op on c from
 * file:line): td_fail naming the buffer and offset when it is device memory.
 * what: the argument ("buffer", "recv_counts table"); why: what reads host memory
 * only (NULL: c's transport). Refusals happen before anything reaches MPI. */
void td_comm_host_check(td_op op, const td_comm *c, const char *file, int line, const void *p,
                        const char *what, const char *why);

/* ---- requests (request.c) ---------------------------------------------- */
void td_requests_shutdown(void);
/* Progress every active request once (no-op when none): waits outside the
 * request engine call it so peers waiting on our pieces keep moving. */
void td_requests_poll(void);

#endif
