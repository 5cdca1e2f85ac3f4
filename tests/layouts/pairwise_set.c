/* A pairwise-covering set of accepted layouts: every pair of values of two
 * layout choices that some accepted run of at most 4 ranks can hold is
 * held by at least one run of the set (tests/layouts/test_pairwise.sh
 * trains each against one process).
 *
 * The candidates are every combination of the factors below; one is
 * accepted when it fits in 4 ranks and breaks no row of the rules table
 * (td_compat_ok over every site), so a pair that no accepted run can hold
 * (zero 3 with pp 2, say) is not asked for, and a rule added to the table
 * changes the set by itself. The set is chosen greedily (each time the
 * candidate covering the most uncovered pairs, the first in enumeration
 * order on a tie), so it is the same on every machine. Exact arithmetic
 * only: precision, payload compression and grad-reduce dtype change the
 * numbers on purpose, so they are not factors here (the precision and
 * compression tests hold them to their own bounds).
 *
 * Usage: pairwise_set SEQ EMBD (the trained model's, which rules read).
 * Prints one line per run, "RANKS FLAGS...", to stdout, and a summary to
 * stderr; exits 1 when the set holds more than the 40 runs or a
 * coverable pair is left uncovered (a bug here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/compat.h"
#include "trident/train.h"

#define MAX_RUNS 40
#define MAX_RANKS 4

/* A factor and its values as flags; "" is the default (no flag). */
typedef struct {
    const char *name;
    int n;
    const char *val[5];
} factor;

enum { F_DP, F_TP, F_PP, F_CP, F_ZERO, F_SP, F_MODE, F_SCHED, F_RC, F_MICRO, F_SHARD, F_ORDER, NF };

static const factor F[NF] = {
    [F_DP] = {"dp", 3, {"1", "2", "4"}},
    [F_TP] = {"tp", 2, {"1", "2"}},
    [F_PP] = {"pp", 2, {"1", "2"}},
    [F_CP] = {"cp", 2, {"1", "2"}},
    [F_ZERO] = {"zero", 4, {"0", "1", "2", "3"}},
    [F_SP] = {"sequence-parallel", 2, {"", "on"}},
    [F_MODE] = {"dp-mode", 3, {"allreduce", "reduce-broadcast", "ps"}},
    /* "" at pp 1 only: a schedule is a value of the pipeline */
    [F_SCHED] = {"schedule", 5, {"", "gpipe", "1f1b", "zb-h1", "interleaved"}},
    [F_RC] = {"recompute", 2, {"none", "block"}},
    [F_MICRO] = {"micro-batches", 2, {"1", "2"}},
    [F_SHARD] = {"dp-shard", 2, {"", "2"}},
    [F_ORDER] = {"grid-order", 2, {"tp-cp-dp-pp", "pp-dp-cp-tp"}},
};

typedef struct {
    unsigned char v[NF];
} cand;

static int ival(const cand *c, int f) { return atoi(F[f].val[c->v[f]]); }
static int ps(const cand *c) { return c->v[F_MODE] == 2; }
static int ranks(const cand *c) {
    return ival(c, F_DP) * ival(c, F_TP) * ival(c, F_PP) * ival(c, F_CP) + ps(c);
}

/* The test's model: the rules read its sequence and channels */
static int g_seq, g_embd;

/* The run's options as the trainer would parse them. */
static void opts_of(const cand *c, td_train_opts *o) {
    td_train_opts_default(o);
    o->dp = ival(c, F_DP), o->tp = ival(c, F_TP), o->pp = ival(c, F_PP), o->cp = ival(c, F_CP);
    o->zero = ival(c, F_ZERO), o->seq_parallel = c->v[F_SP];
    o->dp_mode = F[F_MODE].val[c->v[F_MODE]];
    o->ps_servers = ps(c);
    if (c->v[F_SCHED]) o->schedule = F[F_SCHED].val[c->v[F_SCHED]];
    o->virtual_stages = c->v[F_SCHED] == 4 ? 2 : 1;
    o->recompute = F[F_RC].val[c->v[F_RC]];
    o->grad_accum = ival(c, F_MICRO);
    o->dp_shard = c->v[F_SHARD] ? 2 : 0;
    o->grid_order = F[F_ORDER].val[c->v[F_ORDER]];
    o->seq = g_seq, o->embd = g_embd;
    td_train_opts_choices(o);
}

static int accepted(const cand *c) {
    if (ranks(c) > MAX_RANKS) return 0;
    if ((c->v[F_SCHED] != 0) != (ival(c, F_PP) > 1)) return 0;
    td_train_opts o;
    opts_of(c, &o);
    td_compat_cfg cc;
    td_train_compat_cfg(&o, &cc);
    return td_compat_ok(&cc, TD_COMPAT_AT_ANY);
}

/* pair index of (factor i value a, factor j value b), i < j */
#define PV 5
static size_t pair_ix(int i, int a, int j, int b) { return (((size_t)i * NF + j) * PV + a) * PV + b; }
#define NPAIRS ((size_t)NF * NF * PV * PV)

static int gain(const cand *c, const unsigned char *covered) {
    int g = 0;
    for (int i = 0; i < NF; i++)
        for (int j = i + 1; j < NF; j++) g += !covered[pair_ix(i, c->v[i], j, c->v[j])];
    return g;
}

static void print_run(const cand *c) {
    printf("%d", ranks(c));
    for (int f = 0; f < NF; f++) {
        const char *v = F[f].val[c->v[f]];
        if (f == F_SP) {
            if (c->v[f]) printf(" --%s", F[f].name);
        } else if (*v) {
            printf(" --%s %s", F[f].name, v);
        }
    }
    if (ps(c)) printf(" --ps-servers 1");
    if (c->v[F_SCHED] == 4) printf(" --virtual-stages 2");
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 3 || (g_seq = atoi(argv[1])) < 1 || (g_embd = atoi(argv[2])) < 1) {
        fprintf(stderr, "usage: pairwise_set SEQ EMBD (the model test_pairwise.sh trains)\n");
        return 2;
    }
    size_t total = 1;
    for (int f = 0; f < NF; f++) total *= (size_t)F[f].n;
    cand *ok = malloc(total * sizeof *ok);
    unsigned char *coverable = calloc(NPAIRS, 1), *covered = calloc(NPAIRS, 1);
    size_t n_ok = 0;
    for (size_t k = 0; k < total; k++) {
        cand c;
        size_t r = k;
        for (int f = NF - 1; f >= 0; f--) c.v[f] = (unsigned char)(r % F[f].n), r /= F[f].n;
        if (!accepted(&c)) continue;
        ok[n_ok++] = c;
        for (int i = 0; i < NF; i++)
            for (int j = i + 1; j < NF; j++) coverable[pair_ix(i, c.v[i], j, c.v[j])] = 1;
    }
    size_t n_pairs = 0;
    for (size_t p = 0; p < NPAIRS; p++) n_pairs += coverable[p];
    int runs = 0;
    for (;;) {
        int best = -1, best_gain = 0;
        for (size_t k = 0; k < n_ok; k++) {
            int g = gain(&ok[k], covered);
            if (g > best_gain) best_gain = g, best = (int)k;
        }
        if (best < 0) break;
        const cand *c = &ok[best];
        for (int i = 0; i < NF; i++)
            for (int j = i + 1; j < NF; j++) covered[pair_ix(i, c->v[i], j, c->v[j])] = 1;
        print_run(c);
        runs++;
    }
    size_t left = 0;
    for (size_t p = 0; p < NPAIRS; p++) left += coverable[p] && !covered[p];
    fprintf(stderr,
            "pairwise: %d runs cover all %zu value pairs of %d factors that an accepted layout can hold "
            "(%zu of %zu combinations accepted: at most %d ranks, no rule of the table broken)\n",
            runs, n_pairs, NF, n_ok, total, MAX_RANKS);
    free(ok), free(coverable), free(covered);
    if (left) fprintf(stderr, "pairwise: %zu coverable pairs left uncovered\n", left);
    if (runs > MAX_RUNS) fprintf(stderr, "pairwise: %d runs, more than the %d allowed\n", runs, MAX_RUNS);
    return left || runs > MAX_RUNS;
}
