/* compat: the one table of combination rules (docs/design.md principle 10).
 *
 * Every "X does not combine with Y" / "X needs Z" rule between choices of a
 * run (layout sizes, dp mode, schedule, payload, precision, checkpoint
 * flags) is a row of src/parallel/compat.c: an id, a predicate over a plain
 * td_compat_cfg and its error text. Option parsing, the trainer's start, the
 * data-parallel setup, the schedule builder, the model's tp checks and the
 * planner's search consult it; tests/unit/test_compat enumerates it and
 * tests/lint/check_rules.py refuses such a message anywhere else.
 *
 * Pure: no MPI, no allocation, base alone. The file lives under
 * src/parallel/ (the layout's home) but is compiled into trident_model, so
 * the planner and the schedules reach it without depending on comm. Its
 * config therefore holds the choices as plain ints (of the enums named
 * beside them) and the names the messages print as text, filled by the
 * caller with the names it prints elsewhere. */
#ifndef TRIDENT_COMPAT_H
#define TRIDENT_COMPAT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --dp-mode (defined here so the table needs no parallel.h). */
typedef enum { TD_DP_ALLREDUCE = 0, TD_DP_REDUCE_BROADCAST = 1, TD_DP_PS = 2 } td_dp_mode;
const char *td_dp_mode_name(td_dp_mode m);

/* Where a row is consulted: each site passes its own bit, and a row names
 * the sites where its facts are known and where it was checked before the
 * table existed (so that a command line breaking one rule fails at the same
 * point, with the same text, as it always did). */
enum {
    TD_COMPAT_AT_OPTIONS = 1 << 0,    /* td_train_opts_check: the flags alone */
    TD_COMPAT_AT_AUTO = 1 << 1,       /* td_auto_choose: --auto against the flags it plans */
    TD_COMPAT_AT_RUN = 1 << 2,        /* td_train_run's start, before the grid */
    TD_COMPAT_AT_DP_CONFIG = 1 << 3,  /* the dp payload, before anything is allocated */
    TD_COMPAT_AT_DP_CREATE = 1 << 4,  /* td_dp_create, with the live grid's sizes */
    TD_COMPAT_AT_SCHEDULE = 1 << 5,   /* td_schedule_build */
    TD_COMPAT_AT_MODEL_TP = 1 << 6,   /* td_gpt_check_tp: tp against the model's shape */
    TD_COMPAT_AT_MODEL_DIMS = 1 << 7, /* td_gpt_dims_of: a rank's activation rows */
    TD_COMPAT_AT_PP_SPLIT = 1 << 8,   /* td_pp_split_parse: --pp-partition's counts */
    TD_COMPAT_AT_CKPT_LOAD = 1 << 9,  /* td_ckpt_resume: a dp mode without ranges to load */
    TD_COMPAT_AT_PREFLIGHT = 1 << 10, /* td_preflight: the data loaded, before the model */
    TD_COMPAT_AT_GRID = 1 << 11,      /* right after td_grid_create, with its sizes */
    TD_COMPAT_AT_MODEL_CONFIG = 1 << 12, /* td_gpt_config_finish: the model family's flags */
    TD_COMPAT_AT_PLAN = 1 << 13,      /* the planner's search alone: its cost model's assumptions */
    TD_COMPAT_AT_ANY = 0x3fff         /* every row (the planner, the tests) */
};

/* The rows, in the table's order (which is the order in which each site
 * checked them before). */
typedef enum {
    TD_RULE_AUTO_FIXED,
    TD_RULE_SAVE_EVERY_OUT,
    TD_RULE_KEEP_OUT,
    TD_RULE_STOP_AFTER_OUT,
    TD_RULE_OVERWRITE_OUT,
    TD_RULE_OVERWRITE_RESUME,
    TD_RULE_RESUME_LATEST_OUT,
    TD_RULE_RECOMPUTE_ZBH1,
    TD_RULE_TOPK_TP_PP,
    TD_RULE_AUTO_DP_MODE,
    TD_RULE_PS_SERVERS_MODE,
    TD_RULE_PS_NEEDS_SERVERS,
    TD_RULE_PS_TP,
    TD_RULE_ZERO_PP,
    TD_RULE_PS_PP,
    TD_RULE_ZERO_MODE,
    TD_RULE_LOSS_SCALE_PS,
    TD_RULE_LOSS_SCALE_TOPK_EF,
    TD_RULE_PS_CHECKPOINT,
    TD_RULE_TOPK_BF16,
    TD_RULE_PAYLOAD_MODE,
    TD_RULE_PAYLOAD_ZERO,
    TD_RULE_CHUNKS_NEED_INTERLEAVED,
    TD_RULE_INTERLEAVED_CHUNKS,
    TD_RULE_INTERLEAVED_MICRO,
    TD_RULE_INTERLEAVED_EQUAL_CHUNKS,
    TD_RULE_SP_TP,
    TD_RULE_SP_SEQ,
    TD_RULE_LOWP_TP_ROWS,
    TD_RULE_CP_SEQ,
    TD_RULE_CP_PS,
    TD_RULE_CP_TOPK,
    TD_RULE_SAMPLE_PROMPT_IDS,
    TD_RULE_DP_SHARD_ZERO,
    TD_RULE_DP_SHARD_PAYLOAD,
    TD_RULE_DP_SHARD_DIVIDES,
    TD_RULE_ARCH_FLAGS,
    TD_RULE_MOE_FLAGS,
    TD_RULE_EP_MOE,
    TD_RULE_EP_EXPERTS,
    TD_RULE_ETP_TP,
    TD_RULE_EP_GRID,
    TD_RULE_MOE_TP_SP,
    TD_RULE_MOE_ETP,
    TD_RULE_MOE_CAPACITY_CP,
    TD_RULE_EP_PS,
    TD_RULE_MOE_BIAS_PS,
    TD_RULE_EP_PAYLOAD,
    TD_RULE_EP_DP_SHARD,
    TD_RULE_EP_DIVIDES,
    TD_RULE_TOPK_DEVICE, /* issue 39: what a device other than cpu does not run yet */
    TD_RULE_RAMPUP_LAYOUT,  /* issue 42: --batch-rampup's layouts */
    TD_RULE_RAMPUP_DIVIDES, /* every ramp size splits into whole micro-batches */
    TD_RULE_RAMPUP_INTERLEAVED, /* and, interleaved, into a multiple of pp of them */
    TD_RULE_MUON_LAYOUT,    /* issue 42: --optimizer muon's layouts */
    TD_RULE_MUON_DEVICE,    /* the CUDA backend has no Muon ops */
    TD_RULE_DOC_POSITIONS_MASK,    /* --doc-positions reset needs --doc-mask */
    TD_RULE_N
} td_rule_id;

/* What the rules read. td_compat_cfg_init fills a config that breaks no
 * row (one process, fp32, no checkpoint flags); a caller sets what it
 * knows. */
typedef struct {
    /* layout */
    int dp, tp, pp, zero, seq_parallel;
    int cp;             /* --cp: each sequence split over cp ranks */
    int dp_shard;       /* --dp-shard: ZeRO's shard size under hybrid sharding; 0 none */
    int ps_servers;     /* --ps-servers, or the grid's servers */
    int dp_mode;        /* td_dp_mode; -1: a name no mode has */
    int schedule;       /* td_sched_kind; -1: none (the planner's pp 1) */
    int virtual_stages; /* model chunks per stage */
    int micro_batches;  /* --grad-accum / --micro-batches */
    int recompute;      /* td_recompute: 0 none, else block */
    int precision;      /* td_precision: 0 fp32, 1 bf16, 2 fp16 */
    /* model shape: the sequence, the channels and a rank's activation
     * rows (micro-batch x sequence, divided by tp under sequence parallelism) */
    int seq, embd, rows;
    /* the gradient payload and loss scaling */
    int grad_bf16;       /* --grad-reduce-dtype bf16 */
    double topk_ratio;   /* --grad-compress topk:R; 0: none */
    int topk_no_ef;      /* topk's :noef */
    int loss_scale_mode; /* td_loss_scale_mode: 0 none, 1 static, 2 dynamic */
    /* the run and its checkpoints */
    int autoplan, out, save_every, keep, stop_after, overwrite;
    int unequal_chunks; /* --pp-partition's counts are not all equal */
    /* the data: --sample-prompt given, and --data holds token ids (no text
     * tokenizer) */
    int sample_prompt, data_token_ids;
    const char *resume; /* --resume's text; NULL: none */
    /* the names the messages print, as the user gave them (NULL prints ?) */
    const char *dp_mode_text, *schedule_name, *recompute_name, *precision_name;
    const char *grad_compress_text, *loss_scale_text, *loss_scale_name, *pp_partition_text;
    const char *data_text; /* --data */
    /* the model family: the first flag of the Llama family given to a gpt2
     * model ("--kv-heads 2"), NULL: none */
    const char *llama_flag_text;
    /* mixture of experts: --moe-experts (0: a dense model), --ep, --moe-etp
     * (1: none), and the first other MoE flag given to a dense model
     * ("--moe-top-k 2"), NULL: none */
    int experts, ep, etp;
    const char *moe_flag_text;
    int moe_capacity, moe_bias; /* --moe-capacity, --moe-bias-balance given (> 0) */
    /* --device: a td_device (backend.h: 0 cpu, 1 guard, 2 cuda) and its
     * name, for the rows that say what a device other than cpu does not do */
    int device;
    const char *device_name;
    /* --batch and --batch-rampup's START and INCREMENT (start 0: off) */
    int batch, rampup_start, rampup_increment;
    const char *rampup_text;
    /* --optimizer: td_optimizer (0 adamw, 1 muon) */
    int optimizer;
    int doc_mask;      /* --doc-mask */
    int eod_mask_loss; /* --eod-mask-loss */
    int doc_pos_reset; /* --doc-positions reset */
} td_compat_cfg;

typedef struct {
    td_rule_id id;
    const char *name; /* short id: "recompute-zbh1" */
    unsigned sites;   /* TD_COMPAT_AT_* bits */
    int (*ok)(const td_compat_cfg *c);
    /* the error text (the message a refused run prints after "trident: error: ") */
    void (*say)(const td_compat_cfg *c, char *buf, size_t n);
    /* the planner's wording of the rule (its layouts, not flags); NULL where
     * the planner's search never meets the rule */
    void (*brief)(const td_compat_cfg *c, char *buf, size_t n);
} td_compat_rule;

void td_compat_cfg_init(td_compat_cfg *c);
/* The table: TD_RULE_N rows, row i has id i. */
const td_compat_rule *td_compat_rules(void);
/* The first row consulted at `sites` that c breaks (its id), its text in
 * why[0..n) (why may be NULL); -1 when c breaks none. */
int td_compat_first(const td_compat_cfg *c, unsigned sites, char *why, size_t n);
/* Yes/no for a search: 1 when c breaks no row consulted at `sites`. */
int td_compat_ok(const td_compat_cfg *c, unsigned sites);
/* The first broken row at `site` is a user error (td_fail: its text, exit
 * TD_EXIT_USAGE); returns when none is broken. */
void td_compat_check(const td_compat_cfg *c, unsigned site);
/* One row: 1 when c keeps it; else 0, with the planner's wording (the
 * error text where the row has none) in why[0..n). */
int td_compat_rule_ok(td_rule_id id, const td_compat_cfg *c, char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
