/* param_slices: "slice s of every unit" of a parameter table's flat layout.
 *
 * Sharded placements (ZeRO over dp ranks, parameter servers; later the
 * planner and resharding checkpoints) split every unit of the padded flat
 * buffer into `parts` equal slices (the table pads each unit to a multiple
 * of unit_align, which the caller makes a multiple of parts); part s owns
 * slice s of each unit, and its shard packs those slices unit after unit.
 * Pure functions of the table: no MPI, no allocation. */
#ifndef TRIDENT_PARAM_SLICES_H
#define TRIDENT_PARAM_SLICES_H

#include <stddef.h>

#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flat offset of part s's slice of unit u; its length in *len. */
size_t td_param_unit_slice(const td_param_table *t, int u, int parts, int s, size_t *len);
/* The pieces of unit u, in flat order, each of one kind: under expert
 * parallelism (t->ep > 1) the expert stack (the TD_SPLIT_EXPERT rows,
 * consecutive) is a piece of its own between the dense rows before and
 * after it, since its gradient is summed over other ranks; padding goes
 * with the row before it. Without ep, or in a unit without experts, the
 * unit is one piece (an empty unit too). Fills lo, len and expert (1: the
 * expert stack) and returns the count, at most TD_UNIT_PIECES. */
#define TD_UNIT_PIECES 3
int td_param_unit_pieces(const td_param_table *t, int u, size_t lo[TD_UNIT_PIECES], size_t len[TD_UNIT_PIECES],
                         int expert[TD_UNIT_PIECES]);
/* Part s's slices from the flat buffer into packed form, and back. */
void td_param_slices_pack(const td_param_table *t, int parts, int s, const float *flat,
                          float *packed);
void td_param_slices_unpack(const td_param_table *t, int parts, int s, const float *packed,
                            float *flat);

#ifdef __cplusplus
}
#endif

#endif
