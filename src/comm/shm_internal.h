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

typedef struct {
    uint64_t region; /* td_shm_region id, the same on every rank */
    uint64_t offset; /* bytes into this rank's part of the region: the op's input */
    uint64_t count;  /* the op's count (fp32 elements, per rank for scatter/gather) */
    uint64_t kind;   /* td_shm_kind, to name a mismatch */
} td_shm_desc;

/* One per rank, written only by its owner; every counter on its own line. */
typedef struct {
    /* staging ring: chunks finished in each phase */
    _Alignas(TD_LINE) _Atomic uint64_t staged;
    _Alignas(TD_LINE) _Atomic uint64_t reduced;
    _Alignas(TD_LINE) _Atomic uint64_t done;
    /* direct ops: the last one started (its descriptor is published), and
     * the last one whose part this rank finished */
    _Alignas(TD_LINE) _Atomic uint64_t entered;
    _Alignas(TD_LINE) _Atomic uint64_t finished;
    _Alignas(TD_LINE) td_shm_desc desc[TD_SHM_DESCS]; /* op k in desc[k % TD_SHM_DESCS] */
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
    td_shm_ctl **ctl; /* [n] */
    float **slot;     /* [n]: rank j's ring slots, TD_SHM_SLOTS x slot capacity */
    /* staging ring: chunks handed to ops so far (identical on every rank),
     * and this rank's progress in each phase (mirrors its own counters) */
    uint64_t next_gen, staged, reduced, done;
    /* direct ops: started and finished here; regions allocated so far */
    uint64_t direct_started, direct_finished, next_region;
    td_shm_region *regions;
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
    op->kind = kind;
    op->send = send;
    op->buf = out;
    op->count = count;
    op->dt = dt;
    op->redop = redop;
    op->seq = seq;
    op->moved = 0;
}

/* Collective over mpi: 1 when /dev/shm (where Open MPI backs shared windows)
 * has room for `bytes` from every member, on every member; else 0 on all,
 * with one note saying what `what` falls back to. */
int td_shm_room(MPI_Comm mpi, size_t bytes, const char *what);

/* shm_direct.c, for shm.c: direct ops behind the td_shm_op interface. */
/* op's kind, count, buffers and seq set: publishes `send` (send_elems fp32)
 * when it lies in a shared region; 0 and nothing done otherwise. */
int td_shm_direct_begin(td_shm_op *op, td_shm *s, const void *send, size_t send_elems);
int td_shm_direct_progress(td_shm_op *op);
void td_shm_regions_free(td_shm *s);

#endif
