/* The guard device's two halves: guard.c (buffers, enter and leave, the
 * fault handler) and guard_ops.c (the ops rows and their extent rules).
 * Not a public header: src/backend only. */
#ifndef TRIDENT_GUARD_INTERNAL_H
#define TRIDENT_GUARD_INTERNAL_H

#include "trident/backend.h"

/* Open the pages r[0..n) span (a new frame) and close that frame's. */
void td_guard_enter(const td_dev_range *r, int n);
void td_guard_leave(void);

/* Build the three rows over the CPU's (td_fail when a CPU entry has no
 * GUARD_OPS line or its line no extent rule) and look one up. */
void td_guard_build_rows(void);
const td_ops *td_guard_row(td_ktype k);

#endif
