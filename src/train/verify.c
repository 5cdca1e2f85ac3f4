/* `trident verify`: the layout-equivalence oracle as a user command. Under
 * mpirun with a layout's train flags it trains K steps in that layout and,
 * on every rank, the same K steps in one plain process (the whole global
 * batch, no strategy), then prints each step's relative loss difference
 * and, where a reduced gradient differs, the first tensor (and the rank)
 * where it does. Exit status 1 beyond the tolerances. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/kernels.h"
#include "trident/loss_scale.h"
#include "trident/train.h"
#include "trident/moe.h"

/* Tolerances. In fp32 a layout only reorders sums. Every reduction of the
 * engine accumulates in fp32 in every precision (a GEMM's K = C or 4C,
 * attention's T, a weight gradient's N = B x T tokens, the micro-batches,
 * dp ranks and tp partial products summed after them: model.h), and
 * reordering a sum of K terms moves it by at most K x 2^-24 of the sum of
 * its terms' magnitudes, sqrt(K) x 2^-24 when the roundings' signs are
 * independent (Higham and Mary 2019, "A new approach to probabilistic
 * rounding error analysis"): 1.2e-6 at K = 384 tokens, where layouts
 * measure 2e-7 to 1e-6 of a tensor's max (docs/verify-precision.md).
 * GRAD_TOL keeps a factor 85 above that, for reductions 7000 times longer;
 * a missing or doubled reduction is O(1) of the max (the skip-embed-sum
 * fault: 1.09). The loss is a mean of such sums: ~1e-7 per step. */
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4

/* --precision bf16 | fp16: the oracle stays one fp32 process, so the
 * comparison sees the 16-bit arithmetic's own error as well as the
 * layout's. u is the type's unit roundoff under round-to-nearest, 2^-p for
 * p bits of significand: bf16 p = 8, u = 2^-8 = 3.9e-3; fp16 p = 11,
 * u = 2^-11 = 4.9e-4. No sum runs in 16 bits (above), so nothing of u grows
 * with a reduction's length: u enters where a value is stored in the
 * 16-bit type, one rounding of at most u of it. A weight gradient is a sum
 * over tokens of x_n dy_n: x_n was rounded when stored (1), dy_n is the
 * rounded result (1) of a GEMM of the rounded gradient above it (1) and the
 * rounded weight copy (1): 4 roundings, 4u of the term where they align.
 * Each factor also inherits the roundings of the layers before it (forward)
 * or after it (backward); LayerNorm renormalises every block's input, so
 * they are counted once more: ROUNDINGS_16 = 2 x 4. Relative to the
 * tensor's max the term errors add no faster than the terms (independent
 * signs: sqrt(N) against the gradient's coherent N), so the bound is per
 * term. Measured (docs/verify-precision.md): the worst element at 1.7u to
 * 2.7u for 2 to 8 layers and 128 to 2048 tokens per step, neither moving
 * it beyond noise. */
#define ROUNDINGS_16 8

static double unit_roundoff(td_precision p) {
    return p == TD_PREC_BF16 ? 0x1p-8 : p == TD_PREC_FP16 ? 0x1p-11 : 0.0;
}

/* The 16-bit loss: a token's loss is logsumexp(z) - z_y of fp32 logits z, so
 * an error dz moves it by sum_v p_v dz_v - dz_y, at most 2 max |dz|. A logit
 * z_v is the fp32 dot product of the stored final hidden state h (1
 * rounding) and the wte row's weight copy w_v (1), twice that with what h
 * inherits (as above): LOGIT_ROUNDINGS_16 u of sum_c |h_c w_vc| <= |h| |w_v|
 * (Cauchy-Schwarz); h = gamma x + beta with x LayerNorm's normalised row,
 * |x| <= sqrt(C), so |h| <= sqrt(C) max|gamma| + |beta|. The bound is taken
 * from the oracle's parameters at each step, relative to its loss. It is
 * loose (the layouts' losses measure 1/300 of it and less: the per-token
 * errors average out over the tokens, which a bound cannot count on): the
 * gradients are the sharp check. */
#define LOGIT_ROUNDINGS_16 4
static double head_scale(const td_param_table *t, const float *p) {
    const td_param *g = td_param_find(t, "transformer.ln_f.weight"), *b = td_param_find(t, "transformer.ln_f.bias");
    const td_param *w = td_param_find(t, "transformer.wte.weight");
    TD_ASSERT(g && b && w);
    double gmax = 0, bsq = 0, wmax = 0;
    for (size_t k = 0; k < g->numel; k++) gmax = fmax(gmax, fabs(p[g->offset + k]));
    for (size_t k = 0; k < b->numel; k++) bsq += (double)p[b->offset + k] * p[b->offset + k];
    size_t C = (size_t)w->shape[1];
    for (size_t r = 0; r < (size_t)w->shape[0]; r++) {
        double sq = 0;
        for (size_t c = 0; c < C; c++) sq += (double)p[w->offset + r * C + c] * p[w->offset + r * C + c];
        wmax = fmax(wmax, sq);
    }
    return (sqrt((double)C) * gmax + sqrt(bsq)) * sqrt(wmax);
}

typedef struct {
    int K;
    td_param_table canon;
    float *ref_grads;  /* [K][canon.numel] */
    float *ref_max;    /* [K][n_rows] largest |gradient| of each tensor */
    float *ref_losses; /* [K] */
    double *loss_tol;  /* [K] relative tolerance of each step's loss */
    double grad_tol;   /* of an element, relative to its tensor's max */
    double u;          /* the 16-bit type's unit roundoff; 0 in fp32 */
    int skip_nonfinite; /* dynamic loss scaling: an attempt with a non-finite
                           gradient is skipped and the step run again */
    float *worst;      /* [K] this rank's largest relative gradient error */
    int *worst_row;    /* [K] its tensor */
    /* the first (step, row) past grad_tol on this rank, and its element */
    int bad_step, bad_row;
    long long bad_elem;
    float bad_val, bad_ref;
    float *seen;       /* [canon.numel] 1 where some rank compared the element at step 0 */
} verify_ctx;

/* The oracle: one process, the whole global batch (as test_layouts, but
 * keeping each step's gradient). */
static void reference(const td_train_opts *o, verify_ctx *v) {
    td_dataset d;
    td_data_load(&d, o->data, o->tokenizer, o->vocab, o->seq);
    td_gpt_config cfg;
    td_train_model_config(o, d.tok.V, &cfg);
    td_param_table_build(&v->canon, &cfg, 1);
    const td_param_table *t = &v->canon;
    size_t n = t->numel;
    v->ref_grads = td_alloc(sizeof(float) * n * (size_t)v->K, TD_MEM_OTHER);
    v->ref_max = td_alloc(sizeof(float) * (size_t)t->n_rows * (size_t)v->K, TD_MEM_OTHER);
    v->seen = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
    memset(v->seen, 0, sizeof(float) * n);
    float *p = td_alloc(n * 4, TD_MEM_OTHER), *g = td_alloc(n * 4, TD_MEM_OTHER);
    float *m = td_alloc(n * 4, TD_MEM_OTHER), *vv = td_alloc(n * 4, TD_MEM_OTHER);
    memset(g, 0, n * 4), memset(m, 0, n * 4), memset(vv, 0, n * 4);
    td_param_init_range(t, o->seed, 0, n, p);
    int B = o->batch, T = o->seq;
    td_gpt model;
    td_gpt_create(&model, t, B, 0);
    td_gpt_bind_flat(&model, p, g);
    int *in = td_alloc(sizeof(int) * (size_t)B * T, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * (size_t)B * T, TD_MEM_OTHER);
    for (int s = 0; s < v->K; s++) {
        double hs = v->u > 0 ? head_scale(t, p) : 0.0; /* before the step's forward */
        td_data_batch(&d, 0, o->seed, s, 0, B, T, in, tg);
        td_gpt_moe_stats_reset(&model);
        double sum = td_gpt_forward(&model, in, tg);
        td_gpt_backward(&model, 1.0f / ((float)B * T));
        if (td_gpt_moe_stats(&model)) sum += td_gpt_moe_stats(&model)->loss_sum; /* the aux and z losses */
        memcpy(v->ref_grads + (size_t)s * n, g, n * 4);
        for (int i = 0; i < t->n_rows; i++) {
            float mx = 0;
            for (size_t k = 0; k < t->rows[i].numel; k++) mx = fmaxf(mx, fabsf(g[t->rows[i].offset + k]));
            v->ref_max[(size_t)s * t->n_rows + i] = mx;
        }
        double norm = sqrt(td_sumsq(g, n));
        td_adamw_update(p, g, m, vv, 0, n, t, &o->optim, td_lr_at(&o->optim, s), s + 1,
                        td_clip_scale(norm, o->optim.clip));
        memset(g, 0, n * 4);
        v->ref_losses[s] = (float)(sum / ((double)B * T));
        v->loss_tol[s] = LOSS_TOL + 2.0 * LOGIT_ROUNDINGS_16 * v->u * hs / fabs((double)v->ref_losses[s]);
    }
    td_free(in), td_free(tg);
    td_gpt_destroy(&model);
    td_free(p), td_free(g), td_free(m), td_free(vv);
    td_data_free(&d);
}

/* Every owned, reduced gradient element against the oracle's, at its
 * global index. */
static void probe(void *ctx, const td_param_table *t, int step, size_t lo, size_t n, const float *grads,
                  float loss_scale) {
    verify_ctx *v = ctx;
    if (step >= v->K) return;
    const td_param_table *c = &v->canon;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t a = td_max_sz(lo, p->offset), b = td_min_sz(lo + n, p->offset + p->numel);
        float mx = v->ref_max[(size_t)step * c->n_rows + i];
        const float *ref = v->ref_grads + (size_t)step * c->numel + c->rows[i].offset;
        for (size_t e = a; e < b; e++) {
            long long gi = td_param_global_index(t, p, t->tp_rank, e - p->offset);
            if (gi < 0) continue; /* vocabulary padding */
            if (step == 0) v->seen[c->rows[i].offset + gi] = 1.0f;
            /* the scale is a power of two: dividing it out is exact */
            float x = grads[e - lo] / loss_scale, r = ref[gi];
            if (!isfinite(x) && v->skip_nonfinite) continue; /* this attempt is run again */
            double err = fabs((double)x - r) / (mx > 0 ? mx : 1.0f);
            if (!(err <= v->worst[step])) v->worst[step] = isnan(err) ? INFINITY : (float)err, v->worst_row[step] = i;
            int earlier = v->bad_step < 0 || step < v->bad_step || (step == v->bad_step && i < v->bad_row);
            if (!(err <= v->grad_tol) && earlier)
                v->bad_step = step, v->bad_row = i, v->bad_elem = gi, v->bad_val = x, v->bad_ref = r;
        }
    }
}

int td_verify_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    o.steps = 5;          /* a few steps show a wrong reduction */
    o.eval_every = 0;
    o.sample_tokens = 0;
    td_train_opts_parse(&o, argc, argv);
    if (o.print_config) return td_train_print_config(&o);
    TD_CHECK(!o.out, "verify: --out is not used (verify saves nothing)");
    o.quiet = 1;
    int me = td_comm_rank(td_comm_world()), N = td_comm_size(td_comm_world());
    verify_ctx v;
    memset(&v, 0, sizeof v);
    v.K = o.steps;
    v.bad_step = v.bad_row = -1;
    /* the oracle first, on every rank: each checks what it owns */
    v.ref_losses = td_alloc(sizeof(float) * (size_t)v.K, TD_MEM_OTHER);
    v.loss_tol = td_alloc(sizeof(double) * (size_t)v.K, TD_MEM_OTHER);
    td_precision prec = td_train_precision(&o);
    v.u = unit_roundoff(prec);
    v.grad_tol = GRAD_TOL + ROUNDINGS_16 * v.u;
    v.skip_nonfinite = o.ch.loss_scale == TD_LOSS_SCALE_DYNAMIC;
    v.worst = td_alloc(sizeof(float) * (size_t)v.K, TD_MEM_OTHER);
    v.worst_row = td_alloc(sizeof(int) * (size_t)v.K, TD_MEM_OTHER);
    memset(v.worst, 0, sizeof(float) * (size_t)v.K);
    memset(v.worst_row, 0, sizeof(int) * (size_t)v.K);
    reference(&o, &v);

    td_dp_set_grad_probe(probe, &v);
    td_train_result res;
    td_train_run(&o, &res, 0);
    td_dp_set_grad_probe(NULL, NULL);

    /* the largest gradient error of each step over the ranks, and the
     * first mismatch (smallest step, then row, then rank) */
    td_allreduce(td_comm_world(), v.worst, (size_t)v.K, TD_F32, TD_MAX);
    const td_param_table *c = &v.canon;
    float key = v.bad_step < 0 ? -1e30f : -(float)((double)v.bad_step * c->n_rows + v.bad_row);
    td_allreduce(td_comm_world(), &key, 1, TD_F32, TD_MAX); /* MAX of -key = MIN */
    float who = (v.bad_step >= 0 && -(float)((double)v.bad_step * c->n_rows + v.bad_row) == key) ? -(float)me : -1e30f;
    td_allreduce(td_comm_world(), &who, 1, TD_F32, TD_MAX);
    int first_rank = (int)-who;
    float detail[3] = {0, 0, 0};
    if (me == first_rank && key > -1e30f) detail[0] = (float)v.bad_elem, detail[1] = v.bad_val, detail[2] = v.bad_ref;
    td_allreduce(td_comm_world(), detail, 3, TD_F32, TD_SUM);
    /* every element was compared by some rank (else "matches" would be
     * vacuous for what nobody probed) */
    td_allreduce(td_comm_world(), v.seen, c->numel, TD_F32, TD_MAX);
    size_t unseen = 0, first_unseen = 0;
    for (int i = c->n_rows; i-- > 0;) { /* real elements only: not the vocabulary's padding rows */
        const td_param *p = &c->rows[i];
        for (size_t k = (size_t)p->shape[0] * (size_t)p->shape[1]; k-- > 0;)
            if (v.seen[p->offset + k] == 0.0f) unseen++, first_unseen = p->offset + k;
    }

    /* the step count from rank 0, a worker: parameter servers run no steps
     * of their own (steps_done 0), and every worker agrees on a stop */
    int fails = res.stop_step >= 0 || (me == 0 && res.steps_done != v.K);
    if (me == 0) {
        int tp = o.tp, pp = o.pp, dp = o.dp > 0 ? o.dp : N / (tp * pp);
        printf("verify: dp %d x tp %d x pp %d (%s, zero %d%s%s, %s) against one fp32 process: %d steps of batch %d\n",
               dp, tp, pp, o.dp_mode, o.zero, pp > 1 ? ", schedule " : "", pp > 1 ? o.schedule : "",
               td_precision_name(prec), v.K, o.batch);
        if (v.u > 0)
            printf("verify: %s tolerances (u = 2^-%d): gradients %.2g of a tensor's max (%d u + %.0e), losses "
                   "%d u of the head's logit bound per step, relative (docs/verify-precision.md)\n",
                   td_precision_name(prec), prec == TD_PREC_BF16 ? 8 : 11, v.grad_tol, ROUNDINGS_16, GRAD_TOL,
                   2 * LOGIT_ROUNDINGS_16);
        double worst = 0, worst_tol = LOSS_TOL, loss_ratio = 0, grad_ratio = 0;
        for (int s = 0; s < res.steps_done && s < v.K; s++) {
            double rel = fabs((double)res.losses[s] - v.ref_losses[s]) / fabs((double)v.ref_losses[s]);
            if (!(rel / v.loss_tol[s] <= loss_ratio))
                loss_ratio = rel / v.loss_tol[s], worst = rel, worst_tol = v.loss_tol[s];
            if (!(v.worst[s] / v.grad_tol <= grad_ratio)) grad_ratio = v.worst[s] / v.grad_tol;
            printf("  step %d: loss %.7f, one process %.7f, relative difference %.2e (tolerance %.2g); largest "
                   "gradient error %.2e of its tensor's max (%s)\n",
                   s, res.losses[s], v.ref_losses[s], rel, v.loss_tol[s], v.worst[s], c->rows[v.worst_row[s]].name);
        }
        if (!(loss_ratio <= 1)) fails = 1;
        if (unseen) {
            int row = 0;
            for (int i = 0; i < c->n_rows; i++)
                if (c->rows[i].offset <= first_unseen) row = i;
            printf("verify: %zu gradient elements were compared by no rank (first in %s)\n", unseen,
                   c->rows[row].name);
            fails = 1;
        }
        if (key > -1e30f) {
            int k = (int)-key, step = k / c->n_rows, row = k % c->n_rows;
            int r = first_rank, t_ = r % tp, d_ = (r / tp) % dp, p_ = r / (tp * dp);
            printf("verify: first gradient mismatch at step %d in %s on rank %d (dp %d, pp %d, tp %d): "
                   "element %lld is %.6g, one process %.6g (tolerance %.2g of the tensor's max)\n",
                   step, c->rows[row].name, r, d_, p_, t_, (long long)detail[0], detail[1], detail[2], v.grad_tol);
            fails = 1;
        }
        /* the margins: each check's largest error as a fraction of its tolerance */
        printf("verify: %s: largest relative loss difference %.2e (tolerance %.2g); largest gradient error %.3g "
               "and loss difference %.3g of their tolerances%s\n", fails ? "FAILED" : "passed", worst, worst_tol,
               grad_ratio, loss_ratio, fails ? "" : "; every reduced gradient matches");
        fflush(stdout);
    }
    td_train_result_free(&res);
    td_free(v.seen);
    td_free(v.ref_grads), td_free(v.ref_max), td_free(v.ref_losses), td_free(v.loss_tol), td_free(v.worst), td_free(v.worst_row);
    td_param_table_free(&v.canon);
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_MAX);
    return f > 0 ? 1 : 0;
}
