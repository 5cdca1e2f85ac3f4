/* The planner's search: every valid layout, evaluated, the ones that fit
 * ranked by step time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/compat.h"
#include "trident/planner.h"
#include "trident/schedule.h"

void td_plan_fixed_init(td_plan_fixed *f) {
    memset(f, 0, sizeof *f);
    f->zero = f->sched = f->rc = f->sp = f->shard = -1;
}

/* The rules table's view of a planned layout: fp32, --dp-mode allreduce,
 * no checkpoint flags (what the planner's layouts are). */
static void compat_of(const td_plan_model *m, const td_plan_layout *l, td_compat_cfg *cc) {
    td_compat_cfg_init(cc);
    cc->dp = l->dp, cc->tp = l->tp, cc->pp = l->pp, cc->zero = l->zero, cc->seq_parallel = l->sp;
    cc->schedule = l->sched, cc->virtual_stages = l->v, cc->micro_batches = l->micro_batches;
    cc->recompute = l->rc == TD_PLAN_RC_FULL; /* the engine recomputes whole blocks */
    cc->seq = m->T, cc->embd = m->C;
    cc->cp = td_plan_cp(l), cc->dp_shard = l->shard;
    cc->experts = m->E, cc->ep = td_plan_ep(l), cc->etp = td_plan_etp(l);
}

int td_plan_check(const td_plan_model *m, const td_plan_cluster *c, int global_batch, int tp_across_nodes,
                  const td_plan_layout *l, char *why, size_t n) {
#define BAD(...) return snprintf(why, n, __VA_ARGS__), -1
    /* a combination the engine refuses: the rules table's row, in the
     * planner's words, where its size checks would have met it */
#define RULE(id) if (!td_compat_rule_ok(id, &cc, why, n)) return -1
    td_compat_cfg cc;
    compat_of(m, l, &cc);
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->micro_batch < 1 || l->micro_batches < 1)
        BAD("sizes must be >= 1");
    if ((long)l->dp * l->tp * l->pp * td_plan_cp(l) != c->gpus)
        BAD("dp %d x tp %d x pp %d x cp %d is not the %d devices", l->dp, l->tp, l->pp, td_plan_cp(l), c->gpus);
    if (m->H % l->tp) BAD("tp %d does not divide the %d heads", l->tp, m->H);
    /* grouped-query attention and a Llama MLP split on their own */
    if (m->KV && m->KV % l->tp) BAD("tp %d does not divide the %d kv heads", l->tp, m->KV);
    if (m->F && m->F % l->tp) BAD("tp %d does not divide the %d MLP features", l->tp, m->F);
    if (l->tp > c->gpus_per_node && !tp_across_nodes) BAD("tp %d spans more than a node's %d devices", l->tp, c->gpus_per_node);
    if (m->L % l->pp) BAD("pp %d does not divide the %d layers", l->pp, m->L);
    if ((long)l->dp * l->micro_batch * l->micro_batches != global_batch)
        BAD("dp %d x micro-batch %d x %d micro-batches is not the global batch %d", l->dp, l->micro_batch,
            l->micro_batches, global_batch);
    if (l->zero < 0 || l->zero > 3) BAD("zero %d is not a stage", l->zero);
    RULE(TD_RULE_ZERO_PP);
    RULE(TD_RULE_SP_TP);
    RULE(TD_RULE_SP_SEQ);
    /* the experts' grid (MoE) */
    RULE(TD_RULE_EP_MOE);
    RULE(TD_RULE_ETP_TP);
    RULE(TD_RULE_EP_EXPERTS);
    RULE(TD_RULE_EP_GRID);
    RULE(TD_RULE_MOE_TP_SP);
    if (m->E > 0 && (m->moe_ffn ? m->moe_ffn : m->F) % td_plan_etp(l))
        BAD("etp %d does not divide the %d expert MLP features", td_plan_etp(l), m->moe_ffn ? m->moe_ffn : m->F);
    if (l->rc < TD_PLAN_RC_NONE || l->rc > TD_PLAN_RC_FULL) BAD("unknown recompute mode");
    if (l->pp == 1 && l->sched != TD_PLAN_NO_SCHED) BAD("a schedule needs pp > 1");
    if (l->pp > 1 && l->sched != TD_SCHED_GPIPE && l->sched != TD_SCHED_1F1B && l->sched != TD_SCHED_INTERLEAVED)
        BAD("pp %d needs a schedule: gpipe, 1f1b or interleaved", l->pp);
    if (l->sched == TD_SCHED_INTERLEAVED) {
        RULE(TD_RULE_INTERLEAVED_CHUNKS);
        if (m->L % (l->pp * l->v)) BAD("pp %d x %d chunks does not divide the %d layers", l->pp, l->v, m->L);
        RULE(TD_RULE_INTERLEAVED_MICRO);
    } else RULE(TD_RULE_CHUNKS_NEED_INTERLEAVED);
    /* every other row too: a rule added to the table reaches the search
     * without a copy here */
    if (td_compat_first(&cc, TD_COMPAT_AT_ANY, why, n) >= 0) return -1;
    return 0;
#undef RULE
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

/* One walk over every layout the fixed choices allow: the search evaluates
 * the valid ones, the fixed-choice check only asks whether one exists. */
typedef struct {
    const td_plan_model *m;
    const td_plan_cluster *c;
    int global_batch;
    const td_plan_fixed *fix;
    td_plan_result *r; /* NULL: only look for a valid layout */
    size_t cap;
    int found; /* a valid layout was seen */
} walk;

/* check_batch: the global batch the layout's sizes must add up to (dp x
 * ceil(global / dp) for an uneven ZeRO-3-only split) */
static void consider(walk *w, int check_batch, const td_plan_layout *l) {
    char why[160];
    td_plan_result *r = w->r;
    if (td_plan_check(w->m, w->c, check_batch, w->fix->tp_across_nodes, l, why, sizeof why) != 0) {
        if (r && !r->invalid++) snprintf(r->first_invalid, sizeof r->first_invalid, "%s", why);
        return;
    }
    w->found = 1;
    if (!r) return;
    td_plan_eval e;
    td_plan_evaluate(w->m, w->c, w->global_batch, l, &e);
    if (e.mem_bytes > w->c->mem_bytes) {
        if (!r->too_big++ || e.mem_bytes < r->smallest_too_big) r->smallest_too_big = e.mem_bytes;
        return;
    }
    if ((size_t)r->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        r->plans = realloc(r->plans, w->cap * sizeof *r->plans);
    }
    r->plans[r->n++] = e;
}

/* fixed value, or every value in [lo, hi] */
#define EACH(var, fixedv, unset, lo, hi) \
    for (int var = (fixedv) != (unset) ? (fixedv) : (lo); var <= ((fixedv) != (unset) ? (fixedv) : (hi)); var++)

/* Hybrid sharding: shards of the gradient group's (dp x cp) members on one
 * node, the replicas across nodes; 0 where that does not split the group. */
static int node_shard(const walk *w, int tp, int G) {
    int k = w->c->gpus_per_node / tp < G ? w->c->gpus_per_node / tp : G;
    return k >= 2 && k < G && G % k == 0 ? k : 0;
}

/* Every choice below the grid's sizes: micro-batching, ZeRO and its
 * sharding, recomputation, sp, the schedule and its chunks. */
static void walk_choices(walk *w, int dp, int tp, int pp, int cp, int local, int ep, int etp) {
    const td_plan_model *m = w->m;
    const td_plan_fixed *fix = w->fix;
    /* pp = 1 has no schedule; else the fixed one or each */
    int s_lo = pp == 1 ? TD_PLAN_NO_SCHED : fix->sched >= 0 ? fix->sched : TD_SCHED_GPIPE;
    int s_hi = pp == 1 ? TD_PLAN_NO_SCHED : fix->sched >= 0 ? fix->sched : TD_SCHED_INTERLEAVED;
    int k = node_shard(w, tp, dp * cp);
    for (int b = 1; b <= local; b++) {
        if (local % b || (fix->micro_batches && local / b != fix->micro_batches)) continue;
        /* ZeRO needs a group to shard over: dp x cp, or (MoE) the experts' edp */
        EACH(zero, fix->zero3_only ? 3 : fix->zero, -1, 0, dp * cp > 1 || (m->E > 0 && tp * cp * dp > ep * etp) ? 3 : 0)
        for (int shard = 0; shard <= (zero > 0 ? k : 0); shard += k ? k : 1) {
            if (fix->shard >= 0 && shard != fix->shard) continue;
            EACH(rc, fix->rc, -1, TD_PLAN_RC_NONE, TD_PLAN_RC_FULL)
            EACH(sp, fix->sp, -1, 0, tp > 1)
            for (int sched = s_lo; sched <= s_hi; sched++)
                for (int v = 1; v <= (sched == TD_SCHED_INTERLEAVED ? m->L / pp : 1); v++) {
                    /* a fixed chunk count is the interleaved schedule's: no
                     * other layout has it; chunk counts that do not divide a
                     * stage's layers are no layout to report */
                    if (fix->v && v != fix->v) continue;
                    if (sched == TD_SCHED_INTERLEAVED && (v < 2 || (m->L / pp) % v)) continue;
                    td_plan_layout l = {dp, tp, pp, zero, b, local / b, sched, v, rc, sp, cp, shard, ep, etp};
                    consider(w, dp * local, &l);
                }
        }
    }
}

/* MoE: the experts' grid within tp x cp x dp: etp dividing tp, ep dividing
 * tp x cp x dp / etp and the experts (td_plan_check asks the rules table
 * all the same); a dense model has ep = etp = 1, or the fixed values
 * (which the table refuses). */
static void walk_experts(walk *w, int dp, int tp, int pp, int cp, int local) {
    const td_plan_fixed *fix = w->fix;
    int moe = w->m->E > 0;
    for (int etp = 1; etp <= (moe ? tp : fix->etp > 1 ? fix->etp : 1); etp++) {
        if ((moe && tp % etp) || (fix->etp && etp != fix->etp)) continue;
        int fold = tp * cp * dp / (moe ? etp : 1);
        for (int ep = 1; ep <= (moe ? fold : fix->ep > 1 ? fix->ep : 1); ep++) {
            if ((moe && (fold % ep || w->m->E % ep)) || (fix->ep && ep != fix->ep)) continue;
            walk_choices(w, dp, tp, pp, cp, local, ep, etp);
        }
    }
}

static void walk_layouts(walk *w) {
    const td_plan_model *m = w->m;
    const td_plan_fixed *fix = w->fix;
    int N = w->c->gpus, global_batch = w->global_batch;
    for (int tp = 1; tp <= N; tp++) {
        if (N % tp || (fix->tp && tp != fix->tp) || (fix->zero3_only && tp != 1)) continue;
        for (int pp = 1; pp <= N / tp; pp++) {
            if ((N / tp) % pp || (fix->pp && pp != fix->pp) || (fix->zero3_only && pp != 1)) continue;
            for (int cp = 1; cp <= N / tp / pp; cp++) {
                if ((N / tp / pp) % cp || (fix->cp && cp != fix->cp) || (fix->zero3_only && cp != 1)) continue;
                if (cp > 1 && m->T % (2 * cp)) continue; /* the load-balanced split needs 2 cp chunks */
                if (!w->r && w->found) return;
                int dp = N / tp / pp / cp;
                if (fix->dp && dp != fix->dp) continue;
                int uneven = fix->zero3_only && global_batch % dp;
                int local = uneven ? (global_batch + dp - 1) / dp : global_batch / dp;
                if (!uneven && global_batch % dp) { /* one reason for the whole family */
                    if (w->r && !w->r->invalid++)
                        snprintf(w->r->first_invalid, sizeof w->r->first_invalid,
                                 "dp %d does not divide the global batch %d", dp, global_batch);
                    continue;
                }
                walk_experts(w, dp, tp, pp, cp, local);
            }
        }
    }
}

void td_plan_search(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                    const td_plan_fixed *fix, td_plan_result *r) {
    memset(r, 0, sizeof *r);
    walk w = {m, c, global_batch, fix, r, 0, 0};
    walk_layouts(&w);
    if (r->n > 1) qsort(r->plans, (size_t)r->n, sizeof *r->plans, cmp_step); /* qsort wants a non-null base */
}

static int feasible(const td_plan_model *m, const td_plan_cluster *c, int global_batch, const td_plan_fixed *fix) {
    walk w = {m, c, global_batch, fix, NULL, 0, 0};
    walk_layouts(&w);
    return w.found;
}

/* The fixed choices one at a time, in flag order; each against the ones
 * before it. */
enum { F_DP, F_TP, F_PP, F_CP, F_ZERO, F_SHARD, F_MB, F_SCHED, F_V, F_RC, F_SP, F_EP, F_ETP, F_N };
static const char *const fixed_flag[F_N] = {"--dp", "--tp", "--pp", "--cp", "--zero", "--dp-shard",
                                            "--micro-batches", "--schedule", "--virtual-stages", "--recompute",
                                            "--sequence-parallel", "--ep", "--moe-etp"};
static int *fixed_field(td_plan_fixed *f, int k) {
    int *p[F_N] = {&f->dp,  &f->tp, &f->pp, &f->cp, &f->zero, &f->shard, &f->micro_batches,
                   &f->sched, &f->v, &f->rc, &f->sp, &f->ep, &f->etp};
    return p[k];
}
static int fixed_unset(int k) {
    return k == F_ZERO || k == F_SHARD || k == F_SCHED || k == F_RC || k == F_SP ? -1 : 0;
}
static void fixed_value(int k, int v, char *buf, size_t n) {
    static const char *rc[] = {"none", "selective", "full"};
    if (k == F_SCHED) snprintf(buf, n, "%s", td_sched_name((td_sched_kind)v));
    else if (k == F_RC) snprintf(buf, n, "%s", rc[v]);
    else if (k == F_SP) buf[0] = 0;
    else snprintf(buf, n, "%d", v);
}

/* Why value v of flag k is no layout, where a rule of td_plan_check says it
 * by itself; NULL otherwise (the combination with the earlier flags). */
static const char *alone(const td_plan_model *m, const td_plan_cluster *c, int batch, const td_plan_fixed *t, int k,
                         int v, char *buf, size_t n) {
    int N = c->gpus;
    if (k <= F_CP && N % v == 0) { /* the devices against dp x tp x pp x cp fixed so far */
        long prod = (long)(t->dp ? t->dp : 1) * (t->tp ? t->tp : 1) * (t->pp ? t->pp : 1) * (t->cp ? t->cp : 1);
        if (N % prod)
            return snprintf(buf, n, "makes dp x tp x pp x cp %ld, which does not divide --gpus %d", prod, N), buf;
        if (t->dp && t->tp && t->pp && t->cp && prod != N)
            return snprintf(buf, n, "makes dp x tp x pp x cp %ld, not --gpus %d", prod, N), buf;
    }
    switch (k) {
    case F_DP:
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (batch % v) return snprintf(buf, n, "does not divide --global-batch %d", batch), buf;
        break;
    case F_TP:
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (m->H % v) return snprintf(buf, n, "does not divide the model's %d heads", m->H), buf;
        if (m->KV && m->KV % v) return snprintf(buf, n, "does not divide the model's %d kv heads", m->KV), buf;
        if (m->F && m->F % v) return snprintf(buf, n, "does not divide the model's %d MLP features", m->F), buf;
        if (v > c->gpus_per_node && !t->tp_across_nodes)
            return snprintf(buf, n, "is more than a node's %d devices (--tp-across-nodes allows it)", c->gpus_per_node),
                   buf;
        break;
    case F_PP:
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (m->L % v) return snprintf(buf, n, "does not divide the model's %d layers", m->L), buf;
        break;
    case F_CP:
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (v > 1 && m->T % (2 * v))
            return snprintf(buf, n, "does not split the sequence %d into %d chunks", m->T, 2 * v), buf;
        break;
    case F_SHARD:
        return snprintf(buf, n, "needs ZeRO 1-3 and shards of a node's members of the gradient group (dp x cp) "
                        "that divide it into 2 or more replicas"), buf;
    case F_MB:
        if (batch % v) return snprintf(buf, n, "does not divide --global-batch %d", batch), buf;
        break;
    case F_SCHED:
        if (v == TD_SCHED_INTERLEAVED)
            return snprintf(buf, n, "needs pp > 1 with pp x 2 or more chunks dividing the %d layers and "
                            "micro-batches a multiple of pp", m->L), buf;
        break;
    case F_V:
        return snprintf(buf, n, "chunks per stage: interleaved needs pp > 1 with pp x %d dividing the %d layers and "
                        "micro-batches a multiple of pp", v, m->L), buf;
    case F_SP:
        return snprintf(buf, n, "needs tp >= 2 dividing the %d heads and the sequence %d", m->H, m->T), buf;
    case F_EP: /* the rules table's ep-moe is refused before the search (plan_cmd.c) */
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (m->E > 0 && m->E % v) return snprintf(buf, n, "does not divide the model's %d experts", m->E), buf;
        break;
    case F_ETP:
        if (N % v) return snprintf(buf, n, "does not divide --gpus %d", N), buf;
        if (m->E > 0 && (m->moe_ffn ? m->moe_ffn : m->F) % v)
            return snprintf(buf, n, "does not divide the model's %d expert MLP features",
                            m->moe_ffn ? m->moe_ffn : m->F), buf;
        if (t->tp && t->tp % v) return snprintf(buf, n, "does not divide --tp %d", t->tp), buf;
        break;
    default: break;
    }
    return NULL;
}

int td_plan_fixed_check(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                        const td_plan_fixed *fix, char *why, size_t whylen) {
    td_plan_fixed before; /* the flags accepted so far */
    td_plan_fixed_init(&before);
    before.tp_across_nodes = fix->tp_across_nodes;
    char ctx[160] = "";
    for (int k = 0; k < F_N; k++) {
        td_plan_fixed *f = (td_plan_fixed *)fix; /* read only */
        int v = *fixed_field(f, k);
        if (v == fixed_unset(k)) continue;
        td_plan_fixed t = before;
        *fixed_field(&t, k) = v;
        if (feasible(m, c, global_batch, &t)) {
            before = t;
            char val[32];
            fixed_value(k, v, val, sizeof val);
            size_t len = strlen(ctx);
            snprintf(ctx + len, sizeof ctx - len, " %s%s%s", fixed_flag[k], *val ? " " : "", val);
            continue;
        }
        /* the values that would do, with the flags before it */
        char valid[200] = "", val[32], reason[200];
        int lo = k == F_V ? 2 : k == F_ZERO || k == F_SHARD || k == F_SCHED || k == F_RC ? 0 : 1;
        int hi = k <= F_CP || k == F_SHARD || k == F_EP || k == F_ETP ? c->gpus : k == F_ZERO ? 3 : k == F_MB ? global_batch
                 : k == F_SCHED ? TD_SCHED_INTERLEAVED : k == F_V ? m->L : k == F_RC ? TD_PLAN_RC_FULL : 1;
        for (int x = lo; x <= hi; x++) {
            if (k == F_SCHED && x != TD_SCHED_GPIPE && x != TD_SCHED_1F1B && x != TD_SCHED_INTERLEAVED) continue;
            /* only divisors can be: skip the rest without a walk */
            if (((k <= F_CP || k == F_EP || k == F_ETP) && c->gpus % x) || (k == F_SHARD && x == 1) ||
                (k == F_MB && global_batch % x) || (k == F_V && m->L % x) || (k == F_EP && m->E > 0 && m->E % x))
                continue;
            *fixed_field(&t, k) = x;
            if (!feasible(m, c, global_batch, &t)) continue;
            size_t len = strlen(valid);
            fixed_value(k, x, val, sizeof val);
            if (len + strlen(val) + 8 >= sizeof valid) {
                snprintf(valid + len, sizeof valid - len, ", ...");
                break;
            }
            snprintf(valid + len, sizeof valid - len, "%s%s", len ? ", " : "", val);
        }
        fixed_value(k, v, val, sizeof val);
        *fixed_field(&t, k) = v;
        const char *r = alone(m, c, global_batch, &t, k, v, reason, sizeof reason);
        if (!r) snprintf(reason, sizeof reason, "gives no valid layout together with%s", ctx), r = reason;
        if (k == F_SP)
            snprintf(why, whylen, "%s %s%s%s", fixed_flag[k], r, *ctx ? "; the choices fixed are" : "", ctx);
        else if (*valid)
            snprintf(why, whylen, "%s %s %s; valid%s%s: %s", fixed_flag[k], val, r, *ctx ? " with" : "", ctx, valid);
        else
            snprintf(why, whylen, "%s %s %s; no value is valid%s%s", fixed_flag[k], val, r, *ctx ? " with" : "", ctx);
        return -1;
    }
    return 0;
}

void td_plan_result_free(td_plan_result *r) {
    free(r->plans);
    memset(r, 0, sizeof *r);
}
