/* `trident verify`: the layout-equivalence oracle as a user command. Under
 * mpirun with a layout's train flags it trains K steps in that layout and
 * checks each step from the state the layout shared: at every step's start
 * the layout's parameters and AdamW moments are gathered into the canonical
 * layout (train.h's step_state: the checkpoint's gathering, so ZeRO, tp, pp
 * and ep shards all come back), and one fp32 process (verify_oracle.c)
 * takes the step from exactly that state. Compared: the loss, every reduced
 * gradient (on the rank that owns it, naming the first tensor and rank
 * that differ), and the parameters and moments after the update (the
 * oracle applying the layout's own gradient, so the optimizer is checked on
 * its own). A step's difference does not carry into the next. A mixture of
 * experts' near ties are replayed (verify_routes.c). Parameter servers run
 * no step loop of their own: a synchronous one is checked against the
 * oracle's own trajectory, a stale one is refused. Exit status 1 beyond the
 * tolerances (verify_tol.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/moe.h"
#include "trident/optim.h"
#include "trident/train.h"
#include "verify.h"

/* The update check's findings on rank 0: elements compared, beyond the
 * tolerance, the largest difference as a fraction of it, the first beyond. */
typedef struct {
    long long n, bad;
    double ratio;
    int first_step, sec, row;
    long long elem;
    float x, ref;
} state_check;

typedef struct {
    int K, me, ps, moe;
    int muon;            /* --optimizer muon: its matrices' parameters get verify_tol_state_muon;
                            2: its Newton-Schulz in bf16 (bf16 runs) */
    size_t n;            /* canonical elements */
    const td_param_table *canon;
    verify_oracle *orc;
    const verify_tol *tol;
    int checked;         /* steps checked so far */
    /* this rank's reduced gradients at their global index, and 1 where it
     * owns the element: one step's (parameter servers: [K], checked after
     * the run) */
    float *lay;
    unsigned char *seen;
    float *start;        /* rank 0: [3 n] the state the next step to check starts from */
    float *S, *prev;     /* rank 0: [3 n] the oracle's state, and a copy of where it started */
    float *owner, *lay_all, *ref, *ref_max; /* one step's */
    double *ref_loss, *loss_tol; /* [K] (rank 0) */
    float *worst;        /* [K] this rank's largest relative gradient error */
    int *worst_row;
    int bad_step, bad_row;
    long long bad_elem;
    float bad_val, bad_ref;
    size_t unseen, first_unseen;
    state_check sc;
    verify_routes routes;
} verify_ctx;

/* The layout's state after step s (params, m, v) against the oracle's S,
 * both from prev. */
static void check_state(state_check *sc, int s, const td_param_table *c, const float *const next[3], const float *S,
                        const float *prev, int muon) {
    size_t n = c->numel;
    for (int sec = 0; sec < 3; sec++)
        for (int i = 0; i < c->n_rows; i++) {
            int ortho = muon && sec == 0 && td_muon_row(&c->rows[i]);
            double move = 0.0; /* the oracle's largest change of the matrix */
            for (size_t k = 0; ortho && k < c->rows[i].numel; k++) {
                size_t at = c->rows[i].offset + k;
                move = fmax(move, fabs((double)S[at] - prev[at]));
            }
            for (size_t k = 0; k < c->rows[i].numel; k++) {
                size_t at = c->rows[i].offset + k;
                sc->n++;
                double q = ortho ? verify_tol_state_muon(next[sec][at], S[sec * n + at], prev[sec * n + at], move,
                                                         muon == 2)
                                 : verify_tol_state(next[sec][at], S[sec * n + at], prev[sec * n + at]);
                if (!(q <= sc->ratio)) sc->ratio = isnan(q) ? INFINITY : q;
                if (q <= 1) continue;
                if (sc->bad++ == 0)
                    sc->first_step = s, sc->sec = sec, sc->row = i, sc->elem = (long long)k, sc->x = next[sec][at],
                    sc->ref = S[sec * n + at];
            }
        }
}

/* Step s, once the layout took it (collective over the world): the
 * layout's whole gradient on rank 0, each element from the smallest rank
 * that owns it (replicas hold the same reduced value); the oracle's step
 * there, from the layout's state at the step's start (parameter servers:
 * its own), and the state after it against the layout's next (P, M, V on
 * rank 0; NULL: none to compare); the oracle's gradient back to every
 * rank, which compares what it owns. */
static void check_step(verify_ctx *v, int s, const float *P, const float *M, const float *V) {
    const td_param_table *c = v->canon;
    size_t n = v->n, slot = v->ps ? (size_t)s * n : 0;
    const float *lay = v->lay + slot;
    const unsigned char *seen = v->seen + slot;
    for (size_t e = 0; e < n; e++) v->owner[e] = seen[e] ? -(float)v->me : -1e30f;
    td_allreduce(td_comm_world(), v->owner, n, TD_F32, TD_MAX);
    for (int i = c->n_rows; s == 0 && i-- > 0;) { /* real elements only: not the vocabulary's padding rows */
        const td_param *p = &c->rows[i];
        for (size_t k = (size_t)p->shape[0] * (size_t)p->shape[1]; k-- > 0;)
            if (v->owner[p->offset + k] < -1e29f) v->unseen++, v->first_unseen = p->offset + k;
    }
    for (size_t e = 0; e < n; e++) v->lay_all[e] = v->owner[e] == -(float)v->me ? lay[e] : 0.0f;
    td_allreduce(td_comm_world(), v->lay_all, n, TD_F32, TD_SUM);
    if (v->me == 0) {
        float *S = v->S;
        if (!v->ps) memcpy(S, v->start, sizeof(float) * 3 * n);
        memcpy(v->prev, S, sizeof(float) * 3 * n);
        /* the oracle's forwards are not the layout's routing */
        td_gpt_set_route_probe(NULL, NULL);
        if (v->moe && !v->ps) v->orc->routes = &v->routes, td_gpt_set_route_override(verify_routes_override, &v->routes);
        v->ref_loss[s] = verify_oracle_step(v->orc, s, S, S + n, S + 2 * n, v->ref, v->ps ? NULL : v->lay_all);
        td_gpt_set_route_override(NULL, NULL);
        if (v->moe && !v->ps) td_gpt_set_route_probe(verify_routes_probe, &v->routes);
        v->loss_tol[s] = verify_tol_loss(v->tol, c, v->prev, v->ref_loss[s]);
        for (int i = 0; i < c->n_rows; i++) {
            float mx = 0;
            for (size_t k = 0; k < c->rows[i].numel; k++) mx = fmaxf(mx, fabsf(v->ref[c->rows[i].offset + k]));
            v->ref_max[i] = mx;
        }
        if (P) check_state(&v->sc, s, c, (const float *const[3]){P, M, V}, S, v->prev, v->muon);
    }
    td_broadcast(td_comm_world(), v->ref, n, TD_F32, 0);
    td_broadcast(td_comm_world(), v->ref_max, (size_t)c->n_rows, TD_F32, 0);
    for (int i = 0; i < c->n_rows; i++) { /* every owned element, on its rank */
        const td_param *p = &c->rows[i];
        float mx = v->ref_max[i];
        for (size_t k = 0; k < p->numel; k++) {
            size_t at = p->offset + k;
            if (!seen[at]) continue;
            double err = fabs((double)lay[at] - v->ref[at]) / (mx > 0 ? mx : 1.0f);
            if (!(err <= v->worst[s])) v->worst[s] = isnan(err) ? INFINITY : (float)err, v->worst_row[s] = i;
            if (!(err <= v->tol->grad) && v->bad_step < 0)
                v->bad_step = s, v->bad_row = i, v->bad_elem = (long long)k, v->bad_val = lay[at], v->bad_ref = v->ref[at];
        }
    }
    if (!v->ps) memset(v->seen, 0, n); /* the next step's owners */
    v->checked = s + 1;
}

/* train.h's step_state: a new step starts, so the one before is complete:
 * its routing to rank 0 and its check; then this step's start is kept. A
 * retried attempt (dynamic loss scaling) finds its step's start kept. */
static void step_state(void *ctx, int step, int dp_rank, const float *P, const float *M, const float *V) {
    verify_ctx *v = ctx;
    if (step > v->checked && step - 1 < v->K) {
        if (v->moe) verify_routes_gather(&v->routes);
        check_step(v, step - 1, P, M, V);
        v->routes.n = 0; /* consumed */
    }
    verify_routes_begin_step(&v->routes, step, dp_rank);
    if (P) memcpy(v->start, P, v->n * 4), memcpy(v->start + v->n, M, v->n * 4), memcpy(v->start + 2 * v->n, V, v->n * 4);
}

/* Every owned, reduced gradient element, kept at its global index; a
 * skipped attempt's (dynamic loss scaling) are overwritten by the next. */
static void probe(void *ctx, const td_param_table *t, int step, size_t lo, size_t n, const float *grads,
                  float loss_scale) {
    verify_ctx *v = ctx;
    if (step >= v->K) return;
    const td_param_table *c = v->canon;
    size_t slot = v->ps ? (size_t)step * v->n : 0;
    float *lay = v->lay + slot;
    unsigned char *seen = v->seen + slot;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t a = td_max_sz(lo, p->offset), b = td_min_sz(lo + n, p->offset + p->numel);
        for (size_t e = a; e < b; e++) {
            long long gi = td_param_global_index(t, p, t->tp_rank, e - p->offset);
            if (gi < 0) continue; /* vocabulary padding */
            size_t at = c->rows[i].offset + (size_t)gi;
            lay[at] = grads[e - lo] / loss_scale; /* the scale is a power of two: dividing it out is exact */
            seen[at] = 1;
        }
    }
}

/* A combination verify cannot check, refused with the reason (exit 2). */
static int refuse(const td_train_opts *o, int N) {
    const char *why = NULL;
    int ps = td_train_dp_mode(o) == TD_DP_PS;
    if (ps && o->ps_staleness > 0)
        why = "--ps-staleness above 0: a stale parameter server's workers step from parameters up to that many "
              "updates old, a trajectory one process does not take; verify --ps-staleness 0";
    else if (ps && o->moe.E > 0)
        why = "--dp-mode ps with --moe-experts: the step-by-step check needs every rank in the step loop";
    else if (o->moe.E > 0 && o->moe.K > VERIFY_ROUTE_K)
        why = "--moe-top-k above 8: the routing records hold 8 experts";
    else if (o->ch.topk_ratio > 0)
        why = "--grad-compress topk: the update is the ranks' sparse steps by design, not the dense gradient's "
              "(tests/layouts checks it against its own oracle)";
    if (!why) return 0;
    if (td_comm_rank(td_comm_world()) == 0) printf("verify: refused: %s\n", why);
    (void)N;
    return 1;
}

int td_verify_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    o.steps = 5; /* a few steps show a wrong reduction */
    o.eval_every = 0;
    o.sample_tokens = 0;
    td_train_opts_parse(&o, argc, argv);
    if (o.print_config) return td_train_print_config(&o);
    TD_CHECK(!o.out, "verify: --out is not used (verify saves nothing)");
    o.quiet = 1;
    int me = td_comm_rank(td_comm_world()), N = td_comm_size(td_comm_world());
    if (refuse(&o, N)) return 2;
    int ps = td_train_dp_mode(&o) == TD_DP_PS, tp = o.tp, pp = o.pp, cp = o.cp > 0 ? o.cp : 1;
    int dp = o.dp > 0 ? o.dp : (N - (ps ? o.ps_servers : 0)) / (tp * pp * cp);
    td_precision prec = td_train_precision(&o);
    verify_tol tol;
    verify_tol_init(&tol, prec, o.ch.grad_dtype == TD_BF16, dp * cp);

    verify_ctx v;
    memset(&v, 0, sizeof v);
    v.K = o.steps, v.me = me, v.ps = ps, v.moe = o.moe.E > 0, v.tol = &tol;
    v.muon = o.optim.optimizer != TD_OPT_MUON ? 0 : o.optim.muon_ns_k == TD_K_BF16 ? 2 : 1;
    v.bad_step = v.bad_row = -1, v.sc.first_step = -1;
    verify_oracle orc;
    verify_oracle_open(&orc, &o, dp);
    v.orc = &orc, v.canon = &orc.t, v.n = orc.t.numel;
    const td_param_table *c = v.canon;
    size_t n = v.n, K = (size_t)v.K, slots = ps ? K : 1;
    v.lay = td_alloc(sizeof(float) * n * slots, TD_MEM_OTHER);
    v.seen = td_alloc(n * slots, TD_MEM_OTHER);
    memset(v.lay, 0, sizeof(float) * n * slots), memset(v.seen, 0, n * slots);
    v.owner = td_alloc(sizeof(float) * n, TD_MEM_OTHER), v.lay_all = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
    v.ref = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
    v.ref_max = td_alloc(sizeof(float) * (size_t)c->n_rows, TD_MEM_OTHER);
    v.ref_loss = td_alloc(sizeof(double) * K, TD_MEM_OTHER), v.loss_tol = td_alloc(sizeof(double) * K, TD_MEM_OTHER);
    v.worst = td_alloc(sizeof(float) * K, TD_MEM_OTHER), v.worst_row = td_alloc(sizeof(int) * K, TD_MEM_OTHER);
    memset(v.worst, 0, sizeof(float) * K), memset(v.worst_row, 0, sizeof(int) * K);
    if (me == 0) {
        v.S = td_alloc(sizeof(float) * 3 * n, TD_MEM_OTHER), v.prev = td_alloc(sizeof(float) * 3 * n, TD_MEM_OTHER);
        if (!ps) v.start = td_alloc(sizeof(float) * 3 * n, TD_MEM_OTHER);
        if (ps) { /* the oracle's own trajectory from the run's initialisation */
            td_param_init_range(c, o.seed, 0, n, v.S);
            memset(v.S + n, 0, sizeof(float) * 2 * n);
        }
    }
    /* a token's key is its micro-batch, row and position: --batch-rampup's
     * smaller steps run fewer micro-batches of these rows, keyed alike */
    v.routes.step = -1, v.routes.M = orc.M, v.routes.Bm = o.batch / (dp * orc.M), v.routes.T = o.seq;
    v.routes.o_rows = o.batch / orc.M, v.routes.thr = tol.tie;
    if (!ps) o.step_state = step_state, o.step_state_ctx = &v;
    int moe = v.moe;
    if (moe) td_gpt_set_route_probe(verify_routes_probe, &v.routes);
    td_dp_set_grad_probe(probe, &v);
    td_train_result res;
    td_train_run(&o, &res, !ps);
    td_dp_set_grad_probe(NULL, NULL);
    td_gpt_set_route_probe(NULL, NULL);
    /* the steps rank 0 (a worker: parameter servers run no steps) took */
    float fdone = (float)(res.steps_done < v.K ? res.steps_done : v.K);
    td_broadcast(td_comm_world(), &fdone, 1, TD_F32, 0);
    int done = (int)fdone;
    /* what no step's start checked: the last step (against the run's end
     * state where it ran to the end), or every step (parameter servers) */
    for (int s = v.checked; s < done; s++) {
        if (moe && !ps) verify_routes_gather(&v.routes);
        int end = !ps && s + 1 == o.steps && res.final_params;
        check_step(&v, s, end ? res.final_params : NULL, end ? res.final_m : NULL, end ? res.final_v : NULL);
    }
    float *worst = v.worst;
    int *worst_row = v.worst_row;
    double *ref_loss = v.ref_loss, *loss_tol = v.loss_tol;
    int bad_step = v.bad_step, bad_row = v.bad_row;
    long long bad_elem = v.bad_elem;
    float bad_val = v.bad_val, bad_ref = v.bad_ref;
    size_t unseen = v.unseen, first_unseen = v.first_unseen;
    state_check sc = v.sc;
    float *mine = td_alloc(sizeof(float) * K, TD_MEM_OTHER); /* each step's worst tensor: the worst rank's */
    memcpy(mine, worst, sizeof(float) * K);
    td_allreduce(td_comm_world(), worst, K, TD_F32, TD_MAX);
    float *wrow = td_alloc(sizeof(float) * K, TD_MEM_OTHER);
    for (size_t s = 0; s < K; s++) wrow[s] = mine[s] == worst[s] ? (float)worst_row[s] : -1.0f;
    td_allreduce(td_comm_world(), wrow, K, TD_F32, TD_MAX);
    float key = bad_step < 0 ? -1e30f : -(float)((double)bad_step * c->n_rows + bad_row);
    td_allreduce(td_comm_world(), &key, 1, TD_F32, TD_MAX); /* MAX of -key = MIN */
    float who = (bad_step >= 0 && -(float)((double)bad_step * c->n_rows + bad_row) == key) ? -(float)me : -1e30f;
    td_allreduce(td_comm_world(), &who, 1, TD_F32, TD_MAX);
    int first_rank = (int)-who;
    float detail[3] = {0, 0, 0};
    if (me == first_rank && key > -1e30f) detail[0] = (float)bad_elem, detail[1] = bad_val, detail[2] = bad_ref;
    td_allreduce(td_comm_world(), detail, 3, TD_F32, TD_SUM);

    int fails = res.stop_step >= 0 || (me == 0 && res.steps_done != v.K);
    if (me == 0) {
        int ep = o.ep > 1 ? o.ep : 1;
        printf("verify: dp %d x tp %d x pp %d%s", dp, tp, pp, "");
        if (cp > 1) printf(" x cp %d", cp);
        if (ep > 1) printf(" (ep %d)", ep);
        char ramp[64] = "";
        if (o.batch_rampup) snprintf(ramp, sizeof ramp, " (ramped up by --batch-rampup %s)", o.batch_rampup);
        printf(" (%s, zero %d%s%s, %s%s%s) against one fp32 process: %d steps of batch %d%s%s\n",
               o.dp_mode, o.zero, pp > 1 ? ", schedule " : "", pp > 1 ? o.schedule : "", td_precision_name(prec),
               o.ch.grad_dtype == TD_BF16 ? ", bf16 gradient reduction" : "", moe ? ", mixture of experts" : "",
               v.K, o.batch, ramp, ps ? "" : ", each from the layout's state");
        char red[96] = "";
        if (tol.u_red > 0) snprintf(red, sizeof red, " + %d u of the bf16 reduction over %d ranks", tol.red_terms, tol.red_terms - 1);
        if (tol.u > 0 || tol.u_red > 0)
            printf("verify: tolerances: gradients %.2g of a tensor's max (1e-4 + 8 u of the compute type%s), losses "
                   "1e-5 + 8 u of the head's logit bound per step, relative (docs/verify-precision.md)\n",
                   tol.grad, red);
        double worst_l = 0, worst_tol = tol.loss_abs, loss_ratio = 0, grad_ratio = 0;
        for (int s = 0; s < done; s++) {
            double rel = fabs((double)res.losses[s] - ref_loss[s]) / fabs(ref_loss[s]);
            if (!(rel / loss_tol[s] <= loss_ratio)) loss_ratio = rel / loss_tol[s], worst_l = rel, worst_tol = loss_tol[s];
            if (!(worst[s] / tol.grad <= grad_ratio)) grad_ratio = worst[s] / tol.grad;
            char bat[32] = "";
            if (o.batch_rampup) snprintf(bat, sizeof bat, " (batch %d)", td_batch_at(&o.ch.rampup, o.batch, s));
            printf("  step %d%s: loss %.7f, one process %.7f, relative difference %.2e (tolerance %.2g); largest "
                   "gradient error %.2e of its tensor's max (%s)\n",
                   s, bat, res.losses[s], ref_loss[s], rel, loss_tol[s], worst[s], c->rows[wrow[s] >= 0 ? (int)wrow[s] : 0].name);
        }
        if (!(loss_ratio <= 1)) fails = 1;
        if (unseen) {
            int row = 0;
            for (int i = 0; i < c->n_rows; i++)
                if (c->rows[i].offset <= first_unseen) row = i;
            printf("verify: %zu gradient elements were compared by no rank (first in %s)\n", unseen, c->rows[row].name);
            fails = 1;
        }
        if (key > -1e30f) {
            int k = (int)-key, step = k / c->n_rows, row = k % c->n_rows;
            int r = first_rank, t_ = r % tp, c_ = (r / tp) % cp, d_ = (r / (tp * cp)) % dp, p_ = r / (tp * cp * dp);
            char cpw[32] = "";
            if (cp > 1) snprintf(cpw, sizeof cpw, ", cp %d", c_);
            printf("verify: first gradient mismatch at step %d in %s on rank %d (dp %d, pp %d, tp %d%s): "
                   "element %lld is %.6g, one process %.6g (tolerance %.2g of the tensor's max)\n",
                   step, c->rows[row].name, r, d_, p_, t_, cpw, (long long)detail[0], detail[1], detail[2], tol.grad);
            fails = 1;
        }
        if (!ps) {
            static const char *sec[3] = {"parameter", "AdamW m", "AdamW v"};
            if (sc.bad) {
                printf("verify: the update differs: %lld of %lld state elements beyond the tolerance (the largest %.3g "
                       "of it); first at step %d, %s of %s element %lld: %.9g, one process %.9g (applying the "
                       "layout's gradient)\n",
                       sc.bad, sc.n, sc.ratio, sc.first_step, sec[sc.sec], c->rows[sc.row].name, sc.elem, sc.x,
                       sc.ref);
                fails = 1;
            } else
                printf("verify: the update matches: %lld parameter and moment elements after the steps, the largest "
                       "difference %.3g of its tolerance\n", sc.n, sc.ratio);
        } else
            printf("verify: parameter servers: each step against the oracle's own trajectory (no step boundary to "
                   "share the state at)\n");
        if (moe && !ps) {
            verify_routes *rt = &v.routes;
            double share = rt->routings ? (double)rt->ties / rt->routings : 0.0;
            printf("verify: routing: %zu token routings, %zu near ties (top-k margin below %.2g in either run): %zu "
                   "routed alike, %zu apart and replayed (share %.2g of the routings, at most %.2g); %zu routed apart "
                   "beyond the margin\n",
                   rt->routings, rt->near, tol.tie, rt->near - rt->ties, rt->ties, share, tol.tie_share, rt->differ);
            if (rt->near) printf("verify: routing: the closest near tie: %s\n", rt->closest);
            if (rt->differ > 0 || share > tol.tie_share) fails = 1;
        }
        printf("verify: %s: largest relative loss difference %.2e (tolerance %.2g); largest gradient error %.3g "
               "and loss difference %.3g of their tolerances%s\n", fails ? "FAILED" : "passed", worst_l, worst_tol,
               grad_ratio, loss_ratio, fails ? "" : "; every reduced gradient matches");
        fflush(stdout);
    }
    td_train_result_free(&res);
    td_free(ref_loss), td_free(loss_tol), td_free(worst), td_free(worst_row), td_free(mine), td_free(wrow);
    td_free(v.lay), td_free(v.seen), td_free(v.start), td_free(v.S), td_free(v.prev);
    td_free(v.owner), td_free(v.lay_all), td_free(v.ref), td_free(v.ref_max);
    free(v.routes.r);
    verify_oracle_close(&orc);
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_MAX);
    return f > 0 ? 1 : 0;
}
