/* optim: AdamW over a range of the flat buffers, the learning-rate schedule
 * and the global gradient norm. Ranges let ZeRO shards, parameter servers and
 * replicated training share one implementation. */
#ifndef TRIDENT_OPTIM_H
#define TRIDENT_OPTIM_H

#include <stddef.h>

#include "trident/backend.h"
#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --lr-schedule: the learning rate after the warm-up (0, cosine, is what a
 * config filled in by hand gets). */
typedef enum {
    TD_LR_COSINE = 0,   /* cosine decay to min_lr at max_steps (nanoGPT's get_lr) */
    TD_LR_LINEAR,       /* linear decay to min_lr at max_steps */
    TD_LR_WSD,          /* warm-up, stable at lr, then the last decay_fraction of max_steps decays */
    TD_LR_CONSTANT,     /* lr: no horizon, no minimum */
    TD_LR_INVERSE_SQRT, /* lr sqrt((warmup + 1) / (step + 1)), at least min_lr: no horizon */
} td_lr_schedule;
#define TD_LR_SCHEDULE_NAMES "cosine, linear, wsd, constant, inverse-sqrt"

/* --lr-decay-shape: WSD's decay from lr to min_lr over its fraction p in [0, 1). */
typedef enum {
    TD_DECAY_LINEAR = 0, /* 1 - p */
    TD_DECAY_COSINE,     /* (1 + cos(pi p)) / 2 */
    TD_DECAY_1_SQRT,     /* 1 - sqrt(p) (Hägele et al. 2024) */
} td_lr_decay_shape;
#define TD_LR_DECAY_SHAPE_NAMES "linear, cosine, 1-sqrt"

/* --optimizer: AdamW for everything, or Muon for the blocks' 2-D hidden
 * matrices (td_muon_row) and AdamW for the rest. */
typedef enum { TD_OPT_ADAMW = 0, TD_OPT_MUON } td_optimizer;
#define TD_OPTIMIZER_NAMES "adamw, muon"
int td_optimizer_parse(const char *name);
const char *td_optimizer_name(td_optimizer o);

typedef struct {
    float lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    int warmup, max_steps; /* max_steps: the schedule's horizon (--schedule-steps) */
    td_lr_schedule schedule;
    td_lr_decay_shape decay_shape; /* wsd */
    float decay_fraction;          /* wsd: the share of max_steps that decays, in [0, 1] */
    td_optimizer optimizer;        /* 0 (adamw): what a config filled in by hand gets */
    float muon_lr, muon_momentum, muon_wd; /* Muon's rows; its lr follows lr's schedule */
    int muon_nesterov;
    int muon_ns_k; /* the backend row (td_ktype) whose muon and muon_ns run
                      Muon's step: TD_K_BF16 (1) in bf16 runs, whose
                      Newton-Schulz iterates in bf16 as the speedrun's; 0
                      (fp32) otherwise and in a config filled in by hand */
} td_optim_config;

/* The learning rate at `step` (from 0): a pure function of the config.
 * Every schedule starts with the linear warm-up lr (step + 1) / (warmup + 1)
 * for step < warmup; cosine, linear and wsd are min_lr from max_steps on.
 * WSD decays over the last round(decay_fraction x max_steps) steps before
 * max_steps (not before the warm-up's end), so a larger horizon extends the
 * stable phase and moves the decay. The formulas: docs/recipe-schedules.md. */
float td_lr_at(const td_optim_config *o, int step);
/* The first step of WSD's decay. */
int td_lr_wsd_decay_start(const td_optim_config *o);
/* --batch-rampup START:INCREMENT:SAMPLES (Megatron's rampup-batch-size):
 * the global batch starts at START and grows by INCREMENT each time
 * SAMPLES / ((full - START) / INCREMENT) more samples have been consumed,
 * until the full batch; start 0: off. */
typedef struct {
    int start, increment;
    long long samples;
} td_batch_rampup;
/* The global batch of `step` (from 0), from the samples the steps before it
 * consumed: a pure function of the step, so a resume and every layout agree.
 * full: --batch; (full - start) is a multiple of increment (the options
 * check it). */
int td_batch_at(const td_batch_rampup *r, int full, int step);
/* "START:INCREMENT:SAMPLES" into *r; 0, or -1 when the text is not three
 * positive integers with START <= full and (full - START) a multiple of
 * INCREMENT (why: the reason). */
int td_batch_rampup_parse(const char *text, int full, td_batch_rampup *r, char *why, size_t n);

/* Names <-> values; a parse returns -1 for an unknown name. */
int td_lr_schedule_parse(const char *name);
const char *td_lr_schedule_name(td_lr_schedule s);
int td_lr_decay_shape_parse(const char *name);
const char *td_lr_decay_shape_name(td_lr_decay_shape d);

/* AdamW on the flat elements [lo, hi) through a row of ops: p, g, m, v
 * point at element lo, in the row's memory (td_ops_for(TD_K_F32): device
 * memory; the oracles pass td_ops_cpu and host arrays). step is 1-based
 * (bias correction). g is multiplied by grad_scale first (the clipping
 * coefficient). Weight decay (decoupled, p *= 1 - lr wd) only where the
 * table says so. given_2d: for the 2-D tensors g holds a ready-made update (the
 * top-k update scheme's mean of the ranks' sparse AdamW steps, see
 * grad_payload.h): their elements become (p + g) (1 - lr wd), and their m
 * and v are left alone; the 1-D tensors step as above. */
void td_adamw_update_on(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                        size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                        int step, float grad_scale, int given_2d);
/* The spans of [lo, hi), one per table row the range meets (the row's
 * weight decay in wd); with given set, the 2-D rows' spans go there
 * instead (*n_given of them). Each array has room for t->n_rows. Returns
 * the number of AdamW spans. */
int td_adamw_spans(td_adamw_span *spans, td_adamw_span *given, int *n_given, float *p,
                   const float *g, float *m, float *v, size_t lo, size_t hi,
                   const td_param_table *t, const td_optim_config *o);
td_adamw_hyper td_adamw_hyper_of(const td_optim_config *o, float lr, int step, float grad_scale);

/* Muon's rows: the blocks' 2-D matrices other than the MoE router (each
 * fused row's `groups` parts along dim 0 are logical matrices of their own:
 * GPT's q|k|v). */
int td_muon_row(const td_param *r);
/* The logical matrices of Muon's row r in this rank's slice, consecutive
 * along dim 0, each [*rows, *cols]: their count. Each is orthogonalized on
 * its own: GPT-2's fused q, k, v (groups), each local expert's matrices of
 * an expert stack (E/ep experts under ep; fc: its gate and its up apart
 * under SwiGLU, Mixtral's w1 and w3), the shared experts' gate and up. */
int td_muon_matrices(const td_param_table *t, const td_param *r, int *rows, int *cols);
/* --optimizer muon on [lo, hi): Muon (ops->muon, momentum buffer m, lr
 * muon_lr x lr / o->lr) on each logical matrix of the Muon rows, which
 * must lie whole inside the range, AdamW (td_adamw_update_on's
 * arithmetic) on the rest; v of Muon's rows stays untouched.
 * replicated_only: leaves out the Muon rows split over tp (stepped by
 * src/parallel/muon_shard.c, which gathers their blocks). */
void td_muon_update_on(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                       size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                       int step, float grad_scale, int replicated_only);
/* Its AdamW half alone (the rows of [lo, hi) that are not Muon's), for the
 * layouts that step Muon's matrices elsewhere (src/parallel/muon_shard.c). */
void td_muon_adamw_rest(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                        size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                        int step, float grad_scale);
/* Muon's learning rate at the step whose AdamW lr is lr: muon_lr x lr / o->lr. */
float td_muon_lr(const td_optim_config *o, float lr);

/* Sum of squares of x[0..n) in double through a row whose memory is host
 * memory (td_ops_cpu: the oracles), in td_sumsq's fixed order (blocks of
 * 4096 summed in sequence, kernels.h's td_range_sumsq), so the result does
 * not depend on the thread count. The step's norm takes the row's sumsq
 * into device memory instead (parallel/step.c). */
double td_sumsq_host(const td_ops *ops, const float *x, size_t n);

/* Clipping coefficient for a global norm: min(1, clip / (norm + 1e-6)), or 1
 * when clip <= 0 (PyTorch's clip_grad_norm_). */
float td_clip_scale(double norm, float clip);

#ifdef __cplusplus
}
#endif

#endif
