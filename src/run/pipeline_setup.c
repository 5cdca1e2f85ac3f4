/* Pipeline setup: the schedule, its validation and the blocks of each
 * stage (uniform, explicit, or auto from measured costs), all before any
 * model memory is allocated; rank 0 prints what was chosen. */
#include <string.h>

#include "preflight.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/kernels.h"

/* Best of `reps` timings (ms) of the embedding, one block and the head,
 * each forward + backward, on one micro-batch of B sequences, measured on a
 * one-block model at tp 1 (blocks are identical, so one stands for all). */
static void measure_costs(const td_gpt_config *cfg, int B, int recompute, double *embed, double *block,
                          double *head) {
    td_gpt_config c1 = *cfg;
    c1.L = 1;
    td_param_table t;
    td_param_table_build(&t, &c1, 16);
    td_gpt m;
    td_gpt_create(&m, &t, B, 0);
    float *p = td_alloc(t.numel * sizeof(float), TD_MEM_OTHER);
    float *gr = td_alloc(t.numel * sizeof(float), TD_MEM_OTHER);
    td_param_init_range(&t, 1, 0, t.numel, p);
    memset(gr, 0, t.numel * sizeof(float));
    td_gpt_bind_flat(&m, p, gr);
    int N = B * cfg->T;
    int *tok = td_alloc(2 * sizeof(int) * (size_t)N, TD_MEM_OTHER);
    for (int i = 0; i < N; i++) {
        tok[i] = (int)(td_rng_u64(7, 0, (uint64_t)i) % (uint64_t)cfg->V);
        tok[N + i] = (int)(td_rng_u64(7, 1, (uint64_t)i) % (uint64_t)cfg->V);
    }
    td_gpt_upload_tokens(&m, m.inputs, tok, m.targets, tok + N);
    td_free(tok);
    *embed = *block = *head = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = td_now_ms();
        td_embed_forward(&m, m.inputs, &m.embed);
        double t1 = td_now_ms();
        td_block_forward(&m, 0, m.embed.encoded, &m.blocks[0]);
        double t2 = td_now_ms();
        td_head_forward(&m, m.blocks[0].res3, m.targets, &m.head);
        td_head_backward(&m, m.blocks[0].res3, m.targets, &m.head, 1.0f / (float)N, m.s.dres);
        double t3 = td_now_ms();
        td_block_backward(&m, 0, m.embed.encoded, &m.blocks[0], m.s.dres);
        double t4 = td_now_ms();
        td_embed_backward(&m, m.inputs, m.s.dres);
        double t5 = td_now_ms();
        if (rep == 0) continue; /* the first touches fresh memory */
        /* --recompute block runs each block's forward once more in its backward */
        double e = (t1 - t0) + (t5 - t4), b = (recompute ? 2 : 1) * (t2 - t1) + (t4 - t3), h = t3 - t2;
        if (e < *embed) *embed = e;
        if (b < *block) *block = b;
        if (h < *head) *head = h;
    }
    td_free(p);
    td_free(gr);
    td_gpt_destroy(&m);
    td_param_table_free(&t);
}

static void print_split(const td_pp_split *sp, const td_schedule *s, int M) {
    char line[2048];
    size_t n = 0;
    for (int v = 0; v < sp->P * sp->V && n < sizeof line - 32; v++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s[%d,%d)", v ? " " : "", sp->first[v],
                              sp->first[v + 1]);
    td_log("pipeline: %s, pp %d x %d micro-batches%s; blocks per %s: %s\n", td_sched_name(s->kind), sp->P,
           M, sp->V > 1 ? " x 2 chunks" : "", sp->V > 1 ? "stage and chunk (chunk-major)" : "stage", line);
    n = 0;
    for (int st = 0; st < sp->P && n < sizeof line - 16; st++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%d", st ? " " : "", s->peak[st]);
    td_log("pipeline: activation slots (micro-batch chunks in flight) per stage: %s (schedule bound %d)\n",
           line, s->bound);
}

/* The spec's schedule: a name no schedule has is refused here, by
 * td_sched_parse's text (unused at pp 1, it is no error there). */
static td_sched_kind schedule_kind(const td_run_spec *spec) {
    int k = spec->layout.pp_schedule;
    return k >= 0 ? (td_sched_kind)k : td_sched_parse(spec->layout.pp_schedule_name);
}

void td_pipeline_check(const td_run_spec *spec) {
    char err[512];
    td_schedule sched;
    td_pp_split sp;
    if (td_schedule_build(&sched, schedule_kind(spec), spec->layout.pp, spec->schedule.grad_accum,
                          spec->layout.virtual_stages, err, sizeof err) != 0)
        td_fail("%s", err);
    td_schedule_free(&sched);
    if (!spec->layout.pp_partition_auto)
        td_pp_split_parse(&sp, spec->layout.pp_partition, spec->model.cfg.L, spec->layout.pp,
                          spec->layout.virtual_stages);
}

/* --batch-rampup: the steps of a smaller batch run the schedule of fewer
 * micro-batches (td_pp_set_micro), which may hold more micro-batch chunks
 * in flight on a stage than the full one (interleaved, pp 2 x 2 chunks:
 * stage 1 holds all 4 chunks of 2 micro-batches, 3 of 4); the executor's
 * slots and the memory plan read peak[], so it becomes each stage's most
 * over the ramp's sizes: memory planned for every step of the run. */
static void ramp_peaks(const td_run_spec *spec, const td_grid *g, int Bm, td_schedule *sched) {
    const td_batch_rampup *ru = &spec->schedule.rampup;
    if (ru->start <= 0) return;
    int per_micro = g->axis[TD_DP].size * Bm; /* sequences per micro-batch over the replicas */
    for (int b = ru->start; b < spec->schedule.batch; b += ru->increment) {
        td_schedule s;
        char err[512];
        /* the rules table's rampup rows made every size whole micro-batches */
        TD_ASSERT(b % per_micro == 0 && b / per_micro < sched->M);
        if (td_schedule_build(&s, sched->kind, sched->P, b / per_micro, sched->V, err, sizeof err) != 0)
            td_fail("--batch-rampup: batch %d: %s", b, err);
        for (int st = 0; st < sched->P; st++)
            if (s.peak[st] > sched->peak[st]) sched->peak[st] = s.peak[st];
        td_schedule_free(&s);
        if (ru->increment <= 0) break;
    }
}

void td_pipeline_setup(const td_run_spec *spec, const td_grid *g, const td_gpt_config *cfg, int Bm,
                       td_schedule *sched, td_pp_split *sp) {
    char err[512];
    td_sched_kind kind = schedule_kind(spec);
    int M = spec->schedule.grad_accum, V = spec->layout.virtual_stages;
    if (td_schedule_build(sched, kind, g->axis[TD_PP].size, M, V, err, sizeof err) != 0)
        td_fail("%s", err);
    /* the executor relies on the schedule being consistent: a broken one
     * is a bug, caught here rather than as a hang */
    if (td_schedule_validate(sched, err, sizeof err) != 0)
        td_fail("internal: the %s schedule for pp %d, %d micro-batches, %d chunks is invalid: %s",
                td_sched_name(kind), g->axis[TD_PP].size, M, V, err);
    ramp_peaks(spec, g, Bm, sched);
    if (!spec->layout.pp_partition_auto) {
        td_pp_split_parse(sp, spec->layout.pp_partition, cfg->L, g->axis[TD_PP].size, V);
        if (g->world_rank == 0) print_split(sp, sched, M);
        return;
    }
    double c[3] = {0, 0, 0};
    if (g->world_rank == 0)
        measure_costs(cfg, Bm, spec->precision.recompute == TD_RECOMPUTE_BLOCK, &c[0], &c[1],
                      &c[2]);
    float cf[3] = {(float)c[0], (float)c[1], (float)c[2]};
    td_broadcast(g->world, cf, 3, TD_F32, 0); /* every rank splits alike */
    for (int i = 0; i < 3; i++) c[i] = cf[i];
    double blocks[TD_MAX_LAYERS];
    for (int l = 0; l < cfg->L; l++) blocks[l] = c[1];
    double worst = td_pp_split_auto(sp, blocks, c[0], c[2], cfg->L, g->axis[TD_PP].size, V);
    if (g->world_rank != 0) return;
    print_split(sp, sched, M);
    td_log("pipeline: --pp-partition auto: measured per micro-batch (forward + backward, tp 1%s): "
           "embedding %.2f ms, block %.2f ms, head %.2f ms; predicted stage times:",
           spec->precision.recompute == TD_RECOMPUTE_BLOCK
               ? ", blocks with their recomputed forward"
               : "",
           c[0], c[1], c[2]);
    for (int v = 0; v < sp->P * sp->V; v++) {
        double t = (sp->first[v + 1] - sp->first[v]) * c[1] + (v == 0 ? c[0] : 0) +
                   (v == sp->P * sp->V - 1 ? c[2] : 0);
        td_log(" %.2f", t);
    }
    td_log(" ms (slowest %.2f)\n", worst);
}

void td_pipeline_report(const td_grid *g, const td_schedule *sched, const td_pp_stats *st,
                        td_run_result *res) {
    /* each stage's figures from its (dp 0, cp 0, tp 0) rank, summed over the world */
    int P = g->axis[TD_PP].size,
        lead = g->axis[TD_DP].rank == 0 && g->axis[TD_CP].rank == 0 && g->axis[TD_TP].rank == 0;
    enum { STEP, COMPUTE, WAIT, SEND, F, B, W, NF };
    float *v = td_alloc(sizeof(float) * (size_t)(P * NF), TD_MEM_OTHER);
    memset(v, 0, sizeof(float) * (size_t)(P * NF));
    if (lead && st->steps > 0) {
        float *x = v + g->axis[TD_PP].rank * NF, n = (float)st->steps;
        x[STEP] = (float)st->step_ms / n, x[COMPUTE] = (float)st->compute_ms / n;
        x[WAIT] = (float)st->wait_ms / n, x[SEND] = (float)st->send_ms / n;
        x[F] = (float)st->fwd_ms / n, x[B] = (float)st->bwd_ms / n, x[W] = (float)st->wgrad_ms / n;
    }
    td_allreduce(g->world, v, (size_t)(P * NF), TD_F32, TD_SUM);
    double bubble = 0, tf = 0, tb = 0, tw = 0;
    int M = sched->M, V = sched->V;
    for (int s = 0; s < P; s++) {
        const float *x = v + s * NF;
        double b = x[COMPUTE] > 0 ? (x[STEP] - x[COMPUTE]) / x[COMPUTE] : 0;
        if (s < TD_MAX_PP_REPORT) res->pp_stage_bubble[s] = b;
        bubble += b / P;
        /* per micro-batch chunk, averaged over stages */
        tf += x[F] / (M * V) / P, tb += x[B] / (M * V) / P, tw += x[W] / (M * V) / P;
    }
    if (sched->kind != TD_SCHED_ZBH1) tb += tw, tw = 0; /* a whole backward is one action */
    res->pp_bubble = bubble;
    res->pp_bubble_theory = td_schedule_bubble_theory(sched->kind, P, M, V, tf, tb, tw);
    if (g->world_rank == 0) {
        td_log("pipeline bubble: measured %.3f (mean over stages of (step - compute) / compute), "
               "theory %.3f", bubble, res->pp_bubble_theory);
        if (sched->kind == TD_SCHED_ZBH1)
            td_log(" from T_F %.2f, T_B %.2f, T_W %.2f ms", tf, tb, tw);
        td_log("\n");
        for (int s = 0; s < P; s++) {
            const float *x = v + s * NF;
            char w[48] = "";
            if (sched->kind == TD_SCHED_ZBH1) snprintf(w, sizeof w, ", weight %.2f", x[W]);
            td_log("  stage %d: step %.2f ms = compute %.2f (forward %.2f, backward %.2f%s) + waiting %.2f "
                   "+ sends %.2f + other %.2f; bubble %.3f\n",
                   s, x[STEP], x[COMPUTE], x[F], x[B], w,
                   x[WAIT], x[SEND], x[STEP] - x[COMPUTE] - x[WAIT] - x[SEND],
                   s < TD_MAX_PP_REPORT ? res->pp_stage_bubble[s] : 0.0);
        }
    }
    td_free(v);
}
