/* A run's steps (run.h): one optimizer step, evaluation and what happens
 * between steps. No layout branch: the engine and the strategy chose. */
#include <math.h>
#include <string.h>

#include "ckpt_run.h"
#include "moe_run.h"
#include "run.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/fault.h"
#include "trident/moe.h"
#include "trident/timeline.h"

/* The stop of a run whose update at bad_step had a non-finite gradient
 * norm: the message names the first tensor (table row) holding one. */
static void stop_on_gradient(td_run_result *res, const td_param_table *t, int bad_step, int bad_row,
                             const char *norm_is) {
    res->stop_step = bad_step;
    snprintf(res->stop_msg, sizeof res->stop_msg,
             "step %d: the gradient norm is %s; first non-finite gradient in %s", bad_step, norm_is,
             bad_row >= 0 && bad_row < t->n_rows ? t->rows[bad_row].name : "no tensor (the norm overflowed)");
}

/* A skipped step (dynamic loss scaling) that ends the run: stop_msg says why. */
static void stop_on_scale(td_run_result *res, const td_loss_scaler *s, int why, int step,
                          const char *where) {
    res->stop_step = step;
    if (why == TD_LOSS_SCALE_BELOW_ONE)
        snprintf(res->stop_msg, sizeof res->stop_msg,
                 "step %d: the loss scale fell below 1 (%g) on a non-finite gradient (%s): the "
                 "gradient overflows unscaled", step, (double)s->scale, where);
    else
        snprintf(res->stop_msg, sizeof res->stop_msg,
                 "step %d: %d steps in a row skipped on a non-finite gradient (the last: %s); "
                 "loss scale now %g", step, s->consecutive, where, (double)s->scale);
}

/* The step's global numbers, the same on every training rank: the loss's
 * sum, and where a non-finite update was found. Parameter servers tell
 * each worker at its next pull, which with staleness need not be the same
 * step for all, so the sum spreads it (a count, then the sums of step and
 * row: small integers, exact in float). Returns the mean token loss. */
static float reduce_step(td_run *r, double tokens, double loss_sum, int *bad_step, int *bad_row, int *any_bad) {
    const td_grid *g = &r->g;
    int known = (*bad_row = td_dp_nonfinite(r->dp, bad_step)) >= 0;
    float red[4] = {(float)loss_sum, (float)known, known ? (float)*bad_step : 0.0f,
                    known ? (float)*bad_row : 0.0f};
    if (td_grid_grad_ranks(g) > 1) td_allreduce(g->grad_comm, red, 4, TD_F32, TD_SUM);
    if (r->loss_group) td_allreduce(r->loss_group, red, 4, TD_F32, TD_SUM); /* the last stage's loss */
    *any_bad = red[1] > 0;
    if (*any_bad) *bad_step = (int)(red[2] / red[1]), *bad_row = (int)(red[3] / red[1]);
    return td_grid_grad_ranks(g) > 1 || r->loss_group
               ? red[0] / (float)tokens
               : (float)(loss_sum / tokens);
}

/* Forward-backward and update of `step` (test faults: nan-grad; grad-inf
 * at the step's first attempt, since a skipped step is retried,
 * grad-inf-stuck at every one); returns this rank's loss sum and sets
 * *norm. */
static double train_step(td_run *r, int step, double tokens, double all, float lr, double *norm) {
    const td_grid *g = &r->g;
    td_dp *dp = r->dp;
    td_dp_begin_step(dp, step);
    td_gpt_params_changed(&r->model); /* a pull (ps) or the last step's update */
    td_tp_comm_reset(&r->tpc);
    if (r->ring) td_cp_ring_reset_stats(r->ring);
    if (step == r->spec->schedule.timing_skip && r->engine->timing_reset)
        r->engine->timing_reset(&r->ec);
    if (step == r->spec->schedule.timing_skip)
        td_gpt_gemm_stats(NULL, NULL, 1); /* GEMMs of timed steps */
    int nan_f = td_fault_at(TD_FAULT_NAN_GRAD, step, g->world_rank);
    int inf_f = td_fault_at(TD_FAULT_GRAD_INF_STUCK, step, g->world_rank) ||
                (td_fault_at(TD_FAULT_GRAD_INF, step, g->world_rank) && r->scaler.consecutive == 0);
    const td_param *frow = nan_f || inf_f ? td_param_find(&r->table, TD_FAULT_GRAD_TENSOR) : NULL;
    TD_ASSERT(!(nan_f || inf_f) || frow);
    /* loss scaling: dloss scaled here, the gradients unscaled in the step pipeline */
    td_dp_set_loss_scale(dp, r->scaler.scale);
    float dloss = 1.0f / (float)tokens * r->scaler.scale; /* global mean over the targets with loss */
    td_grad_watch_begin(&r->watch, frow != NULL);
    r->watch.fault_value = nan_f ? NAN : INFINITY;
    td_run_moe_begin(r);
    /* --eod-mask-loss: the aux and z losses keep every token as divisor
     * (Megatron-LM's), the token loss the kept targets: weigh them by
     * tokens / all in the gradient and in the sum divided by tokens */
    float aux_w = (float)(tokens / all);
    if (r->cfg.moe.E > 0 && !g->is_server) td_gpt_set_aux_weight(&r->model, aux_w);
    double loss_sum = r->engine->train_step(&r->ec, step, dloss, &r->watch, frow);
    td_grad_watch_end(&r->watch);
    *norm = td_dp_finish_step(dp, step, lr);
    loss_sum += td_run_moe_end(r, step) * aux_w; /* the aux and z losses (after the step: the bias moves) */
    td_gpt_params_changed(&r->model); /* eval and the next step see the update */
    uint64_t gsent, gdense;
    td_dp_grad_traffic(dp, &gsent, &gdense);
    r->grad_sent += (double)gsent, r->grad_dense += (double)gdense;
    td_muon_traffic(&r->res->muon_sent_bytes, &r->res->muon_formula_bytes);
    memcpy(r->res->tp_measured.calls, r->tpc.calls, sizeof r->tpc.calls);
    memcpy(r->res->tp_measured.bytes, r->tpc.bytes, sizeof r->tpc.bytes);
    if (r->ring) {
        td_cp_stats cs = td_cp_ring_stats(r->ring);
        r->res->cp_sent_bytes = cs.bytes_sent, r->res->cp_pairs = cs.pairs, r->res->cp_skipped = cs.skipped;
        r->res->cp_wait_ms = cs.wait_ms; /* td_run_step adds it to the timed sum */
    }
    if (td_fault_at(TD_FAULT_NAN_LOSS, step, g->world_rank)) loss_sum = NAN;
    return loss_sum;
}

/* Dynamic loss scaling: every rank agreed on the overflow, so every rank
 * skips the step (nothing was applied), halves the scale and runs the same
 * step again: neither the step count, the lr schedule nor AdamW's t
 * advance. */
static td_run_status skip_step(td_run *r, int step, int bad_row) {
    td_run_result *res = r->res;
    td_loss_scaler *s = &r->scaler;
    float before = s->scale;
    int why = td_loss_scaler_update(s, 1);
    td_grad_watch_origin(&r->watch, &r->g, bad_row, &res->skip_rank, &res->skip_micro);
    res->skipped_steps = s->skipped, res->skip_row = bad_row;
    char where[320];
    snprintf(where, sizeof where, "first non-finite gradient in %s, rank %d, micro-batch %d",
             bad_row >= 0 && bad_row < r->table.n_rows ? r->table.rows[bad_row].name : "no tensor (the norm overflowed)",
             res->skip_rank, res->skip_micro);
    td_report_skip(&r->rep, step, where, res, before, s->scale);
    if (why == TD_LOSS_SCALE_OK) return TD_RUN_RETRY;
    stop_on_scale(res, s, why, step, where);
    td_dp_stop(r->dp, step);
    return TD_RUN_STOP;
}

/* trident verify's step_state (run_spec.h): the state the step starts from,
 * gathered as keep_state does, before the step's first communication. */
static void step_state(td_run *r, int step) {
    const td_run_hooks *h = &r->spec->hooks;
    size_t n = r->canon.numel;
    TD_ASSERT(r->spec->layout.dp_mode != TD_DP_PS);
    float *s = r->g.world_rank == 0 ? td_alloc(3 * n * sizeof(float), TD_MEM_OTHER) : NULL;
    td_dp_gather_state(r->dp, &r->canon, s, s ? s + n : NULL, s ? s + 2 * n : NULL);
    h->step_state(h->step_state_ctx, step, r->g.axis[TD_DP].rank, s, s ? s + n : NULL, s ? s + 2 * n : NULL);
    td_free(s);
}

td_run_status td_run_step(td_run *r, int step) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    if (spec->hooks.step_state) step_state(r, step);
    double t0 = td_now_ms(), norm;
    float lr = td_lr_at(&spec->optim, step);
    /* --batch-rampup: this step's batch in micro-batches of the full
     * batch's size (the rules table's rampup-divides row), so only their
     * count per replica changes; evaluation keeps the full batch's */
    int batch = td_batch_at(&spec->schedule.rampup, spec->schedule.batch, step);
    int full_Bl = r->ec.Bl, full_K = r->ec.K;
    r->ec.Bl = batch / r->g.axis[TD_DP].size, r->ec.K = r->ec.Bl / r->ec.Bm;
    TD_ASSERT(r->ec.K >= 1 && r->ec.K * r->ec.Bm * r->g.axis[TD_DP].size == batch);
    td_dev_traffic_reset(); /* the step's named host copies, counted from here */
    double tokens = td_engine_targets(&r->ec, 0, step, batch);
    double loss_sum = train_step(r, step, tokens, (double)batch * spec->model.cfg.T, lr, &norm);
    r->ec.Bl = full_Bl, r->ec.K = full_K;
    int bad_step, bad_row, any_bad;
    float loss = reduce_step(r, tokens, loss_sum, &bad_step, &bad_row, &any_bad);
    td_dev_traffic(&res->host_traffic);
    r->rep.traffic = res->host_traffic;
    double ms = td_now_ms() - t0;
    if (step - r->first >= spec->schedule.timing_skip ||
        spec->schedule.steps - r->first <= spec->schedule.timing_skip) {
        r->timed_ms += ms;
        r->cp_wait_ms += res->cp_wait_ms;
    }
    if (any_bad && isfinite(loss) && td_loss_scaler_skips(&r->scaler)) return skip_step(r, step, bad_row);
    res->losses[step] = loss;
    res->grad_norms[step] = (float)norm;
    res->steps_done = step + 1;
    r->rep.loss_scale = r->scaler.mode != TD_LOSS_SCALE_NONE ? r->scaler.scale : 0.0f;
    r->rep.step_batch = spec->schedule.rampup.start > 0 ? batch : 0;
    td_report_step(&r->rep, step, loss, lr, norm, ms);
    /* a non-finite loss or gradient norm stops every rank at this step
     * (all agree: the loss and the norm are global), before any save */
    if (!isfinite(loss) || any_bad) {
        if (!isfinite(loss)) {
            res->stop_step = step;
            snprintf(res->stop_msg, sizeof res->stop_msg, "step %d: the loss is %s", step, isnan(loss) ? "nan" : "inf");
        } else
            stop_on_gradient(res, &r->table, bad_step, bad_row, isnan(norm) ? "nan" : isinf(norm) ? "inf" : "not finite");
        td_dp_stop(r->dp, step);
        return TD_RUN_STOP;
    }
    /* --max-loss: a finite loss too high for too long stops every rank
     * (the loss is global) with a checkpoint of this step */
    if (td_divergence_step(&r->div, step, loss, res->stop_msg, sizeof res->stop_msg)) {
        res->stop_step = step;
        if (r->agreed_stops && spec->output.out) {
            td_run_save(r, step + 1, 0);
            res->stop_saved = step + 1;
        }
        td_dp_stop(r->dp, step);
        return TD_RUN_STOP;
    }
    td_loss_scaler_update(&r->scaler, 0); /* a clean step: growth after the window */
    if (step == 0 && r->agreed_stops) td_report_memory(&r->rep, &r->plan, 1);
    if (step == 0) td_report_gemm_impl(&r->rep); /* the primitives exist now */
    return TD_RUN_NEXT;
}

int td_run_eval_due(const td_run *r, int step) {
    const td_run_spec *spec = r->spec;
    return spec->schedule.eval_every > 0 &&
           ((step + 1) % spec->schedule.eval_every == 0 || step == spec->schedule.steps - 1);
}

/* Mean validation loss over eval_iters global batches (every token once). */
static double evaluate(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_engine_ctx *c = &r->ec;
    td_dp_set_training(c->dp, 0);
    double sum = 0.0;
    for (int it = 0; it < spec->schedule.eval_iters; it++) sum += r->engine->eval_batch(c, it);
    td_dp_set_training(c->dp, 1);
    float s = (float)sum; /* float sum of per-rank sums: the order is fixed */
    double total = sum;
    if (td_grid_grad_ranks(&r->g) > 1) {
        td_allreduce(r->g.grad_comm, &s, 1, TD_F32, TD_SUM);
        total = s;
    }
    if (r->loss_group) { /* only the stage that holds the loss has a sum that is not 0 */
        td_allreduce(r->loss_group, &s, 1, TD_F32, TD_SUM);
        total = s;
    }
    double tokens = 0.0; /* --eod-mask-loss: the targets with loss */
    for (int it = 0; it < spec->schedule.eval_iters; it++) tokens += td_engine_targets(c, 1, it, spec->schedule.batch);
    return total / tokens;
}

void td_run_eval(td_run *r, int step) {
    td_dp_begin_eval(r->dp, step + 1); /* the parameters after this step's update */
    double t = td_timeline_mark_start();
    double vl = evaluate(r);
    td_timeline_mark("eval", "eval", -1, t);
    td_report_eval(&r->rep, step, vl);
    if (step == r->spec->schedule.steps - 1) r->res->final_val_loss = vl;
}

int td_run_boundary(td_run *r, int step) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    int last = step == spec->schedule.steps - 1, saved = 0;
    if (spec->output.out && spec->output.save_every > 0 &&
        (step + 1) % spec->output.save_every == 0 && !last) {
        if (!td_dp_save_begin(r->dp, step + 1)) { /* parameter servers had stopped on a non-finite update */
            int bad_step, bad_row = td_dp_nonfinite(r->dp, &bad_step);
            stop_on_gradient(res, &r->table, bad_step, bad_row, "not finite");
            td_dp_stop(r->dp, step);
            return 1;
        }
        td_run_save(r, step + 1, 0);
        saved = 1;
    }
    /* --stop-after, a stop signal or a failed --log write on any rank: a
     * checkpoint at this step boundary (with --out), then the run ends as
     * planned runs do */
    int stoppable = !last && r->agreed_stops;
    int why = stoppable ? td_stop_agreed(&r->g, td_report_log_error(&r->rep)) : 0;
    if (why ||
        (stoppable && spec->schedule.stop_after > 0 && step + 1 == spec->schedule.stop_after)) {
        if (!saved && spec->output.out) td_run_save(r, step + 1, 0);
        res->stopped_after = step + 1;
        res->io_failed = (why & TD_STOP_IO) != 0;
        return 1;
    }
    return 0;
}
