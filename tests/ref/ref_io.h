/* Writing trident's weights in tests/ref/gpt_ref.py's input format: per
 * tensor int32 namelen, name, int32 ndim, int32 shape[ndim], float32 data,
 * the table's names and global shapes (the vocabulary rows without
 * trident's padding); running a reference script and reading back. */
#ifndef TD_TESTS_REF_IO_H
#define TD_TESTS_REF_IO_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/model.h"

static inline void ref_write(FILE *f, const void *p, size_t n) { TD_ASSERT(fwrite(p, 1, n, f) == n); }

/* params: the canonical (unit_align 1) flat layout of t; V: the real vocabulary. */
static inline void ref_write_tensors(FILE *f, const td_param_table *t, const float *params, int V, int C) {
    int32_t nt = t->n_rows;
    ref_write(f, &nt, 4);
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        int32_t nl = (int32_t)strlen(p->name), nd = p->ndim;
        int32_t sh[2] = {p->shape[0], p->shape[1]};
        size_t n = p->numel;
        if (p->split == TD_SPLIT_VOCAB) sh[0] = V, n = (size_t)V * C; /* embedding, untied head */
        ref_write(f, &nl, 4);
        ref_write(f, p->name, (size_t)nl);
        ref_write(f, &nd, 4);
        ref_write(f, sh, 4 * (size_t)nd);
        ref_write(f, params + p->offset, 4 * n);
    }
}

/* A model of the reference tests: the canonical table (unit_align 1) of
 * cfg with its weights and gradients. */
typedef struct {
    td_gpt_config cfg;
    td_param_table t;
    float *params, *grads;
} ref_model;

/* Finishes mc->cfg and builds the rest: the family's init (seed 42), then
 * the biases and norm gains moved by N(0, 0.1) away from 0 and 1, so that
 * their gradients are exercised (a router's expert_bias, for selection
 * only, stays 0). */
/* A Llama case as tests/ref/llama_ref.py's run_case reads it (B sequences
 * of the config's T; tied: the head is the embedding). */
static inline void ref_write_llama_case(FILE *f, const ref_model *mc, int B, int tied, const int *inputs,
                                        const int *targets) {
    const td_gpt_config *c = &mc->cfg;
    int32_t hdr[9] = {c->L, c->H, c->KV, c->C, c->F, c->T, c->V, B, tied};
    float eps = c->norm_eps;
    double rd4[4] = {c->rope_theta, c->rope_scaling.factor, c->rope_scaling.low_freq_factor,
                     c->rope_scaling.high_freq_factor};
    int32_t orig = c->rope_scaling.orig_max_pos;
    ref_write(f, hdr, sizeof hdr);
    ref_write(f, &eps, 4);
    ref_write(f, rd4, sizeof rd4);
    ref_write(f, &orig, 4);
    ref_write_tensors(f, &mc->t, mc->params, c->V, c->C);
    ref_write(f, inputs, 4 * (size_t)B * c->T);
    ref_write(f, targets, 4 * (size_t)B * c->T);
}

static inline void ref_model_build(ref_model *mc) {
    td_gpt_config_finish(&mc->cfg);
    td_param_table_build(&mc->t, &mc->cfg, 1);
    mc->params = td_alloc(sizeof(float) * mc->t.numel, TD_MEM_PARAMS);
    mc->grads = td_alloc(sizeof(float) * mc->t.numel, TD_MEM_GRADS);
    td_param_init_range(&mc->t, 42, 0, mc->t.numel, mc->params);
    for (int i = 0; i < mc->t.n_rows; i++) {
        td_param *p = &mc->t.rows[i];
        if (p->ndim == 2 || p->kind == TD_T_ROUTERB) continue;
        for (size_t k = 0; k < p->numel; k++)
            mc->params[p->offset + k] += (float)(0.1 * td_rng_normal(9, (uint64_t)i, k));
    }
}

static inline void ref_model_free(ref_model *mc) {
    td_free(mc->params), td_free(mc->grads);
    td_param_table_free(&mc->t);
}

/* The tokens of the reference tests: n inputs and targets below V. */
static inline void ref_tokens(int *inputs, int *targets, size_t n, int V) {
    for (size_t i = 0; i < n; i++) {
        inputs[i] = (int)(td_rng_u64(5, 1, (uint64_t)i) % (uint64_t)V);
        targets[i] = (int)(td_rng_u64(5, 2, (uint64_t)i) % (uint64_t)V);
    }
}

/* A new input file made from the template in_path ("/tmp/name_XXXXXX",
 * rewritten), and out_path = in_path.out for the script's output. */
static inline FILE *ref_create(char *in_path, char *out_path, size_t cap) {
    int fd = mkstemp(in_path);
    TD_ASSERT(fd >= 0);
    snprintf(out_path, cap, "%s.out", in_path);
    FILE *f = fdopen(fd, "wb");
    TD_ASSERT(f);
    return f;
}

static inline void ref_read(FILE *f, void *p, size_t n) {
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "FAIL: reference output truncated\n");
        exit(1);
    }
}

/* Runs `/usr/bin/python3 script in out`; 0 when it succeeded (else says so). */
static inline int ref_run(const char *script, const char *in, const char *out) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %s", script, in, out);
    if (system(cmd) == 0) return 0;
    fprintf(stderr, "FAIL: the PyTorch reference did not run (%s); install python3-torch\n", cmd);
    return 1;
}

/* Worst |a - b| relative to max|b| of the tensor (elements near zero make a
 * per-element relative error meaningless); a[i * lda + j] against b[i * n + j]. */
static inline double ref_cmp(const float *a, size_t lda, const float *b, size_t rows, size_t n) {
    double maxb = 0.0, maxd = 0.0;
    for (size_t i = 0; i < rows * n; i++) maxb = fmax(maxb, fabs(b[i]));
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < n; j++) maxd = fmax(maxd, fabs((double)a[i * lda + j] - b[i * n + j]));
    return maxb > 0 ? maxd / maxb : maxd;
}

/* Every parameter gradient of m (m->grads) against the reference's, read
 * from o in table order (V rows of a vocabulary split): the worst ref_cmp,
 * and the tensor that gave it in *worst_name. ref holds the largest. */
static inline double ref_cmp_grads(FILE *o, const ref_model *m, float *ref, const char **worst_name) {
    double worst = 0.0;
    *worst_name = "";
    for (int i = 0; i < m->t.n_rows; i++) {
        const td_param *p = &m->t.rows[i];
        size_t rows = p->split == TD_SPLIT_VOCAB ? (size_t)m->cfg.V : (size_t)p->shape[0];
        ref_read(o, ref, sizeof(float) * rows * (size_t)p->shape[1]);
        double e = ref_cmp(m->grads + p->offset, (size_t)p->shape[1], ref, rows, (size_t)p->shape[1]);
        if (e > worst) worst = e, *worst_name = p->name;
    }
    return worst;
}

#endif
