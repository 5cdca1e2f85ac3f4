/* The model's driver: allocation of one micro-batch's activations (llm.c
 * style: one allocation carved into per-block slices, backward scratch
 * reused block after block) and the passes over the per-block functions of
 * block.c and embed_head.c, with the unit hook's events around them. */
#include <string.h>

#include "internal.h"
#include "trident/base.h"

/* Per-block activation floats for N = B*T rows (td_block_acts). */
static size_t block_floats(const td_gpt_config *c, int B) {
    size_t N = (size_t)B * c->T, C = c->C;
    return N * C * 7 + N * 3 * C + N * 4 * C * 2 + N * 4 + (size_t)B * c->H * c->T * c->T;
}

static size_t act_floats(const td_gpt_config *c, int B) {
    size_t N = (size_t)B * c->T;
    return N * c->C                           /* encoded */
           + (size_t)c->L * block_floats(c, B) /* blocks */
           + N * c->C + 2 * N                 /* ln_f */
           + N * c->Vp + N                    /* logits, losses */
           + 3 * N;                           /* row max, sum of exps, target logit */
}

static size_t grad_floats(const td_gpt_config *c, int B) {
    size_t N = (size_t)B * c->T;
    return N * c->C * 3          /* dres, dln, datty */
           + N * 3 * c->C        /* dqkv */
           + (size_t)B * c->H * c->T * c->T /* datt */
           + N * 4 * c->C * 2    /* dfch, dfchg */
           + N;                  /* dlosses */
}

size_t td_gpt_activation_bytes(const td_gpt_config *cfg, int B) {
    size_t N = (size_t)B * cfg->T;
    return (act_floats(cfg, B) + grad_floats(cfg, B)) * sizeof(float) + 2 * N * sizeof(int) +
           (size_t)cfg->L * sizeof(td_block_acts);
}

static float *carve(float **cur, size_t n) {
    float *p = *cur;
    *cur += n;
    return p;
}

/* In-unit offset of each tensor kind, found through the table; every block
 * must agree (blocks are units of identical shape). */
static void find_offsets(td_gpt *m, const td_param_table *t) {
    for (int k = 0; k < TD_T_COUNT; k++) {
        int block = k >= TD_T_LN1W && k <= TD_T_FCPROJB;
        int n = block ? m->cfg.L : 1;
        for (int l = 0; l < n; l++) {
            const td_param *p = td_param_lookup(t, (td_tensor_kind)k, l);
            size_t off = p->offset - t->unit_offset[p->unit];
            if (l == 0) m->off[k] = off;
            TD_ASSERT(off == m->off[k]);
            TD_ASSERT(!block || p->unit == td_m_block_unit(l));
        }
    }
    TD_ASSERT(td_param_lookup(t, TD_T_WTE, 0)->unit == 0);
    TD_ASSERT(td_param_lookup(t, TD_T_WPE, 0)->unit == 0);
    TD_ASSERT(td_param_lookup(t, TD_T_LNFW, 0)->unit == m->cfg.L + 1);
    TD_ASSERT(td_param_lookup(t, TD_T_LNFB, 0)->unit == m->cfg.L + 1);
}

void td_gpt_create(td_gpt *m, const td_param_table *t, int B) {
    memset(m, 0, sizeof *m);
    m->cfg = t->cfg;
    m->table = t;
    m->B = B;
    const td_gpt_config *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->H, T = c->T;
    size_t N = (size_t)B * T;
    find_offsets(m, t);
    m->unit_params = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);
    m->unit_grads = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);

    m->acts = td_alloc(act_floats(c, B) * sizeof(float), TD_MEM_ACTS);
    m->blocks = td_alloc(sizeof(td_block_acts) * (size_t)L, TD_MEM_ACTS);
    float *cur = m->acts;
    m->embed.encoded = carve(&cur, N * C);
    for (int l = 0; l < L; l++) {
        td_block_acts *a = &m->blocks[l];
        a->ln1 = carve(&cur, N * C);
        a->ln1_mean = carve(&cur, N);
        a->ln1_rstd = carve(&cur, N);
        a->qkv = carve(&cur, N * 3 * C);
        a->atty = carve(&cur, N * C);
        a->att = carve(&cur, (size_t)B * NH * T * T);
        a->attproj = carve(&cur, N * C);
        a->res2 = carve(&cur, N * C);
        a->ln2 = carve(&cur, N * C);
        a->ln2_mean = carve(&cur, N);
        a->ln2_rstd = carve(&cur, N);
        a->fch = carve(&cur, N * 4 * C);
        a->fch_gelu = carve(&cur, N * 4 * C);
        a->fcproj = carve(&cur, N * C);
        a->res3 = carve(&cur, N * C);
    }
    td_head_acts *h = &m->head;
    h->lnf = carve(&cur, N * C);
    h->lnf_mean = carve(&cur, N);
    h->lnf_rstd = carve(&cur, N);
    h->logits = carve(&cur, N * c->Vp);
    h->losses = carve(&cur, N);
    h->row_max = carve(&cur, N);
    h->row_sum = carve(&cur, N);
    h->tgt_logit = carve(&cur, N);
    m->logits = h->logits;
    TD_ASSERT((size_t)(cur - m->acts) == act_floats(c, B));

    m->grads_acts = td_alloc(grad_floats(c, B) * sizeof(float), TD_MEM_ACTS);
    cur = m->grads_acts;
    td_gpt_scratch *s = &m->s;
    s->dres = carve(&cur, N * C);
    s->dln = carve(&cur, N * C);
    s->datty = carve(&cur, N * C);
    s->dqkv = carve(&cur, N * 3 * C);
    s->datt = carve(&cur, (size_t)B * NH * T * T);
    s->dfch = carve(&cur, N * 4 * C);
    s->dfchg = carve(&cur, N * 4 * C);
    s->dlosses = carve(&cur, N);
    TD_ASSERT((size_t)(cur - m->grads_acts) == grad_floats(c, B));
    m->inputs = td_alloc(N * sizeof(int), TD_MEM_ACTS);
    m->targets = td_alloc(N * sizeof(int), TD_MEM_ACTS);
    m->acts_bytes = td_gpt_activation_bytes(c, B);
}

void td_gpt_destroy(td_gpt *m) {
    td_free(m->blocks);
    td_free(m->acts);
    td_free(m->grads_acts);
    td_free(m->inputs);
    td_free(m->targets);
    td_free(m->unit_params);
    td_free(m->unit_grads);
    memset(m, 0, sizeof *m);
}

void td_gpt_bind_flat(td_gpt *m, float *params, float *grads) {
    for (int u = 0; u < m->table->n_units; u++) {
        m->unit_params[u] = params ? params + m->table->unit_offset[u] : NULL;
        m->unit_grads[u] = grads ? grads + m->table->unit_offset[u] : NULL;
    }
}

static void event(td_gpt *m, td_unit_event ev, int unit) {
    if (m->hook) m->hook(m->hook_ctx, ev, unit);
}

/* Input of block l in the whole pass. */
static const float *block_input(const td_gpt *m, int l) {
    return l > 0 ? m->blocks[l - 1].res3 : m->embed.encoded;
}

const float *td_gpt_forward_blocks(td_gpt *m, int l0, int l1, const float *x) {
    TD_ASSERT(0 <= l0 && l0 < l1 && l1 <= m->cfg.L);
    for (int l = l0; l < l1; l++) {
        int u = td_m_block_unit(l);
        event(m, TD_FWD_BEGIN, u);
        td_block_forward(m, l, x, &m->blocks[l]);
        x = m->blocks[l].res3;
        event(m, TD_FWD_END, u);
    }
    return x;
}

void td_gpt_backward_blocks(td_gpt *m, int l0, int l1, const float *x, float *dres) {
    TD_ASSERT(0 <= l0 && l0 < l1 && l1 <= m->cfg.L);
    for (int l = l1 - 1; l >= l0; l--) {
        int u = td_m_block_unit(l);
        event(m, TD_BWD_BEGIN, u);
        td_block_backward(m, l, l > l0 ? m->blocks[l - 1].res3 : x, &m->blocks[l], dres);
        event(m, TD_BWD_END, u);
    }
}

double td_gpt_forward(td_gpt *m, const int *inputs, const int *targets) {
    int L = m->cfg.L, N = m->B * m->cfg.T;
    memcpy(m->inputs, inputs, sizeof(int) * N);
    if (targets) memcpy(m->targets, targets, sizeof(int) * N);

    event(m, TD_FWD_BEGIN, 0);
    td_embed_forward(m, inputs, &m->embed);
    const float *x = td_gpt_forward_blocks(m, 0, L, m->embed.encoded);
    event(m, TD_FWD_BEGIN, L + 1);
    double sum = td_head_forward(m, x, targets, &m->head);
    event(m, TD_FWD_END, L + 1);
    event(m, TD_FWD_END, 0);
    return sum;
}

void td_gpt_backward(td_gpt *m, float dloss) {
    int L = m->cfg.L;
    event(m, TD_BWD_BEGIN, 0);
    event(m, TD_BWD_BEGIN, L + 1);
    td_head_backward(m, block_input(m, L), m->targets, &m->head, dloss, m->s.dres);
    event(m, TD_BWD_END, L + 1);
    td_gpt_backward_blocks(m, 0, L, m->embed.encoded, m->s.dres);
    td_embed_backward(m, m->inputs, m->s.dres);
    event(m, TD_BWD_END, 0);
}
