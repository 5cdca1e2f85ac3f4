/* model: the parameter table of a model family (GPT-2, Llama; its configuration in
 * model_config.h), activations and the
 * forward/backward pass of one micro-batch, made of per-block functions
 * (embedding, transformer block, final norm + head + loss) over explicit
 * activation structs. Knows nothing of MPI (library trident_model): parallel
 * strategies reach it only through the unit hook (docs/design.md principle 4) and
 * the communication table td_model_comm.
 *
 * Parameters live in one flat buffer laid out by UNIT, in forward order
 * (GPT-2's rows; Llama's in arch.c):
 *   unit 0      embeddings: wte[Vp/tp,C] (this rank's vocabulary rows), wpe[T,C]
 *   unit 1..L   block l-1: ln_1 w,b[C], c_attn w[3C,C] b[3C], attn c_proj
 *               w[C,C] b[C], ln_2 w,b[C], c_fc w[4C,C] b[4C], mlp c_proj
 *               w[C,4C] b[C]
 *   unit L+1    ln_f w,b[C] (and an untied head [Vp/tp,C])
 * Under tensor parallelism each rank's table holds its slices of the split
 * tensors (td_tp_split) in the same order, so units keep their meaning and
 * a unit is a contiguous range: data-parallel buckets and ZeRO shards are
 * ranges, and ZeRO-3 can gather one block at a time. Gradients (and the
 * optimizer moments) use the same offsets. Each unit starts and ends on a
 * multiple of unit_align elements (zero padding between units belongs to no
 * tensor): ZeRO shards unit u into dp equal slices of its padded size, so no
 * tensor size has to divide by dp. Under expert parallelism (ep > 1) a
 * block's expert stack also starts and ends on a multiple of unit_align
 * (padding inside the unit, after the row before it): it is summed and
 * sharded over the ranks holding the same experts, apart from the unit's
 * other rows (td_param_unit_pieces). */
#ifndef TRIDENT_MODEL_H
#define TRIDENT_MODEL_H

#include <stddef.h>

#include "trident/formats_data.h"
#include "trident/attention.h"
#include "trident/backend.h"
#include "trident/model_config.h" /* the sizes, family and MoE choices of a model */

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor-parallel split of a tensor over the tp ranks. trident stores a
 * weight as [out, in], so (Megatron's names):
 *   TD_SPLIT_COL    column-parallel: split by output features = the stored
 *                   rows (dim 0); its bias is split the same way
 *   TD_SPLIT_ROW    row-parallel: split by input features = the stored
 *                   columns (dim 1); its bias is replicated, added once
 *   TD_SPLIT_VOCAB  the token embedding (tied LM head): rows split by
 *                   vocabulary id, padded as the layout needs
 *   TD_SPLIT_NONE   replicated on every tp rank (LayerNorm, positions)
 *   TD_SPLIT_EXPERT a stack of E experts' tensors along dim 0: replicated
 *                   over tp, split over the expert-parallel ranks (each
 *                   holds E/ep consecutive experts) */
typedef enum { TD_SPLIT_NONE, TD_SPLIT_ROW, TD_SPLIT_COL, TD_SPLIT_VOCAB, TD_SPLIT_EXPERT } td_tp_split;

/* What a row is, independent of its layer: the model finds every tensor by
 * (kind, layer) in the table, never by its distance from another tensor. */
/* What a row is, independent of its layer: the model finds every tensor by
 * (kind, layer) in the table, never by its distance from another tensor.
 * The kinds of all families in one list; each family's table (arch.c) names
 * the ones it has, and a kind the model's family lacks has no row (its
 * td_gpt.off entry is TD_NO_TENSOR). Llama's q/k/v and gate/up are rows of
 * their own (Hugging Face's tensors, split over tp each on its own) that
 * the table lays out next to each other, so a unit holds them as one fused
 * [q; k; v] and [gate; up] weight for one GEMM. */
typedef enum {
    TD_T_WTE, TD_T_WPE,                                   /* embeddings */
    TD_T_LN1W, TD_T_LN1B, TD_T_QKVW, TD_T_QKVB, TD_T_ATTPROJW, TD_T_ATTPROJB,
    TD_T_LN2W, TD_T_LN2B, TD_T_FCW, TD_T_FCB, TD_T_FCPROJW, TD_T_FCPROJB, /* blocks */
    TD_T_LNFW, TD_T_LNFB,                                 /* final norm */
    TD_T_QW, TD_T_KW, TD_T_VW, TD_T_GATEW, TD_T_UPW,      /* llama blocks */
    TD_T_HEAD,                                            /* an untied LM head */
    /* a mixture of experts' block (in place of FC*): the router [E,C] and
     * its balancing bias [E] (no gradient), the experts stacked along dim
     * 0 (fc [E F1,C] with each expert's gate|up together, its bias [E F],
     * proj [E C,F], its bias [E C]) and the shared experts as one MLP of
     * shared x F features */
    TD_T_ROUTERW, TD_T_ROUTERB, TD_T_EXPFCW, TD_T_EXPFCB, TD_T_EXPPROJW, TD_T_EXPPROJB,
    TD_T_SHFCW, TD_T_SHFCB, TD_T_SHPROJW, TD_T_SHPROJB,
    TD_T_COUNT
} td_tensor_kind;
#define TD_NO_TENSOR ((size_t)-1)

typedef struct {
    char name[96];     /* the checkpoint name (nanoGPT's, Hugging Face's); the
                          longest, model.layers.255.block_sparse_moe.
                          shared_experts.gate_up_proj.weight, is 68 */
    int id;            /* stable tensor id: the row's index, the same in every
                          layout (initialization, checkpoints) */
    int ndim;
    int shape[2];      /* global shape: the real vocabulary for wte, no padding */
    int local_shape[2];/* this rank's slice (wte: with the layout's padding rows) */
    size_t offset;     /* first element of the slice in the flat buffer */
    size_t numel;      /* elements of the slice */
    int unit;          /* 0 embeddings, 1..L blocks, L+1 final norm */
    int layer;         /* -1 embeddings, 0..L-1 blocks, L final norm */
    int decay;         /* AdamW weight decay applies (2-D tensors) */
    td_tp_split split;
    int split_dim;     /* the dimension split over tp: 0 (COL, VOCAB), 1 (ROW), -1 */
    int groups;        /* fused tensors: split_dim is `groups` equal parts, each
                          split over tp on its own (the QKV weight: q, k, v) */
    int split_lo;      /* global index along split_dim where this rank's slice
                          of each group starts */
    td_tensor_kind kind;
} td_param;

/* Every tp rank holds the same elements of row p (TD_SPLIT_NONE, and the
 * experts' rows, which split over ep only): its gradient norm, checkpoint
 * pieces and other once-per-model sums count tp rank 0's copy alone. */
static inline int td_param_tp_replicated(const td_param *p) {
    return p->split == TD_SPLIT_NONE || p->split == TD_SPLIT_EXPERT;
}

/* Arithmetic of the forward and backward pass (--precision). FP32 computes
 * in fp32 throughout. BF16 and FP16 keep a reduced-precision compute copy of
 * the linear layers' weights (refreshed from the fp32 parameters, which
 * become the master weights, whenever they change) and store the
 * activations and their gradients in the reduced type; every kernel computes
 * in fp32 and GEMMs accumulate in fp32 (kernels_bf16.h). LayerNorm
 * statistics, logits, the loss and every parameter gradient stay fp32, and
 * so does everything that is summed over tensor-parallel ranks (the
 * row-parallel partial outputs and column-parallel input gradients are
 * reduced in fp32, then rounded). */
typedef enum { TD_PREC_FP32 = 0, TD_PREC_BF16 = 1, TD_PREC_FP16 = 2 } td_precision;
/* "fp32", "bf16", "fp16" */
const char *td_precision_name(td_precision p);

typedef struct {
    td_gpt_config cfg;
    td_precision prec;       /* the arithmetic of the model this table is for */
    int tp, tp_rank;         /* the tensor-parallel layout this table is for */
    int cp, cp_rank;         /* the context-parallel one (activations only: no
                                parameter depends on it) */
    int ep, ep_rank;         /* the expert-parallel one: TD_SPLIT_EXPERT rows hold
                                experts [ep_rank E/ep, (ep_rank + 1) E/ep) */
    int Vp;                  /* padded vocabulary of this layout: V rounded up to
                                TD_VOCAB_PAD x tp (a layout property: no tensor's
                                global shape, checkpoint or loss includes it) */
    int vocab_lo, vocab_local; /* this rank's wte rows: [vocab_lo, vocab_lo + vocab_local) */
    int n_rows;
    td_param *rows;          /* [n_rows], flat-buffer order */
    size_t numel;            /* flat buffer size in elements (with padding) */
    size_t n_real;           /* this rank's parameters excluding vocab and unit padding */
    size_t n_global;         /* the model's parameters (global shapes), any layout */
    int unit_align;
    int n_units;             /* L + 2: embeddings, blocks, final norm (+ untied head) */
    size_t *unit_offset;     /* [n_units + 1], unit u is [unit_offset[u], unit_offset[u+1]) */
    /* [n_units] 1 for the units this rank holds (a pipeline stage holds some
     * blocks; the first the embeddings, the last the final norm and, tied to
     * the head, the embeddings too), 0 for the others: their rows stay in the
     * table (row index = tensor id in every layout) with numel 0, and the
     * unit is empty. All 1 without pipeline parallelism. */
    unsigned char *held;
} td_param_table;

/* The layout a table is built for: unit padding (1 for the canonical layout
 * of checkpoints, a multiple of dp for sharded layouts), this rank's place
 * on the tp axis and the units its pipeline stage holds. */
typedef struct {
    int unit_align;
    int tp, tp_rank;
    const unsigned char *held; /* [L+2] units held (td_param_table.held); NULL: all */
    td_precision prec;         /* of the model (activation sizes); 0 = fp32 */
    int cp, cp_rank;           /* context parallelism: each sequence's T rows split
                                  over cp ranks (T/cp local rows in two chunks,
                                  include/trident/cp.h); 0 = 1 */
    int ep, ep_rank;           /* expert parallelism (ep divides the experts); 0 = 1 */
} td_table_layout;

/* Checks that a model splits over tp (tp divides the heads, hence C and
 * 4C; with sequence parallelism also the sequence): one clear error naming
 * the flags otherwise. */
void td_gpt_check_tp(const td_gpt_config *cfg, int tp, int seq_parallel);
void td_param_table_build_layout(td_param_table *t, const td_gpt_config *cfg,
                                 const td_table_layout *lay);
/* The table of one process (tp 1). */
void td_param_table_build(td_param_table *t, const td_gpt_config *cfg, int unit_align);
/* Global element index (row-major in p->shape) of element k of tp rank r's
 * slice of row p (any rank of the table's tp, not only its own); -1 for a
 * padding row of the vocabulary. */
long long td_param_global_index(const td_param_table *t, const td_param *p, int r, size_t k);
/* Copies every tensor from a buffer in layout `from` to layout `to` (same
 * model, different unit padding); padding in `dst` is zeroed. */
void td_param_relayout(float *dst, const td_param_table *to, const float *src,
                       const td_param_table *from);
void td_param_table_free(td_param_table *t);
const td_param *td_param_find(const td_param_table *t, const char *name);
/* The row of tensor `kind` of block `layer` (0..L-1); layer is ignored for
 * the embedding and final-norm kinds. Never NULL for a built table. */
const td_param *td_param_lookup(const td_param_table *t, td_tensor_kind kind, int layer);
/* The same, NULL for a kind the table's family (or tying) has no row of. */
const td_param *td_param_lookup_opt(const td_param_table *t, td_tensor_kind kind, int layer);
size_t td_unit_numel(const td_param_table *t, int unit);

/* Init of the elements [lo, hi) of the flat buffer into out[0..hi-lo), as
 * the family's table says: normal(0, 0.02), GPT-2's residual projections
 * 0.02/sqrt(2L), biases 0, norm gains 1, vocab padding rows 0. Each value is a function of (seed, tensor
 * id, global element index) alone, so every layout (tp slices, ZeRO shards)
 * initializes every global element identically. */
void td_param_init_range(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                         float *out);
/* The same into device memory (td_dev_alloc'ed): generated on the host in
 * staged ranges of at most 1M elements, each a named upload (TD_HOST_INIT). */
void td_param_init_range_dev(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                             float *out_dev);

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

/* Communication the model needs under tensor parallelism, supplied by the
 * parallel layer (the model links without MPI). A NULL table is right for
 * tp = 1 only. Every buffer is this rank's.
 *
 * Megatron's conjugate operators sit at the boundaries of each sub-block
 * (attention, MLP), of the vocab-parallel embedding and of the tied head.
 * Without sequence parallelism they are all-reduces of [N,C] (N = B*T):
 *   g, forward: the row-parallel outputs (attention and MLP output
 *     projections, the embedding lookup: partial sums over tp);
 *   f, backward: the input gradients of the column-parallel projections
 *     (QKV, the MLP's first, the tied head's), before each LayerNorm's
 *     backward.
 * With sequence parallelism the regions between them (LayerNorm, residual
 * stream, dropout-free here) hold N/tp rows each; every g becomes a
 * reduce-scatter to the rank's rows and every f an all-gather of them before
 * the column-parallel projection (forward) / of the output gradient before
 * the row-parallel one (backward), with a reduce-scatter for the input
 * gradient.
 *
 * tp_allreduce(ctx, buf, n, op): element-wise reduction of buf[0..n) in
 *   place, TD_REDUCE_SUM for g and f; also the loss: each row's logit max
 *   [N] (TD_REDUCE_MAX), then its sum of exponentials and target logit [N],
 *   and, with sequence parallelism, the partial gradients of the replicated
 *   LayerNorm parameters [2C].
 * seq_all_gather(ctx, out, in, n_local): in[n_local] -> out[tp * n_local],
 *   rank r's part at out + r * n_local (in may be that part of out).
 * seq_reduce_scatter(ctx, out, in, n_local): in[tp * n_local] summed over
 *   tp, rank r keeps part r in out[n_local].
 *
 * Under context parallelism (cp > 1; NULL otherwise) attention is the one
 * operation that needs the other chunks of a sequence:
 * cp_attention_forward(cp_ctx, out, lse, qkv, s, prec) and
 * cp_attention_backward(cp_ctx, dqkv, dout, out, lse, qkv, s, prec) compute
 * what the blocked kernel computes over the whole sequence, for this rank's
 * rows (ring attention, trident/cp.h): out, lse and dqkv (overwritten) of
 * the fused qkv [B, T, 3Ca] (s: the cp = 1 shape of the local rows, with
 * q = qkv, k = qkv + Ca, v = qkv + 2Ca), in the model's precision prec.
 * Collective over the cp group. */
typedef enum { TD_REDUCE_SUM, TD_REDUCE_MAX } td_reduce_op;
/* A mixture of experts needs (moe_ctx; NULL hooks: one process):
 * moe_stats_allreduce(ctx, buf, n): the routing statistics summed over the
 *   ranks that share a micro-batch (dp x cp), in place;
 * moe_stats_exscan(ctx, in, out, n): out = the sum of in over the ranks of
 *   that group before this one (capacity's order of tokens; cp = 1);
 * with expert parallelism (the table's ep > 1), over the ep group, each
 * started and then completed by ep_wait(ctx) (one in flight at a time, so
 * the shared experts compute meanwhile; buffers untouched until then):
 * ep_counts_start(ctx, send, recv, n): an all-to-all of n ints to each peer
 *   (send[r n ..] to rank r, recv[r n ..] from it);
 * ep_exchange_start(ctx, send, send_rows, recv, recv_rows, row_bytes): an
 *   all-to-all-v of rows (send_rows[r] rows to rank r, consecutive in
 *   rank order; recv_rows[r] from it, likewise). */
#define TD_MOE_MAX_EP 256
typedef struct {
    void *ctx;
    void (*tp_allreduce)(void *ctx, float *buf, size_t n, td_reduce_op op);
    void (*seq_all_gather)(void *ctx, float *out, const float *in, size_t n_local);
    void (*seq_reduce_scatter)(void *ctx, float *out, const float *in, size_t n_local);
    void *cp_ctx;
    void (*cp_attention_forward)(void *cp_ctx, void *out, float *lse, const void *qkv,
                                 const td_attn_shape *s, td_precision prec);
    void (*cp_attention_backward)(void *cp_ctx, void *dqkv, const void *dout, const void *out,
                                  const float *lse, const void *qkv, const td_attn_shape *s,
                                  td_precision prec);
    void *moe_ctx;
    void (*moe_stats_allreduce)(void *moe_ctx, float *buf, size_t n);
    void (*moe_stats_exscan)(void *moe_ctx, const float *in, float *out, size_t n);
    void (*ep_counts_start)(void *moe_ctx, const int *send, int *recv, int n);
    void (*ep_exchange_start)(void *moe_ctx, const void *send, const int *send_rows, void *recv,
                              const int *recv_rows, size_t row_bytes);
    void (*ep_wait)(void *moe_ctx);
} td_model_comm;

/* Sizes of this rank's share of the model and of one micro-batch: the
 * activations and the plan are both computed from them. */
typedef struct {
    int B, T, C, N; /* micro-batch, this rank's rows of a sequence (cfg.T / cp),
                       channels, N = B*T rows */
    int Ns;         /* rows this rank holds outside the tensor-parallel
                       regions: N, or N/tp with sequence parallelism */
    int row0;       /* the first of them among the N */
    int Ca, Ha;     /* attention width and heads on this rank: C/tp, H/tp */
    int KVa, hs;    /* kv heads on this rank (KV/tp) and the head size C/H */
    int QKV;        /* the fused q|k|v row on this rank: Ca + 2 KVa hs */
    int F;          /* MLP hidden features on this rank: F/tp */
    int F1;         /* the MLP's first projection on this rank: F (gelu), 2F
                       (SwiGLU's gate|up) */
    int Vl, Vreal;  /* vocabulary columns on this rank (with padding), real ones */
    int vocab_lo;
    int tp, tp_rank, sp;
    int cp, cp_rank;  /* T = cfg.T / cp rows of each sequence on this rank */
    td_precision prec;
    int lp;         /* reduced precision (prec != FP32) */
    size_t es;      /* bytes of an activation element: 4, or 2 under lp */
} td_gpt_dims;

void td_gpt_dims_of(td_gpt_dims *d, const td_param_table *t, int B, int seq_parallel);

/* Saved tensors of one block for one micro-batch, everything its backward
 * reads (sizes in td_gpt_dims). The block's input is the previous block's
 * res3 (or the embedding's output) and is not part of it. With sequence
 * parallelism ln1 and ln2 hold all N rows (gathered: the QKV and MLP
 * weight gradients need them), the rest of the residual stream Ns. */
/* td_act: an activation (or activation gradient) buffer, elements of the
 * model's precision (td_gpt_dims.es bytes each: float under FP32, td_bf16 /
 * td_f16 under reduced precision). float* marks what is fp32 in every
 * precision. */
typedef void td_act;

typedef struct {
    td_act *ln1; float *ln1_mean, *ln1_rstd; /* [N,C], [Ns], [Ns] */
    td_act *qkv;                      /* [N,3Ca] */
    td_act *atty;                     /* [N,Ca] */
    float *lse;                       /* [B,Ha,T] attention's per-row log-sum-exp
                                         (fp32; the blocked kernel's only saved
                                         softmax state) */
    td_act *attproj, *res2;           /* [Ns,C] */
    td_act *ln2; float *ln2_mean, *ln2_rstd; /* [N,C], [Ns], [Ns] */
    td_act *fch, *fch_gelu;           /* [N,F] */
    td_act *fcproj, *res3;            /* [Ns,C]; res3 is the block's output */
    struct td_moe_acts *moe;          /* a mixture of experts' block: its routing and
                                         the experts' tensors (moe.c), sized by the
                                         routing; made on first use, owned by the model */
} td_block_acts;

typedef struct {
    td_act *encoded;                  /* [Ns,C] token + position embeddings */
} td_embed_acts;

typedef struct {
    td_act *lnf; float *lnf_mean, *lnf_rstd; /* [N,C] (gathered), [Ns], [Ns] */
    float *logits;     /* [N,Vl]; probabilities after a forward with targets,
                          dlogits after the backward */
    float *losses;     /* [N] */
    float *row_max, *row_sum, *tgt_logit; /* [N] each: the loss's reduced terms */
} td_head_acts;

/* Scratch, reused by every block (overwritten, never accumulated across
 * blocks except dres, the residual stream's gradient). The last three exist
 * with sequence parallelism only (NULL otherwise). */
typedef struct {
    td_act *dres;              /* [Ns,C] */
    float *dln;                /* [N,C] a column-parallel input gradient (partial), fp32 */
    td_act *datty;             /* [N,Ca] */
    td_act *dqkv;              /* [N,3Ca] */
    td_act *dfch, *dfchg;      /* [N,F] */
    float *dlosses;            /* [N] */
    float *full;               /* [N,C] fp32: a row-parallel output before its reduction
                                  (sp, or always under lp), or dres gathered (sp;
                                  activation elements then) */
    float *dln_local;          /* [Ns,C] fp32: dln after its reduce-scatter (sp), or
                                  any fp32 rows under lp */
    float *dnorm;              /* [2C] a LayerNorm's partial weight and bias gradients */
    td_act *dln_lp;            /* [Ns,C] lp only: dln rounded for the LayerNorm backward */
    td_act *dlogits_lp;        /* [N,Vl] lp only: dlogits rounded for the head's GEMM */
} td_gpt_scratch;

/* Activation recomputation (--recompute). NONE keeps every block's saved
 * tensors (L sets of td_block_acts). BLOCK keeps each block's output [Ns,C]
 * (the next block's input: the residual stream) and one shared set of the
 * other saved tensors; the backward of block l first reruns its forward from
 * its input into that set (bit for bit the same tensors, model.h's promise
 * for td_block_forward), then runs its backward. Costs one more forward of
 * every block per step (and, under tp, its communication again). */
typedef enum { TD_RECOMPUTE_NONE, TD_RECOMPUTE_BLOCK } td_recompute;

/* What a model is built for. TD_GPT_TRAIN: forward and backward.
 * TD_GPT_FORWARD (trident eval): forwards only, with no activation-gradient
 * buffer: the scratch keeps only what a forward reads (a row-parallel
 * output's fp32 rows, the rotary table), a pipeline slot no dx and no
 * weight-gradient stash, td_gpt_cp_scratch lends nothing. Its backward is
 * a programming error (asserted). */
typedef enum { TD_GPT_TRAIN, TD_GPT_FORWARD } td_gpt_use;

typedef struct td_gpt {
    td_gpt_config cfg;
    const td_param_table *table;
    int B;                   /* micro-batch the activations are sized for */
    td_gpt_dims d;
    float **unit_params;     /* [n_units] current parameter base of each unit */
    float **unit_grads;      /* [n_units] current gradient base of each unit */
    td_unit_hook hook;       /* NULL: pointers are set once and never change */
    void *hook_ctx;
    const td_model_comm *comm; /* required when the table's tp > 1 */
    /* Each tensor's offset inside its unit, looked up in the table by kind
     * at create time (the same for every block). */
    size_t off[TD_T_COUNT];  /* TD_NO_TENSOR: a kind the family has not */
    const struct td_arch_desc *arch; /* the family's table (src/model/arch.c) */
    int head_unit;           /* the LM head's weight: unit 0 (tied: wte) or L+1 */
    td_tensor_kind head_kind; /* TD_T_WTE or TD_T_HEAD */
    float *rope_cs;          /* rotary positions: the cos/sin table [T, hs] of this
                                rank's rows (rope.h), in the scratch; NULL for gpt2 */

    td_recompute recompute;
    td_gpt_use use;
    /* activations, sized for B x T, one allocation */
    float *acts;
    td_embed_acts embed;
    td_block_acts rc_set;    /* a pipeline stage with TD_RECOMPUTE_BLOCK: one
                                block's saved tensors, which every slot's blocks
                                share (but for res3) and each block's backward
                                recomputes whole; unused (NULL) otherwise */
    td_block_acts *blocks;   /* [L]; with TD_RECOMPUTE_BLOCK every block's res3
                                is its own and the other tensors are one set
                                shared by all blocks (block 0's res3 lies in it) */
    td_head_acts head;
    float *logits;           /* == head.logits (kept for callers) */
    void *grads_acts;        /* scratch, one allocation */
    /* Reduced precision: each unit's compute copy (the whole unit rounded,
     * at the fp32 offsets m->off), refreshed on a unit's FWD/BWD_BEGIN when
     * the fp32 source moved (another buffer bound) or changed (params_epoch,
     * advanced by td_gpt_params_changed). One allocation, TD_MEM_PARAMS. */
    void **unit_params_lp;   /* [n_units], NULL under FP32 */
    const float **lp_src;    /* [n_units] the buffer each copy was made from */
    unsigned *lp_epoch;      /* [n_units] params_epoch at that time */
    unsigned params_epoch;
    void *params_lp;
    td_gpt_scratch s;
    int *inputs, *targets;   /* [N] copies of the last batch */
    int *pos;                /* [T] global positions of a sequence's local rows
                                (context parallelism's two chunks); NULL: 0..T-1 */
    /* document masking (td_gpt_doc_mask): attention stays within the
     * documents that each end-of-text token ends */
    int doc_eod;             /* the end-of-text id; -1: off */
    int *doc_start;          /* [B, cfg.T] device: each global position's document start */
    int *doc_host;           /* [B, cfg.T] host staging of doc_start */
    /* --doc-positions reset (td_gpt_doc_positions): each micro-batch's rows'
     * positions counted from their document's start, and from them the
     * rotary table of the rows (rotary families) or the rows' positions on
     * the device (learned: the wpe rows the embedding adds) */
    int *doc_pos_host;       /* [B, T] each local row's position; NULL: reset off */
    float *rope_doc;         /* [B, T, hs] device; NULL: rope_cs, the packed positions */
    float *rope_doc_host;    /* [B, T, hs] host staging of rope_doc */
    int *doc_pos;            /* [B, T] device copy of doc_pos_host (learned); NULL: m->pos */
    size_t acts_bytes;
    struct td_moe_state *moe; /* a mixture of experts' state (moe.c); NULL: dense */
    /* model-ops: the run's backend row of the model's precision (every op
     * goes through it), and the device-side loss sum the head
     * downloads. */
    const td_ops *ops;
    double *loss_sum;        /* [1] device memory */
} td_gpt;

/* A mixture of experts' figures, route probe and loss scale: trident/moe.h. */

/* Split backward of a block, for zero-bubble pipeline schedules (ZB-H1):
 * B, the input half, computes the gradient of the block's input (what the
 * previous stage waits for) and W, the weight half, the weight and bias
 * gradients of the four linear layers (QKV, attention projection, MLP fc,
 * MLP projection), which can run later to fill a bubble. B then W adds the
 * same bits as td_block_backward (which is built from the same pieces).
 *
 * The stash holds what W needs besides the block's saved activations (the
 * linear layers' inputs, in td_block_acts): their output gradients, all N
 * rows of them on every tp rank (sizes in td_gpt_dims):
 *   dqkv     [N,3Ca]  QKV (column-parallel: this rank's heads)
 *   dattproj [N,C]    attention projection (row-parallel; with sequence
 *                     parallelism gathered from every rank's Ns rows)
 *   dfch     [N,F]    MLP fc (column-parallel: this rank's features)
 *   dfcproj  [N,C]    MLP projection (row-parallel; gathered likewise)
 * One stash per micro-batch between its B and its W; the caller owns the
 * memory (td_block_wstash_floats floats, carved in that order). */
typedef struct {
    td_act *dqkv, *dattproj, *dfch, *dfcproj;
} td_block_wstash;
size_t td_block_wstash_bytes(const td_gpt_dims *d);
/* Points w's tensors into buf[td_block_wstash_bytes(d)]. */
void td_block_wstash_carve(td_block_wstash *w, const td_gpt_dims *d, void *buf);

/* Pipeline stages keep one slot of activations per in-flight micro-batch
 * (of one model chunk): the saved tensors of the chunk's blocks, the head's
 * when the chunk ends the model, the chunk's input x (received, or the
 * embedding's output when the chunk starts the model) and dx, the gradient
 * of the chunk's output (received, or from the head), which the backward
 * turns into the gradient of x in place. */
typedef struct {
    int n_blocks; /* blocks per chunk (the largest chunk of the stage) */
    int head;     /* the stage runs the final norm + head + loss */
    int wstash;   /* split backward (zb-h1): a weight-gradient stash per block */
    int recompute; /* --recompute block: a block keeps only its output res3; its
                      other tensors point into the stage model's shared rc_set
                      (the backward reruns the block's forward there); not
                      with wstash (W reads the saved tensors) */
    int forward_only; /* a TD_GPT_FORWARD stage: x alone (no dx), not with wstash */
} td_slot_shape;

typedef struct {
    td_slot_shape shape;
    td_act *x, *dx;         /* [Ns,C] each */
    td_block_acts *blocks;  /* [n_blocks] block l0 + i of the chunk at i */
    td_block_wstash *w;     /* [n_blocks] with shape.wstash, else NULL */
    td_head_acts head;      /* when shape.head */
    int *inputs, *targets;  /* [N] this micro-batch's tokens */
    void *mem;              /* the one allocation */
} td_gpt_slot;

size_t td_gpt_slot_bytes(const td_param_table *t, int B, int seq_parallel, const td_slot_shape *sh);
void td_gpt_slot_create(td_gpt_slot *s, const td_gpt *m, const td_slot_shape *sh);
void td_gpt_slot_destroy(td_gpt_slot *s);
/* A model for a pipeline stage: unit pointers and the backward scratch
 * only (td_gpt_scratch_bytes); activations live in slots. */
void td_gpt_create_stage(td_gpt *m, const td_param_table *t, int B, int seq_parallel);
size_t td_gpt_scratch_bytes(const td_param_table *t, int B, int seq_parallel);
/* With a recomputation mode: TD_RECOMPUTE_BLOCK adds m->rc_set, which
 * td_gpt_stage_bytes counts (scratch + rc_set; the slots are planned apart). */
void td_gpt_create_stage_rc(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc);
size_t td_gpt_stage_bytes(const td_param_table *t, int B, int seq_parallel, td_recompute rc);
/* The same for a use (the two above are TD_GPT_TRAIN). */
void td_gpt_create_stage_use(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc,
                             td_gpt_use use);
size_t td_gpt_stage_bytes_use(const td_param_table *t, int B, int seq_parallel, td_recompute rc, td_gpt_use use);

/* Bytes of activations + scratch for micro-batch B on this table's rank,
 * with or without sequence parallelism (the plan). */
size_t td_gpt_activation_bytes(const td_param_table *t, int B, int seq_parallel);
void td_gpt_create(td_gpt *m, const td_param_table *t, int B, int seq_parallel);
/* The same with a recomputation mode (the two above are TD_RECOMPUTE_NONE). */
size_t td_gpt_activation_bytes_rc(const td_param_table *t, int B, int seq_parallel, td_recompute rc);
void td_gpt_create_rc(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc);
/* The same for a use (the _rc pair is TD_GPT_TRAIN). */
size_t td_gpt_activation_bytes_use(const td_param_table *t, int B, int seq_parallel, td_recompute rc,
                                   td_gpt_use use);
void td_gpt_create_use(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc, td_gpt_use use);
void td_gpt_destroy(td_gpt *m);
/* Points every unit at a whole flat buffer (replicated training). */
void td_gpt_bind_flat(td_gpt *m, float *params, float *grads);
/* The fp32 parameters changed (an optimizer step, a pull, a load): the
 * reduced-precision compute copies are stale and are remade on each unit's
 * next use. A no-op under FP32. */
void td_gpt_params_changed(td_gpt *m);
/* The MLP backward's scratch (its fc output gradients, 8 N Ca elements),
 * dead while attention runs forward or backward: a cp ring keeps its four
 * K/V blocks there (td_cp_ring_lend) instead of in memory of its own. The
 * bytes for micro-batch B on this table's rank (a TD_GPT_TRAIN model's), and
 * the model's pointer: NULL and 0 bytes for a TD_GPT_FORWARD model, which
 * has no such scratch (the ring then holds its blocks itself). */
size_t td_gpt_cp_scratch_bytes(const td_param_table *t, int B, int seq_parallel);
void *td_gpt_cp_scratch(td_gpt *m, size_t *bytes);
/* Bytes of the compute copies under reduced precision (0 under FP32): the
 * plan's TD_MEM_PARAMS beside the fp32 master weights. */
size_t td_gpt_compute_param_bytes(const td_param_table *t);
/* GEMM accounting (--gemm-stats): when enabled, every GEMM of the model
 * adds its FLOPs and its wall time; read (and optionally reset) here. */
void td_gpt_gemm_stats_enable(int on);
void td_gpt_gemm_stats(double *flops, double *ms, int reset);

/* Forward over inputs[B,T]. With targets, returns the SUM of the B*T token
 * losses (the caller divides by the global token count) and leaves
 * probabilities in m->logits; without, returns 0 and leaves the logits. */
double td_gpt_forward(td_gpt *m, const int *inputs, const int *targets);
/* Host tokens [N] into the model's device buffers (TD_HOST_TOKENS), after
 * checking every target < V on the host; targets NULL: none. */
void td_gpt_upload_tokens(const td_gpt *m, int *inputs_dev, const int *inputs, int *targets_dev,
                          const int *targets);
/* Document masking: from here on the model's attention keeps each query
 * within its document, a document beginning after each token `eod` of the
 * inputs (eod < 0: off again). td_gpt_set_documents takes each micro-batch's
 * WHOLE input sequences ([B, cfg.T], before a context-parallel split: the
 * starts are global positions, the same on every cp rank) before its
 * forward; the backward and recomputation use the same. */
void td_gpt_doc_mask(td_gpt *m, int eod);
void td_gpt_set_documents(td_gpt *m, const int *whole_inputs);
/* --doc-positions reset (after td_gpt_doc_mask with eod >= 0; reset 0:
 * off again): the positions restart at 0 at each document start, the
 * position of global row t being t - start(t): rotary (the rows' table)
 * and learned (the wpe row added to each row, its gradient there). */
void td_gpt_doc_positions(td_gpt *m, int reset);
/* A pipeline keeps several micro-batches in flight, each in a slot, and
 * runs their forwards and backwards interleaved: each slot holds its own
 * micro-batch's starts (and --doc-positions reset table or rows' positions)
 * in buffers like the model's (NULL when masking is off), and
 * td_gpt_docs_use points the model at them for that slot's actions,
 * returning what it pointed at. */
typedef struct {
    int *start;  /* [B, cfg.T] device */
    float *rope; /* [B, T, hs] device, or NULL */
    int *pos;    /* [B, T] device (learned positions reset), or NULL */
} td_gpt_docs;
void td_gpt_docs_create(td_gpt_docs *d, const td_gpt *m);
void td_gpt_docs_destroy(td_gpt_docs *d);
td_gpt_docs td_gpt_docs_use(td_gpt *m, td_gpt_docs d);
/* This rank's rows' global positions [T] (context parallelism's chunks). */
void td_gpt_positions(const td_gpt *m, int *pos);
/* The rotary inverse frequencies [hs/2] of the config (rope_theta, llama3 scaling). */
void td_gpt_rope_freqs(const td_gpt_config *c, int hs, float *inv);
/* The starts themselves, host side: start[b*T + t] = the position after the
 * last eod at or before t - 1 in sequence b (0 if none). */
void td_doc_starts(int *start, const int *tokens, int B, int T, int eod);
/* --eod-mask-loss: each target equal to eod becomes -1 (no loss, no
 * gradient: td_gpt_upload_tokens); returns how many targets stay. */
long td_doc_mask_targets(int *targets, size_t n, int eod);
/* Backward of the last forward; every token's loss is weighted by
 * dloss (1 / tokens of the global batch). Adds into the gradients. */
void td_gpt_backward(td_gpt *m, float dloss);

/* Blocks [l0, l1) of one micro-batch, with the unit hook's events for
 * their units (FWD_BEGIN/END, BWD_BEGIN/END of units l0+1 .. l1). x is block
 * l0's input [Ns,C] (td_gpt_dims): m->embed.encoded or m->blocks[l0-1].res3 in the whole
 * pass, a received activation in a pipeline stage. Forward returns block
 * l1-1's output (m->blocks[l1-1].res3). Backward takes in dres [Ns,C] the
 * gradient of that output and leaves there the gradient of x. */
const td_act *td_gpt_forward_blocks(td_gpt *m, int l0, int l1, const td_act *x);
void td_gpt_backward_blocks(td_gpt *m, int l0, int l1, const td_act *x, td_act *dres);
/* (With m->recompute == TD_RECOMPUTE_BLOCK the backward reruns each block's
 * forward between its BWD_BEGIN and its backward: the unit's parameters are
 * bound there, and under tp its forward communication happens again.) */

/* The per-block functions the passes are made of. They issue no hook
 * events: the caller must have bound the units they read (unit_params, and
 * unit_grads for backward). Weights come from m->unit_params via m->off;
 * scratch from m->s.
 *   embed:  unit 0 (wte, wpe). out[Ns,C] = wte[inputs] + wpe[t] (this
 *           rank's rows; the vocab-parallel lookup is reduced over tp).
 *   block l: unit l+1. a receives every saved tensor; rerunning it from the
 *           same x reproduces a bit for bit (recomputation).
 *   head:   unit L+1 (ln_f) and unit 0 (wte, tied). Returns the loss sum
 *           over all N rows (0 without targets), the same on every tp rank.
 * Under tensor parallelism every tp rank calls each of them in the same
 * order (they communicate through m->comm). inputs and targets are device
 * memory (td_gpt_upload_tokens); the head's loss sum is reduced on the
 * device and downloaded (TD_HOST_SCALARS, synced before it returns). */
void td_embed_forward(td_gpt *m, const int *inputs, td_embed_acts *a);
void td_embed_backward(td_gpt *m, const int *inputs, const td_act *dres);
void td_block_forward(td_gpt *m, int l, const td_act *x, td_block_acts *a);
/* The same for a backward's recomputation (a mixture of experts counts its
 * statistics and loss once). */
void td_gpt_recompute_block(td_gpt *m, int l, const td_act *x, td_block_acts *a);
/* dres: in, the gradient of the block's output; out, that of x. */
void td_block_backward(td_gpt *m, int l, const td_act *x, const td_block_acts *a, td_act *dres);
double td_head_forward(td_gpt *m, const td_act *x, const int *targets, td_head_acts *a);
/* Overwrites dres with the gradient of x (the last block's output). a->logits
 * becomes dlogits. */
void td_head_backward(td_gpt *m, const td_act *x, const int *targets, td_head_acts *a, float dloss,
                      td_act *dres);

/* FLOPs of one training step (forward + backward) per token, for MFU, as
 * PaLM and nanoGPT count them: 6 x matmul parameters + 12 L T C attention
 * (the causal half is not subtracted). Grouped-query attention's smaller k
 * and v and SwiGLU's third matrix count as they are. */
double td_gpt_flops_per_token(const td_gpt_config *cfg);

/* B: like td_block_backward (dres in: the gradient of the block's output;
 * out: that of x), adding every parameter gradient except the four linear
 * layers' weights and biases; their output gradients go to w. LayerNorm
 * gradients are added here. All of the block's tensor-parallel
 * communication happens in B. */
void td_block_backward_input(td_gpt *m, int l, const td_act *x, const td_block_acts *a, td_act *dres,
                             td_block_wstash *w);
/* W: adds the four linear layers' weight and bias gradients from a (the
 * same micro-batch's saved activations) and w. Reads no scratch and never
 * communicates, so each rank may run it whenever it likes after that B
 * (and before a's or w's memory is reused). */
void td_block_backward_weight(td_gpt *m, int l, const td_block_acts *a, const td_block_wstash *w);

#ifdef __cplusplus
}
#endif

#endif
