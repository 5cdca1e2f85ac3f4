/* All-to-all(-v), for mixture-of-experts token dispatch and its return:
 * block j of every rank's send buffer goes to rank j, each block with its
 * own count and displacement (td_all_to_all_v_start_at in trident/comm.h).
 *
 * Per transport (the group's, chosen at the split):
 *   SELF       a copy.
 *   SHM        (the row's a2a_begin) when the send buffer lies in a td_comm_alloc_shared buffer of
 *              the group, on every rank (the op's descriptor says so, and
 *              ranks that disagree fail with one line): each rank publishes
 *              {displacement, count} of its block for every peer in its
 *              control block, then copies its own blocks straight out of the
 *              others' send buffers. One copy, no MPI; shm_direct.c runs the
 *              protocol (op k: entered, part, finished) as for the other
 *              direct ops. Any other send buffer: as MPI, once the
 *              descriptors agree.
 *   MPI, HIER  one message per peer (none split into pieces: p2p keeps its
 *              bandwidth on large messages, pieces.c), all posted at once,
 *              receives first so none arrives unexpected, peers in shifted
 *              order (send to me+i, receive from me-i) so ranks do not all
 *              send to rank 0 first. Each op has a tag of its own from a
 *              range that user tags stay below, so ops in flight together,
 *              and user sends on the group, never take each other's
 *              messages. p2p rather than MPI_Ialltoallv: its counts and
 *              displacements are int, ours size_t; `trident bench comm`
 *              compares the two (all_to_all_v, raw vs pieces).
 * Every pair exchanges a message, an empty one too: a receiver whose count
 * disagrees with its sender's ends the job with one line naming both
 * instead of hanging or keeping short data. The own block is a copy. The
 * bytes arrive unchanged on every path; only receive blocks are written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_internal.h"

typedef struct td_a2a {
    const td_request *r;       /* the op's request, for reports */
    size_t el;                 /* bytes per element */
    size_t *sc, *sd, *rc, *rd; /* [n] each: counts and displacements, copied at the start */
    int tag, posted, left;     /* MPI: the op's tag; messages out; messages not complete */
    MPI_Request *req;          /* [2n]: the receive from j at j, the send to j at n + j */
    MPI_Datatype *type;        /* [2n]: derived types (above INT_MAX elements) to free */
    int *mcount;               /* [n]: MPI count of each receive, for the length check */
} td_a2a;

/* MPI guarantees tags up to 32767 at least; the top TD_A2A_TAGS are ours. */
static int g_tag_base = 32767 - TD_A2A_TAGS + 1;

void td_a2a_tags_init(MPI_Comm world) {
    int *ub = NULL, flag = 0;
    TD_MPI(MPI_Comm_get_attr(world, MPI_TAG_UB, &ub, &flag));
    if (flag && *ub >= 2 * TD_A2A_TAGS) g_tag_base = *ub - TD_A2A_TAGS + 1;
}

int td_comm_tag_limit(void) { return g_tag_base; }

/* Block `displ` of a buffer; an empty block of a NULL buffer stays NULL. */
static char *at(const void *base, size_t displ, size_t el, size_t count) {
    return count ? (char *)base + displ * el : (char *)base;
}

static void copy_own(const td_request *r) {
    const td_a2a *a = r->a2a;
    int me = r->comm->rank;
    if (a->sc[me])
        memcpy(at(r->buf, a->rd[me], a->el, 1), at(r->send, a->sd[me], a->el, 1),
               a->sc[me] * a->el);
}

/* One past the last element any block of a table covers (0: no data). */
static size_t extent(const td_request *r, const size_t *cnt, const size_t *dsp, const char *side) {
    size_t lim = SIZE_MAX / r->a2a->el, hi = 0;
    for (int j = 0; j < r->comm->size; j++) {
        TD_CHECK(dsp[j] <= lim && cnt[j] <= lim - dsp[j],
                 "%s on %s at %s:%d: %s block %d (displacement %zu + count %zu) overflows size_t",
                 td_op_name(r->op), r->comm->label, td_base_name(r->file), r->line, side, j, dsp[j],
                 cnt[j]);
        if (cnt[j] && dsp[j] + cnt[j] > hi) hi = dsp[j] + cnt[j];
    }
    return hi;
}

/* Group rank j sends `sent` elements (-1: more than expected; -2: a
 * different number) to this rank, which expects recv_counts[j]. */
static _Noreturn void count_mismatch(const td_request *r, int j, long long sent) {
    const td_comm *c = r->comm;
    char what[48];
    if (sent >= 0)
        snprintf(what, sizeof what, "%lld elements", sent);
    else
        snprintf(what, sizeof what, "%s elements", sent == -1 ? "more" : "a different number of");
    td_comm_dump(4); /* this rank's recent calls, the mismatched one last */
    td_fail("%s on group %s at %s:%d: group rank %d (world rank %d) sent %s to group rank %d "
            "(world rank %d), which expects %zu: recv_counts[%d] must equal rank %d's "
            "send_counts[%d] (exchange them first: td_all_to_all_counts)",
            td_op_name(r->op), c->label, td_base_name(r->file), r->line, j, c->world_ranks[j], what,
            c->rank, c->world_ranks[c->rank], r->a2a->rc[j], j, j, c->rank);
}

/* ---- shared memory ----------------------------------------------------- */

/* Announces the op on a group with a ring: straight between the send
 * buffers when this rank's lies in a shared region (its table published
 * first), else the MPI path. 1 for the direct path. */
int td_a2a_shm_begin(td_request *r, size_t send_bytes) {
    td_shm *s = r->comm->shm;
    td_a2a *a = r->a2a;
    td_shm_op *op = &r->shm;
    td_shm_op_init(op, s, TD_SHM_ALL_TO_ALL, r->send, r->buf, r->count, r->dt, TD_SUM, r->seq);
    op->file = r->file;
    op->line = r->line;
    op->a2a = a;
    if (td_comm_shm() && s->n <= TD_SHM_MAX_RANKS) {
        /* the peers may still read my table of the last direct all-to-all */
        double since = 0;
        unsigned idle = 0;
        while (s->a2a_k && !td_shm_all_reached(s, offsetof(td_shm_ctl, finished), s->a2a_k))
            td_shm_idle(&idle, &since, r->seq);
        uint64_t(*tab)[2] = s->ctl[s->me]->a2a; /* published by the announce's release */
        for (int j = 0; j < s->n; j++) tab[j][0] = a->sd[j], tab[j][1] = a->sc[j];
        if (td_shm_direct_begin(op, s, r->send, send_bytes)) {
            s->a2a_k = op->k;
            return 1;
        }
    }
    td_shm_announce(op, TD_PATH_MPI, NULL, 0);
    r->agree = 1; /* the messages wait for the peers' descriptors */
    return 0;
}

void td_a2a_shm_part(const td_shm_op *op) {
    const td_shm *s = op->shm;
    const td_a2a *a = op->a2a;
    for (int i = 0; i < s->n; i++) {
        int j = (s->me + i) % s->n;                /* ranks start on different peers' buffers */
        const uint64_t *e = s->ctl[j]->a2a[s->me]; /* j's block for me: displacement, count */
        if (e[1] != a->rc[j]) count_mismatch(a->r, j, (long long)e[1]);
        if (!e[1]) continue;
        const char *src = td_shm_peer_input(op, j, (size_t)(e[0] + e[1]) * a->el);
        memcpy(at(op->buf, a->rd[j], a->el, 1), src + e[0] * a->el, e[1] * a->el);
    }
}

/* ---- MPI --------------------------------------------------------------- */

static void post(td_request *r) {
    td_comm *c = r->comm;
    td_a2a *a = r->a2a;
    int n = c->size, me = c->rank;
    MPI_Datatype T;
    if (td_backend_is_device()) { /* as in td_piece_run */
        td_comm_host_check(r->op, c, r->file, r->line, r->send, "send buffer", "MPI reads host memory only");
        td_comm_host_check(r->op, c, r->file, r->line, r->buf, "receive buffer", "MPI reads host memory only");
    }
    for (int i = 1; i < n; i++) {
        int j = (me + n - i) % n;
        a->mcount[j] = td_mpi_count_type(r->dt, a->rc[j], &T, &a->type[j]);
        TD_MPI(MPI_Irecv(at(r->buf, a->rd[j], a->el, a->rc[j]), a->mcount[j], T, j, a->tag, c->mpi,
                         &a->req[j]));
    }
    for (int i = 1; i < n; i++) {
        int j = (me + i) % n;
        int k = td_mpi_count_type(r->dt, a->sc[j], &T, &a->type[n + j]);
        TD_MPI(MPI_Isend(at(r->send, a->sd[j], a->el, a->sc[j]), k, T, j, a->tag, c->mpi,
                         &a->req[n + j]));
    }
    copy_own(r);
    a->left = 2 * (n - 1);
    a->posted = 1;
}

int td_a2a_progress(td_request *r, int *moved) {
    td_a2a *a = r->a2a;
    int n = r->comm->size;
    *moved = 0;
    if (r->agree) { /* a group with a ring: no message before the descriptors match */
        if (!td_shm_agreed(&r->shm)) return 0;
        r->agree = 0;
    }
    if (!a->posted) {
        post(r);
        *moved = 1;
    }
    for (int i = 0; i < 2 * n && a->left; i++) {
        if (a->req[i] == MPI_REQUEST_NULL) continue;
        int done = 0, cls = 0;
        MPI_Status st;
        int rc = MPI_Test(&a->req[i], &done, &st);
        if (rc != MPI_SUCCESS) {
            MPI_Error_class(rc, &cls);
            if (cls == MPI_ERR_TRUNCATE && i < n) count_mismatch(r, i, -1);
            td_mpi_failed(rc, "MPI_Test (all-to-all message)", __FILE__, __LINE__);
        }
        if (!done) continue;
        if (i < n) { /* a receive: the sender's count must be ours */
            int got = 0;
            MPI_Datatype T = a->type[i] != MPI_DATATYPE_NULL ? a->type[i] : td_mpi_type(r->dt);
            TD_MPI(MPI_Get_count(&st, T, &got));
            if (got != a->mcount[i])
                count_mismatch(r, i, a->type[i] == MPI_DATATYPE_NULL ? got : -2);
        }
        if (a->type[i] != MPI_DATATYPE_NULL) TD_MPI(MPI_Type_free(&a->type[i]));
        a->left--;
        *moved = 1;
    }
    return a->left == 0;
}

/* ---- start ------------------------------------------------------------- */

int td_a2a_start(td_request *r, const size_t *sc, const size_t *sd, const size_t *rc,
                 const size_t *rd, size_t fixed) {
    td_comm *c = r->comm;
    size_t n = (size_t)c->size, el = td_dtype_size(r->dt);
    /* one block: the struct, the four tables, the MPI arrays (widest first) */
    td_a2a *a = calloc(1, sizeof *a + 4 * n * sizeof(size_t) + 2 * n * sizeof(MPI_Request) +
                              2 * n * sizeof(MPI_Datatype) + n * sizeof(int));
    TD_ASSERT(a);
    a->sc = (size_t *)(a + 1), a->sd = a->sc + n, a->rc = a->sd + n, a->rd = a->rc + n;
    a->req = (MPI_Request *)(a->rd + n);
    a->type = (MPI_Datatype *)(a->req + 2 * n);
    a->mcount = (int *)(a->type + 2 * n);
    a->el = el;
    a->r = r;
    r->a2a = a;
    TD_CHECK(sc || fixed <= SIZE_MAX / el / n, "%s on %s at %s:%d: %zu x %zu elements overflow",
             td_op_name(r->op), c->label, td_base_name(r->file), r->line, fixed, n);
    for (size_t j = 0; j < n; j++) {
        a->sc[j] = sc ? sc[j] : fixed, a->sd[j] = sc ? sd[j] : j * fixed;
        a->rc[j] = sc ? rc[j] : fixed, a->rd[j] = sc ? rd[j] : j * fixed;
        a->req[j] = a->req[n + j] = MPI_REQUEST_NULL;
        a->type[j] = a->type[n + j] = MPI_DATATYPE_NULL;
    }
    size_t s_hi = extent(r, a->sc, a->sd, "send"), r_hi = extent(r, a->rc, a->rd, "receive");
    TD_CHECK((!s_hi || r->send) && (!r_hi || r->buf), "%s on %s at %s:%d: a NULL buffer for %s",
             td_op_name(r->op), c->label, td_base_name(r->file), r->line,
             s_hi && !r->send ? "send" : "recv");
    TD_CHECK(!td_ranges_overlap(r->send, s_hi * el, r->buf, r_hi * el),
             "%s on %s at %s:%d: send and recv overlap (in-place all-to-all is not supported)",
             td_op_name(r->op), c->label, td_base_name(r->file), r->line);
    if (a->sc[c->rank] != a->rc[c->rank]) count_mismatch(r, c->rank, (long long)a->sc[c->rank]);
    r->own = r->agree = 0;
    if (n == 1) {
        copy_own(r);
        return 0;
    }
    a->tag = g_tag_base + (int)(c->a2a_ops++ % TD_A2A_TAGS);
    if (c->ops->a2a_begin) r->own = c->ops->a2a_begin(r, s_hi * el); /* may set r->agree */
    return 1;
}
