/* Pipeline stages: which blocks each virtual stage holds, the units a stage
 * keeps, and its activation plan. Pure functions of the config and flags. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/pipeline.h"

static void check_shape(int L, int P, int V) {
    TD_CHECK(P >= 1, "--pp must be a positive integer (got %d)", P);
    TD_CHECK(V >= 1, "--virtual-stages must be a positive integer (got %d)", V);
    TD_CHECK((long)P * V <= L,
             "--layers %d does not split into --pp %d x --virtual-stages %d = %d chunks of at least "
             "one block; use at least %d layers or fewer stages",
             L, P, V, P * V, P * V);
}

void td_pp_split_parse(td_pp_split *sp, const char *spec, int L, int P, int V) {
    check_shape(L, P, V);
    memset(sp, 0, sizeof *sp);
    sp->P = P, sp->V = V;
    int n = P * V;
    if (strcmp(spec, "uniform") == 0) {
        /* interleaved chunks must be equal (every slot holds one chunk) */
        TD_CHECK(V == 1 || L % n == 0,
                 "--layers %d does not split into --pp %d x --virtual-stages %d equal chunks; use "
                 "a multiple of %d layers",
                 L, P, V, n);
        /* as even as possible; the extra blocks go to the earlier stages,
         * since the last one also runs the head */
        for (int v = 0; v < n; v++) sp->first[v + 1] = sp->first[v] + L / n + (v < L % n);
        return;
    }
    const char *s = spec;
    int v = 0;
    while (*s) {
        char *end;
        long k = strtol(s, &end, 10);
        TD_CHECK(end != s && (*end == ',' || *end == 0) && k >= 1 && k <= L,
                 "--pp-partition %s: expected uniform, auto or %d block counts >= 1 separated by "
                 "commas (one per stage%s), summing to --layers %d",
                 spec, n, V > 1 ? " and chunk, chunk-major" : "", L);
        TD_CHECK(v < n, "--pp-partition %s lists more than --pp %d x --virtual-stages %d = %d counts",
                 spec, P, V, n);
        sp->first[v + 1] = sp->first[v] + (int)k;
        v++;
        s = *end ? end + 1 : end;
    }
    TD_CHECK(v == n && sp->first[n] == L,
             "--pp-partition %s: %d counts summing to %d; expected %d counts (--pp %d x "
             "--virtual-stages %d) summing to --layers %d",
             spec, v, sp->first[v], n, P, V, L);
    td_compat_cfg c;
    td_compat_cfg_init(&c);
    c.virtual_stages = V, c.pp_partition_text = spec;
    for (int i = 0; i < n; i++) c.unequal_chunks |= sp->first[i + 1] - sp->first[i] != sp->first[1];
    td_compat_check(&c, TD_COMPAT_AT_PP_SPLIT);
}

double td_pp_split_auto(td_pp_split *sp, const double *block_cost, double embed_cost,
                        double head_cost, int L, int P, int V) {
    check_shape(L, P, V);
    memset(sp, 0, sizeof *sp);
    sp->P = P, sp->V = V;
    double *c = malloc(sizeof(double) * (size_t)L);
    TD_ASSERT(c);
    for (int l = 0; l < L; l++) c[l] = block_cost[l];
    c[0] += embed_cost;
    c[L - 1] += head_cost;
    double worst = td_pp_partition(c, L, P * V, sp->first);
    free(c);
    return worst;
}

void td_pp_held_units(const td_pp_split *sp, int L, int tied, int stage, unsigned char *held) {
    memset(held, 0, (size_t)L + 2);
    int P = sp->P;
    for (int c = 0; c < sp->V; c++) {
        int v = c * P + stage;
        for (int l = sp->first[v]; l < sp->first[v + 1]; l++) held[l + 1] = 1;
    }
    /* the token embedding: the first stage looks tokens up, the last uses it
     * as the head when it is tied (both hold all of unit 0; pp = 1: one stage
     * does both); an untied head lives in unit L+1 */
    if (stage == 0 || (tied && stage == P - 1)) held[0] = 1;
    if (stage == P - 1) held[L + 1] = 1;
}

td_slot_shape td_pp_slot_shape(const td_pp_split *sp, const td_schedule *sched, int stage) {
    td_slot_shape sh = {0, stage == sp->P - 1, sched->kind == TD_SCHED_ZBH1, 0, 0};
    for (int c = 0; c < sp->V; c++) {
        int v = c * sp->P + stage, n = sp->first[v + 1] - sp->first[v];
        if (n > sh.n_blocks) sh.n_blocks = n;
    }
    return sh;
}

void td_pp_slot_shape_use(td_slot_shape *sh, td_gpt_use use) {
    if (use == TD_GPT_FORWARD) sh->forward_only = 1, sh->wstash = 0; /* no backward, no W */
}

size_t td_pp_activation_bytes(const td_param_table *t, int B, int seq_parallel, const td_pp_split *sp,
                              const td_schedule *sched, int stage, td_recompute rc, td_gpt_use use) {
    td_slot_shape sh = td_pp_slot_shape(sp, sched, stage);
    sh.recompute = rc == TD_RECOMPUTE_BLOCK;
    td_pp_slot_shape_use(&sh, use);
    size_t slots = use == TD_GPT_FORWARD ? 1 : (size_t)sched->peak[stage]; /* td_pp_forward_only: one */
    return td_gpt_stage_bytes_use(t, B, seq_parallel, rc, use) + slots * td_gpt_slot_bytes(t, B, seq_parallel, &sh);
}
