/* AdamW as torch.optim.AdamW computes it, over ranges of the flat buffers. */
#include <math.h>

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

static void adamw_span(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                       float b2, float eps, float wd, float bc1, float bc2_sqrt, float scale) {
    float step_size = lr / bc1;
    float decay = 1.0f - lr * wd;
#pragma omp parallel for num_threads(td_kernels_threads()) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}

/* p[i] = (p[i] + u[i]) (1 - lr wd): an update computed elsewhere, then the
 * decoupled decay AdamW would apply (in that order: the bits of adding u and
 * stepping AdamW with a zero gradient and zero moments). */
static void given_span(float *p, const float *u, size_t n, float lr, float wd) {
    float decay = 1.0f - lr * wd;
#pragma omp parallel for num_threads(td_kernels_threads()) schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) p[i] = (p[i] + u[i]) * decay;
}

static void update_rows(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                        const td_param_table *t, const td_optim_config *o, float lr, int step,
                        float grad_scale, int given_2d) {
    TD_ASSERT(step >= 1 && lo <= hi && hi <= t->numel);
    /* bias corrections in double, as torch computes them in Python floats */
    float bc1 = (float)(1.0 - pow(o->beta1, step));
    float bc2_sqrt = (float)sqrt(1.0 - pow(o->beta2, step));
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        size_t a = td_max_sz(lo, r->offset), b = td_min_sz(hi, r->offset + r->numel);
        if (a >= b) continue;
        size_t k = a - lo;
        float wd = r->decay ? o->weight_decay : 0.0f;
        if (given_2d && r->ndim == 2)
            given_span(p + k, g + k, b - a, lr, wd);
        else
            adamw_span(p + k, g + k, m + k, v + k, b - a, lr, o->beta1, o->beta2, o->eps, wd, bc1,
                       bc2_sqrt, grad_scale);
    }
}

void td_adamw_update(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                     const td_param_table *t, const td_optim_config *o, float lr, int step,
                     float grad_scale) {
    update_rows(p, g, m, v, lo, hi, t, o, lr, step, grad_scale, 0);
}

void td_adamw_update_2d_given(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                              const td_param_table *t, const td_optim_config *o, float lr,
                              int step, float grad_scale) {
    update_rows(p, g, m, v, lo, hi, t, o, lr, step, grad_scale, 1);
}

double td_sumsq(const float *x, size_t n) {
    enum { BLK = 4096 };
    size_t nb = (n + BLK - 1) / BLK;
    double total = 0.0;
    /* partial sums per block, added in block order: thread-count independent */
    double partial[64];
    for (size_t b0 = 0; b0 < nb; b0 += 64) {
        size_t nbb = td_min_sz(64, nb - b0);
#pragma omp parallel for num_threads(td_kernels_threads()) schedule(static) if (nbb > 4)
        for (size_t b = 0; b < nbb; b++) {
            size_t s = (b0 + b) * BLK, e = td_min_sz(n, s + BLK);
            double acc = 0.0;
            for (size_t i = s; i < e; i++) acc += (double)x[i] * x[i];
            partial[b] = acc;
        }
        for (size_t b = 0; b < nbb; b++) total += partial[b];
    }
    return total;
}

float td_clip_scale(double norm, float clip) {
    if (clip <= 0.0f) return 1.0f;
    double s = clip / (norm + 1e-6);
    return s < 1.0 ? (float)s : 1.0f;
}
