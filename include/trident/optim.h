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

typedef struct {
    float lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    int warmup, max_steps;
} td_optim_config;

/* Linear warm-up over `warmup` steps, then cosine decay to min_lr at
 * max_steps (nanoGPT's get_lr). step counts from 0. */
float td_lr_at(const td_optim_config *o, int step);

/* AdamW on the flat elements [lo, hi) of host memory (the CPU backend's
 * row: the oracles call it): p, g, m, v point at element lo. step is
 * 1-based (bias correction). g is multiplied by grad_scale first (the
 * clipping coefficient). Weight decay (decoupled, p *= 1 - lr wd) only
 * where the table says so. */
void td_adamw_update(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                     const td_param_table *t, const td_optim_config *o, float lr, int step,
                     float grad_scale);
/* The same through a row of ops (td_ops_for(TD_K_F32): p, g, m, v device
 * memory). given_2d: for the 2-D tensors g holds a ready-made update (the
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

/* Sum of squares of x[0..n) of host memory in double, in a fixed order
 * (blocks of 4096 summed in sequence, kernels.h's td_range_sumsq), so the
 * result does not depend on the thread count. */
double td_sumsq(const float *x, size_t n);

/* Clipping coefficient for a global norm: min(1, clip / (norm + 1e-6)), or 1
 * when clip <= 0 (PyTorch's clip_grad_norm_). */
float td_clip_scale(double norm, float clip);

#ifdef __cplusplus
}
#endif

#endif
