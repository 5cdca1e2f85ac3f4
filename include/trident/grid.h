/* grid: the process grid dp x pp x tp over MPI_COMM_WORLD, plus optional
 * parameter-server ranks after the grid.
 *
 * World rank of grid coordinate (pp=j, dp=i, tp=k) is j*(D*T) + i*T + k: tp is
 * fastest (tensor-parallel peers share a node's fast links), then dp, then pp.
 * Ranks D*T*P .. D*T*P+S-1 are parameter servers (S = --ps-servers). */
#ifndef TRIDENT_GRID_H
#define TRIDENT_GRID_H

#include "trident/comm.h"

typedef struct {
    int world_rank, world_size;
    int dp, tp, pp, n_servers;       /* axis sizes; S servers */
    int dp_rank, tp_rank, pp_rank;   /* this rank's coordinates (-1 on servers) */
    int is_server, server_rank;      /* server_rank in [0, S) on servers, else -1 */
    td_comm *world;
    td_comm *dp_comm;   /* same (pp, tp), varying dp; NULL on servers */
    td_comm *tp_comm;   /* same (pp, dp), varying tp */
    td_comm *pp_comm;   /* same (dp, tp), varying pp */
    td_comm *mp_comm;   /* model-parallel group: same dp, all (pp, tp) */
    td_comm *ps_comm;   /* servers only (NULL elsewhere): for the global grad norm */
    /* The embedding group: the first and the last pipeline stage of one
     * (dp, tp) coordinate, which both hold the tied token embedding / LM head
     * and sum its gradients every step. NULL when pp = 1 and on middle stages. */
    td_comm *embed_comm;
    int pp_prev, pp_next; /* world ranks of pipeline neighbours, -1 at the ends */
} td_grid;

/* Collective over world. dp <= 0 means "world_size - S divided by tp*pp".
 * Sizes that do not multiply to the world size give one clear error naming
 * the factors and N. */
void td_grid_create(td_grid *g, int dp, int tp, int pp, int n_servers);
void td_grid_destroy(td_grid *g);
/* World rank of a grid coordinate. */
int td_grid_rank_of(const td_grid *g, int dp_rank, int pp_rank, int tp_rank);
/* One line per grid row, printed by rank 0. */
void td_grid_print(const td_grid *g);

#endif
