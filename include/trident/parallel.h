/* parallel: data-parallel strategies over the grid's dp group.
 *
 * A strategy owns the model state (parameters, gradients, AdamW moments) in
 * whatever placement its mode needs, binds the model's unit hook so that
 * gradient communication starts during backward, and finishes the step
 * (reduction, global norm, clipping, AdamW, parameter sync).
 *
 *   mode allreduce, zero 0   replicated; bucketed all-reduce overlapped with backward
 *   mode allreduce, zero 1   + optimizer state sharded; all-gather of params
 *   mode allreduce, zero 2   + gradients sharded (reduce-scatter per unit)
 *   mode allreduce, zero 3   + parameters sharded (FSDP: gather per unit, prefetch)
 *   mode reduce-broadcast    reduce to dp rank 0, which updates and broadcasts
 *   mode ps                  parameter servers hold sharded params + optimizer
 *
 * Every mode computes the same step: gradients are SUMS of per-token
 * gradients scaled by 1/(global tokens) (the trainer sets dloss), so a sum
 * over replicas is the global mean. */
#ifndef TRIDENT_PARALLEL_H
#define TRIDENT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "trident/compat.h"
#include "trident/grid.h"
#include "trident/model.h"
#include "trident/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Gradient bucket size: large enough that per-call overhead is small, small
 * enough that the first bucket starts early in backward (see bench/). */
#define TD_DEFAULT_BUCKET_MB 1.0

/* td_dp_mode and td_dp_mode_name: compat.h (the rules table reads the mode) */

typedef struct {
    td_dp_mode mode;
    int zero;                 /* 0..3 */
    size_t bucket_bytes;      /* gradient bucket size (allreduce modes) */
    int ps_staleness;         /* ps: how many steps a worker may run ahead */
    unsigned long long seed;  /* parameter init */
    int no_overlap;           /* start gradient communication after backward */
    int master;               /* the fp32 parameters are master weights (the
                                 model computes from reduced-precision copies):
                                 planned and allocated as TD_MEM_MASTER */
    td_optim_config optim;
    int steps;                /* ps: the run's steps (its last one waits for every
                                 update); 0: optim.max_steps */
    /* The payload of the gradient reduction (grad_payload.h): TD_F32 (the
     * plain sum), or TD_BF16 (rounded to bf16, summed in fp32); topk_ratio
     * > 0: top-k sparsification of each bucket instead, with error feedback
     * unless topk_no_ef: of each rank's local AdamW update (the step applies
     * the averaged sparse update), or with topk_grad of the gradient (the
     * step sees the dense sum). Replicated all-reduce (bf16, top-k) and
     * ZeRO-1 (top-k) only: td_dp_payload_check says what else is refused. */
    int grad_dtype; /* td_dtype */
    double topk_ratio;
    int topk_no_ef, topk_grad;
    /* The model's forward passes only (trident eval): no gradients, AdamW
     * moments, gradient payloads or reduction buffers are planned or
     * allocated (the payload fields are ignored), td_dp_finish_step must
     * not be called, td_dp_ranges gives no moment ranges (sections 1, 2)
     * and td_dp_gather_state none of the moments. Not with ps (asserted). */
    int forward_only;
} td_dp_config;

/* Where this rank sits, in plain numbers: what the memory plan and the unit
 * padding depend on. td_layout_of_grid derives it from a live grid; a planner
 * fills it in by hand, with no MPI. */
typedef struct {
    int dp, tp, pp, n_servers;
    int dp_rank;          /* this rank's place in the dp x cp group (the dp
                           * coordinate when cp = 1); -1 on parameter servers */
    int is_server;
    int dp_shares_memory; /* the dp x cp group's ranks share memory (one node):
                           * ZeRO's collectives then need no MPI staging */
    int cp;               /* context-parallel size; 0 = 1. Its ranks hold the same
                           * parameters, like dp's: gradients are summed and ZeRO
                           * shards over dp x cp (td_layout_grad_ranks) */
    int dp_shard;         /* hybrid sharding (--dp-shard): ZeRO shards over runs of
                           * this many ranks of dp x cp; 0 = over all of them */
    int ep;               /* expert parallelism: runs of ep ranks of dp x cp share out
                           * the experts (dp_rank % ep is the ep rank); 0 = 1 */
} td_layout;

/* The ranks over which every gradient is summed: dp x cp. */
static inline int td_layout_grad_ranks(const td_layout *l) { return l->dp * (l->cp > 1 ? l->cp : 1); }
/* The ranks over which ZeRO shards: a shard of dp_shard ranks under hybrid
 * sharding, else all of dp x cp. */
static inline int td_layout_shard_ranks(const td_layout *l) {
    int G = td_layout_grad_ranks(l);
    return l->dp_shard >= 1 && l->dp_shard < G ? l->dp_shard : G;
}

/* Tensor parallelism (tp.c): the model's communication table over the
 * grid's tp group. Traffic is counted per operation: calls and payload bytes
 * (the whole tensor: n elements for an all-reduce, tp x n_local for an
 * all-gather or reduce-scatter), as the comm layer's trace records them. */
enum { TD_TP_ALLREDUCE, TD_TP_ALL_GATHER, TD_TP_REDUCE_SCATTER, TD_TP_NOPS };
typedef struct {
    uint64_t calls[TD_TP_NOPS], bytes[TD_TP_NOPS];
} td_tp_traffic;

typedef struct {
    td_model_comm ops;
    td_comm *group;
    int size;
    uint64_t calls[TD_TP_NOPS], bytes[TD_TP_NOPS]; /* since the last reset */
} td_tp_comm;

void td_tp_comm_init(td_tp_comm *c, const td_grid *g);
/* The table to give the model: NULL when tp = 1 and no cp ring is bound
 * to it (td_cp_bind_model). */
const td_model_comm *td_tp_comm_ops(const td_tp_comm *c);
void td_tp_comm_reset(td_tp_comm *c);
/* Communication buffers the tp operations need on this rank (the plan's
 * comm category): the comm layer's packing scratch for sequence
 * parallelism's reduce-scatters, 0 otherwise. */
size_t td_tp_comm_plan_bytes(const td_param_table *t, int B, int seq_parallel);
/* The tp traffic of one training step (forward + backward of n_micro
 * micro-batches of B sequences) by the formula: per block and micro-batch 4
 * all-reduces of B x T x C (with sequence parallelism 4 all-gathers and 4
 * reduce-scatters of the same size), the embedding's and the head's one
 * each, the loss's 3 reductions of B x T values, and with sequence
 * parallelism the LayerNorms' partial gradients (2C each). */
void td_tp_formula(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro, int tp,
                   int seq_parallel);
/* The same for a pipeline stage running n_blocks blocks, the embedding
 * and/or the head. */
void td_tp_formula_stage(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro, int tp,
                         int seq_parallel, int n_blocks, int embed, int head);
/* Adds what activation recomputation (--recompute block) moves on top: the
 * forward of every block is run again in its backward, so per block and
 * micro-batch its two g operators again (2 all-reduces of B x T x C; with
 * sequence parallelism 2 all-gathers and 2 reduce-scatters). */
void td_tp_formula_add_recompute(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro,
                                 int tp, int seq_parallel, int n_blocks);

/* Predicted bytes per category for this rank (the plan, before allocation).
 * bytes[c] is the category's whole; device[c] the part of it in the
 * device's memory, each buffer as the device rounds it (td_dev_footprint:
 * whole pages on the guard), and bytes[c] - device[c] the part in host
 * memory (shared windows, the comm layer's staging, host copies). On
 * --device cpu every byte is host memory: device[c] is 0 and bytes[c] is
 * what it always was. */
typedef struct {
    size_t bytes[8];  /* indexed by td_mem_cat */
    size_t device[8]; /* of bytes[]: device memory */
} td_mem_plan;

/* Adds one step tensor's buffer of `bytes` (a td_dev_alloc the run will
 * make) to the plan: td_dev_footprint(bytes) to bytes[cat], and to
 * device[cat] when the run's backend is a device. */
void td_plan_dev(td_mem_plan *p, td_mem_cat cat, size_t bytes);
/* Adds host bytes (td_alloc, a shared window) to bytes[cat]. */
static inline void td_plan_host(td_mem_plan *p, td_mem_cat cat, size_t bytes) { p->bytes[cat] += bytes; }

typedef struct td_dp td_dp;

/* --grad-reduce-dtype fp32|bf16 (a td_dtype) and --grad-compress none |
 * topk:R[:grad][:noef] (0 < R <= 1): a bad value is a user error naming the
 * flag. */
int td_grad_dtype_parse(const char *s);
void td_grad_compress_parse(const char *s, double *ratio, int *no_ef, int *grad_scheme);
/* Refuses (user error) the payloads a mode does not support: bf16 needs
 * --dp-mode allreduce with --zero 0, top-k --dp-mode allreduce with --zero 0
 * or 1, and the two do not combine (the rules table's rows consulted at
 * TD_COMPAT_AT_DP_CONFIG). Pure: call it before the first step. */
void td_dp_payload_check(const td_dp_config *cfg);
/* The memory category of the fp32 parameter buffers. */
static inline td_mem_cat td_dp_param_cat(const td_dp_config *cfg) {
    return cfg->master ? TD_MEM_MASTER : TD_MEM_PARAMS;
}

/* Parses "allreduce" | "reduce-broadcast" | "ps"; a bad name is a user error. */
td_dp_mode td_dp_mode_parse(const char *s);
/* The same without failing: the mode, or -1 for another name. */
int td_dp_mode_find(const char *s);
/* The layout of this rank in a live grid (no communication). */
td_layout td_layout_of_grid(const td_grid *g);
/* Unit padding the mode needs in the parameter table (ZeRO shards by dp). */
int td_dp_unit_align(const td_dp_config *cfg, const td_layout *lay);

/* Allocates and initialises the model state (same init on every rank, then
 * broadcast from the first rank of the dp group) and binds the model's hooks.
 * On parameter-server ranks this allocates the server shard instead. */
td_dp *td_dp_create(const td_dp_config *cfg, const td_grid *g, const td_param_table *t,
                    td_gpt *model);
void td_dp_destroy(td_dp *dp);

/* The plan: bytes per category this rank will hold (model state, buffers);
 * activations are added by the trainer. A pure function of its inputs: no
 * communicator needed. td_dp_create allocates exactly this. */
td_mem_plan td_dp_memory_plan(const td_dp_config *cfg, const td_layout *lay,
                              const td_param_table *t);

/* Before the first micro-batch of a step (ps: pull the parameters). */
void td_dp_begin_step(td_dp *dp, int step);
/* Training (forward then backward) or evaluation (forward only): ZeRO-3
 * keeps the embeddings gathered between forward and backward only when
 * training. */
void td_dp_set_training(td_dp *dp, int training);
/* Before an evaluation after steps_done updates: the workers of parameter
 * servers pull the fresh parameters (collective with the servers); nothing
 * for the other modes. */
void td_dp_begin_eval(td_dp *dp, int steps_done);
/* 1 when every training rank ends each step together, so a stop can be
 * agreed at a step boundary and memory peaks are measured after step 0;
 * 0 with parameter servers (their servers never reach an agreed stop). */
int td_dp_agreed_stops(const td_dp *dp);
/* Before each micro-batch: whether gradients communicate this micro-batch
 * (replicated all-reduce only syncs on the last one). */
void td_dp_begin_micro(td_dp *dp, int micro, int n_micro);
/* Pipeline stages run backward actions of several micro-batches in the
 * schedule's order: td_dp_begin_pipeline before the first (nothing
 * communicates yet), then td_dp_set_final_backward(1) around the backward of
 * a unit whose gradient is then final (its last micro-batch), 0 otherwise. */
void td_dp_begin_pipeline(td_dp *dp);
void td_dp_set_final_backward(td_dp *dp, int final);
/* Loss scaling (loss_scale.h): the gradients of the coming step are the
 * loss's multiplied by `scale` (the trainer scaled dloss); the step pipeline
 * divides them by it before the norm, clipping and AdamW, so the norm
 * returned and the update are the unscaled gradient's. 1 until set. The
 * same value on every rank. */
void td_dp_set_loss_scale(td_dp *dp, float scale);
/* After the last backward of a step: finish gradient communication, compute
 * the exact global norm, clip, AdamW with this lr, sync parameters. Returns
 * the global gradient norm (before clipping). step is 0-based. */
double td_dp_finish_step(td_dp *dp, int step, float lr);

/* Parameter-server ranks run this instead of training; returns when the
 * workers are done. */
void td_dp_serve(td_dp *dp, int steps);

/* The full model state in the canonical layout (`canon`, unit_align 1) on
 * world rank 0; m, v may be NULL. Collective over the whole world. Holds the
 * whole state twice on rank 0: for tests; checkpoints use td_dp_gather_unit. */
void td_dp_gather_state(td_dp *dp, const td_param_table *canon, float *params, float *m, float *v);

/* Unit u of section 0 (parameters), 1 (AdamW m) or 2 (AdamW v) in this
 * strategy's layout, gathered to dp rank 0 (world rank 0 when tp = pp = 1),
 * one unit at a time so that no rank ever holds a second copy of the state:
 * returns a pointer to the unit's td_unit_numel(t, u) elements on dp rank 0
 * (the strategy's own memory where it holds them, else `scratch`), NULL on
 * other ranks. scratch holds the largest unit on every rank (sharded modes
 * gather into it). Collective over the dp group (and parameter servers).
 * Under expert parallelism the unit, with this rank's own experts, is
 * returned on every rank of edp rank 0 (the first ep run: dp rank 0 and
 * the holders of the other experts), for td_ep_gather_unit. */
const float *td_dp_gather_unit(td_dp *dp, int section, int u, float *scratch);
/* Unit u of section s as above, with every tp rank's slices put together:
 * on world rank 0 (NULL elsewhere), laid out as the rows of *layout say: t
 * itself when tp = 1, else `canon` (tp 1, unit_align 1: global shapes, the
 * vocabulary padded for one process). scratch holds
 * td_tp_gather_scratch_floats(t, canon) floats on every rank. Collective
 * over the world. Checkpoints, sampling and tests read the state this way. */
/* Unit u of table t's layout in `all` (the tp ranks' copies, one after the
 * other, td_unit_numel(t, u) each) placed at the global indices of the
 * canonical layout in out (padding 0; expert rows: t's own experts). */
void td_tp_place_unit(const td_param_table *t, const td_param_table *canon, int u, const float *all, float *out);
const float *td_tp_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t,
                               const td_param_table *canon, int section, int u, float *scratch,
                               const td_param_table **layout);
size_t td_tp_gather_scratch_floats(const td_param_table *t, const td_param_table *canon);
/* Whether world rank 0 holds every parameter in this layout's flat buffer
 * (all modes but ZeRO-3); then *params points at it. */
int td_dp_full_params(td_dp *dp, const float **params);
/* Before a save during training (--save-every), on every training rank:
 * parameter servers, busy serving, are asked for the state after
 * steps_done updates. Returns 0 on every training rank when they had
 * stopped on a non-finite update instead (td_dp_nonfinite says where:
 * world rank 0 learns it from the servers and spreads it over the
 * workers); 1 otherwise and for every other mode. Collective over the
 * training ranks with parameter servers. */
int td_dp_save_begin(td_dp *dp, int steps_done);

/* What this rank holds, as ranges of the flat buffer laid out by its table:
 * cb(ctx, lo, n, data) for each range [lo, lo + n) of section 0 (fp32
 * parameters / master weights), 1 (AdamW m) or 2 (AdamW v), data pointing at
 * the rank's own memory for it (read it to save, write it to load). With
 * owner_only, a range replicated over dp ranks is given to one of them only
 * (dp rank 0, or each ZeRO owner its slice), so the ranges of all dp ranks
 * cover the buffer exactly once; without, every range the rank holds (a
 * replica fills its own copy on load). Ranges may include unit padding.
 * Returns 0 (and calls nothing) for a mode that cannot say: parameter
 * servers. No communication. */
typedef void (*td_dp_range_cb)(void *ctx, size_t lo, size_t n, float *data);
int td_dp_ranges(td_dp *dp, int section, int owner_only, td_dp_range_cb cb, void *ctx);
/* State that belongs to this dp rank rather than to the model, in this
 * table's flat layout ([t->numel] each, NULL when absent): k = 0 the top-k
 * error-feedback residual, 1 and 2 the top-k update scheme's local AdamW
 * moments (grad_payload.h). */
#define TD_DP_RANK_STATES 3
float *td_dp_rank_state(td_dp *dp, int k);

/* After td_dp_finish_step: -1 when the global gradient norm was finite (the
 * update was applied); else the step was NOT applied and this returns the
 * parameter-table row of the first tensor holding a non-finite gradient,
 * agreed by every rank (the smallest row over the ranks' local scans), or
 * t->n_rows when every element is finite and the norm itself overflowed.
 * *step receives the step it happened at. */
int td_dp_nonfinite(const td_dp *dp, int *step);
/* The run stops before finishing: parameter servers leave their loop. */
void td_dp_stop(td_dp *dp, int step);

/* `trident verify`: a probe that sees, at every optimizer step, each range
 * [lo, lo + n) of this rank's flat buffer whose reduced gradient it owns
 * (the whole model replicated, a ZeRO shard, a server slice), before the
 * norm; NULL turns it off. loss_scale: the factor the gradients still carry
 * (fp16's loss scaling; 1 without), which the step divides out after the probe.
 * grads is host memory (on a device, a copy downloaded for the probe,
 * TD_HOST_EXPORT). */
typedef void (*td_grad_probe)(void *ctx, const td_param_table *t, int step, size_t lo, size_t n,
                              const float *grads, float loss_scale);
void td_dp_set_grad_probe(td_grad_probe fn, void *ctx);

/* Gradient traffic of the last step on this rank, as the comm layer counted
 * it (td_comm_sent_bytes over the gradient reduction's calls), beside the
 * bytes an fp32 reduction of the same elements hands to the comm layer. */
void td_dp_grad_traffic(const td_dp *dp, uint64_t *sent, uint64_t *dense);
/* --optimizer muon on a layout that cuts its matrices (ZeRO, tp): the last
 * step's gather-and-scatter bytes this rank sent, as the comm layer counted
 * them, and as the formula of src/parallel/muon_shard.c says (both 0
 * where every rank holds its matrices whole). */
void td_muon_traffic(uint64_t *sent, uint64_t *formula);
/* Its exchange's staging of device payloads (td_staging_shape's p2p,
 * n_p2p): n pieces of at most *bytes in flight; 0 where nothing is cut. */
void td_muon_staging(const td_dp_config *cfg, const td_layout *lay, const td_param_table *t, size_t *bytes,
                     int *n);

/* Staleness statistics (ps): max and mean observed. */
void td_dp_staleness(const td_dp *dp, int *max_seen, double *mean_seen);
/* Share of gradient-communication time hidden behind backward, and total
 * communication wait measured at finish (ms, last step). */
void td_dp_overlap_stats(const td_dp *dp, double *exposed_ms, double *comm_ms);

#ifdef __cplusplus
}
#endif

#endif
