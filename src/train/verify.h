/* trident verify's parts (verify.c): the oracle, one fp32 process that
 * takes a step from a given state (verify_oracle.c); the layout's routing
 * and the oracle's replay of it at near ties (verify_routes.c); the
 * tolerances (verify_tol.c). Internal to src/train. */
#ifndef TRIDENT_TRAIN_VERIFY_H
#define TRIDENT_TRAIN_VERIFY_H

#include <stddef.h>

#include "trident/data.h"
#include "trident/model.h"
#include "trident/train.h"

/* ---- routing (verify_routes.c) ---- */
#define VERIFY_ROUTE_K 8 /* top-k the routing check records; larger K is refused */

typedef struct {
    int step, layer, tok; /* tok: (micro-batch x B/M + row of the oracle's micro-batch) x T + position */
    int idx[VERIFY_ROUTE_K];
    float margin;
} verify_route;

typedef struct {
    verify_route *r;
    size_t n, cap, step_start; /* step_start: the first record of the current step's attempt */
    int step, dp_rank, M, Bm, T, K;
    int calls[TD_MAX_LAYERS];
    /* the oracle's side: the micro-batch it runs, the tie threshold and
     * what the replay found */
    int o_step, o_micro, o_rows; /* o_rows: the oracle micro-batch's sequences */
    double thr;
    size_t routings, near, ties, differ; /* near: below thr in either run; ties: routed apart within thr (replayed); differ: beyond it */
    float closest_margin;
    char closest[128]; /* the near tie of the smallest margin */
    int tie_shown, differ_shown;
} verify_routes;

/* Layout side: the probe (records tp rank 0's routings), reset at every
 * step attempt; then every rank's records to world rank 0, sorted
 * (collective over the world). */
void verify_routes_probe(void *ctx, const td_gpt *m, int layer, int N, int K, const int *idx, const float *margin);
void verify_routes_begin_step(verify_routes *v, int step, int dp_rank);
void verify_routes_gather(verify_routes *v);
/* Oracle side: the override (moe.h) that replays the layout's choice of a
 * token whose margin in either run is below thr, and counts. */
void verify_routes_override(void *ctx, const td_gpt *m, int layer, int t, int K, int *idx, float margin);

/* ---- the oracle (verify_oracle.c) ---- */
typedef struct {
    const td_train_opts *o;
    td_dataset d;
    td_gpt_config cfg;
    td_param_table t; /* canonical */
    td_gpt model;
    int B, T, M, D;   /* global batch, seq, micro-batches, data-parallel replicas */
    int *in, *tg, *min, *mtg;
    float *g, *gu;    /* the oracle's gradient; the one its update takes */
    double *load;     /* [L, E] the step's assignments (bias balancing) */
    int loss_eod;     /* --eod-mask-loss: the end-of-text targets dropped; -1: none */
    verify_routes *routes; /* the layout's routing to replay at near ties; NULL: none */
} verify_oracle;

void verify_oracle_open(verify_oracle *or, const td_train_opts *o, int D);
void verify_oracle_close(verify_oracle *or);
/* Step s from the state P, M, V (updated in place): the oracle's gradient
 * into grads (and its loss, returned: the mean over the batch's tokens,
 * aux and z losses included), then AdamW and bias balancing as training
 * takes them, with update_grad where given (the layout's reduced gradient:
 * the update is then checked on its own) else its own. */
double verify_oracle_step(verify_oracle *or, int s, float *P, float *M, float *V, float *grads,
                          const float *update_grad);

/* ---- tolerances (verify_tol.c) ---- */
typedef struct {
    double u;        /* the compute type's unit roundoff (0 in fp32) */
    double u_red;    /* the gradient reduction's (0: fp32) */
    int red_terms;   /* roundings a 16-bit reduction takes: the grad group's ranks */
    double grad;     /* of an element, relative to its tensor's max */
    double loss_abs; /* LOSS_TOL */
    double tie;      /* the routing margin below which a token is a near tie */
    double tie_share; /* the largest share of routings that may differ at ties */
} verify_tol;

void verify_tol_init(verify_tol *t, td_precision p, int grad_bf16, int grad_ranks);
/* The loss tolerance of a step (relative), from the oracle's parameters P
 * before it and its loss. */
double verify_tol_loss(const verify_tol *t, const td_param_table *c, const float *P, double loss);
/* The state after an update, one element: the layout's x against the
 * oracle's ref, both from prev by the same gradient (see verify_tol.c):
 * the difference as a fraction of its tolerance (above 1 fails; NaN too). */
double verify_tol_state(double x, double ref, double prev);
/* The same for a parameter of a Muon matrix, whose largest change in the
 * oracle's step is move (see verify_tol.c); bf16: its Newton-Schulz
 * iterates in bf16. */
double verify_tol_state_muon(double x, double ref, double prev, double move, int bf16);

#endif
