/* Requests: starting, progressing and waiting on ops, and the blocking calls.
 *
 * Nonblocking collectives keep at most td_comm_inflight() pieces per group in
 * MPI; td_test / td_wait progress every active request and issue more pieces.
 * MPI requires all ranks to start collectives on a group in the same order,
 * so pieces are issued strictly in start order per group: a later request on
 * a group issues nothing until every earlier one has issued all its pieces.
 * (Completion order, and which request the caller waits on first, then do not
 * matter.) An all-to-all is one "piece" here: it posts all its messages at
 * once, outside the piece budget, on tags of its own (alltoall.c).
 *
 * Blocking collectives call MPI's blocking collectives piece by piece:
 * measured faster than nonblocking pieces (libnbc) plus MPI_Test polling, see
 * `trident bench comm`. MPI forbids a blocking collective on one rank to match
 * a nonblocking one on another, so a blocking call never switches to the
 * request path; instead it first issues every piece still pending on its
 * group (order again), and the watchdog thread watches it (trace.c). Blocking
 * send / recv and all-to-all are start + wait: messages either way, and the
 * wait keeps the other requests progressing. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm_internal.h"
#include "trident/timeline.h"

static td_request *g_head, *g_tail; /* active requests in start order */
static unsigned g_walk;
static uint64_t g_progress;          /* pieces completed so far: the wait deadline resets on it */
static td_request g_blocking, g_p2p, g_a2a; /* the requests behind blocking calls */

/* At finalize: the blocking calls' scratch goes back to the allocator. */
void td_requests_shutdown(void) {
    if (g_head)
        fprintf(stderr,
                "trident: rank %d: warning: comm finalized with requests still active "
                "(first: #%llu)\n",
                td_comm_world_rank(), (unsigned long long)g_head->seq);
    td_piece_release(&g_blocking);
    td_piece_release(&g_p2p);
    td_piece_release(&g_a2a);
    td_stage_shutdown();
}

td_request *td_request_new(void) {
    td_request *r = calloc(1, sizeof *r);
    TD_ASSERT(r);
    return r;
}

void td_request_free(td_request *r) {
    if (!r) return;
    td_wait(r);
    td_piece_release(r);
    free(r);
}

int td_request_active(const td_request *r) { return r->active; }
int td_request_source(const td_request *r) { return r->source; }

static void list_remove(td_request *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        g_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        g_tail = r->prev;
    r->prev = r->next = NULL;
}

/* The end of r's trace record, and with --trace its timeline event, from
 * its start to here (for a started request: to when a test or wait found it
 * complete). The start is kept in the request, not read back from
 * the ring: a nonblocking request may outlive its record when more than
 * TD_TRACE_RING calls start while it is in flight. */
static void trace_done(td_request *r) {
    td_trace_end(r->seq);
    if (!r->tl_on || !td_timeline_enabled()) return;
    r->tl_on = 0;
    char name[128]; /* the timeline keeps TD_TIMELINE_NAME - 1 characters of it */
    const char *op = td_op_name(r->op);
    if (r->op == TD_OP_SEND)
        snprintf(name, sizeof name, "%s %s to %d", op, r->comm->label, r->comm->world_ranks[r->peer]);
    else if (r->op == TD_OP_RECV && r->source >= 0)
        snprintf(name, sizeof name, "%s %s from %d", op, r->comm->label, r->comm->world_ranks[r->source]);
    else
        snprintf(name, sizeof name, "%s %s", op, r->comm->label);
    const char *cat = td_op_is_p2p(r->op) ? "p2p" : "collective";
    /* a started request overlaps the caller's work: an async event */
    if (r == &g_blocking || r == &g_p2p || r == &g_a2a)
        td_timeline_add(name, cat, r->tl_t0, td_timeline_now_us(), -1, -1);
    else
        td_timeline_add_async(name, cat, r->tl_t0, td_timeline_now_us(), -1, -1);
}

static void complete(td_request *r) {
    td_stage_end(r); /* device buffers get their results */
    r->active = 0;
    /* scratch lives only while a request is in flight: a strategy may hold
     * one request per unit, and idle scratch would add up to the model size */
    td_piece_release(r);
    list_remove(r);
    r->comm->n_active--;
    trace_done(r);
}

static void progress_all(void) {
    for (td_request *r = g_head; r; r = r->next) {
        td_stage_ready(r); /* staged device buffers: their copies have landed */
        if (r->own || r->a2a) { /* state machines of their own: one "piece" */
            /* the row's in start order, as the shared ring requires */
            int moved = 0;
            if (!r->done_pieces &&
                (r->own ? r->comm->ops->progress(r, &moved) : td_a2a_progress(r, &moved)))
                r->done_pieces = 1;
            if (moved) g_progress++;
            continue;
        }
        for (int s = 0; s < TD_MAX_INFLIGHT; s++) {
            if (r->slot_piece[s] == SIZE_MAX) continue;
            int done = 0;
            MPI_Status st;
            TD_MPI(MPI_Test(&r->mpi[s], &done, &st));
            if (!done) continue;
            if (r->op == TD_OP_RECV) {
                r->source = st.MPI_SOURCE;
                if (r->stg_nup) td_stage_received(r, &st, r->slot_type[s]);
            }
            td_piece_finish(r, s);
            r->done_pieces++;
            g_progress++;
            if (!td_op_is_p2p(r->op)) r->comm->inflight--;
        }
    }
    /* Issue in start order; a group is closed for this walk at the first
     * collective that still has pieces it could not issue. */
    g_walk++;
    int budget = td_comm_inflight();
    for (td_request *r = g_head; r; r = r->next) {
        if (td_op_is_p2p(r->op) || r->next_piece == r->n_pieces) continue;
        td_comm *c = r->comm;
        if (c->walk_stamp == g_walk) continue;
        if (r->agree) { /* no piece before every rank's descriptor matched */
            if (!td_shm_agreed(&r->shm)) {
                c->walk_stamp = g_walk;
                continue;
            }
            r->agree = 0;
        }
        for (int s = 0; s < TD_MAX_INFLIGHT; s++) {
            if (r->next_piece == r->n_pieces || c->inflight >= budget) break;
            if (r->slot_piece[s] != SIZE_MAX) continue;
            /* Only slots planned at start have scratch and count arrays. */
            if (r->scratch_need && r->scratch_bytes[s] < r->scratch_need) break;
            if ((r->op == TD_OP_ALL_GATHER || r->op == TD_OP_REDUCE_SCATTER) &&
                r->ints_size < c->size * (2 + s))
                break;
            td_piece_run(r, s, r->next_piece++, 0);
            c->inflight++;
        }
        if (r->next_piece < r->n_pieces) c->walk_stamp = g_walk;
    }
    td_request *next;
    for (td_request *r = g_head; r; r = next) {
        next = r->next;
        if (r->done_pieces == r->n_pieces) complete(r);
    }
}

/* Polls until done() holds; aborts with the trace when no piece anywhere
 * completes for td_comm_timeout() seconds (a slow but moving transfer is not
 * a hang). `blame` is the record the report names. */
static void poll_until(int (*done)(void *), void *arg, uint64_t (*blame)(void *)) {
    double last = td_now_ms();
    uint64_t seen = g_progress;
    unsigned idle = 0;
    while (!done(arg)) {
        progress_all();
        double timeout = td_comm_timeout();
        if (g_progress != seen) {
            seen = g_progress;
            last = td_now_ms();
            idle = 0;
        } else if (timeout > 0 && td_now_ms() - last > timeout * 1000.0) {
            td_trace_stuck(blame(arg));
        } else if (++idle >= 64) {
            /* Nothing moved for a while: with more ranks than cores the peer
             * we wait for (a shared-ring chunk, or MPI progress) may need
             * this core. Measured: 4 ranks on 2 cores ran the collectives
             * test in 1.4 s with this, 11.7 s without. */
            sched_yield();
        }
    }
}

void td_requests_poll(void) {
    if (g_head) progress_all();
}

static int req_done(void *a) { return !((td_request *)a)->active; }
static uint64_t req_blame(void *a) { return ((td_request *)a)->seq; }

int td_test(td_request *r) {
    if (!r->active) return 1;
    progress_all();
    return !r->active;
}

void td_wait(td_request *r) {
    if (r->active) poll_until(req_done, r, req_blame);
}

/* The first request on c that still has pieces to issue, or NULL. */
static td_request *first_unissued(td_comm *c) {
    for (td_request *r = g_head; r; r = r->next)
        if (r->comm == c && !td_op_is_p2p(r->op) && r->next_piece < r->n_pieces) return r;
    return NULL;
}
static int flushed(void *c) { return first_unissued(c) == NULL; }
static uint64_t flush_blame(void *c) {
    td_request *r = first_unissued(c);
    return r ? r->seq : td_comm_calls();
}

void td_comm_flush(td_comm *c) {
    if (g_head) poll_until(flushed, c, flush_blame); /* nothing active: the common case */
}

/* ---- starting ---------------------------------------------------------- */

static td_request *begin(td_request *r, td_op op, td_comm *c, td_dtype dt, size_t count, int peer,
                         const char *file, int line) {
    TD_ASSERT(r && !r->active);
    TD_ASSERT(c);
    TD_CHECK(dt == TD_F32 || dt == TD_BF16 || (dt == TD_U64 && td_op_is_a2a(op)),
             "%s at %s:%d: dtype %d (u64 moves by all-to-all only)", td_op_name(op),
             td_base_name(file), line, (int)dt);
    if (op == TD_OP_RECV)
        TD_ASSERT(peer == TD_ANY_SOURCE || (peer >= 0 && peer < c->size));
    else if (op == TD_OP_REDUCE || op == TD_OP_BCAST || op == TD_OP_SEND)
        TD_ASSERT(peer >= 0 && peer < c->size);
    r->op = op;
    r->comm = c;
    r->dt = dt;
    r->redop = TD_SUM;
    r->count = count;
    r->peer = peer;
    r->tag = 0;
    r->source = -1;
    r->buf = NULL;
    r->send = NULL;
    r->file = file;
    r->line = line;
    r->own = r->agree = 0;
    r->stg_wait = r->stg_n = r->stg_nup = 0;
    size_t bytes = count * td_dtype_size(dt);
    if (op == TD_OP_REDUCE_SCATTER || op == TD_OP_ALL_GATHER) bytes *= (size_t)c->size;
    if (op == TD_OP_BARRIER) bytes = 0;
    r->seq = td_trace_begin(op, c, dt, bytes, peer, file, line);
    /* what this rank contributes of its own: its block of an all-gather, the
     * root's payload of a broadcast, nothing of a receive */
    size_t own = count * td_dtype_size(dt);
    if (op == TD_OP_REDUCE_SCATTER) own *= (size_t)c->size;
    if (op == TD_OP_RECV || op == TD_OP_BARRIER || (op == TD_OP_BCAST && c->rank != peer)) own = 0;
    td_trace_count_sent(own);
    r->tl_on = td_timeline_enabled(); /* off: this one branch */
    if (r->tl_on) r->tl_t0 = td_timeline_now_us();
    return r;
}

/* Into the active list, in start order. */
static void enlist(td_request *r) {
    r->active = 1;
    r->prev = g_tail;
    r->next = NULL;
    if (g_tail)
        g_tail->next = r;
    else
        g_head = r;
    g_tail = r;
    r->comm->n_active++;
}

/* One "piece" that the group's row runs (its progress), outside the budget. */
static void own_piece(td_request *r) {
    r->own = 1;
    r->n_pieces = r->next_piece = 1;
    r->done_pieces = 0;
    for (int s = 0; s < TD_MAX_INFLIGHT; s++) r->slot_piece[s] = SIZE_MAX;
}

/* Into the engine: the row's begin, the MPI pieces when it declines (its
 * buffers staged already). */
static void launch(td_request *r, int taken) {
    if (taken)
        own_piece(r);
    else
        td_piece_plan(r, td_comm_inflight());
    if (r->n_pieces == 0) { /* empty collective: nothing to send on any rank */
        td_stage_end(r);
        trace_done(r);
        return;
    }
    enlist(r);
    if (td_op_is_p2p(r->op)) { /* one message, no budget */
        td_stage_ready(r);
        td_piece_run(r, 0, 0, 0);
    }
    progress_all();
}

static void start(td_request *r) {
    td_stage_begin(r, 0, 0);
    const td_transport_ops *t = r->comm->ops;
    launch(r, !td_op_is_p2p(r->op) && t->begin && t->begin(r));
}

/* MPI's blocking collectives, piece by piece. */
static void run_blocking(td_request *r) {
    td_comm_flush(r->comm);
    td_piece_plan(r, 1);
    for (size_t p = 0; p < r->n_pieces; p++) {
        /* Re-armed per piece: the timeout is about a call that stopped moving. */
        td_watchdog_arm(r->seq);
        td_piece_run(r, 0, p, 1);
        td_watchdog_disarm();
        if (g_head) progress_all(); /* other requests keep moving between pieces */
    }
    trace_done(r);
}

/* A blocking collective on the group's row: its run (NULL: what its begin
 * takes goes through the engine, start + wait), else MPI's blocking pieces.
 * Device buffers staged around it. */
static void run_collective(td_request *r) {
    td_stage_begin(r, 0, 0);
    td_stage_ready(r); /* blocking: the copies are read at once */
    const td_transport_ops *t = r->comm->ops;
    if (t->run) {
        if (t->run(r)) {
            td_stage_end(r);
            trace_done(r);
            return;
        }
    } else if (t->begin && t->begin(r)) {
        launch(r, 1);
        td_wait(r); /* completion ends the staging and the trace */
        return;
    }
    run_blocking(r);
    td_stage_end(r);
}

void td_allreduce_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                           td_redop op, const char *file, int line) {
    begin(r, TD_OP_ALLREDUCE, c, dt, count, -1, file, line)->buf = buf;
    r->redop = op;
    start(r);
}

void td_reduce_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt, int root,
                        const char *file, int line) {
    begin(r, TD_OP_REDUCE, c, dt, count, root, file, line)->buf = buf;
    start(r);
}

void td_broadcast_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt,
                           int root, const char *file, int line) {
    begin(r, TD_OP_BCAST, c, dt, count, root, file, line)->buf = buf;
    start(r);
}

void td_reduce_scatter_start_at(td_request *r, td_comm *c, const void *send, void *recv,
                                size_t count, td_dtype dt, const char *file, int line) {
    begin(r, TD_OP_REDUCE_SCATTER, c, dt, count, -1, file, line)->buf = recv;
    r->send = send;
    start(r);
}

void td_all_gather_start_at(td_request *r, td_comm *c, const void *send, void *recv, size_t count,
                            td_dtype dt, const char *file, int line) {
    begin(r, TD_OP_ALL_GATHER, c, dt, count, -1, file, line)->buf = recv;
    r->send = send;
    start(r);
}

static int check_tag(const td_request *r, int tag) {
    TD_CHECK(tag >= 0 && tag < td_comm_tag_limit(),
             "%s at %s:%d: tag %d outside 0..%d (the tags above are all-to-all's)",
             td_op_name(r->op), td_base_name(r->file), r->line, tag, td_comm_tag_limit() - 1);
    return tag;
}

/* Bytes from a buffer's start to the end of its last non-empty block (NULL
 * tables: `fixed` elements per peer); 0 when a table overflows (td_a2a_start
 * then fails naming it). */
static size_t a2a_extent(const size_t *cnt, const size_t *dsp, size_t fixed, int n, td_dtype dt) {
    size_t el = td_dtype_size(dt), hi = 0;
    if (!cnt) return fixed <= SIZE_MAX / el / (size_t)n ? fixed * (size_t)n * el : 0;
    for (int j = 0; j < n; j++) {
        if (!cnt[j]) continue;
        if (dsp[j] > SIZE_MAX / el || cnt[j] > SIZE_MAX / el - dsp[j]) return 0;
        if (dsp[j] + cnt[j] > hi) hi = dsp[j] + cnt[j];
    }
    return hi * el;
}

/* All-to-all: one "piece", progressed by alltoall.c (or the group's row:
 * the direct shared path); NULL tables: `fixed` elements per peer. */
static void a2a_start(td_request *r, td_op op, td_comm *c, const void *send, const size_t *sc,
                      const size_t *sd, void *recv, const size_t *rc, const size_t *rd,
                      size_t fixed, td_dtype dt, const char *file, int line) {
    TD_ASSERT(c);
    size_t total = fixed * (size_t)c->size; /* for the trace; the tables are checked later */
    if (sc) { /* the tables are read here, on the host, whatever the transport */
        const size_t *tab[4] = {sc, sd, rc, rd};
        static const char *const names[4] = {"send_counts table", "send_displs table",
                                             "recv_counts table", "recv_displs table"};
        for (int i = 0; i < 4; i++)
            td_comm_host_check(op, c, file, line, tab[i], names[i], "the count tables are read on the host");
        for (int j = 0; j < c->size; j++) total += sc[j];
    }
    begin(r, op, c, dt, total, -1, file, line);
    r->send = send;
    r->buf = recv;
    r->n_pieces = r->next_piece = 1;
    r->done_pieces = 0;
    for (int s = 0; s < TD_MAX_INFLIGHT; s++) r->slot_piece[s] = SIZE_MAX;
    td_stage_begin(r, a2a_extent(sc, sd, fixed, c->size, dt), a2a_extent(rc, rd, fixed, c->size, dt));
    if (c->size == 1) td_stage_ready(r); /* a group of one copies at once */
    if (!td_a2a_start(r, sc, sd, rc, rd, fixed)) { /* a group of one: copied already */
        td_piece_release(r);
        td_stage_end(r);
        trace_done(r);
        return;
    }
    enlist(r);
    progress_all();
}

void td_all_to_all_v_start_at(td_request *r, td_comm *c, const void *send,
                              const size_t *send_counts, const size_t *send_displs, void *recv,
                              const size_t *recv_counts, const size_t *recv_displs, td_dtype dt,
                              const char *file, int line) {
    TD_CHECK(send_counts && send_displs && recv_counts && recv_displs,
             "all_to_all_v at %s:%d: a NULL count or displacement array", td_base_name(file), line);
    a2a_start(r, TD_OP_ALL_TO_ALL_V, c, send, send_counts, send_displs, recv, recv_counts,
              recv_displs, 0, dt, file, line);
}

void td_all_to_all_start_at(td_request *r, td_comm *c, const void *send, void *recv, size_t count,
                            td_dtype dt, const char *file, int line) {
    a2a_start(r, TD_OP_ALL_TO_ALL, c, send, NULL, NULL, recv, NULL, NULL, count, dt, file, line);
}

void td_send_start_at(td_request *r, td_comm *c, const void *buf, size_t count, td_dtype dt,
                      int peer, int tag, const char *file, int line) {
    begin(r, TD_OP_SEND, c, dt, count, peer, file, line)->send = buf;
    r->tag = check_tag(r, tag);
    start(r);
}

void td_recv_start_at(td_request *r, td_comm *c, void *buf, size_t count, td_dtype dt, int peer,
                      int tag, const char *file, int line) {
    begin(r, TD_OP_RECV, c, dt, count, peer, file, line)->buf = buf;
    r->tag = check_tag(r, tag);
    start(r);
}

/* ---- blocking ---------------------------------------------------------- */

void td_allreduce_at(td_comm *c, void *buf, size_t count, td_dtype dt, td_redop op,
                     const char *file, int line) {
    td_request *r = begin(&g_blocking, TD_OP_ALLREDUCE, c, dt, count, -1, file, line);
    r->buf = buf;
    r->redop = op;
    run_collective(r);
}

void td_reduce_at(td_comm *c, void *buf, size_t count, td_dtype dt, int root, const char *file,
                  int line) {
    begin(&g_blocking, TD_OP_REDUCE, c, dt, count, root, file, line)->buf = buf;
    run_collective(&g_blocking);
}

void td_broadcast_at(td_comm *c, void *buf, size_t count, td_dtype dt, int root, const char *file,
                     int line) {
    /* A device buffer through a host-only row would be staged whole (the
     * parameters at start-up: a pool the size of the model); in slices of
     * one piece each it stays one piece. A broadcast's bits do not depend
     * on how it is cut, and every rank cuts alike (same count, same piece). */
    size_t es = td_dtype_size(dt), piece = td_max_sz(1, td_comm_piece_bytes() / es);
    if (count > piece && c->ops->host_only && td_dev_is_device(buf, NULL, NULL)) {
        for (size_t o = 0; o < count; o += piece)
            td_broadcast_at(c, (char *)buf + o * es, td_min_sz(piece, count - o), dt, root, file, line);
        return;
    }
    begin(&g_blocking, TD_OP_BCAST, c, dt, count, root, file, line)->buf = buf;
    run_collective(&g_blocking);
}

void td_reduce_scatter_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                          const char *file, int line) {
    begin(&g_blocking, TD_OP_REDUCE_SCATTER, c, dt, count, -1, file, line)->buf = recv;
    g_blocking.send = send;
    run_collective(&g_blocking);
}

void td_all_gather_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                      const char *file, int line) {
    begin(&g_blocking, TD_OP_ALL_GATHER, c, dt, count, -1, file, line)->buf = recv;
    g_blocking.send = send;
    run_collective(&g_blocking);
}

void td_barrier_at(td_comm *c, const char *file, int line) {
    begin(&g_blocking, TD_OP_BARRIER, c, TD_F32, 0, -1, file, line);
    run_collective(&g_blocking);
}

void td_send_at(td_comm *c, const void *buf, size_t count, td_dtype dt, int peer, int tag,
                const char *file, int line) {
    td_send_start_at(&g_p2p, c, buf, count, dt, peer, tag, file, line);
    td_wait(&g_p2p);
}

void td_all_to_all_v_at(td_comm *c, const void *send, const size_t *send_counts,
                        const size_t *send_displs, void *recv, const size_t *recv_counts,
                        const size_t *recv_displs, td_dtype dt, const char *file, int line) {
    td_all_to_all_v_start_at(&g_a2a, c, send, send_counts, send_displs, recv, recv_counts,
                             recv_displs, dt, file, line);
    td_wait(&g_a2a);
}

void td_all_to_all_at(td_comm *c, const void *send, void *recv, size_t count, td_dtype dt,
                      const char *file, int line) {
    td_all_to_all_start_at(&g_a2a, c, send, recv, count, dt, file, line);
    td_wait(&g_a2a);
}

int td_recv_at(td_comm *c, void *buf, size_t count, td_dtype dt, int peer, int tag,
               const char *file, int line) {
    td_recv_start_at(&g_p2p, c, buf, count, dt, peer, tag, file, line);
    td_wait(&g_p2p);
    return g_p2p.source;
}
