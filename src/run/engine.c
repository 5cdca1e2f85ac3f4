/* The two engines of engine.h: plain (every micro-batch forward then
 * backward on this rank's whole model) and pipeline (the schedule's
 * executor, pp.c). */
#include "engine.h"

#include <stdio.h>

#include "trident/base.h"
#include "trident/cp.h"
#include "trident/fault.h"
#include "trident/timeline.h"

/* The data is read into c->in, c->tg (whole sequences); under cp each
 * sequence's two local chunks are then taken into in, tg (which may be
 * c->in, c->tg: the copy moves rows only towards the front). */
void td_engine_batch(const td_engine_ctx *c, int split, int step, int mb, int *in, int *tg) {
    const td_axis *cp = &c->g->axis[TD_CP];
    int *rin = cp->size > 1 ? c->in : in, *rtg = cp->size > 1 ? c->tg : tg;
    td_data_batch(c->data, split, c->spec->schedule.seed, step,
                  c->g->axis[TD_DP].rank * c->Bl + mb * c->Bm, c->Bm, c->spec->model.cfg.T, rin,
                  rtg);
    td_gpt_set_documents(c->model, rin); /* whole sequences: global positions */
    if (c->loss_eod >= 0) td_doc_mask_targets(rtg, (size_t)c->Bm * (size_t)c->spec->model.cfg.T, c->loss_eod);
    if (cp->size > 1) {
        td_cp_take_local(in, rin, c->Bm, c->spec->model.cfg.T, cp->size, cp->rank, sizeof(int));
        td_cp_take_local(tg, rtg, c->Bm, c->spec->model.cfg.T, cp->size, cp->rank, sizeof(int));
    }
}

double td_engine_targets(const td_engine_ctx *c, int split, int step, int batch) {
    int T = c->spec->model.cfg.T;
    if (c->loss_eod < 0) return (double)batch * T;
    size_t n = (size_t)batch * (size_t)T;
    int *in = td_alloc(2 * n * sizeof(int), TD_MEM_OTHER);
    td_data_batch(c->data, split, c->spec->schedule.seed, step, 0, batch, T, in, in + n);
    long kept = td_doc_mask_targets(in + n, n, c->loss_eod);
    td_free(in);
    return (double)kept;
}

/* ---- plain: pp = 1 ---- */

static double plain_train_step(td_engine_ctx *c, int step, float dloss, td_grad_watch *watch,
                               const td_param *fault_row) {
    int *in = c->in, *tg = c->tg;
    double loss_sum = 0.0;
    for (int k = 0; k < c->K; k++) {
        td_dp_begin_micro(c->dp, k, c->K);
        double t = td_timeline_mark_start();
        td_engine_batch(c, 0, step, k, in, tg);
        td_timeline_mark("data", "data", k, t);
        t = td_timeline_mark_start();
        loss_sum += td_gpt_forward(c->model, in, tg);
        td_timeline_mark("F", "compute", k, t);
        if (k == 0) td_fault_signal_at(step, c->g->world_rank); /* test faults kill / stop */
        t = td_timeline_mark_start();
        watch->micro = k;
        watch->fault_row = k == c->K - 1 ? fault_row : NULL;
        td_gpt_backward(c->model, dloss);
        td_timeline_mark("B", "compute", k, t);
    }
    return loss_sum;
}

static double plain_eval_batch(td_engine_ctx *c, int it) {
    int *in = c->in, *tg = c->tg;
    double sum = 0.0;
    for (int k = 0; k < c->K; k++) {
        td_engine_batch(c, 1, it, k, in, tg);
        sum += td_gpt_forward(c->model, in, tg);
    }
    return sum;
}

static td_comm *no_group(const td_engine_ctx *c) {
    (void)c;
    return NULL;
}

/* ---- pipeline: the schedule's executor ---- */

typedef struct {
    td_engine_ctx *c;
    int split, step;
} batch_at;

static void pp_batch(void *ctx, int mb, int *in, int *tg) {
    batch_at *b = ctx;
    td_engine_batch(b->c, b->split, b->step, mb, in, tg);
}

static double pipeline_train_step(td_engine_ctx *c, int step, float dloss, td_grad_watch *watch,
                                  const td_param *fault_row) {
    batch_at b = {c, 0, step};
    watch->fault_row = fault_row; /* the micro-batch of a unit event is not known here */
    td_pp_set_micro(c->pp, c->K); /* --batch-rampup changes it step by step */
    return td_pp_train_step(c->pp, step, dloss, pp_batch, &b);
}

static double pipeline_eval_batch(td_engine_ctx *c, int it) {
    batch_at b = {c, 1, it};
    return td_pp_forward_only(c->pp, c->K, pp_batch, &b); /* the last stage's loss, 0 elsewhere */
}

static td_comm *pp_group(const td_engine_ctx *c) { return c->g->axis[TD_PP].comm; }

static void pp_timing_reset(td_engine_ctx *c) { td_pp_stats_reset(c->pp); }

static const td_engine PLAIN = {"plain", plain_train_step, plain_eval_batch, no_group, NULL};
static const td_engine PIPELINE = {"pipeline", pipeline_train_step, pipeline_eval_batch, pp_group,
                                   pp_timing_reset};

const td_engine *td_engine_for(const td_engine_ctx *c) { return c->pp ? &PIPELINE : &PLAIN; }
