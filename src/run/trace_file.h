/* `--trace FILE`: every rank's timeline (trident/timeline.h) in one Chrome
 * trace-event JSON file, one lane per world rank. */
#ifndef TRIDENT_TRACE_FILE_H
#define TRIDENT_TRACE_FILE_H

#include "trident/grid.h"

/* Collective over g->world; call right after a barrier on the world so the
 * ranks' epochs line up: enables the timeline with
 * TD_TIMELINE_DEFAULT_CAPACITY events per rank. */
void td_trace_file_start(const td_grid *g);
/* Collective over g->world: serializes this rank's events, disables the
 * timeline, gathers every rank's text to world rank 0, which writes
 * {"traceEvents":[...],"displayTimeUnit":"ms"} to path.tmp and renames it to
 * path (a reader never sees half a file). Dropped events are reported on
 * stderr with their count per rank. A failed create, write, flush, close or
 * rename (a full disk) removes path.tmp, leaves path as it was, and returns
 * its errno on rank 0 with what failed in why (which the caller reports;
 * the run's ranks agree on it afterwards); 0 on success and on every other
 * rank. */
int td_trace_file_write(const char *path, const td_grid *g, char *why, size_t cap);

#endif
