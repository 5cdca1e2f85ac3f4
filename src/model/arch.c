/* The model families as tables (docs/design.md principle 11): the tensor
 * rows of each, in flat-buffer order within their unit, with their shapes,
 * tensor-parallel splits, initialization and checkpoint names, and the
 * choices of its block. The parameter table (params.c), ZeRO ranges,
 * buckets, checkpoints and the planner work from these rows alone. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* A mixture of experts' rows, in place of the MLP's: the router, its
 * balancing bias, the experts stacked (TD_SPLIT_EXPERT: each ep rank holds
 * E/ep consecutive experts; replicated over tp) and the shared experts as
 * one MLP. GPT-2's experts are its MLP with biases, Llama's SwiGLU with
 * each expert's gate|up rows together (Mixtral's w1|w3; w2 is the
 * projection). */
#define MOE_ROW(kind, name, d0, d1, split, groups, init, place) \
    {kind, name, TD_PLACE_BLOCK, d0, d1, split, groups, init, 0, place},
#define GPT2_MOE_ROWS \
    MOE_ROW(TD_T_ROUTERW, "transformer.h.%d.moe.router.weight", TD_DIM_E, TD_DIM_C, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, TD_MOE_ONLY) \
    MOE_ROW(TD_T_ROUTERB, "transformer.h.%d.moe.router.expert_bias", TD_DIM_E, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPFCW, "transformer.h.%d.moe.experts.c_fc.weight", TD_DIM_EF1, TD_DIM_C, TD_SPLIT_EXPERT, 1, TD_INIT_NORMAL, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPFCB, "transformer.h.%d.moe.experts.c_fc.bias", TD_DIM_EF1, TD_DIM_0, TD_SPLIT_EXPERT, 1, TD_INIT_ZERO, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPPROJW, "transformer.h.%d.moe.experts.c_proj.weight", TD_DIM_EC, TD_DIM_FE, TD_SPLIT_EXPERT, 1, TD_INIT_RESID, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPPROJB, "transformer.h.%d.moe.experts.c_proj.bias", TD_DIM_EC, TD_DIM_0, TD_SPLIT_EXPERT, 1, TD_INIT_ZERO, TD_MOE_ONLY) \
    MOE_ROW(TD_T_SHFCW, "transformer.h.%d.moe.shared.c_fc.weight", TD_DIM_SF1, TD_DIM_C, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, TD_MOE_SHARED) \
    MOE_ROW(TD_T_SHFCB, "transformer.h.%d.moe.shared.c_fc.bias", TD_DIM_SF1, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, TD_MOE_SHARED) \
    MOE_ROW(TD_T_SHPROJW, "transformer.h.%d.moe.shared.c_proj.weight", TD_DIM_C, TD_DIM_SF, TD_SPLIT_NONE, 1, TD_INIT_RESID, TD_MOE_SHARED) \
    MOE_ROW(TD_T_SHPROJB, "transformer.h.%d.moe.shared.c_proj.bias", TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, TD_MOE_SHARED)
#define LLAMA_MOE_ROWS \
    MOE_ROW(TD_T_ROUTERW, "model.layers.%d.block_sparse_moe.gate.weight", TD_DIM_E, TD_DIM_C, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, TD_MOE_ONLY) \
    MOE_ROW(TD_T_ROUTERB, "model.layers.%d.block_sparse_moe.expert_bias", TD_DIM_E, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPFCW, "model.layers.%d.block_sparse_moe.experts.w13.weight", TD_DIM_EF1, TD_DIM_C, TD_SPLIT_EXPERT, 1, TD_INIT_NORMAL, TD_MOE_ONLY) \
    MOE_ROW(TD_T_EXPPROJW, "model.layers.%d.block_sparse_moe.experts.w2.weight", TD_DIM_EC, TD_DIM_FE, TD_SPLIT_EXPERT, 1, TD_INIT_NORMAL, TD_MOE_ONLY) \
    MOE_ROW(TD_T_SHFCW, "model.layers.%d.block_sparse_moe.shared_experts.gate_up_proj.weight", TD_DIM_SF1, TD_DIM_C, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, TD_MOE_SHARED) \
    MOE_ROW(TD_T_SHPROJW, "model.layers.%d.block_sparse_moe.shared_experts.down_proj.weight", TD_DIM_C, TD_DIM_SF, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, TD_MOE_SHARED)

/* GPT-2 (nanoGPT's state_dict names). Megatron: QKV and the MLP's first
 * projection column-parallel (heads and features split; QKV's three parts
 * each on its own), both output projections row-parallel. Row order is
 * the tensor id: the golden bits of every GPT-2 run depend on it. */
static const td_arch_row GPT2_ROWS[] = {
    {TD_T_WTE, "transformer.wte.weight", TD_PLACE_EMBED, TD_DIM_V, TD_DIM_C, TD_SPLIT_VOCAB, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_WPE, "transformer.wpe.weight", TD_PLACE_EMBED, TD_DIM_T, TD_DIM_C, TD_SPLIT_NONE, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_LN1W, "transformer.h.%d.ln_1.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_LN1B, "transformer.h.%d.ln_1.bias", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, 0, TD_MOE_ANY},
    {TD_T_QKVW, "transformer.h.%d.attn.c_attn.weight", TD_PLACE_BLOCK, TD_DIM_3C, TD_DIM_C, TD_SPLIT_COL, 3, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_QKVB, "transformer.h.%d.attn.c_attn.bias", TD_PLACE_BLOCK, TD_DIM_3C, TD_DIM_0, TD_SPLIT_COL, 3, TD_INIT_ZERO, 0, TD_MOE_ANY},
    {TD_T_ATTPROJW, "transformer.h.%d.attn.c_proj.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_C, TD_SPLIT_ROW, 1, TD_INIT_RESID, 0, TD_MOE_ANY},
    {TD_T_ATTPROJB, "transformer.h.%d.attn.c_proj.bias", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, 0, TD_MOE_ANY},
    {TD_T_LN2W, "transformer.h.%d.ln_2.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_LN2B, "transformer.h.%d.ln_2.bias", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, 0, TD_MOE_ANY},
    {TD_T_FCW, "transformer.h.%d.mlp.c_fc.weight", TD_PLACE_BLOCK, TD_DIM_F, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_DENSE},
    {TD_T_FCB, "transformer.h.%d.mlp.c_fc.bias", TD_PLACE_BLOCK, TD_DIM_F, TD_DIM_0, TD_SPLIT_COL, 1, TD_INIT_ZERO, 0, TD_MOE_DENSE},
    {TD_T_FCPROJW, "transformer.h.%d.mlp.c_proj.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_F, TD_SPLIT_ROW, 1, TD_INIT_RESID, 0, TD_MOE_DENSE},
    {TD_T_FCPROJB, "transformer.h.%d.mlp.c_proj.bias", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, 0, TD_MOE_DENSE},
    GPT2_MOE_ROWS
    {TD_T_LNFW, "transformer.ln_f.weight", TD_PLACE_FINAL, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_LNFB, "transformer.ln_f.bias", TD_PLACE_FINAL, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ZERO, 0, TD_MOE_ANY},
};

/* Llama (Hugging Face LlamaForCausalLM's names). q, k, v and gate, up are
 * column-parallel each on its own (tp splits the query heads, the kv heads
 * and the MLP features), o and down row-parallel, the untied head
 * vocab-parallel like the embedding. Initialization as HF's
 * _init_weights: normal(0, 0.02) for every matrix, norms 1. */
static const td_arch_row LLAMA_ROWS[] = {
    {TD_T_WTE, "model.embed_tokens.weight", TD_PLACE_EMBED, TD_DIM_V, TD_DIM_C, TD_SPLIT_VOCAB, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_LN1W, "model.layers.%d.input_layernorm.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_QW, "model.layers.%d.self_attn.q_proj.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_KW, "model.layers.%d.self_attn.k_proj.weight", TD_PLACE_BLOCK, TD_DIM_KVC, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_VW, "model.layers.%d.self_attn.v_proj.weight", TD_PLACE_BLOCK, TD_DIM_KVC, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_ATTPROJW, "model.layers.%d.self_attn.o_proj.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_C, TD_SPLIT_ROW, 1, TD_INIT_NORMAL, 0, TD_MOE_ANY},
    {TD_T_LN2W, "model.layers.%d.post_attention_layernorm.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_GATEW, "model.layers.%d.mlp.gate_proj.weight", TD_PLACE_BLOCK, TD_DIM_F, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_DENSE},
    {TD_T_UPW, "model.layers.%d.mlp.up_proj.weight", TD_PLACE_BLOCK, TD_DIM_F, TD_DIM_C, TD_SPLIT_COL, 1, TD_INIT_NORMAL, 0, TD_MOE_DENSE},
    {TD_T_FCPROJW, "model.layers.%d.mlp.down_proj.weight", TD_PLACE_BLOCK, TD_DIM_C, TD_DIM_F, TD_SPLIT_ROW, 1, TD_INIT_NORMAL, 0, TD_MOE_DENSE},
    LLAMA_MOE_ROWS
    {TD_T_LNFW, "model.norm.weight", TD_PLACE_FINAL, TD_DIM_C, TD_DIM_0, TD_SPLIT_NONE, 1, TD_INIT_ONE, 0, TD_MOE_ANY},
    {TD_T_HEAD, "lm_head.weight", TD_PLACE_FINAL, TD_DIM_V, TD_DIM_C, TD_SPLIT_VOCAB, 1, TD_INIT_NORMAL, 1, TD_MOE_ANY},
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const td_arch_desc ARCHS[] = {
    {TD_ARCH_GPT2, "gpt2", GPT2_ROWS, N_OF(GPT2_ROWS), TD_NORM_LAYER, TD_MLP_GELU, 0, TD_T_QKVW, TD_T_FCW},
    {TD_ARCH_LLAMA, "llama", LLAMA_ROWS, N_OF(LLAMA_ROWS), TD_NORM_RMS, TD_MLP_SWIGLU, 1, TD_T_QW, TD_T_GATEW},
};

const td_arch_desc *td_arch_desc_of(td_arch a) {
    for (int i = 0; i < N_OF(ARCHS); i++)
        if (ARCHS[i].arch == a) return &ARCHS[i];
    TD_ASSERT(!"td_arch_desc_of: unknown architecture");
    return NULL;
}

const td_arch_row *td_arch_row_of(td_arch a, td_tensor_kind kind) {
    const td_arch_desc *d = td_arch_desc_of(a);
    for (int i = 0; i < d->n_rows; i++)
        if (d->rows[i].kind == kind) return &d->rows[i];
    return NULL;
}

const char *td_arch_name(td_arch a) { return td_arch_desc_of(a)->name; }

int td_arch_parse(const char *s) {
    for (int i = 0; i < N_OF(ARCHS); i++)
        if (strcmp(ARCHS[i].name, s) == 0) return (int)ARCHS[i].arch;
    return -1;
}

int td_arch_mlp_parts(td_arch a) { return td_arch_desc_of(a)->mlp == TD_MLP_SWIGLU ? 2 : 1; }

int td_arch_row_in_block(const td_arch_row *r, const td_gpt_config *c, int l) {
    int moe = td_gpt_moe_layer(c, l);
    switch (r->moe) {
    case TD_MOE_ANY: return 1;
    case TD_MOE_DENSE: return !moe;
    case TD_MOE_ONLY: return moe;
    case TD_MOE_SHARED: return moe && c->moe.shared > 0;
    }
    return 1;
}

int td_arch_dim(const td_gpt_config *c, td_dim d) {
    switch (d) {
    case TD_DIM_0: return 0;
    case TD_DIM_C: return c->C;
    case TD_DIM_V: return c->V;
    case TD_DIM_T: return c->T;
    case TD_DIM_3C: return 3 * c->C;
    case TD_DIM_F: return c->F;
    case TD_DIM_KVC: return c->KV * (c->C / c->H);
    case TD_DIM_E: return c->moe.E;
    case TD_DIM_FE: return c->moe.F;
    case TD_DIM_EF1: return c->moe.E * c->moe.F * td_arch_mlp_parts(c->arch);
    case TD_DIM_EF: return c->moe.E * c->moe.F;
    case TD_DIM_EC: return c->moe.E * c->C;
    case TD_DIM_SF: return c->moe.shared * c->moe.F;
    case TD_DIM_SF1: return c->moe.shared * c->moe.F * td_arch_mlp_parts(c->arch);
    }
    return 0;
}
