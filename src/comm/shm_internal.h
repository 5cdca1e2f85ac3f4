/* What the two shared-memory paths share: the per-rank control block in the
 * group's shared window and the group's view of it. shm.c runs the staging
 * ring and owns the window; shm_direct.c runs all-reduce straight between
 * buffers that were allocated shared (td_comm_alloc_shared). */
#ifndef TRIDENT_SHM_INTERNAL_H
#define TRIDENT_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>

#include "comm_internal.h"

#define TD_LINE 64
#if defined(__x86_64__) || defined(__i386__)
#define td_cpu_relax() __builtin_ia32_pause()
#else
#define td_cpu_relax() ((void)0)
#endif

/* Direct ops published but not yet finished by every rank, at most: each
 * has a descriptor slot in its owner's control block. */
#define TD_SHM_DESCS 64
/* Direct ops keep one pointer per rank on the stack; larger node-local
 * groups get plain buffers (and MPI) from td_comm_alloc_shared. */
#define TD_SHM_MAX_RANKS 64

/* How a rank runs an op on a group with shared memory: the descriptor says
 * which, and every rank checks every peer's before it moves data. */
typedef enum { TD_PATH_RING = 0, TD_PATH_DIRECT, TD_PATH_MPI } td_shm_path;

/* Op k of the group as its owner started it (shm_agree.c checks them). */
typedef struct {
    uint64_t region; /* direct: td_shm_region id, the same on every rank */
    uint64_t offset; /* direct: bytes into this rank's part of the region: the op's input */
    uint64_t count;  /* the op's count (per rank for scatter/gather) */
    uint8_t kind, dt, redop, path; /* td_shm_kind, td_dtype, td_redop, td_shm_path */
    int32_t line;                  /* call site, for the mismatch report */
    char file[32];
} td_shm_desc;

/* One per rank, written only by its owner; every counter on its own line. */
typedef struct {
    /* staging ring: chunks finished in each phase */
    _Alignas(TD_LINE) _Atomic uint64_t staged;
    _Alignas(TD_LINE) _Atomic uint64_t reduced;
    _Alignas(TD_LINE) _Atomic uint64_t done;
    /* ops (every path): the last one started (its descriptor is published),
     * and the last one this rank checked against its peers (for a direct op:
     * whose part it finished too) */
    _Alignas(TD_LINE) _Atomic uint64_t entered;
    _Alignas(TD_LINE) _Atomic uint64_t finished;
    _Alignas(TD_LINE) td_shm_desc desc[TD_SHM_DESCS]; /* op k in desc[k % TD_SHM_DESCS] */
    /* the last direct all-to-all (td_shm.a2a_k): {displacement, count} of
     * this rank's send block for each group rank, which that rank copies out */
    _Alignas(TD_LINE) uint64_t a2a[TD_SHM_MAX_RANKS][2];
} td_shm_ctl;

/* A shared allocation: one MPI shared window, a part per rank. */
typedef struct td_shm_region {
    MPI_Win win;
    uint64_t id;
    size_t bytes;
    char **base;  /* [n]: each rank's part, as mapped here */
    size_t *size; /* [n]: usable bytes of each part (ranks may ask for different sizes) */
    struct td_shm_region *next;
} td_shm_region;

struct td_shm {
    MPI_Win win;
    int n, me;
    char label[TD_COMM_LABEL]; /* the group's, for reports */
    const int *world_ranks;    /* [n]: the group's */
    td_shm_ctl **ctl; /* [n] */
    float **slot;     /* [n]: rank j's ring slots, TD_SHM_SLOTS x slot capacity */
    /* staging ring: chunks handed to ops so far (identical on every rank),
     * and this rank's progress in each phase (mirrors its own counters) */
    uint64_t next_gen, staged, reduced, done;
    /* ops (every path) started and checked/finished here (the counters
     * entered / finished mirror them); regions allocated so far */
    uint64_t started, finished, next_region;
    uint64_t a2a_k; /* the last direct all-to-all started here: whose table ctl->a2a holds */
    const char *desc_file[TD_SHM_DESCS]; /* __FILE__ whose name desc[i].file holds */
    td_shm_region *regions;
    /* device payloads (shm.c): the ring is their staging pool; counted in
     * TD_MEM_COMM from the first such op (pool_bytes), and a bf16 piece to
     * round results in before they go up (h16, TD_SHM_SLOT_BYTES / 2) */
    size_t pool_bytes;
    void *h16;
};

static inline int td_shm_all_reached(const td_shm *s, size_t field, uint64_t value) {
    for (int j = 0; j < s->n; j++) {
        const _Atomic uint64_t *c = (const _Atomic uint64_t *)((const char *)s->ctl[j] + field);
        if (atomic_load_explicit(c, memory_order_acquire) < value) return 0;
    }
    return 1;
}

static inline void td_shm_publish(_Atomic uint64_t *c, uint64_t value) {
    atomic_store_explicit(c, value, memory_order_release);
}

static inline void td_shm_op_init(td_shm_op *op, td_shm *s, td_shm_kind kind, const void *send,
                                  void *out, size_t count, td_dtype dt, td_redop redop,
                                  uint64_t seq) {
    op->shm = s;
    op->checked = 0;
    op->kind = kind;
    op->send = send;
    op->buf = out;
    op->count = count;
    op->dt = dt;
    op->redop = redop;
    op->seq = seq;
    op->moved = 0;
    op->dev = 0;
    op->a2a = NULL;
}

/* Collective over mpi: 1 when /dev/shm (where Open MPI backs shared windows)
 * has room for `bytes` from every member, on every member; else 0 on all,
 * with one note saying what `what` falls back to. */
int td_shm_room(MPI_Comm mpi, size_t bytes, const char *what);

/* shm_agree.c: the descriptors. */
/* Publishes op's descriptor as the group's next op (after every rank is past
 * the op that used its slot) and sets op->k, op->path. g, offset: the shared
 * region holding a direct op's input (NULL, 0 otherwise). */
void td_shm_announce(td_shm_op *op, td_shm_path path, const td_shm_region *g, uint64_t offset);
/* Fails with one line naming both descriptors unless every rank's
 * descriptor of op k matches this rank's. Every rank must have entered k. */
void td_shm_check_peers(const td_shm_op *op);

/* shm_direct.c, for shm.c: direct ops behind the td_shm_op interface. */
/* op's kind, count, buffers and seq set: announces a direct op on `send`
 * (its first send_bytes) when it lies in a shared region; 0 and nothing done
 * otherwise. */
int td_shm_direct_begin(td_shm_op *op, td_shm *s, const void *send, size_t send_bytes);
/* Rank j's input of direct op op->k (its first `bytes` checked to lie in
 * j's part of the region), from j's descriptor. */
char *td_shm_peer_input(const td_shm_op *op, int j, size_t bytes);
/* alltoall.c: this rank's part of a direct all-to-all: its blocks copied
 * out of every rank's send buffer. */
void td_a2a_shm_part(const td_shm_op *op);
int td_shm_direct_progress(td_shm_op *op);
void td_shm_regions_free(td_shm *s);
/* The ring slots of every rank (bytes each) as a shared region, registered
 * once; this rank's part, *elems fp32 long. */
float *td_shm_ring_stage(td_shm *s, size_t bytes, size_t *elems);

#endif
