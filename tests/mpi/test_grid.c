/* The grid of named axes against a brute-force enumeration of coordinates,
 * for every order string (all 24 permutations of tp, cp, dp, pp) and every
 * layout of a fixed list that the world size allows, with and without
 * parameter servers.
 *
 * The oracle does not use the grid's strides: it walks world ranks 0, 1, ...
 * with an odometer over the axes in order-string order (fastest first) and
 * records each rank's coordinates. Every group is then "the ranks that share
 * my coordinates outside the group's axes, by world rank", and is checked
 * three ways: size and this rank's place, each member's world rank, and an
 * all-reduce of world ranks over the group (so the MPI communicator itself
 * has those members).
 *   test_grid        run the layouts for this world size
 *   test_grid bad    --dp 2 on 3 ranks: must fail with the one-line error */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/grid.h"

#define MAX_RANKS 64
/* The sanitizer build (CI budget: ~170 grids at 4 ranks took 390 s under
 * ASan on a loaded machine) checks every 5th order of each layout with two
 * axes or more, the n-th such layout starting at order n mod 5: the same
 * code for every order, every order still met across the layouts at 4 ranks,
 * both shard passes (5 is odd); the Release build checks all 24
 * (tests/sanitize/README.md). */
#if defined(__SANITIZE_ADDRESS__)
#define ORDER_STRIDE 5
#else
#define ORDER_STRIDE 1
#endif
static int g_checks;
static char g_what[128]; /* the layout under test, for failures */

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL rank %d, %s: ", td_comm_rank(td_comm_world()), g_what);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                     \
            td_die(1);                                                                             \
        }                                                                                          \
    } while (0)

static const char *const names[TD_AXES] = {"tp", "cp", "dp", "pp"};

/* coords[r][a] of every worker r, by the odometer. */
static void enumerate(const int size[TD_AXES], const td_axis_id order[TD_AXES], int workers,
                      int coords[][TD_AXES]) {
    int c[TD_AXES] = {0};
    for (int r = 0; r < workers; r++) {
        memcpy(coords[r], c, sizeof c);
        for (int i = 0; i < TD_AXES; i++) { /* increment, fastest axis first */
            td_axis_id a = order[i];
            if (++c[a] < size[a]) break;
            c[a] = 0;
        }
    }
}

/* The members of my group over `set`, by world rank; restrict_pp_ends keeps
 * only the first and last pipeline stage (the embedding group). */
static int expected(int coords[][TD_AXES], int workers, int me, unsigned set, int pp_ends, int P,
                    int *out) {
    int n = 0;
    for (int r = 0; r < workers; r++) {
        int same = 1;
        for (int a = 0; a < TD_AXES; a++)
            if (!(set & TD_AXIS_BIT(a)) && coords[r][a] != coords[me][a]) same = 0;
        if (pp_ends && coords[r][TD_PP] != 0 && coords[r][TD_PP] != P - 1) same = 0;
        if (same) out[n++] = r;
    }
    return n;
}

static void check_group(const td_grid *g, td_comm *c, const char *name, const int *members, int n) {
    EXPECT(c != NULL, "%s group missing", name);
    EXPECT(td_comm_size(c) == n, "%s size %d, want %d", name, td_comm_size(c), n);
    float sum = 0, mine = (float)g->world_rank;
    int pos = -1;
    for (int r = 0; r < n; r++) {
        EXPECT(td_comm_world_rank_of(c, r) == members[r], "%s member %d is world %d, want %d", name,
               r, td_comm_world_rank_of(c, r), members[r]);
        if (members[r] == g->world_rank) pos = r;
        sum += (float)members[r];
    }
    EXPECT(td_comm_rank(c) == pos, "%s rank %d, want %d", name, td_comm_rank(c), pos);
    td_allreduce(c, &mine, 1, TD_F32, TD_SUM);
    EXPECT(mine == sum, "%s all-reduce of world ranks %g, want %g", name, mine, sum);
}

/* Hybrid sharding: of the gradient group's members (in group order), the
 * run of ns holding me, and the members at my index in every run. */
static void check_shards(const td_grid *g, const int *grad, int n, int ns) {
    int k = -1, shard[MAX_RANKS], rep[MAX_RANKS], nr = 0;
    for (int r = 0; r < n; r++)
        if (grad[r] == g->world_rank) k = r;
    for (int r = 0; r < ns; r++) shard[r] = grad[k / ns * ns + r];
    for (int r = k % ns; r < n; r += ns) rep[nr++] = grad[r];
    check_group(g, g->shard_comm, "shard", shard, ns);
    check_group(g, g->replica_comm, "replica", rep, nr);
}

static void check_layout(const int want[TD_AXES], int S, const char *order_s, int dp_shard) {
    td_axis_id order[TD_AXES];
    char why[128];
    EXPECT(td_grid_order_parse(order_s, order, why, sizeof why), "order %s refused: %s", order_s,
           why);
    td_grid_spec spec = {.order = order_s, .n_servers = S, .dp_shard = dp_shard};
    memcpy(spec.size, want, sizeof spec.size);
    td_grid grid, *g = &grid;
    td_grid_create(g, &spec);
    if (!strcmp(order_s, TD_GRID_ORDER_DEFAULT)) td_grid_print(g);
    int N = g->world_size, me = g->world_rank, size[TD_AXES];
    for (int a = 0; a < TD_AXES; a++) size[a] = td_grid_size(g, a);
    int workers = size[TD_TP] * size[TD_CP] * size[TD_DP] * size[TD_PP];
    snprintf(g_what, sizeof g_what, "order %.20s, tp %d cp %d dp %d pp %d + %d", order_s,
             size[TD_TP], size[TD_CP], size[TD_DP], size[TD_PP], S);
    for (int a = 0; a < TD_AXES; a++) {
        EXPECT(a == TD_DP && want[a] <= 0 ? 1 : size[a] == want[a], "%s size %d, asked %d",
               names[a], size[a], want[a]);
        EXPECT(!strcmp(g->axis[a].name, names[a]), "axis %d named %s", a, g->axis[a].name);
    }
    EXPECT(workers + S == N && g->n_servers == S && td_grid_workers(g) == workers, "axis sizes");
    EXPECT(g->world == td_comm_world(), "world group");
    static int coords[MAX_RANKS][TD_AXES];
    TD_CHECK(workers <= MAX_RANKS, "test_grid: %d workers", workers);
    enumerate(size, order, workers, coords);
    int members[MAX_RANKS], n;
    if (me < workers) {
        EXPECT(!g->is_server && g->server_rank == -1 && !g->ps_comm, "worker flagged as server");
        for (int a = 0; a < TD_AXES; a++)
            EXPECT(td_grid_coord(g, a) == coords[me][a], "%s coordinate %d, want %d", names[a],
                   td_grid_coord(g, a), coords[me][a]);
        for (int r = 0; r < workers; r++) {
            int c[TD_AXES];
            td_grid_coords_of(g, r, c);
            EXPECT(td_grid_rank_of(g, coords[r]) == r && !memcmp(c, coords[r], sizeof c),
                   "rank_of / coords_of of world rank %d", r);
        }
        for (int a = 0; a < TD_AXES; a++) {
            n = expected(coords, workers, me, TD_AXIS_BIT(a), 0, 0, members);
            check_group(g, td_grid_comm(g, a), names[a], members, n);
            EXPECT(!strncmp(td_comm_name(td_grid_comm(g, a)), names[a], 2), "%s group named %s",
                   names[a], td_comm_name(td_grid_comm(g, a)));
        }
        n = expected(coords, workers, me, TD_AXIS_BIT(TD_DP) | TD_AXIS_BIT(TD_CP), 0, 0, members);
        check_group(g, g->grad_comm, "grad (dp x cp)", members, n);
        if (dp_shard >= 1 && dp_shard < n)
            check_shards(g, members, n, dp_shard);
        else
            EXPECT(g->shard_comm == g->grad_comm && !g->replica_comm, "shards without --dp-shard");
        n = expected(coords, workers, me, TD_AXIS_BIT(TD_TP) | TD_AXIS_BIT(TD_PP), 0, 0, members);
        check_group(g, g->mp_comm, "mp (tp x pp)", members, n);
        int P = size[TD_PP], j = coords[me][TD_PP];
        if (P > 1 && (j == 0 || j == P - 1)) {
            n = expected(coords, workers, me, TD_AXIS_BIT(TD_PP), 1, P, members);
            check_group(g, g->embed_comm, "embed", members, n);
        } else {
            EXPECT(!g->embed_comm, "embed group on a middle stage or at pp 1");
        }
        int prev = -1, next = -1;
        for (int r = 0; r < workers; r++) {
            int same = 1;
            for (int a = 0; a < TD_AXES; a++)
                if (a != TD_PP && coords[r][a] != coords[me][a]) same = 0;
            if (same && coords[r][TD_PP] == j - 1) prev = r;
            if (same && coords[r][TD_PP] == j + 1) next = r;
        }
        EXPECT(g->pp_prev == prev && g->pp_next == next, "pp neighbours %d %d, want %d %d",
               g->pp_prev, g->pp_next, prev, next);
    } else {
        EXPECT(g->is_server && g->server_rank == me - workers, "server rank %d", g->server_rank);
        for (int a = 0; a < TD_AXES; a++)
            EXPECT(td_grid_coord(g, a) == -1 && !td_grid_comm(g, a), "server on axis %s", names[a]);
        EXPECT(!g->grad_comm && !g->mp_comm && !g->embed_comm && !g->shard_comm && !g->replica_comm,
               "server in a derived group");
        EXPECT(g->pp_prev == -1 && g->pp_next == -1, "server pp neighbours");
        for (int r = 0; r < S; r++) members[r] = workers + r;
        check_group(g, g->ps_comm, "ps", members, S);
    }
    td_grid_destroy(g);
}

/* All 24 orders, by Heap's algorithm over the four names. */
static int all_orders(char out[24][16]) {
    int p[TD_AXES] = {0, 1, 2, 3}, c[TD_AXES] = {0}, n = 0;
#define EMIT()                                                                                     \
    snprintf(out[n++], 16, "%s-%s-%s-%s", names[p[0]], names[p[1]], names[p[2]], names[p[3]])
    EMIT();
    for (int i = 1; i < TD_AXES;) {
        if (c[i] < i) {
            int j = i % 2 ? c[i] : 0, t = p[j];
            p[j] = p[i], p[i] = t;
            EMIT();
            c[i]++, i = 1;
        } else {
            c[i++] = 0;
        }
    }
#undef EMIT
    return n;
}

static void check_order_strings(void) {
    static const char *const bad[] = {"tp-dp-pp", "tp-cp-dp-pp-tp", "tp-tp-dp-pp", "tp-cp-dp-xx",
                                      "",         "tp--cp-dp-pp",   "TP-CP-DP-PP"};
    td_axis_id o[TD_AXES];
    char why[128];
    snprintf(g_what, sizeof g_what, "order strings");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        EXPECT(!td_grid_order_parse(bad[i], o, why, sizeof why) && why[0], "order '%s' accepted",
               bad[i]);
    EXPECT(td_grid_order_parse(TD_GRID_ORDER_DEFAULT, o, why, sizeof why) && o[0] == TD_TP &&
               o[1] == TD_CP && o[2] == TD_DP && o[3] == TD_PP,
           "the default order");
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int N = td_comm_size(td_comm_world());
    if (argc > 1 && !strcmp(argv[1], "bad")) {
        td_grid g;
        td_grid_create_dtp(&g, 2, 1, 1, 0); /* must not return on 3 ranks */
        td_log("test_grid bad: td_grid_create accepted --dp 2 on %d ranks\n", N);
        td_comm_finalize();
        return N == 2 ? 1 : 0; /* on 2 ranks it is valid; the test runs it on 3 */
    }
    check_order_strings();
    /* {tp, cp, dp, pp, servers}; dp 0 = derived from the world size. */
    static const int layouts[][5] = {
        {2, 1, 2, 1, 0}, {1, 1, 4, 1, 0}, {2, 1, 1, 2, 0}, {1, 1, 2, 2, 0}, {1, 1, 1, 4, 0},
        {4, 1, 1, 1, 0}, {2, 1, 0, 1, 0}, {1, 1, 0, 1, 0}, {1, 1, 1, 3, 1}, {1, 1, 0, 1, 2},
        {1, 1, 0, 2, 0}, {1, 1, 2, 1, 1}, {1, 1, 0, 1, 1}, {1, 1, 3, 1, 0}, {3, 1, 1, 1, 0},
        {1, 1, 1, 3, 0}, {1, 1, 1, 1, 2}, {1, 1, 1, 2, 0}, {2, 1, 1, 1, 0}, {1, 1, 2, 1, 0},
        {1, 1, 1, 1, 0}, {1, 2, 2, 1, 0}, {2, 2, 1, 1, 0}, {1, 2, 1, 2, 0}, {1, 4, 1, 1, 0},
        {1, 2, 0, 1, 0}, {1, 3, 1, 1, 0}, {1, 2, 1, 1, 1}, {2, 2, 2, 1, 0}, {1, 2, 2, 2, 0},
        {2, 2, 1, 2, 0}, {2, 1, 2, 2, 0}, {2, 2, 2, 2, 0},
    };
    char orders[24][16];
    int n_orders = all_orders(orders), ran = 0, n_big = 0;
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        const int *l = layouts[i];
        int fixed = l[0] * l[1] * l[3], workers = N - l[4];
        int fits = l[2] > 0 ? fixed * l[2] == workers : workers >= fixed && workers % fixed == 0;
        if (!fits) continue;
        /* orders matter only when two or more axes are larger than 1 */
        int big =
            (l[0] > 1) + (l[1] > 1) + (l[2] > 1 || (l[2] == 0 && workers / fixed > 1)) + (l[3] > 1);
        /* every other pass of a gradient group of 4 or more ranks in shards of 2 */
        int G = l[1] * (l[2] > 0 ? l[2] : workers / fixed);
        int first = big >= 2 ? n_big++ % ORDER_STRIDE : 0;
        for (int k = 0; k < (big >= 2 ? n_orders : 1); k++) {
            if (k % ORDER_STRIDE != first) continue;
            int ns = G >= 4 && G % 2 == 0 && (i + (size_t)k) % 2 == 1 ? 2 : 0;
            check_layout(l, l[4], big >= 2 ? orders[k] : TD_GRID_ORDER_DEFAULT, ns);
            ran++;
        }
    }
    TD_CHECK(n_orders == 24, "test_grid: %d orders, want 24", n_orders);
    TD_CHECK(ran >= (N > 1 ? 4 : 1), "only %d layouts fit %d ranks", ran, N);
    td_log("test_grid: %d ranks, %d (layout, order) pairs, %d checks on rank 0: all ok\n", N, ran,
           g_checks);
    td_comm_finalize();
    return 0;
}
