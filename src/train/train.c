/* The training loop: every layout runs this same code; the strategy (dp.c)
 * decides where state lives and how gradients move. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auto.h"
#include "ckpt_run.h"
#include "divergence.h"
#include "engine.h"
#include "grad_watch.h"
#include "layout_pass.h"
#include "mem_plan.h"
#include "preflight.h"
#include "report.h"
#include "trace_file.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/fault.h"
#include "trident/kernels.h"
#include "trident/loss_scale.h"
#include "trident/out_lock.h"
#include "trident/pipeline.h"
#include "trident/stop.h"
#include "trident/timeline.h"
#include "trident/train.h"

/* Default threads: the cores of this node shared by the ranks on it. */
static int default_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = (int)(cores / td_local_ranks()); /* counted at td_comm_init */
    return t > 0 ? t : 1;
}

/* Per-replica batch split; a global batch that does not divide is a clear
 * error listing sizes that would work. */
static void split_batch(const td_train_opts *o, int D, int *Bl, int *Bm) {
    long long unit = (long long)D * o->grad_accum; /* in int, dp x K could wrap */
    TD_CHECK(o->batch % unit == 0,
             "--batch %d does not split over %d data-parallel replicas x %d micro-batches; "
             "use a multiple of %lld (e.g. %lld or %lld)",
             o->batch, D, o->grad_accum, unit, unit * (o->batch / unit > 0 ? o->batch / unit : 1),
             unit * (o->batch / unit + 1));
    *Bl = o->batch / D;
    *Bm = *Bl / o->grad_accum;
}

/* The stop of a run whose update at bad_step had a non-finite gradient
 * norm: the message names the first tensor (table row) holding one. */
static void stop_on_gradient(td_train_result *res, const td_param_table *t, int bad_step, int bad_row,
                             const char *norm_is) {
    res->stop_step = bad_step;
    snprintf(res->stop_msg, sizeof res->stop_msg,
             "step %d: the gradient norm is %s; first non-finite gradient in %s", bad_step, norm_is,
             bad_row >= 0 && bad_row < t->n_rows ? t->rows[bad_row].name : "no tensor (the norm overflowed)");
}

/* --loss-scale: the scaler (the layouts it does not combine with are rows
 * of the rules table, checked before). */
static void loss_scale_setup(const td_train_opts *o, td_loss_scaler *s) {
    td_loss_scale_mode m = o->ch.loss_scale;
    float init = o->ch.loss_scale_static;
    if (m == TD_LOSS_SCALE_DYNAMIC) init = o->loss_scale_init > 0 ? o->loss_scale_init : TD_LOSS_SCALE_INIT;
    int window = o->loss_scale_window > 0 ? o->loss_scale_window : td_loss_scale_window_env();
    td_loss_scaler_init(s, m, init, window);
}

/* A skipped step (dynamic loss scaling) that ends the run: stop_msg says why. */
static void stop_on_scale(td_train_result *res, const td_loss_scaler *s, int why, int step,
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

/* Mean validation loss over eval_iters global batches (every token once). */
static double evaluate(td_engine_ctx *c, const td_engine *e) {
    const td_train_opts *o = c->o;
    td_dp_set_training(c->dp, 0);
    double sum = 0.0;
    for (int it = 0; it < o->eval_iters; it++) sum += e->eval_batch(c, it);
    td_dp_set_training(c->dp, 1);
    float s = (float)sum; /* float sum of per-rank sums: the order is fixed */
    double total = sum;
    if (c->g->axis[TD_DP].size > 1) {
        td_allreduce(c->g->grad_comm, &s, 1, TD_F32, TD_SUM);
        total = s;
    }
    td_comm *lg = e->loss_group(c);
    if (lg) { /* only the stage that holds the loss has a sum that is not 0 */
        td_allreduce(lg, &s, 1, TD_F32, TD_SUM);
        total = s;
    }
    return total / ((double)o->eval_iters * o->batch * c->o->seq);
}

void td_train_run(const td_train_opts *o, td_train_result *res, int keep_state) {
    /* the choice strings are read as parsed: one set by hand needs
     * td_train_opts_choices again */
    TD_ASSERT(td_train_choices_current(o));
    memset(res, 0, sizeof *res);
    td_mem_reset_peaks(); /* the peaks reported are this run's (tests run several in one process) */
    res->final_val_loss = NAN;
    res->stop_step = -1;
    res->skip_row = res->skip_rank = res->skip_micro = -1;
    const td_fault *fault = td_fault_get(); /* a bad TRIDENT_FAULT fails before any work */
    td_dp_mode mode = td_train_dp_mode(o);
    if (mode == TD_DP_PS) td_stop_signals_restore(); /* its servers never reach an agreed stop */
    /* the rules table's rows of the run's start: ps against its servers, tp,
     * pp, loss scaling and checkpoints; loss scaling against top-k's error
     * feedback */
    td_compat_cfg cc;
    td_train_compat_cfg(o, &cc);
    td_compat_check(&cc, TD_COMPAT_AT_RUN);
    td_loss_scaler scaler;
    loss_scale_setup(o, &scaler);
    if (o->pp > 1) td_pipeline_check(o); /* a schedule or split that cannot work, before any communication */
    td_grid g;
    td_log_set_verbose(o->verbose);
    td_grid_spec gs = {.size = {[TD_TP] = o->tp, [TD_CP] = 1, [TD_DP] = o->dp, [TD_PP] = o->pp},
                       .order = o->grid_order,
                       .n_servers = mode == TD_DP_PS ? o->ps_servers : 0};
    td_grid_create(&g, &gs);
    td_comm_set_timeout(o->comm_timeout);
    td_comm_set_heartbeat_timeout(o->heartbeat_timeout);
    if (o->piece_mb > 0) td_comm_set_piece_bytes((size_t)(o->piece_mb * 1048576.0));
    int threads = o->threads > 0 ? o->threads : default_threads();
    td_kernels_set_threads(threads);

    td_dataset data;
    td_data_load(&data, o->data, o->tokenizer, o->vocab, o->seq);
    td_run_set_data(o->data, &data.fp);
    td_fault_slow_load();
    /* start-up's first agreed stop point: nothing is written yet */
    if (mode != TD_DP_PS && td_stop_agreed(&g, 0)) {
        res->stopped_startup = 1;
        td_data_free(&data);
        td_grid_destroy(&g);
        return;
    }
    td_gpt_config cfg = {o->layers, o->heads, o->embd, o->seq, data.tok.V, 0};
    td_gpt_config_finish(&cfg);
    td_gpt_check_tp(&cfg, g.axis[TD_TP].size, o->seq_parallel);
    int Bl, Bm;
    split_batch(o, g.axis[TD_DP].size, &Bl, &Bm);
    /* pipeline: the schedule and the blocks of each stage, checked before
     * any allocation or communication */
    int piped = g.axis[TD_PP].size > 1;
    td_schedule sched;
    td_pp_split split;
    unsigned char held[TD_MAX_LAYERS + 2];
    memset(&sched, 0, sizeof sched);
    if (piped) {
        td_pipeline_setup(o, &g, &cfg, Bm, &sched, &split);
        td_pp_held_units(&split, cfg.L, g.axis[TD_PP].rank, held);
    }

    td_dp_config dcfg = td_train_dp_config(o, mode);
    td_layout lay = td_layout_of_grid(&g);
    td_param_table table, canon;
    td_mem_plan plan =
        td_train_mem_plan(o, &dcfg, &cfg, &lay, g.axis[TD_TP].rank, piped ? held : NULL,
                          piped ? &split : NULL, &sched, g.axis[TD_PP].rank, Bm, &table);
    td_param_table_build(&canon, &cfg, 1);
    /* every check that needs no model, before the model is allocated */
    td_preflight_result pf = td_preflight(o, &g, &cfg, &data, &plan, Bm);
    td_run_id_start(&g);

    td_gpt model;
    memset(&model, 0, sizeof model);
    td_tp_comm tpc;
    td_tp_comm_init(&tpc, &g);
    if (!g.is_server) {
        if (piped)
            td_gpt_create_stage_rc(&model, &table, Bm, o->seq_parallel, td_train_recompute(o));
        else
            td_gpt_create_rc(&model, &table, Bm, o->seq_parallel, td_train_recompute(o));
        model.comm = td_tp_comm_ops(&tpc);
        td_gpt_gemm_stats_enable(o->gemm_stats);
    }
    td_dp *dp = td_dp_create(&dcfg, &g, &table, g.is_server ? NULL : &model);
    td_pp *pp = piped ? td_pp_create(&g, &model, dp, &sched, &split) : NULL;
    td_fault_slow_load();
    TD_CHECK(fault->kind == TD_FAULT_NONE || fault->kind == TD_FAULT_SAVE_FAIL ||
                 fault->kind == TD_FAULT_SKIP_EMBED_SUM || fault->kind == TD_FAULT_SLOW_LOAD ||
                 fault->rank < td_grid_workers(&g),
             "TRIDENT_FAULT: rank %d is not a training rank (0..%d)", fault->rank,
             td_grid_workers(&g) - 1);

    td_run run = {o, &g, &data, &cfg, &table, &canon, &plan, dp, &scaler, res};
    td_report rep;
    td_report_open(&rep, o, &g, &cfg, &table, &data, threads, Bm);
    rep.baseline = pf;
    td_report_precision(&rep, &plan);
    td_report_memory(&rep, &plan, 0);

    if (o->trace) { /* the epochs of all lanes at one barrier */
        td_barrier(g.world);
        td_trace_file_start(&g);
    }
    res->losses = td_alloc(sizeof(float) * o->steps, TD_MEM_OTHER);
    res->grad_norms = td_alloc(sizeof(float) * o->steps, TD_MEM_OTHER);
    if (g.is_server) {
        td_dp_serve(dp, o->steps);
    } else {
        int T = o->seq, N = Bm * T;
        int *in = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
        td_engine_ctx c = {o, &g, &data, &model, dp, pp, Bl, Bm, o->grad_accum, in, tg};
        const td_engine *engine = td_engine_for(&c); /* chosen once: no layout branch in the loop */
        td_comm *loss_group = engine->loss_group(&c);
        float dloss = 1.0f / ((float)o->batch * T); /* global mean over all tokens */
        td_grad_watch watch;
        td_grad_watch_init(&watch, &model, td_loss_scaler_skips(&scaler));
        double timed_ms = 0.0, grad_sent = 0.0, grad_dense = 0.0;
        int first = td_run_resume(&run), n_timed = 0;
        res->steps_done = first;
        int stoppable = mode != TD_DP_PS; /* a stop saves into --out, if given */
        /* start-up's last agreed stop point (a --log write may have failed
         * already): nothing trained, nothing saved */
        int agreed = stoppable ? td_stop_agreed(&g, td_report_log_error(&rep)) : 0;
        if (agreed) res->stopped_startup = 2, res->io_failed = (agreed & TD_STOP_IO) != 0;
        /* --overwrite: every check passed; the old checkpoints go before the first save */
        if (!agreed && o->overwrite && g.world_rank == 0) {
            int n = td_out_clear(o->out);
            if (n > 0) td_log("--overwrite: removed %d step director%s and latest from %s\n", n, n == 1 ? "y" : "ies", o->out);
        }
        td_divergence div;
        td_divergence_init(&div, o->max_loss, o->optim.warmup);
        /* --stop-after at the resumed step: the checkpoint saved again in
         * this layout, no step trained (a checkpoint converted) */
        int resaved = !agreed && o->resume && stoppable && o->stop_after > 0 && o->stop_after == first;
        if (resaved) {
            td_run_save(&run, first, 0);
            res->stopped_after = first;
        }
        if (o->layout_pass && !agreed) { /* trident eval: the loaded checkpoint's forward passes, no training */
            td_layout_pass lp = {&g, &data, &model, dp, pp, Bl, Bm, c.K, T};
            o->layout_pass(o->layout_pass_ctx, &lp);
        }
        for (int step = first; step < o->steps && !resaved && !agreed && !o->layout_pass; step++) {
            double t0 = td_now_ms();
            float lr = td_lr_at(&o->optim, step);
            td_dp_begin_step(dp, step);
            td_gpt_params_changed(&model); /* a pull (ps) or the last step's update */
            td_tp_comm_reset(&tpc);
            if (step == o->timing_skip && engine->timing_reset) engine->timing_reset(&c);
            if (step == o->timing_skip) td_gpt_gemm_stats(NULL, NULL, 1); /* GEMMs of timed steps */
            double loss_sum = 0.0;
            /* test faults: nan-grad; grad-inf at the step's first attempt
             * (a skipped step is retried), grad-inf-stuck at every one */
            int nan_f = td_fault_at(TD_FAULT_NAN_GRAD, step, g.world_rank);
            int inf_f = td_fault_at(TD_FAULT_GRAD_INF_STUCK, step, g.world_rank) ||
                        (td_fault_at(TD_FAULT_GRAD_INF, step, g.world_rank) && scaler.consecutive == 0);
            const td_param *frow = nan_f || inf_f ? td_param_find(&table, TD_FAULT_GRAD_TENSOR) : NULL;
            TD_ASSERT(!(nan_f || inf_f) || frow);
            /* loss scaling: dloss scaled here, the gradients unscaled in the step pipeline */
            td_dp_set_loss_scale(dp, scaler.scale);
            float dloss_s = dloss * scaler.scale;
            td_grad_watch_begin(&watch, frow != NULL);
            watch.fault_value = nan_f ? NAN : INFINITY;
            loss_sum = engine->train_step(&c, step, dloss_s, &watch, frow);
            td_grad_watch_end(&watch);
            double norm = td_dp_finish_step(dp, step, lr);
            td_gpt_params_changed(&model); /* eval and the next step see the update */
            uint64_t gsent, gdense;
            td_dp_grad_traffic(dp, &gsent, &gdense);
            grad_sent += (double)gsent, grad_dense += (double)gdense;
            memcpy(res->tp_measured.calls, tpc.calls, sizeof tpc.calls);
            memcpy(res->tp_measured.bytes, tpc.bytes, sizeof tpc.bytes);
            if (td_fault_at(TD_FAULT_NAN_LOSS, step, g.world_rank)) loss_sum = NAN;
            /* the loss's sum also spreads a non-finite update: parameter
             * servers tell each worker at its next pull, which with
             * staleness need not be the same step for all (a count, then the
             * sums of step and row: small integers, exact in float) */
            int bad_step, bad_row = td_dp_nonfinite(dp, &bad_step), known = bad_row >= 0;
            float red[4] = {(float)loss_sum, (float)known, known ? (float)bad_step : 0.0f,
                            known ? (float)bad_row : 0.0f};
            if (g.axis[TD_DP].size > 1) td_allreduce(g.grad_comm, red, 4, TD_F32, TD_SUM);
            if (loss_group)
                td_allreduce(loss_group, red, 4, TD_F32, TD_SUM); /* the last stage's loss */
            if (red[1] > 0) bad_step = (int)(red[2] / red[1]), bad_row = (int)(red[3] / red[1]);
            float loss = g.axis[TD_DP].size > 1 || loss_group
                             ? red[0] / ((float)o->batch * T)
                             : (float)(loss_sum / ((double)o->batch * T));
            double ms = td_now_ms() - t0;
            if (step - first >= o->timing_skip || o->steps - first <= o->timing_skip) timed_ms += ms;
            if (red[1] > 0 && isfinite(loss) && td_loss_scaler_skips(&scaler)) {
                /* dynamic loss scaling: every rank agreed on the overflow, so
                 * every rank skips the step (nothing was applied), halves the
                 * scale and runs the same step again: neither the step count,
                 * the lr schedule nor AdamW's t advance */
                float before = scaler.scale;
                int why = td_loss_scaler_update(&scaler, 1);
                td_grad_watch_origin(&watch, &g, bad_row, &res->skip_rank, &res->skip_micro);
                res->skipped_steps = scaler.skipped, res->skip_row = bad_row;
                char where[320];
                snprintf(where, sizeof where, "first non-finite gradient in %s, rank %d, micro-batch %d",
                         bad_row >= 0 && bad_row < table.n_rows ? table.rows[bad_row].name : "no tensor (the norm overflowed)",
                         res->skip_rank, res->skip_micro);
                td_report_skip(&rep, step, where, res->skip_row, res->skip_rank, res->skip_micro, before,
                               scaler.scale, scaler.skipped);
                if (why != TD_LOSS_SCALE_OK) {
                    stop_on_scale(res, &scaler, why, step, where);
                    td_dp_stop(dp, step);
                    break;
                }
                step--; /* the loop's step++ brings the same step back */
                continue;
            }
            res->losses[step] = loss;
            res->grad_norms[step] = (float)norm;
            res->steps_done = step + 1;
            rep.loss_scale = scaler.mode != TD_LOSS_SCALE_NONE ? scaler.scale : 0.0f;
            td_report_step(&rep, step, loss, lr, norm, ms);
            /* a non-finite loss or gradient norm stops every rank at this step
             * (all agree: the loss and the norm are global), before any save */
            if (!isfinite(loss) || red[1] > 0) {
                if (!isfinite(loss)) {
                    res->stop_step = step;
                    snprintf(res->stop_msg, sizeof res->stop_msg, "step %d: the loss is %s", step,
                             isnan(loss) ? "nan" : "inf");
                } else
                    stop_on_gradient(res, &table, bad_step, bad_row,
                                     isnan(norm) ? "nan" : isinf(norm) ? "inf" : "not finite");
                td_dp_stop(dp, step);
                break;
            }
            /* --max-loss: a finite loss too high for too long stops every
             * rank (the loss is global) with a checkpoint of this step */
            if (td_divergence_step(&div, step, loss, res->stop_msg, sizeof res->stop_msg)) {
                res->stop_step = step;
                if (stoppable && o->out) {
                    td_run_save(&run, step + 1, 0);
                    res->stop_saved = step + 1;
                }
                td_dp_stop(dp, step);
                break;
            }
            td_loss_scaler_update(&scaler, 0); /* a clean step: growth after the window */
            if (step == 0 && mode != TD_DP_PS) td_report_memory(&rep, &plan, 1);
            if (step == 0) td_report_gemm_impl(&rep); /* the primitives exist now */
            int last = step == o->steps - 1;
            if (o->eval_every > 0 && ((step + 1) % o->eval_every == 0 || last)) {
                if (mode == TD_DP_PS) td_dp_begin_step(dp, step + 1); /* pull the fresh weights */
                double t = td_timeline_mark_start();
                double vl = evaluate(&c, engine);
                td_timeline_mark("eval", "eval", -1, t);
                td_report_eval(&rep, step, vl);
                if (last) res->final_val_loss = vl;
            }
            int saved = 0;
            if (o->out && o->save_every > 0 && (step + 1) % o->save_every == 0 && !last) {
                /* parameter servers are asked from inside their loop; world
                 * rank 0 may learn there that they stopped on a non-finite
                 * update, and tells the other workers */
                float f[3] = {0.0f, 0.0f, 0.0f};
                if (!td_dp_save_begin(dp, step + 1)) f[0] = 1.0f, bad_row = td_dp_nonfinite(dp, &bad_step);
                if (f[0] > 0) f[1] = (float)bad_step, f[2] = (float)bad_row;
                if (mode == TD_DP_PS && g.axis[TD_DP].size > 1)
                    td_allreduce(g.grad_comm, f, 3, TD_F32, TD_SUM);
                if (f[0] > 0) {
                    stop_on_gradient(res, &table, (int)f[1], (int)f[2], "not finite");
                    td_dp_stop(dp, step);
                    break;
                }
                td_run_save(&run, step + 1, 0);
                saved = 1;
            }
            /* --stop-after, a stop signal or a failed --log write on any
             * rank: a checkpoint at this step boundary (with --out), then the
             * run ends as planned runs do */
            int why = !last && stoppable ? td_stop_agreed(&g, td_report_log_error(&rep)) : 0;
            if (why || (!last && stoppable && o->stop_after > 0 && step + 1 == o->stop_after)) {
                if (!saved && o->out) td_run_save(&run, step + 1, 0);
                res->stopped_after = step + 1;
                res->io_failed = (why & TD_STOP_IO) != 0;
                break;
            }
        }
        /* the steps this process ran (a resumed or stopped run: fewer),
         * less the leading ones left out */
        int ran = res->steps_done - first;
        n_timed = ran > o->timing_skip ? ran - o->timing_skip : ran;
        res->step_ms = n_timed > 0 ? timed_ms / n_timed : 0.0;
        res->tokens_per_s = (double)o->batch * T / (res->step_ms * 1e-3);
        res->mfu = rep.flops_per_step / (res->step_ms * 1e-3) / rep.peak_flops;
        if (o->gemm_stats) {
            td_gpt_gemm_stats(&res->gemm_flops, &res->gemm_ms, 0);
            int n = n_timed > 0 ? n_timed : 1;
            res->gemm_flops /= n, res->gemm_ms /= n;
        }
        td_dp_staleness(dp, &res->max_staleness, &res->mean_staleness);
        td_dp_overlap_stats(dp, &res->exposed_comm_ms, &res->comm_ms);
        if (res->steps_done > 0) {
            res->grad_sent_bytes = grad_sent / res->steps_done;
            res->grad_dense_bytes = grad_dense / res->steps_done;
        }
        td_free(in);
        td_free(tg);
        td_grad_watch_free(&watch);
    }
    res->loss_scale = scaler.scale;
    /* every rank, servers included, learns whether the run stopped; the
     * training ranks already agree, servers learn it here */
    float st[2] = {(float)res->stop_step, 0.0f};
    td_allreduce(g.world, st, 1, TD_F32, TD_MAX);
    if (res->stop_step < 0) res->stop_step = (int)st[0];
    res->numel_layout = table.numel;
    if (piped && !g.is_server) {
        int nb = 0;
        for (int l = 0; l < cfg.L; l++) nb += held[l + 1];
        td_tp_formula_stage(&res->tp_formula, &cfg, Bm, o->grad_accum, g.axis[TD_TP].size,
                            o->seq_parallel, nb, g.axis[TD_PP].rank == 0,
                            g.axis[TD_PP].rank == g.axis[TD_PP].size - 1);
        if (td_train_recompute(o) == TD_RECOMPUTE_BLOCK)
            td_tp_formula_add_recompute(&res->tp_formula, &cfg, Bm, o->grad_accum,
                                        g.axis[TD_TP].size, o->seq_parallel, nb);
        td_pp_stats_get(pp, &res->pp_stats);
        if (res->stop_step < 0 && !res->stopped_startup) td_pipeline_report(&g, &sched, &res->pp_stats, res);
    } else {
        td_tp_formula(&res->tp_formula, &cfg, Bm, o->grad_accum, g.axis[TD_TP].size,
                      o->seq_parallel);
        if (td_train_recompute(o) == TD_RECOMPUTE_BLOCK)
            td_tp_formula_add_recompute(&res->tp_formula, &cfg, Bm, o->grad_accum,
                                        g.axis[TD_TP].size, o->seq_parallel, cfg.L);
    }
    for (int c = 0; c < TD_MEM_NCAT; c++) res->mem_planned[c] = plan.bytes[c], res->mem_peak[c] = td_mem_peak(c);
    /* a stop during start-up trained nothing: no summary, save or sample */
    int stopped = res->stop_step >= 0, early = res->stopped_after > 0 || res->stopped_startup > 0;
    int trained = !stopped && !res->stopped_startup;
    /* servers run their own loop, so with ps the measured report waits for the end */
    if (mode == TD_DP_PS && !stopped) td_report_memory(&rep, &plan, 1);
    if (trained && !o->layout_pass) td_report_summary(&rep, res);

    int root = g.world_rank == 0;
    if (!stopped && !early && o->out) td_run_save(&run, o->steps, 1);
    if (trained && o->sample_tokens > 0) {
        /* the model's own parameters where rank 0 holds them all; under
         * ZeRO-3 the parameters alone are gathered, unit by unit, into one
         * copy (a third of the state), after the save */
        const float *P = NULL;
        float *gathered = NULL;
        const td_param_table *in = &table;
        if (g.axis[TD_TP].size > 1 || piped || !td_dp_full_params(dp, &P)) {
            /* with tp or pp the pieces are put together in the canonical layout */
            float *scratch = td_alloc(td_pp_gather_scratch_floats(&table, &canon) * sizeof(float), TD_MEM_OTHER);
            if (g.axis[TD_TP].size > 1 || piped) in = &canon;
            if (root) gathered = td_alloc(in->numel * sizeof(float), TD_MEM_OTHER);
            for (int u = 0; u < table.n_units; u++) {
                const float *b = td_pp_gather_unit(dp, &g, &table, &canon, 0, u, scratch, &in);
                if (b) memcpy(gathered + in->unit_offset[u], b, td_unit_numel(in, u) * sizeof(float));
            }
            td_free(scratch);
            P = gathered;
        }
        if (root) td_report_sample(&rep, in, P, &data.tok, o);
        td_free(gathered);
    }
    if (keep_state && trained) { /* tests: the whole state in the canonical layout on rank 0 */
        float *P = NULL, *M = NULL, *Vv = NULL;
        if (root) {
            P = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
            M = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
            Vv = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
        }
        td_dp_gather_state(dp, &canon, P, M, Vv);
        res->final_params = P, res->final_m = M, res->final_v = Vv;
        res->numel = canon.numel;
    }
    char trace_why[sizeof res->io_msg] = "";
    int trace_err = o->trace ? td_trace_file_write(o->trace, &g, trace_why, sizeof trace_why) : 0; /* a stopped run's too */
    td_report_close(&rep);
    /* a failed --log or --trace write (rank 0's files) reaches every rank:
     * all exit TD_EXIT_IO; the checkpoint, if any, is saved by now */
    int log_err = td_report_log_error(&rep);
    float io_bad = trace_err || log_err || res->io_failed ? 1.0f : 0.0f;
    if (g.world_size > 1) td_allreduce(g.world, &io_bad, 1, TD_F32, TD_MAX);
    res->io_failed = io_bad > 0.0f;
    if (log_err)
        snprintf(res->io_msg, sizeof res->io_msg, "--log %s: writing it failed: %s", o->log, strerror(log_err));
    else if (trace_err)
        snprintf(res->io_msg, sizeof res->io_msg, "%s", trace_why);
    td_out_lock_release(); /* the run is over: another job may write --out now */
    td_pp_destroy(pp);
    td_dp_destroy(dp);
    if (!g.is_server) td_gpt_destroy(&model);
    td_param_table_free(&table);
    td_param_table_free(&canon);
    td_data_free(&data);
    if (piped) td_schedule_free(&sched);
    td_grid_destroy(&g);
}

void td_train_result_free(td_train_result *r) {
    td_free(r->losses);
    td_free(r->grad_norms);
    td_free(r->final_params);
    td_free(r->final_m);
    td_free(r->final_v);
    memset(r, 0, sizeof *r);
}

int td_train_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, argc, argv);
    if (o.print_config) return td_train_print_config(&o);
    td_auto au = {0};
    if (o.autoplan) td_auto_choose(&o, &au);
    td_train_result res;
    td_train_run(&o, &res, 0);
    td_auto_report(&au, &res);
    int rc = 0;
    int root = td_log_rank() == 0;
    if (res.io_failed) {
        /* one line, from rank 0 (the files are rank 0's); every rank exits TD_EXIT_IO */
        if (root) {
            char tail[8400];
            if (res.stopped_startup)
                snprintf(tail, sizeof tail, "the run stopped before its first step and saved nothing");
            else if (o.out)
                snprintf(tail, sizeof tail, "the run %s after step %d with a checkpoint in %s", res.stopped_after > 0 ? "stopped" : "ended",
                         res.steps_done, o.out);
            else
                snprintf(tail, sizeof tail, "the run %s after step %d (no --out: nothing saved)",
                         res.stopped_after > 0 ? "stopped" : "ended", res.steps_done);
            fflush(stdout);
            fprintf(stderr, "trident: error: %s; %s\n", res.io_msg[0] ? res.io_msg : "a write failed on another rank", tail);
            fflush(stderr);
        }
        rc = TD_EXIT_IO;
    } else if (res.stopped_startup) {
        if (root) {
            if (o.resume)
                printf("stopped during start-up by a stop signal: nothing trained or saved; the resumed checkpoint "
                       "(step %d) and --out's latest are unchanged\n", res.steps_done);
            else
                printf("stopped during start-up by a stop signal: nothing trained, nothing to save\n");
            fflush(stdout);
        }
    } else if (res.stop_step >= 0) {
        /* one line, from rank 0; every rank exits non-zero after finalize */
        if (td_log_rank() == 0) {
            fflush(stdout);
            if (res.stop_saved > 0) /* --max-loss: the diverged state is kept for a look */
                fprintf(stderr, "trident: error: %s; the run stopped with the checkpoint %s/step-%08d "
                        "(now latest: resuming it continues the diverged run)\n",
                        res.stop_msg, o.out, res.stop_saved);
            else
                fprintf(stderr, "trident: error: %s; the run stopped%s%s%s\n",
                        res.stop_msg[0] ? res.stop_msg : "the run stopped on another rank",
                        o.out ? " and saved nothing from this step on (--out " : "", o.out ? o.out : "",
                        o.out ? ": earlier checkpoints and latest are untouched)" : "");
            fflush(stderr);
        }
        rc = 3;
    } else if (res.stopped_after > 0 && root) {
        if (o.out)
            printf("stopped after step %d of %d with a checkpoint in %s; to continue, run the same command with "
                   "--resume latest%s\n", res.stopped_after, o.steps, o.out, o.overwrite ? " (in place of --overwrite)" : "");
        else
            printf("stopped at step %d: nothing saved (no --out)\n", res.stopped_after);
        fflush(stdout);
    }
    td_train_result_free(&res);
    return rc;
}
