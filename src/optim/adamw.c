/* AdamW as torch.optim.AdamW computes it, over ranges of the flat buffers. */
#include <math.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/optim.h"

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
    /* the given update (p + u) (1 - lr wd) as add, then scale: the same two
     * roundings in the same order (x 1 when the row does not decay) */
    for (int i = 0; i < ng; i++) {
        const td_adamw_span *s = &sp[rows + (size_t)i];
        ops->add(s->p, s->g, s->n);
        ops->scale(s->p, 1.0f - lr * s->wd, s->n);
    }
    td_free(sp);
}

double td_sumsq_host(const td_ops *ops, const float *x, size_t n) {
    double s = 0.0;
    ops->sumsq(&s, x, n);
    return s;
}

float td_clip_scale(double norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}
