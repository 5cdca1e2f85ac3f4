/* The layout-aware parameter table under tensor parallelism, without MPI:
 * for tp in {2, 3, 4} (heads 12 split 2, 3 and 4 ways; V = 70 so that tp 4
 * leaves one rank's vocabulary shard all padding):
 *  - every split row's slices over the tp ranks cover its global elements
 *    exactly once (td_param_global_index), padding aside, and every rank
 *    holds all of a replicated row; the real vocabulary is the global shape
 *    of wte;
 *  - the QKV weight's slices are three groups (q, k, v), each the rank's
 *    heads: rank r's local row i of group g is global row g*C + r*C/tp + i;
 *  - every element each rank initializes equals, bit for bit, the
 *    single-process init of the same global element (one process: no
 *    padding beyond 16, so the global index is the canonical offset).
 * Exact comparisons: no tolerance. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/model.h"

static int fails;

static void fail(const char *fmt, const char *name, int tp, long long a, long long b) {
    if (++fails > 20) return; /* the first ones say it all */
    printf("FAIL tp %d %s: ", tp, name);
    printf(fmt, a, b);
    printf("\n");
}

static void check_tp(const td_gpt_config *cfg, int tp) {
    td_param_table canon;
    td_param_table_build(&canon, cfg, 1);
    float *ref = td_alloc(canon.numel * sizeof(float), TD_MEM_OTHER);
    td_param_init_range(&canon, 1234, 0, canon.numel, ref);
    td_param_table t[4];
    float *init[4];
    for (int r = 0; r < tp; r++) {
        td_table_layout lay = {.unit_align = 16, .tp = tp, .tp_rank = r, .prec = TD_PREC_FP32, .cp = 1};
        td_param_table_build_layout(&t[r], cfg, &lay);
        init[r] = td_alloc(t[r].numel * sizeof(float), TD_MEM_OTHER);
        td_param_init_range(&t[r], 1234, 0, t[r].numel, init[r]);
        if (t[r].n_global != canon.n_global)
            fail("n_global %lld vs %lld", "table", tp, (long long)t[r].n_global,
                 (long long)canon.n_global);
    }
    for (int i = 0; i < canon.n_rows; i++) {
        const td_param *c = &canon.rows[i];
        size_t global = (size_t)c->shape[0] * c->shape[1];
        unsigned char *seen = td_alloc(global, TD_MEM_OTHER);
        memset(seen, 0, global);
        size_t local_sum = 0, padding = 0;
        int copies = t[0].rows[i].split == TD_SPLIT_NONE ? tp : 1; /* replicated: every rank holds it all */
        for (int r = 0; r < tp; r++) {
            const td_param *p = &t[r].rows[i];
            if (strcmp(p->name, c->name) || p->id != i || p->shape[0] != c->shape[0] ||
                p->shape[1] != c->shape[1])
                fail("row %lld differs from the canonical row %lld", c->name, tp, p->id, i);
            local_sum += p->numel;
            for (size_t k = 0; k < p->numel; k++) {
                long long gi = td_param_global_index(&t[r], p, r, k);
                float v = init[r][p->offset + k];
                if (gi < 0) {
                    padding++;
                    if (v != 0.0f)
                        fail("padding element %lld is %lld (not 0)", c->name, tp, (long long)k,
                             (long long)v);
                    continue;
                }
                if (gi >= (long long)global || seen[gi]++ >= copies) {
                    fail("global element %lld out of range or held too often (rank %lld)", c->name,
                         tp, gi, r);
                    continue;
                }
                if (memcmp(&v, &ref[c->offset + (size_t)gi], sizeof v) != 0)
                    fail("init of global element %lld differs on rank %lld", c->name, tp, gi, r);
            }
            if (c->kind ==
                TD_T_QKVW) { /* rank r's local row i of group g is global row g*C + r*C/tp + i */
                int C = cfg->C, per = C / tp;
                for (int g = 0; g < 3; g++)
                    for (int li = 0; li < per; li++) {
                        long long gi =
                            td_param_global_index(&t[r], p, r, (size_t)(g * per + li) * C);
                        long long want = (long long)(g * C + r * per + li) * C;
                        if (gi != want)
                            fail("QKV group row maps to %lld, expected %lld", c->name, tp, gi,
                                 want);
                    }
            }
        }
        size_t covered = 0;
        for (size_t k = 0; k < global; k++) covered += seen[k];
        if (covered != copies * global)
            fail("%lld elements held, expected %lld", c->name, tp, (long long)covered,
                 (long long)(copies * global));
        if (local_sum != copies * global + padding)
            fail("slices hold %lld elements, expected %lld", c->name, tp, (long long)local_sum,
                 (long long)(copies * global + padding));
        td_free(seen);
    }
    /* the vocabulary: padded to 16 x tp, split evenly, real rows V */
    int Vp = (cfg->V + 16 * tp - 1) / (16 * tp) * (16 * tp);
    for (int r = 0; r < tp; r++) {
        if (t[r].Vp != Vp || t[r].vocab_local * tp != Vp || t[r].vocab_lo != r * Vp / tp)
            fail("vocabulary padded to %lld, expected %lld", "wte", tp, t[r].Vp, Vp);
        if (td_param_lookup(&t[r], TD_T_WTE, 0)->shape[0] != cfg->V)
            fail("wte global rows %lld, expected the real vocabulary %lld", "wte", tp,
                 td_param_lookup(&t[r], TD_T_WTE, 0)->shape[0], cfg->V);
    }
    printf("%s tp %d: %d rows covered once, init bitwise equal to one process\n",
           fails ? "FAIL" : "ok  ", tp, canon.n_rows);
    for (int r = 0; r < tp; r++) {
        td_free(init[r]);
        td_param_table_free(&t[r]);
    }
    td_free(ref);
    td_param_table_free(&canon);
}

int main(void) {
    td_gpt_config cfg = {.L = 2, .H = 12, .C = 48, .T = 8, .V = 70};
    td_gpt_config_finish(&cfg);
    for (int tp = 2; tp <= 4; tp++) check_tp(&cfg, tp);
    /* tp 4: V = 70 padded to 128, rows 32 per rank: rank 3 holds padding only */
    printf("test_tp_table: %s\n", fails ? "FAILED" : "passed");
    return fails ? 1 : 0;
}
