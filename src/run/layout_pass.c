/* Forward passes over caller-chosen rows in the run's layout (train.h):
 * the same calls as the trainer's evaluation, with the rows from the
 * caller and the loss sums shared exactly. */
#include <string.h>

#include "layout_pass.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/cp.h"
#include "trident/grid.h"

typedef struct {
    td_layout_pass *p;
    td_rows_fn fill;
    void *ctx;
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
        return;
    }
    size_t N = (size_t)p->Bm * p->T;
    int *win = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *wtg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
    r->fill(r->ctx, row, p->Bm, p->T, win, wtg);
    td_cp_take_local(in, win, p->Bm, p->T, cp->size, cp->rank, sizeof(int));
    td_cp_take_local(tg, wtg, p->Bm, p->T, cp->size, cp->rank, sizeof(int));
    td_free(win), td_free(wtg);
}

static void pp_rows(void *ctx, int mb, int *in, int *tg) { fill_rows(ctx, mb, in, tg); }

/* The sum over the ranks of c of each one's x, exactly and in rank order:
 * x as three floats (24 x 3 bits hold a double's 53), each rank's in its
 * own slots of a zeroed buffer, so the float all-reduce only adds zeros. */
static double exact_sum(td_comm *c, double x) {
    int n = td_comm_size(c), me = td_comm_rank(c);
    float *b = td_alloc(sizeof(float) * 3 * (size_t)n, TD_MEM_OTHER);
    memset(b, 0, sizeof(float) * 3 * (size_t)n);
    float h = (float)x, m = (float)(x - h), l = (float)(x - h - m);
    b[3 * me] = h, b[3 * me + 1] = m, b[3 * me + 2] = l;
    td_allreduce(c, b, 3 * (size_t)n, TD_F32, TD_SUM);
    double s = 0.0;
    for (int r = 0; r < n; r++) s += ((double)b[3 * r] + (double)b[3 * r + 1]) + (double)b[3 * r + 2];
    td_free(b);
    return s;
}

double td_layout_pass_forward(td_layout_pass *p, td_rows_fn fill, void *ctx) {
    double sum = 0.0;
    td_dp_set_training(p->dp, 0);
    if (p->pp) { /* the loss comes from the last stage */
        rows_at r = {p, fill, ctx};
        sum = td_pp_forward_only(p->pp, p->K, pp_rows, &r);
    } else {
        rows_at r = {p, fill, ctx};
        int N = p->Bm * p->T;
        int *in = td_alloc(sizeof(int) * (size_t)N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * (size_t)N, TD_MEM_OTHER);
        for (int k = 0; k < p->K; k++) {
            fill_rows(&r, k, in, tg);
            sum += td_gpt_forward(p->model, in, tg);
        }
        td_free(in), td_free(tg);
    }
    td_dp_set_training(p->dp, 1);
    /* every tp rank of a replica holds the same sum (the loss's row
     * statistics are reduced over tp); a pipeline's is the last stage's */
    if (td_grid_grad_ranks(p->g) > 1) sum = exact_sum(p->g->grad_comm, sum);
    if (p->pp) sum = exact_sum(p->g->axis[TD_PP].comm, sum);
    return sum;
}

const td_dataset *td_layout_pass_data(const td_layout_pass *p) { return p->data; }

void td_layout_pass_grid(const td_layout_pass *p, int *world_rank, int *dp, int *tp, int *pp) {
    *world_rank = p->g->world_rank, *dp = p->g->axis[TD_DP].size, *tp = p->g->axis[TD_TP].size,
    *pp = p->g->axis[TD_PP].size;
}
