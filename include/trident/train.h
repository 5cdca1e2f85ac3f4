/* train: the training step and loop (schedule + model + parallel + optim),
 * metrics, memory report, evaluation, checkpoint and sample at the end. */
#ifndef TRIDENT_TRAIN_H
#define TRIDENT_TRAIN_H

#include "trident/data.h"
#include "trident/flags.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/pipeline.h"
#include "trident/run_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The choice flags, parsed once (td_train_opts_choices) into what the
 * trainer reads; the strings in td_train_opts stay for what is printed or
 * saved. dp_mode and schedule hold -1 for a name no mode or schedule has:
 * that name is refused where it always was (the run's start; a pipeline's
 * setup, --schedule being unused at --pp 1). */
#define TD_TRAIN_CHOICES 17 /* the choice strings td_train_choices parses */
typedef struct {
    td_precision precision;
    td_recompute recompute;
    int schedule;          /* td_sched_kind, or -1 */
    int pp_partition_auto; /* --pp-partition auto (else uniform or counts, parsed with the layer count) */
    int dp_mode;           /* td_dp_mode, or -1 */
    int grad_dtype;        /* --grad-reduce-dtype: TD_F32 or TD_BF16 */
    double topk_ratio;     /* --grad-compress topk:R (0: none), :noef, :grad */
    int topk_no_ef, topk_grad;
    td_loss_scale_mode loss_scale; /* --loss-scale, auto resolved by --precision */
    float loss_scale_static;       /* the scale of a static --loss-scale S, else 1 */
    /* the model family's: --arch, --tie-embeddings, --moe-router and
     * --moe-norm-topk (TD_TIE_* values; TD_TIE_DEFAULT: the family's, on
     * for top-k >= 2) */
    td_arch arch;
    int tie, moe_router, moe_norm_topk;
    int doc_pos_reset; /* --doc-positions reset (else continue) */
    /* the strings parsed, in the order of td_train_opts_choices: a string
     * changed by hand afterwards without parsing again is a programmer
     * error td_train_run asserts against */
    td_batch_rampup rampup; /* --batch-rampup (start 0: off) */
    const char *from[TD_TRAIN_CHOICES];
} td_train_choices;

typedef struct {
    /* data */
    const char *data, *tokenizer;
    int vocab;
    /* document masking (docs/recipe-doc-mask.md): --doc-mask, --eod ID
     * (-1: the tokenizer's end-of-text) */
    int doc_mask, eod;
    int eod_mask_loss; /* --eod-mask-loss: no loss on end-of-text targets */
    const char *doc_positions; /* --doc-positions continue|reset (NULL: continue) */
    /* model */
    const char *model; /* --model PRESET (the planner's): the model flags not
                          given are its; NULL: none */
    int layers, heads, embd, seq;
    const char *arch;           /* --arch gpt2|llama */
    int kv_heads, ffn_hidden;   /* 0: the family's default */
    float norm_eps;             /* 0: the family's default */
    double rope_theta;          /* 0: the family's default */
    const char *tie_embeddings; /* --tie-embeddings on|off; NULL: the family's default */
    td_rope_scaling rope_scaling; /* no flag: a resumed (imported) checkpoint's */
    td_moe_config moe;          /* --moe-*: E = 0 dense (model.h) */
    const char *moe_router, *moe_norm_topk; /* softmax|sigmoid, on|off (NULL: K >= 2) */
    /* batch and schedule */
    int batch, grad_accum, steps;
    /* --schedule-steps: the learning rate schedule's horizon (its cosine
     * ends at min_lr there); 0: --steps. A resume keeps the checkpoint's
     * (run_config.c), so --steps alone moves only the step to stop at */
    int schedule_steps;
    /* --lr-schedule, --lr-decay-shape: parsed into optim.schedule and
     * optim.decay_shape by td_train_opts_choices */
    const char *lr_schedule, *lr_decay_shape;
    const char *optimizer; /* --optimizer adamw|muon: parsed into optim.optimizer */
    const char *batch_rampup; /* --batch-rampup START:INCREMENT:SAMPLES; NULL: off */
    td_optim_config optim;
    int eval_every, eval_iters, log_every;
    unsigned long long seed;
    int threads;
    /* layout */
    int dp, tp, pp, ps_servers, ps_staleness, zero;
    const char *grid_order; /* --grid-order: the axes fastest first (grid.h) */
    int seq_parallel; /* --sequence-parallel */
    int cp;           /* --cp: context-parallel size (each sequence over cp ranks) */
    int ep;           /* --ep: expert-parallel size (the experts over ep ranks of dp) */
    int moe_etp;      /* --moe-etp: 1 (experts replicated over tp) */
    int dp_shard;     /* --dp-shard: ZeRO's shard size (hybrid sharding); 0 = all of dp x cp */
    const char *recompute; /* --recompute none|block (td_train_recompute) */
    const char *precision; /* --precision fp32|bf16 (td_train_precision) */
    const char *device;    /* --device cpu|guard|cuda (backend.h); NULL: cpu */
    int gemm_stats;        /* --gemm-stats */
    /* pipeline parallelism: --schedule, --virtual-stages, --pp-partition;
     * its micro-batches are --grad-accum's (alias --micro-batches) */
    const char *schedule, *pp_partition;
    int virtual_stages;
    const char *dp_mode;
    double bucket_mb, comm_timeout, piece_mb;
    double heartbeat_timeout; /* seconds of silence before a rank is taken for failed (comm.h) */
    const char *grad_reduce_dtype, *grad_compress; /* fp32|bf16, none|topk:R[:noef] */
    int no_overlap;
    /* --loss-scale auto|dynamic|none|S (loss_scale.h); auto is dynamic when
     * fp16 is set (by --precision fp16), none otherwise. loss_scale_init:
     * dynamic's starting scale, 0 = 2^16; loss_scale_window: clean steps
     * before it doubles, 0 = TRIDENT_LOSS_SCALE_WINDOW or 1000 (both for
     * tests driving the trainer in-process) */
    const char *loss_scale;
    int fp16;
    float loss_scale_init;
    int loss_scale_window;
    /* output */
    const char *out, *log;
    const char *trace; /* --trace: Chrome trace-event JSON of the run (NULL: none) */
    const char *tensorboard; /* --tensorboard DIR: a TensorBoard event file there (NULL: none) */
    int save_every;   /* save to --out every K steps as well as at the end (0: the end only) */
    int keep;         /* --keep N: step directories kept under --out after a save (0: all) */
    int stop_after;   /* --stop-after K: end after K steps with a checkpoint (0: run --steps) */
    const char *resume; /* --resume DIR|latest (ckpt.h; latest: --out's newest) */
    /* a resume without --out whose checkpoint is not in a trident output
     * directory it may save into: the error td_preflight refuses it with
     * (after the checkpoint's own checks); NULL: none (run_config.c) */
    const char *resume_needs_out;
    /* the lines a resume prints at the start: where it saves, each flag
     * that changes the checkpoint's value (run_config.c); NULL: none */
    const char *resume_notes;
    int memory_report, verbose, sample_tokens;
    const char *sample_prompt;
    int timing_skip;  /* leading steps left out of the mean step time (1) */
    int quiet;        /* no step lines (benchmarks) */
    int autoplan;     /* --auto: the layout from the calibrated planner (auto.h) */
    /* trident eval (eval.c): with --resume, td_train_run calls layout_pass
     * once, after loading the checkpoint into the layout, instead of
     * training (no step is run, nothing saved); NULL: train */
    void (*layout_pass)(void *ctx, td_layout_pass *p);
    void *layout_pass_ctx;
    /* with layout_pass and no data: the run reads none and this is its
     * tokenizer (eval --task without --data: the checkpoint's) */
    const td_tokenizer *tokenizer_only;
    /* trident verify (verify.c): called at the start of every step attempt
     * (a step that dynamic loss scaling skips is attempted again) with the
     * whole state (parameters, AdamW m and v) in the canonical layout on
     * world rank 0, NULL elsewhere, and this rank's data-parallel replica
     * (the rows it reads). Collective over the training ranks: not with
     * parameter servers (td_train_run asserts). NULL: none */
    void (*step_state)(void *ctx, int step, int dp_rank, const float *params, const float *m, const float *v);
    void *step_state_ctx;
    int strict_data;  /* --strict-data: resuming onto other data is an error, not a note */
    /* the effective flag values (after --config, the command line, a
     * resume's checkpoint and the defaults) as one line of JSON: printed at
     * the start, in the --log start object and every manifest's run_config
     * (docs/config.md); td_train_opts_parse's (td_flags_json: lives until
     * exit), NULL when the options were filled in by hand */
    char *run_config;
    int print_config; /* --print-config: print run_config and exit 0 */
    float max_loss;   /* --max-loss X: stop when the loss stays above X (divergence.h); 0: off */
    int overwrite;    /* --overwrite: a new run replaces --out's checkpoints */
    td_train_choices ch; /* the choice flags above, parsed */
} td_train_opts;

void td_train_opts_default(td_train_opts *o);
/* Parses `trident train` flags (argv after the subcommand); an unknown flag
 * or a bad value is one clear error. */
void td_train_opts_parse(td_train_opts *o, int argc, char **argv);
/* For commands that take some of train's flags (trident eval): train's
 * flag table, its pointers into o, copied into out[0..cap); returns the
 * count. td_train_opts_check: the checks td_train_opts_parse makes after
 * parsing (flags relating to each other; one clear error each). */
#define TD_TRAIN_MAX_FLAGS 128
int td_train_flag_table(td_train_opts *o, td_flag *out, int cap);
/* The model of these options over a vocabulary of V (the data's),
 * finished (td_gpt_config_finish): one clear error for a bad flag. */
void td_train_model_config(const td_train_opts *o, int V, td_gpt_config *cfg);
/* The same, not finished and without the vocabulary (V 0): the flags'
 * choices parsed (an unknown --arch, --tie-embeddings, --moe-router or
 * --moe-norm-topk is one clear error), the shape checks left to
 * td_gpt_config_finish. */
void td_train_model_fields(const td_train_opts *o, td_gpt_config *cfg);
/* The reverse: the model flags of a finished config (a checkpoint's). */
void td_train_opts_set_model(td_train_opts *o, const td_gpt_config *cfg);
void td_train_opts_check(td_train_opts *o);
/* Parses the choice flags (--precision, --recompute, --schedule,
 * --pp-partition's kind, --dp-mode, --grad-reduce-dtype, --grad-compress,
 * --loss-scale, --arch, --tie-embeddings, --moe-router, --moe-norm-topk)
 * into o->ch and sets o->fp16; a bad precision, recompute mode, payload,
 * loss scale or model family choice is a user error naming its flag. Called by
 * td_train_opts_default and td_train_opts_check; call it again after
 * setting one of those strings by hand. */
void td_train_opts_choices(td_train_opts *o);
/* The rules table's config (compat.h) of o: its layout flags, parsed
 * choices, checkpoint flags and the names its messages print. */
void td_train_compat_cfg(const td_train_opts *o, td_compat_cfg *c);
/* Whether o->ch was parsed from the strings o holds now. */
int td_train_choices_current(const td_train_opts *o);
/* --dp-mode's and --schedule's parsed values: a name that is neither is a
 * user error here (td_dp_mode_parse's, td_sched_parse's text). */
td_dp_mode td_train_dp_mode(const td_train_opts *o);
td_sched_kind td_train_schedule(const td_train_opts *o);
/* --print-config: run_config on stdout from world rank 0 (every rank
 * returns 0, to finalize MPI as a run does). */
int td_train_print_config(const td_train_opts *o);
/* The model's recomputation mode named by --recompute (o->ch.recompute). */
td_recompute td_train_recompute(const td_train_opts *o);
/* The backend named by --device (NULL: cpu); a bad name, or cuda in this
 * build, is one error line (td_fail). */
td_device td_train_device(const td_train_opts *o);
/* The model's arithmetic named by --precision (o->ch.precision). */
td_precision td_train_precision(const td_train_opts *o);
/* Runs training; returns the final validation loss (NAN without eval). */
int td_train_main(int argc, char **argv);

/* Results of a run (run_spec.h), for the commands and tests that drive the
 * trainer in-process. */
typedef td_run_result td_train_result;

/* The run these options describe (run_spec.h), built once: the model
 * config (its vocabulary left to the data), the parsed choices, the layout,
 * schedule, optimizer, data and output. A bad model flag or a name no
 * dp mode has is one clear error here; the compat rows of the run's start
 * are the run's. o->ch must be current (td_train_opts_choices). */
void td_train_spec(const td_train_opts *o, td_run_spec *spec);
/* td_train_spec, then the run (td_run_train). Collective over the world;
 * td_comm_init must have been called. */
void td_train_run(const td_train_opts *o, td_train_result *res, int keep_state);
void td_train_result_free(td_train_result *r);

/* `trident eval` (eval.c): a checkpoint's loss over consecutive windows of
 * a split of --data, in any layout. Collective over the world. */
int td_eval_main(int argc, char **argv);
/* `trident verify` (verify.c): the layout against one process. */
int td_verify_main(int argc, char **argv);
/* `trident plan --calibrate` (calibrate.c): measures this machine for the
 * planner's `local` cluster; collective over the world. */
int td_calibrate_main(int argc, char **argv);
/* `trident bench train|sgemm`. */
int td_bench_main(int argc, char **argv);
/* `trident --version` / `trident version` (version.c): the version, the git
 * commit of the build and the libraries' versions, on stdout; needs no MPI
 * start-up; returns 0. */
int td_version_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
