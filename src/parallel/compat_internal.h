/* The rows of the combination table (compat.c) that live in
 * compat_recipes.c: what a device other than cpu does not run yet, and the
 * training recipes' (Muon, batch ramp-up). Internal to those two files;
 * compat.c's rows table names them. */
#ifndef TRIDENT_COMPAT_INTERNAL_H
#define TRIDENT_COMPAT_INTERNAL_H

#include <stddef.h>

#include "trident/compat.h"

#define TD_ROW_FUNCS(name)                                                                         \
    int ok_##name(const td_compat_cfg *c);                                                        \
    void say_##name(const td_compat_cfg *c, char *buf, size_t n);
TD_ROW_FUNCS(topk_device)
TD_ROW_FUNCS(muon_layout)
TD_ROW_FUNCS(muon_device)
TD_ROW_FUNCS(rampup_layout)
TD_ROW_FUNCS(doc_positions_mask)
TD_ROW_FUNCS(rampup_divides)
void brief_rampup_divides(const td_compat_cfg *c, char *buf, size_t n);
TD_ROW_FUNCS(rampup_interleaved)
void brief_rampup_interleaved(const td_compat_cfg *c, char *buf, size_t n);
#undef TD_ROW_FUNCS

#endif
