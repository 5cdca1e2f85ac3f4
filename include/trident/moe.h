/* moe: a mixture of experts' side of the model (src/model/moe.c): the
 * step's routing figures, the loss gradient its aux and z losses scale
 * with, and the tests' view of the routing. The configuration is
 * td_moe_config in model.h; the expert-parallel exchange is ep.h's. */
#ifndef TRIDENT_MOE_H
#define TRIDENT_MOE_H

#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A mixture of experts' figures since td_gpt_moe_stats_reset (once per
 * step): loads and the aux loss are of every rank's tokens (the routing
 * statistics are reduced over dp x cp), dropped assignments this rank's. */
typedef struct {
    int L, E;
    double *load;      /* [L, E] assignments per expert, before capacity */
    double assigned, dropped;
    double off_rank_rows; /* rows the forward exchanges sent to other ranks (ep > 1) */
    double aux, z;     /* the layers' aux and z losses, summed per layer and micro-batch */
    int n;             /* layer forwards summed */
    double loss_sum;   /* N (aux + z) summed: this rank's share of the step's loss sum */
} td_moe_stats;
/* NULL for a dense model. */
td_moe_stats *td_gpt_moe_stats(td_gpt *m);
void td_gpt_moe_stats_reset(td_gpt *m);
/* Tests: called with every mixture-of-experts block's routing of a
 * micro-batch (not again when recomputed): the chosen experts idx[N,K] of
 * the model's N rows and each row's margin[N], the last chosen expert's
 * selection value over the best one left out (infinite for K = E). One
 * process-wide probe; NULL: none. */
typedef void (*td_moe_route_probe)(void *ctx, const td_gpt *m, int layer, int N, int K, const int *idx,
                                   const float *margin);
void td_gpt_set_route_probe(td_moe_route_probe fn, void *ctx);
/* trident verify's oracle: called for each row t of a block's micro-batch
 * after its top-k selection, with its chosen experts idx[K] (best first)
 * and its margin (as the probe's); it may write other experts into idx
 * (the layout's choice at a near tie), which the row's gates then follow.
 * One process-wide override, beside the probe; NULL: none. */
typedef void (*td_moe_route_override)(void *ctx, const td_gpt *m, int layer, int t, int K, int *idx, float margin);
void td_gpt_set_route_override(td_moe_route_override fn, void *ctx);
/* The loss gradient per token of the coming backward (the aux and z
 * losses' gradients scale with it); td_gpt_backward sets it itself. */
void td_gpt_set_dloss(td_gpt *m, float dloss);
/* --eod-mask-loss: the token loss is divided by the targets kept, the aux
 * and z losses by every token (Megatron-LM's normalization: routing sees
 * them all), so their gradient is dloss x w with w = kept / tokens (1, the
 * default: the same divisor). Set before the step's backwards. */
void td_gpt_set_aux_weight(td_gpt *m, float w);
/* The experts a mixture-of-experts block's last forward (into a) chose for
 * each of its N rows, best first: [N, K]; NULL before one (tests, tools). */
const int *td_moe_chosen(const td_block_acts *a);

#ifdef __cplusplus
}
#endif

#endif
