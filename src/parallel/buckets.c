/* Gradient buckets: contiguous unit ranges of the flat gradient buffer, in
 * reverse layer order, each all-reduced (or reduced to the root) as soon as
 * its last unit's backward is done, so communication overlaps the backward of
 * the layers below. No packing: a bucket is a range of the flat buffer. */
#include "dp_internal.h"

typedef struct {
    int lo_unit;          /* its lowest unit: the bucket is ready once that unit's backward ends */
    size_t lo, hi;        /* element range */
    td_request *req;
    double start_ms;
} td_bucket;

struct td_buckets {
    td_bucket *b;
    int n, next; /* buckets, and the next one to start */
    int root;    /* < 0: all-reduce; else reduce to this dp rank */
    td_gpay *pay; /* bf16 / top-k payload, NULL: fp32 */
};

int td_bucket_ranges(const td_param_table *t, size_t bucket_bytes, size_t *lo, size_t *len) {
    int n = 0, hi = t->n_units - 1;
    while (hi >= 0) {
        int l = hi;
        size_t bytes = td_unit_numel(t, l) * sizeof(float);
        /* grow downwards while the bucket is below the target size */
        while (l > 0 && bytes < bucket_bytes) {
            l--;
            bytes += td_unit_numel(t, l) * sizeof(float);
        }
        lo[n] = t->unit_offset[l];
        len[n++] = t->unit_offset[hi + 1] - t->unit_offset[l];
        hi = l - 1;
    }
    return n;
}

float *td_buckets_rank_state(td_buckets *b, int k) { return b->pay ? td_gpay_rank_state(b->pay, k) : NULL; }

td_buckets *td_buckets_build(td_dp *dp, int root) {
    const td_param_table *t = dp->t;
    td_buckets *bs = td_alloc(sizeof *bs, TD_MEM_OTHER);
    bs->b = td_alloc(sizeof(td_bucket) * (size_t)t->n_units, TD_MEM_OTHER);
    bs->root = root;
    size_t *lo = td_alloc(sizeof(size_t) * (size_t)t->n_units, TD_MEM_OTHER);
    size_t *len = td_alloc(sizeof(size_t) * (size_t)t->n_units, TD_MEM_OTHER);
    bs->n = td_bucket_ranges(t, dp->cfg.bucket_bytes, lo, len);
    for (int i = 0; i < bs->n; i++) {
        td_bucket *b = &bs->b[i];
        b->lo = lo[i], b->hi = lo[i] + len[i];
        b->lo_unit = 0;
        while (t->unit_offset[b->lo_unit] < b->lo) b->lo_unit++;
        b->req = td_request_new();
    }
    bs->pay = root < 0 ? td_gpay_create(dp, bs->n, lo, len) : NULL;
    td_free(lo);
    td_free(len);
    return bs;
}

void td_buckets_free(td_dp *dp, td_buckets *bs) {
    if (!bs) return;
    td_gpay_free(dp, bs->pay);
    for (int i = 0; i < bs->n; i++) td_request_free(bs->b[i].req);
    td_free(bs->b);
    td_free(bs);
}

void td_buckets_reset(td_buckets *bs) { bs->next = 0; }

int td_buckets_started(const td_buckets *bs) { return bs->next; }

static void start_bucket(td_dp *dp, td_buckets *bs, td_bucket *b) {
    b->start_ms = td_now_ms();
    float *g = dp->grads + b->lo;
    size_t n = b->hi - b->lo;
    if (bs->pay) {
        td_gpay_start(dp, bs->pay, (int)(b - bs->b), b->req);
        return;
    }
    uint64_t sent0 = td_comm_sent_bytes();
    if (bs->root >= 0)
        td_reduce_start(b->req, dp->comm, g, n, TD_F32, bs->root);
    else
        td_allreduce_start(b->req, dp->comm, g, n, TD_F32, TD_SUM);
    td_dp_count_grad(dp, sent0, n);
}

void td_buckets_progress(td_buckets *bs) {
    for (int i = 0; i < bs->next; i++)
        if (td_request_active(bs->b[i].req)) td_test(bs->b[i].req);
}

void td_buckets_on_unit_done(td_dp *dp, td_buckets *bs, int unit) {
    if (!dp->sync_this_micro || dp->D == 1 || dp->cfg.no_overlap) return;
    /* units finish in decreasing order; a bucket is ready once its lowest
     * unit is done */
    while (bs->next < bs->n && bs->b[bs->next].lo_unit >= unit)
        start_bucket(dp, bs, &bs->b[bs->next++]);
    td_buckets_progress(bs);
}

void td_buckets_wait_all(td_dp *dp, td_buckets *bs) {
    if (dp->D == 1) return;
    double t0 = td_now_ms(), first = t0;
    /* a bucket not started yet (e.g. no hook fired) starts now */
    while (bs->next < bs->n) start_bucket(dp, bs, &bs->b[bs->next++]);
    for (int i = 0; i < bs->n; i++) {
        td_wait(bs->b[i].req);
        if (bs->pay) td_gpay_finish(dp, bs->pay, i);
        if (bs->b[i].start_ms < first) first = bs->b[i].start_ms;
    }
    double t1 = td_now_ms();
    dp->exposed_ms = t1 - t0; /* what the step waited for */
    dp->comm_ms = t1 - first; /* from the first bucket's start to the last's end */
    bs->next = 0;
}
