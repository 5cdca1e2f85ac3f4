/* The training loop's watch over fresh gradients (grad_watch.h). */
#include <stdint.h>
#include <string.h>

#include "grad_watch.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/comm.h"

/* At a unit's end: the test fault written into its gradient (a named
 * upload), then each still-finite row of the unit scanned by the backend's
 * first_nonfinite into a device slot of its own, the slots downloaded
 * together (TD_HOST_SCALARS). */
static void watch_event(void *ctx, td_unit_event ev, int unit) {
    td_grad_watch *w = ctx;
    if (ev == TD_BWD_END) {
        const td_param_table *t = w->model->table;
        float *g = w->model->unit_grads[unit];
        size_t base = t->unit_offset[unit];
        const td_param *f = w->fault_row;
        if (f && unit == f->unit) /* TD_HOST_OTHER: a test's planted value */
            td_dev_upload(g + (f->offset - base + f->numel / 2), &w->fault_value, sizeof(float),
                          TD_HOST_OTHER);
        if (w->first_micro) {
            const td_ops *ops = td_ops_for(TD_K_F32);
            int q = 0;
            for (int i = 0; i < t->n_rows; i++) {
                const td_param *r = &t->rows[i];
                if (r->unit != unit || w->first_micro[i] != TD_WATCH_FINITE) continue;
                w->row_of[q] = i;
                ops->first_nonfinite(w->dev_first + q++, g + (r->offset - base), r->numel);
            }
            if (q) {
                td_dev_download(w->host_first, w->dev_first, sizeof(int64_t) * (size_t)q,
                                TD_HOST_SCALARS);
                td_dev_sync();
            }
            for (int k = 0; k < q; k++)
                if (w->host_first[k] >= 0) w->first_micro[w->row_of[k]] = w->micro;
        }
    }
    if (w->inner) w->inner(w->inner_ctx, ev, unit);
}

void td_grad_watch_init(td_grad_watch *w, td_gpt *model, int track) {
    memset(w, 0, sizeof *w);
    w->model = model;
    if (track && model->table) {
        size_t n = (size_t)model->table->n_rows;
        w->first_micro = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
        w->row_of = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
        w->host_first = td_alloc(sizeof(int64_t) * n, TD_MEM_OTHER);
        w->dev_first = td_dev_alloc(sizeof(int64_t) * n, TD_MEM_OTHER, "gradient watch slots");
    }
}

void td_grad_watch_free(td_grad_watch *w) {
    td_free(w->first_micro);
    td_free(w->row_of);
    td_free(w->host_first);
    td_dev_free(w->dev_first);
    w->first_micro = w->row_of = NULL;
    w->host_first = w->dev_first = NULL;
}

void td_grad_watch_begin(td_grad_watch *w, int any_fault) {
    w->fault_row = NULL;
    w->micro = TD_WATCH_UNKNOWN;
    if (w->first_micro)
        for (int i = 0; i < w->model->table->n_rows; i++) w->first_micro[i] = TD_WATCH_FINITE;
    if (!any_fault && !w->first_micro) return;
    w->inner = w->model->hook;
    w->inner_ctx = w->model->hook_ctx;
    w->model->hook = watch_event;
    w->model->hook_ctx = w;
    w->installed = 1;
}

void td_grad_watch_end(td_grad_watch *w) {
    if (!w->installed) return;
    w->model->hook = w->inner;
    w->model->hook_ctx = w->inner_ctx;
    w->installed = 0;
}

void td_grad_watch_origin(const td_grad_watch *w, const td_grid *g, int row, int *rank, int *micro) {
    int mine = w->first_micro && row >= 0 && row < w->model->table->n_rows &&
               w->first_micro[row] != TD_WATCH_FINITE;
    /* ranks are small integers, exact in float: MAX of -rank = MIN */
    float v[2] = {mine ? -(float)g->world_rank : -1e30f, 0.0f};
    if (g->world_size > 1) td_allreduce(g->world, v, 1, TD_F32, TD_MAX);
    *rank = v[0] > -1e29f ? (int)-v[0] : -1;
    v[1] = *rank == g->world_rank && w->first_micro[row] >= 0 ? (float)w->first_micro[row] : -1.0f;
    if (g->world_size > 1) td_allreduce(g->world, &v[1], 1, TD_F32, TD_MAX);
    *micro = (int)v[1];
}
