/* The state of a pipelined model, unit by unit, on world rank 0: the stage
 * holding a unit puts its dp shards and tp slices together (tp.c), and its
 * (dp 0, cp 0, tp 0) rank sends the unit, in the canonical layout, to world rank
 * 0 (pp rank 0 of the same pp group). */
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/pipeline.h"

static int holds_all(const td_param_table *t) {
    for (int u = 0; u < t->n_units; u++)
        if (!t->held[u]) return 0;
    return 1;
}

static size_t max_unit(const td_param_table *t) {
    size_t n = 0;
    for (int u = 0; u < t->n_units; u++) n = td_max_sz(n, td_unit_numel(t, u));
    return n;
}

size_t td_pp_gather_scratch_floats(const td_param_table *t, const td_param_table *canon) {
    size_t n = td_tp_gather_scratch_floats(t, canon);
    return holds_all(t) ? n : n + max_unit(canon);
}

const float *td_pp_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t,
                               const td_param_table *canon, int section, int u, float *scratch,
                               const td_param_table **layout) {
    if (g->axis[TD_PP].size == 1)
        return td_tp_gather_unit(dp, g, t, canon, section, u, scratch, layout);
    *layout = canon;
    /* the first stage holding the unit (the tied embedding: stage 0) */
    float neg =
        -(float)(t->held[u] ? g->axis[TD_PP].rank : g->axis[TD_PP].size); /* MAX of -stage = MIN */
    td_allreduce(g->axis[TD_PP].comm, &neg, 1, TD_F32, TD_MAX);
    float owner = -neg;
    float *out = scratch + td_tp_gather_scratch_floats(t, canon);
    size_t n = td_unit_numel(canon, u);
    const float *b = NULL;
    if (g->axis[TD_PP].rank == (int)owner) {
        const td_param_table *in;
        b = td_tp_gather_unit(dp, g, t, canon, section, u, scratch, &in);
        if (b && in == t) { /* tp 1: this stage's padded layout -> canonical */
            for (int i = 0; i < t->n_rows; i++)
                if (t->rows[i].unit == u)
                    memcpy(out + (canon->rows[i].offset - canon->unit_offset[u]),
                           b + (t->rows[i].offset - t->unit_offset[u]), t->rows[i].numel * sizeof(float));
            b = out;
        }
    }
    if ((int)owner == 0) return g->world_rank == 0 ? b : NULL;
    if (g->axis[TD_DP].rank != 0 || g->axis[TD_CP].rank != 0 || g->axis[TD_TP].rank != 0) return NULL;
    if (g->axis[TD_PP].rank == (int)owner) td_send(g->axis[TD_PP].comm, b, n, TD_F32, 0, u);
    if (g->axis[TD_PP].rank != 0) return NULL;
    td_recv(g->axis[TD_PP].comm, out, n, TD_F32, (int)owner, u);
    return out;
}
