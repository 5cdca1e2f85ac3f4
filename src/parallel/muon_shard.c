/* Muon on a layout that cuts its matrices (ZeRO's shards): a matrix's
 * orthogonalization needs all of it, so after the gradient reduction
 *   1. each rank runs the elementwise momentum on its slice (u, and the
 *      buffer in m), and AdamW on the rows that are not Muon's;
 *   2. each logical matrix is gathered to its owner, the matrices of one
 *      group taking owners round-robin over its ranks (matrix j of the
 *      group's pieces in flat order: rank j mod parts);
 *   3. the owner orthogonalizes it (ops->muon_ns) and sends each holder its
 *      slice back;
 *   4. each rank applies its slice of the update.
 * The same float expressions as the whole-matrix step in the same order
 * (kernels/muon.c), so a matrix's update is one process's bits for the
 * same gradient. Messages are point to point on the piece's group, posted
 * in matrix order on every rank (MPI's matching order keeps them apart). */
#include "step.h"
#include "trident/backend.h"
#include "trident/base.h"

#define MUON_TAG 4242 /* below td_comm_tag_limit(): MPI guarantees 32767 */

typedef struct {
    int piece;         /* the step range / piece it lies in */
    size_t lo, n;      /* flat elements */
    int rows, cols, owner;
    size_t at;         /* its place in the owner's gather buffer (owner only) */
} matrix;

/* Every logical matrix of the pieces, owners round-robin per group. */
static matrix *matrices(const td_step_group *grp, int n_pieces, int *count, size_t *owned) {
    const td_param_table *t = grp->t;
    int cap = 0;
    for (int j = 0; j < t->n_rows; j++)
        if (td_muon_row(&t->rows[j])) cap += t->rows[j].groups > 1 ? t->rows[j].groups : 1;
    matrix *m = td_alloc(sizeof *m * (size_t)(cap > 0 ? cap : 1), TD_MEM_OTHER);
    /* the groups the pieces name: dp, and edp for expert stacks */
    td_comm *seen[8] = {0};
    int next[8] = {0}, n = 0;
    *owned = 0;
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
            int parts = r->groups > 1 ? r->groups : 1;
            int R = r->local_shape[0] / parts, C = r->local_shape[1];
            for (int q = 0; q < parts; q++) {
                matrix *x = &m[n++];
                x->piece = i, x->rows = R, x->cols = C;
                x->n = (size_t)R * (size_t)C;
                x->lo = r->offset + (size_t)q * x->n;
                x->owner = next[g]++ % pc->parts;
                x->at = x->owner == pc->rank ? *owned : 0;
                if (x->owner == pc->rank) *owned += x->n;
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

/* gather (to = 1): the holders' slices of u into the owners' buffer; else
 * the owners' orthogonalized matrices back into the holders' u. u_of[i]
 * points at range i's u (its element lo). */
static void exchange(const td_step_group *grp, const matrix *m, int n, float *const *u_of,
                     const td_step_range *r, float *mat, int to_owner) {
    int reqs = 0;
    td_request **req = td_alloc(sizeof *req * (size_t)(n > 0 ? n : 1) * 2, TD_MEM_OTHER);
    int cap = 2 * n;
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
                continue;
            }
            if (reqs == cap) {
                cap *= 2;
                td_request **more = td_alloc(sizeof *more * (size_t)cap, TD_MEM_OTHER);
                for (int q = 0; q < reqs; q++) more[q] = req[q];
                td_free(req);
                req = more;
            }
            req[reqs] = td_request_new();
            int peer = held ? x->owner : k;
            int sending = (held != NULL) == (to_owner != 0);
            if (sending)
                td_send_start(req[reqs], pc->comm, held ? held : whole, b - a, TD_F32, peer, MUON_TAG);
            else
                td_recv_start(req[reqs], pc->comm, held ? held : whole, b - a, TD_F32, peer, MUON_TAG);
            reqs++;
        }
    }
    for (int q = 0; q < reqs; q++) {
        td_wait(req[q]);
        td_request_free(req[q]);
    }
    td_free(req);
}

void td_muon_step_pieces(const td_step_group *grp, const float *const *g, const td_step_range *r,
                         int n_ranges, float lr, int step, float grad_scale) {
    const td_param_table *t = grp->t;
    const td_optim_config *o = grp->optim;
    const td_ops *ops = td_ops_for(TD_K_F32);
    int n = 0;
    size_t owned = 0, total = 0;
    matrix *m = matrices(grp, n_ranges, &n, &owned);
    for (int i = 0; i < n_ranges; i++) total += r[i].n;
    float *u = td_dev_alloc(sizeof(float) * (total > 0 ? total : 1), TD_MEM_OPTIM, "muon update shard");
    float *mat = td_dev_alloc(sizeof(float) * (owned > 0 ? owned : 1), TD_MEM_OPTIM, "muon gathered matrices");
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
    exchange(grp, m, n, u_of, r, mat, 1);
    for (int i = 0; i < n; i++)
        if (m[i].owner == grp->pieces[m[i].piece].rank) ops->muon_ns(mat + m[i].at, m[i].rows, m[i].cols);
    td_dev_sync();
    exchange(grp, m, n, u_of, r, mat, 0);
    /* 4. this rank's slice of each update */
    for (int i = 0; i < n; i++) {
        const td_step_range *ri = &r[m[i].piece];
        size_t a = td_max_sz(ri->lo, m[i].lo), b = td_min_sz(ri->lo + ri->n, m[i].lo + m[i].n);
        if (a < b)
            ops->muon_apply(ri->p + (a - ri->lo), u_of[m[i].piece] + (a - ri->lo), b - a,
                            m[i].rows, m[i].cols, mlr, o->muon_wd);
    }
    td_dev_free(mat);
    td_dev_free(u);
    td_free(u_of);
    td_free(m);
}
