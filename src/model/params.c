/* The parameter table: one row per tensor, in flat-buffer order (by unit). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/compat.h"
#include "trident/model.h"
#include "internal.h"

/* The family's defaults and the flags it does not have. */
static void config_family(td_gpt_config *cfg) {
    int llama = cfg->arch == TD_ARCH_LLAMA;
    TD_CHECK(cfg->arch == TD_ARCH_GPT2 || llama, "unknown architecture %d", (int)cfg->arch);
    if (!llama) { /* GPT-2 as published: the rules table's arch-flags */
        char flag[64] = "";
        if (cfg->KV != 0 && cfg->KV != cfg->H) snprintf(flag, sizeof flag, "--kv-heads %d", cfg->KV);
        else if (cfg->F != 0 && cfg->F != 4 * cfg->C) snprintf(flag, sizeof flag, "--ffn-hidden %d", cfg->F);
        else if (cfg->norm_eps != 0.0f) snprintf(flag, sizeof flag, "--norm-eps %g", cfg->norm_eps);
        else if (cfg->rope_theta != 0.0 || cfg->rope_scaling.factor != 0.0)
            snprintf(flag, sizeof flag, "--rope-theta %g", cfg->rope_theta);
        else if (cfg->tie == TD_TIE_OFF) /* its exports (hf-gpt2, llm.c) have no head of their own */
            snprintf(flag, sizeof flag, "--tie-embeddings off");
        td_compat_cfg c;
        td_compat_cfg_init(&c);
        c.llama_flag_text = flag[0] ? flag : NULL;
        td_compat_check(&c, TD_COMPAT_AT_MODEL_CONFIG);
    }
    if (cfg->KV == 0) cfg->KV = cfg->H;
    TD_CHECK(cfg->KV > 0 && cfg->H % cfg->KV == 0,
             "--kv-heads %d does not divide --heads %d: each kv head serves an equal group of query heads",
             cfg->KV, cfg->H);
    if (cfg->F == 0) /* Meta's rounding: int(2 * 4C / 3) up to a multiple of 256 */
        cfg->F = llama ? (int)td_round_up((size_t)(8 * (long)cfg->C / 3), 256) : 4 * cfg->C;
    TD_CHECK(cfg->F > 0 && cfg->F <= 4 * TD_MAX_EMBD, "--ffn-hidden must be in [1, %d] (got %d)",
             4 * TD_MAX_EMBD, cfg->F);
    if (cfg->tie == TD_TIE_DEFAULT) cfg->tie = llama ? TD_TIE_OFF : TD_TIE_ON;
    if (!llama) return;
    if (cfg->norm_eps == 0.0f) cfg->norm_eps = 1e-5f;
    if (cfg->rope_theta == 0.0) cfg->rope_theta = 10000.0;
    TD_CHECK(cfg->norm_eps > 0.0f && cfg->rope_theta > 0.0, "--norm-eps and --rope-theta must be positive");
    TD_CHECK((cfg->C / cfg->H) % 2 == 0,
             "--arch llama needs an even head size for rotary positions (--embd %d / --heads %d = %d)", cfg->C,
             cfg->H, cfg->C / cfg->H);
}

/* The mixture of experts' defaults and ranges (the flags' names). */
static void config_moe(td_gpt_config *cfg) {
    td_moe_config *e = &cfg->moe;
    if (e->E == 0) return; /* a shaping flag without experts: the rules table's moe-flags */
    TD_CHECK(e->E >= 2 && e->E <= 4096, "--moe-experts must be in [2, 4096] (got %d)", e->E);
    if (e->K == 0) e->K = 2; /* Megatron-core's --moe-router-topk default */
    TD_CHECK(e->K >= 1 && e->K <= e->E, "--moe-top-k must be in [1, --moe-experts %d] (got %d)", e->E, e->K);
    if (e->every == 0) e->every = 1;
    TD_CHECK(e->every >= 1 && e->every <= cfg->L, "--moe-every must be in [1, --layers %d] (got %d)", cfg->L,
             e->every);
    if (e->F == 0) e->F = cfg->F;
    TD_CHECK(e->F > 0 && e->F <= 4 * TD_MAX_EMBD, "--moe-ffn-hidden must be in [1, %d] (got %d)",
             4 * TD_MAX_EMBD, e->F);
    TD_CHECK(e->shared >= 0 && e->shared <= 64, "--moe-shared-experts must be in [0, 64] (got %d)", e->shared);
    TD_CHECK(e->router == TD_ROUTER_SOFTMAX || e->router == TD_ROUTER_SIGMOID, "unknown --moe-router %d",
             e->router);
    /* K = 1 renormalised is weight 1: the router would get no gradient from the loss */
    if (e->norm_topk == TD_TIE_DEFAULT) e->norm_topk = e->K >= 2 ? TD_TIE_ON : TD_TIE_OFF;
    TD_CHECK(e->aux_coef >= 0.0f && e->z_coef >= 0.0f && e->bias_rate >= 0.0f && e->capacity >= 0.0f,
             "--moe-aux-coef, --moe-z-coef, --moe-bias-balance and --moe-capacity must be >= 0");
}

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
    config_family(cfg);
    config_moe(cfg);
}

void td_gpt_check_tp(const td_gpt_config *cfg, int tp, int seq_parallel) {
    TD_CHECK(tp >= 1, "--tp must be a positive integer (got %d)", tp);
    /* heads split over tp ranks; tp | H implies tp | C and tp | 4C */
    TD_CHECK(cfg->H % tp == 0,
             "--tp %d does not divide --heads %d: tensor parallelism splits the heads (and the "
             "MLP's 4C = %d features) over tp ranks; use a tp that divides %d",
             tp, cfg->H, 4 * cfg->C, cfg->H);
    int kv = cfg->KV ? cfg->KV : cfg->H;
    TD_CHECK(kv % tp == 0,
             "--tp %d does not divide --kv-heads %d: tensor parallelism splits the kv heads too; use a tp "
             "that divides %d",
             tp, kv, kv);
    int F = cfg->F ? cfg->F : 4 * cfg->C;
    TD_CHECK(F % tp == 0, "--tp %d does not divide --ffn-hidden %d: tensor parallelism splits the MLP's features",
             tp, F);
    /* sequence parallelism against tp and the sequence: the rules table's */
    td_compat_cfg c;
    td_compat_cfg_init(&c);
    c.tp = tp, c.seq_parallel = seq_parallel, c.seq = cfg->T;
    td_compat_check(&c, TD_COMPAT_AT_MODEL_TP);
}

typedef struct {
    td_param_table *t;
    int cap;
    size_t off;
} builder;

/* One row: global shape [d0, d1] (d1 = 0: a vector), split over the table's
 * tp as `split` with `groups` fused parts along the split dimension. */
static void add_row(builder *bd, td_tensor_kind kind, const char *name, int d0, int d1,
                    td_tp_split split, int groups, int unit, int layer) {
    td_param_table *t = bd->t;
    if (t->n_rows == bd->cap) {
        bd->cap *= 2;
        td_param *r = td_alloc(sizeof(td_param) * (size_t)bd->cap, TD_MEM_OTHER);
        memcpy(r, t->rows, sizeof(td_param) * (size_t)t->n_rows);
        td_free(t->rows);
        t->rows = r;
    }
    td_param *p = &t->rows[t->n_rows];
    memset(p, 0, sizeof *p);
    p->id = t->n_rows++;
    TD_ASSERT(strlen(name) < sizeof p->name); /* a longer name would be cut (and no longer found) */
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 > 0 ? 2 : 1;
    p->shape[0] = p->local_shape[0] = d0;
    p->shape[1] = p->local_shape[1] = d1 > 0 ? d1 : 1;
    p->split = t->tp > 1 || split == TD_SPLIT_VOCAB || split == TD_SPLIT_EXPERT ? split : TD_SPLIT_NONE;
    p->split_dim = p->split == TD_SPLIT_NONE ? -1 : p->split == TD_SPLIT_ROW ? 1 : 0;
    p->groups = groups;
    if (p->split == TD_SPLIT_EXPERT) { /* E/ep consecutive experts, whatever the tp */
        p->local_shape[0] = p->shape[0] / t->ep;
        p->split_lo = t->ep_rank * p->local_shape[0];
    } else if (p->split == TD_SPLIT_VOCAB) { /* padded to the layout's Vp, then split */
        p->local_shape[0] = t->vocab_local;
        p->split_lo = t->vocab_lo;
    } else if (p->split_dim >= 0) {
        int extent = p->shape[p->split_dim] / groups; /* one group's global extent */
        TD_ASSERT(extent % t->tp == 0);
        p->local_shape[p->split_dim] = p->shape[p->split_dim] / t->tp;
        p->split_lo = t->tp_rank * (extent / t->tp);
    }
    p->numel = t->held[unit] ? (size_t)p->local_shape[0] * (size_t)p->local_shape[1] : 0;
    p->offset = bd->off;
    p->unit = unit;
    p->layer = layer;
    p->decay = p->ndim == 2; /* nanoGPT: decay matrices and embeddings only */
    p->kind = kind;
    bd->off += p->numel;
}

void td_param_table_build_layout(td_param_table *t, const td_gpt_config *cfg,
                                 const td_table_layout *lay) {
    TD_ASSERT(lay->unit_align >= 1 && lay->tp >= 1 && lay->tp_rank >= 0 && lay->tp_rank < lay->tp);
    td_gpt_check_tp(cfg, lay->tp, 0);
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->tp = lay->tp;
    t->tp_rank = lay->tp_rank;
    t->cp = lay->cp > 0 ? lay->cp : 1;
    t->cp_rank = lay->cp > 0 ? lay->cp_rank : 0;
    TD_ASSERT(t->cp_rank >= 0 && t->cp_rank < t->cp);
    t->ep = lay->ep > 0 ? lay->ep : 1;
    t->ep_rank = lay->ep > 0 ? lay->ep_rank : 0;
    TD_ASSERT(t->ep_rank >= 0 && t->ep_rank < t->ep && (cfg->moe.E == 0 || cfg->moe.E % t->ep == 0));
    t->prec = lay->prec;
    size_t Vp = td_round_up((size_t)cfg->V, (size_t)TD_VOCAB_PAD * (size_t)lay->tp);
    TD_CHECK(Vp <= (size_t)TD_MAX_VOCAB,
             "vocabulary %d padded for --tp %d exceeds the largest vocabulary %d", cfg->V, lay->tp,
             TD_MAX_VOCAB);
    t->Vp = (int)Vp;
    t->vocab_local = t->Vp / lay->tp;
    t->vocab_lo = lay->tp_rank * t->vocab_local;
    int L = cfg->L, unit_align = lay->unit_align;
    builder bd = {t, 16, 0};
    t->rows = td_alloc(sizeof(td_param) * (size_t)bd.cap, TD_MEM_OTHER);
    t->n_units = L + 2;
    t->unit_offset = td_alloc(sizeof(size_t) * (size_t)(t->n_units + 1), TD_MEM_OTHER);
    t->held = td_alloc((size_t)t->n_units, TD_MEM_OTHER);
    for (int u = 0; u < t->n_units; u++) t->held[u] = lay->held ? lay->held[u] != 0 : 1;
    char name[sizeof t->rows[0].name + 1]; /* + 1: add_row asserts that none is cut */
    const td_arch_desc *ad = td_arch_desc_of(cfg->arch);
    /* the rows of each place in the family's order: embeddings, then every
     * block's, then the final ones, each unit aligned */
    for (int u = 0; u < t->n_units; u++) {
        td_place place = u == 0 ? TD_PLACE_EMBED : u == L + 1 ? TD_PLACE_FINAL : TD_PLACE_BLOCK;
        int layer = u == 0 ? -1 : u - 1;
        bd.off = td_round_up(bd.off, (size_t)unit_align);
        t->unit_offset[u] = bd.off;
        int prev = -1; /* the kind (expert stack or not) of the unit's previous row */
        for (int i = 0; i < ad->n_rows; i++) {
            const td_arch_row *r = &ad->rows[i];
            if (r->place != place || (r->untied_only && td_gpt_tied(cfg))) continue;
            if (place == TD_PLACE_BLOCK && !td_arch_row_in_block(r, cfg, layer)) continue;
            /* under ep the expert stack is summed and sharded over other
             * ranks than the unit's other rows: it starts and ends on
             * unit_align too, so each part splits into equal slices */
            int expert = t->ep > 1 && r->split == TD_SPLIT_EXPERT;
            if (prev >= 0 && expert != prev) bd.off = td_round_up(bd.off, (size_t)unit_align);
            prev = expert;
            snprintf(name, sizeof name, r->name, layer);
            add_row(&bd, r->kind, name, td_arch_dim(cfg, r->d0), td_arch_dim(cfg, r->d1), r->split, r->groups,
                    u, layer);
        }
    }
    bd.off = td_round_up(bd.off, (size_t)unit_align);
    t->unit_offset[L + 2] = bd.off;
    t->unit_align = unit_align;
    t->numel = bd.off;
    t->n_real = t->n_global = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        t->n_real += p->numel;
        t->n_global += (size_t)p->shape[0] * (size_t)p->shape[1];
    }
    /* this rank's vocabulary padding rows (embedding, untied head) hold no parameters */
    int vocab_real = cfg->V - t->vocab_lo;
    vocab_real = vocab_real < 0 ? 0 : vocab_real > t->vocab_local ? t->vocab_local : vocab_real;
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].split == TD_SPLIT_VOCAB && t->rows[i].numel)
            t->n_real -= (size_t)(t->vocab_local - vocab_real) * (size_t)cfg->C;
}

void td_param_table_build(td_param_table *t, const td_gpt_config *cfg, int unit_align) {
    td_table_layout lay = {.unit_align = unit_align, .tp = 1, .prec = TD_PREC_FP32, .cp = 1};
    td_param_table_build_layout(t, cfg, &lay);
}

long long td_param_global_index(const td_param_table *t, const td_param *p, int r, size_t k) {
    TD_ASSERT(r >= 0 && r < t->tp && k < p->numel);
    size_t cols = (size_t)p->local_shape[1];
    size_t i = k / cols, j = k % cols; /* local row and column */
    if (p->split == TD_SPLIT_EXPERT) /* the table's own ep rank, on every tp rank */
        return (long long)(((size_t)p->split_lo + i) * cols + j);
    if (p->split == TD_SPLIT_VOCAB) {
        size_t row = (size_t)r * (size_t)t->vocab_local + i;
        return row < (size_t)p->shape[0] ? (long long)(row * cols + j) : -1;
    }
    if (p->split_dim == 0) { /* local rows: groups of local_shape[0]/groups rows */
        size_t per = (size_t)p->local_shape[0] / (size_t)p->groups, g = i / per;
        i = g * ((size_t)p->shape[0] / (size_t)p->groups) + (size_t)r * per + i % per;
    } else if (p->split_dim == 1) {
        j += (size_t)r * cols;
    }
    return (long long)(i * (size_t)p->shape[1] + j);
}

void td_param_table_free(td_param_table *t) {
    td_free(t->rows);
    td_free(t->unit_offset);
    td_free(t->held);
    memset(t, 0, sizeof *t);
}

const td_param *td_param_find(const td_param_table *t, const char *name) {
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(t->rows[i].name, name) == 0) return &t->rows[i];
    return NULL;
}

const td_param *td_param_lookup_opt(const td_param_table *t, td_tensor_kind kind, int layer) {
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        int block = p->unit >= 1 && p->unit <= t->cfg.L;
        if (p->kind == kind && (!block || p->layer == layer)) return p;
    }
    return NULL;
}

const td_param *td_param_lookup(const td_param_table *t, td_tensor_kind kind, int layer) {
    const td_param *p = td_param_lookup_opt(t, kind, layer);
    TD_ASSERT(p && "td_param_lookup: no such tensor");
    return p;
}

size_t td_unit_numel(const td_param_table *t, int unit) {
    return t->unit_offset[unit + 1] - t->unit_offset[unit];
}

void td_param_init_range(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                         float *out) {
    const td_gpt_config *cfg = &t->cfg;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        size_t a = td_max_sz(lo, p->offset), b = td_min_sz(hi, p->offset + p->numel);
        if (a >= b) continue;
        td_init init = td_arch_row_of(cfg->arch, p->kind)->init;
        double std = init == TD_INIT_RESID ? 0.02 / sqrt(2.0 * cfg->L) : 0.02;
        for (size_t e = a; e < b; e++) {
            long long k = td_param_global_index(t, p, t->tp_rank, e - p->offset);
            float v;
            if (init == TD_INIT_ZERO) v = 0.0f;
            else if (init == TD_INIT_ONE) v = 1.0f;
            else if (k < 0) v = 0.0f; /* vocabulary padding */
            else v = (float)(std * td_rng_normal(seed, (uint64_t)p->id, (uint64_t)k));
            out[e - lo] = v;
        }
    }
}

void td_param_init_range_dev(const td_param_table *t, unsigned long long seed, size_t lo, size_t hi,
                             float *out_dev) {
    enum { STAGE = 1 << 20 };
    size_t cap = td_min_sz(STAGE, hi - lo);
    if (!cap) return;
    float *buf = td_alloc(cap * sizeof(float), TD_MEM_OTHER);
    for (size_t a = lo; a < hi; a += cap) {
        size_t b = td_min_sz(hi, a + cap);
        td_param_init_range(t, seed, a, b, buf);
        td_dev_upload(out_dev + (a - lo), buf, (b - a) * sizeof(float), TD_HOST_INIT);
    }
    td_free(buf);
}

double td_gpt_flops_per_token(const td_gpt_config *c) {
    /* matmul weights touched per token: attention's q, k, v and o, the MLP's
     * (two matrices of F x C for GELU, three for SwiGLU) and the LM head V C
     * (padded columns are computed, but count the real vocab) */
    double C = c->C, kvc = (double)c->KV * (c->C / c->H), F = c->F;
    double per = c->arch == TD_ARCH_LLAMA ? 3.0 : 2.0, mlp = 0.0;
    /* a mixture of experts' block: K routed and the shared experts of F each, and the router */
    const td_moe_config *e = &c->moe;
    for (int l = 0; l < c->L; l++)
        mlp += td_gpt_moe_layer(c, l) ? per * (double)(e->K + e->shared) * e->F * C + (double)e->E * C : per * F * C;
    double mat = c->L * (2.0 * C * C + 2.0 * kvc * C) + mlp + (double)c->V * C;
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

const char *td_precision_name(td_precision p) {
    return p == TD_PREC_BF16 ? "bf16" : p == TD_PREC_FP16 ? "fp16" : "fp32";
}
