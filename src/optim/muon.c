/* --optimizer muon: Muon on the blocks' hidden matrices, AdamW on the rest. */
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/optim.h"

int td_optimizer_parse(const char *name) {
    if (!strcmp(name, "adamw")) return TD_OPT_ADAMW;
    if (!strcmp(name, "muon")) return TD_OPT_MUON;
    return -1;
}

const char *td_optimizer_name(td_optimizer o) { return o == TD_OPT_MUON ? "muon" : "adamw"; }

int td_muon_row(const td_param *r) {
    /* the untied head sits in the final unit with layer L: not a hidden matrix */
    return r->ndim == 2 && r->layer >= 0 && r->kind != TD_T_HEAD && r->kind != TD_T_ROUTERW &&
           r->kind != TD_T_WTE && r->kind != TD_T_WPE;
}

/* A mixture of experts' stacks: E experts of shape[0] / E rows each
 * (fc: gate|up under SwiGLU, shape[0] / (E F) = 2 parts; proj: one), the
 * shared experts one MLP (its fc [gate; up] likewise); anything else its
 * fused groups (GPT-2's q, k, v). */
int td_muon_matrices(const td_param_table *t, const td_param *r, int *rows, int *cols) {
    const td_moe_config *e = &t->cfg.moe;
    int n = r->groups > 1 ? r->groups : 1;
    if (r->kind == TD_T_EXPFCW || r->kind == TD_T_EXPPROJW) {
        int per = r->shape[0] / e->E; /* one expert's rows */
        n = r->local_shape[0] / per;
        if (r->kind == TD_T_EXPFCW) n *= per / e->F;
    } else if (r->kind == TD_T_SHFCW) {
        n = r->shape[0] / (e->shared * e->F);
    }
    *rows = r->local_shape[0] / n, *cols = r->local_shape[1];
    TD_ASSERT(n >= 1 && *rows * n == r->local_shape[0]);
    return n;
}

float td_muon_lr(const td_optim_config *o, float lr) {
    return o->lr > 0.0f ? o->muon_lr * (lr / o->lr) : o->muon_lr;
}

/* AdamW on the rows of [lo, hi) that are not Muon's; with mu set, Muon's
 * spans (each logical matrix whole) into mu, their count into *nm. */
static void muon_spans(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                       size_t hi, const td_param_table *t, const td_optim_config *o, float lr, int step,
                       float grad_scale, td_muon_span *mu, int *nm, int replicated_only) {
    TD_ASSERT(step >= 1 && lo <= hi && hi <= t->numel);
    size_t rows = (size_t)(t->n_rows > 0 ? t->n_rows : 1);
    td_adamw_span *sp = td_alloc(sizeof *sp * rows, TD_MEM_OTHER);
    int n = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        size_t a = td_max_sz(lo, r->offset), b = td_min_sz(hi, r->offset + r->numel);
        if (a >= b) continue;
        size_t k = a - lo;
        if (!td_muon_row(r)) {
            td_adamw_span s = {p + k, m + k, v + k, g + k, b - a, r->decay ? o->weight_decay : 0.0f};
            sp[n++] = s;
            continue;
        }
        if (!mu || (replicated_only && !td_param_tp_replicated(r))) continue;
        /* whole rows only: the layouts that cut one step through muon_shard.c */
        TD_ASSERT(a == r->offset && b == r->offset + r->numel);
        int R, C, parts = td_muon_matrices(t, r, &R, &C);
        TD_ASSERT((size_t)R * (size_t)C * (size_t)parts == r->numel);
        for (int q = 0; q < parts; q++) {
            size_t off = k + (size_t)q * (size_t)R * (size_t)C;
            td_muon_span s = {p + off, m + off, g + off, R, C, o->muon_wd};
            mu[(*nm)++] = s;
        }
    }
    td_adamw_hyper h = td_adamw_hyper_of(o, lr, step, grad_scale);
    if (n) ops->adamw(sp, n, &h);
    td_free(sp);
}

void td_muon_adamw_rest(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                        size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                        int step, float grad_scale) {
    muon_spans(ops, p, g, m, v, lo, hi, t, o, lr, step, grad_scale, NULL, NULL, 0);
}

void td_muon_update_on(const td_ops *ops, float *p, const float *g, float *m, float *v, size_t lo,
                       size_t hi, const td_param_table *t, const td_optim_config *o, float lr,
                       int step, float grad_scale, int replicated_only) {
    TD_ASSERT(ops->muon);
    size_t groups = 0;
    int R, C;
    for (int i = 0; i < t->n_rows; i++)
        if (td_muon_row(&t->rows[i])) groups += (size_t)td_muon_matrices(t, &t->rows[i], &R, &C);
    td_muon_span *mu = td_alloc(sizeof *mu * (groups > 0 ? groups : 1), TD_MEM_OTHER);
    int nm = 0;
    muon_spans(ops, p, g, m, v, lo, hi, t, o, lr, step, grad_scale, mu, &nm, replicated_only);
    td_muon_hyper mh = {td_muon_lr(o, lr), o->muon_momentum, grad_scale, o->muon_nesterov};
    if (nm) ops->muon(mu, nm, &mh);
    td_free(mu);
}
