/* Each tensor-parallel layer against the unsharded one (tp = world size,
 * run on 2 and 4 ranks, each without and with sequence parallelism).
 *
 * The oracle is the tp = 1 model on every rank, its parameters random for
 * EVERY tensor (gains and biases included, so nothing is trivially 0 or 1).
 * The tp model's slices are cut from the same values with
 * td_param_global_index, never through the model code. For the
 * vocab-parallel embedding, one transformer block and the final norm + tied
 * head + cross-entropy, and then the whole model: the output (this rank's
 * rows), and after a backward with the same random upstream gradient the
 * input gradient and every element of this rank's parameter-gradient slice
 * against the oracle's gradient at its global index. Also: the slices tile
 * every tensor, vocabulary padding is covered and its gradient stays 0, the
 * replicated tensors' gradients are bitwise equal on every tp rank, and the
 * tp traffic of one step equals td_tp_formula exactly. And a block's split
 * backward (input half, weight half) against its whole backward, bitwise.
 *
 * Every check is reduced over the world and printed once by rank 0 (the
 * failing rank prints its worst element), so every rank exits alike. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/grid.h"
#include "trident/model.h"
#include "trident/parallel.h"
#include "unit/test_util.h"

/* L H C T V: tp 4 divides the heads; V = 70 pads to 96 for tp 2 (rank 1's
 * shard partly padding) and to 128 for tp 4 (rank 2's partly, rank 3's
 * wholly padding). */
static td_gpt_config CFG = {.L = 1, .H = 4, .C = 32, .T = 8, .V = 70};
enum { B = 3 };

/* fp32 sums split over ranks and added in another order: errors of a few
 * ulps of each tensor's largest value (~1e-7 expected; up to 8.4e-7 seen
 * for the whole model's gradients, through the attention softmax and the
 * LayerNorms); 1e-5 leaves a margin over that while a wrong slice, a
 * missing reduction or a doubled bias gives errors of 1e-3 to 1. Relative to the tensor's max
 * |oracle| because an element that is small through cancellation has no relative accuracy. */
#define TOL 1e-5

static int g_rank, g_failed, g_checks;
static td_comm *g_world;

typedef struct {
    double worst;    /* largest error on this rank, relative to the tensor's scale */
    char where[200]; /* the element it was at */
} check;

static void cmp(check *c, const char *what, size_t i, float got, float exp, double scale) {
    double diff = fabs((double)got - (double)exp);
    /* scale 0 (an all-zero oracle, or padding) demands an exact 0 difference */
    double err = scale > 0.0 ? diff / scale : (diff == 0.0 ? 0.0 : INFINITY);
    if (isnan(err)) err = INFINITY;
    if (err > c->worst || !c->where[0])
        c->worst = err,
        snprintf(c->where, sizeof c->where, "%s[%zu]: got %.9g expected %.9g (scale %.4g)", what, i,
                 (double)got, (double)exp, scale);
}

/* One verdict for the world: the worst error over every rank. */
static void verdict(check *c, const char *name, double tol) {
    float w = (float)c->worst;
    td_allreduce(g_world, &w, 1, TD_F32, TD_MAX);
    int bad = !(w <= tol);
    g_checks++, g_failed += bad;
    if (g_rank == 0)
        printf("%s  %-58s worst %.3e (tol %.0e)\n", bad ? "FAIL" : "PASS", name, (double)w, tol);
    if (!(c->worst <= tol)) printf("      rank %d worst %s\n", g_rank, c->where);
    fflush(stdout);
}

static double maxabs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* got[n]: rows [lo, lo + n) (in elements) of the oracle's full[n_full]. */
static void cmp_rows(check *c, const char *what, const float *got, const float *full, size_t n_full,
                     size_t lo, size_t n) {
    double s = maxabs(full, n_full);
    for (size_t i = 0; i < n; i++) cmp(c, what, lo + i, got[i], full[lo + i], s);
}

/* Every gradient element of this rank's slices of unit u's tensors against
 * the oracle's at its global index; vocabulary padding must stay exactly 0. */
static void cmp_grads(check *c, const td_param_table *t, const float *g, const td_param_table *full,
                      const float *gref, int u) {
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i], *q = &full->rows[i];
        if (p->unit != u) continue;
        double s = maxabs(gref + q->offset, q->numel);
        for (size_t k = 0; k < p->numel; k++) {
            long long gi = td_param_global_index(t, p, t->tp_rank, k);
            float exp = gi < 0 ? 0.0f : gref[q->offset + (size_t)gi];
            cmp(c, p->name, k, g[p->offset + k], exp, gi < 0 ? 0.0 : s);
        }
    }
}

/* Value of global element gi of tensor `id`: random everywhere, gains near 1. */
static float param_value(const td_param *p, long long gi) {
    float r = (float)td_rng_normal(TU_SEED, 100 + (uint64_t)p->id, (uint64_t)gi);
    int gain = p->kind == TD_T_LN1W || p->kind == TD_T_LN2W || p->kind == TD_T_LNFW;
    return gain ? 1.0f + 0.2f * r : 0.15f * r;
}

typedef struct {
    const td_param_table *full, *t;
    td_gpt *ref, *m;
    float *gref, *g; /* gradient buffers bound to ref and m */
    const int *tokens, *targets;
    int N, Ns, row0, C;
} ctx;

static void zero_grads(ctx *x) {
    memset(x->gref, 0, sizeof(float) * x->full->numel);
    memset(x->g, 0, sizeof(float) * x->t->numel);
}

static void name_of(char *buf, size_t n, const ctx *x, const char *what) {
    snprintf(buf, n, "tp %d%s %s", x->t->tp, x->m->d.sp ? " sp" : "   ", what);
}

static void check_embed(ctx *x) {
    td_gpt *ref = x->ref, *m = x->m;
    int N = x->N, C = x->C;
    size_t nc = (size_t)N * C, mine = (size_t)x->row0 * C, ns = (size_t)x->Ns * C;
    float *dy = TU_NEW(float, nc);
    tu_randn(dy, nc, 11, 1.0f);
    zero_grads(x);
    td_embed_forward(ref, x->tokens, &ref->embed);
    td_embed_backward(ref, x->tokens, dy);
    td_embed_forward(m, x->tokens, &m->embed);
    td_embed_backward(m, x->tokens, dy + mine);
    char name[96];
    check out = {0}, gr = {0};
    cmp_rows(&out, "encoded", m->embed.encoded, ref->embed.encoded, nc, mine, ns);
    name_of(name, sizeof name, x, "embedding: output rows");
    verdict(&out, name, TOL);
    cmp_grads(&gr, x->t, x->g, x->full, x->gref, 0);
    name_of(name, sizeof name, x, "embedding: wte, wpe gradients");
    verdict(&gr, name, TOL);
}

static void check_block(ctx *x) {
    td_gpt *ref = x->ref, *m = x->m;
    int N = x->N, C = x->C;
    size_t nc = (size_t)N * C, mine = (size_t)x->row0 * C, ns = (size_t)x->Ns * C;
    float *in = TU_NEW(float, nc), *dref = TU_NEW(float, nc), *dm = TU_NEW(float, ns);
    tu_randn(in, nc, 21, 1.0f);
    tu_randn(dref, nc, 22, 1.0f);
    memcpy(dm, dref + mine, sizeof(float) * ns);
    zero_grads(x);
    td_block_forward(ref, 0, in, &ref->blocks[0]);
    td_block_backward(ref, 0, in, &ref->blocks[0], dref);
    td_block_forward(m, 0, in + mine, &m->blocks[0]);
    td_block_backward(m, 0, in + mine, &m->blocks[0], dm);
    char name[96];
    check out = {0}, dx = {0}, gr = {0};
    cmp_rows(&out, "res3", m->blocks[0].res3, ref->blocks[0].res3, nc, mine, ns);
    name_of(name, sizeof name, x, "block: output rows");
    verdict(&out, name, TOL);
    cmp_rows(&dx, "dx", dm, dref, nc, mine, ns);
    name_of(name, sizeof name, x, "block: input gradient rows");
    verdict(&dx, name, TOL);
    cmp_grads(&gr, x->t, x->g, x->full, x->gref, 1);
    name_of(name, sizeof name, x, "block: every parameter gradient");
    verdict(&gr, name, TOL);
}

/* Bitwise: the first element whose bits differ makes the check fail. */
static void cmp_bits(check *c, const char *what, const float *got, const float *exp, size_t n) {
    for (size_t i = 0; i < n && c->worst == 0.0; i++)
        if (memcmp(&got[i], &exp[i], sizeof(float)) != 0)
            c->worst = INFINITY, snprintf(c->where, sizeof c->where,
                                          "%s[%zu]: got %.9g expected %.9g", what, i,
                                          (double)got[i], (double)exp[i]);
}

static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n && p; i++) p[i] = NAN;
}

/* The split backward (td_block_backward_input, then _weight) against the
 * whole block backward of the same tp model, bitwise: the input gradient
 * rows and every gradient on this rank. Between B and W the scratch is
 * filled with NaN (W must read only the saved activations and its stash)
 * and W must not communicate: in a zero-bubble pipeline each rank runs it
 * at its own time, so a collective in it would pair with another rank's. */
static void check_block_split(ctx *x, const td_tp_comm *tpc) {
    td_gpt *m = x->m;
    const td_gpt_dims *d = &m->d;
    size_t nc = (size_t)x->N * x->C, mine = (size_t)x->row0 * x->C, ns = (size_t)x->Ns * x->C;
    size_t N = (size_t)d->N, C = (size_t)d->C;
    float *in = TU_NEW(float, nc), *dy = TU_NEW(float, nc);
    tu_randn(in, nc, 51, 1.0f);
    tu_randn(dy, nc, 52, 1.0f);
    td_block_forward(m, 0, in + mine, &m->blocks[0]);
    zero_grads(x);
    float *dwhole = tu_copy(dy + mine, ns);
    td_block_backward(m, 0, in + mine, &m->blocks[0], dwhole);
    float *gwhole = tu_copy(x->g, x->t->numel);

    zero_grads(x);
    td_block_wstash w;
    td_block_wstash_carve(&w, d, TU_NEW(char, td_block_wstash_bytes(d)));
    float *dsplit = tu_copy(dy + mine, ns);
    td_block_backward_input(m, 0, in + mine, &m->blocks[0], dsplit, &w);
    fill_nan(m->s.dres, ns), fill_nan(m->s.dln, N * C), fill_nan(m->s.datty, N * d->Ca);
    fill_nan(m->s.dqkv, N * 3 * d->Ca), fill_nan(m->s.dfch, N * d->F);
    fill_nan(m->s.dfchg, N * d->F);
    fill_nan(m->s.full, N * C), fill_nan(m->s.dln_local, ns), fill_nan(m->s.dnorm, 2 * C);
    uint64_t calls[TD_TP_NOPS];
    memcpy(calls, tpc->calls, sizeof calls);
    td_block_backward_weight(m, 0, &m->blocks[0], &w);

    char name[96];
    check dx = {0}, gr = {0}, quiet = {0};
    cmp_bits(&dx, "dx", dsplit, dwhole, ns);
    name_of(name, sizeof name, x, "split block: B's input gradient = whole");
    verdict(&dx, name, 0.0);
    cmp_bits(&gr, "grad", x->g, gwhole, x->t->numel);
    name_of(name, sizeof name, x, "split block: B+W gradients = whole");
    verdict(&gr, name, 0.0);
    for (int k = 0; k < TD_TP_NOPS; k++)
        if (tpc->calls[k] != calls[k])
            quiet.worst = INFINITY, snprintf(quiet.where, sizeof quiet.where,
                                             "W made %llu calls of tp op %d",
                                             (unsigned long long)(tpc->calls[k] - calls[k]), k);
    name_of(name, sizeof name, x, "split block: W communicates nothing");
    verdict(&quiet, name, 0.0);
}

static void check_head(ctx *x) {
    td_gpt *ref = x->ref, *m = x->m;
    int N = x->N, C = x->C, L = CFG.L;
    size_t nc = (size_t)N * C, mine = (size_t)x->row0 * C, ns = (size_t)x->Ns * C;
    float *in = TU_NEW(float, nc), *dref = TU_NEW(float, nc), *dm = TU_NEW(float, ns);
    tu_randn(in, nc, 31, 1.0f);
    float dloss = 1.0f / (float)N;
    zero_grads(x);
    double lref = td_head_forward(ref, in, x->targets, &ref->head);
    /* probabilities of this rank's real vocabulary columns, before the
     * backward turns them into dlogits */
    int Vl = m->d.Vl, Vr = m->d.Vreal, lo = m->d.vocab_lo, Vp1 = x->full->vocab_local;
    double lm = td_head_forward(m, in + mine, x->targets, &m->head);
    check prob = {0}, loss = {0}, dx = {0}, gr = {0};
    double ps = maxabs(ref->head.logits, (size_t)N * Vp1);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vr; j++)
            cmp(&prob, "prob", (size_t)i * Vl + j, m->head.logits[(size_t)i * Vl + j],
                ref->head.logits[(size_t)i * Vp1 + lo + j], ps);
    cmp_rows(&loss, "row losses", m->head.losses, ref->head.losses, N, 0, N);
    cmp(&loss, "loss sum", 0, (float)lm, (float)lref, fabs(lref));
    td_head_backward(ref, in, x->targets, &ref->head, dloss, dref);
    td_head_backward(m, in + mine, x->targets, &m->head, dloss, dm);
    char name[96];
    name_of(name, sizeof name, x, "head: probabilities of this rank's vocab");
    verdict(&prob, name, TOL);
    name_of(name, sizeof name, x, "head: row losses and loss sum");
    verdict(&loss, name, TOL);
    /* the loss sum is reduced over tp: every rank must hold the same bits */
    float lo_hi[2] = {(float)lm, -(float)lm};
    td_allreduce(g_world, lo_hi, 2, TD_F32, TD_MAX);
    check same = {lo_hi[0] == -lo_hi[1] ? 0.0 : INFINITY, "loss sums differ across ranks"};
    name_of(name, sizeof name, x, "head: loss sum identical on every rank");
    verdict(&same, name, 0.0);
    cmp_rows(&dx, "dx", dm, dref, nc, mine, ns);
    name_of(name, sizeof name, x, "head: input gradient rows");
    verdict(&dx, name, TOL);
    cmp_grads(&gr, x->t, x->g, x->full, x->gref, L + 1);
    cmp_grads(&gr, x->t, x->g, x->full, x->gref, 0);
    name_of(name, sizeof name, x, "head: ln_f and wte gradients");
    verdict(&gr, name, TOL);
}

/* The whole model: loss, every gradient, replicated gradients bitwise equal
 * over tp, and the traffic of one step against the formula. */
static void check_model(ctx *x, td_tp_comm *tpc, const td_grid *grid) {
    td_gpt *ref = x->ref, *m = x->m;
    const td_param_table *t = x->t;
    float dloss = 1.0f / (float)x->N;
    zero_grads(x);
    double lref = td_gpt_forward(ref, x->tokens, x->targets);
    td_gpt_backward(ref, dloss);
    td_tp_comm_reset(tpc);
    double lm = td_gpt_forward(m, x->tokens, x->targets);
    td_gpt_backward(m, dloss);
    td_tp_traffic f;
    td_tp_formula(&f, &CFG, B, 1, t->tp, m->d.sp);
    char name[96];
    check traffic = {0};
    static const char *op[TD_TP_NOPS] = {"all-reduce", "all-gather", "reduce-scatter"};
    for (int k = 0; k < TD_TP_NOPS; k++) {
        if (tpc->calls[k] != f.calls[k] || tpc->bytes[k] != f.bytes[k]) traffic.worst = INFINITY;
        if (g_rank == 0)
            printf("      %-14s %3llu calls %8llu bytes (formula %3llu calls %8llu bytes)\n", op[k],
                   (unsigned long long)tpc->calls[k], (unsigned long long)tpc->bytes[k],
                   (unsigned long long)f.calls[k], (unsigned long long)f.bytes[k]);
    }
    snprintf(traffic.where, sizeof traffic.where, "traffic differs from td_tp_formula");
    name_of(name, sizeof name, x, "model: tp traffic of one step = formula");
    verdict(&traffic, name, 0.0);

    check loss = {0}, gr = {0};
    cmp(&loss, "loss sum", 0, (float)lm, (float)lref, fabs(lref));
    name_of(name, sizeof name, x, "model: loss sum");
    verdict(&loss, name, TOL);
    for (int u = 0; u < t->n_units; u++) cmp_grads(&gr, t, x->g, x->full, x->gref, u);
    name_of(name, sizeof name, x, "model: every parameter gradient");
    verdict(&gr, name, TOL);

    /* replicated tensors (LayerNorms, wpe, row-parallel biases): every tp
     * rank's gradient the same bits as tp rank 0's */
    float *all = TU_NEW(float, t->numel *(size_t)t->tp);
    td_all_gather(grid->axis[TD_TP].comm, x->g, all, t->numel, TD_F32);
    check rep = {0};
    int n_rep = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->split != TD_SPLIT_NONE) continue;
        n_rep++;
        for (int r = 1; r < t->tp; r++)
            for (size_t k = 0; k < p->numel; k++) {
                float a = all[p->offset + k], b = all[(size_t)r * t->numel + p->offset + k];
                if (memcmp(&a, &b, sizeof a) != 0 && rep.worst == 0.0)
                    rep.worst = INFINITY,
                    snprintf(rep.where, sizeof rep.where, "%s[%zu]: tp rank %d %.9g, rank 0 %.9g",
                             p->name, k, r, (double)b, (double)a);
            }
    }
    if (n_rep != 1 + 6 * CFG.L + 2) /* wpe, 6 per block, ln_f */
        rep.worst = INFINITY, snprintf(rep.where, sizeof rep.where, "%d replicated rows", n_rep);
    name_of(name, sizeof name, x, "model: replicated gradients bitwise equal");
    verdict(&rep, name, 0.0);
}

/* The slices must tile every tensor (each global element on exactly one
 * rank, on every rank when replicated), and the layout must have the
 * vocabulary padding this test is meant to cover. */
static void check_layout(const td_param_table *t) {
    check tile = {0};
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t n = (size_t)p->shape[0] * (size_t)p->shape[1];
        int *cnt = TU_NEW(int, n), want = p->split == TD_SPLIT_NONE ? t->tp : 1;
        for (int r = 0; r < t->tp; r++)
            for (size_t k = 0; k < p->numel; k++) {
                long long gi = td_param_global_index(t, p, r, k);
                if (gi >= 0 && (size_t)gi < n)
                    cnt[gi]++;
                else if (gi >= 0)
                    cnt[0] = -1000; /* out of range */
            }
        for (size_t e = 0; e < n; e++)
            if (cnt[e] != want && tile.worst == 0.0)
                tile.worst = INFINITY, snprintf(tile.where, sizeof tile.where,
                                                "%s global %zu held %d times", p->name, e, cnt[e]);
    }
    char name[96];
    snprintf(name, sizeof name, "tp %d    slices tile every tensor", t->tp);
    verdict(&tile, name, 0.0);
    /* padding: some shard partly or wholly beyond V (checked on every rank's table) */
    int partly = 0, wholly = 0;
    for (int r = 0; r < t->tp; r++) {
        int lo = r * t->vocab_local, hi = lo + t->vocab_local;
        partly += lo < CFG.V && hi > CFG.V, wholly += lo >= CFG.V;
    }
    check pad = {partly + wholly > 0 ? 0.0 : INFINITY, "no vocabulary padding in this layout"};
    snprintf(name, sizeof name, "tp %d    vocab shards with padding: %d partly, %d wholly", t->tp,
             partly, wholly);
    verdict(&pad, name, 0.0);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    g_world = td_comm_world();
    g_rank = td_comm_rank(g_world);
    int tp = td_comm_size(g_world);
    td_gpt_config_finish(&CFG);
    td_grid g;
    td_grid_create_dtp(&g, 1, tp, 1, 0);

    td_param_table full, t;
    td_param_table_build(&full, &CFG, 1);
    td_table_layout lay = {.unit_align = 16, .tp = tp, .tp_rank = g.axis[TD_TP].rank, .prec = TD_PREC_FP32, .cp = 1};
    td_param_table_build_layout(&t, &CFG, &lay);
    TD_ASSERT(full.n_rows == t.n_rows);
    check_layout(&t);

    /* the oracle's parameters, then this rank's slices of the same values */
    float *pref = TU_NEW(float, full.numel), *gref = TU_NEW(float, full.numel);
    float *pm = TU_NEW(float, t.numel), *gm = TU_NEW(float, t.numel);
    for (int i = 0; i < full.n_rows; i++) {
        const td_param *q = &full.rows[i], *p = &t.rows[i];
        TD_ASSERT(p->kind == q->kind && p->id == q->id);
        for (size_t k = 0; k < q->numel; k++) {
            long long gi = td_param_global_index(&full, q, 0, k);
            pref[q->offset + k] = gi < 0 ? 0.0f : param_value(q, gi);
        }
        for (size_t k = 0; k < p->numel; k++) {
            long long gi = td_param_global_index(&t, p, t.tp_rank, k);
            pm[p->offset + k] = gi < 0 ? 0.0f : pref[q->offset + (size_t)gi];
        }
    }

    /* tokens: the first and last id of every shard holding real vocabulary
     * (V-1 among them), the rest random; repeats accumulate in wte */
    int N = B * CFG.T, *tokens = TU_NEW(int, N), *targets = TU_NEW(int, N), n_fixed = 0;
    tu_rand_ints(tokens, (size_t)N, 41, CFG.V);
    tu_rand_ints(targets, (size_t)N, 42, CFG.V);
    for (int r = 0; r < tp && r * t.vocab_local < CFG.V; r++) {
        int lo = r * t.vocab_local, hi = lo + t.vocab_local < CFG.V ? lo + t.vocab_local : CFG.V;
        tokens[n_fixed++] = lo, tokens[n_fixed++] = hi - 1;
    }
    targets[0] = CFG.V - 1, targets[1] = 0, targets[2] = t.vocab_local;

    td_gpt ref;
    td_gpt_create(&ref, &full, B, 0);
    td_gpt_bind_flat(&ref, pref, gref);
    td_tp_comm tpc;
    td_tp_comm_init(&tpc, &g);
    for (int sp = 0; sp <= 1; sp++) {
        td_gpt m;
        td_gpt_create(&m, &t, B, sp);
        m.comm = td_tp_comm_ops(&tpc);
        td_gpt_bind_flat(&m, pm, gm);
        ctx x = {&full, &t, &ref, &m, gref, gm, tokens, targets, N, m.d.Ns, m.d.row0, CFG.C};
        int mark = tu_mark();
        check_embed(&x);
        check_block(&x);
        check_block_split(&x, &tpc);
        check_head(&x);
        check_model(&x, &tpc, &g);
        tu_release(mark);
        td_gpt_destroy(&m);
    }
    td_gpt_destroy(&ref);
    td_param_table_free(&t);
    td_param_table_free(&full);
    tu_free_all();
    if (g_rank == 0) printf("tp_layers tp %d: %d checks, %d failed\n", tp, g_checks, g_failed);
    td_grid_destroy(&g);
    td_comm_finalize();
    return g_failed ? 1 : 0;
}
