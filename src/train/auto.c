/* `trident train --auto`: the layout for the world size from the planner's
 * `local` cluster (this machine as `trident plan --calibrate` measured it),
 * printed with its predicted step time and memory before the run and beside
 * the measured ones after it.
 *
 * Step time is the planner's cost model (src/planner). Memory is not the
 * planner's formula but the engine's own plan (mem_plan.h: the function the
 * trainer allocates from, docs/design.md principle 2), evaluated for every stage
 * of each candidate without a communicator; the fastest candidate whose
 * busiest rank fits in its share of this machine's memory wins. */
#include "auto.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../run/mem_plan.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/cpus.h"
#include "trident/data.h"
#include "trident/train.h"

/* The engine's plan for the busiest rank of layout l: every pipeline stage
 * at tp rank 0 and dp rank 0 (tp and dp ranks hold equal shares). 0 when
 * the engine cannot run the layout (its schedule does not build). */
static double engine_bytes(const td_train_opts *o, const td_gpt_config *cfg, const td_plan_layout *l) {
    td_train_opts x = *o;
    td_auto_apply(&x, l);
    td_run_spec spec;
    td_train_spec(&x, &spec);
    td_dp_config dcfg = td_run_dp_config(&spec, TD_DP_ALLREDUCE);
    int Bm = x.batch / (x.dp * x.grad_accum);
    td_schedule sched;
    td_pp_split split;
    memset(&sched, 0, sizeof sched);
    if (x.pp > 1) {
        char err[256];
        if (td_schedule_build(&sched, td_train_schedule(&x), x.pp, x.grad_accum, x.virtual_stages, err,
                              sizeof err) != 0)
            return 0;
        td_pp_split_parse(&split, "uniform", cfg->L, x.pp, x.virtual_stages);
    }
    double worst = 0;
    for (int st = 0; st < x.pp; st++) {
        td_layout lay = {.dp = x.dp, .tp = x.tp, .pp = x.pp, .dp_rank = 0, .dp_shares_memory = x.dp > 1};
        unsigned char held[TD_MAX_LAYERS + 2];
        if (x.pp > 1) td_pp_held_units(&split, cfg->L, td_gpt_tied(cfg), st, held);
        td_param_table t;
        td_rank_shape rs = {&dcfg, &lay, 0, st, x.pp > 1 ? held : NULL, x.pp > 1 ? &split : NULL, &sched, Bm, 0};
        td_mem_plan p = td_run_mem_plan(&spec, cfg, &rs, &t);
        double sum = 0;
        for (int c = 0; c < TD_MEM_NCAT; c++) sum += (double)p.bytes[c];
        if (sum > worst) worst = sum;
        td_param_table_free(&t);
    }
    if (x.pp > 1) td_schedule_free(&sched);
    return worst;
}

void td_auto_apply(td_train_opts *o, const td_plan_layout *l) {
    static const char *rc_names[] = {"none", "none", "block"}; /* the engine recomputes whole blocks */
    o->dp = l->dp, o->tp = l->tp, o->pp = l->pp, o->zero = l->zero;
    o->grad_accum = l->micro_batches;
    o->seq_parallel = l->sp;
    o->recompute = rc_names[l->rc];
    o->schedule = l->sched == TD_PLAN_NO_SCHED ? o->schedule : td_sched_name((td_sched_kind)l->sched);
    o->virtual_stages = l->sched == TD_SCHED_INTERLEAVED ? l->v : 1;
    td_train_opts_choices(o); /* the recompute and schedule just named */
}

void td_auto_choose(td_train_opts *o, td_auto *a) {
    memset(a, 0, sizeof *a);
    int world = td_comm_size(td_comm_world()), rank = td_comm_rank(td_comm_world());
    char path[512];
    td_profile prof;
    td_err e;
    td_plan_profile_path(path, sizeof path);
    TD_CHECK(td_plan_profile_load(path, &prof, &e) == 0,
             "--auto: %s; run `mpirun -np %d trident plan --calibrate` on this machine first (or set TRIDENT_PROFILE)",
             e.msg, world);
    td_compat_cfg cc;
    td_train_compat_cfg(o, &cc);
    td_compat_check(&cc, TD_COMPAT_AT_AUTO); /* --dp-mode other than allreduce */
    if (o->threads <= 0) /* the usable CPUs over the ranks, as train's default */
        o->threads = td_cpus_default_threads(world);
    td_dataset data;
    td_data_load(&data, o->data, o->tokenizer, o->vocab, o->seq);
    td_gpt_config cfg;
    td_train_model_config(o, data.tok.V, &cfg);
    td_data_free(&data);
    td_plan_model m = {"train", cfg.L, cfg.H, cfg.C, cfg.V, cfg.T, (int)cfg.arch, cfg.KV, cfg.F, cfg.tie, 0, 0, 0, 0, 0};
    td_plan_cluster_local(&prof, world, o->threads, &a->cluster);
    td_plan_fixed fix;
    td_plan_fixed_init(&fix);
    fix.cp = 1, fix.shard = 0; /* --auto sets dp, tp, pp and zero */
    /* the engine recomputes whole blocks or nothing */
    fix.rc = td_train_recompute(o) == TD_RECOMPUTE_BLOCK ? TD_PLAN_RC_FULL : -1;
    td_plan_result r;
    td_plan_search(&m, &a->cluster, o->batch, &fix, &r);
    double budget = prof.mem_bytes / world;
    int tried = 0;
    for (int i = 0; i < r.n && !a->active; i++) {
        const td_plan_eval *ev = &r.plans[i];
        if (ev->lay.rc == TD_PLAN_RC_SELECTIVE) continue;
        if (ev->lay.sp && cfg.T % ev->lay.tp) continue;
        tried++;
        double bytes = engine_bytes(o, &cfg, &ev->lay);
        if (bytes <= 0 || bytes > budget) continue;
        a->active = 1, a->pred = *ev, a->mem_bytes = bytes;
    }
    td_plan_result_free(&r);
    TD_CHECK(a->active, "--auto: none of the %d layouts the planner ranked for %d ranks fits in %.2f GB per rank "
             "(the engine's memory plan); use more ranks or a smaller model", tried, world, budget / 1e9);
    td_auto_apply(o, &a->pred.lay);
    if (rank != 0) return;
    const td_plan_layout *l = &a->pred.lay;
    char sched[64] = "";
    if (l->pp > 1) snprintf(sched, sizeof sched, ", schedule %s", o->schedule);
    if (l->sched == TD_SCHED_INTERLEAVED) snprintf(sched, sizeof sched, ", schedule %s x %d chunks", o->schedule, l->v);
    printf("auto: %d ranks x %d threads on --cluster local (%s): dp %d tp %d pp %d zero %d, %d micro-batches of %d "
           "sequences%s%s, recompute %s\n",
           world, o->threads, path, l->dp, l->tp, l->pp, l->zero, l->micro_batches, l->micro_batch, sched,
           l->sp ? ", sequence parallel" : "", o->recompute);
    printf("auto: predicted step %.2f ms (", a->pred.step_s * 1e3);
    for (int k = 0; k < TD_COST_N; k++)
        printf("%s%s %.2f", k ? ", " : "", td_plan_cost_name(k), a->pred.t[k] * 1e3);
    printf("), memory %.2f MiB on the busiest rank (the engine's plan)\n", a->mem_bytes / 1048576.0);
    fflush(stdout);
}

void td_auto_report(const td_auto *a, const td_train_result *res) {
    if (!a->active || td_comm_rank(td_comm_world()) != 0) return;
    double peak = 0;
    for (int c = 0; c < TD_MEM_NCAT; c++) peak += (double)res->mem_peak[c];
    const td_plan_validation *v = a->cluster.validation;
    printf("auto: measured step %.2f ms, predicted %.2f ms (%+.1f%%; predictions in validation %s were off the "
           "measured by %+.0f%% to %+.0f%%); rank 0's accounted peak %.2f MiB, predicted for the busiest rank "
           "%.2f MiB (resident set above its baseline: the table above)\n",
           res->step_ms, a->pred.step_s * 1e3, 100 * (res->step_ms / (a->pred.step_s * 1e3) - 1),
           v ? v->name : "none", v ? 100 * v->lo : 0.0, v ? 100 * v->hi : 0.0, peak / 1048576.0,
           a->mem_bytes / 1048576.0);
}
