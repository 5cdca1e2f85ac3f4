/* Forward passes over caller-chosen rows in the run's layout (train.h):
 * the same calls as the trainer's evaluation, with the rows from the
 * caller and the loss sums shared exactly. */
#include <string.h>

#include "layout_pass.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/cp.h"
#include "trident/grid.h"
#include "trident/pipeline.h"

typedef struct {
    td_layout_pass *p;
    td_rows_fn fill;
    void *ctx;
    int mb; /* the micro-batch td_pp_forward_only's n_micro = 1 calls stand for (rows mode) */
} rows_at;

/* Micro-batch mb of this replica: its rows of the global batch, whole
 * sequences, or under cp this rank's two chunks of each (filled whole into
 * the scratch first). */
static void fill_rows(rows_at *r, int mb, int *in, int *tg) {
    const td_layout_pass *p = r->p;
    const td_axis *cp = &p->g->axis[TD_CP];
    int row = p->g->axis[TD_DP].rank * p->Bl + mb * p->Bm;
    if (cp->size == 1) {
        r->fill(r->ctx, row, p->Bm, p->T, in, tg);
        td_gpt_set_documents(p->model, in);
        return;
    }
    size_t N = (size_t)p->Bm * p->T;
    int *win = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *wtg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
    r->fill(r->ctx, row, p->Bm, p->T, win, wtg);
    td_gpt_set_documents(p->model, win); /* whole sequences: global positions */
    td_cp_take_local(in, win, p->Bm, p->T, cp->size, cp->rank, sizeof(int));
    td_cp_take_local(tg, wtg, p->Bm, p->T, cp->size, cp->rank, sizeof(int));
    td_free(win), td_free(wtg);
}

static void pp_rows(void *ctx, int mb, int *in, int *tg) { fill_rows(ctx, mb, in, tg); }
static void pp_rows_at(void *ctx, int mb, int *in, int *tg) {
    (void)mb; /* always 0: one micro-batch per call */
    fill_rows(ctx, ((rows_at *)ctx)->mb, in, tg);
}

/* The sums over the ranks of c of each one's x[0..n), exactly and in rank
 * order: each x as three floats (24 x 3 bits hold a double's 53), each
 * rank's in its own slots of a zeroed buffer, so the float all-reduce only
 * adds zeros. */
static void exact_sums(td_comm *c, double *x, size_t n) {
    size_t ranks = (size_t)td_comm_size(c), me = (size_t)td_comm_rank(c), w = 3 * n;
    float *b = td_alloc(sizeof(float) * w * ranks, TD_MEM_OTHER);
    memset(b, 0, sizeof(float) * w * ranks);
    for (size_t i = 0; i < n; i++) {
        float h = (float)x[i], m = (float)(x[i] - h), l = (float)(x[i] - h - m);
        b[me * w + 3 * i] = h, b[me * w + 3 * i + 1] = m, b[me * w + 3 * i + 2] = l;
    }
    td_allreduce(c, b, w * ranks, TD_F32, TD_SUM);
    for (size_t i = 0; i < n; i++) {
        double s = 0.0;
        for (size_t r = 0; r < ranks; r++) {
            const float *v = b + r * w + 3 * i;
            s += ((double)v[0] + (double)v[1]) + (double)v[2];
        }
        x[i] = s;
    }
    td_free(b);
}

/* Adds micro-batch mb's token losses (device memory, [Bm, T / cp]: this
 * rank's chunks of each row) into part[] by the row's index in the global
 * batch. */
static void add_rows(const td_layout_pass *p, const float *losses, int mb, double *part) {
    int Tl = p->T / p->g->axis[TD_CP].size, row = p->g->axis[TD_DP].rank * p->Bl + mb * p->Bm;
    size_t N = (size_t)p->Bm * (size_t)Tl;
    float *h = td_alloc(sizeof(float) * N, TD_MEM_OTHER);
    td_dev_download(h, losses, sizeof(float) * N, TD_HOST_EVAL);
    td_dev_sync();
    for (int r = 0; r < p->Bm; r++)
        for (int j = 0; j < Tl; j++) part[row + r] += (double)h[(size_t)r * (size_t)Tl + (size_t)j];
    td_free(h);
}

static double forward(td_layout_pass *p, td_rows_fn fill, void *ctx, double *row_loss) {
    double sum = 0.0;
    size_t rows = (size_t)p->g->axis[TD_DP].size * (size_t)p->Bl;
    if (row_loss) memset(row_loss, 0, sizeof(double) * rows);
    td_dp_set_training(p->dp, 0);
    rows_at r = {p, fill, ctx, 0};
    if (p->pp && !row_loss) { /* the loss comes from the last stage */
        sum = td_pp_forward_only(p->pp, p->K, pp_rows, &r);
    } else if (p->pp) { /* one micro-batch per call: the head's losses are read after each */
        for (r.mb = 0; r.mb < p->K; r.mb++) {
            sum += td_pp_forward_only(p->pp, 1, pp_rows_at, &r);
            const float *losses = td_pp_head_losses(p->pp);
            if (losses) add_rows(p, losses, r.mb, row_loss);
        }
    } else {
        int N = p->Bm * p->T;
        int *in = td_alloc(sizeof(int) * (size_t)N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * (size_t)N, TD_MEM_OTHER);
        for (int k = 0; k < p->K; k++) {
            fill_rows(&r, k, in, tg);
            sum += td_gpt_forward(p->model, in, tg);
            if (row_loss) add_rows(p, p->model->head.losses, k, row_loss);
        }
        td_free(in), td_free(tg);
    }
    td_dp_set_training(p->dp, 1);
    /* every tp rank of a replica holds the same sum (the loss's row
     * statistics are reduced over tp); a pipeline's is the last stage's */
    if (td_grid_grad_ranks(p->g) > 1) exact_sums(p->g->grad_comm, &sum, 1);
    if (p->pp) exact_sums(p->g->axis[TD_PP].comm, &sum, 1);
    if (row_loss && td_grid_grad_ranks(p->g) > 1) exact_sums(p->g->grad_comm, row_loss, rows);
    if (row_loss && p->pp) exact_sums(p->g->axis[TD_PP].comm, row_loss, rows);
    return sum;
}

double td_layout_pass_forward(td_layout_pass *p, td_rows_fn fill, void *ctx) { return forward(p, fill, ctx, NULL); }

double td_layout_pass_forward_rows(td_layout_pass *p, td_rows_fn fill, void *ctx, double *row_loss) {
    return forward(p, fill, ctx, row_loss);
}

int td_layout_pass_rows(const td_layout_pass *p) { return p->g->axis[TD_DP].size * p->Bl; }

const td_dataset *td_layout_pass_data(const td_layout_pass *p) { return p->data; }

void td_layout_pass_grid(const td_layout_pass *p, int *world_rank, int *dp, int *tp, int *pp) {
    *world_rank = p->g->world_rank, *dp = p->g->axis[TD_DP].size, *tp = p->g->axis[TD_TP].size,
    *pp = p->g->axis[TD_PP].size;
}
