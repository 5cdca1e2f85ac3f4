/* The planner's cost model, shared by cost.c (the dense blocks, the step)
 * and cost_moe.c (mixture-of-experts blocks). Not installed: src/planner's
 * own. */
#ifndef TRIDENT_PLANNER_COST_INTERNAL_H
#define TRIDENT_PLANNER_COST_INTERNAL_H

#include "trident/planner.h"

/* The family's sizes; td_plan_model_finish has resolved llama's F. */
static inline int pl_llama(const td_plan_model *m) { return m->arch == TD_ARCH_LLAMA; }
static inline double pl_ffn(const td_plan_model *m) { return m->F ? m->F : 4.0 * m->C; }
/* one expert's hidden features */
static inline double pl_expert_ffn(const td_plan_model *m) { return m->moe_ffn ? m->moe_ffn : pl_ffn(m); }
/* experts active per token (0 reads as Megatron-core's default 2) */
static inline int pl_top_k(const td_plan_model *m) { return m->K ? m->K : 2; }

/* Parameters of one MLP of f hidden features in the family's form: gpt2's
 * GELU MLP (two f x C matrices and their biases), llama's SwiGLU (three). */
double pl_mlp_params(const td_plan_model *m, double f);
/* What the MoE blocks add to td_plan_params' count of the dense model: E
 * experts each (active: the K a token meets), the router, shared experts,
 * less the dense MLP of F they replace. */
double pl_moe_params_delta(const td_plan_model *m, int active);
/* The same for the weight matrices a token meets in GEMMs (6 FLOPs each
 * per token): the router, K + S experts, less the dense MLP. */
double pl_moe_matrices_delta(const td_plan_model *m);
/* MoE blocks on pipeline stage `stage` of p (its v chunks, in the
 * interleaved schedule's order), and on the stage that holds the most. */
int pl_moe_on_stage(const td_plan_model *m, int p, int v, int stage);
int pl_moe_busiest(const td_plan_model *m, int p, int v);
/* One MoE block's parameters on a device: apart from its routed experts
 * (the router, replicated; shared experts split by tp like the dense MLP,
 * biases replicated), and its routed experts (E / ep of them, each split
 * over etp). A dense MLP's share, for comparison: layer_params' MLP. */
double pl_moe_block_params(const td_plan_model *m, int tp);
double pl_moe_expert_params(const td_plan_model *m, int ep, int etp);
/* The dense MLP's own parameters on a device (what an MoE block replaces). */
double pl_dense_mlp_params(const td_plan_model *m, int tp);

/* One MoE block's MLP per micro-batch on a device, in place of the dense
 * MLP's: what cost.c adds to a block's attention to make an MoE layer. */
typedef struct {
    double gemm_s;   /* forward GEMM seconds: the router, the routed experts
                        (a loop over the E / ep local experts), the shared */
    double ew_bytes; /* forward elementwise bytes: the activation function
                        on every routed and shared row, the permutation of
                        K copies out and back, the router's softmax */
    double dense_ew_bytes; /* the dense MLP's activation-function bytes, which it replaces */
    double tp_s;   /* forward collectives of the block: etp's all-gather and
                      reduce-scatter of the routed rows, shared experts' tp */
    double a2a_s;  /* forward all-to-all: dispatch and combine */
    double act;    /* bytes kept for the backward, in place of the dense MLP's */
    double dense_act; /* the dense MLP's, which it replaces */
    double buf;    /* the worst-case dropless dispatch working set of one block */
} pl_moe_block;

/* eb: bytes per element over 2 (2-byte elements: 1). g_mlp: the dense
 * MLP's tp collectives per direction (shared experts run as it does). */
void pl_moe_block_cost(const td_plan_model *m, const td_plan_cluster *c, const td_plan_layout *l, double eb,
                       double g_mlp, pl_moe_block *x);

#endif
