/* Nodes and transports: which world ranks share a node, and how each group's
 * collectives travel. Both are decided once (nodes at td_comm_init, a
 * group's transport when it is split) from data every member holds alike,
 * so the members cannot disagree later: before, each rank chose per call
 * from where its buffer lay, and ranks that chose differently hung until the
 * comm timeout (the per-op descriptors of shm_agree.c now catch what is
 * still chosen per call).
 *
 * TRIDENT_RANKS_PER_NODE=k makes nodes of k consecutive world ranks, as
 * mpirun --map-by slot places ranks on hosts of k slots: on one machine it
 * exercises the multi-node paths (groups spanning "nodes" go through MPI or
 * hierarchically) that real clusters take. A "node" must not span two real
 * hosts: shared memory cannot cross them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_internal.h" /* TD_SHM_MAX_RANKS */

static int *g_node;     /* [world size]: node id (lowest world rank on it) of each rank */
static int g_world_n;
static int g_per_node;  /* TRIDENT_RANKS_PER_NODE, 0 when unset */
static int g_hier = -1; /* td_comm_set_hier; -1: the environment decides */

static _Noreturn void nodes_error(const char *msg) {
    /* every rank found the same problem from the same data: one line */
    if (td_comm_world_rank() == 0) td_fail("%s", msg);
    MPI_Barrier(MPI_COMM_WORLD); /* rank 0's abort ends us here */
    td_fail("%s", msg);
}

void td_nodes_init(void) {
    int n = 0, me = 0, lowest = 0;
    TD_MPI(MPI_Comm_size(MPI_COMM_WORLD, &n));
    TD_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    MPI_Comm host;
    TD_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &host));
    TD_MPI(MPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, host));
    /* the ranks sharing this host's cores and memory, whatever launched
     * them (srun sets no OMPI_COMM_WORLD_LOCAL_SIZE): threads per rank and
     * each rank's memory share follow from it */
    int on_host = 1;
    TD_MPI(MPI_Comm_size(host, &on_host));
    td_set_local_ranks(on_host);
    TD_MPI(MPI_Comm_free(&host));
    int *real = malloc((size_t)n * sizeof *real);
    g_node = malloc((size_t)n * sizeof *g_node);
    TD_ASSERT(real && g_node);
    TD_MPI(MPI_Allgather(&lowest, 1, MPI_INT, real, 1, MPI_INT, MPI_COMM_WORLD));
    g_world_n = n;

    const char *env = getenv("TRIDENT_RANKS_PER_NODE");
    long k = 0;
    if (env && *env) {
        char *end = NULL;
        k = strtol(env, &end, 10);
        if (*end || k < 1 || k > 1 << 20) k = -1;
    }
    int mine[2] = {(int)k, -(int)k}, all[2];
    TD_MPI(MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    char msg[256];
    if (all[0] != -all[1]) {
        snprintf(msg, sizeof msg,
                 "TRIDENT_RANKS_PER_NODE differs between ranks (%d and %d; unset counts as 0); "
                 "set it alike for every rank (mpirun -x TRIDENT_RANKS_PER_NODE)",
                 all[0], -all[1]);
        nodes_error(msg);
    }
    if (k < 0) {
        snprintf(msg, sizeof msg,
                 "TRIDENT_RANKS_PER_NODE='%.40s' is not a whole number of ranks per node (1 or more)",
                 env);
        nodes_error(msg);
    }
    g_per_node = (int)k;
    for (int r = 0; r < n; r++) {
        g_node[r] = k > 0 ? (int)(r / k * k) : real[r];
        if (real[r] == real[g_node[r]]) continue;
        snprintf(msg, sizeof msg,
                 "TRIDENT_RANKS_PER_NODE=%ld puts world ranks %d and %d on one node, but they run "
                 "on different hosts; use a k that divides the ranks of each host (with "
                 "mpirun --map-by slot)",
                 k, g_node[r], r);
        free(real);
        nodes_error(msg);
    }
    free(real);
}

void td_nodes_free(void) {
    free(g_node);
    g_node = NULL;
}

int td_comm_node_of(int world_rank) {
    TD_ASSERT(g_node && world_rank >= 0 && world_rank < g_world_n);
    return g_node[world_rank];
}

void td_comm_set_hier(int on) { g_hier = on ? 1 : 0; }

static int env_on(const char *name) {
    const char *v = getenv(name);
    return !(v && !strcmp(v, "0"));
}

/* "dp" + ".node" in the 15 characters a name has */
static td_comm *sub_group(td_comm *c, int color, const char *suffix) {
    MPI_Comm out;
    TD_MPI(MPI_Comm_split(c->mpi, color, c->rank, &out));
    char name[32];
    snprintf(name, sizeof name, "%.*s%s", (int)(15 - strlen(suffix)), c->name, suffix);
    return td_comm_wrap(out, name);
}

/* The choice itself; td_comm_choose_transport sets the row from it. */
static void choose(td_comm *c) {
    c->transport = TD_TRANSPORT_SELF;
    c->n_nodes = c->per_node = 1;
    if (c->size < 2) return;
    /* environment settings are per process: the group takes the most
     * conservative one of its members, so they all choose alike */
    int want[2] = {td_comm_shm() && env_on("TRIDENT_COMM_SHM"),
                   g_hier >= 0 ? g_hier : env_on("TRIDENT_COMM_HIER")};
    int agreed[2];
    TD_MPI(MPI_Allreduce(want, agreed, 2, MPI_INT, MPI_MIN, c->mpi));
    /* nodes in order of first member; members per node; my node's index
     * and my position on it */
    int *nodes = calloc((size_t)c->size, sizeof(int)), *count = calloc((size_t)c->size, sizeof(int));
    TD_ASSERT(nodes && count);
    int n_nodes = 0, my_node = -1, my_pos = -1;
    for (int i = 0; i < c->size; i++) {
        int node = td_comm_node_of(c->world_ranks[i]), x = 0;
        while (x < n_nodes && nodes[x] != node) x++;
        if (x == n_nodes) nodes[n_nodes++] = node;
        if (i == c->rank) my_node = x, my_pos = count[x];
        count[x]++;
    }
    int equal = 1;
    for (int x = 1; x < n_nodes; x++) equal &= count[x] == count[0];
    c->n_nodes = n_nodes;
    c->per_node = equal ? count[0] : 0;
    c->transport = TD_TRANSPORT_MPI;
    if (n_nodes == 1) {
        if (agreed[0]) c->shm = td_shm_open(c->mpi, c->rank, c->size, c->label, c->world_ranks);
        if (c->shm) c->transport = TD_TRANSPORT_SHM;
    } else if (agreed[0] && agreed[1] && equal && count[0] >= 2 && count[0] <= TD_SHM_MAX_RANKS) {
        c->intra = sub_group(c, my_node, ".node");
        c->inter = sub_group(c, my_pos, ".x");
        /* every node needs its ring (/dev/shm may be full on one) */
        int ring = c->intra->shm != NULL, all = 0;
        TD_MPI(MPI_Allreduce(&ring, &all, 1, MPI_INT, MPI_MIN, c->mpi));
        if (all)
            c->transport = TD_TRANSPORT_HIER;
        else
            td_hier_free(c);
    }
    free(nodes);
    free(count);
}

void td_comm_choose_transport(td_comm *c) {
    choose(c);
    c->ops = td_transport_row(c->transport);
}
