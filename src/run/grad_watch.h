/* grad_watch: what the training loop puts around the strategy's unit hook
 * for one step (private to src/train). At each unit's TD_BWD_END, before
 * the strategy may start communicating the unit's gradient:
 *   - a test fault (fault.h: nan-grad, grad-inf) writes one value into the
 *     gradient of TD_FAULT_GRAD_TENSOR;
 *   - under dynamic loss scaling, the unit's tensors still finite are
 *     scanned, and the first micro-batch whose backward left one of them
 *     non-finite is recorded per table row. This is this rank's own
 *     gradient, before any reduction mixes the ranks', so after a skipped
 *     step the ranks can name which of them produced the value. One pass
 *     over the local gradient per micro-batch (memory-bound, small beside
 *     the backward's GEMMs); off unless the scaler skips steps. */
#ifndef TRIDENT_GRAD_WATCH_H
#define TRIDENT_GRAD_WATCH_H

#include <stdint.h>

#include "trident/grid.h"
#include "trident/model.h"

#define TD_WATCH_FINITE (-1)  /* first_micro: still finite */
#define TD_WATCH_UNKNOWN (-2) /* non-finite, micro-batch not known (pipeline stages) */

typedef struct {
    td_gpt *model;
    td_unit_hook inner;
    void *inner_ctx;
    const td_param *fault_row; /* NULL: no fault */
    float fault_value;
    int *first_micro; /* [n_rows] or NULL: not tracking */
    int micro;        /* the micro-batch whose backward runs, or TD_WATCH_UNKNOWN */
    /* the scan's slots: device [n_rows] first indices, their host copy, and
     * the row each slot scanned */
    int64_t *dev_first, *host_first;
    int *row_of;
    int installed;
} td_grad_watch;

/* track: record non-finite gradients (dynamic loss scaling). */
void td_grad_watch_init(td_grad_watch *w, td_gpt *model, int track);
void td_grad_watch_free(td_grad_watch *w);
/* Wraps the model's hook for one step (a no-op when nothing is to be
 * done); every row is finite again. */
void td_grad_watch_begin(td_grad_watch *w, int any_fault);
void td_grad_watch_end(td_grad_watch *w);
/* After a step every rank agrees was skipped with first non-finite row
 * `row`: the smallest world rank whose own gradient of that row went
 * non-finite (-1: none did; the reduction overflowed) and its micro-batch
 * (-1: not known). Collective over the world (training ranks only). */
void td_grad_watch_origin(const td_grad_watch *w, const td_grid *g, int row, int *rank, int *micro);

#endif
