/* `trident plan`'s output (plan_out.c): the ranked table or JSON, the
 * ZeRO-3-only plan beside the best, and the `trident train` command that
 * runs a plan. Prints to stdout; never exits. */
#ifndef TRIDENT_PLANNER_PLAN_OUT_H
#define TRIDENT_PLANNER_PLAN_OUT_H

#include <stddef.h>

#include "trident/planner.h"

typedef struct {
    const td_plan_model *m;
    const td_plan_cluster *c; /* its validation: NULL when none applies */
    int batch;                /* global batch, sequences */
    int threads;              /* --cluster local: threads per rank; 0 elsewhere */
    int fixed;                /* some layout choice was fixed by a flag */
    const char *no_band;      /* why c has no validation (when it has none) */
    int overridden;           /* a figure of c's preset was overridden by a flag */
} td_plan_out;

void td_plan_print_table(const td_plan_out *o, const td_plan_result *r, int top);
void td_plan_print_json(const td_plan_out *o, const td_plan_result *r, int top);
/* Plan 1 beside the best ZeRO-3-only plan (tp = pp = 1), when plan 1 uses
 * tp or pp: its costs and why it computes longer, or why it is faster and
 * still not ranked. */
void td_plan_print_zero3(const td_plan_out *o, const td_plan_eval *best);
/* The `mpirun -np N trident train ...` line of the fastest plan train runs
 * (plan 1, unless it uses what train does not implement). */
void td_plan_print_command(const td_plan_out *o, const td_plan_result *r);
/* The train command of layout l into buf: 0, or -1 with *why (nothing that
 * train runs: selective recomputation, sizes beyond train's limits). */
int td_plan_train_command(const td_plan_out *o, const td_plan_layout *l, char *buf, size_t n, const char **why);

/* A mixture-of-experts model: the best plan with ep > 1 beside the best
 * with ep = 1 (under the fixed choices, --ep set aside), their costs and
 * memory, and the preset's published runs (n_pub of pub): the published
 * layout as the planner predicts it when this is the run's model,
 * cluster, devices and batch, and predicted / published TFLOP/s per GPU. */
void td_plan_print_moe(const td_plan_out *o, const td_plan_fixed *fix, const td_plan_published *pub, int n_pub);

#endif
