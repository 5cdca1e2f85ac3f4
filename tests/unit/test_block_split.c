/* The split backward of a block (td_block_backward_input = B, then
 * td_block_backward_weight = W, for zero-bubble pipelines) against the
 * whole td_block_backward, at tp 1, linked against trident_model alone.
 *
 * Two micro-batches through one block, each with its own saved activations
 * and stash, the gradients starting from random values (so "adds into" is
 * covered). Between every B and the W that follows, the model's scratch is
 * filled with NaN: W must read only the saved activations and its stash,
 * as it does in a pipeline where other micro-batches' B run in between.
 *   one micro-batch:  B0 W0        vs whole0          bitwise
 *   W in B's order:   B0 B1 W0 W1  vs whole0 whole1   bitwise (every
 *                     gradient receives the same terms in the same order)
 *   W reversed:       B0 B1 W1 W0  vs whole0 whole1   LayerNorm gradients
 *                     and input gradients bitwise (B's order is unchanged);
 *                     the linear layers' within REORDER_TOL (see there)
 * Sizes: the brief's small block (B 2, T 8, C 32, H 4: one 48-row slice in
 * the matmuls) and one whose N = 96 rows span two slices, with 1 and 2
 * kernel threads. Also the stash's size against its formula. */
#include <math.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/model.h"

/* W reversed adds micro-batch 1's weight gradient before micro-batch 0's:
 * g + P1 + P0 instead of g + P0 + P1, two float roundings each, so the
 * results may differ by a couple of ulps of the terms (2 x 6e-8 of their
 * magnitude; the floor of tu_check_close, 1 x the rms of the expected
 * gradient, is that magnitude). 1e-6 leaves a margin; a dropped or doubled
 * micro-batch would be off by the size of a term (~1). */
#define REORDER_TOL 1e-6
#define REORDER_FLOOR 1.0

static int is_linear(td_tensor_kind k) {
    return k == TD_T_QKVW || k == TD_T_QKVB || k == TD_T_ATTPROJW || k == TD_T_ATTPROJB ||
           k == TD_T_FCW || k == TD_T_FCB || k == TD_T_FCPROJW || k == TD_T_FCPROJB;
}

/* A block's saved tensors, sized from d (tp 1: Ns = N, Ca = C, F = 4C). */
static void acts_alloc(td_block_acts *a, const td_gpt_dims *d, int H) {
    size_t N = (size_t)d->N, C = (size_t)d->C, F = (size_t)d->F;
    a->ln1 = TU_NEW(float, N * C), a->ln1_mean = TU_NEW(float, N), a->ln1_rstd = TU_NEW(float, N);
    a->qkv = TU_NEW(float, N * 3 * C), a->atty = TU_NEW(float, N * C);
    a->lse = TU_NEW(float, (size_t)d->B * H * d->T);
    a->attproj = TU_NEW(float, N * C), a->res2 = TU_NEW(float, N * C);
    a->ln2 = TU_NEW(float, N * C), a->ln2_mean = TU_NEW(float, N), a->ln2_rstd = TU_NEW(float, N);
    a->fch = TU_NEW(float, N * F), a->fch_gelu = TU_NEW(float, N * F);
    a->fcproj = TU_NEW(float, N * C), a->res3 = TU_NEW(float, N * C);
}

static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/* What a later micro-batch's B would do to the scratch, and worse. */
static void poison_scratch(const td_gpt *m, int H) {
    const td_gpt_dims *d = &m->d;
    size_t N = (size_t)d->N, C = (size_t)d->C, F = (size_t)d->F;
    fill_nan(m->s.dres, (size_t)d->Ns * C), fill_nan(m->s.dln, N * C);
    fill_nan(m->s.datty, N * C), fill_nan(m->s.dqkv, N * 3 * C);
    fill_nan(m->s.dfch, N * F), fill_nan(m->s.dfchg, N * F);
}

typedef struct {
    td_param_table t;
    td_gpt m;
    float *grads, *g0;   /* the model's gradients; their random start */
    td_block_acts a[2];  /* saved activations of micro-batches 0 and 1 */
    float *x[2], *dy[2]; /* block inputs, output gradients [N,C] */
    td_block_wstash w[2];
    size_t nc;
} rig;

static void rig_open(rig *r, const td_gpt_config *cfg0, int B) {
    td_gpt_config cfg = *cfg0;
    td_gpt_config_finish(&cfg);
    td_param_table_build(&r->t, &cfg, 1);
    float *p = TU_NEW(float, r->t.numel);
    r->grads = TU_NEW(float, r->t.numel), r->g0 = TU_NEW(float, r->t.numel);
    /* every tensor random, LayerNorm gains near 1: nothing trivially 0 or 1 */
    for (int i = 0; i < r->t.n_rows; i++) {
        const td_param *q = &r->t.rows[i];
        tu_randn(p + q->offset, q->numel, 200 + (uint64_t)i, 0.15f);
        if (q->kind == TD_T_LN1W || q->kind == TD_T_LN2W || q->kind == TD_T_LNFW)
            for (size_t k = 0; k < q->numel; k++) p[q->offset + k] += 1.0f;
    }
    tu_randn(r->g0, r->t.numel, 300, 1.0f);
    td_gpt_create(&r->m, &r->t, B, 0);
    td_gpt_bind_flat(&r->m, p, r->grads);
    r->nc = (size_t)r->m.d.N * cfg.C;
    for (int k = 0; k < 2; k++) {
        acts_alloc(&r->a[k], &r->m.d, cfg.H);
        r->x[k] = TU_NEW(float, r->nc), r->dy[k] = TU_NEW(float, r->nc);
        tu_randn(r->x[k], r->nc, 310 + (uint64_t)k, 1.0f);
        tu_randn(r->dy[k], r->nc, 320 + (uint64_t)k, 1.0f);
        td_block_forward(&r->m, 0, r->x[k], &r->a[k]);
        td_block_wstash_carve(&r->w[k], &r->m.d,
                              TU_NEW(char, td_block_wstash_bytes(&r->m.d)));
    }
}

static void reset_grads(rig *r) { memcpy(r->grads, r->g0, sizeof(float) * r->t.numel); }

/* Input gradients of micro-batch k, starting from its output gradient. */
static float *dres_of(const rig *r, int k) { return tu_copy(r->dy[k], r->nc); }

static void split_b(rig *r, int k, float *dres) {
    td_block_backward_input(&r->m, 0, r->x[k], &r->a[k], dres, &r->w[k]);
    poison_scratch(&r->m, r->m.cfg.H);
}

static void split_w(rig *r, int k) { td_block_backward_weight(&r->m, 0, &r->a[k], &r->w[k]); }

/* Each tensor of block 0's unit: bitwise, or within REORDER_TOL for the
 * linear layers when `reordered`; the rest of the buffer (the embeddings,
 * ln_f) must be untouched. */
static void compare_grads(const char *tag, const rig *r, const float *exp, int reordered) {
    char nm[128];
    for (int i = 0; i < r->t.n_rows; i++) {
        const td_param *q = &r->t.rows[i];
        if (q->unit != 1 && !reordered) continue;
        snprintf(nm, sizeof nm, "%s: %s", tag, q->name);
        if (q->unit != 1 || !reordered || !is_linear(q->kind))
            tu_check_bitwise(nm, r->grads + q->offset, exp + q->offset, q->numel);
        else
            tu_check_close_f(nm, r->grads + q->offset, exp + q->offset, q->numel, REORDER_TOL,
                             REORDER_FLOOR);
    }
    if (!reordered) { /* one summary line for the other units */
        snprintf(nm, sizeof nm, "%s: whole gradient buffer", tag);
        tu_check_bitwise(nm, r->grads, exp, r->t.numel);
    }
}

static void run_case(const td_gpt_config *cfg, int B, int threads) {
    int mark = tu_mark();
    td_kernels_set_threads(threads);
    rig r;
    rig_open(&r, cfg, B);
    const td_gpt_dims *d = &r.m.d;
    char tag[96], nm[160];
    snprintf(tag, sizeof tag, "N %d C %d, %d thr", d->N, d->C, threads);

    /* the stash: four output gradients, N x (3C + C + 4C + C) at tp 1 */
    snprintf(nm, sizeof nm, "%s: stash bytes == 9 N C floats", tag);
    tu_checks++;
    size_t want = (size_t)9 * d->N * d->C * sizeof(float), got = td_block_wstash_bytes(d);
    if (got == want) printf("PASS  %-52s %zu\n", nm, got);
    else tu_failures++, printf("FAIL  %-52s got %zu expected %zu\n", nm, got, want);

    /* the whole backward: micro-batch 0 alone, then 1 on top */
    float *dx_whole[2], *g_whole0 = TU_NEW(float, r.t.numel), *g_whole01;
    reset_grads(&r);
    for (int k = 0; k < 2; k++) {
        dx_whole[k] = dres_of(&r, k);
        td_block_backward(&r.m, 0, r.x[k], &r.a[k], dx_whole[k]);
        if (k == 0) memcpy(g_whole0, r.grads, sizeof(float) * r.t.numel);
    }
    g_whole01 = tu_copy(r.grads, r.t.numel);

    /* B0 W0 */
    reset_grads(&r);
    float *dx0 = dres_of(&r, 0);
    split_b(&r, 0, dx0);
    split_w(&r, 0);
    snprintf(nm, sizeof nm, "%s B0 W0: dx", tag);
    tu_check_bitwise(nm, dx0, dx_whole[0], r.nc);
    snprintf(nm, sizeof nm, "%s B0 W0", tag);
    compare_grads(nm, &r, g_whole0, 0);

    /* B0 B1 then W in either order */
    for (int rev = 0; rev <= 1; rev++) {
        reset_grads(&r);
        float *dx[2];
        for (int k = 0; k < 2; k++) dx[k] = dres_of(&r, k), split_b(&r, k, dx[k]);
        for (int k = 0; k < 2; k++) split_w(&r, rev ? 1 - k : k);
        const char *order = rev ? "B0 B1 W1 W0" : "B0 B1 W0 W1";
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "%s %s: dx%d", tag, order, k);
            tu_check_bitwise(nm, dx[k], dx_whole[k], r.nc);
        }
        snprintf(nm, sizeof nm, "%s %s", tag, order);
        compare_grads(nm, &r, g_whole01, rev);
    }
    td_gpt_destroy(&r.m);
    td_param_table_free(&r.t);
    tu_release(mark);
}

int main(void) {
    const td_gpt_config small = {.L = 1, .H = 4, .C = 32, .T = 8, .V = 37};  /* L H C T V: the brief's block */
    const td_gpt_config wide = {.L = 1, .H = 4, .C = 64, .T = 24, .V = 37};  /* B 4: N = 96, two 48-row slices */
    run_case(&small, 2, 1);
    run_case(&wide, 4, 1);
    run_case(&wide, 4, 2);
    td_kernels_set_threads(1);
    return tu_finish("test_block_split");
}
