/* A run's start and end (run.h): what it builds before its first step and
 * what it reports, saves and frees after its last. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_run.h"
#include "layout_pass.h"
#include "preflight.h"
#include "run.h"
#include "trace_file.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/comm.h"
#include "trident/compat.h"
#include "trident/cpus.h"
#include "trident/fault.h"
#include "trident/kernels.h"
#include "trident/out_lock.h"
#include "trident/param_slices.h"
#include "trident/planner.h"
#include "trident/stop.h"

/* Default threads: the CPUs this rank may use (affinity, cgroup quota)
 * shared by the ranks on this node (counted at td_comm_init). */
static int default_threads(void) { return td_cpus_default_threads(td_local_ranks()); }

/* Per-replica batch split; a global batch that does not divide is a clear
 * error listing the nearest micro-batch counts that would fit (a resume
 * takes the checkpoint's, which another dp may not split) and batch sizes
 * that would work. */
static void split_batch(const td_run_spec *spec, int D, int *Bl, int *Bm) {
    long long unit = (long long)D * spec->schedule.grad_accum; /* in int, dp x K could wrap */
    if (spec->schedule.batch % unit != 0) {
        char fit[160] = "";
        if (spec->schedule.batch % D == 0) { /* the divisors of the per-replica rows nearest K */
            int rows = spec->schedule.batch / D, lo = spec->schedule.grad_accum,
                hi = spec->schedule.grad_accum;
            while (lo > 1 && rows % lo) lo--;
            while (hi < rows && rows % hi) hi++;
            if (hi > rows || rows % hi) hi = lo;
            if (lo == hi)
                snprintf(fit, sizeof fit, "--micro-batches %d (the nearest that divides its %d sequences per replica), or ",
                         lo, rows);
            else
                snprintf(fit, sizeof fit, "--micro-batches %d or %d (the nearest that divide its %d sequences per "
                         "replica), or ", lo, hi, rows);
        }
        td_fail("--batch %d does not split over %d data-parallel replicas x %d micro-batches; use "
                "%sa --batch multiple of %lld (e.g. %lld or %lld)",
                spec->schedule.batch, D, spec->schedule.grad_accum, fit, unit,
                unit * (spec->schedule.batch / unit > 0 ? spec->schedule.batch / unit : 1),
                unit * (spec->schedule.batch / unit + 1));
    }
    *Bl = spec->schedule.batch / D;
    *Bm = *Bl / spec->schedule.grad_accum;
}

/* --loss-scale: the scaler (the layouts it does not combine with are rows
 * of the rules table, checked before). */
static void loss_scale_setup(const td_run_spec *spec, td_loss_scaler *s) {
    td_loss_scale_mode m = spec->precision.loss_scale;
    float init = spec->precision.loss_scale_static;
    if (m == TD_LOSS_SCALE_DYNAMIC)
        init = spec->precision.loss_scale_init > 0 ? spec->precision.loss_scale_init
                                                   : TD_LOSS_SCALE_INIT;
    int window = spec->precision.loss_scale_window > 0 ? spec->precision.loss_scale_window
                                                       : td_loss_scale_window_env();
    td_loss_scaler_init(s, m, init, window);
}

/* The rules table's rows of the run's start (ps against its servers, tp,
 * pp, loss scaling and checkpoints; loss scaling against top-k's error
 * feedback), then the grid and the process-wide settings. */
static void open_grid(td_run *r, td_dp_mode mode) {
    const td_run_spec *spec = r->spec;
    td_compat_cfg cc = spec->compat;
    td_compat_check(&cc, TD_COMPAT_AT_RUN);
    loss_scale_setup(spec, &r->scaler);
    /* a schedule or split that cannot work, before any communication */
    if (spec->layout.pp > 1) td_pipeline_check(spec);
    td_log_set_verbose(spec->output.verbose);
    td_grid_spec gs = {.size = {[TD_TP] = spec->layout.tp,
                                [TD_CP] = spec->layout.cp,
                                [TD_DP] = spec->layout.dp,
                                [TD_PP] = spec->layout.pp},
                       .order = spec->layout.grid_order,
                       .n_servers = mode == TD_DP_PS ? spec->layout.ps_servers : 0,
                       .dp_shard = spec->layout.dp_shard,
                       .ep = spec->layout.ep};
    td_grid_create(&r->g, &gs);
    cc.dp = r->g.axis[TD_DP].size; /* --dp 0 resolved */
    td_compat_check(&cc, TD_COMPAT_AT_GRID);
    td_comm_set_timeout(spec->layout.comm_timeout);
    td_comm_set_heartbeat_timeout(spec->layout.heartbeat_timeout);
    if (spec->layout.piece_mb > 0)
        td_comm_set_piece_bytes((size_t)(spec->layout.piece_mb * 1048576.0));
    td_kernels_set_threads(spec->layout.threads > 0 ? spec->layout.threads : default_threads());
}

/* The model's shape, the pipeline's schedule and split, this rank's table
 * and memory plan, and the preflight: every check that needs no model,
 * before the model is allocated. */
static void open_plan(td_run *r, td_dp_mode mode, td_dp_config *dcfg) {
    const td_run_spec *spec = r->spec;
    td_grid *g = &r->g;
    r->cfg = spec->model.cfg; /* over the data's vocabulary */
    r->cfg.V = r->data.tok.V;
    td_gpt_config_finish(&r->cfg);
    td_gpt_config preset; /* --model: the data's vocabulary, not the preset's */
    if (spec->model.preset && td_plan_model_preset_config(spec->model.preset, &preset) == 0 &&
        preset.V != r->cfg.V)
        td_log("--model %s: vocabulary %d (the data's), not the preset's %d\n", spec->model.preset,
               r->cfg.V, preset.V);
    td_gpt_check_tp(&r->cfg, g->axis[TD_TP].size, spec->layout.seq_parallel);
    split_batch(spec, g->axis[TD_DP].size, &r->ec.Bl, &r->ec.Bm);
    int Bm = r->ec.Bm;
    r->piped = g->axis[TD_PP].size > 1;
    if (r->piped) {
        td_pipeline_setup(spec, g, &r->cfg, Bm, &r->sched, &r->split);
        td_pp_held_units(&r->split, r->cfg.L, td_gpt_tied(&r->cfg), g->axis[TD_PP].rank, r->held);
    }
    *dcfg = td_run_dp_config(spec, mode);
    td_layout lay = td_layout_of_grid(g);
    td_rank_shape rs = {dcfg,           &lay, g->axis[TD_TP].rank, g->axis[TD_PP].rank,
                        r->piped ? r->held : NULL, r->piped ? &r->split : NULL, &r->sched, Bm,
                        g->axis[TD_CP].rank};
    r->plan = td_run_mem_plan(spec, &r->cfg, &rs, &r->table);
    /* the comm layer's host staging of device payloads (none on cpu):
     * reserved at the plan's size, never grown (comm.h) */
    td_staging_shape stg = td_run_staging_shape(spec, &r->cfg, &rs, &r->table);
    td_plan_host(&r->plan, TD_MEM_COMM, td_comm_staging_plan(&stg));
    td_comm_staging_reserve(&stg);
    td_param_table_build(&r->canon, &r->cfg, 1);
    r->rep.baseline = td_preflight(spec, g, &r->cfg, &r->data, &r->plan, Bm);
    td_run_id_start(g);
}

int td_run_doc_eod(const td_run_data *d, const td_tokenizer *tok) {
    if (!d->doc_mask && !d->eod_mask_loss) return -1;
    int eod = d->eod >= 0 ? d->eod : tok->bpe ? td_bpe_eot(tok->bpe) : -1;
    TD_CHECK(eod >= 0, "--%s: the %s tokenizer has no end-of-text token; give its id with --eod ID",
             d->doc_mask ? "doc-mask" : "eod-mask-loss", td_tokenizer_name(tok->kind));
    TD_CHECK(eod < tok->V, "--eod %d: not a token of the vocabulary (%d)", eod, tok->V);
    return eod;
}

/* The model (training ranks), the strategy and the pipeline. */
static void open_model(td_run *r, const td_dp_config *dcfg) {
    const td_run_spec *spec = r->spec;
    td_grid *g = &r->g;
    td_tp_comm_init(&r->tpc, g);
    if (g->axis[TD_CP].size > 1) { /* attention meets the sequence's other chunks */
        r->ring = td_cp_ring_new(g->axis[TD_CP].comm);
        td_cp_bind_model(r->ring, &r->tpc.ops);
    }
    if (!g->is_server) {
        td_gpt_use use = td_run_model_use(dcfg); /* eval: no activation gradients */
        if (r->piped)
            td_gpt_create_stage_use(&r->model, &r->table, r->ec.Bm, spec->layout.seq_parallel,
                                    spec->precision.recompute, use);
        else
            td_gpt_create_use(&r->model, &r->table, r->ec.Bm, spec->layout.seq_parallel,
                              spec->precision.recompute, use);
        if (r->cfg.moe.E > 0) td_ep_bind_model(&r->ep, g, &r->tpc.ops); /* before the ops are handed out */
        r->model.comm = td_tp_comm_ops(&r->tpc);
        td_gpt_doc_mask(&r->model, spec->data.doc_mask ? r->doc_eod : -1);
        td_gpt_doc_positions(&r->model, spec->data.doc_mask && spec->data.doc_pos_reset);
        if (r->ring) { /* the ring's blocks live in scratch that is dead while attention runs */
            size_t bytes;
            void *ws = td_gpt_cp_scratch(&r->model, &bytes);
            td_cp_ring_lend(r->ring, ws, bytes);
        }
        td_gpt_gemm_stats_enable(spec->precision.gemm_stats);
    }
    r->dp = td_dp_create(dcfg, g, &r->table, g->is_server ? NULL : &r->model);
    r->pp = r->piped ? td_pp_create(g, &r->model, r->dp, &r->sched, &r->split) : NULL;
    r->agreed_stops = td_dp_agreed_stops(r->dp);
}

int td_run_open(td_run *r, const td_run_spec *spec, td_run_result *res) {
    memset(r, 0, sizeof *r);
    r->spec = spec, r->res = res;
    memset(res, 0, sizeof *res);
    /* the spec's device, before the run allocates (train's options chose it
     * already, right after MPI_Init: the same one, nothing to do) */
    td_backend_use(spec->layout.device);
    td_mem_reset_peaks(); /* the peaks reported are this run's (tests run several in one process) */
    res->final_val_loss = NAN;
    res->stop_step = -1;
    res->skip_row = res->skip_rank = res->skip_micro = -1;
    const td_fault *fault = td_fault_get(); /* a bad TRIDENT_FAULT fails before any work */
    td_dp_mode mode = spec->layout.dp_mode;
    if (mode == TD_DP_PS) td_stop_signals_restore(); /* its servers never reach an agreed stop */
    open_grid(r, mode);
    if (spec->data.path)
        td_data_load(&r->data, spec->data.path, spec->data.tokenizer, spec->data.vocab, spec->model.cfg.T);
    else
        td_data_of_tokenizer(&r->data, spec->data.tokenizer_only, spec->model.cfg.T);
    td_data_set_batch(&r->data, spec->schedule.batch); /* a blend's sample index is step x batch + sample */
    td_run_set_data(spec->data.path, &r->data.fp);
    r->doc_eod = td_run_doc_eod(&spec->data, &r->data.tok);
    td_fault_slow_load();
    /* start-up's first agreed stop point: nothing is written yet */
    if (mode != TD_DP_PS && td_stop_agreed(&r->g, 0)) {
        res->stopped_startup = 1;
        td_data_free(&r->data);
        td_grid_destroy(&r->g);
        return 0;
    }
    td_dp_config dcfg;
    open_plan(r, mode, &dcfg);
    open_model(r, &dcfg);
    td_fault_slow_load();
    TD_CHECK(fault->kind == TD_FAULT_NONE || fault->kind == TD_FAULT_SAVE_FAIL ||
                 fault->kind == TD_FAULT_SKIP_EMBED_SUM || fault->kind == TD_FAULT_SLOW_LOAD ||
                 fault->rank < td_grid_workers(&r->g),
             "TRIDENT_FAULT: rank %d is not a training rank (0..%d)", fault->rank,
             td_grid_workers(&r->g) - 1);

    td_preflight_result pf = r->rep.baseline;
    td_report_open(&r->rep, spec, &r->g, &r->cfg, &r->table, &r->data, td_kernels_threads(),
                   r->ec.Bm);
    r->rep.moe = r->cfg.moe.E > 0 ? res : NULL;
    r->rep.baseline = pf;
    td_report_precision(&r->rep, &r->plan);
    td_report_memory(&r->rep, &r->plan, 0);
    if (spec->output.trace) { /* the epochs of all lanes at one barrier */
        td_barrier(r->g.world);
        td_trace_file_start(&r->g);
    }
    res->losses = td_alloc(sizeof(float) * spec->schedule.steps, TD_MEM_OTHER);
    res->grad_norms = td_alloc(sizeof(float) * spec->schedule.steps, TD_MEM_OTHER);
    return 1;
}

int td_run_start(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    int N = r->ec.Bm * spec->model.cfg.T;
    int *in = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
    r->ec = (td_engine_ctx){spec,     &r->g,    &r->data, &r->model, r->dp, r->pp,
                            r->ec.Bl, r->ec.Bm, spec->schedule.grad_accum, in,   tg,
                            spec->data.eod_mask_loss ? r->doc_eod : -1};
    r->engine = td_engine_for(&r->ec); /* chosen once: no layout branch in the loop */
    r->loss_group = r->engine->loss_group(&r->ec);
    td_grad_watch_init(&r->watch, &r->model, td_loss_scaler_skips(&r->scaler));
    r->first = td_run_resume(r);
    td_report_resumed(&r->rep, r->first);
    res->steps_done = r->first;
    /* start-up's last agreed stop point (a --log write may have failed
     * already): nothing trained, nothing saved */
    int agreed = r->agreed_stops ? td_stop_agreed(&r->g, td_report_log_error(&r->rep)) : 0;
    if (agreed) {
        res->stopped_startup = 2, res->io_failed = (agreed & TD_STOP_IO) != 0;
        return 0;
    }
    /* --overwrite: every check passed; the old checkpoints go before the first save */
    if (spec->output.overwrite && r->g.world_rank == 0) {
        int n = td_out_clear(spec->output.out);
        if (n > 0)
            td_log("--overwrite: removed %d step director%s and latest from %s\n", n,
                   n == 1 ? "y" : "ies", spec->output.out);
    }
    td_divergence_init(&r->div, spec->schedule.max_loss, spec->optim.warmup);
    /* --stop-after at the resumed step: the checkpoint saved again in this
     * layout, no step trained (a checkpoint converted) */
    if (spec->output.resume && r->agreed_stops && spec->schedule.stop_after > 0 &&
        spec->schedule.stop_after == r->first) {
        td_run_save(r, r->first, 0);
        res->stopped_after = r->first;
        return 0;
    }
    /* trident eval: the loaded checkpoint's forward passes, no training */
    if (spec->hooks.layout_pass) {
        td_layout_pass lp = {&r->g,    &r->data, &r->model,        r->dp, r->pp, r->ec.Bl,
                             r->ec.Bm, r->ec.K,  spec->model.cfg.T};
        spec->hooks.layout_pass(spec->hooks.layout_pass_ctx, &lp);
        return 0;
    }
    return 1;
}

/* Timing, traffic and strategy statistics of the steps this process ran
 * (a resumed or stopped run: fewer), less the leading ones left out. */
static void finish_training(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    int ran = res->steps_done - r->first;
    int n_timed = ran > spec->schedule.timing_skip ? ran - spec->schedule.timing_skip : ran;
    res->step_ms = n_timed > 0 ? r->timed_ms / n_timed : 0.0;
    res->cp_wait_ms = n_timed > 0 ? r->cp_wait_ms / n_timed : 0.0;
    res->tokens_per_s = (double)spec->schedule.batch * spec->model.cfg.T / (res->step_ms * 1e-3);
    res->mfu = r->rep.flops_per_step / (res->step_ms * 1e-3) / r->rep.peak_flops;
    if (spec->precision.gemm_stats) {
        td_gpt_gemm_stats(&res->gemm_flops, &res->gemm_ms, 0);
        int n = n_timed > 0 ? n_timed : 1;
        res->gemm_flops /= n, res->gemm_ms /= n;
    }
    td_dp_staleness(r->dp, &res->max_staleness, &res->mean_staleness);
    td_dp_overlap_stats(r->dp, &res->exposed_comm_ms, &res->comm_ms);
    if (res->steps_done > 0) {
        res->grad_sent_bytes = r->grad_sent / res->steps_done;
        res->grad_dense_bytes = r->grad_dense / res->steps_done;
    }
    td_free(r->ec.in);
    td_free(r->ec.tg);
    td_grad_watch_free(&r->watch);
}

/* The tensor-parallel traffic formula of this rank's blocks (the
 * pipeline's stage, else all), and the pipeline's statistics. */
static void traffic_formula(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    const td_grid *g = &r->g;
    int tp = g->axis[TD_TP].size, nb = r->cfg.L;
    td_gpt_config local = r->cfg; /* the tp traffic of this rank's rows: T / cp per sequence */
    local.T /= g->axis[TD_CP].size;
    if (r->piped) {
        nb = 0;
        for (int l = 0; l < r->cfg.L; l++) nb += r->held[l + 1];
        td_tp_formula_stage(&res->tp_formula, &local, r->ec.Bm, spec->schedule.grad_accum, tp,
                            spec->layout.seq_parallel, nb, g->axis[TD_PP].rank == 0,
                            g->axis[TD_PP].rank == g->axis[TD_PP].size - 1);
    } else {
        td_tp_formula(&res->tp_formula, &local, r->ec.Bm, spec->schedule.grad_accum, tp,
                      spec->layout.seq_parallel);
    }
    int recompute = spec->precision.recompute == TD_RECOMPUTE_BLOCK;
    if (recompute)
        td_tp_formula_add_recompute(&res->tp_formula, &local, r->ec.Bm, spec->schedule.grad_accum,
                                    tp, spec->layout.seq_parallel, nb);
    if (r->ring) { /* per block and micro-batch one ring forward (two under recomputation) and one backward */
        td_cp_shape s = {r->ec.Bm,      local.T, r->cfg.C / tp, r->cfg.H / tp, spec->precision.precision,
                         r->cfg.KV / tp, NULL, 0};
        uint64_t fwd, bwd;
        td_cp_ring_formula(&s, g->axis[TD_CP].size, &fwd, &bwd);
        res->cp_formula_bytes =
            (uint64_t)nb * spec->schedule.grad_accum * ((1 + recompute) * fwd + bwd);
    }
    if (r->piped) {
        td_pp_stats_get(r->pp, &res->pp_stats);
        if (res->stop_step < 0 && !res->stopped_startup) td_pipeline_report(g, &r->sched, &res->pp_stats, res);
    }
}

/* The sample: the model's own parameters where rank 0 holds them all;
 * under ZeRO-3 the parameters alone are gathered, unit by unit, into one
 * copy (a third of the state), after the save. */
static void sample(td_run *r) {
    const td_grid *g = &r->g;
    /* under ep a rank holds only its experts: put together like tp slices */
    int root = g->world_rank == 0, tp_or_pp = g->axis[TD_TP].size > 1 || r->piped || r->table.ep > 1;
    const float *P = NULL;
    float *gathered = NULL;
    const td_param_table *in = &r->table;
    /* on a device the parameters come down unit by unit (the gather's
     * named downloads) rather than being read in place */
    if (tp_or_pp || td_backend_is_device() || !td_dp_full_params(r->dp, &P)) {
        /* with tp, pp or ep the pieces are put together in the canonical layout */
        float *scratch = td_alloc(td_pp_gather_scratch_floats(&r->table, &r->canon) * sizeof(float), TD_MEM_OTHER);
        if (tp_or_pp) in = &r->canon;
        if (root) gathered = td_alloc(in->numel * sizeof(float), TD_MEM_OTHER);
        for (int u = 0; u < r->table.n_units; u++) {
            const float *b = td_pp_gather_unit(r->dp, g, &r->table, &r->canon, 0, u, scratch, &in);
            if (b) memcpy(gathered + in->unit_offset[u], b, td_unit_numel(in, u) * sizeof(float));
        }
        td_free(scratch);
        P = gathered;
    }
    if (root) td_report_sample(&r->rep, in, P, &r->data.tok, r->spec);
    td_free(gathered);
}

/* Tests: the whole state in the canonical layout on rank 0. */
static void keep_state(td_run *r) {
    td_run_result *res = r->res;
    size_t n = r->canon.numel;
    float *P = NULL, *M = NULL, *V = NULL;
    if (r->g.world_rank == 0) {
        P = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
        M = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
        V = td_alloc(sizeof(float) * n, TD_MEM_OTHER);
    }
    td_dp_gather_state(r->dp, &r->canon, P, M, V);
    res->final_params = P, res->final_m = M, res->final_v = V;
    res->numel = n;
}

/* The trace file and the log's last writes; a failure of either (rank 0's
 * files) reaches every rank: all exit TD_EXIT_IO, the checkpoint, if any,
 * is saved by now. */
static void close_files(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    char trace_why[sizeof res->io_msg] = "";
    int trace_err = spec->output.trace ? td_trace_file_write(spec->output.trace, &r->g, trace_why,
                                                             sizeof trace_why)
                                       : 0; /* a stopped run's too */
    td_report_close(&r->rep);
    int log_err = td_report_log_error(&r->rep);
    float io_bad = trace_err || log_err || res->io_failed ? 1.0f : 0.0f;
    if (r->g.world_size > 1) td_allreduce(r->g.world, &io_bad, 1, TD_F32, TD_MAX);
    res->io_failed = io_bad > 0.0f;
    if (log_err)
        td_report_io_msg(&r->rep, res->io_msg, sizeof res->io_msg);
    else if (trace_err)
        snprintf(res->io_msg, sizeof res->io_msg, "%s", trace_why);
}

void td_run_close(td_run *r, int keep) {
    const td_run_spec *spec = r->spec;
    td_run_result *res = r->res;
    if (!r->g.is_server) finish_training(r);
    res->loss_scale = r->scaler.scale;
    /* every rank, servers included, learns whether the run stopped; the
     * training ranks already agree, servers learn it here */
    float st = (float)res->stop_step;
    td_allreduce(r->g.world, &st, 1, TD_F32, TD_MAX);
    if (res->stop_step < 0) res->stop_step = (int)st;
    res->numel_layout = r->table.numel;
    for (int u = 0; u < r->table.n_units; u++) {
        size_t lo[TD_UNIT_PIECES], len[TD_UNIT_PIECES];
        int ex[TD_UNIT_PIECES];
        for (int k = 0, n = td_param_unit_pieces(&r->table, u, lo, len, ex); k < n; k++)
            if (ex[k]) res->numel_expert += len[k];
    }
    if (!r->g.is_server) traffic_formula(r);
    for (int c = 0; c < TD_MEM_NCAT; c++) {
        res->mem_planned[c] = r->plan.bytes[c], res->mem_peak[c] = td_mem_peak(c);
        res->mem_planned_device[c] = r->plan.device[c], res->mem_planned_host[c] = r->plan.bytes[c] - r->plan.device[c];
        res->mem_peak_device[c] = td_mem_peak_device(c), res->mem_peak_host[c] = td_mem_peak_host(c);
    }
    /* a stop during start-up trained nothing: no summary, save or sample */
    int stopped = res->stop_step >= 0, early = res->stopped_after > 0 || res->stopped_startup > 0;
    int trained = !stopped && !res->stopped_startup;
    /* servers run their own loop, so then the measured report waits for the end */
    if (!r->agreed_stops && !stopped) td_report_memory(&r->rep, &r->plan, 1);
    if (trained && !spec->hooks.layout_pass) td_report_summary(&r->rep, res);
    if (!stopped && !early && spec->output.out) td_run_save(r, spec->schedule.steps, 1);
    if (trained && spec->output.sample_tokens > 0) sample(r);
    if (keep && trained) keep_state(r);
    close_files(r);
    td_out_lock_release(); /* the run is over: another job may write --out now */
    td_pp_destroy(r->pp);
    td_dp_destroy(r->dp);
    if (!r->g.is_server) td_gpt_destroy(&r->model);
    td_cp_ring_free(r->ring);
    td_ep_free(&r->ep);
    td_param_table_free(&r->table);
    td_param_table_free(&r->canon);
    td_data_free(&r->data);
    if (r->piped) td_schedule_free(&r->sched);
    td_grid_destroy(&r->g);
}

void td_run_train(const td_run_spec *spec, td_run_result *res, int keep_state) {
    td_run r;
    if (!td_run_open(&r, spec, res)) return; /* a stop signal while the data loaded */
    if (r.g.is_server) {
        td_dp_serve(r.dp, spec->schedule.steps);
    } else if (td_run_start(&r)) {
        for (int step = r.first; step < spec->schedule.steps; step++) {
            td_run_status st = td_run_step(&r, step);
            if (st == TD_RUN_RETRY) { /* the loop's step++ brings the same step back */
                step--;
                continue;
            }
            if (st == TD_RUN_STOP) break;
            if (td_run_eval_due(&r, step)) td_run_eval(&r, step);
            if (td_run_boundary(&r, step)) break;
        }
    }
    td_run_close(&r, keep_state);
}

void td_run_result_free(td_run_result *r) {
    td_free(r->losses);
    td_free(r->grad_norms);
    td_free(r->final_params);
    td_free(r->final_m);
    td_free(r->final_v);
    td_free(r->moe_load);
    memset(r, 0, sizeof *r);
}
