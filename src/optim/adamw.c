/* AdamW as torch.optim.AdamW computes it, over ranges of the flat buffers. */
#include <math.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/optim.h"

float td_lr_at(const td_optim_config *o, int step) {
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)(o->warmup + 1);
    if (step >= o->max_steps) return o->min_lr;
    double ratio = (double)(step - o->warmup) / (double)(o->max_steps - o->warmup);
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(o->min_lr + coeff * (o->lr - o->min_lr));
}

int td_adamw_spans(td_adamw_span *spans, td_adamw_span *given, int *n_given, float *p,
                   const float *g, float *m, float *v, size_t lo, size_t hi,
                   const td_param_table *t, const td_optim_config *o) {
    TD_ASSERT(lo <= hi && hi <= t->numel);
    int n = 0, ng = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        size_t a = td_max_sz(lo, r->offset), b = td_min_sz(hi, r->offset + r->numel);
        if (a >= b) continue;
        size_t k = a - lo;
        td_adamw_span s = {p + k, m ? m + k : NULL, v ? v + k : NULL, g + k, b - a,
                           r->decay ? o->weight_decay : 0.0f};
        if (given && r->ndim == 2)
            given[ng++] = s;
        else
            spans[n++] = s;
    }
    if (n_given) *n_given = ng;
    return n;
}

td_adamw_hyper td_adamw_hyper_of(const td_optim_config *o, float lr, int step, float grad_scale) {
    td_adamw_hyper h = {lr, o->beta1, o->beta2, o->eps, grad_scale, step};
    return h;
}

void td_adamw_update_on(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                        size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                        int step, float grad_scale, int given_2d) {
    TD_ASSERT(step >= 1);
    size_t rows = (size_t)(t->n_rows > 0 ? t->n_rows : 1);
    td_adamw_span *sp = td_alloc(sizeof *sp * 2 * rows, TD_MEM_OTHER);
    int ng = 0;
    int n = td_adamw_spans(sp, given_2d ? sp + rows : NULL, &ng, p, g, m, v, lo, hi, t, o);
    td_adamw_hyper h = td_adamw_hyper_of(o, lr, step, grad_scale);
    if (n) ops->adamw(sp, n, &h);
    if (ng) ops->adamw_given(sp + rows, ng, &h);
    td_free(sp);
}

void td_adamw_update(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                     const td_param_table *t, const td_optim_config *o, float lr, int step,
                     float grad_scale) {
    td_adamw_update_on(td_ops_cpu(TD_K_F32), p, g, m, v, lo, hi, t, o, lr, step, grad_scale, 0);
}

double td_sumsq(const float *x, size_t n) { return td_range_sumsq(x, n); }

float td_clip_scale(double norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}
