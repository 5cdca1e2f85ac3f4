/* The payload of a data-parallel gradient reduction when it is not the plain
 * fp32 sum (trident/grad_payload.h): bf16 all-reduce, or top-k pairs
 * all-gathered and summed in rank order. A strategy hands its ranges
 * (buckets, or ZeRO-1's units) to td_gpay_create and calls start/finish
 * where it would start/wait its fp32 collective. Afterwards dp->grads holds
 * the reduced dense gradient (bf16, topk:R:grad), so the step pipeline
 * (norm, clipping, AdamW) sees what it sees in fp32; or, for topk:R, the 2-D
 * tensors' elements hold the mean of the ranks' sparse AdamW updates, which
 * the step pipeline adds to the parameters with their weight decay
 * (td_step_group.updates_2d; its norm and clipping cover the 1-D tensors,
 * sent whole). */
#include <math.h>
#include <string.h>

#include "dp_internal.h"
#include "trident/backend.h"
#include "trident/grad_payload.h"
#include "trident/optim.h"

typedef struct {
    size_t lo, n, k;  /* flat elements [lo, lo + n); k pairs (top-k) */
    /* top-k: the 1-D tensors' elements in the range (biases, LayerNorm:
     * the rows without weight decay), [lo, lo + n) of the flat buffer per
     * segment, sent dense in fp32 beside the pairs */
    int n_seg;
    size_t *seg_lo, *seg_n;
    size_t n_dense;
    float *dense;     /* [n_dense] their gradients, all-reduced (inside dense_all) */
    td_request *dense_req;
    float *pairs;     /* top-k: [2k] this rank's pairs (inside send_all) */
    float *gathered;  /* top-k: [D * 2k] every rank's pairs */
    uint16_t *half;   /* bf16: [n] the payload, reduced in place */
} gpay_range;

struct td_gpay {
    int n_ranges;
    gpay_range *r;
    float *send_all, *recv_all; /* top-k: the ranges' pairs back to back */
    float *dense_all;           /* top-k: the ranges' 1-D elements back to back */
    uint16_t *half_all;         /* bf16 */
    uint32_t *idx;              /* top-k: [max k] selection scratch */
    /* top-k: [numel] what was not sent: of the gradient (topk:R:grad, with
     * error feedback only) or of this rank's AdamW update (topk:R; without
     * error feedback the update's scratch, cleared every step) */
    float *residual;
    float *local_m, *local_v;   /* topk:R: [numel] this rank's AdamW moments of its own gradient */
};

/* The top-k of the AdamW update (topk:R) rather than of the gradient. */
static int update_scheme(const td_dp_config *cfg) { return cfg->topk_ratio > 0 && !cfg->topk_grad; }

int td_gpay_updates(const td_dp_config *cfg, int D) { return td_gpay_on(cfg, D) && update_scheme(cfg); }

int td_gpay_on(const td_dp_config *cfg, int D) {
    return D > 1 && (cfg->grad_dtype == TD_BF16 || cfg->topk_ratio > 0);
}

/* Elements of [lo, lo + n) in rows without weight decay (1-D tensors);
 * with segs, their segments are written to seg_lo, seg_n. */
static size_t dense_part(const td_param_table *t, size_t lo, size_t n, int *n_seg, size_t *seg_lo,
                         size_t *seg_n) {
    size_t total = 0;
    int m = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t a = td_max_sz(lo, p->offset), b = td_min_sz(lo + n, p->offset + p->numel);
        if (p->decay || a >= b) continue;
        if (seg_lo) seg_lo[m] = a, seg_n[m] = b - a;
        m++;
        total += b - a;
    }
    if (n_seg) *n_seg = m;
    return total;
}

/* Pairs of a top-k range: R of what is not sent dense. */
static size_t range_k(const td_dp_config *cfg, const td_param_table *t, size_t lo, size_t n) {
    return td_topk_count(cfg->topk_ratio, n - dense_part(t, lo, n, NULL, NULL, NULL));
}

/* Sizes in elements over the ranges: sum of 2k, largest k, sum of n, sum of
 * the dense (1-D) parts. */
static void sizes(const td_dp_config *cfg, const td_param_table *t, int n_ranges, const size_t *lo,
                  const size_t *len, size_t *pairs, size_t *max_k, size_t *total, size_t *dense) {
    *pairs = *max_k = *total = *dense = 0;
    for (int i = 0; i < n_ranges; i++) {
        *total += len[i];
        if (cfg->topk_ratio > 0) {
            size_t k = range_k(cfg, t, lo[i], len[i]);
            *pairs += 2 * k;
            *max_k = td_max_sz(*max_k, k);
            *dense += dense_part(t, lo[i], len[i], NULL, NULL, NULL);
        }
    }
}

void td_gpay_plan(const td_dp_config *cfg, int D, const td_param_table *t, int n_ranges,
                  const size_t *lo, const size_t *len, td_mem_plan *p) {
    if (!td_gpay_on(cfg, D)) return;
    size_t pairs, max_k, total, dense;
    sizes(cfg, t, n_ranges, lo, len, &pairs, &max_k, &total, &dense);
    if (cfg->topk_ratio > 0) {
        /* the residual is gradient state (a step's unsent part); the local
         * moments are optimizer state beside the step's own */
        if (!cfg->topk_no_ef || update_scheme(cfg)) p->bytes[TD_MEM_GRADS] += t->numel * sizeof(float);
        if (update_scheme(cfg)) p->bytes[TD_MEM_OPTIM] += 2 * t->numel * sizeof(float);
        p->bytes[TD_MEM_COMM] +=
            (pairs + (size_t)D * pairs + dense) * sizeof(float) + max_k * sizeof(uint32_t);
    } else {
        td_plan_dev(p, TD_MEM_COMM, total * sizeof(uint16_t)); /* one buffer, half_all */
    }
}

float *td_gpay_rank_state(td_gpay *g, int k) { return k == 0 ? g->residual : k == 1 ? g->local_m : g->local_v; }

td_gpay *td_gpay_create(td_dp *dp, int n_ranges, const size_t *lo, const size_t *len) {
    if (!td_gpay_on(&dp->cfg, dp->D)) return NULL;
    td_gpay *g = td_alloc(sizeof *g, TD_MEM_OTHER);
    g->n_ranges = n_ranges;
    g->r = td_alloc(sizeof(gpay_range) * (size_t)n_ranges, TD_MEM_OTHER);
    size_t pairs, max_k, total, dense;
    sizes(&dp->cfg, dp->t, n_ranges, lo, len, &pairs, &max_k, &total, &dense);
    int topk = dp->cfg.topk_ratio > 0;
    /* top-k selects, packs and sums on the host, over host buffers (the
     * comm layer's shared windows): not on a device yet (the rules table's
     * topk-device row refuses it with the options) */
    TD_ASSERT(!topk || !td_backend_is_device());
    if (topk) {
        /* the send side in the group's shared memory: on one node the
         * all-gather then copies straight from the peers' pairs */
        g->send_all = td_dp_alloc_shared(dp, pairs, TD_MEM_COMM, "top-k pairs");
        g->recv_all = td_alloc((size_t)dp->D * pairs * sizeof(float), TD_MEM_COMM);
        g->dense_all = td_dp_alloc_shared(dp, dense, TD_MEM_COMM, "top-k dense");
        g->idx = td_alloc(max_k * sizeof(uint32_t), TD_MEM_COMM);
        size_t bytes = dp->t->numel * sizeof(float);
        if (!dp->cfg.topk_no_ef || update_scheme(&dp->cfg)) g->residual = td_alloc(bytes, TD_MEM_GRADS);
        if (update_scheme(&dp->cfg)) {
            g->local_m = td_alloc(bytes, TD_MEM_OPTIM);
            g->local_v = td_alloc(bytes, TD_MEM_OPTIM);
        }
    } else {
        g->half_all = td_dev_alloc(total * sizeof(uint16_t), TD_MEM_COMM, "bf16 gradient payload");
    }
    size_t at_pairs = 0, at_half = 0, at_dense = 0;
    for (int i = 0; i < n_ranges; i++) {
        gpay_range *r = &g->r[i];
        r->lo = lo[i], r->n = len[i];
        if (topk) {
            r->k = range_k(&dp->cfg, dp->t, r->lo, r->n);
            r->n_dense = dense_part(dp->t, r->lo, r->n, &r->n_seg, NULL, NULL);
            r->seg_lo = td_alloc(sizeof(size_t) * (size_t)(r->n_seg + 1), TD_MEM_OTHER);
            r->seg_n = td_alloc(sizeof(size_t) * (size_t)(r->n_seg + 1), TD_MEM_OTHER);
            dense_part(dp->t, r->lo, r->n, NULL, r->seg_lo, r->seg_n);
            r->dense = g->dense_all + at_dense;
            r->dense_req = td_request_new();
            at_dense += r->n_dense;
            r->pairs = g->send_all + at_pairs;
            r->gathered = g->recv_all + (size_t)dp->D * at_pairs;
            at_pairs += 2 * r->k;
        } else {
            r->half = g->half_all + at_half;
            at_half += r->n;
        }
    }
    return g;
}

void td_gpay_free(td_dp *dp, td_gpay *g) {
    if (!g) return;
    for (int i = 0; i < g->n_ranges; i++) {
        td_free(g->r[i].seg_lo);
        td_free(g->r[i].seg_n);
        if (g->r[i].dense_req) td_request_free(g->r[i].dense_req);
    }
    if (g->send_all) td_dp_free_shared(dp, g->send_all, TD_MEM_COMM);
    if (g->dense_all) td_dp_free_shared(dp, g->dense_all, TD_MEM_COMM);
    td_free(g->recv_all);
    td_free(g->idx);
    td_free(g->residual);
    td_free(g->local_m);
    td_free(g->local_v);
    td_dev_free(g->half_all);
    td_free(g->r);
    td_free(g);
}

void td_dp_count_grad(td_dp *dp, uint64_t sent0, size_t n) {
    dp->grad_sent += td_comm_sent_bytes() - sent0;
    dp->grad_dense += n * sizeof(float);
}

void td_gpay_start(td_dp *dp, td_gpay *g, int i, td_request *req) {
    gpay_range *r = &g->r[i];
    float *grad = dp->grads + r->lo;
    uint64_t sent0 = td_comm_sent_bytes();
    if (dp->cfg.topk_ratio > 0) {
        /* the 1-D tensors travel whole: a few thousand elements that every
         * token's activations pass through (LayerNorm, biases), which a
         * share of the bucket by magnitude starves */
        float *d = r->dense;
        for (int j = 0; j < r->n_seg; j++) {
            float *x = dp->grads + r->seg_lo[j];
            memcpy(d, x, r->seg_n[j] * sizeof(float));
            memset(x, 0, r->seg_n[j] * sizeof(float)); /* so never selected, no residual */
            d += r->seg_n[j];
        }
        if (update_scheme(&dp->cfg)) {
            /* this rank's AdamW step from its own gradient (scaled by D: the
             * dense gradient is the ranks' sum) added to what it has not sent
             * yet. No weight decay here: the step applies it to the params,
             * identical on every rank. A non-finite gradient makes a NaN
             * update, selected first, so every rank's check still sees it. */
            float *acc = g->residual + r->lo;
            if (dp->cfg.topk_no_ef) memset(acc, 0, r->n * sizeof(float));
            td_optim_config o = dp->cfg.optim;
            o.weight_decay = 0.0f;
            td_adamw_update_on(td_ops_for(TD_K_F32), acc, grad, g->local_m + r->lo, g->local_v + r->lo, r->lo,
                               r->lo + r->n, dp->t, &o, td_lr_at(&o, dp->step), dp->step + 1, (float)dp->D, 0);
            td_topk_take(acc, r->n, r->k, g->idx, r->pairs);
        } else {
            td_topk_pack(grad, g->residual ? g->residual + r->lo : NULL, r->n, r->k, g->idx, r->pairs);
        }
        /* k is the same on every rank: a fixed-size gather */
        td_all_gather_start(req, dp->comm, r->pairs, r->gathered, 2 * r->k, TD_F32);
        if (r->n_dense) td_allreduce_start(r->dense_req, dp->comm, r->dense, r->n_dense, TD_F32, TD_SUM);
    } else {
        td_ops_for(TD_K_BF16)->round_n(r->half, grad, r->n); /* td_f32_to_bf16's rounding */
        td_allreduce_start(req, dp->comm, r->half, r->n, TD_BF16, TD_SUM);
    }
    td_dp_count_grad(dp, sent0, r->n);
}

void td_gpay_finish(td_dp *dp, td_gpay *g, int i) {
    gpay_range *r = &g->r[i];
    float *grad = dp->grads + r->lo;
    if (dp->cfg.topk_ratio > 0) {
        td_topk_unpack_sum(grad, r->n, r->gathered, dp->D, r->k);
        if (update_scheme(&dp->cfg)) /* the mean update, the same bits on every rank;
                                        the step pipeline applies it */
            for (size_t j = 0; j < r->n; j++) grad[j] /= (float)dp->D;
        td_wait(r->dense_req);
        const float *d = r->dense;
        for (int j = 0; j < r->n_seg; j++) {
            memcpy(dp->grads + r->seg_lo[j], d, r->seg_n[j] * sizeof(float));
            d += r->seg_n[j];
        }
    } else
        td_ops_for(TD_K_BF16)->widen_n(grad, r->half, r->n);
}
