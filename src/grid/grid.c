/* The process grid as named axes (grid.h): ranks from an order string, one
 * communicator per axis, derived groups over axis sets, servers after the
 * grid. The only place that turns coordinates into world ranks. */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/grid.h"

static const char *const axis_names[TD_AXES] = {"tp", "cp", "dp", "pp"};
/* The order logs and reports print coordinates in: slowest first by the
 * default order, so "[rank r dp=i pp=j tp=k]" reads as before cp existed. */
static const td_axis_id display_order[TD_AXES] = {TD_DP, TD_CP, TD_PP, TD_TP};

int td_grid_order_parse(const char *s, td_axis_id out[TD_AXES], char *why, size_t why_n) {
    unsigned seen = 0;
    int n = 0;
    const char *p = s;
    while (n <= TD_AXES) {
        size_t len = strcspn(p, "-");
        int a = -1;
        for (int i = 0; i < TD_AXES; i++)
            if (len == strlen(axis_names[i]) && strncmp(p, axis_names[i], len) == 0) a = i;
        if (a < 0 || (seen & TD_AXIS_BIT(a))) {
            snprintf(why, why_n, "'%.*s' is %s", (int)len, p,
                     a < 0 ? "not an axis" : "named twice");
            return 0;
        }
        seen |= TD_AXIS_BIT(a);
        if (n < TD_AXES) out[n] = (td_axis_id)a;
        n++;
        if (!p[len]) break;
        p += len + 1;
    }
    if (n != TD_AXES) {
        snprintf(why, why_n, "it names %d axes, not all %d", n, TD_AXES);
        return 0;
    }
    return 1;
}

int td_grid_workers(const td_grid *g) {
    int n = 1;
    for (int a = 0; a < TD_AXES; a++) n *= g->axis[a].size;
    return n;
}

int td_grid_rank_of(const td_grid *g, const int coord[TD_AXES]) {
    int r = 0;
    for (int a = 0; a < TD_AXES; a++) {
        TD_ASSERT(coord[a] >= 0 && coord[a] < g->axis[a].size);
        r += coord[a] * g->axis[a].stride;
    }
    return r;
}

void td_grid_coords_of(const td_grid *g, int world_rank, int coord[TD_AXES]) {
    TD_ASSERT(world_rank >= 0 && world_rank < td_grid_workers(g));
    for (int a = 0; a < TD_AXES; a++) coord[a] = world_rank / g->axis[a].stride % g->axis[a].size;
}

int td_grid_rank_with(const td_grid *g, td_axis_id a, int c) {
    int coord[TD_AXES];
    for (int i = 0; i < TD_AXES; i++) coord[i] = g->axis[i].rank;
    coord[a] = c;
    return td_grid_rank_of(g, coord);
}

/* Every rank sees the same N and flags, so every rank reaches the same
 * verdict; rank 0 alone prints it (one line, not N) and its td_fail takes
 * the job down while the others wait in a barrier that never completes. */
static void factor_error(const char *msg) {
    if (td_comm_rank(td_comm_world()) == 0) td_fail("%s", msg);
    td_barrier(td_comm_world());
    td_die(TD_EXIT_USAGE); /* not reached unless rank 0 somehow went on */
}

/* "--tp 2 x --pp 2": the fixed axes of the spec (cp only when > 1, so the
 * messages of layouts without it read as they always did). */
static void fixed_factors(const int *size, char *out, size_t n) {
    int tp = size[TD_TP], cp = size[TD_CP], pp = size[TD_PP];
    if (cp > 1)
        snprintf(out, n, "--tp %d x --cp %d x --pp %d", tp, cp, pp);
    else
        snprintf(out, n, "--tp %d x --pp %d", tp, pp);
}

static void check_factors(int *size, int S, int N) {
    char msg[512], fixed[96];
    int other = size[TD_TP] * size[TD_CP] * size[TD_PP];
    if (size[TD_TP] < 1 || size[TD_CP] < 1 || size[TD_PP] < 1 || S < 0) {
        snprintf(msg, sizeof msg,
                 "--tp %d, --cp %d, --pp %d and --ps-servers %d: tp, cp and pp must be >= 1 "
                 "and servers >= 0",
                 size[TD_TP], size[TD_CP], size[TD_PP], S);
        factor_error(msg);
    }
    fixed_factors(size, fixed, sizeof fixed);
    if (size[TD_DP] <= 0) {
        int workers = N - S;
        if (workers < other || workers % other != 0) {
            snprintf(msg, sizeof msg,
                     "%s (+ %d server%s) does not divide the %d "
                     "ranks mpirun started; use -np k*%d+%d for some k >= 1, or change the factors",
                     fixed, S, S == 1 ? "" : "s", N, other, S);
            factor_error(msg);
        }
        size[TD_DP] = workers / other;
    }
    long want = (long)size[TD_DP] * other + S;
    if (want != N) {
        snprintf(msg, sizeof msg,
                 "--dp %d x %s (+ %d server%s) = %ld ranks, but "
                 "mpirun started %d; use -np %ld or change the factors",
                 size[TD_DP], fixed, S, S == 1 ? "" : "s", want, N, want);
        factor_error(msg);
    }
}

/* Collective over world: the group of ranks sharing every coordinate outside
 * `set`, keyed by their index within it (order-string order, fastest first).
 * Ranks not in the grid (servers, or ranks failing `member`) pass color -1. */
static td_comm *split_set(td_grid *g, unsigned set, int member, const char *name) {
    int color = 0, key = 0, cmul = 1, kmul = 1;
    for (int i = 0; i < TD_AXES; i++) {
        const td_axis *x = &g->axis[g->order[i]];
        if (set & TD_AXIS_BIT(g->order[i]))
            key += x->rank * kmul, kmul *= x->size;
        else
            color += x->rank * cmul, cmul *= x->size;
    }
    return td_comm_split(g->world, g->is_server || !member ? -1 : color, key, name);
}

/* A derived group: an axis' own communicator when only that axis of the set
 * is larger than 1 (no new communicator, so the same reductions run), else a
 * new split, remembered in g->owned. */
static td_comm *derived(td_grid *g, unsigned set, const char *name, unsigned bit) {
    int big = -1, n_big = 0;
    for (int a = 0; a < TD_AXES; a++)
        if ((set & TD_AXIS_BIT(a)) && g->axis[a].size > 1) big = a, n_big++;
    /* sizes are alike on every rank, so all ranks alias or all split */
    if (n_big <= 1) return g->axis[big >= 0 ? big : __builtin_ctz(set)].comm;
    g->owned |= bit;
    return split_set(g, set, 1, name);
}

enum { OWN_GRAD = 1, OWN_MP = 2, OWN_SHARD = 4, OWN_EP = 8 };

/* The gradient group's consecutive runs of n ranks (*run), and the ranks
 * with one index in every run (*across). Collective over grad. */
static void runs_of(td_grid *g, int n, td_comm **run, td_comm **across, const char *rn, const char *an) {
    int k = td_comm_rank(g->grad_comm);
    *run = td_comm_split(g->grad_comm, k / n, k, rn);
    *across = td_comm_split(g->grad_comm, k % n, k, an);
}

void td_grid_create(td_grid *g, const td_grid_spec *spec) {
    memset(g, 0, sizeof *g);
    td_comm *w = td_comm_world();
    int N = td_comm_size(w), me = td_comm_rank(w), S = spec->n_servers;
    int size[TD_AXES];
    memcpy(size, spec->size, sizeof size);
    char why[128];
    const char *order = spec->order ? spec->order : TD_GRID_ORDER_DEFAULT;
    if (!td_grid_order_parse(order, g->order, why, sizeof why)) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "--grid-order '%.64s' is not an order of the axes: %s; use a '-'-joined "
                 "permutation of tp, cp, dp, pp, fastest first (default %s)",
                 order, why, TD_GRID_ORDER_DEFAULT);
        factor_error(msg);
    }
    check_factors(size, S, N);
    g->world = w, g->world_rank = me, g->world_size = N, g->n_servers = S;
    int stride = 1;
    for (int i = 0; i < TD_AXES; i++) {
        td_axis *x = &g->axis[g->order[i]];
        x->name = axis_names[g->order[i]];
        x->size = size[g->order[i]];
        x->stride = stride;
        stride *= x->size;
    }
    int grid_n = stride;
    g->is_server = me >= grid_n;
    g->server_rank = g->is_server ? me - grid_n : -1;
    g->pp_prev = g->pp_next = -1;
    int coord[TD_AXES];
    if (!g->is_server) td_grid_coords_of(g, me, coord);
    for (int a = 0; a < TD_AXES; a++) g->axis[a].rank = g->is_server ? -1 : coord[a];
    /* Splits are collective over world, in a fixed order on every rank;
     * servers take part with color -1. */
    for (int a = 0; a < TD_AXES; a++)
        g->axis[a].comm = split_set(g, TD_AXIS_BIT(a), 1, axis_names[a]);
    if (!g->is_server) {
        int j = g->axis[TD_PP].rank, P = g->axis[TD_PP].size;
        if (j > 0) g->pp_prev = td_grid_rank_with(g, TD_PP, j - 1);
        if (j < P - 1) g->pp_next = td_grid_rank_with(g, TD_PP, j + 1);
    }
    g->grad_comm = derived(g, TD_AXIS_BIT(TD_DP) | TD_AXIS_BIT(TD_CP), "grad", OWN_GRAD);
    /* hybrid sharding: the gradient group's consecutive runs of dp_shard
     * ranks are the shards, the ranks with one index in every shard a
     * replica group; a size that does not split the group (refused by the
     * rules table's dp-shard-divides right after) or none aliases grad */
    int G = size[TD_DP] * size[TD_CP], ns = spec->dp_shard;
    g->dp_shard = ns;
    g->shard_comm = g->grad_comm, g->replica_comm = NULL;
    if (ns >= 1 && ns < G && G % ns == 0 && !g->is_server) {
        runs_of(g, ns, &g->shard_comm, &g->replica_comm, "shard", "replica");
        g->owned |= OWN_SHARD;
    }
    /* expert parallelism likewise: runs of ep ranks share out the experts,
     * the ranks with one index in every run hold the same ones (edp) */
    int ne = spec->ep > 0 ? spec->ep : 1;
    g->ep = ne;
    g->ep_comm = NULL, g->edp_comm = g->grad_comm;
    if (ne > 1 && ne <= G && G % ne == 0 && !g->is_server) {
        runs_of(g, ne, &g->ep_comm, &g->edp_comm, "ep", "edp");
        g->owned |= OWN_EP;
    }
    g->mp_comm = split_set(g, TD_AXIS_BIT(TD_TP) | TD_AXIS_BIT(TD_PP), 1, "mp");
    g->owned |= OWN_MP;
    g->ps_comm = td_comm_split(w, g->is_server ? 0 : -1, g->server_rank, "ps");
    int j = g->axis[TD_PP].rank, P = g->axis[TD_PP].size;
    int ends = !g->is_server && P > 1 && (j == 0 || j == P - 1);
    /* the embedding group: pp ends only, so it is a split of the pp axis
     * restricted to its first and last member */
    g->embed_comm = split_set(g, TD_AXIS_BIT(TD_PP), ends, "embed");
    if (g->is_server) {
        char id[32];
        snprintf(id, sizeof id, "server=%d", g->server_rank);
        td_log_set_identity(me, id, td_log_verbose());
    } else {
        char id[96];
        td_grid_describe(g, id, sizeof id, "=", " ");
        td_log_set_identity(me, id, td_log_verbose());
    }
}

void td_grid_create_dtp(td_grid *g, int dp, int tp, int pp, int n_servers) {
    td_grid_spec s = {.size = {[TD_TP] = tp, [TD_CP] = 1, [TD_DP] = dp, [TD_PP] = pp},
                      .n_servers = n_servers};
    td_grid_create(g, &s);
}

void td_grid_destroy(td_grid *g) {
    if (g->owned & OWN_GRAD) td_comm_free(g->grad_comm);
    if (g->owned & OWN_MP) td_comm_free(g->mp_comm);
    if (g->owned & OWN_SHARD) td_comm_free(g->shard_comm), td_comm_free(g->replica_comm);
    if (g->owned & OWN_EP) td_comm_free(g->ep_comm), td_comm_free(g->edp_comm);
    for (int a = 0; a < TD_AXES; a++) td_comm_free(g->axis[a].comm);
    td_comm_free(g->ps_comm);
    td_comm_free(g->embed_comm);
    memset(g, 0, sizeof *g);
}

void td_grid_describe(const td_grid *g, char *out, size_t n, const char *eq, const char *sep) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < TD_AXES && used < n; i++) {
        const td_axis *x = &g->axis[display_order[i]];
        if (x->size < 2) continue;
        used += (size_t)snprintf(out + used, n - used, "%s%s%s%d", used ? sep : "", x->name, eq,
                                 x->rank);
    }
}

/* How each of this rank's groups travels (chosen at the split, alike on
 * every member): rank 0 in the start report, every rank with --verbose. */
static void print_transports(const td_grid *g) {
    if (g->world_size < 2) return;
    td_comm *groups[] = {g->axis[TD_DP].comm, g->axis[TD_CP].comm, g->axis[TD_TP].comm,
                         g->axis[TD_PP].comm, g->ps_comm,
                         g->replica_comm ? g->shard_comm : NULL, g->replica_comm, g->ep_comm,
                         g->ep_comm ? g->edp_comm : NULL};
    char line[1024], d[160];
    size_t n = (size_t)snprintf(line, sizeof line, "transports:");
    for (size_t i = 0; i < sizeof groups / sizeof *groups; i++) {
        td_comm *c = groups[i];
        if (!c || td_comm_size(c) < 2 || n >= sizeof line) continue;
        n += (size_t)snprintf(line + n, sizeof line - n, "%s %s %s", n > 11 ? ";" : "",
                              td_comm_name(c), td_comm_transport_desc(c, d, sizeof d));
    }
    if (n > 11) {
        td_log("%s\n", line);
        if (g->world_rank != 0) td_vlog("%s\n", line);
    }
}

/* "dp 2 x tp 2 x pp 2": dp, tp and pp always, cp when it is > 1. */
static void sizes_line(const td_grid *g, char *out, size_t n) {
    static const td_axis_id shown[TD_AXES] = {TD_DP, TD_CP, TD_TP, TD_PP};
    size_t used = 0;
    for (int i = 0; i < TD_AXES && used < n; i++) {
        const td_axis *x = &g->axis[shown[i]];
        if (shown[i] == TD_CP && x->size < 2) continue;
        used +=
            (size_t)snprintf(out + used, n - used, "%s%s %d", used ? " x " : "", x->name, x->size);
    }
}

/* One line per row of the fastest axis: the world ranks along it, so a
 * reader finds any rank's coordinates at a glance; servers on the last line. */
void td_grid_print(const td_grid *g) {
    print_transports(g);
    if (g->world_rank != 0) return;
    char servers[48] = "", sizes[128], order[64] = "";
    if (g->n_servers)
        snprintf(servers, sizeof servers, " + %d server%s", g->n_servers,
                 g->n_servers == 1 ? "" : "s");
    sizes_line(g, sizes, sizeof sizes);
    for (int i = 0, used = 0; i < TD_AXES; i++)
        used += snprintf(order + used, sizeof order - (size_t)used, "%s%s", i ? "-" : "",
                         axis_names[g->order[i]]);
    const td_axis *fast = &g->axis[g->order[0]];
    char each[48] = "";
    if (fast->size > 1)
        snprintf(each, sizeof each, "; each row lists %s 0..%d", fast->name, fast->size - 1);
    td_log("grid: %s%s = %d ranks (order %s, fastest first)%s\n", sizes, servers, g->world_size,
           order, each);
    int workers = td_grid_workers(g);
    for (int r0 = 0; r0 < workers; r0 += fast->size) {
        int coord[TD_AXES];
        td_grid_coords_of(g, r0, coord);
        char line[1024];
        size_t n = (size_t)snprintf(line, sizeof line, " ");
        for (int i = TD_AXES - 1; i >= 1; i--) {
            const td_axis *x = &g->axis[g->order[i]];
            if (x->size > 1 || g->order[i] != TD_CP)
                n += (size_t)snprintf(line + n, sizeof line - n, " %s %d", x->name,
                                      coord[g->order[i]]);
        }
        n += (size_t)snprintf(line + n, sizeof line - n, ": rank%s", fast->size > 1 ? "s" : "");
        for (int k = 0; k < fast->size && n < sizeof line - 16; k++)
            n += (size_t)snprintf(line + n, sizeof line - n, " %d", r0 + k * fast->stride);
        if (n >= sizeof line - 16) snprintf(line + n, sizeof line - n, " ...");
        td_log("%s\n", line);
    }
    if (g->n_servers == 1) td_log("  server: rank %d\n", g->world_size - 1);
    if (g->n_servers > 1) td_log("  servers: ranks %d..%d\n", workers, g->world_size - 1);
}
