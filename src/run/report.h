/* Progress output of a training run: stdout lines (rank 0), the JSON-lines
 * log, the memory report (plan beside measurement, per rank). */
#ifndef TRIDENT_REPORT_H
#define TRIDENT_REPORT_H

#include <stdio.h>

#include "preflight.h"
#include "tensorboard.h"
#include "trident/data.h"
#include "trident/grid.h"
#include "trident/run_spec.h"

typedef struct {
    const td_run_spec *spec;
    const td_grid *g;
    const td_gpt_config *cfg;
    FILE *log;            /* --log, rank 0 */
    double flops_per_step;
    double peak_flops;    /* one core's measured sgemm rate x compute threads */
    double peak_gflops;   /* one core's measured sgemm rate (best rank) */
    int Bm;
    td_preflight_result baseline; /* resident set and allocator before the model */
    size_t planned_total;         /* this rank's plan, all categories */
    float loss_scale;             /* the step's loss scale, 0: no loss scaling (not logged) */
    int step_batch;               /* the step's global batch under --batch-rampup, 0: none (not logged) */
    td_host_traffic traffic;      /* the step's host traffic (--log's "host_traffic") */
    double t_first_ms;            /* td_now_ms() when this run's first reported step began */
    int first_step;               /* that step (a resumed run starts past 0); -1 before it */
    int log_err;                  /* rank 0: the errno of the first failed --log write, 0: none */
    const td_run_result *moe;   /* a mixture of experts' step figures (res->moe_*); NULL: dense */
    const td_dataset *data;     /* the run's data (a blend's tokens per source are reported) */
    td_tensorboard *tb;         /* --tensorboard, rank 0; NULL: none (or closed) */
    int tb_err;                 /* rank 0: the errno of its first failed write once closed, 0: none */
    char tb_file[4096];         /* rank 0: its event file (for that error) */
    int last_step;              /* the last step reported; -1: none yet */
} td_report;

void td_report_open(td_report *r, const td_run_spec *spec, const td_grid *g,
                    const td_gpt_config *cfg, const td_param_table *t, const td_dataset *d,
                    int threads, int Bm);
/* Collective over the world. measured = 0: the plan at start; 1: plan
 * beside measured peak after the first step. */
void td_report_memory(td_report *r, const td_mem_plan *plan, int measured);
/* One finished step (rank 0 prints and logs; every rank may call): the step
 * line ends with the time since this run's first step began and an ETA to
 * the last step (--steps, or --stop-after when it comes first) at this run's
 * mean pace so far, evaluations and saves included; the log's step object
 * carries them as elapsed_s and eta_s. */
void td_report_step(td_report *r, int step, float loss, float lr, double norm, double ms);
/* A step skipped on a non-finite gradient (dynamic loss scaling): `where`
 * names the first non-finite gradient; its row, rank and micro-batch and
 * the steps skipped so far are res's (skip_*, skipped_steps); the scale
 * before and after. */
void td_report_skip(td_report *r, int step, const char *where, const td_run_result *res,
                    float scale_before, float scale_after);
void td_report_eval(td_report *r, int step, double val_loss);
void td_report_summary(td_report *r, const td_run_result *res);
void td_report_sample(td_report *r, const td_param_table *canon, const float *params,
                      const td_tokenizer *tok, const td_run_spec *spec);
/* Collective over the world: first the resident-set report (each rank's
 * high-water mark beside its baseline, its plan and the allocator's peak;
 * on stdout and in the --log), then the log is closed. Call it last, after
 * the checkpoint and the sample, so the high-water mark covers them. */
void td_report_close(td_report *r);
/* A blend's training tokens drawn per source over the first `steps` steps
 * (report_data.c): the log's ', "data_tokens": {PATH: N, ...}' (nothing for
 * one source), and the summary's line. */
void td_report_data_tokens_json(const td_report *r, int steps, FILE *f);
void td_report_data_tokens_line(const td_report *r, int steps);
/* Rank 0: the errno of the first --log or --tensorboard write, flush or
 * close that failed (0: none; every other rank: 0). After a failure nothing
 * more is written to that file. */
int td_report_log_error(const td_report *r);
/* That failure as the run's error sentence ("--log FILE: writing it
 * failed: ..."); empty when none. */
void td_report_io_msg(const td_report *r, char *msg, size_t cap);
/* A resumed run (rank 0): the --tensorboard file's SessionLog START at the
 * first step this run trains (nothing without --resume or --tensorboard). */
void td_report_resumed(td_report *r, int step);

/* report_tb.c: the report's values under TensorBoard's tags, rank 0 (each
 * does nothing without --tensorboard). */
void td_report_tb_open(td_report *r); /* exits with one line when DIR cannot hold the file */
void td_report_tb_step(td_report *r, int step, float loss, float lr, double norm, double ms, double tps,
                       double mfu);
/* One event of n scalars at step. */
void td_report_tb_scalars(td_report *r, int step, int n, const char *const *tags, const double *values);
/* The measured memory: peaks[rank][category] of W ranks, the busiest rank's
 * peak of each category at the last step reported. */
void td_report_tb_memory(td_report *r, const uint64_t *peaks, int W);
void td_report_tb_close(td_report *r);
/* At start (rank 0): the dtype of each stage of the step under --precision,
 * and whether the CPU runs bf16 natively. */
void td_report_precision(td_report *r, const td_mem_plan *plan);
/* After the first step (rank 0): the implementation oneDNN chose for each
 * GEMM shape (reduced precision only; fp32 GEMMs are OpenBLAS sgemm). */
void td_report_gemm_impl(td_report *r);

/* How td_generate samples: `tokens` tokens after `prompt` (UTF-8, may be
 * empty), from the softmax at `temperature` (0: greedy), over the top_k most likely
 * (0: all), then over the smallest set of the most likely whose mass
 * reaches top_p (0 or 1: all), with the sampler's seed. The model runs
 * incrementally with a key/value cache sized for the prompt + tokens
 * (trident/decode.h); no_cache = 1 reruns the whole window for every token
 * instead (the oracle the cache is tested against). progress (NULL: none)
 * receives a line per TD_SAMPLE_CHUNK prompt tokens of a prompt longer than
 * that; stats (NULL: none) receives the counts. Fields after seed may be
 * left 0. */
typedef struct {
    long long prompt_tokens; /* tokens of the prompt the model read (the last T at most) */
    long long prompt_rows;   /* rows computed before the first token was sampled */
    long long steps;         /* forwards after it (one per generated token but the last) */
    long long step_rows;     /* rows those computed: steps with the cache (T each without) */
    long long cache_rows;    /* positions the key/value cache holds (0: no cache) */
    size_t cache_bytes;      /* its keys and values */
    size_t bytes;            /* all the model's working memory (cache + scratch, or
                                the whole window's activations without the cache) */
} td_sample_stats;

#define TD_SAMPLE_CHUNK 512 /* prompt rows per forward (and per progress line) */

typedef struct {
    const char *prompt;
    int tokens;
    float temperature;
    int top_k;
    unsigned long long seed;
    float top_p;
    int no_cache;
    FILE *progress;
    td_sample_stats *stats;
    /* a checkpoint trained with --doc-mask: eod its end-of-text id. The
     * context is the current document alone (after an end-of-text token a
     * fresh one starts, at position 0) */
    int doc_mask, eod;
} td_sampling;
/* Text generation from canonical-layout params (sample.c). Writes the decoded
 * text to out, token by token. */
void td_generate(const td_param_table *canon, const float *params, const td_tokenizer *tok,
                 const td_sampling *sp, FILE *out);
/* The sampler's weights of logits[0..V): w[i] = exp((logits[i] - max) /
 * temperature) for the tokens kept by top_k (0: all; ties with the k-th
 * largest logit are kept) and then by top_p (the smallest prefix of the
 * kept tokens sorted by probability, ties by id, whose mass reaches top_p;
 * 0 or >= 1: all), 0 for the others. Temperature 0 is greedy: weight 1
 * for the first of the largest logits, 0 for every other. Returns their sum
 * (double). */
double td_sample_weights(float *w, const float *logits, int V, float temperature, int top_k,
                         float top_p);

#endif
