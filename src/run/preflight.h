/* Start-of-run checks: everything a user gave that can be checked before
 * the first step is checked here, so no run trains for an hour and then
 * fails on its output path, its prompt or its memory (docs/design.md
 * principle 7). */
#ifndef TRIDENT_PREFLIGHT_H
#define TRIDENT_PREFLIGHT_H

#include <stddef.h>

#include "trident/data.h"
#include "trident/grid.h"
#include "trident/run_spec.h"

typedef struct {
    size_t rss_baseline;   /* resident set at the check: before the model is allocated */
    size_t alloc_baseline; /* the accounting allocator's bytes then (the data) */
} td_preflight_result;

/* Collective over the world; call it once the grid, the config and the
 * per-rank memory plan (activations included) are known and before any
 * large allocation. Checks --out (created if missing, then a probe file
 * written, fsynced and removed), --log (writable; not the data, not a
 * checkpoint file, not an existing file that is not a trident log), --trace
 * (the same, and FILE.tmp creatable for the atomic write),
 * --sample-prompt (every character in the vocabulary), sizes that would
 * overflow, and the plan against the memory this rank may use
 * (TRIDENT_MEMORY_LIMIT overrides the detected figure for the node,
 * TRIDENT_MEMORY_LIMIT_PER_RANK sets each rank's own). A failure on any
 * rank ends the job with exactly one "trident: error:" line, from the
 * lowest failing rank. */
td_preflight_result td_preflight(const td_run_spec *spec, const td_grid *g, const td_gpt_config *cfg,
                                 const td_dataset *d, const td_mem_plan *plan, int Bm);

/* Pipeline parallelism (pipeline_setup.c): builds and validates the
 * schedule and splits the blocks over the stages (--pp-partition auto
 * measures on rank 0; collective over the world then). A user error is one
 * line and exit before any model memory is allocated. */
void td_pipeline_setup(const td_run_spec *spec, const td_grid *g, const td_gpt_config *cfg, int Bm,
                       td_schedule *sched, td_pp_split *sp);
/* The same checks from the flags alone, before the grid is made (no
 * communication yet): the schedule and an explicit or uniform split. */
void td_pipeline_check(const td_run_spec *spec);
/* The bubble of the timed steps: each stage's step time split into compute,
 * waiting and sends, printed by rank 0 beside the schedule's theory (with
 * the measured forward, backward and weight-gradient times) and stored in
 * res. Collective over the world. */
void td_pipeline_report(const td_grid *g, const td_schedule *sched, const td_pp_stats *st,
                        td_run_result *res);

#endif
