/* run_spec: what one training run is, as src/run consumes it, and what it
 * returns. src/train builds the spec once from the command line's flags
 * (and, on --resume, the checkpoint's manifest: run_config.c) and hands it
 * to td_run_train; nothing in src/run reads a flag. Every choice is parsed
 * here (enums, numbers); strings are only paths and names to print or save.
 * The spec is borrowed by the run for its whole length; its strings live as
 * long as the caller's flags. */
#ifndef TRIDENT_RUN_SPEC_H
#define TRIDENT_RUN_SPEC_H

#include "trident/backend.h"
#include "trident/compat.h"
#include "trident/data.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/optim.h"
#include "trident/pipeline.h"
#include "trident/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_layout_pass td_layout_pass; /* src/run/layout_pass.h */

typedef struct {
    /* the model, every field but the vocabulary V (the data's, set by the
     * run, which then finishes the config: td_gpt_config_finish) */
    td_gpt_config cfg;
    const char *preset; /* --model PRESET, for the note when its vocabulary is not the data's; NULL: none */
} td_run_model;

typedef struct {
    int dp, tp, pp, cp, ep; /* dp 0: the ranks left over (grid.h) */
    int dp_shard;           /* ZeRO's shard size under hybrid sharding; 0: all of dp x cp */
    int zero, seq_parallel;
    int ps_servers, ps_staleness;
    const char *grid_order;  /* the axes fastest first, as grid.h parses it */
    td_dp_mode dp_mode;
    int pp_schedule;         /* td_sched_kind; -1: a name no schedule has, refused by a pipeline's setup */
    const char *pp_schedule_name; /* as given, for that refusal */
    int virtual_stages;
    int pp_partition_auto;   /* blocks per stage from measured costs */
    const char *pp_partition; /* else "uniform" or counts a,b,c, parsed with the layer count (pipeline.h) */
    int grad_dtype;          /* the gradient reduction's payload: TD_F32 or TD_BF16 */
    double topk_ratio;       /* top-k compression's share (0: none), :noef, :grad */
    int topk_no_ef, topk_grad;
    const char *grad_compress; /* its name as given ("none", "topk:0.1"), printed and saved */
    double bucket_mb, piece_mb; /* 0: measured defaults */
    double comm_timeout, heartbeat_timeout;
    int no_overlap;
    int threads; /* compute threads per rank; 0: cores / ranks on the node */
    td_device device; /* the backend of the step's tensors and ops (backend.h); 0: cpu */
} td_run_layout;

typedef struct {
    td_precision precision;
    td_recompute recompute;
    td_loss_scale_mode loss_scale;
    float loss_scale_static;  /* a static scale's value, else 1 */
    float loss_scale_init;    /* dynamic's starting scale; 0: 2^16 */
    int loss_scale_window;    /* clean steps before it doubles; 0: TRIDENT_LOSS_SCALE_WINDOW or 1000 */
    const char *loss_scale_text; /* as given ("auto", "dynamic", "1024"), printed */
    int gemm_stats;
} td_run_precision;

typedef struct {
    int steps;      /* the step to stop at (the lr schedule's horizon is optim.max_steps) */
    int batch, grad_accum; /* global sequences per step; micro-batches per replica */
    int eval_every, eval_iters, log_every;
    unsigned long long seed;
    int stop_after; /* end after this many steps with a checkpoint; 0: run to steps */
    float max_loss; /* stop when the loss stays above it; 0: off */
    int timing_skip; /* leading steps left out of the mean step time */
    td_batch_rampup rampup; /* --batch-rampup (start 0: off): the batch of each step, td_batch_at */
} td_run_schedule;

typedef struct {
    const char *path;      /* --data */
    const char *tokenizer; /* a tokenizer's name or tokenizer.json path; NULL: the data's default */
    int vocab;             /* a token file's vocabulary; -1: its max id + 1 */
    int strict;            /* resuming onto other data is an error, not a note */
    /* path NULL: the run reads no data, and this is its tokenizer
     * (td_data_of_tokenizer; eval --task without --data) */
    const td_tokenizer *tokenizer_only;
    int doc_mask;          /* --doc-mask: attention stays within documents */
    int eod;               /* --eod: the end-of-text id; -1: the tokenizer's */
    int eod_mask_loss;     /* --eod-mask-loss: no loss on end-of-text targets */
    int doc_pos_reset;     /* --doc-positions reset: positions restart at each document */
} td_run_data;

/* The end-of-text id a document-masked run splits documents at (and
 * --eod-mask-loss drops the targets of): --eod, or the tokenizer's
 * <|endoftext|>; -1 without either flag. A tokenizer without one (char,
 * byte) needs --eod: one clear error line otherwise. */
int td_run_doc_eod(const td_run_data *d, const td_tokenizer *tok);

typedef struct {
    const char *out;      /* the checkpoint directory; NULL: nothing saved */
    const char *resume;   /* the checkpoint resumed (a directory, or "latest": out's newest); NULL: none */
    const char *resume_needs_out; /* a resume that may not save where it came from: the error (NULL: none) */
    int save_every, keep, overwrite;
    const char *log, *trace; /* JSON-lines metrics, Chrome trace; NULL: none */
    const char *tensorboard; /* the directory of a TensorBoard event file; NULL: none */
    const char *run_config;  /* the effective flags as JSON (manifests, log, the start line); NULL: none */
    int memory_report, verbose, quiet;
    int note_unsaved; /* say at the start that nothing will be saved (train without --out) */
    const char *notes; /* lines printed at the start, after the config line; NULL: none */
    int sample_tokens;
    const char *sample_prompt;
} td_run_output;

typedef struct {
    /* trident eval: with a resume, called once after the checkpoint is
     * loaded into the layout, instead of training (nothing saved); NULL: train */
    void (*layout_pass)(void *ctx, td_layout_pass *p);
    void *layout_pass_ctx;
    /* trident verify: called at the start of every step attempt (a step
     * that dynamic loss scaling skips is attempted again) with the whole
     * state (parameters, AdamW m and v) in the canonical layout on world
     * rank 0, NULL elsewhere, and this rank's data-parallel replica.
     * Collective over the training ranks: not with parameter servers.
     * NULL: none */
    void (*step_state)(void *ctx, int step, int dp_rank, const float *params, const float *m, const float *v);
    void *step_state_ctx;
} td_run_hooks;

typedef struct {
    td_run_model model;
    td_run_layout layout;
    td_run_precision precision;
    td_run_schedule schedule;
    td_optim_config optim;
    td_run_data data;
    td_run_output output;
    td_run_hooks hooks;
    /* the rules table's config of the run (compat.h): the run checks its
     * rows at start and again once the grid is known */
    td_compat_cfg compat;
} td_run_spec;

/* Results of a run, for the commands and tests that drive it in-process. */
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
    /* the same split by where the bytes live (td_mem_plan): device memory
     * (each buffer as the device rounds it) and host memory; on --device
     * cpu the device side is 0 and the host side the whole */
    size_t mem_planned_device[8], mem_planned_host[8], mem_peak_device[8], mem_peak_host[8];
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
    /* --optimizer muon: the last step's matrix gather and scatter (td_muon_traffic) */
    uint64_t muon_sent_bytes, muon_formula_bytes;
    double cp_wait_ms;
    /* this rank's host traffic in the last training step (backend.h: the
     * named copies between host and device memory, by purpose) */
    td_host_traffic host_traffic;
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
} td_run_result;

/* Trains the run the spec describes: opens it (data, grid, model, resume),
 * runs its steps with evaluation and checkpoints, and closes it (summary,
 * last save, sample). keep_state: the whole state into res (tests).
 * Collective over the world; td_comm_init must have been called. Bad
 * values are user errors (one line, exit 2) at the point the run meets
 * them. */
void td_run_train(const td_run_spec *spec, td_run_result *res, int keep_state);
void td_run_result_free(td_run_result *r);

/* Forward passes in a run's layout over caller-chosen rows (trident eval).
 * fill writes rows first .. first + count - 1 of a global batch of
 * batch rows: inputs and targets [count, T]; a target < 0 is ignored
 * (counts nothing). td_layout_pass_forward runs one such global batch
 * (each dp replica its rows, in its micro-batches; a pipeline's first and
 * last stages read them) and returns the sum of the token losses over all
 * of it, the same double on every training rank: each rank's sum is shared
 * exactly (as three floats) and added in rank order, so only the model's
 * own fp32 arithmetic depends on the layout. Collective over the training
 * ranks. */
typedef void (*td_rows_fn)(void *ctx, int first, int count, int T, int *inputs, int *targets);
double td_layout_pass_forward(td_layout_pass *p, td_rows_fn fill, void *ctx);
/* The same, and row_loss[td_layout_pass_rows] receives each row's sum of
 * token losses (its ignored targets count 0), the same doubles on every
 * training rank: a row's partial sums (a cp rank's chunks, the stage that
 * holds the head) are shared exactly and added in rank order. A pipeline
 * then runs its micro-batches one td_pp_forward_only call each, reading
 * the head's losses after each (trident eval --task). */
double td_layout_pass_forward_rows(td_layout_pass *p, td_rows_fn fill, void *ctx, double *row_loss);
/* The rows of one global batch: dp x rows per replica. */
int td_layout_pass_rows(const td_layout_pass *p);
/* The data the run loaded (its path with its tokenizer), owned by it. */
const td_dataset *td_layout_pass_data(const td_layout_pass *p);
/* This rank's place: world rank, and dp, tp, pp sizes. */
void td_layout_pass_grid(const td_layout_pass *p, int *world_rank, int *dp, int *tp, int *pp);

#ifdef __cplusplus
}
#endif

#endif
