/* planner: which layout fits, and which is fastest, for a model on a cluster.
 *
 * A cost model of memory and step time as pure functions (no MPI,
 * docs/design.md principle 6) and a search over dp x tp x pp x cp x zero
 * (over all of dp x cp or hybrid, in shards of a node) x micro-batches x
 * schedule x recompute x sequence parallelism. Model states
 * come from the engine's own state plan (state_plan.h), activations from the
 * per-layer formulas of Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models", table 2), FLOPs from
 * Narayanan et al. 2021 (Megatron-LM, eq. 2 and 3), pipeline bubbles from
 * src/schedule, communication from alpha-beta ring models on the link tier
 * each axis uses. Depends on base, model (the family's defaults and
 * FLOPs), formats (the calibration profile), schedule and state_plan;
 * never on comm. */
#ifndef TRIDENT_PLANNER_H
#define TRIDENT_PLANNER_H

#include <stddef.h>

#include "trident/formats_profile.h"
#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model as the planner sees it. The fields after T are the family's
 * (model.h's td_gpt_config, same meanings); zero in each is the family's
 * default, so {name, L, H, C, V, T} is GPT-2 as it always was. */
typedef struct {
    char name[32];
    int L, H, C, V, T; /* layers, heads, hidden, vocabulary, sequence */
    int arch;          /* td_arch: TD_ARCH_GPT2 (0) or TD_ARCH_LLAMA */
    int KV;            /* key/value heads (grouped-query attention); 0: H */
    int F;             /* MLP hidden features; 0: 4C (llama's default is set
                          by td_plan_model_finish) */
    int tie;           /* TD_TIE_*: the LM head is the token embedding;
                          0: on for gpt2, off for llama */
    /* Mixture of experts (0 in E: a dense model, the fields after it unused).
     * An MoE block's MLP is E experts of the family's MLP form (GELU for
     * gpt2, SwiGLU for llama) of moe_ffn hidden features each, K of them
     * active per token, chosen by a router (a linear C -> E), plus S shared
     * experts of the same width every token passes through. Blocks 0, N,
     * 2N, ... are MoE blocks (Megatron-core's --moe-layer-freq N); the
     * others keep the dense MLP of F. */
    int E;         /* routed experts per MoE block (--moe-experts) */
    int K;         /* experts active per token (--moe-top-k); 0: 2 */
    int moe_every; /* N (--moe-every); 0: 1, every block */
    int moe_ffn;   /* hidden features of one expert (--moe-ffn-hidden); 0: F */
    int S;         /* shared experts (--moe-shared-experts) */
} td_plan_model;

/* MoE blocks in the model: ceil(L / moe_every); 0 for a dense model. */
int td_plan_moe_layers(const td_plan_model *m);
/* MoE blocks among the layers [lo, hi). */
int td_plan_moe_layers_in(const td_plan_model *m, int lo, int hi);

/* The measurements a cluster preset's step times were checked against:
 * over the validated layouts, (predicted - measured) / measured step time
 * lay in [lo, hi]; predicted throughput then errs by 1 / (1 + x) - 1. */
typedef struct {
    const char *name;   /* short tag printed beside the predictions */
    double lo, hi;      /* fractions, lo <= hi */
    const char *source; /* what was measured, on what, when */
} td_plan_validation;

typedef struct {
    char name[32];
    int gpus, gpus_per_node;
    double mem_bytes;  /* per device */
    double peak_flops; /* dense bf16/fp16 peak per device */
    double gemm_eff;   /* achievable fraction of peak for large GEMMs */
    double bmm_flops;  /* achieved rate of attention's per-head batched GEMMs
                          (head size 64-160: memory-bound), 0: the GEMM rate */
    double hbm_bw;     /* achievable device memory bandwidth, bytes/s */
    double intra_bw;   /* achieved collective bus bandwidth per device inside a node, bytes/s */
    double inter_bw;   /* the same between nodes, bytes/s */
    double intra_lat, inter_lat; /* seconds per ring step */
    int dp_serial; /* the software reduces gradients after the backward
                      instead of beside it (Megatron-LM 2021) */
    double grad_acc_bytes; /* bytes per owned parameter that adding a micro-batch's
                              gradients into the accumulated ones moves, each
                              micro-batch after the first (0: fused into the
                              weight-gradient GEMM, or none) */
    /* `local` (this machine as calibrated; 0 elsewhere): fp32 elements; the
     * GEMM rate per device by GEMM size (n x n x n, log-interpolated, at the
     * cube moving as many elements per FLOP, n = 3 MNK / (MK + NK + MN))
     * instead of peak x gemm_eff; pipeline point-to-point apart from the
     * collectives' ring */
    int elem_bytes; /* activation, gradient and message element: 2 (0), 4 */
    int n_rates;
    double rate_n[8], rate_flops[8];
    /* memory bandwidth per device by the bytes an operation streams (caches
     * first), log-interpolated, instead of hbm_bw (which stays the largest
     * size's: the optimizer's) */
    int n_bws;
    double bw_bytes[8], bw_rate[8];
    double p2p_bw, p2p_lat; /* 0: intra_bw, intra_lat */
    double optim_rate; /* `local`: elements per second of the engine's optimizer
                          step (gradient norm and AdamW) per device; 0: AdamW
                          is memory-bound, at hbm_bw */
    double oversub; /* threads per core when ranks share cores (> 1), else 0:
                       while a pipeline fills and drains, the ranks that run
                       take the cores the waiting ones free */
    const td_plan_validation *validation; /* the preset's; NULL: none applies */
    char validated_on[32]; /* the preset the validation was measured on */
} td_plan_cluster;

typedef enum { TD_PLAN_RC_NONE, TD_PLAN_RC_SELECTIVE, TD_PLAN_RC_FULL } td_plan_rc;
/* no schedule (pp = 1), or a td_sched_kind */
#define TD_PLAN_NO_SCHED (-1)

typedef struct {
    int dp, tp, pp, zero;
    int micro_batch;   /* sequences per micro-batch (b) */
    int micro_batches; /* per replica per step (m = global / (dp b)) */
    int sched, v;      /* td_sched_kind or TD_PLAN_NO_SCHED; model chunks per stage */
    int rc, sp;        /* td_plan_rc; sequence parallelism */
    int cp;            /* context parallelism: each sequence over cp devices (0 = 1) */
    int shard;         /* hybrid sharding: ZeRO shards over runs of this many of
                        * the dp x cp devices, replicas all-reduce (0 = none) */
    /* MoE: the experts' own grid over the same ranks (Megatron-core's
     * parallel folding), etp x ep x edp x pp = the devices: etp divides tp,
     * ep divides tp x cp x dp / etp and the experts, edp is the rest. Each
     * device holds E / ep experts, each split over etp (0 reads as 1). */
    int ep, etp;
} td_plan_layout;

/* cp of a layout (0 reads as 1). */
static inline int td_plan_cp(const td_plan_layout *l) { return l->cp > 1 ? l->cp : 1; }
static inline int td_plan_ep(const td_plan_layout *l) { return l->ep > 1 ? l->ep : 1; }
static inline int td_plan_etp(const td_plan_layout *l) { return l->etp > 1 ? l->etp : 1; }
/* The experts' data-parallel size: tp x cp x dp / (etp x ep), over which
 * expert gradients reduce and ZeRO shards the expert state. */
static inline int td_plan_edp(const td_plan_layout *l) {
    return l->tp * td_plan_cp(l) * l->dp / (td_plan_etp(l) * td_plan_ep(l));
}
/* Devices ZeRO shards the model state over: a shard, else all of dp x cp. */
static inline int td_plan_shards(const td_plan_layout *l) {
    int g = l->dp * td_plan_cp(l);
    return l->shard >= 1 && l->shard < g ? l->shard : g;
}

/* TD_COST_EP (the experts' all-to-all) is last: a dense model's output
 * leaves it out */
enum { TD_COST_COMPUTE, TD_COST_TP, TD_COST_PP, TD_COST_BUBBLE, TD_COST_DP, TD_COST_OPTIM, TD_COST_CP, TD_COST_EP,
       TD_COST_N };
const char *td_plan_cost_name(int cost);

typedef struct {
    td_plan_layout lay;
    double mem_states, mem_acts, mem_comm, mem_bytes; /* the busiest stage */
    double t[TD_COST_N]; /* seconds per step by cost (dp: the part not hidden behind backward) */
    double step_s;
    double dp_traffic_s; /* the dp collectives' whole time, hidden or not */
    double tflops_per_device; /* Megatron's count (eq. 3: 96 with full recompute, 72 without) */
    double mfu;               /* model FLOPs (72) over peak */
    int dominant; /* the largest t[]; dp collectives not wholly hidden count
                     with their whole time (the step waits for them, compute
                     running beside) */
} td_plan_eval;

/* Resolves the family's defaults (KV, F, tie) as the model does
 * (td_gpt_config_finish) and checks the family's sizes: H % KV, F, an even
 * head size for llama, --kv-heads or --ffn-hidden given to gpt2; a bad one
 * is a user error naming the flag (exits). */
void td_plan_model_finish(td_plan_model *m);
/* Presets (finished): 0, or -1 for an unknown name (the caller reports). */
int td_plan_model_preset(const char *name, td_plan_model *m);
/* A preset as the model's config, with what the planner does not need
 * (rope theta and scaling, norm epsilon; a mixture of experts' E, K, every,
 * expert F and shared experts): 0, or -1 for an unknown name. V is the
 * preset's; Vp is left 0 (td_gpt_config_finish fills it). */
int td_plan_model_preset_config(const char *name, td_gpt_config *cfg);
const char *td_plan_model_presets(void);  /* "gpt2-124m, ..." for messages */
/* A preset's source and where it departs from it ("Brown et al. 2020,
 * table 2.1; ..."); NULL for a name that is no preset. */
const char *td_plan_model_note(const char *name);
/* The presets as a table (name, sizes, source), one per line. */
void td_plan_model_presets_print(void);
/* A published training run of a model preset, which `trident plan`
 * predicts beside its own layouts: the layout as the planner lays it out,
 * the throughput as the source counts it (model FLOPs per second per GPU,
 * Megatron-core's formula: the same count as td_plan_flops at 72 but for
 * the router's C x E). */
typedef struct {
    const char *model, *cluster; /* the presets it ran as */
    int gpus, global_batch;
    td_plan_layout lay;
    double tflops; /* per GPU, published */
    const char *name;   /* short tag: "mcore-0.8" */
    const char *source; /* what, where, which version, the layout's words */
} td_plan_published;
/* The published runs of a model preset: *n of them (0 and NULL: none). */
const td_plan_published *td_plan_published_runs(const char *model, int *n);

/* gpus and gpus_per_node are filled in by the caller. `local` reads the
 * calibration profile: -1 with the reason in err when it is missing. */
int td_plan_cluster_preset(const char *name, td_plan_cluster *c, char *err, size_t errlen);
const char *td_plan_cluster_presets(void);
/* Where --calibrate saves the profile and `local` reads it: $TRIDENT_PROFILE,
 * else $XDG_CACHE_HOME/trident/profile.json, else ~/.cache/trident/profile.json. */
void td_plan_profile_path(char *buf, size_t n);
/* The `local` cluster from a calibration profile (formats_profile.h) for
 * `ranks` processes of `threads` threads each sharing the machine: each
 * rank's share of the GEMM rate and memory bandwidth measured at
 * min(ranks x threads, cores) threads; collectives from the all-reduce fit
 * of the largest group measured up to `ranks`; memory bandwidth by size
 * likewise. */
/* Reads and parses the profile at path: 0, or -1 with the reason in e. */
int td_plan_profile_load(const char *path, td_profile *p, td_err *e);
void td_plan_cluster_local(const td_profile *profile, int ranks, int threads, td_plan_cluster *c);
/* The GEMM rate (FLOP/s) of an M x N x K product on this cluster. */
double td_plan_gemm_rate(const td_plan_cluster *c, double M, double N, double K);
/* Memory bandwidth (bytes/s) of an operation streaming `bytes`. */
double td_plan_mem_rate(const td_plan_cluster *c, double bytes);

/* Parameters and FLOPs per iteration of `batch` sequences (factor 96
 * counts the recomputed forward, 72 does not). gpt2: Megatron-LM eq. 2 and
 * eq. 3 (eq. 2 leaves out the final LayerNorm's 2C, eq. 3 at 72 counts the
 * head's 6 V C per token as 4.5; gpt2's head is always tied).
 * llama: the model's own count (model.h's parameter table, n_global, and
 * td_gpt_flops_per_token at 72, 4/3 of it at 96). */
double td_plan_params(const td_plan_model *m);
double td_plan_flops(const td_plan_model *m, double batch, int factor);
/* MoE: the parameters one token meets (the K routed experts of each MoE
 * block, not E; the router, shared experts, attention, embedding and head
 * in full); td_plan_params for a dense model. td_plan_flops counts these:
 * the K + S experts' GEMMs and the router's C x E. */
double td_plan_params_active(const td_plan_model *m);
/* Bytes one device sends to other ranks per MoE block and micro-batch of b
 * sequences in the forward: its b T / (cp tp) tokens (tp ranks route their
 * sequence-parallel shares), K copies of each, (ep - 1) / ep of them to
 * experts on other ranks (routing uniform on average), C elements of
 * elem_bytes each, once to the experts (dispatch) and once back (combine):
 * 2 (b T / (cp tp)) K (ep - 1) / ep C elem_bytes. The backward sends as
 * many (the gradients, back the same ways). */
double td_plan_a2a_bytes(const td_plan_model *m, int b, int tp, int cp, int ep, double elem_bytes);
/* Activation bytes one layer keeps per micro-batch of b sequences
 * (Korthikanti table 2; full recomputation keeps the layer input). Llama's
 * by the same accounting: no dropout, GQA's narrower k and v, SwiGLU's
 * gate|up and product instead of GeLU's input and output (docs/planner.md). */
double td_plan_layer_act_bytes(const td_plan_model *m, int b, int tp, int sp, int rc);
/* Micro-batch-chunks whose activations a stage holds at once: m (gpipe),
 * min(m, p - stage) (1f1b), Megatron's interleaved warm-up + 1 (capped at
 * m v); 1 without a pipeline. */
int td_plan_inflight(int sched, int p, int m, int v, int stage);
/* The share of a pipeline's bubble (as computed at each rank's share of the
 * cores) that costs time when ranks share cores, `o` threads per core, p
 * stages: 1 for o <= 1, less as the ranks that run take the cores the
 * waiting ones free. */
double td_plan_bubble_shared(int p, double o);
/* Alpha-beta ring collectives over n ranks of `bytes` (the whole tensor). */
double td_plan_allreduce_s(double bytes, int n, double bw, double lat);
double td_plan_allgather_s(double bytes, int n, double bw, double lat); /* = reduce-scatter */
/* Bytes one dp rank sends per step for its psi parameters (2-byte
 * gradients/parameters) over m micro-batches: 2 psi (ZeRO 0, 1), ZeRO-2
 * reduce-scatters every micro-batch, ZeRO-3 also gathers twice per micro-batch
 * (3 psi per micro-batch); times (d-1)/d of a ring. */
double td_plan_dp_volume(double psi, int d, int zero, int m);

/* 0 if the layout is valid for this model, cluster and global batch, else
 * -1 with the reason in why. tp_across_nodes: tp may exceed a node. */
int td_plan_check(const td_plan_model *m, const td_plan_cluster *c, int global_batch, int tp_across_nodes,
                  const td_plan_layout *l, char *why, size_t whylen);
/* Memory and step time of a valid layout: each replica runs micro_batches
 * micro-batches of micro_batch sequences; FLOPs count the global batch. */
void td_plan_evaluate(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                      const td_plan_layout *l, td_plan_eval *e);

/* Choices fixed by flags: 0 (or -1 for sched, rc, sp, zero) means free. */
typedef struct {
    int dp, tp, pp, zero, micro_batches, sched, v, rc, sp;
    int cp;    /* 0: free */
    int shard; /* -1: free (none, or a node's members of dp x cp); 0: none */
    int tp_across_nodes; /* allow tp groups larger than a node (on the inter-node links) */
    int zero3_only; /* tp = pp = 1, zero = 3; dp need not divide the global
                       batch (the busiest replica runs ceil(global / dp)) */
    int ep, etp;    /* MoE: --ep, --moe-etp (0: free) */
} td_plan_fixed;
void td_plan_fixed_init(td_plan_fixed *f);
/* Whether the fixed choices (flags) can be met at all for this model,
 * cluster and global batch, each checked on its own and against the others:
 * 0, or -1 with the first refusal in why, naming the flag, the value, the
 * reason and the values that would be valid. Memory is not considered. */
int td_plan_fixed_check(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                        const td_plan_fixed *fix, char *why, size_t whylen);

typedef struct {
    td_plan_eval *plans; /* fitting plans, fastest first */
    int n;
    long invalid, too_big;
    double smallest_too_big; /* bytes of the smallest layout that did not fit */
    char first_invalid[160];
} td_plan_result;
void td_plan_search(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                    const td_plan_fixed *fix, td_plan_result *r);
void td_plan_result_free(td_plan_result *r);

#ifdef __cplusplus
}
#endif

#endif
