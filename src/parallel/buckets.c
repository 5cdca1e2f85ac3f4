/* Gradient buckets: contiguous unit ranges of the flat gradient buffer, in
 * reverse layer order, each all-reduced (or reduced to the root) as soon as
 * its last unit's backward is done, so communication overlaps the backward of
 * the layers below. No packing: a bucket is a range of the flat buffer. */
#include "dp_internal.h"

void td_buckets_build(td_dp *dp) {
    const td_param_table *t = dp->t;
    dp->buckets = td_alloc(sizeof(td_bucket) * (size_t)t->n_units, TD_MEM_OTHER);
    dp->n_buckets = 0;
    int hi = t->n_units - 1;
    while (hi >= 0) {
        int lo = hi;
        size_t bytes = td_unit_numel(t, lo) * sizeof(float);
        /* grow downwards while the bucket is below the target size */
        while (lo > 0 && bytes < dp->cfg.bucket_bytes) {
            lo--;
            bytes += td_unit_numel(t, lo) * sizeof(float);
        }
        td_bucket *b = &dp->buckets[dp->n_buckets++];
        b->lo_unit = lo, b->hi_unit = hi;
        b->lo = t->unit_offset[lo], b->hi = t->unit_offset[hi + 1];
        b->req = td_request_new();
        hi = lo - 1;
    }
}

void td_buckets_free(td_dp *dp) {
    for (int i = 0; i < dp->n_buckets; i++) td_request_free(dp->buckets[i].req);
    td_free(dp->buckets);
    dp->buckets = NULL;
}

static void start_bucket(td_dp *dp, td_bucket *b) {
    b->start_ms = td_now_ms();
    float *g = dp->grads + b->lo;
    size_t n = b->hi - b->lo;
    if (dp->cfg.mode == TD_DP_REDUCE_BROADCAST)
        td_reduce_start(b->req, dp->comm, g, n, TD_F32, 0);
    else
        td_allreduce_start(b->req, dp->comm, g, n, TD_F32, TD_SUM);
}

void td_buckets_progress(td_dp *dp) {
    for (int i = 0; i < dp->next_bucket; i++)
        if (td_request_active(dp->buckets[i].req)) td_test(dp->buckets[i].req);
}

void td_buckets_on_unit_done(td_dp *dp, int unit) {
    if (!dp->sync_this_micro || dp->D == 1 || dp->cfg.no_overlap) return;
    /* units finish in decreasing order; a bucket is ready once its lowest
     * unit is done */
    while (dp->next_bucket < dp->n_buckets && dp->buckets[dp->next_bucket].lo_unit >= unit)
        start_bucket(dp, &dp->buckets[dp->next_bucket++]);
    td_buckets_progress(dp);
}

void td_buckets_wait_all(td_dp *dp) {
    if (dp->D == 1) return;
    double t0 = td_now_ms(), first = t0;
    /* a bucket not started yet (e.g. no hook fired) starts now */
    while (dp->next_bucket < dp->n_buckets) start_bucket(dp, &dp->buckets[dp->next_bucket++]);
    for (int i = 0; i < dp->n_buckets; i++) {
        td_wait(dp->buckets[i].req);
        if (dp->buckets[i].start_ms < first) first = dp->buckets[i].start_ms;
    }
    double t1 = td_now_ms();
    dp->exposed_ms = t1 - t0;   /* what the step waited for */
    dp->comm_ms = t1 - first;   /* from the first bucket's start to the last's end */
    dp->next_bucket = 0;
}
