/* run: one training run as an object. td_run_open builds what a run holds
 * (grid, data, parameter tables, memory plan, model, strategy, engine,
 * report), td_run_start resumes and handles what ends a run before its
 * first step, td_run_step trains one optimizer step, td_run_eval evaluates,
 * td_run_boundary saves and stops between steps, td_run_close reports,
 * saves the last checkpoint and frees it all. td_run_train (run_spec.h) is the
 * loop over these; the layout decided every branch once, at open.
 *
 * Every call is collective over the world (servers included) unless it
 * says otherwise, in this order: open, start, then per step: step, eval
 * when due, boundary; close. The run owns every member; `spec` and `res` are
 * the caller's. A failure is a user error (TD_CHECK) or a stop recorded in
 * res (stop_step, stop_msg), as td_run_train documents. */
#ifndef TRIDENT_RUN_RUN_H
#define TRIDENT_RUN_RUN_H

#include "divergence.h"
#include "engine.h"
#include "grad_watch.h"
#include "mem_plan.h"
#include "report.h"
#include "trident/ep.h"
#include "trident/cp.h"
#include "trident/data.h"
#include "trident/grid.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/parallel.h"
#include "trident/pipeline.h"
#include "trident/schedule.h"
#include "trident/run_spec.h"

typedef struct {
    const td_run_spec *spec;
    td_run_result *res;
    td_grid g;
    td_dataset data;             /* its tokenizer is the checkpoints' */
    td_gpt_config cfg;
    td_param_table table;        /* this rank's layout */
    td_param_table canon;        /* one process's layout (gathered saves, samples) */
    td_mem_plan plan;
    int piped;                   /* pp > 1: sched, split and held are set */
    td_schedule sched;
    td_pp_split split;
    unsigned char held[TD_MAX_LAYERS + 2];
    td_gpt model;                /* training ranks only */
    td_tp_comm tpc;
    td_cp_ring *ring;            /* context parallelism's (cp > 1), else NULL */
    int doc_eod;                 /* document masking's end-of-text id; -1: off */
    td_ep ep;                    /* a mixture of experts' communication (moe.E > 0) */
    td_dp *dp;
    td_pp *pp;                   /* NULL without a pipeline */
    td_loss_scaler scaler;
    td_report rep;
    int agreed_stops;            /* td_dp_agreed_stops: a stop can be agreed between steps */
    /* the step's parts (training ranks): */
    td_engine_ctx ec;
    const td_engine *engine;
    td_comm *loss_group;         /* the engine's; NULL: every rank holds its replica's loss */
    td_grad_watch watch;
    td_divergence div;
    int first;                   /* the step this process starts at (a resume's) */
    double timed_ms, grad_sent, grad_dense;
    double cp_wait_ms;           /* the ring's waits in the timed steps */
} td_run;

/* What td_run_step says of the step. */
typedef enum {
    TD_RUN_NEXT,  /* done: evaluate when due, then td_run_boundary */
    TD_RUN_RETRY, /* skipped on an overflow (dynamic loss scaling): run the same step again */
    TD_RUN_STOP,  /* the run stopped at this step (res says why): go to td_run_close */
} td_run_status;

/* Checks the flags against the rules table, builds the grid, loads the
 * data, plans memory, runs the preflight and creates model and strategy.
 * Returns 0 when a stop signal arrived while the data loaded (the run is
 * freed, res->stopped_startup = 1; call nothing more), else 1. */
int td_run_open(td_run *r, const td_run_spec *spec, td_run_result *res);
/* Training ranks: --resume, start-up's last stop point, --overwrite, a
 * checkpoint converted by --stop-after at the resumed step, and
 * trident eval's layout pass. Returns 1 when steps from r->first on are
 * to be trained, 0 when the run trains none. Collective over the training
 * ranks. */
int td_run_start(td_run *r);
/* One optimizer step (training ranks): forward-backward through the
 * engine, the strategy's reduction and update, the global loss, the
 * report line; a non-finite loss or gradient and --max-loss stop here. */
td_run_status td_run_step(td_run *r, int step);
/* Whether td_run_eval is due after `step` (--eval-every, and the last step). */
int td_run_eval_due(const td_run *r, int step);
/* The validation loss after `step` (training ranks), reported; the last
 * step's is res->final_val_loss. */
void td_run_eval(td_run *r, int step);
/* Between steps (training ranks): --save-every's checkpoint, then
 * --stop-after, a stop signal or a failed --log write. Returns 1 when the
 * run stops here. */
int td_run_boundary(td_run *r, int step);
/* The run's end: timing and traffic into res, the summary, the final
 * checkpoint and sample (a run that trained), the state on rank 0 for
 * tests (keep_state), the trace, the memory report; frees the run. */
void td_run_close(td_run *r, int keep_state);

#endif
