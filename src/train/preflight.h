/* Start-of-run checks: everything a user gave that can be checked before
 * the first step is checked here, so no run trains for an hour and then
 * fails on its output path, its prompt or its memory (DESIGN.md
 * principle 7). */
#ifndef TRIDENT_PREFLIGHT_H
#define TRIDENT_PREFLIGHT_H

#include <stddef.h>

#include "trident/data.h"
#include "trident/grid.h"
#include "trident/train.h"

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
 * (TRIDENT_MEMORY_LIMIT overrides the detected figure). A failure on any
 * rank ends the job with exactly one "trident: error:" line, from the
 * lowest failing rank. */
td_preflight_result td_preflight(const td_train_opts *o, const td_grid *g, const td_gpt_config *cfg,
                                 const td_dataset *d, const td_mem_plan *plan, int Bm);

#endif
