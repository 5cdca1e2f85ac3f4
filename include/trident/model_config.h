/* model_config: what a model is, before any layout: its family (GPT-2,
 * Llama), sizes and their limits, positions, tying and the mixture of
 * experts, and td_gpt_config_finish, which fills the defaults and checks
 * every size. Pure data (library trident_model); model.h builds the
 * parameter table and the passes from it. */
#ifndef TRIDENT_MODEL_CONFIG_H
#define TRIDENT_MODEL_CONFIG_H

#include <stddef.h>

#include "trident/formats_data.h" /* TD_VOCAB_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/* Padded vocab Vp is a multiple of this: 64-byte rows for the CPU kernels
 * without paying much for small vocabularies (65 -> 80, 50257 -> 50272). */
#define TD_VOCAB_PAD 16
#define TD_MAX_LAYERS 256
/* Largest sizes a config may have (plain literals: flag ranges quote them).
 * Within them every product the table and the kernels form in int (3C, 4C,
 * Vp) fits, and sizes in size_t cannot wrap; the memory check refuses
 * what will not fit long before. Vocabulary: token files hold 16-bit ids and
 * Unicode has 0x110000 code points, so 2^24 leaves room for padding rows. */
#define TD_MAX_VOCAB TD_VOCAB_MAX /* the one limit, shared with the token-file parser */
#define TD_MAX_EMBD 65536
#define TD_MAX_SEQ 1048576

/* Model families (docs/design.md principle 11): each is a table of tensor
 * kinds (src/model/arch.c) and the choices of its block (norm, MLP
 * activation, rotary positions), over the same kernels and passes.
 *   GPT2   LayerNorm with biases, learned positions, GELU MLP of 4C, biases
 *          everywhere, the LM head tied to the token embedding.
 *   LLAMA  RMSNorm, rotary positions on q and k (Hugging Face's rotate-half
 *          convention), SwiGLU MLP down(silu(gate(x)) * up(x)), grouped-query
 *          attention (KV kv heads), no biases, an untied head by default. */
typedef enum { TD_ARCH_GPT2 = 0, TD_ARCH_LLAMA = 1 } td_arch;
/* "gpt2", "llama"; td_arch_parse: -1 for another name */
const char *td_arch_name(td_arch a);
int td_arch_parse(const char *s);

/* Tying of the LM head to the token embedding; DEFAULT is resolved by
 * td_gpt_config_finish (on for gpt2, off for llama). */
enum { TD_TIE_DEFAULT = 0, TD_TIE_ON = 1, TD_TIE_OFF = 2 };

/* Llama 3.1's rope_scaling (rope_type "llama3"), include/trident/rope.h;
 * factor 0: none. */
typedef struct {
    double factor, low_freq_factor, high_freq_factor;
    int orig_max_pos;
} td_rope_scaling;

/* Mixture of experts (--moe-*): every `every`-th block's MLP (blocks l
 * with l % every == 0, Megatron-core's moe_layer_freq) is E experts of
 * the family's MLP form, F features each, of which a router (a linear C ->
 * E, softmax or sigmoid) picks K per token, plus `shared` experts every
 * token passes through (DeepSeek). The router's choice is the top K of
 * score + the balancing bias (ties to the lower expert id); the outputs are
 * weighted by the chosen scores, renormalised to sum 1 with norm_topk. The
 * loss adds aux_coef E sum_i f_i P_i (f_i: share of the micro-batch's
 * K-assignments routed to i, P_i: mean score of i, both over every rank's
 * tokens of the micro-batch) and z_coef mean(logsumexp(logits)^2).
 * bias_rate > 0 moves a per-expert bias (for selection only) by bias_rate x
 * the sign of its load error after each step (DeepSeek-V3's
 * auxiliary-loss-free balancing). capacity > 0 keeps per expert the first
 * ceil(capacity N K / E) assignments in order of (token, k) and drops the
 * rest; 0 is dropless. E = 0: a dense model. */
typedef enum { TD_ROUTER_SOFTMAX = 0, TD_ROUTER_SIGMOID = 1 } td_moe_router;
typedef struct {
    int E, K;         /* routed experts, experts per token */
    int every;        /* 0: 1 (every block) */
    int F;            /* an expert's hidden features; 0: the dense F */
    int shared;       /* always-active experts, F features each */
    int router;       /* td_moe_router */
    int norm_topk;    /* TD_TIE_* values: 0 default (on for K >= 2), 1 on, 2 off */
    float aux_coef, z_coef, bias_rate, capacity;
} td_moe_config;

/* Zero in every field after V means "the architecture's default", so a
 * config written {L, H, C, T, V} is GPT-2 as it always was. */
typedef struct {
    int L;  /* layers */
    int H;  /* heads */
    int C;  /* channels */
    int T;  /* context length */
    int V;  /* real vocabulary */
    int Vp; /* V padded for one process (tp 1), the layout of checkpoint files
               and sampling; a tp layout pads further (td_param_table.Vp) */
    td_arch arch;
    int KV;            /* key/value heads (grouped-query attention; H: multi-head,
                          1: multi-query); 0: H */
    int F;             /* MLP hidden features; 0: 4C (gpt2), 8C/3 rounded up to a
                          multiple of 256 (llama, as Meta's code rounds it) */
    int tie;           /* TD_TIE_* */
    float norm_eps;    /* RMSNorm epsilon (llama); 0: 1e-5 */
    double rope_theta; /* rotary base (llama); 0: 10000 */
    td_rope_scaling rope_scaling;
    td_moe_config moe; /* all 0: dense */
} td_gpt_config;

/* Block l is a mixture of experts. */
static inline int td_gpt_moe_layer(const td_gpt_config *c, int l) {
    return c->moe.E > 0 && l % (c->moe.every > 0 ? c->moe.every : 1) == 0;
}

/* The LM head is the token embedding (after td_gpt_config_finish). */
static inline int td_gpt_tied(const td_gpt_config *c) { return c->tie != TD_TIE_OFF; }

/* Fills Vp from V and the architecture's defaults, and checks every size; a
 * bad size is a user error naming the flag (C % H, H % KV, positive sizes,
 * the maxima above, flags the architecture does not have). */
void td_gpt_config_finish(td_gpt_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
