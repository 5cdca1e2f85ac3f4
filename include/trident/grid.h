/* grid: the process grid as named axes over MPI_COMM_WORLD, plus optional
 * parameter-server ranks after the grid.
 *
 * The axes are tp, cp, dp and pp. An order string names them fastest first
 * (default "tp-cp-dp-pp", as Megatron-core's RankGenerator does): the world
 * rank of a coordinate is sum(coord[a] * stride[a]) where the first axis of
 * the order has stride 1 and each next axis the product of the sizes before
 * it. tp fastest puts tensor-parallel peers on neighbouring ranks, which
 * mpirun places on one node first. Ranks size(grid) .. world-1 are parameter
 * servers (S = --ps-servers).
 *
 * Groups: one communicator per axis (its members differ only in that axis'
 * coordinate, ordered by it), and derived groups over sets of axes (ordered
 * by the set's index in order-string order, fastest first). A derived group
 * over a set in which at most one axis has size > 1 is that axis' own
 * communicator, not a copy, so adding a size-1 axis changes no arithmetic.
 * Nothing outside grid.c computes a world rank from coordinates: ask
 * td_grid_rank_of. */
#ifndef TRIDENT_GRID_H
#define TRIDENT_GRID_H

#include <stddef.h>

#include "trident/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_TP, TD_CP, TD_DP, TD_PP, TD_AXES } td_axis_id;

typedef struct {
    const char *name; /* "tp", "cp", "dp", "pp" */
    int size;
    int rank;      /* this rank's coordinate; -1 on servers */
    int stride;    /* world-rank distance between neighbours on this axis */
    td_comm *comm; /* members differ only in this coordinate; NULL on servers */
} td_axis;

/* Bit sets of axes, for derived groups. */
#define TD_AXIS_BIT(a) (1u << (a))

/* What td_grid_create builds. sizes[a] >= 1, except sizes[TD_DP] <= 0 means
 * "the world's workers divided by the other axes". order NULL = default. */
typedef struct {
    int size[TD_AXES];
    const char *order;
    int n_servers;
    int dp_shard; /* hybrid sharding: ranks per shard of the gradient group; 0 = none */
    int ep;       /* expert parallelism: ranks per run of the gradient group sharing out
                     the experts; 0 or 1 = none */
} td_grid_spec;

typedef struct {
    int world_rank, world_size;
    int n_servers;
    int is_server, server_rank; /* server_rank in [0, S) on servers, else -1 */
    td_axis axis[TD_AXES];      /* indexed by td_axis_id */
    td_axis_id order[TD_AXES];  /* fastest first */
    td_comm *world;
    /* Derived groups (NULL on servers unless said):
     * grad: dp x cp, over which every parameter's gradient is summed and
     *       ZeRO shards (cp ranks hold the same parameters, like dp ranks);
     * mp:   tp x pp, the ranks that together hold one model copy;
     * embed: the first and the last pipeline stage of one (tp, cp, dp)
     *       coordinate, which both hold the tied token embedding / LM head
     *       and sum its gradients every step; NULL when pp = 1 and on middle
     *       stages;
     * ps:   the servers (servers only; the global grad norm);
     * shard, replica: hybrid sharding (--dp-shard N): grad's consecutive
     *       runs of N ranks are the shards over which ZeRO splits the state,
     *       the ranks with one index in every shard a replica group that
     *       sums the shards' gradients. Without it shard is grad and replica
     *       NULL.
     * ep, edp: expert parallelism (--ep N): grad's consecutive runs of N
     *       ranks share out the experts (dispatch by all-to-all), the ranks
     *       with one index in every run hold the same experts and sum their
     *       gradients. Without it ep NULL and edp is grad. */
    td_comm *grad_comm, *mp_comm, *embed_comm, *ps_comm;
    td_comm *shard_comm, *replica_comm;
    td_comm *ep_comm, *edp_comm;
    int ep;               /* the spec's ep (1: none) */
    int dp_shard;         /* the spec's (0: none), as asked: the rules table checks it */
    int pp_prev, pp_next; /* world ranks of pipeline neighbours, -1 at the ends */
    unsigned owned;       /* which derived groups grid.c created (the rest alias an axis) */
} td_grid;

/* Ranks in grad_comm (dp x cp): over which the loss and every gradient are
 * summed. Plain arithmetic, also on servers. */
static inline int td_grid_grad_ranks(const td_grid *g) {
    return g->axis[TD_DP].size * g->axis[TD_CP].size;
}

/* The default order, fastest first. */
#define TD_GRID_ORDER_DEFAULT "tp-cp-dp-pp"

/* 1 if s names every axis once, joined by '-'; else 0 with why[] filled. */
int td_grid_order_parse(const char *s, td_axis_id out[TD_AXES], char *why, size_t why_n);

/* Collective over world. Sizes that do not multiply to the world size, or a
 * bad order string, give one clear error naming the factors and N. */
void td_grid_create(td_grid *g, const td_grid_spec *spec);
/* The common case: dp x tp x pp in the default order (cp = 1). */
void td_grid_create_dtp(td_grid *g, int dp, int tp, int pp, int n_servers);
void td_grid_destroy(td_grid *g);

static inline int td_grid_size(const td_grid *g, td_axis_id a) { return g->axis[a].size; }
static inline int td_grid_coord(const td_grid *g, td_axis_id a) { return g->axis[a].rank; }
static inline td_comm *td_grid_comm(const td_grid *g, td_axis_id a) { return g->axis[a].comm; }
/* Ranks of the grid proper (servers excluded). */
int td_grid_workers(const td_grid *g);

/* World rank of a coordinate (coord[a] in [0, size[a]) for every axis). */
int td_grid_rank_of(const td_grid *g, const int coord[TD_AXES]);
/* World rank of this rank's coordinate with axis a set to c. */
int td_grid_rank_with(const td_grid *g, td_axis_id a, int c);
/* Coordinates of a worker's world rank. */
void td_grid_coords_of(const td_grid *g, int world_rank, int coord[TD_AXES]);

/* "dp=1 pp=0 tp=1": this rank's coordinates on the axes of size > 1,
 * slowest first, with sep between (" " or ", ") and '=' or ' ' in each. The
 * log identity, the trace's process names and error messages use it. */
void td_grid_describe(const td_grid *g, char *out, size_t n, const char *eq, const char *sep);

/* One line per grid row, printed by rank 0. */
void td_grid_print(const td_grid *g);

#ifdef __cplusplus
}
#endif

#endif
