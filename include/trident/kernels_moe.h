/* kernels_moe: the mixture of experts' device half (model/moe.c): the
 * router's scores and gradient, the dispatch's gather of token rows, the
 * combine's weighted sum and its backward. The routing decisions (top-K,
 * capacity, the send order) are the host's: they arrive as arrays.
 *
 * Conventions: activation rows are C elements of the precision k
 * (TD_K_F32: float, TD_K_BF16 / TD_K_F16: 16-bit); pos [N,K] is each
 * assignment's row in the send order, -1 for a dropped one; everything
 * else is fp32 (lse is not stored: the backward recomputes it from the
 * logits, in double, as the forward's z statistic does). Rows are widened
 * and rounded one at a time, exactly as the model did before these moved
 * here, so the bits are those of the host loops they replace. Every
 * function is serial over tokens (the order of each sum is the token's). */
#ifndef TRIDENT_KERNELS_MOE_H
#define TRIDENT_KERNELS_MOE_H

#include <stddef.h>

#include "trident/kernels_bf16.h" /* td_ktype */

#ifdef __cplusplus
extern "C" {
#endif

/* The router's scores of logits [N,E]: softmax (max subtracted, expf, the
 * sum in double) when softmax, else the sigmoid. */
void td_moe_router_scores(float *sc, const float *logits, int N, int E, int softmax);
/* log-sum-exp of one row, in double (the z-loss's). */
double td_moe_log_sum_exp(const float *lg, int E);

/* Dispatch: dst row pos[t K + k] = src row t, for every kept assignment. */
void td_moe_gather(td_ktype k, void *dst, const void *src, const int *pos, int N, int K, int C);

/* Combine: for r in [0, Ns), t = row0 + r: out[r] = (shared ? out[t] : 0)
 * + sum_k wts[t,k] y[pos[t,k]] (fp32, k in order, dropped skipped). out is
 * [row0 + Ns, C] when shared (read at t, written at r <= t: in place). */
void td_moe_combine(td_ktype k, float *out, int shared, const void *y, const int *pos,
                    const float *wts, int row0, int Ns, int K, int C);
/* Its backward for every token t of N: dw[t,k] = dout[t] . y[pos] (double
 * sum, 0 when dropped) and dy[pos] = wts[t,k] dout[t] (rounded to k). */
void td_moe_combine_backward(td_ktype k, float *dw, void *dy, const void *dout, const void *y,
                             const int *pos, const float *wts, int N, int K, int C);
/* The dispatch's backward: dst[t] += dx[pos[t,k]] (fp32 dst, k in order). */
void td_moe_scatter_add(td_ktype k, float *dst, const void *dx, const int *pos, int N, int K,
                        int C);

/* The router's logits' gradient dl [N,E] from the combine weights'
 * gradient dw [N,K], the aux loss (d/ds_i of aux_coef E sum_i f_i P_i, f
 * constant) and the z-loss (2 z_coef lse softmax_i per token), each scaled
 * by dloss. stats [2E + 3]: assignments per expert, summed scores, tokens
 * (the micro-batch's, reduced). */
typedef struct td_moe_router_shape {
    int N, E, K;
    int softmax;   /* else sigmoid */
    int norm_topk; /* the weights are the gates renormalised over the K */
    float aux_coef, z_coef, dloss;
} td_moe_router_shape;
void td_moe_router_backward(float *dl, const float *dw, const float *logits, const float *sc,
                            const int *idx, const float *gate, const float *wts,
                            const float *stats, const td_moe_router_shape *s);

#ifdef __cplusplus
}
#endif

#endif
