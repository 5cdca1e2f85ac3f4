/* The parameter table: one row per tensor, in flat-buffer order (by unit). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/model.h"

void td_gpt_config_finish(td_gpt_config *cfg) {
    TD_CHECK(cfg->L > 0, "--layers must be a positive integer (got %d)", cfg->L);
    TD_CHECK(cfg->L <= TD_MAX_LAYERS, "--layers must be at most %d (got %d)", TD_MAX_LAYERS, cfg->L);
    TD_CHECK(cfg->H > 0, "--heads must be a positive integer (got %d)", cfg->H);
    TD_CHECK(cfg->C > 0, "--embd must be a positive integer (got %d)", cfg->C);
    TD_CHECK(cfg->C <= TD_MAX_EMBD, "--embd must be at most %d (got %d)", TD_MAX_EMBD, cfg->C);
    TD_CHECK(cfg->T > 0, "--seq must be a positive integer (got %d)", cfg->T);
    TD_CHECK(cfg->T <= TD_MAX_SEQ, "--seq must be at most %d (got %d)", TD_MAX_SEQ, cfg->T);
    /* V comes from --vocab, synthetic:V or the data; the padded Vp is
     * rounded up in size_t and checked before it is narrowed to int (V near
     * INT_MAX used to wrap Vp negative and plan 16 million TiB) */
    TD_CHECK(cfg->V > 0 && cfg->V <= TD_MAX_VOCAB,
             "vocabulary size %d (--vocab, or the data's) is out of range; valid: [1, %d]", cfg->V,
             TD_MAX_VOCAB);
    int suggest = cfg->H;
    while (cfg->C % suggest) suggest--; /* the largest head count <= H that divides C */
    TD_CHECK(cfg->C % cfg->H == 0,
             "--embd %d is not divisible by --heads %d; use a head count that divides it (e.g. %d)",
             cfg->C, cfg->H, suggest);
    size_t Vp = td_round_up((size_t)cfg->V, TD_VOCAB_PAD);
    TD_ASSERT(Vp <= (size_t)TD_MAX_VOCAB);
    cfg->Vp = (int)Vp;
}

static void add_row(td_param_table *t, int *cap, td_tensor_kind kind, const char *name, int d0,
                    int d1, int unit, int layer, size_t *off) {
    if (t->n_rows == *cap) {
        *cap *= 2;
        td_param *r = td_alloc(sizeof(td_param) * (size_t)*cap, TD_MEM_OTHER);
        memcpy(r, t->rows, sizeof(td_param) * (size_t)t->n_rows);
        td_free(t->rows);
        t->rows = r;
    }
    td_param *p = &t->rows[t->n_rows++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = p->local_shape[0] = d0;
    p->shape[1] = p->local_shape[1] = d1 > 0 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    p->offset = *off;
    p->unit = unit;
    p->layer = layer;
    p->decay = p->ndim == 2; /* nanoGPT: decay matrices and embeddings only */
    p->split = TD_SPLIT_NONE;
    p->kind = kind;
    *off += p->numel;
}

void td_param_table_build(td_param_table *t, const td_gpt_config *cfg, int unit_align) {
    TD_ASSERT(unit_align >= 1);
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    int L = cfg->L, C = cfg->C, cap = 16;
    t->rows = td_alloc(sizeof(td_param) * (size_t)cap, TD_MEM_OTHER);
    t->n_units = L + 2;
    t->unit_offset = td_alloc(sizeof(size_t) * (size_t)(t->n_units + 1), TD_MEM_OTHER);
    size_t off = 0;
    char name[64];

    t->unit_offset[0] = off;
    add_row(t, &cap, TD_T_WTE, "transformer.wte.weight", cfg->Vp, C, 0, -1, &off);
    add_row(t, &cap, TD_T_WPE, "transformer.wpe.weight", cfg->T, C, 0, -1, &off);
    for (int l = 0; l < L; l++) {
        off = td_round_up(off, (size_t)unit_align);
        t->unit_offset[l + 1] = off;
#define ROW(kind, suffix, d0, d1)                                                      \
    do {                                                                               \
        snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix);                 \
        add_row(t, &cap, kind, name, d0, d1, l + 1, l, &off);                          \
    } while (0)
        ROW(TD_T_LN1W, "ln_1.weight", C, 0);
        ROW(TD_T_LN1B, "ln_1.bias", C, 0);
        ROW(TD_T_QKVW, "attn.c_attn.weight", 3 * C, C);
        ROW(TD_T_QKVB, "attn.c_attn.bias", 3 * C, 0);
        ROW(TD_T_ATTPROJW, "attn.c_proj.weight", C, C);
        ROW(TD_T_ATTPROJB, "attn.c_proj.bias", C, 0);
        ROW(TD_T_LN2W, "ln_2.weight", C, 0);
        ROW(TD_T_LN2B, "ln_2.bias", C, 0);
        ROW(TD_T_FCW, "mlp.c_fc.weight", 4 * C, C);
        ROW(TD_T_FCB, "mlp.c_fc.bias", 4 * C, 0);
        ROW(TD_T_FCPROJW, "mlp.c_proj.weight", C, 4 * C);
        ROW(TD_T_FCPROJB, "mlp.c_proj.bias", C, 0);
#undef ROW
    }
    off = td_round_up(off, (size_t)unit_align);
    t->unit_offset[L + 1] = off;
    add_row(t, &cap, TD_T_LNFW, "transformer.ln_f.weight", C, 0, L + 1, L, &off);
    add_row(t, &cap, TD_T_LNFB, "transformer.ln_f.bias", C, 0, L + 1, L, &off);
    off = td_round_up(off, (size_t)unit_align);
    t->unit_offset[L + 2] = off;
    t->unit_align = unit_align;
    t->numel = off;
    t->n_real = 0;
    for (int i = 0; i < t->n_rows; i++) t->n_real += t->rows[i].numel;
    t->n_real -= (size_t)(cfg->Vp - cfg->V) * (size_t)C;
}

void td_param_table_free(td_param_table *t) {
    td_free(t->rows);
    td_free(t->unit_offset);
    memset(t, 0, sizeof *t);
}

const td_param *td_param_find(const td_param_table *t, const char *name) {
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(t->rows[i].name, name) == 0) return &t->rows[i];
    return NULL;
}

const td_param *td_param_lookup(const td_param_table *t, td_tensor_kind kind, int layer) {
    int block = kind >= TD_T_LN1W && kind <= TD_T_FCPROJB;
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].kind == kind && (!block || t->rows[i].layer == layer)) return &t->rows[i];
    TD_ASSERT(!"td_param_lookup: no such tensor");
    return NULL;
}

size_t td_unit_numel(const td_param_table *t, int unit) {
    return t->unit_offset[unit + 1] - t->unit_offset[unit];
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void td_param_init_range(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                         float *out) {
    const td_gpt_config *cfg = &t->cfg;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t a = td_max_sz(lo, p->offset), b = td_min_sz(hi, p->offset + p->numel);
        if (a >= b) continue;
        int is_ln = strstr(p->name, "ln_") != NULL;
        int is_bias = ends_with(p->name, ".bias");
        double std = 0.02;
        if (ends_with(p->name, "c_proj.weight")) std = 0.02 / sqrt(2.0 * cfg->L);
        size_t real_end = p->numel; /* wte rows >= V are padding, kept at 0 */
        if (strcmp(p->name, "transformer.wte.weight") == 0) real_end = (size_t)cfg->V * cfg->C;
        for (size_t e = a; e < b; e++) {
            size_t k = e - p->offset;
            float v;
            if (is_bias) v = 0.0f;
            else if (is_ln) v = 1.0f;
            else if (k >= real_end) v = 0.0f;
            else v = (float)(std * td_rng_normal(seed, (uint64_t)i, k));
            out[e - lo] = v;
        }
    }
}

double td_gpt_flops_per_token(const td_gpt_config *c) {
    /* matmul weights touched per token: blocks 12 C^2 and the LM head V C
     * (padded columns are computed, but count the real vocab) */
    double mat = 12.0 * c->L * (double)c->C * c->C + (double)c->V * c->C;
    return 6.0 * mat + 12.0 * c->L * (double)c->T * c->C;
}

void td_param_relayout(float *dst, const td_param_table *to, const float *src,
                       const td_param_table *from) {
    TD_ASSERT(to->n_rows == from->n_rows);
    memset(dst, 0, sizeof(float) * to->numel);
    for (int i = 0; i < to->n_rows; i++) {
        TD_ASSERT(to->rows[i].numel == from->rows[i].numel);
        memcpy(dst + to->rows[i].offset, src + from->rows[i].offset,
               sizeof(float) * to->rows[i].numel);
    }
}
