/* The trace ring and the watchdog.
 *
 * Every comm call leaves a record (op, bytes, group with its world ranks,
 * peer, call site, times) in a ring of the last TD_TRACE_RING calls. When a
 * call is stuck past td_comm_timeout(), the rank prints which call, then the
 * ring, then ends the job (td_comm_abort): a hung job becomes a short, readable failure that
 * names the group and the line where each rank waits.
 *
 * Waits on requests check the deadline themselves (td_wait polls). Calls that
 * block inside MPI (the fast blocking collectives) cannot, so a watchdog
 * thread watches them: the main thread publishes "call #seq started at t"
 * with two atomic stores, and the thread wakes a few times per second to
 * compare with the clock. That costs nothing on the data path, unlike
 * polling MPI_Test, which we measured to lose bandwidth (see pieces.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_internal.h"

typedef struct {
    uint64_t seq; /* 0: empty */
    td_op op;
    td_dtype dt;
    size_t bytes;
    int peer;
    const char *file; /* __FILE__ literal: static storage */
    int line;
    double t_start, t_end; /* ms since init; t_end < 0 while running */
    char group[TD_COMM_LABEL];
    char note[TD_COMM_NOTE]; /* td_comm_note's text when the call started */
} td_record;

static char g_note[TD_COMM_NOTE];

void td_comm_note(const char *note) {
    if (!note) note = "";
    snprintf(g_note, sizeof g_note, "%s", note);
}

static td_record g_ring[TD_TRACE_RING];
static uint64_t g_seq, g_bytes, g_sent;

static const char *g_op_names[TD_OP_N] = {
    "allreduce", "reduce", "broadcast", "reduce_scatter", "all_gather",
    "send",      "recv",   "barrier",   "all_to_all_v",   "all_to_all"};
const char *td_op_name(td_op op) { return g_op_names[op]; }

const char *td_base_name(const char *f) {
    const char *b = f ? strrchr(f, '/') : NULL;
    return b ? b + 1 : (f ? f : "?");
}

uint64_t td_trace_begin(td_op op, const td_comm *c, td_dtype dt, size_t bytes, int peer,
                        const char *file, int line) {
    td_record *r = &g_ring[++g_seq % TD_TRACE_RING];
    r->seq = g_seq;
    r->op = op;
    r->dt = dt;
    r->bytes = bytes;
    r->peer = peer;
    r->file = file;
    r->line = line;
    r->t_start = td_comm_since_init_ms();
    r->t_end = -1;
    memcpy(r->group, c->label, sizeof r->group); /* both TD_COMM_LABEL, NUL-terminated */
    memcpy(r->note, g_note, sizeof r->note);
    g_bytes += bytes;
    return g_seq;
}

void td_trace_end(uint64_t seq) {
    td_record *r = &g_ring[seq % TD_TRACE_RING];
    if (r->seq == seq) r->t_end = td_comm_since_init_ms();
}

uint64_t td_comm_calls(void) { return g_seq; }
uint64_t td_comm_bytes(void) { return g_bytes; }
void td_trace_count_sent(size_t bytes) { g_sent += bytes; }
uint64_t td_comm_sent_bytes(void) { return g_sent; }

static const char *dt_name(const td_record *r) {
    if (r->op == TD_OP_BARRIER) return "-";
    return td_dtype_name(r->dt);
}

/* "root 1" / "peer 0" / "" for the op's extra argument. */
static void peer_text(const td_record *r, char *out, size_t n) {
    out[0] = 0;
    if (r->op == TD_OP_REDUCE || r->op == TD_OP_BCAST) snprintf(out, n, ", root %d", r->peer);
    if (r->op == TD_OP_SEND) snprintf(out, n, ", to %d", r->peer);
    if (r->op == TD_OP_RECV) {
        if (r->peer == TD_ANY_SOURCE)
            snprintf(out, n, ", from any");
        else
            snprintf(out, n, ", from %d", r->peer);
    }
    size_t k = strlen(out);
    if (r->note[0] && k < n) snprintf(out + k, n - k, ", %s", r->note);
}

static int format_record(char *out, size_t n, const td_record *r) {
    char peer[32 + TD_COMM_NOTE];
    peer_text(r, peer, sizeof peer);
    char state[48];
    if (r->t_end >= 0)
        snprintf(state, sizeof state, "done in %.1f ms", r->t_end - r->t_start);
    else
        snprintf(state, sizeof state, "STARTED, not done");
    return snprintf(out, n, "  #%llu %s on %s (%zu B, %s%s) at %s:%d, t=%.1f ms, %s\n",
                    (unsigned long long)r->seq, td_op_name(r->op), r->group, r->bytes, dt_name(r),
                    peer, td_base_name(r->file), r->line, r->t_start, state);
}

/* Built in one buffer and written with one call, so ranks dumping at the same
 * moment do not interleave line fragments. */
static void dump_to_stderr(const char *head, int n) {
    if (n > TD_TRACE_RING) n = TD_TRACE_RING;
    size_t cap = 512 + (size_t)n * 256, len = 0;
    char *buf = malloc(cap);
    if (!buf) return;
    if (head) len += (size_t)snprintf(buf + len, cap - len, "%s", head);
    uint64_t first = g_seq > (uint64_t)n ? g_seq - (uint64_t)n + 1 : 1;
    len += (size_t)snprintf(buf + len, cap - len, "trident: rank %d: last %llu comm calls:\n",
                            td_comm_world_rank(), (unsigned long long)(g_seq - first + 1));
    for (uint64_t s = first; s <= g_seq && len < cap; s++) {
        const td_record *r = &g_ring[s % TD_TRACE_RING];
        if (r->seq == s) len += (size_t)format_record(buf + len, cap - len, r);
    }
    if (len > cap) len = cap - 1;
    fflush(stderr);
    ssize_t w = write(2, buf, len);
    (void)w;
    free(buf);
}

void td_comm_dump(int n) { dump_to_stderr(NULL, n); }

static atomic_int g_firing;

_Noreturn void td_trace_stuck(uint64_t seq) {
    double waited_s = td_comm_timeout();
    /* One report per rank even if the main thread and the watchdog both see
     * the deadline pass. */
    if (atomic_exchange(&g_firing, 1)) {
        for (;;) pause();
    }
    const td_record *r = &g_ring[seq % TD_TRACE_RING];
    char head[512];
    if (r->seq == seq) {
        char peer[32 + TD_COMM_NOTE];
        peer_text(r, peer, sizeof peer);
        snprintf(head, sizeof head,
                 "trident: rank %d: %s #%llu %s on group %s (%zu B, %s%s) at %s:%d did not "
                 "complete within %.1f s\n",
                 td_comm_world_rank(), td_op_is_p2p(r->op) ? "p2p" : "collective",
                 (unsigned long long)seq, td_op_name(r->op), r->group, r->bytes, dt_name(r), peer,
                 td_base_name(r->file), r->line, waited_s);
    } else {
        snprintf(head, sizeof head,
                 "trident: rank %d: comm call #%llu did not complete within %.1f s\n",
                 td_comm_world_rank(), (unsigned long long)seq, waited_s);
    }
    dump_to_stderr(head, 16);
    td_comm_abort(1);
}

/* The newest call of this rank that started and has not finished. */
static const td_record *last_in_flight(void) {
    for (uint64_t s = g_seq, n = 0; s > 0 && n < TD_TRACE_RING; s--, n++) {
        const td_record *r = &g_ring[s % TD_TRACE_RING];
        if (r->seq == s && r->t_end < 0) return r;
    }
    return NULL;
}

_Noreturn void td_trace_peer_lost(const char *what) {
    if (atomic_exchange(&g_firing, 1)) { /* a report of this rank is already out */
        for (;;) pause();
    }
    int me = td_comm_world_rank();
    char head[2048];
    size_t n = (size_t)snprintf(head, sizeof head, "trident: rank %d: %s\n", me, what);
    const td_record *r = last_in_flight();
    if (r) {
        n += (size_t)snprintf(head + n, sizeof head - n, "trident: rank %d: in flight here:\n", me);
        if (n < sizeof head) format_record(head + n, sizeof head - n, r);
    } else {
        snprintf(head + n, sizeof head - n, "trident: rank %d: no comm call in flight here\n", me);
    }
    dump_to_stderr(head, 8);
    _exit(1); /* this thread may not call MPI; mpirun ends the job on the exit */
}

/* ---- watchdog thread --------------------------------------------------- */

static pthread_t g_thread;
static atomic_int g_thread_on, g_thread_stop;
static _Atomic uint64_t g_armed_seq; /* 0: nothing armed */
static _Atomic double g_armed_at_ms;

void td_watchdog_arm(uint64_t seq) {
    atomic_store(&g_armed_at_ms, td_now_ms());
    atomic_store(&g_armed_seq, seq);
}

void td_watchdog_disarm(void) { atomic_store(&g_armed_seq, 0); }

static void *watchdog_main(void *arg) {
    (void)arg;
    while (!atomic_load(&g_thread_stop)) {
        double timeout = td_comm_timeout();
        /* A twentieth of the timeout, within 10..250 ms: prompt enough for a
         * 2 s test timeout, and a handful of wake-ups per second at most. */
        double period = timeout > 0 ? timeout * 1000.0 / 20 : 250;
        if (period < 10) period = 10;
        if (period > 250) period = 250;
        struct timespec ts = {0, (long)(period * 1e6)};
        nanosleep(&ts, NULL);
        uint64_t seq = atomic_load(&g_armed_seq);
        if (!seq || timeout <= 0) continue;
        double at = atomic_load(&g_armed_at_ms);
        double waited = (td_now_ms() - at) / 1000.0;
        /* Re-read: the call may have finished (or the next begun) meanwhile. */
        if (waited > timeout && atomic_load(&g_armed_seq) == seq &&
            atomic_load(&g_armed_at_ms) == at)
            td_trace_stuck(seq);
    }
    return NULL;
}

void td_watchdog_start(void) {
    if (atomic_load(&g_thread_on)) return;
    atomic_store(&g_thread_stop, 0);
    if (pthread_create(&g_thread, NULL, watchdog_main, NULL) != 0) {
        /* Not fatal: waits on requests still check their own deadline. */
        fprintf(stderr,
                "trident: rank %d: warning: no watchdog thread; blocking collectives "
                "are not watched by --comm-timeout\n",
                td_comm_world_rank());
        return;
    }
    atomic_store(&g_thread_on, 1);
}

void td_watchdog_stop(void) {
    if (!atomic_load(&g_thread_on)) return;
    atomic_store(&g_thread_stop, 1);
    pthread_join(g_thread, NULL);
    atomic_store(&g_thread_on, 0);
}
