/* model: GPT-2 configuration, the parameter table, activations and the
 * forward/backward pass of one micro-batch. Knows nothing of MPI: parallel
 * strategies reach it only through the unit hook (DESIGN.md principle 4).
 *
 * Parameters live in one flat buffer laid out by UNIT, in forward order:
 *   unit 0      embeddings: wte[Vp,C], wpe[T,C]
 *   unit 1..L   block l-1: ln_1 w,b[C], c_attn w[3C,C] b[3C], attn c_proj
 *               w[C,C] b[C], ln_2 w,b[C], c_fc w[4C,C] b[4C], mlp c_proj
 *               w[C,4C] b[C]
 *   unit L+1    ln_f w,b[C]
 * so a unit is a contiguous range: data-parallel buckets and ZeRO shards are
 * ranges, and ZeRO-3 can gather one block at a time. Gradients (and the
 * optimizer moments) use the same offsets. Each unit starts and ends on a
 * multiple of unit_align elements (zero padding between units belongs to no
 * tensor): ZeRO shards unit u into dp equal slices of its padded size, so no
 * tensor size has to divide by dp. */
#ifndef TRIDENT_MODEL_H
#define TRIDENT_MODEL_H

#include <stddef.h>

#include "trident/formats_data.h"

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

typedef struct {
    int L;  /* layers */
    int H;  /* heads */
    int C;  /* channels */
    int T;  /* context length */
    int V;  /* real vocabulary */
    int Vp; /* padded vocabulary (logit columns >= V are masked) */
} td_gpt_config;

/* Fills Vp from V and checks every size; a bad size is a user error naming
 * the flag (C % H, positive sizes, the maxima above). */
void td_gpt_config_finish(td_gpt_config *cfg);

/* Tensor-parallel split of a tensor (used from the tensor-parallel issue on;
 * every tensor is TD_SPLIT_NONE while tp = 1). */
typedef enum { TD_SPLIT_NONE, TD_SPLIT_ROW, TD_SPLIT_COL, TD_SPLIT_VOCAB } td_tp_split;

typedef struct {
    char name[64];     /* nanoGPT state_dict name */
    int ndim;
    int shape[2];      /* global shape */
    int local_shape[2];/* this rank's shape (== shape while tp = 1) */
    size_t offset;     /* first element in the flat buffer */
    size_t numel;
    int unit;          /* 0 embeddings, 1..L blocks, L+1 final norm */
    int layer;         /* -1 embeddings, 0..L-1 blocks, L final norm */
    int decay;         /* AdamW weight decay applies (2-D tensors) */
    td_tp_split split;
} td_param;

/* Offsets of the tensors inside one block unit (same for every block). */
typedef struct {
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
} td_block_offsets;

typedef struct {
    td_gpt_config cfg;
    int n_rows;
    td_param *rows;          /* [n_rows], flat-buffer order */
    size_t numel;            /* flat buffer size in elements (with padding) */
    size_t n_real;           /* parameters excluding vocab and unit padding */
    int unit_align;
    int n_units;             /* L + 2 */
    size_t *unit_offset;     /* [n_units + 1], unit u is [unit_offset[u], unit_offset[u+1]) */
    td_block_offsets blk;    /* in-unit offsets for blocks */
} td_param_table;

/* unit_align: 1 for the canonical layout (checkpoints), a multiple of dp for
 * sharded layouts. */
void td_param_table_build(td_param_table *t, const td_gpt_config *cfg, int unit_align);
/* Copies every tensor from a buffer in layout `from` to layout `to` (same
 * model, different unit padding); padding in `dst` is zeroed. */
void td_param_relayout(float *dst, const td_param_table *to, const float *src,
                       const td_param_table *from);
void td_param_table_free(td_param_table *t);
const td_param *td_param_find(const td_param_table *t, const char *name);
size_t td_unit_numel(const td_param_table *t, int unit);

/* GPT-2 init of the elements [lo, hi) of the flat buffer into out[0..hi-lo):
 * normal(0, 0.02), residual projections 0.02/sqrt(2L), biases 0, LayerNorm
 * gains 1, vocab padding rows 0. Counter-based, so any range (a shard)
 * initialises identically to the same range of the whole buffer. */
void td_param_init_range(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                         float *out);

/* Unit hook: the model announces when it starts and stops using a unit's
 * parameters (forward) or parameters and gradients (backward). Before
 * returning from a *_BEGIN event the strategy must have set
 * model->unit_params[u] (and unit_grads[u] for backward) to valid buffers.
 * After BWD_END(u) the unit's gradient for this micro-batch is final.
 * Order in forward: FWD_BEGIN(0), then each block, FWD_BEGIN(L+1) .. head ..
 * FWD_END(L+1), FWD_END(0). In backward: BWD_BEGIN(0), BWD_BEGIN(L+1),
 * head + ln_f, BWD_END(L+1), blocks L..1, embeddings, BWD_END(0). */
typedef enum { TD_FWD_BEGIN, TD_FWD_END, TD_BWD_BEGIN, TD_BWD_END } td_unit_event;
typedef void (*td_unit_hook)(void *ctx, td_unit_event ev, int unit);

typedef struct td_gpt {
    td_gpt_config cfg;
    const td_param_table *table;
    int B;                   /* micro-batch the activations are sized for */
    float **unit_params;     /* [n_units] current parameter base of each unit */
    float **unit_grads;      /* [n_units] current gradient base of each unit */
    td_unit_hook hook;       /* NULL: pointers are set once and never change */
    void *hook_ctx;

    /* activations, sized for B x T (N = B*T rows) */
    float *acts;             /* one allocation, carved below */
    float *encoded;          /* [N,C] */
    float **ln1, **ln1_mean, **ln1_rstd, **qkv, **atty, **att, **attproj, **res2, **ln2,
        **ln2_mean, **ln2_rstd, **fch, **fch_gelu, **fcproj, **res3; /* [L] each */
    float *lnf, *lnf_mean, *lnf_rstd; /* [N,C], [N], [N] */
    float *logits;           /* [N,Vp]; holds probabilities after forward */
    float *losses;           /* [N] */
    /* backward scratch, reused by every layer */
    float *grads_acts;
    float *dres, *dln, *dqkv, *datty, *datt, *dfch, *dfchg, *dlosses;
    int *inputs, *targets;   /* [N] copies of the last batch */
    size_t acts_bytes;
} td_gpt;

/* Bytes of activations + backward scratch for micro-batch B (the plan). */
size_t td_gpt_activation_bytes(const td_gpt_config *cfg, int B);
void td_gpt_create(td_gpt *m, const td_param_table *t, int B);
void td_gpt_destroy(td_gpt *m);
/* Points every unit at a whole flat buffer (replicated training). */
void td_gpt_bind_flat(td_gpt *m, float *params, float *grads);

/* Forward over inputs[B,T]. With targets, returns the SUM of the B*T token
 * losses (the caller divides by the global token count); without, returns 0
 * and leaves probabilities in m->logits. */
double td_gpt_forward(td_gpt *m, const int *inputs, const int *targets);
/* Backward of the last forward; every token's loss is weighted by
 * dloss (1 / tokens of the global batch). Adds into the gradients. */
void td_gpt_backward(td_gpt *m, float dloss);

/* FLOPs of one training step (forward + backward) per token, for MFU, as
 * PaLM and nanoGPT count them: 6 x matmul parameters + 12 L T C attention
 * (the causal half is not subtracted). */
double td_gpt_flops_per_token(const td_gpt_config *cfg);

#endif
