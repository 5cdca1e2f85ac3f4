/* The process grid: world rank = pp*(D*T) + dp*T + tp (tp fastest, so tensor
 * peers are neighbours in rank order, which mpirun places on one node first),
 * then S parameter servers after the D*T*P grid ranks. */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/grid.h"

int td_grid_rank_of(const td_grid *g, int dp_rank, int pp_rank, int tp_rank) {
    TD_ASSERT(dp_rank >= 0 && dp_rank < g->dp && pp_rank >= 0 && pp_rank < g->pp && tp_rank >= 0 &&
              tp_rank < g->tp);
    return pp_rank * g->dp * g->tp + dp_rank * g->tp + tp_rank;
}

/* Every rank sees the same N and flags, so every rank reaches the same
 * verdict; rank 0 alone prints it (one line, not N) and its td_fail takes
 * the job down while the others wait in a barrier that never completes. */
static void factor_error(const char *msg) {
    if (td_comm_rank(td_comm_world()) == 0) td_fail("%s", msg);
    td_barrier(td_comm_world());
    td_die(TD_EXIT_USAGE); /* not reached unless rank 0 somehow went on */
}

static void check_factors(int *dp, int tp, int pp, int S, int N) {
    char msg[512];
    if (tp < 1 || pp < 1 || S < 0) {
        snprintf(msg, sizeof msg,
                 "--tp %d, --pp %d and --ps-servers %d: tp and pp must be >= 1 "
                 "and servers >= 0",
                 tp, pp, S);
        factor_error(msg);
    }
    if (*dp <= 0) {
        int workers = N - S;
        if (workers < tp * pp || workers % (tp * pp) != 0) {
            snprintf(msg, sizeof msg,
                     "--tp %d x --pp %d (+ %d server%s) does not divide the %d "
                     "ranks mpirun started; use -np k*%d+%d for some k >= 1, or change the factors",
                     tp, pp, S, S == 1 ? "" : "s", N, tp * pp, S);
            factor_error(msg);
        }
        *dp = workers / (tp * pp);
    }
    long want = (long)*dp * tp * pp + S;
    if (want != N) {
        snprintf(msg, sizeof msg,
                 "--dp %d x --tp %d x --pp %d (+ %d server%s) = %ld ranks, but "
                 "mpirun started %d; use -np %ld or change the factors",
                 *dp, tp, pp, S, S == 1 ? "" : "s", want, N, want);
        factor_error(msg);
    }
}

void td_grid_create(td_grid *g, int dp, int tp, int pp, int n_servers) {
    memset(g, 0, sizeof *g);
    td_comm *w = td_comm_world();
    int N = td_comm_size(w), me = td_comm_rank(w);
    check_factors(&dp, tp, pp, n_servers, N);
    g->world = w;
    g->world_rank = me;
    g->world_size = N;
    g->dp = dp, g->tp = tp, g->pp = pp, g->n_servers = n_servers;
    int grid_n = dp * tp * pp;
    g->is_server = me >= grid_n;
    g->server_rank = g->is_server ? me - grid_n : -1;
    g->dp_rank = g->tp_rank = g->pp_rank = -1;
    g->pp_prev = g->pp_next = -1;
    if (!g->is_server) {
        g->tp_rank = me % tp;
        g->dp_rank = (me / tp) % dp;
        g->pp_rank = me / (tp * dp);
        if (g->pp_rank > 0) g->pp_prev = td_grid_rank_of(g, g->dp_rank, g->pp_rank - 1, g->tp_rank);
        if (g->pp_rank < pp - 1)
            g->pp_next = td_grid_rank_of(g, g->dp_rank, g->pp_rank + 1, g->tp_rank);
    }
    /* Splits are collective over world: servers take part with color -1. */
    int s = g->is_server, i = g->dp_rank, j = g->pp_rank, k = g->tp_rank;
    g->dp_comm = td_comm_split(w, s ? -1 : j * tp + k, i, "dp");
    g->tp_comm = td_comm_split(w, s ? -1 : j * dp + i, k, "tp");
    g->pp_comm = td_comm_split(w, s ? -1 : i * tp + k, j, "pp");
    g->mp_comm = td_comm_split(w, s ? -1 : i, j * tp + k, "mp");
    g->ps_comm = td_comm_split(w, s ? 0 : -1, g->server_rank, "ps");
    int ends = !s && pp > 1 && (j == 0 || j == pp - 1);
    g->embed_comm = td_comm_split(w, ends ? i * tp + k : -1, j, "embed");
    td_log_set_identity(me, i, j, k, td_log_verbose());
}

void td_grid_destroy(td_grid *g) {
    td_comm_free(g->dp_comm);
    td_comm_free(g->tp_comm);
    td_comm_free(g->pp_comm);
    td_comm_free(g->mp_comm);
    td_comm_free(g->ps_comm);
    td_comm_free(g->embed_comm);
    memset(g, 0, sizeof *g);
}

/* One line per (pp, dp) row: the world ranks of its tp members, so a reader
 * finds any rank's coordinates at a glance; servers on the last line. */
/* How each of this rank's groups travels (chosen at the split, alike on
 * every member): rank 0 in the start report, every rank with --verbose. */
static void print_transports(const td_grid *g) {
    if (g->world_size < 2) return;
    td_comm *groups[] = {g->dp_comm, g->tp_comm, g->pp_comm, g->ps_comm};
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

void td_grid_print(const td_grid *g) {
    print_transports(g);
    if (g->world_rank != 0) return;
    char servers[48] = "";
    if (g->n_servers)
        snprintf(servers, sizeof servers, " + %d server%s", g->n_servers,
                 g->n_servers == 1 ? "" : "s");
    char tps[48] = "";
    if (g->tp > 1) snprintf(tps, sizeof tps, "; each row lists tp 0..%d", g->tp - 1);
    td_log("grid: dp %d x tp %d x pp %d%s = %d ranks (tp fastest, then dp, then pp)%s\n", g->dp,
           g->tp, g->pp, servers, g->world_size, tps);
    for (int j = 0; j < g->pp; j++) {
        for (int i = 0; i < g->dp; i++) {
            char line[1024];
            size_t n = (size_t)snprintf(line, sizeof line, "  pp %d dp %d: rank%s", j, i,
                                        g->tp > 1 ? "s" : "");
            for (int k = 0; k < g->tp && n < sizeof line - 16; k++)
                n +=
                    (size_t)snprintf(line + n, sizeof line - n, " %d", td_grid_rank_of(g, i, j, k));
            if (n >= sizeof line - 16) snprintf(line + n, sizeof line - n, " ...");
            td_log("%s\n", line);
        }
    }
    if (g->n_servers == 1) td_log("  server: rank %d\n", g->world_size - 1);
    if (g->n_servers > 1)
        td_log("  servers: ranks %d..%d\n", g->dp * g->tp * g->pp, g->world_size - 1);
}
