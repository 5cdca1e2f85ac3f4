/* Muon on a layout that cuts its matrices (ZeRO's shards, and under tp
 * ZeRO's shards of tp blocks): a matrix's orthogonalization needs all of
 * it, so after the gradient reduction
 *   1. each rank runs the elementwise momentum on its slice (u, and the
 *      buffer in m), and AdamW on the rows that are not Muon's;
 *   2. each logical matrix is gathered to its owner, the matrices of one
 *      group taking owners round-robin over its ranks (matrix j of the
 *      group's pieces in flat order: rank j mod parts);
 *   3. the owner orthogonalizes it (ops->muon_ns) and sends each holder its
 *      slice back;
 *   4. each rank applies its slice of the update.
 * Under tp with ZeRO a matrix is cut twice: the gather is chained. Matrix j
 * takes owner j mod (parts x tp) of the shard x tp ranks: shard rank
 * j mod parts gathers its tp block's slices (2.), and the tp ranks of that
 * shard rank, which are the ones holding the other blocks' gathered
 * copies, send their blocks to tp rank (j / parts) mod tp (2b., as
 * td_muon_step_tp below); the way back reverses both.
 * The same float expressions as the whole-matrix step in the same order
 * (kernels/muon.c), so a matrix's update is one process's bits for the
 * same gradient. Messages are point to point on the piece's group, posted
 * in matrix order on every rank (MPI's matching order keeps them apart). */
#include "dp_internal.h" /* step.h, td_muon_plan */
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/parallel.h" /* td_muon_traffic */
#include "trident/param_slices.h"

#define MUON_TAG 4242 /* below td_comm_tag_limit(): MPI guarantees 32767 */

/* the last exchange's bytes sent by this rank: counted by the comm layer,
 * and the formula's (td_muon_traffic) */
static uint64_t g_sent, g_formula;

void td_muon_traffic(uint64_t *sent, uint64_t *formula) {
    *sent = g_sent, *formula = g_formula;
}

typedef struct {
    int piece;         /* the step range / piece it lies in */
    size_t lo, n;      /* flat elements (this tp rank's block under tp) */
    int rows, cols;    /* the whole logical matrix's (all tp blocks) */
    int owner;         /* its owner on the piece's group */
    int dim, tp_owner; /* tp: the split dimension (0, 1) and the owner on tp; -1: not split */
    size_t at;         /* its place in the owner's gather buffer (owner only) */
    size_t bt;         /* the tp owner's: its place in the blocks' buffers */
} matrix;

/* Every logical matrix of the pieces, owners round-robin per group (and
 * over tp: the chained gather above). owned: the elements this rank
 * gathers over its group; tp_owned: those it gathers over tp, x tp. */
static matrix *matrices(const td_step_group *grp, int n_pieces, int *count, size_t *owned, size_t *tp_owned) {
    const td_param_table *t = grp->t;
    int tp = grp->tp > 1 ? grp->tp : 1, cap = 0, R, C;
    for (int j = 0; j < t->n_rows; j++)
        if (td_muon_row(&t->rows[j])) cap += td_muon_matrices(t, &t->rows[j], &R, &C);
    matrix *m = td_alloc(sizeof *m * (size_t)(cap > 0 ? cap : 1), TD_MEM_OTHER);
    /* the groups the pieces name: dp, and edp for expert stacks */
    td_comm *seen[8] = {0};
    int next[8] = {0}, n = 0;
    *owned = *tp_owned = 0;
    for (int i = 0; i < n_pieces; i++) {
        const td_step_piece *pc = &grp->pieces[i];
        int g = 0;
        while (g < 8 && seen[g] && seen[g] != pc->comm) g++;
        TD_ASSERT(g < 8);
        seen[g] = pc->comm;
        for (int j = 0; j < t->n_rows; j++) {
            const td_param *r = &t->rows[j];
            if (!td_muon_row(r) || r->numel == 0 || r->offset < pc->lo || r->offset >= pc->lo + pc->n) continue;
            TD_ASSERT(r->offset + r->numel <= pc->lo + pc->n); /* a row lies in one piece */
            /* an expert's matrices are whole on every tp rank (TD_SPLIT_EXPERT
             * and the shared experts' rows are tp-replicated): no chain */
            int parts = td_muon_matrices(t, r, &R, &C), split = tp > 1 && !td_param_tp_replicated(r);
            TD_ASSERT(!split || parts == 1 || r->split_dim == 0);
            for (int q = 0; q < parts; q++) {
                matrix *x = &m[n++];
                int c = next[g]++;
                x->piece = i;
                x->n = (size_t)R * (size_t)C;
                x->lo = r->offset + (size_t)q * x->n;
                x->dim = split ? r->split_dim : -1;
                x->rows = x->dim == 0 ? R * tp : R, x->cols = x->dim == 1 ? C * tp : C;
                x->owner = c % pc->parts;
                x->tp_owner = split ? c / pc->parts % tp : -1;
                x->at = x->owner == pc->rank ? *owned : 0;
                x->bt = 0;
                if (x->owner != pc->rank) continue;
                *owned += x->n;
                if (split && x->tp_owner == t->tp_rank) x->bt = *tp_owned, *tp_owned += x->n * (size_t)tp;
            }
        }
    }
    *count = n;
    return m;
}

/* [a, b): rank k's slice of piece pc within the matrix; empty when a >= b */
static void slice_of(const td_step_piece *pc, const matrix *x, int k, size_t *a, size_t *b) {
    size_t slice = pc->n / (size_t)pc->parts, lo = pc->lo + (size_t)k * slice;
    *a = td_max_sz(lo, x->lo), *b = td_min_sz(lo + slice, x->lo + x->n);
}

/* The point-to-point messages of one exchange, in pieces of at most
 * td_comm_piece_bytes(). On a device each piece is staged through a block
 * of the comm layer's pool, which the run reserves for MUON_INFLIGHT of
 * them (td_muon_staging): a rank keeps that many in flight and waits for
 * its oldest before the next. No deadlock: every rank posts its pieces in
 * the exchange's one order (matrix, then rank), so the first piece not yet
 * done is the oldest of both its ranks, which both have posted. On the cpu
 * device nothing is staged and all are posted at once. */
#define MUON_INFLIGHT 4

typedef struct {
    td_request **req;
    int n, cap, done;
} msgs;

static void msg_wait_one(msgs *q) {
    td_wait(q->req[q->done]);
    td_request_free(q->req[q->done]);
    q->req[q->done++] = NULL;
}

static void msg_start(msgs *q, td_comm *c, float *buf, size_t count, int peer, int send) {
    size_t piece = td_comm_piece_bytes() / sizeof(float);
    for (size_t at = 0; at < count; at += piece) {
        if (td_backend_is_device() && q->n - q->done == MUON_INFLIGHT) msg_wait_one(q);
        if (q->n == q->cap) {
            q->cap = q->cap ? 2 * q->cap : 16;
            td_request **more = td_alloc(sizeof *more * (size_t)q->cap, TD_MEM_OTHER);
            for (int i = 0; i < q->n; i++) more[i] = q->req[i];
            td_free(q->req);
            q->req = more;
        }
        td_request *r = q->req[q->n++] = td_request_new();
        size_t len = td_min_sz(piece, count - at);
        if (send) td_send_start(r, c, buf + at, len, TD_F32, peer, MUON_TAG);
        else td_recv_start(r, c, buf + at, len, TD_F32, peer, MUON_TAG);
    }
}

static void msgs_wait(msgs *q) {
    while (q->done < q->n) msg_wait_one(q);
    td_free(q->req);
    q->req = NULL, q->n = q->cap = q->done = 0;
}

/* gather (to = 1): the holders' slices of u into the owners' buffer; else
 * the owners' orthogonalized matrices back into the holders' u. u_of[i]
 * points at range i's u (its element lo). */
static void exchange(const td_step_group *grp, const matrix *m, int n, float *const *u_of,
                     const td_step_range *r, float *mat, int to_owner) {
    msgs q = {0};
    for (int i = 0; i < n; i++) {
        const matrix *x = &m[i];
        const td_step_piece *pc = &grp->pieces[x->piece];
        int me = pc->rank;
        for (int k = 0; k < pc->parts; k++) {
            size_t a, b;
            slice_of(pc, x, k, &a, &b);
            if (a >= b || (k != me && x->owner != me)) continue;
            float *held = k == me ? u_of[x->piece] + (a - r[x->piece].lo) : NULL;
            float *whole = x->owner == me ? mat + x->at + (a - x->lo) : NULL;
            if (held && whole) {
                if (to_owner) td_dev_copy(whole, held, (b - a) * sizeof(float));
                else td_dev_copy(held, whole, (b - a) * sizeof(float));
            } else {
                /* the holder sends on the way there, the owner on the way back */
                msg_start(&q, pc->comm, held ? held : whole, b - a, held ? x->owner : k,
                          (held != NULL) == (to_owner != 0));
            }
        }
    }
    msgs_wait(&q);
}

/* block k of a matrix split over tp on dimension dim (each block n
 * elements; rows, cols: the whole's) between the owner's block-ordered
 * staging (blocks[k n, (k+1) n)) and the row-major matrix, either way */
static void tp_layout(int dim, int rows, int cols, size_t n, int tp, float *whole, float *blocks, int to_whole) {
    if (dim == 0) { /* row blocks in rank order are the matrix */
        if (to_whole) td_dev_copy(whole, blocks, n * tp * sizeof(float));
        else td_dev_copy(blocks, whole, n * tp * sizeof(float));
        return;
    }
    size_t w = (size_t)(cols / tp), pitch = (size_t)cols * sizeof(float);
    for (int k = 0; k < tp; k++) {
        float *col = whole + (size_t)k * w, *blk = blocks + (size_t)k * n;
        if (to_whole) td_dev_copy_2d(col, pitch, blk, w * sizeof(float), w * sizeof(float), (size_t)rows);
        else td_dev_copy_2d(blk, w * sizeof(float), col, pitch, w * sizeof(float), (size_t)rows);
    }
}

/* 2b. (chained, tp with ZeRO) between the shard owners of one matrix on
 * the tp ranks: their gathered blocks to the tp owner (to = 1), or its
 * orthogonalized blocks back into their gather buffers */
static void chain_exchange(const td_step_group *grp, const matrix *m, int n, float *mat, float *blocks,
                           int to_owner) {
    msgs q = {0};
    int me = grp->t->tp_rank;
    for (int i = 0; i < n; i++) {
        const matrix *x = &m[i];
        if (x->tp_owner < 0 || x->owner != grp->pieces[x->piece].rank) continue;
        if (x->tp_owner != me) {
            msg_start(&q, grp->tp_group, mat + x->at, x->n, x->tp_owner, to_owner);
            continue;
        }
        for (int k = 0; k < grp->tp; k++) {
            float *blk = blocks + x->bt + (size_t)k * x->n;
            if (k == me && to_owner) td_dev_copy(blk, mat + x->at, x->n * sizeof(float));
            else if (k == me) td_dev_copy(mat + x->at, blk, x->n * sizeof(float));
            else msg_start(&q, grp->tp_group, blk, x->n, k, !to_owner);
        }
    }
    msgs_wait(&q);
}

void td_muon_step_pieces(const td_step_group *grp, const float *const *g, const td_step_range *r,
                         int n_ranges, float lr, int step, float grad_scale) {
    const td_param_table *t = grp->t;
    const td_optim_config *o = grp->optim;
    const td_ops *ops = td_ops_for((td_ktype)o->muon_ns_k); /* its Newton-Schulz: bf16 in bf16 runs */
    int n = 0, tp = grp->tp > 1 ? grp->tp : 1;
    size_t owned = 0, tp_owned = 0, total = 0;
    matrix *m = matrices(grp, n_ranges, &n, &owned, &tp_owned);
    for (int i = 0; i < n_ranges; i++) total += r[i].n;
    float *u = td_dev_alloc(sizeof(float) * (total > 0 ? total : 1), TD_MEM_OPTIM, "muon update shard");
    float *mat = td_dev_alloc(sizeof(float) * (owned > 0 ? owned : 1), TD_MEM_OPTIM, "muon gathered matrices");
    /* the chained gather's: the tp blocks of the matrices this rank owns
     * on both, and those matrices laid out whole (tp > 1 only) */
    float *blocks = tp > 1 ? td_dev_alloc(sizeof(float) * (tp_owned > 0 ? tp_owned : 1), TD_MEM_OPTIM,
                                          "muon gathered blocks") : NULL;
    float *whole = tp > 1 ? td_dev_alloc(sizeof(float) * (tp_owned > 0 ? tp_owned : 1), TD_MEM_OPTIM,
                                         "muon gathered whole") : NULL;
    float **u_of = td_alloc(sizeof *u_of * (size_t)(n_ranges > 0 ? n_ranges : 1), TD_MEM_OTHER);
    float mlr = td_muon_lr(o, lr);
    td_muon_hyper h = {mlr, o->muon_momentum, grad_scale, o->muon_nesterov};
    size_t k = 0;
    for (int i = 0; i < n_ranges; i++) {
        u_of[i] = u + k;
        k += r[i].n;
        td_muon_adamw_rest(ops, r[i].p, g[i], r[i].m, r[i].v, r[i].lo, r[i].lo + r[i].n, t, o, lr, step,
                           grad_scale);
    }
    /* 1. the momentum on this rank's slice of each matrix */
    for (int i = 0; i < n; i++) {
        const td_step_range *ri = &r[m[i].piece];
        size_t a = td_max_sz(ri->lo, m[i].lo), b = td_min_sz(ri->lo + ri->n, m[i].lo + m[i].n);
        if (a < b) ops->muon_momentum(u_of[m[i].piece] + (a - ri->lo), g[m[i].piece] + (a - ri->lo),
                                      ri->m + (a - ri->lo), b - a, &h);
    }
    td_dev_sync(); /* the slices are sent from here */
    /* the formula: a holder sends its slice of each matrix it does not own
     * there, an owner the other slices of its own back; chained, a shard
     * owner its block to the tp owner, which sends tp - 1 blocks back */
    g_formula = 0;
    for (int i = 0; i < n; i++) {
        const td_step_piece *pc = &grp->pieces[m[i].piece];
        size_t a, b;
        slice_of(pc, &m[i], pc->rank, &a, &b);
        size_t mine = a < b ? b - a : 0;
        g_formula += sizeof(float) * (m[i].owner == pc->rank ? m[i].n - mine : mine);
        if (m[i].owner == pc->rank && m[i].tp_owner >= 0)
            g_formula += sizeof(float) * m[i].n * (m[i].tp_owner == t->tp_rank ? (size_t)(tp - 1) : 1);
    }
    uint64_t sent0 = td_comm_sent_bytes();
    exchange(grp, m, n, u_of, r, mat, 1);
    if (tp > 1) td_dev_sync(), chain_exchange(grp, m, n, mat, blocks, 1); /* mat's own slices copied */
    for (int i = 0; i < n; i++) {
        const matrix *x = &m[i];
        if (x->owner != grp->pieces[x->piece].rank) continue;
        if (x->tp_owner < 0) {
            ops->muon_ns(mat + x->at, x->rows, x->cols);
        } else if (x->tp_owner == t->tp_rank) {
            tp_layout(x->dim, x->rows, x->cols, x->n, tp, whole + x->bt, blocks + x->bt, 1);
            ops->muon_ns(whole + x->bt, x->rows, x->cols);
            tp_layout(x->dim, x->rows, x->cols, x->n, tp, whole + x->bt, blocks + x->bt, 0);
        }
    }
    td_dev_sync();
    if (tp > 1) chain_exchange(grp, m, n, mat, blocks, 0), td_dev_sync();
    exchange(grp, m, n, u_of, r, mat, 0);
    g_sent = td_comm_sent_bytes() - sent0;
    /* 4. this rank's slice of each update */
    for (int i = 0; i < n; i++) {
        const td_step_range *ri = &r[m[i].piece];
        size_t a = td_max_sz(ri->lo, m[i].lo), b = td_min_sz(ri->lo + ri->n, m[i].lo + m[i].n);
        if (a < b)
            ops->muon_apply(ri->p + (a - ri->lo), u_of[m[i].piece] + (a - ri->lo), b - a,
                            m[i].rows, m[i].cols, mlr, o->muon_wd);
    }
    if (tp > 1) td_dev_free(whole), td_dev_free(blocks);
    td_dev_free(mat);
    td_dev_free(u);
    td_free(u_of);
    td_free(m);
}

/* ---- tensor parallelism ------------------------------------------------
 * Each tp rank holds block k of a split matrix: rows [k R/tp, (k+1) R/tp)
 * (column-parallel, split_dim 0: q, k, v, fc) or columns (row-parallel,
 * split_dim 1: the projections). The split matrices take owners
 * round-robin over the tp group in table order; the owner receives the
 * blocks in rank order, lays them out as the whole matrix (a 2-D copy for
 * column blocks), orthogonalizes it and sends each block back. The rows
 * tp replicates (whole on every rank) step as in one process. */
typedef struct {
    float *u, *p, *m;  /* this rank's block (u: its update) */
    const float *g;
    size_t n;          /* the block's elements */
    int rows, cols;    /* the whole logical matrix's */
    int dim, owner;    /* the split dimension (0, 1), its owner on tp */
    size_t at;         /* the owner's: its place in the gather buffers */
} tmatrix;

static void tp_exchange(const td_step_group *grp, const tmatrix *m, int n, float *blocks, int to_owner) {
    msgs q = {0};
    int me = grp->t->tp_rank;
    for (int i = 0; i < n; i++) {
        const tmatrix *x = &m[i];
        if (x->owner != me) { /* my block, to or from the owner */
            msg_start(&q, grp->tp_group, x->u, x->n, x->owner, to_owner);
            continue;
        }
        for (int k = 0; k < grp->tp; k++) {
            float *blk = blocks + x->at + (size_t)k * x->n;
            if (k == me && to_owner) td_dev_copy(blk, x->u, x->n * sizeof(float));
            else if (k == me) td_dev_copy(x->u, blk, x->n * sizeof(float));
            else msg_start(&q, grp->tp_group, blk, x->n, k, !to_owner);
        }
    }
    msgs_wait(&q);
}

/* the rows whose matrices td_muon_step_tp gathers over tp: Muon's, split */
static int tp_gathered(const td_param *row) {
    return td_muon_row(row) && !td_param_tp_replicated(row) && row->numel > 0;
}

void td_muon_step_tp(const td_step_group *grp, const float *const *g, const td_step_range *r, int n_ranges,
                     float lr, int step, float grad_scale) {
    const td_param_table *t = grp->t;
    const td_optim_config *o = grp->optim;
    const td_ops *ops = td_ops_for((td_ktype)o->muon_ns_k); /* its Newton-Schulz: bf16 in bf16 runs */
    int tp = grp->tp, cap = 0, n = 0, next = 0, R, C;
    for (int j = 0; j < t->n_rows; j++)
        if (td_muon_row(&t->rows[j])) cap += td_muon_matrices(t, &t->rows[j], &R, &C);
    tmatrix *m = td_alloc(sizeof *m * (size_t)(cap > 0 ? cap : 1), TD_MEM_OTHER);
    float mlr = td_muon_lr(o, lr);
    td_muon_hyper h = {mlr, o->muon_momentum, grad_scale, o->muon_nesterov};
    size_t owned = 0;
    for (int i = 0; i < n_ranges; i++) {
        /* the replicated rows and AdamW's through the whole-matrix step */
        td_muon_update_on(ops, r[i].p, g[i], r[i].m, r[i].v, r[i].lo, r[i].lo + r[i].n, t, o, lr, step,
                          grad_scale, 1);
        for (int j = 0; j < t->n_rows; j++) {
            const td_param *row = &t->rows[j];
            if (!tp_gathered(row)) continue;
            if (row->offset < r[i].lo || row->offset >= r[i].lo + r[i].n) continue;
            TD_ASSERT(row->offset + row->numel <= r[i].lo + r[i].n); /* whole rows on a tp rank */
            int parts = td_muon_matrices(t, row, &R, &C);
            TD_ASSERT(parts == 1 || row->split_dim == 0);
            for (int q = 0; q < parts; q++) {
                tmatrix *x = &m[n++];
                size_t k = row->offset - r[i].lo + (size_t)q * (size_t)R * (size_t)C;
                x->p = r[i].p + k, x->m = r[i].m + k, x->g = g[i] + k;
                x->n = (size_t)R * (size_t)C;
                x->dim = row->split_dim;
                x->rows = x->dim == 0 ? R * tp : R, x->cols = x->dim == 1 ? C * tp : C;
                x->owner = next++ % tp;
                x->at = owned;
                if (x->owner == t->tp_rank) owned += x->n * (size_t)tp;
            }
        }
    }
    size_t mine = 0;
    for (int i = 0; i < n; i++) mine += m[i].n;
    float *u = td_dev_alloc(sizeof(float) * (mine > 0 ? mine : 1), TD_MEM_OPTIM, "muon update blocks");
    float *blocks = td_dev_alloc(sizeof(float) * (owned > 0 ? owned : 1), TD_MEM_OPTIM, "muon gathered blocks");
    float *whole = td_dev_alloc(sizeof(float) * (owned > 0 ? owned : 1), TD_MEM_OPTIM, "muon gathered matrices");
    for (size_t i = 0, k = 0; i < (size_t)n; k += m[i].n, i++) {
        m[i].u = u + k;
        ops->muon_momentum(m[i].u, m[i].g, m[i].m, m[i].n, &h);
    }
    td_dev_sync(); /* the blocks are sent from here */
    /* the formula: a block to each matrix's owner, tp - 1 blocks back from it */
    g_formula = 0;
    for (int i = 0; i < n; i++) g_formula += sizeof(float) * m[i].n * (m[i].owner == t->tp_rank ? (size_t)(tp - 1) : 1);
    uint64_t sent0 = td_comm_sent_bytes();
    tp_exchange(grp, m, n, blocks, 1);
    for (int i = 0; i < n; i++)
        if (m[i].owner == t->tp_rank) {
            tp_layout(m[i].dim, m[i].rows, m[i].cols, m[i].n, tp, whole + m[i].at, blocks + m[i].at, 1);
            ops->muon_ns(whole + m[i].at, m[i].rows, m[i].cols);
            tp_layout(m[i].dim, m[i].rows, m[i].cols, m[i].n, tp, whole + m[i].at, blocks + m[i].at, 0);
        }
    td_dev_sync();
    tp_exchange(grp, m, n, blocks, 0);
    g_sent = td_comm_sent_bytes() - sent0;
    for (int i = 0; i < n; i++) ops->muon_apply(m[i].p, m[i].u, m[i].n, m[i].rows, m[i].cols, mlr, o->muon_wd);
    td_dev_free(whole);
    td_dev_free(blocks);
    td_dev_free(u);
    td_free(m);
}

/* ---- the memory plan ----------------------------------------------------
 * The step's buffers as td_muon_step_pieces and td_muon_step_tp allocate
 * them (TD_MEM_OPTIM, for the step): ZeRO: the update of this rank's shard
 * and the matrices it owns (under tp their blocks, and the blocks and
 * whole matrices it owns on tp as well); tp: the update of its blocks, the
 * owned matrices' blocks and the matrices laid out whole. */
void td_muon_plan(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t, td_mem_plan *p) {
    if (cfg->optim.optimizer != TD_OPT_MUON || cfg->forward_only) return;
    size_t bufs[4] = {0, 0, 0, 0};
    int nb = 0;
    if (cfg->zero > 0) { /* ZeRO's pieces: dense rows over the shard group, expert stacks over edp */
        int S = td_layout_shard_ranks(lay), n_pc = 0, n = 0, ex[TD_UNIT_PIECES];
        int ep = lay->ep > 1 ? lay->ep : 1, ED = td_layout_grad_ranks(lay) / ep;
        /* stand-ins for the two groups, only compared (matrices() counts owners per group) */
        static char dense_group, expert_group;
        size_t lo[TD_UNIT_PIECES], len[TD_UNIT_PIECES], owned = 0, tp_owned = 0;
        td_step_piece *pc = td_alloc(sizeof *pc * TD_UNIT_PIECES * (size_t)t->n_units, TD_MEM_OTHER);
        for (int u = 0; u < t->n_units; u++)
            for (int k = 0, np = td_param_unit_pieces(t, u, lo, len, ex); k < np; k++, n_pc++) {
                pc[n_pc] = ex[k] ? (td_step_piece){lo[k], len[k], (td_comm *)&expert_group, ED, lay->dp_rank / ep}
                                 : (td_step_piece){lo[k], len[k], (td_comm *)&dense_group, S, lay->dp_rank % S};
                bufs[0] += len[k] / (size_t)pc[n_pc].parts;
            }
        td_step_group grp = {0};
        grp.t = t, grp.pieces = pc, grp.tp = lay->tp;
        td_free(matrices(&grp, n_pc, &n, &owned, &tp_owned));
        td_free(pc);
        bufs[1] = owned, nb = 2;
        if (lay->tp > 1) bufs[2] = bufs[3] = tp_owned, nb = 4;
    } else if (lay->tp > 1) {
        int next = 0;
        for (int j = 0; j < t->n_rows; j++) {
            const td_param *row = &t->rows[j];
            if (!tp_gathered(row)) continue;
            int R, C, parts = td_muon_matrices(t, row, &R, &C);
            size_t each = row->numel / (size_t)parts;
            bufs[0] += row->numel;
            for (int q = 0; q < parts; q++)
                if (next++ % lay->tp == t->tp_rank) bufs[1] += each * (size_t)lay->tp;
        }
        bufs[2] = bufs[1], nb = 3;
    }
    for (int i = 0; i < nb; i++) td_plan_dev(p, TD_MEM_OPTIM, sizeof(float) * (bufs[i] > 0 ? bufs[i] : 1));
}

/* The comm layer's staging the exchanges need on a device (msg_start):
 * MUON_INFLIGHT pieces of at most the largest message, a Muon matrix's
 * block (or whole matrix), capped at td_comm_piece_bytes(). None when no
 * layout cuts the matrices. */
void td_muon_staging(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t, size_t *bytes,
                     int *n) {
    *bytes = 0, *n = 0;
    if (cfg->optim.optimizer != TD_OPT_MUON || cfg->forward_only || (cfg->zero == 0 && lay->tp <= 1)) return;
    size_t most = 0;
    int R, C;
    for (int j = 0; j < t->n_rows; j++)
        if (td_muon_row(&t->rows[j]) && t->rows[j].numel > 0 && td_muon_matrices(t, &t->rows[j], &R, &C))
            most = td_max_sz(most, (size_t)R * (size_t)C); /* one expert's matrix, not its stack */
    *bytes = td_min_sz(most * sizeof(float), td_comm_piece_bytes() / sizeof(float) * sizeof(float));
    *n = *bytes ? MUON_INFLIGHT : 0;
}
