/* comm: the only module that talks to MPI.
 *
 * Collectives (all-reduce, reduce, broadcast, reduce-scatter, all-gather,
 * all-to-all(-v)) and point-to-point (send, recv), blocking and nonblocking,
 * for fp32 and bf16 (and u64 for all-to-all: the counts exchange).
 * Payloads are split into pieces of td_comm_piece_bytes() (Open MPI here loses
 * ~10x bandwidth above a few MiB per call; the default follows `trident bench
 * comm`). bf16 payloads are reduced in fp32 (converted per piece), so a sum
 * over many ranks is rounded once.
 *
 * Each group's transport is chosen when it is created, alike on every
 * member (td_transport below). Within a node MPI is bypassed where it can
 * be: a group whose members all share one node all-reduces through a shared
 * staging ring, and fp32 all-reduce, reduce-scatter and all-gather (and
 * all-to-all of any dtype) whose input lies in a td_comm_alloc_shared buffer
 * run straight between the members' buffers (src/comm/shm.c, shm_direct.c,
 * alltoall.c); every such op's
 * descriptor (op, count, dtype, path) is checked against the other members'
 * before data moves, and ranks that disagree fail with one line naming both
 * (shm_agree.c). Groups spanning nodes all-reduce hierarchically (hier.c).
 * Results are the same bits on every rank.
 *
 * Every call is recorded in a small per-rank ring (sequence number, op, bytes,
 * group and its world ranks, peer/root, call site). Waits poll with a
 * deadline: a call that does not complete within td_comm_timeout() seconds
 * prints the ring and the stuck call on every rank that is stuck, then
 * ends the job (MPI_Abort, or _exit from a thread that may not call MPI).
 * A heartbeat outside MPI catches ranks that die or stop between calls. Blocking collectives run MPI's blocking collective per
 * piece (measured faster than nonblocking pieces + polling) and a watchdog
 * thread holds them to the same deadline; blocking send/recv and all-to-all
 * are start + wait.
 *
 * Call through the macros (td_allreduce, ...) so the call site is recorded. */
#ifndef TRIDENT_COMM_H
#define TRIDENT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "trident/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TD_U64 (uint64_t / size_t) is data movement only: all-to-all, where a
 * mixture-of-experts dispatch exchanges its token counts. */
typedef enum { TD_F32 = 0, TD_BF16 = 1, TD_U64 = 2 } td_dtype;
typedef enum { TD_SUM = 0, TD_MAX = 1 } td_redop;

size_t td_dtype_size(td_dtype dt);
/* bf16 <-> fp32, round-to-nearest-even. */
uint16_t td_f32_to_bf16(float x);
float td_bf16_to_f32(uint16_t x);

typedef struct td_comm td_comm; /* a group: an MPI communicator with a name */

/* How a group's collectives travel, chosen when it is created, alike on
 * every member. Nodes are groups of TRIDENT_RANKS_PER_NODE=k consecutive
 * world ranks when that is set (as mpirun --map-by slot places ranks on
 * hosts of k slots), else the ranks that share a host.
 *   SELF  one member;
 *   SHM   all members on one node: shared memory (see td_comm_alloc_shared);
 *   HIER  2+ nodes with the same number (2+) of members on each: all-reduce
 *         (sum) reduce-scatters inside each node through shared memory,
 *         all-reduces each shard across nodes through MPI and all-gathers
 *         inside the node; every other op (all-to-all included, even between
 *         members of one node) through MPI;
 *   MPI   everything else (and every group with TRIDENT_COMM_SHM=0; with
 *         TRIDENT_COMM_HIER=0 groups that would be HIER).
 * Inside src/comm each transport is a row of functions (td_transport_ops in
 * comm_internal.h), which a device-native transport would join. All four
 * read host memory only: a buffer that is device memory (td_dev_is_device,
 * backend.h) is staged by the call, which downloads it into a host staging
 * pool (TD_HOST_COMM), runs on the copy and uploads the result at
 * completion; the compute stream waits for that upload. On SHM groups the
 * all-reduce and the fp32 reduce-scatter and all-gather of device buffers,
 * and on HIER groups the all-reduce, are staged instead through the group's
 * shared ring a piece at a time (td_comm_staging_plan_bytes), so the pool
 * does not grow with the payload; a blocking broadcast of a device buffer
 * goes a piece (td_comm_piece_bytes) at a time. Every data buffer of
 * every call below is staged so; the all-to-all-v count and displacement
 * tables are read on the host and a device pointer there is refused (td_fail
 * naming the buffer and offset) before anything reaches MPI. On the cpu
 * device nothing is staged. */
typedef enum { TD_TRANSPORT_SELF = 0, TD_TRANSPORT_SHM, TD_TRANSPORT_HIER, TD_TRANSPORT_MPI } td_transport;

/* MPI_Init (thread level FUNNELED), installs the MPI_Abort error hook. Safe to
 * call once per process; single-process runs without mpirun work too. */
void td_comm_init(int *argc, char ***argv);
void td_comm_finalize(void);
int td_comm_initialized(void);

td_comm *td_comm_world(void);
/* Collective over parent. color < 0 gives NULL (not a member). */
td_comm *td_comm_split(td_comm *parent, int color, int key, const char *name);
void td_comm_free(td_comm *c);
int td_comm_rank(const td_comm *c);
int td_comm_size(const td_comm *c);
/* "dp{0,1}": the name given at the split and the members' world ranks. */
const char *td_comm_name(const td_comm *c);
/* World rank of group member r. */
int td_comm_world_rank_of(const td_comm *c, int r);
td_transport td_comm_transport(const td_comm *c);
/* "shared memory", "MPI", "hierarchical: 2 nodes x 2, shared memory inside,
 * MPI across", "self": for the start report. */
const char *td_comm_transport_desc(const td_comm *c, char *out, size_t cap);
/* Node of a world rank (see td_transport). */
int td_comm_node_of(int world_rank);
/* Groups split after this use hierarchical all-reduce where they can (on by
 * default; TRIDENT_COMM_HIER=0 turns it off). Every rank alike. */
void td_comm_set_hier(int on);

/* Tunables. piece: bytes per MPI call (0 restores the default). timeout:
 * seconds before a stuck call aborts the job (<= 0: wait forever). */
void td_comm_set_piece_bytes(size_t bytes);
size_t td_comm_piece_bytes(void);
void td_comm_set_timeout(double seconds);
double td_comm_timeout(void);
/* Pieces of nonblocking collectives in MPI at once, per group (1..8; 0
 * restores the default). Blocking calls run one piece at a time. */
void td_comm_set_inflight(int pieces);
/* Staging bytes per in-flight piece of an fp32 reduce-scatter of `count`
 * elements per rank over `size` ranks that runs through MPI (the output
 * inside the input: in_place); such a request holds td_comm_inflight() of
 * them from its start to its completion. Memory plans use it. */
size_t td_comm_reduce_scatter_staging(size_t count, int size, int in_place);
/* Heartbeat (src/comm/heartbeat.c): a rank whose process dies is detected at
 * once, a rank silent this many seconds (stopped, stuck, cut off) is taken
 * for failed; either way every rank prints a report naming it and the call
 * in flight, and exits. Default 60; <= 0: only deaths are detected. */
void td_comm_set_heartbeat_timeout(double seconds);
double td_comm_heartbeat_timeout(void);
int td_comm_inflight(void);
/* Groups whose ranks share one node all-reduce through a shared staging ring
 * instead of MPI (on by default; TRIDENT_COMM_SHM=0 in the environment keeps
 * MPI for every group). shm_chunk: fp32 bytes per ring slot in use
 * (256 B .. 1 MiB; 0 restores the default). Every rank must use the same
 * settings at the same calls. */
void td_comm_set_shm(int on);
/* Collective over c: `bytes` of zeroed memory, accounted as `cat`. When c has
 * a shared ring (all members on one node) it is this rank's part of an MPI
 * shared window, and an fp32 all-reduce on c of data inside it runs straight
 * between the members' buffers, with no staging; elsewhere it is td_alloc
 * memory. Free with td_comm_free_shared (collective as well; a device buffer
 * handed to it is refused, naming it). */
void *td_comm_alloc_shared(td_comm *c, size_t bytes, td_mem_cat cat);
void td_comm_free_shared(td_comm *c, void *p, td_mem_cat cat);
/* 1 when fp32 all-reduce, reduce-scatter and all-gather (and all-to-all of
 * any dtype) on c whose input is a td_comm_alloc_shared buffer run straight
 * between the members' buffers (no MPI, no staging memory), as long as that
 * buffer's allocation found room; 0 for NULL. Memory plans use it. */
int td_comm_shares_memory(const td_comm *c);
int td_comm_shm(void);
void td_comm_set_shm_chunk(size_t bytes);
size_t td_comm_shm_chunk(void);

/* Bytes of the staging pool now (host, TD_MEM_COMM): the most that calls in
 * flight together have staged so far, plus the shared rings that staged a
 * device payload (below); 0 on the cpu device. */
size_t td_comm_staging_bytes(void);
/* For memory plans, before anything is allocated: the host bytes through
 * which a group stages its all-reduces of device payloads when its members
 * share memory (shares_memory: td_comm_shares_memory, or the layout's
 * dp_shares_memory), dt the payload's dtype: the group's shared window (its
 * ring) is then the staging pool, pieces of td_comm_shm_chunk() bytes with
 * TD_SHM_SLOTS (4) in flight, in slots of 1 MiB each (4 MiB), plus one
 * 512 KiB piece that bf16 results are rounded in. Counted as TD_MEM_COMM on
 * the run's device once the first such all-reduce runs; 0 when the members
 * do not share memory (MPI staging: the whole buffer, stage.c). The same on
 * every device: the caller adds it only when td_backend_is_device(). */
size_t td_comm_staging_plan_bytes(int shares_memory, td_dtype dt);
/* A run's staging, planned and reserved once at its start (after its groups
 * exist, before anything is staged): big, the largest payload staged alone
 * (a parameter broadcast's slice, a parameter server's payload); small, the
 * bound of every other staged payload, n_small of them in flight together;
 * bf16, whether rings round bf16 results. td_comm_staging_plan: the host
 * bytes (TD_MEM_COMM) that td_comm_staging_reserve then takes: the blocks,
 * page-rounded, plus td_comm_staging_plan_bytes for every open group with a
 * shared ring; 0 and nothing on the cpu device or in a run of one
 * process. p2p, n_p2p: point-to-point exchanges that keep n_p2p pieces of
 * at most p2p bytes in flight (Muon's gather, muon_shard.c), blocks of
 * their own beside the others. After the reservation the
 * pool never grows: a staged payload that no free block holds, or a ring or
 * bf16 piece not reserved, fails as an internal error naming the request.
 * Not collective. */
typedef struct {
    size_t big, small;
    int n_small;
    int bf16;
    size_t p2p;
    int n_p2p;
} td_staging_shape;
size_t td_comm_staging_plan(const td_staging_shape *sh);
void td_comm_staging_reserve(const td_staging_shape *sh);

/* ---- nonblocking ------------------------------------------------------- */

/* A started operation. Fixed-size handle owned by the caller; must not be
 * moved while active. */
typedef struct td_request td_request;
td_request *td_request_new(void);
void td_request_free(td_request *r);

/* Buffers must stay valid until completion. `count` is in elements.
 * reduce_scatter: send[count * size] -> recv[count] (block r to rank r);
 *   recv may be send + rank*count (the shard in place).
 * all_gather: send[count] -> recv[count * size]; send may be recv + rank*count.
 * Requests on one group issue their pieces in start order (MPI's rule for
 * collectives), so they may be waited on in any order. Send/recv are one MPI
 * message each, so MPI's matching order (TD_ANY_SOURCE included) holds. */
#define td_allreduce_start(r, c, buf, count, dt, op) \
    td_allreduce_start_at(r, c, buf, count, dt, op, __FILE__, __LINE__)
#define td_reduce_start(r, c, buf, count, dt, root) \
    td_reduce_start_at(r, c, buf, count, dt, root, __FILE__, __LINE__)
#define td_broadcast_start(r, c, buf, count, dt, root) \
    td_broadcast_start_at(r, c, buf, count, dt, root, __FILE__, __LINE__)
#define td_reduce_scatter_start(r, c, send, recv, count, dt) \
    td_reduce_scatter_start_at(r, c, send, recv, count, dt, __FILE__, __LINE__)
#define td_all_gather_start(r, c, send, recv, count, dt) \
    td_all_gather_start_at(r, c, send, recv, count, dt, __FILE__, __LINE__)
#define td_all_to_all_v_start(r, c, send, send_counts, send_displs, recv, recv_counts,             \
                              recv_displs, dt)                                                     \
    td_all_to_all_v_start_at(r, c, send, send_counts, send_displs, recv, recv_counts, recv_displs, \
                             dt, __FILE__, __LINE__)
#define td_all_to_all_start(r, c, send, recv, count, dt) \
    td_all_to_all_start_at(r, c, send, recv, count, dt, __FILE__, __LINE__)
#define td_send_start(r, c, buf, count, dt, peer, tag) \
    td_send_start_at(r, c, buf, count, dt, peer, tag, __FILE__, __LINE__)
#define td_recv_start(r, c, buf, count, dt, peer, tag) \
    td_recv_start_at(r, c, buf, count, dt, peer, tag, __FILE__, __LINE__)

void td_allreduce_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                           td_redop op, const char *file, int line);
/* In place: on root buf receives the sum; other ranks' buf is left as sent. */
void td_reduce_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                        int root, const char *file, int line);
void td_broadcast_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                           int root, const char *file, int line);
void td_reduce_scatter_start_at(td_request *r, td_comm *c, const void *send, void *recv,
                                size_t count, td_dtype dt, const char *file, int line);
void td_all_gather_start_at(td_request *r, td_comm *c, const void *send, void *recv,
                            size_t count, td_dtype dt, const char *file, int line);
/* All-to-all-v (mixture-of-experts token dispatch and its return): block j
 * of this rank's send buffer, send_counts[j] elements at send_displs[j],
 * goes to group rank j, and rank j's block for this rank lands at
 * recv_displs[j], recv_counts[j] elements. Counts and displacements are
 * size_t, in elements of dt (no int limit: MPI gets large-count types);
 * the four arrays have size entries each, are copied at the start and may
 * be reused at once. recv_counts[j] must equal rank j's send_counts[this
 * rank] (td_all_to_all_counts exchanges them first); a rank that receives
 * more or fewer elements than it expects ends the job with one line naming
 * both ranks. Only the receive blocks are written (gaps between them and
 * everything around them stay as they were); blocks of one buffer must not
 * overlap, and send must not overlap recv. Any block may be empty, on any
 * rank; every rank must still make the call. Per transport: SELF copies;
 * SHM copies each block straight out of the sender's buffer when every
 * rank's send buffer lies inside a td_comm_alloc_shared buffer of c (one
 * copy, no MPI; ranks that disagree on that fail with one line), else it
 * goes through MPI like MPI and HIER groups: one message per peer, on a tag
 * of trident's own (user tags stay below td_comm_tag_limit()). dt: fp32,
 * bf16 or u64; the bytes arrive unchanged. */
void td_all_to_all_v_start_at(td_request *r, td_comm *c, const void *send,
                              const size_t *send_counts, const size_t *send_displs, void *recv,
                              const size_t *recv_counts, const size_t *recv_displs, td_dtype dt,
                              const char *file, int line);
/* All-to-all of `count` elements per peer: send[count * size] (block j to
 * rank j) -> recv[count * size] (block j from rank j). */
void td_all_to_all_start_at(td_request *r, td_comm *c, const void *send, void *recv, size_t count,
                            td_dtype dt, const char *file, int line);
/* tag: 0 .. td_comm_tag_limit() - 1 (the tags above are all-to-all's). */
void td_send_start_at(td_request *r, td_comm *c, const void *buf, size_t count, td_dtype dt,
                      int peer, int tag, const char *file, int line);
int td_comm_tag_limit(void);
/* peer may be TD_ANY_SOURCE; td_request_source() tells who sent. */
#define TD_ANY_SOURCE (-1)
void td_recv_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                      int peer, int tag, const char *file, int line);
int td_request_source(const td_request *r);

/* Make progress without blocking; returns 1 when complete (and idle). */
int td_test(td_request *r);
/* Block until complete, watched by the timeout. Idle requests return at once. */
void td_wait(td_request *r);
int td_request_active(const td_request *r);

/* ---- blocking ---------------------------------------------------------- */

#define td_allreduce(c, buf, count, dt, op) \
    td_allreduce_at(c, buf, count, dt, op, __FILE__, __LINE__)
#define td_reduce(c, buf, count, dt, root) td_reduce_at(c, buf, count, dt, root, __FILE__, __LINE__)
#define td_broadcast(c, buf, count, dt, root) \
    td_broadcast_at(c, buf, count, dt, root, __FILE__, __LINE__)
#define td_reduce_scatter(c, send, recv, count, dt) \
    td_reduce_scatter_at(c, send, recv, count, dt, __FILE__, __LINE__)
#define td_all_gather(c, send, recv, count, dt) \
    td_all_gather_at(c, send, recv, count, dt, __FILE__, __LINE__)
#define td_all_to_all_v(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt)     \
    td_all_to_all_v_at(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, dt,      \
                       __FILE__, __LINE__)
#define td_all_to_all(c, send, recv, count, dt) \
    td_all_to_all_at(c, send, recv, count, dt, __FILE__, __LINE__)
/* The counts exchange before an all-to-all-v: send_counts[j] (size_t, what
 * this rank will send to rank j) arrives in rank j's recv_counts[this rank]. */
#define td_all_to_all_counts(c, send_counts, recv_counts) \
    td_all_to_all_at(c, send_counts, recv_counts, 1, TD_U64, __FILE__, __LINE__)
#define td_send(c, buf, count, dt, peer, tag) td_send_at(c, buf, count, dt, peer, tag, __FILE__, __LINE__)
#define td_recv(c, buf, count, dt, peer, tag) td_recv_at(c, buf, count, dt, peer, tag, __FILE__, __LINE__)
#define td_barrier(c) td_barrier_at(c, __FILE__, __LINE__)

void td_allreduce_at(td_comm *c, void *buf, size_t count, td_dtype dt, td_redop op,
                     const char *file, int line);
void td_reduce_at(td_comm *c, void *buf, size_t count, td_dtype dt, int root, const char *file,
                  int line);
void td_broadcast_at(td_comm *c, void *buf, size_t count, td_dtype dt, int root,
                     const char *file, int line);
void td_reduce_scatter_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                          const char *file, int line);
void td_all_gather_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                      const char *file, int line);
/* Blocking all-to-all(-v): start + wait (arguments as the _start forms). */
void td_all_to_all_v_at(td_comm *c, const void *send, const size_t *send_counts,
                        const size_t *send_displs, void *recv, const size_t *recv_counts,
                        const size_t *recv_displs, td_dtype dt, const char *file, int line);
void td_all_to_all_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                      const char *file, int line);
void td_send_at(td_comm *c, const void *buf, size_t count, td_dtype dt, int peer, int tag,
                const char *file, int line);
/* Returns the source rank (useful with TD_ANY_SOURCE). */
int td_recv_at(td_comm *c, void *buf, size_t count, td_dtype dt, int peer, int tag,
               const char *file, int line);
void td_barrier_at(td_comm *c, const char *file, int line);

/* ---- trace ------------------------------------------------------------- */

/* Print this rank's last `n` records (n <= ring size) to stderr. */
void td_comm_dump(int n);
/* A short note (up to 47 characters; NULL or "" clears it) that every comm
 * call started after it carries into the trace ring and the hang report,
 * e.g. "ring fwd step 2/4": which step of a multi-step exchange waits. */
void td_comm_note(const char *note);
/* Records made so far by this rank (for tests and stats). */
uint64_t td_comm_calls(void);
uint64_t td_comm_bytes(void);
/* Bytes this rank has handed to calls as its own data so far: the payload
 * of an all-reduce, reduce or send, its block of an all-gather, its whole
 * input of a reduce-scatter or all-to-all (every send block, its own
 * included), the root's payload of a broadcast (0 on the others and for
 * receives). At 2 ranks this is what the rank puts on the
 * wire for an all-reduce or an all-gather. td_comm_bytes() counts instead
 * the whole tensor of a call (an all-gather's every block; an all-to-all's
 * send blocks, as here). */
uint64_t td_comm_sent_bytes(void);

/* What `trident bench comm` measures (src/cli/comm_bench_cmd.c parses it). */
typedef struct {
    size_t lo, hi;    /* payload sizes from lo to hi bytes, x4 apart */
    size_t piece;     /* the pipelining piece, 0: the default */
    int iters;        /* calls per trial, 0: about 256 MiB per trial */
    int trials;       /* the best of this many */
    int sweep;        /* also sweep the shared-memory chunk and the MPI piece */
    int hier;         /* the hierarchical (node-aware) all-reduce instead */
    const char *ops;  /* comma-separated op names; NULL: all */
} td_comm_bench_opts;
/* Bus bandwidth per op and payload size, raw single MPI call beside
 * trident's pieces, printed by world rank 0. Collective over the world
 * (2 ranks or more; fewer: a message and TD_EXIT_USAGE); bad sizes are a
 * user error. Returns an exit code. */
int td_comm_bench_run(const td_comm_bench_opts *opt);

#ifdef __cplusplus
}
#endif

#endif
