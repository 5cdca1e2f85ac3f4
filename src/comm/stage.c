/* Staging: device buffers through host-only transports.
 *
 * Every transport today (SELF, SHM, HIER, MPI) reads and writes host memory
 * only, and Open MPI here is not CUDA-aware. When a buffer handed to a comm
 * call is device memory (td_dev_is_device) and the group's row is host_only,
 * the request runs on host copies instead:
 *   begin:      each device buffer gets a block of the staging pool; its
 *               input is downloaded into it (td_dev_download, TD_HOST_COMM)
 *               and an event is recorded after the downloads;
 *   progress:   before the row or MPI reads a copy, the event is waited on
 *               (td_dev_event_wait): the downloads have landed;
 *   completion: the outputs are uploaded (td_dev_upload, TD_HOST_COMM), the
 *               compute stream waits for them (td_dev_stream_wait), and the
 *               blocks go back to the pool.
 * The copies are the backend's named copies, never a host memcpy of device
 * memory. A send and a receive buffer that overlap (in-place reduce-scatter
 * and all-gather) share one block, so the transport sees the same aliasing.
 * What each op reads and writes: all-reduce in and out; reduce in, out on
 * the root; broadcast in on the root, out elsewhere; reduce-scatter and
 * all-gather the send in and the receive out; send in; receive out (what
 * arrived: a shorter message leaves the rest as it was);
 * all-to-all the send in and the receive extent in and out (the gaps
 * between receive blocks must stay as they were).
 *
 * The pool: blocks allocated once (td_alloc, TD_MEM_COMM, page-rounded) and
 * grown when a request needs more than a free block holds; a block serves
 * one request at a time and returns at its completion; freed at finalize.
 * Its size is the most the requests in flight together have staged
 * (td_comm_staging_bytes). On the cpu device nothing is staged and the pool
 * stays empty. A run reserves it instead at its memory plan's size
 * (td_comm_staging_reserve): one block for the largest payload staged alone,
 * n_small for the others and n_p2p for a point-to-point exchange's pieces,
 * every group's shared ring as well; then
 * nothing grows, and a payload no free block holds is an internal error
 * naming the request (a planning mistake fails loudly).
 *
 * Rows that stage in pieces themselves (the row's `stages`): a group with a
 * shared ring all-reduces a device payload through the ring's slots, a
 * chunk at a time (shm.c), and a hierarchical group through its node
 * ring's (hier.c); those requests take no block here, so the pool does not
 * grow with the payload. The rings that serve so count in
 * td_comm_staging_bytes (td_stage_pool_add). */
#include <stdio.h>
#include <stdlib.h>

#include "comm_internal.h"

typedef struct {
    char *p;
    size_t bytes;
    int busy;
} td_stage_block;

static td_stage_block *g_blocks;
static int g_n_blocks, g_cap_blocks;
static size_t g_pool_bytes;
static ptrdiff_t g_ring_bytes; /* shared-memory rings serving as the pool (shm.c) */

size_t td_comm_staging_bytes(void) { return g_pool_bytes + (size_t)g_ring_bytes; }
void td_stage_pool_add(ptrdiff_t bytes) {
    g_ring_bytes += bytes;
    TD_ASSERT(g_ring_bytes >= 0);
}

static size_t page_round(size_t b) { return (b + 4095) & ~(size_t)4095; }

static int g_reserved;
int td_stage_reserved(void) { return g_reserved; }

static void new_block(size_t bytes) {
    if (g_n_blocks == g_cap_blocks) {
        g_cap_blocks = g_cap_blocks ? 2 * g_cap_blocks : 8;
        g_blocks = realloc(g_blocks, (size_t)g_cap_blocks * sizeof *g_blocks);
        TD_ASSERT(g_blocks);
    }
    td_stage_block *b = &g_blocks[g_n_blocks++];
    *b = (td_stage_block){0};
    b->bytes = page_round(bytes);
    b->p = td_alloc(b->bytes, TD_MEM_COMM);
    g_pool_bytes += b->bytes;
}

/* The rings of the groups open now (each td_comm_staging_plan_bytes), and
 * the blocks; reserve: take them. */
static size_t staging(const td_staging_shape *sh, int reserve) {
    /* the cpu device stages nothing, nor does a run of one process (no
     * group of more than one rank) */
    if (!td_backend_is_device() || td_comm_size(td_comm_world()) < 2) return 0;
    td_comm **open;
    int n = td_comm_open_groups(&open);
    td_dtype dt = sh->bf16 ? TD_BF16 : TD_F32;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!open[i]->shm) continue;
        total += td_comm_staging_plan_bytes(1, dt);
        if (reserve) td_shm_as_pool(open[i]->shm, dt);
    }
    if (sh->big) total += page_round(sh->big);
    if (sh->small) total += (size_t)sh->n_small * page_round(sh->small);
    if (sh->p2p) total += (size_t)sh->n_p2p * page_round(sh->p2p);
    if (reserve) {
        /* a second run in this process: the last one's blocks go back first */
        for (int i = 0; i < g_n_blocks; i++)
            TD_CHECK(!g_blocks[i].busy, "comm staging reserved while block %d is staging a request", i);
        td_stage_shutdown();
        if (sh->big) new_block(sh->big);
        for (int i = 0; sh->small && i < sh->n_small; i++) new_block(sh->small);
        for (int i = 0; sh->p2p && i < sh->n_p2p; i++) new_block(sh->p2p);
        g_reserved = 1;
    }
    return total;
}

size_t td_comm_staging_plan(const td_staging_shape *sh) { return staging(sh, 0); }
void td_comm_staging_reserve(const td_staging_shape *sh) { staging(sh, 1); }

/* A free block of at least `bytes`: the smallest that fits, else the
 * largest free one grown, else a new one. Returns its index. */
static int take(const td_request *r, size_t bytes) {
    int fit = -1, grow = -1;
    for (int i = 0; i < g_n_blocks; i++) {
        td_stage_block *b = &g_blocks[i];
        if (b->busy) continue;
        if (b->bytes >= bytes && (fit < 0 || b->bytes < g_blocks[fit].bytes)) fit = i;
        if (grow < 0 || b->bytes > g_blocks[grow].bytes) grow = i;
    }
    if (fit < 0 && g_reserved) {
        size_t largest = 0, busy = 0;
        for (int i = 0; i < g_n_blocks; i++) {
            if (g_blocks[i].busy) busy++;
            else if (g_blocks[i].bytes > largest) largest = g_blocks[i].bytes;
        }
        td_fail("internal error: %s on %s stages %zu B of device memory, but no free block of the "
                "staging the memory plan reserved holds it (%d blocks, %zu busy, largest free %zu B, "
                "%zu B in all): the plan's staging bound (td_run_staging_shape) is short",
                td_op_name(r->op), r->comm->label, bytes, g_n_blocks, busy, largest, g_pool_bytes);
    }
    if (fit < 0) {
        if (grow < 0) {
            if (g_n_blocks == g_cap_blocks) {
                g_cap_blocks = g_cap_blocks ? 2 * g_cap_blocks : 8;
                g_blocks = realloc(g_blocks, (size_t)g_cap_blocks * sizeof *g_blocks);
                TD_ASSERT(g_blocks);
            }
            grow = g_n_blocks++;
            g_blocks[grow] = (td_stage_block){0};
        }
        td_stage_block *b = &g_blocks[grow];
        g_pool_bytes -= b->bytes;
        td_free(b->p);
        b->bytes = page_round(bytes);
        b->p = td_alloc(b->bytes, TD_MEM_COMM);
        g_pool_bytes += b->bytes;
        fit = grow;
    }
    g_blocks[fit].busy = 1;
    return fit;
}

void td_stage_shutdown(void) {
    for (int i = 0; i < g_n_blocks; i++) {
        if (g_blocks[i].busy)
            fprintf(stderr, "trident: rank %d: warning: comm staging block %d still in use at finalize\n",
                    td_comm_world_rank(), i);
        td_free(g_blocks[i].p);
    }
    free(g_blocks);
    g_blocks = NULL;
    g_n_blocks = g_cap_blocks = 0;
    g_pool_bytes = 0;
    g_reserved = 0;
}

void td_comm_host_check(td_op op, const td_comm *c, const char *file, int line, const void *p,
                        const char *what, const char *why) {
    const char *name = NULL;
    size_t off = 0;
    if (!td_dev_is_device(p, &name, &off)) return;
    char reads[96];
    if (!why) snprintf(reads, sizeof reads, "%s reads host memory only", c->ops->name);
    td_fail("%s on %s at %s:%d: %s '%s' at offset %zu is device memory and %s",
            td_op_name(op), c->label, td_base_name(file), line, what, name ? name : "?", off,
            why ? why : reads);
}

/* A caller's buffer: its extent, whether the op reads it, writes it. */
typedef struct {
    const char *p;
    size_t bytes;
    int in, out;
    int dev;
} span;

void td_stage_begin(td_request *r, size_t a2a_send, size_t a2a_recv) {
    r->stg_wait = r->stg_n = r->stg_nup = 0;
    if (!r->comm->ops->host_only || !td_backend_is_device()) return;
    if (r->comm->ops->stages && r->comm->ops->stages(r)) return; /* in pieces, by the row */
    const td_comm *c = r->comm;
    size_t el = td_dtype_size(r->dt), n = r->count * el, all = n * (size_t)c->size;
    int root = c->rank == r->peer;
    span s = {r->send, 0, 1, 0, 0}, b = {r->buf, 0, 0, 1, 0};
    switch (r->op) {
    case TD_OP_ALLREDUCE: b.bytes = n, b.in = 1; break;
    case TD_OP_REDUCE: b.bytes = n, b.in = 1, b.out = root; break;
    case TD_OP_BCAST: b.bytes = n, b.in = root, b.out = !root; break;
    case TD_OP_REDUCE_SCATTER: s.bytes = all, b.bytes = n; break;
    case TD_OP_ALL_GATHER: s.bytes = n, b.bytes = all; break;
    case TD_OP_SEND: s.bytes = n; break;
    case TD_OP_RECV: b.bytes = n; break;
    case TD_OP_ALL_TO_ALL:
    case TD_OP_ALL_TO_ALL_V: s.bytes = a2a_send, b.bytes = a2a_recv, b.in = 1; break;
    default: return; /* a barrier moves no data */
    }
    s.dev = s.p && s.bytes && td_dev_is_device(s.p, NULL, NULL);
    b.dev = b.p && b.bytes && td_dev_is_device(b.p, NULL, NULL);
    if (!s.dev && !b.dev) return;
    span *sp[2] = {&s, &b};
    const char *host[2] = {NULL, NULL};
    if (s.dev && b.dev && td_ranges_overlap(s.p, s.bytes, b.p, b.bytes)) {
        /* one block for both: the transport sees the caller's aliasing */
        const char *lo = s.p < b.p ? s.p : b.p;
        const char *hi = s.p + s.bytes > b.p + b.bytes ? s.p + s.bytes : b.p + b.bytes;
        int k = take(r, (size_t)(hi - lo));
        r->stg_block[r->stg_n++] = k;
        char *h = g_blocks[k].p;
        /* the input's extent: what the op reads of the union */
        if (s.in) td_dev_download(h + (s.p - lo), s.p, s.bytes, TD_HOST_COMM);
        if (b.in) td_dev_download(h + (b.p - lo), b.p, b.bytes, TD_HOST_COMM);
        host[0] = h + (s.p - lo);
        host[1] = h + (b.p - lo);
    } else {
        for (int i = 0; i < 2; i++) {
            if (!sp[i]->dev) continue;
            int k = take(r, sp[i]->bytes);
            r->stg_block[r->stg_n++] = k;
            host[i] = g_blocks[k].p;
            if (sp[i]->in) td_dev_download(g_blocks[k].p, sp[i]->p, sp[i]->bytes, TD_HOST_COMM);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!sp[i]->dev) continue;
        if (sp[i]->out) {
            r->stg_up[r->stg_nup].dev = (void *)sp[i]->p;
            r->stg_up[r->stg_nup].host = host[i];
            r->stg_up[r->stg_nup].bytes = sp[i]->bytes;
            r->stg_nup++;
        }
    }
    if (s.dev) r->send = host[0];
    if (b.dev) r->buf = (void *)host[1];
    r->stg_ev = td_dev_event_record(); /* after the downloads: its wait lands them */
    r->stg_wait = 1;
}

void td_stage_received(td_request *r, const MPI_Status *st, MPI_Datatype derived) {
    if (derived != MPI_DATATYPE_NULL) return; /* above INT_MAX elements: the whole buffer */
    int n = 0;
    TD_MPI(MPI_Get_count(st, td_mpi_type(r->dt), &n));
    size_t got = (size_t)n * td_dtype_size(r->dt);
    if (n >= 0 && got < r->stg_up[0].bytes) r->stg_up[0].bytes = got;
}

void td_stage_wait(td_request *r) {
    td_dev_event_wait(r->stg_ev);
    r->stg_wait = 0;
}

void td_stage_end(td_request *r) {
    if (!r->stg_n) return;
    td_stage_ready(r); /* a request that completed without reading (an empty one) */
    for (int i = 0; i < r->stg_nup; i++)
        td_dev_upload(r->stg_up[i].dev, r->stg_up[i].host, r->stg_up[i].bytes, TD_HOST_COMM);
    /* the compute stream's next op sees the results (one stream: in order
     * already; a device with a comm stream needs the wait) */
    td_dev_stream_wait(td_dev_event_record());
    for (int i = 0; i < r->stg_n; i++) g_blocks[r->stg_block[i]].busy = 0;
    r->stg_n = r->stg_nup = 0;
}
