/* The planner's search: every valid layout, evaluated, the ones that fit
 * ranked by step time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/planner.h"
#include "trident/schedule.h"

void td_plan_fixed_init(td_plan_fixed *f) {
    memset(f, 0, sizeof *f);
    f->zero = f->sched = f->rc = f->sp = -1;
}

int td_plan_check(const td_plan_model *m, const td_plan_cluster *c, int global_batch, int tp_across_nodes,
                  const td_plan_layout *l, char *why, size_t n) {
#define BAD(...) return snprintf(why, n, __VA_ARGS__), -1
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->micro_batch < 1 || l->micro_batches < 1)
        BAD("sizes must be >= 1");
    if ((long)l->dp * l->tp * l->pp != c->gpus)
        BAD("dp %d x tp %d x pp %d is not the %d devices", l->dp, l->tp, l->pp, c->gpus);
    if (m->H % l->tp) BAD("tp %d does not divide the %d heads", l->tp, m->H);
    if (l->tp > c->gpus_per_node && !tp_across_nodes) BAD("tp %d spans more than a node's %d devices", l->tp, c->gpus_per_node);
    if (m->L % l->pp) BAD("pp %d does not divide the %d layers", l->pp, m->L);
    if ((long)l->dp * l->micro_batch * l->micro_batches != global_batch)
        BAD("dp %d x micro-batch %d x %d micro-batches is not the global batch %d", l->dp, l->micro_batch,
            l->micro_batches, global_batch);
    if (l->zero < 0 || l->zero > 3) BAD("zero %d is not a stage", l->zero);
    if (l->zero >= 2 && l->pp > 1) BAD("zero %d shards per micro-batch, which a pipeline interleaves", l->zero);
    if (l->sp && l->tp < 2) BAD("sequence parallelism needs tp >= 2");
    if (l->rc < TD_PLAN_RC_NONE || l->rc > TD_PLAN_RC_FULL) BAD("unknown recompute mode");
    if (l->pp == 1 && l->sched != TD_PLAN_NO_SCHED) BAD("a schedule needs pp > 1");
    if (l->pp > 1 && l->sched != TD_SCHED_GPIPE && l->sched != TD_SCHED_1F1B && l->sched != TD_SCHED_INTERLEAVED)
        BAD("pp %d needs a schedule: gpipe, 1f1b or interleaved", l->pp);
    if (l->sched == TD_SCHED_INTERLEAVED) {
        if (l->v < 2) BAD("interleaved needs 2 or more chunks per stage");
        if (m->L % (l->pp * l->v)) BAD("pp %d x %d chunks does not divide the %d layers", l->pp, l->v, m->L);
        if (l->micro_batches % l->pp) BAD("interleaved needs micro-batches a multiple of pp %d", l->pp);
    } else if (l->v != 1) BAD("chunks per stage other than 1 need the interleaved schedule");
    return 0;
#undef BAD
}

/* Fastest first; steps equal to float precision (a comm-bound step does not
 * change with the compute beside it) go to the smaller memory. */
static int cmp_step(const void *a, const void *b) {
    const td_plan_eval *p = a, *q = b;
    float x = (float)p->step_s, y = (float)q->step_s;
    if (x != y) return x < y ? -1 : 1;
    return p->mem_bytes < q->mem_bytes ? -1 : p->mem_bytes > q->mem_bytes;
}

/* check_batch: the global batch the layout's sizes must add up to (dp x
 * ceil(global / dp) for an uneven ZeRO-3-only split) */
static void consider(const td_plan_model *m, const td_plan_cluster *c, int global_batch, int check_batch,
                     const td_plan_fixed *fix, const td_plan_layout *l, td_plan_result *r, size_t *cap) {
    char why[160];
    if (td_plan_check(m, c, check_batch, fix->tp_across_nodes, l, why, sizeof why) != 0) {
        if (!r->invalid++) snprintf(r->first_invalid, sizeof r->first_invalid, "%s", why);
        return;
    }
    td_plan_eval e;
    td_plan_evaluate(m, c, global_batch, l, &e);
    if (e.mem_bytes > c->mem_bytes) {
        if (!r->too_big++ || e.mem_bytes < r->smallest_too_big) r->smallest_too_big = e.mem_bytes;
        return;
    }
    if ((size_t)r->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        r->plans = realloc(r->plans, *cap * sizeof *r->plans);
    }
    r->plans[r->n++] = e;
}

/* fixed value, or every value in [lo, hi] */
#define EACH(var, fixedv, unset, lo, hi) \
    for (int var = (fixedv) != (unset) ? (fixedv) : (lo); var <= ((fixedv) != (unset) ? (fixedv) : (hi)); var++)

void td_plan_search(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                    const td_plan_fixed *fix, td_plan_result *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 0;
    int N = c->gpus;
    for (int tp = 1; tp <= N; tp++) {
        if (N % tp || (fix->tp && tp != fix->tp) || (fix->zero3_only && tp != 1)) continue;
        for (int pp = 1; pp <= N / tp; pp++) {
            if ((N / tp) % pp || (fix->pp && pp != fix->pp) || (fix->zero3_only && pp != 1)) continue;
            int dp = N / tp / pp;
            if (fix->dp && dp != fix->dp) continue;
            int uneven = fix->zero3_only && global_batch % dp;
            int local = uneven ? (global_batch + dp - 1) / dp : global_batch / dp;
            if (!uneven && global_batch % dp) { /* one reason for the whole family */
                if (!r->invalid++)
                    snprintf(r->first_invalid, sizeof r->first_invalid, "dp %d does not divide the global batch %d",
                             dp, global_batch);
                continue;
            }
            /* pp = 1 has no schedule; else the fixed one or each */
            int s_lo = pp == 1 ? TD_PLAN_NO_SCHED : fix->sched >= 0 ? fix->sched : TD_SCHED_GPIPE;
            int s_hi = pp == 1 ? TD_PLAN_NO_SCHED : fix->sched >= 0 ? fix->sched : TD_SCHED_INTERLEAVED;
            for (int b = 1; b <= local; b++) {
                if (local % b || (fix->micro_batches && local / b != fix->micro_batches)) continue;
                EACH(zero, fix->zero3_only ? 3 : fix->zero, -1, 0, dp > 1 ? 3 : 0)
                EACH(rc, fix->rc, -1, TD_PLAN_RC_NONE, TD_PLAN_RC_FULL)
                EACH(sp, fix->sp, -1, 0, tp > 1)
                for (int sched = s_lo; sched <= s_hi; sched++)
                for (int v = 1; v <= (sched == TD_SCHED_INTERLEAVED ? m->L / pp : 1); v++) {
                    /* chunk counts that do not divide a stage's layers are no layout to report */
                    if (sched == TD_SCHED_INTERLEAVED && (v < 2 || (fix->v && v != fix->v) || (m->L / pp) % v))
                        continue;
                    td_plan_layout l = {dp, tp, pp, zero, b, local / b, sched, v, rc, sp};
                    consider(m, c, global_batch, dp * local, fix, &l, r, &cap);
                }
            }
        }
    }
    if (r->n > 1) qsort(r->plans, (size_t)r->n, sizeof *r->plans, cmp_step); /* qsort wants a non-null base */
}

void td_plan_result_free(td_plan_result *r) {
    free(r->plans);
    memset(r, 0, sizeof *r);
}
