/* All-reduce through shared memory, for groups whose ranks share one node.
 *
 * Why: through MPI every byte goes through Open MPI's shared-memory transport
 * and its temporary buffers, with a per-call cost that dominates small
 * payloads. Ranks on one node can instead meet in a small shared staging ring
 * and each reduce one part of every chunk, reading the others' staged copies
 * directly: each rank reads and writes its own payload once, and the rest
 * stays in cache. NCCL, oneCCL and DeepSpeed's CPU all-reduce work this way
 * within a node. Measured (`trident bench comm`, 2 ranks, plain buffers on
 * huge pages): 2-4x MPI's bandwidth from 4 KiB to 256 KiB, on par with one
 * MPI call at 1-4 MiB (in cache, MPI's single copy is as good), and at
 * 64 MiB ~1.15x MPI in 1 MiB pieces and ~4x one MPI call.
 *
 * The ring: every rank owns TD_SHM_SLOTS slots of up to TD_SHM_SLOT_BYTES of
 * fp32 and three counters on their own cache lines. The group works through
 * one stream of chunks numbered g = 0, 1, 2, ... across calls; chunk g uses
 * slot g % TD_SHM_SLOTS on every rank. A chunk is cut into one part per rank.
 * For each chunk every rank
 *   1. stages: copies the parts the others own into its slot (bf16 -> fp32),
 *      once every rank is done with the chunk that used the slot before;
 *      publishes staged = g+1;
 *   2. reduces its own part once every rank has staged g: sums the part over
 *      all ranks in rank order (its own term straight from the payload) and
 *      writes the sum to the payload and to its slot; publishes reduced = g+1;
 *   3. gathers: copies each other rank's reduced part from that rank's slot
 *      into the payload (fp32 -> bf16) once it is published; publishes
 *      done = g+1.
 * Each part is summed by one rank, so every rank ends with the same bits.
 * A counter is "chunks finished so far"; each phase takes chunks strictly in
 * order (across ops too), which is what makes one counter per phase enough.
 *
 * A device payload (td_dev_is_device: the guard, a GPU) is staged through
 * the same ring, so the window is its staging pool, in pieces of one chunk
 * with TD_SHM_SLOTS of them in flight (td_comm_staging_plan_bytes): step 1
 * downloads the whole chunk into this rank's slot (TD_HOST_COMM; bf16
 * widened there), step 2 reads this rank's own term from the slot instead
 * of the payload and writes the sum there only, and step 3 copies the other
 * ranks' reduced parts into the slot and uploads the chunk (bf16 rounded
 * into h16 first). Same sums in the same order, so the same bits as a host
 * payload. The slot's part p is free to overwrite in step 3: rank p read it
 * in its step 2, which the gate (every rank reduced the chunk) has passed.
 *
 * Device reduce-scatters and all-gathers (fp32) run through the ring the
 * same way (the ring is otherwise all-reduce only): a chunk of a
 * reduce-scatter is elements [o, o+len) of each of the n blocks of the
 * input, downloaded packed into the slot; step 2 sums block `me` over every
 * rank's slot in rank order and uploads it. A chunk of an all-gather is
 * elements [o, o+len) of the input; step 2 uploads every rank's slot into
 * its block of the output. Step 3 only gates the slots' reuse.
 *
 * Nothing here blocks: td_shm_progress() does whatever its conditions allow
 * and returns, so nonblocking requests progress it from td_test/td_wait.
 * Blocking calls loop on it (td_shm_run), yielding the core when a peer is
 * slow (more ranks than cores is common here) and aborting with the trace
 * after td_comm_timeout() seconds without progress. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "shm_internal.h"

/* Per rank: the counters, then the slots. */
#define CTL_BYTES 8192
#define SEGMENT_BYTES (CTL_BYTES + (size_t)TD_SHM_SLOTS * TD_SHM_SLOT_BYTES)
_Static_assert(sizeof(td_shm_ctl) <= CTL_BYTES, "control block outgrew its pages");

static int g_shm_enabled = 1;
static size_t g_chunk_bytes = TD_SHM_DEFAULT_CHUNK;

void td_comm_set_shm(int on) { g_shm_enabled = on; }
int td_comm_shm(void) { return g_shm_enabled; }

void td_comm_set_shm_chunk(size_t bytes) {
    if (bytes == 0) bytes = TD_SHM_DEFAULT_CHUNK;
    bytes = bytes / 256 * 256; /* whole cache lines per rank's part, at 4 ranks */
    if (bytes < 256) bytes = 256;
    if (bytes > TD_SHM_SLOT_BYTES) bytes = TD_SHM_SLOT_BYTES;
    g_chunk_bytes = bytes;
}
size_t td_comm_shm_chunk(void) { return g_chunk_bytes; }

int td_shm_room(MPI_Comm mpi, size_t bytes, const char *what) {
    unsigned long long mine = bytes, all = 0;
    TD_MPI(MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, mpi));
    struct statvfs v;
    /* no /dev/shm: Open MPI backs windows elsewhere, and MPI says if it fails */
    unsigned long long avail =
        statvfs("/dev/shm", &v) == 0 ? (unsigned long long)v.f_bavail * v.f_frsize : ~0ULL;
    int ok = avail >= all + all / 8 + ((unsigned long long)1 << 20), all_ok = 0;
    TD_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi));
    if (!all_ok) {
        char need[32], have[32];
        td_fmt_bytes(need, sizeof need, (double)all);
        td_fmt_bytes(have, sizeof have, (double)avail);
        int r = 0;
        TD_MPI(MPI_Comm_rank(mpi, &r));
        if (r == 0) /* one note per group: the members share one /dev/shm */
            fprintf(stderr,
                    "trident: rank %d: note: /dev/shm has %s free but %s needs %s; it goes "
                    "through MPI instead (a larger /dev/shm, e.g. docker --shm-size, restores "
                    "the shared-memory path)\n",
                    td_comm_world_rank(), have, what, need);
    }
    return all_ok;
}

td_shm *td_shm_open(MPI_Comm mpi, int rank, int size, const char *label,
                    const int *world_ranks) {
    /* the caller (nodes.c) decided, alike on every member, that the group
     * lies on one node and wants shared memory */
    char what[TD_COMM_LABEL + 48];
    snprintf(what, sizeof what, "the shared-memory all-reduce ring of %s", label);
    if (!td_shm_room(mpi, SEGMENT_BYTES + TD_LINE, what)) return NULL;

    td_shm *s = calloc(1, sizeof *s);
    TD_ASSERT(s);
    s->n = size;
    s->me = rank;
    snprintf(s->label, sizeof s->label, "%s", label);
    s->world_ranks = world_ranks;
    s->ctl = calloc((size_t)size, sizeof *s->ctl);
    s->slot = calloc((size_t)size, sizeof *s->slot);
    TD_ASSERT(s->ctl && s->slot);
    MPI_Info info;
    TD_MPI(MPI_Info_create(&info));
    /* each rank's segment on its own pages: first touch places it near its owner */
    TD_MPI(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    void *base = NULL;
    /* + TD_LINE: MPI promises no alignment; we align each segment ourselves */
    TD_MPI(
        MPI_Win_allocate_shared((MPI_Aint)(SEGMENT_BYTES + TD_LINE), 1, info, mpi, &base, &s->win));
    TD_MPI(MPI_Info_free(&info));
    for (int j = 0; j < size; j++) {
        MPI_Aint bytes;
        int disp;
        void *p;
        TD_MPI(MPI_Win_shared_query(s->win, j, &bytes, &disp, &p));
        TD_ASSERT((size_t)bytes >= SEGMENT_BYTES + TD_LINE);
        p = (void *)(((uintptr_t)p + TD_LINE - 1) & ~(uintptr_t)(TD_LINE - 1));
        s->ctl[j] = p;
        s->slot[j] = (float *)((char *)p + CTL_BYTES);
    }
    TD_ASSERT(atomic_is_lock_free(&s->ctl[rank]->staged));
    memset(s->ctl[rank], 0, sizeof(td_shm_ctl)); /* every counter 0, every descriptor empty */
    memset(s->slot[rank], 0, (size_t)TD_SHM_SLOTS * TD_SHM_SLOT_BYTES); /* first touch */
    TD_MPI(MPI_Barrier(mpi)); /* every counter is zero before anyone reads it */
    return s;
}

void td_shm_close(td_shm *s) {
    if (!s) return;
    if (s->pool_bytes) { /* it served as the staging pool of device payloads */
        td_mem_account(TD_MEM_COMM, -(ptrdiff_t)(s->pool_bytes - (s->h16 ? TD_SHM_SLOT_BYTES / 2 : 0)));
        td_stage_pool_add(-(ptrdiff_t)s->pool_bytes);
        td_free(s->h16);
    }
    td_shm_regions_free(s);
    TD_MPI(MPI_Win_free(&s->win));
    free(s->ctl);
    free(s->slot);
    free(s);
}

float *td_shm_stage(td_shm *s, size_t *elems) {
    return td_shm_ring_stage(s, (size_t)TD_SHM_SLOTS * TD_SHM_SLOT_BYTES, elems);
}

/* ---- one all-reduce ---------------------------------------------------- */

int td_shm_ring_stages(td_shm_kind kind, const void *send, const void *buf, td_dtype dt) {
    if (kind == TD_SHM_ALLREDUCE) return td_dev_is_device(buf, NULL, NULL);
    /* fp32 only, as straight between shared buffers on the cpu device
     * (bf16 goes through MPI there: the same path keeps the same bits) */
    return (kind == TD_SHM_REDUCE_SCATTER || kind == TD_SHM_ALL_GATHER) && dt == TD_F32 &&
           td_dev_is_device(send, NULL, NULL) && td_dev_is_device(buf, NULL, NULL);
}

size_t td_comm_staging_plan_bytes(int shares_memory, td_dtype dt) {
    if (!shares_memory) return 0;
    return (size_t)TD_SHM_SLOTS * TD_SHM_SLOT_BYTES + (dt == TD_BF16 ? TD_SHM_SLOT_BYTES / 2 : 0);
}

/* The ring's slots become the staging pool of device payloads: counted once
 * (TD_MEM_COMM, td_comm_staging_bytes), the bf16 piece allocated when a bf16
 * payload first needs it. */
void td_shm_as_pool(td_shm *s, td_dtype dt) {
    if (td_stage_reserved() && (!s->pool_bytes || (dt == TD_BF16 && !s->h16)))
        td_fail("internal error: %s's shared ring stages a %s device payload, but the memory plan "
                "reserved no %s for it (td_comm_staging_reserve)",
                s->label, td_dtype_name(dt), s->pool_bytes ? "bf16 piece" : "ring");
    if (!s->pool_bytes) {
        s->pool_bytes = td_comm_staging_plan_bytes(1, TD_F32);
        td_mem_account(TD_MEM_COMM, (ptrdiff_t)s->pool_bytes);
        td_stage_pool_add((ptrdiff_t)s->pool_bytes);
    }
    if (dt == TD_BF16 && !s->h16) {
        s->h16 = td_alloc(TD_SHM_SLOT_BYTES / 2, TD_MEM_COMM);
        s->pool_bytes += TD_SHM_SLOT_BYTES / 2;
        td_stage_pool_add(TD_SHM_SLOT_BYTES / 2);
    }
}

int td_shm_begin(td_shm_op *op, td_shm *s, td_shm_kind kind, const void *send, void *buf,
                 size_t count, td_dtype dt, td_redop redop, int use_shm, uint64_t seq,
                 const char *file, int line) {
    td_shm_op_init(op, s, kind, send, buf, count, dt, redop, seq);
    op->file = file;
    op->line = line;
    size_t send_elems = kind == TD_SHM_REDUCE_SCATTER ? count * (size_t)s->n : count;
    if (use_shm && dt == TD_F32 && td_shm_direct_begin(op, s, send, send_elems * sizeof(float)))
        return 1;
    int ring = kind == TD_SHM_ALLREDUCE || td_shm_ring_stages(kind, send, buf, dt);
    if (!use_shm || !ring) {
        td_shm_announce(op, TD_PATH_MPI, NULL, 0);
        return 0;
    }
    td_shm_announce(op, TD_PATH_RING, NULL, 0);
    op->dev = td_shm_ring_stages(kind, send, buf, dt);
    if (op->dev) td_shm_as_pool(s, dt);
    /* a reduce-scatter's chunk holds its elements of every rank's block */
    op->chunk_elems = kind == TD_SHM_REDUCE_SCATTER ? td_max_sz(1, g_chunk_bytes / (4 * (size_t)s->n))
                                                    : g_chunk_bytes / 4;
    op->n_chunks = (count + op->chunk_elems - 1) / op->chunk_elems;
    op->gen0 = s->next_gen;
    s->next_gen += op->n_chunks;
    return 1;
}

static float *slot_of(const td_shm *s, int rank, uint64_t g) {
    return s->slot[rank] + (size_t)(g % TD_SHM_SLOTS) * (TD_SHM_SLOT_BYTES / 4);
}

/* Part p of a chunk of len elements: cut on 16-element (cache-line) bounds so
 * no two ranks write one line. */
static size_t part_lo(size_t len, int p, int n) {
    if (p >= n) return len;
    return (len * (size_t)p / (size_t)n) & ~(size_t)15;
}

static void add_into(float *restrict out, const float *restrict in, size_t n, td_redop redop) {
    if (redop == TD_MAX)
        for (size_t i = 0; i < n; i++) out[i] = out[i] > in[i] ? out[i] : in[i];
    else
        for (size_t i = 0; i < n; i++) out[i] += in[i];
}

/* The chunk's elements [lo, hi) of the payload, widened to fp32 in dst. */
static void load(const td_shm_op *op, float *dst, size_t lo, size_t hi) {
    if (op->dt == TD_BF16)
        td_bf16_to_f32_n(dst, (const uint16_t *)op->buf + lo, hi - lo);
    else
        memcpy(dst, (const float *)op->buf + lo, (hi - lo) * 4);
}

static void store(const td_shm_op *op, size_t lo, const float *src, size_t n) {
    if (op->dt == TD_BF16)
        td_f32_to_bf16_n((uint16_t *)op->buf + lo, src, n);
    else
        memcpy((float *)op->buf + lo, src, n * 4);
}

/* 1. Others need the parts they reduce; my own part I read from the payload. */
static void stage_chunk(const td_shm_op *op, const td_shm *s, uint64_t g, size_t o, size_t len) {
    float *slot = slot_of(s, s->me, g);
    if (op->dev && op->kind != TD_SHM_ALLREDUCE) {
        const float *in = (const float *)op->send + o;
        if (op->kind == TD_SHM_REDUCE_SCATTER) /* elements [o, o+len) of every block, packed */
            td_dev_download_2d(slot, len * 4, in, op->count * 4, len * 4, (size_t)s->n, TD_HOST_COMM);
        else
            td_dev_download(slot, in, len * 4, TD_HOST_COMM);
        td_dev_event_wait(td_dev_event_record());
        return;
    }
    if (op->dev) { /* the whole chunk, my part too: the payload is not host memory */
        size_t es = td_dtype_size(op->dt);
        td_dev_download(slot, (const char *)op->buf + o * es, len * es, TD_HOST_COMM);
        td_dev_event_wait(td_dev_event_record()); /* landed before the others read it */
        if (op->dt == TD_BF16) td_bf16_to_f32_inplace(slot, len);
        return;
    }
    for (int p = 0; p < s->n; p++) {
        if (p == s->me) continue;
        size_t lo = part_lo(len, p, s->n), hi = part_lo(len, p + 1, s->n);
        load(op, slot + lo, o + lo, o + hi);
    }
}

/* Elements [lo, hi) of rank j's contribution: my own straight from the
 * payload (it was never staged), the others' from their slots. Returns fp32,
 * widened into tmp when the payload is bf16. */
static const float *term(const td_shm_op *op, const td_shm *s, uint64_t g, int j, size_t o,
                         size_t lo, size_t hi, float *tmp) {
    if (j != s->me || op->dev) return slot_of(s, j, g) + lo; /* a device payload: staged */
    if (op->dt == TD_F32) return (const float *)op->buf + o + lo;
    load(op, tmp, o + lo, o + hi);
    return tmp;
}

/* 2. My part, summed in rank order (every part has one owner, so all ranks
 * get the same bits), written in one pass to the payload and to my slot for
 * the others: the payload's lines are read and written back while in L1. */
/* Step 2 of a staged reduce-scatter: block `me` of every rank's chunk,
 * summed in rank order (as shm_direct.c's reduce_scatter_part), into my
 * slot (only I read its block me) and up into the output. */
static void reduce_scatter_chunk(const td_shm_op *op, const td_shm *s, uint64_t g, size_t o,
                                 size_t len) {
    enum { B = 1024 };
    float acc[B], *out = slot_of(s, s->me, g) + (size_t)s->me * len;
    for (size_t b = 0; b < len; b += B) {
        size_t m = td_min_sz(B, len - b);
        memcpy(acc, slot_of(s, 0, g) + (size_t)s->me * len + b, m * 4);
        for (int j = 1; j < s->n; j++) add_into(acc, slot_of(s, j, g) + (size_t)s->me * len + b, m, TD_SUM);
        memcpy(out + b, acc, m * 4);
    }
    td_dev_upload((float *)op->buf + o, out, len * 4, TD_HOST_COMM);
}

/* Step 2 of a staged all-gather: every rank's staged chunk up into its
 * block of the output (mine too unless the input is already there). */
static void all_gather_chunk(const td_shm_op *op, const td_shm *s, uint64_t g, size_t o,
                             size_t len) {
    float *out = op->buf;
    for (int j = 0; j < s->n; j++) {
        float *dst = out + (size_t)j * op->count + o;
        if (dst != (const float *)op->send + o) td_dev_upload(dst, slot_of(s, j, g), len * 4, TD_HOST_COMM);
    }
}

static void reduce_part(const td_shm_op *op, const td_shm *s, uint64_t g, size_t o, size_t len) {
    enum { B = 1024 };
    float acc[B], tmp[B];
    if (op->kind != TD_SHM_ALLREDUCE) { /* staged device buffers only */
        if (op->kind == TD_SHM_REDUCE_SCATTER)
            reduce_scatter_chunk(op, s, g, o, len);
        else
            all_gather_chunk(op, s, g, o, len);
        td_dev_stream_wait(td_dev_event_record()); /* the compute stream's next op sees it */
        return;
    }
    size_t lo = part_lo(len, s->me, s->n), hi = part_lo(len, s->me + 1, s->n);
    float *slot = slot_of(s, s->me, g);
    if (s->n == 2 && op->dt == TD_F32 && op->redop == TD_SUM) {
        /* the common case in one pass: a + b is b + a exactly in IEEE */
        const float *restrict peer = slot_of(s, 1 - s->me, g);
        if (op->dev) { /* my term staged in my slot: the sum goes there only */
            for (size_t i = lo; i < hi; i++) slot[i] += peer[i];
            return;
        }
        float *restrict mine = (float *)op->buf + o, *restrict out = slot;
        for (size_t i = lo; i < hi; i++) {
            float v = mine[i] + peer[i];
            mine[i] = v;
            out[i] = v;
        }
        return;
    }
    for (size_t b = lo; b < hi; b += B) {
        size_t e = td_min_sz(hi, b + B), m = e - b;
        memcpy(acc, term(op, s, g, 0, o, b, e, tmp), m * 4);
        for (int j = 1; j < s->n; j++) add_into(acc, term(op, s, g, j, o, b, e, tmp), m, op->redop);
        memcpy(slot + b, acc, m * 4);
        if (!op->dev) store(op, o + b, acc, m);
    }
}

/* 3. Everyone else's reduced part into the payload. */
static void gather_chunk(const td_shm_op *op, const td_shm *s, uint64_t g, size_t o, size_t len) {
    /* a staged reduce-scatter or all-gather is done in step 2: this step is
     * the gate that every rank has read the slots (their reuse waits on it) */
    if (op->kind != TD_SHM_ALLREDUCE) return;
    float *slot = slot_of(s, s->me, g);
    for (int p = 0; p < s->n; p++) {
        if (p == s->me) continue;
        size_t lo = part_lo(len, p, s->n), hi = part_lo(len, p + 1, s->n);
        if (op->dev)
            memcpy(slot + lo, slot_of(s, p, g) + lo, (hi - lo) * 4);
        else
            store(op, o + lo, slot_of(s, p, g) + lo, hi - lo);
    }
    if (!op->dev) return;
    /* the reduced chunk up in one copy (read before td_dev_upload returns) */
    const void *up = slot;
    if (op->dt == TD_BF16) {
        td_f32_to_bf16_n(s->h16, slot, len); /* not in place: the others read my part */
        up = s->h16;
    }
    size_t es = td_dtype_size(op->dt);
    td_dev_upload((char *)op->buf + o * es, up, len * es, TD_HOST_COMM);
    td_dev_stream_wait(td_dev_event_record()); /* the compute stream's next op sees it */
}

/* Phase p of the next chunk this rank has for it, if its conditions hold:
 * the chunk belongs to op, this rank finished the phase before on it, and
 * the gate holds on every rank (stage: all are done with the chunk that used
 * the slot before; reduce: all staged it; gather: all reduced it). */
enum { STAGE, REDUCE, GATHER };
static int try_phase(td_shm_op *op, int p) {
    static void (*const run[3])(const td_shm_op *, const td_shm *, uint64_t, size_t,
                                size_t) = {stage_chunk, reduce_part, gather_chunk};
    static const size_t gate[3] = {offsetof(td_shm_ctl, done), offsetof(td_shm_ctl, staged),
                                   offsetof(td_shm_ctl, reduced)};
    td_shm *s = op->shm;
    td_shm_ctl *mine = s->ctl[s->me];
    uint64_t *local[3] = {&s->staged, &s->reduced, &s->done};
    _Atomic uint64_t *shared[3] = {&mine->staged, &mine->reduced, &mine->done};
    uint64_t g = *local[p];
    if (g < op->gen0 || g >= op->gen0 + op->n_chunks) return 0;
    if (p != STAGE && g >= *local[p - 1]) return 0;
    uint64_t need = p != STAGE ? g + 1 : g < TD_SHM_SLOTS ? 0 : g - TD_SHM_SLOTS + 1;
    if (need && !td_shm_all_reached(s, gate[p], need)) return 0;
    size_t o = (size_t)(g - op->gen0) * op->chunk_elems;
    run[p](op, s, g, o, td_min_sz(op->chunk_elems, op->count - o));
    td_shm_publish(shared[p], ++*local[p]);
    return 1;
}

int td_shm_progress(td_shm_op *op) {
    if (op->direct) return td_shm_direct_progress(op);
    int moved = 0, step;
    if (!op->checked) { /* no chunk moves before every rank's descriptor matched */
        op->moved = 0;
        if (!td_shm_agreed(op)) return 0;
        op->checked = moved = 1;
    }
    do {
        step = try_phase(op, STAGE);
        step |= try_phase(op, REDUCE);
        step |= try_phase(op, GATHER);
        moved |= step;
    } while (step);
    op->moved = moved;
    return op->shm->done >= op->gen0 + op->n_chunks;
}

void td_shm_idle(unsigned *idle, double *since, uint64_t seq) {
    /* Spin briefly (a peer on another core is microseconds away), then give
     * the core away: with more ranks than cores the peer we wait for may
     * need it. */
    if (++*idle < 64) {
        td_cpu_relax();
        return;
    }
    if (*idle == 64) *since = td_now_ms();
    sched_yield();
    td_requests_poll(); /* other ranks may wait on our nonblocking requests */
    double timeout = td_comm_timeout();
    if ((*idle & 255) == 0 && timeout > 0 && td_now_ms() - *since > timeout * 1000.0)
        td_trace_stuck(seq);
}

void td_shm_run(td_shm_op *op) {
    double since = 0;
    unsigned idle = 0;
    while (!td_shm_progress(op)) {
        if (op->moved)
            idle = 0;
        else
            td_shm_idle(&idle, &since, op->seq);
    }
}
