/* train: the training step and loop (schedule + model + parallel + optim),
 * metrics, memory report, evaluation, checkpoint and sample at the end. */
#ifndef TRIDENT_TRAIN_H
#define TRIDENT_TRAIN_H

#include "trident/data.h"
#include "trident/flags.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/pipeline.h"

typedef struct td_layout_pass td_layout_pass; /* layout_pass.h */

/* The choice flags, parsed once (td_train_opts_choices) into what the
 * trainer reads; the strings in td_train_opts stay for what is printed or
 * saved. dp_mode and schedule hold -1 for a name no mode or schedule has:
 * that name is refused where it always was (the run's start; a pipeline's
 * setup, --schedule being unused at --pp 1). */
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
    /* the strings parsed, in the order of td_train_opts_choices: a string
     * changed by hand afterwards without parsing again is a programmer
     * error td_train_run asserts against */
    const char *from[8];
} td_train_choices;

typedef struct {
    /* data */
    const char *data, *tokenizer;
    int vocab;
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
    int save_every;   /* save to --out every K steps as well as at the end (0: the end only) */
    int keep;         /* --keep N: step directories kept under --out after a save (0: all) */
    int stop_after;   /* --stop-after K: end after K steps with a checkpoint (0: run --steps) */
    const char *resume; /* --resume DIR|latest (ckpt.h; latest: --out's newest) */
    /* a resume without --out whose checkpoint is not in a trident output
     * directory it may save into: the error td_preflight refuses it with
     * (after the checkpoint's own checks); NULL: none (run_config.c) */
    const char *resume_needs_out;
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
/* The reverse: the model flags of a finished config (a checkpoint's). */
void td_train_opts_set_model(td_train_opts *o, const td_gpt_config *cfg);
void td_train_opts_check(td_train_opts *o);
/* Parses the choice flags (--precision, --recompute, --schedule,
 * --pp-partition's kind, --dp-mode, --grad-reduce-dtype, --grad-compress,
 * --loss-scale) into o->ch and sets o->fp16; a bad precision, recompute
 * mode, payload or loss scale is a user error naming its flag. Called by
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
/* The model's arithmetic named by --precision (o->ch.precision). */
td_precision td_train_precision(const td_train_opts *o);
/* Runs training; returns the final validation loss (NAN without eval). */
int td_train_main(int argc, char **argv);

/* Results of a run, for tests that drive the trainer in-process. */
#define TD_MAX_PP_REPORT 64

typedef struct {
    int steps_done;
    int stopped_after;    /* > 0: ended early after this many steps (--stop-after, a stop signal) with a checkpoint */
    float *losses;        /* [steps] training loss of each step */
    float *grad_norms;    /* [steps] */
    double final_val_loss;
    double tokens_per_s;  /* mean over steps after the first */
    double mfu;           /* against one core's measured sgemm rate x compute threads */
    double step_ms;
    int max_staleness;
    double mean_staleness;
    double exposed_comm_ms, comm_ms;
    /* data-parallel gradient traffic per step on this rank (mean over the
     * steps), as the comm layer counted it, and fp32's for the same elements */
    double grad_sent_bytes, grad_dense_bytes;
    double gemm_flops, gemm_ms; /* --gemm-stats: per timed step, rank 0's model */
    float *final_params;  /* canonical layout, world rank 0 only (if keep_state) */
    float *final_m, *final_v;
    size_t numel;         /* canonical */
    size_t numel_layout;  /* this layout's padded flat size */
    size_t numel_expert;  /* of it, the expert stacks' under --ep (padding too),
                             which ZeRO shards over edp (td_param_unit_pieces) */
    size_t mem_planned[8], mem_peak[8]; /* this rank, by td_mem_cat */
    /* a run that went wrong: stopped at stop_step (-1: it did not) with
     * stop_msg, nothing saved from that step on; td_train_main exits 3 */
    int stop_step;
    char stop_msg[512];
    /* loss scaling: steps skipped on a non-finite gradient (dynamic), the
     * scale at the end, and the last skip's first non-finite gradient: its
     * table row, the smallest world rank whose own backward produced it and
     * that rank's micro-batch (-1 where unknown, see README) */
    int skipped_steps;
    float loss_scale;
    int skip_row, skip_rank, skip_micro;
    /* the last checkpoint save on this rank: its peak of accounted memory, the
     * plan's total and the bytes of the largest unit it gathered (the bound is
     * plan + one unit) */
    size_t save_peak, save_start, save_plan, save_unit;
    /* tensor parallelism: this rank's tp traffic in the last training step,
     * as the comm layer recorded it, and the formula's (parallel.h) */
    td_tp_traffic tp_measured, tp_formula;
    /* context parallelism: this rank's ring in the last training step (bytes
     * sent, the formula's bytes, chunk pairs computed and skipped by the
     * causal mask) and its wait time per step, averaged over the timed steps */
    uint64_t cp_sent_bytes, cp_formula_bytes, cp_pairs, cp_skipped;
    double cp_wait_ms;
    /* pipeline parallelism: this rank's stage times, summed over the timed
     * steps; the bubble (stage step time - compute) / compute averaged over
     * the stages, and the theory's figure from the measured T_F, T_B, T_W */
    td_pp_stats pp_stats;
    double pp_bubble, pp_bubble_theory;
    double pp_stage_bubble[TD_MAX_PP_REPORT]; /* per stage (the first TD_MAX_PP_REPORT) */
    int stop_saved; /* > 0: the stop (--max-loss) saved a checkpoint after this many steps */
    /* a mixture of experts: the last step's figures, the same on every rank:
     * the aux and z losses (per micro-batch, summed over layers), the load of
     * the busiest and the idlest expert relative to an even share (over
     * experts and layers), the share of assignments dropped (capacity), and
     * the expert-parallel exchange: its bytes sent to other ranks by this
     * rank and the formula's (parallel.h), calls */
    double moe_aux, moe_z, moe_load_min, moe_load_max, moe_dropped;
    double ep_sent_bytes, ep_formula_bytes, ep_uniform_bytes;
    double *moe_load;     /* [L, E] assignments per expert summed over the run (NULL: dense) */
    /* a stop signal before the first step: 1 after the data load, 2 after
     * the model build and the resume (0: none); nothing trained or saved */
    int stopped_startup;
    /* a failed write (--log, --trace) all ranks agreed on; io_msg (rank 0)
     * names the file and the error; td_train_main exits TD_EXIT_IO */
    int io_failed;
    char io_msg[512];
} td_train_result;

/* Collective over the world; td_comm_init must have been called. */
void td_train_run(const td_train_opts *o, td_train_result *res, int keep_state);
void td_train_result_free(td_train_result *r);

/* Forward passes in a run's layout over caller-chosen rows (trident eval).
 * fill writes rows first .. first + count - 1 of a global batch of
 * --batch rows: inputs and targets [count, T]; a target < 0 is ignored
 * (counts nothing). td_layout_pass_forward runs one such global batch
 * (each dp replica its rows, in its micro-batches; a pipeline's first and
 * last stages read them) and returns the sum of the token losses over all
 * of it, the same double on every training rank: each rank's sum is shared
 * exactly (as three floats) and added in rank order, so only the model's
 * own fp32 arithmetic depends on the layout. Collective over the training
 * ranks. */
typedef void (*td_rows_fn)(void *ctx, int first, int count, int T, int *inputs, int *targets);
double td_layout_pass_forward(td_layout_pass *p, td_rows_fn fill, void *ctx);
/* The data td_train_run loaded (--data with its tokenizer), owned by it. */
const td_dataset *td_layout_pass_data(const td_layout_pass *p);
/* This rank's place: world rank, and dp, tp, pp sizes. */
void td_layout_pass_grid(const td_layout_pass *p, int *world_rank, int *dp, int *tp, int *pp);

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


#endif
