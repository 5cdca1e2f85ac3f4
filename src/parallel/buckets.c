/* Gradient buckets: contiguous unit ranges of the flat gradient buffer, in
 * reverse layer order, each all-reduced (or reduced to the root) as soon as
 * its last unit's backward is done, so communication overlaps the backward of
 * the layers below. No packing: a bucket is a range of the flat buffer. */
#include "dp_internal.h"

typedef struct {
    int lo_unit;          /* its lowest unit: the bucket is ready once that unit's backward ends */
    size_t lo, hi;        /* element range */
    int expert;           /* expert rows under expert parallelism: summed over edp */
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

static void add_bucket(td_buckets *bs, const td_param_table *t, size_t lo, size_t hi, int expert) {
    td_bucket *b = &bs->b[bs->n++];
    b->lo = lo, b->hi = hi, b->expert = expert;
    b->lo_unit = 0; /* the unit holding lo */
    while (b->lo_unit + 1 < t->n_units && t->unit_offset[b->lo_unit + 1] <= lo) b->lo_unit++;
    b->req = td_request_new();
}

/* Under expert parallelism each unit's expert stack is a bucket of its own,
 * summed over edp: range [lo, hi) of whole units as the units' pieces
 * (td_param_unit_pieces), neighbours of one kind merged, highest first (the
 * backward's order). */
static void split_range(td_buckets *bs, const td_param_table *t, size_t lo, size_t hi) {
    size_t top = hi, plo[TD_UNIT_PIECES], plen[TD_UNIT_PIECES];
    int kind = -1, pex[TD_UNIT_PIECES];
    for (int u = t->n_units - 1; u >= 0; u--) {
        if (t->unit_offset[u] < lo || t->unit_offset[u] >= hi) continue;
        for (int k = td_param_unit_pieces(t, u, plo, plen, pex) - 1; k >= 0; k--) {
            if (plen[k] == 0) continue;
            if (kind >= 0 && pex[k] != kind) {
                add_bucket(bs, t, plo[k] + plen[k], top, kind);
                top = plo[k] + plen[k];
            }
            kind = pex[k];
        }
    }
    add_bucket(bs, t, lo, top, kind > 0);
}

td_buckets *td_buckets_build(td_dp *dp, int root) {
    const td_param_table *t = dp->t;
    td_buckets *bs = td_alloc(sizeof *bs, TD_MEM_OTHER);
    /* a unit's pieces: at most dense, expert, dense */
    bs->b = td_alloc(sizeof(td_bucket) * 3 * (size_t)t->n_units, TD_MEM_OTHER);
    bs->root = root;
    size_t *lo = td_alloc(sizeof(size_t) * (size_t)t->n_units, TD_MEM_OTHER);
    size_t *len = td_alloc(sizeof(size_t) * (size_t)t->n_units, TD_MEM_OTHER);
    int n = td_bucket_ranges(t, dp->cfg.bucket_bytes, lo, len);
    bs->n = 0;
    for (int i = 0; i < n; i++) split_range(bs, t, lo[i], lo[i] + len[i]);
    TD_ASSERT(bs->n == n || t->ep > 1); /* payloads (bf16, top-k) see the unsplit ranges */
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

void td_buckets_broadcast(td_dp *dp, td_buckets *bs, float *buf) {
    if (dp->t->ep == 1) { /* one call: no bucket is an expert one */
        if (dp->D > 1) td_broadcast(dp->comm, buf, dp->t->numel, TD_F32, 0);
        return;
    }
    for (int i = 0; i < bs->n; i++) {
        const td_bucket *b = &bs->b[i];
        if (b->expert ? dp->ED > 1 : dp->D > 1)
            td_broadcast(b->expert ? dp->ecomm : dp->comm, buf + b->lo, b->hi - b->lo, TD_F32, 0);
    }
}

int td_buckets_started(const td_buckets *bs) { return bs->next; }

static void start_bucket(td_dp *dp, td_buckets *bs, td_bucket *b) {
    b->start_ms = td_now_ms();
    float *g = dp->grads + b->lo;
    size_t n = b->hi - b->lo;
    if (bs->pay) {
        td_gpay_start(dp, bs->pay, (int)(b - bs->b), b->req);
        return;
    }
    td_comm *c = b->expert ? dp->ecomm : dp->comm;
    if (b->expert && dp->ED == 1) return; /* ep = dp x cp: every expert on one rank */
    uint64_t sent0 = td_comm_sent_bytes();
    if (bs->root >= 0)
        td_reduce_start(b->req, c, g, n, TD_F32, bs->root);
    else
        td_allreduce_start(b->req, c, g, n, TD_F32, TD_SUM);
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
