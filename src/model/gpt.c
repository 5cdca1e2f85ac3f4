/* GPT-2 forward and backward of one micro-batch, llm.c style: one activation
 * allocation carved into per-layer slices, one residual-gradient buffer that
 * every layer adds into, and backward scratch reused layer after layer. */
#include <string.h>

#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/model.h"

/* Per-layer activation sizes for N = B*T rows. */
#define PER_LAYER_FLOATS(N, C, NH, B, T)                                                 \
    ((size_t)(N) * (C) * 7 + (size_t)(N) * 3 * (C) + (size_t)(N) * 4 * (C) * 2 +          \
     (size_t)(N) * 4 + (size_t)(B) * (NH) * (T) * (T))

static size_t act_floats(const td_gpt_config *c, int B) {
    size_t N = (size_t)B * c->T;
    return N * c->C                                        /* encoded */
           + (size_t)c->L * PER_LAYER_FLOATS(N, c->C, c->H, B, c->T) /* blocks */
           + N * c->C + 2 * N                              /* ln_f */
           + N * c->Vp + N;                                /* logits, losses */
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
           (size_t)cfg->L * 15 * sizeof(float *);
}

static float *carve(float **cur, size_t n) {
    float *p = *cur;
    *cur += n;
    return p;
}

void td_gpt_create(td_gpt *m, const td_param_table *t, int B) {
    memset(m, 0, sizeof *m);
    m->cfg = t->cfg;
    m->table = t;
    m->B = B;
    const td_gpt_config *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->H, T = c->T;
    size_t N = (size_t)B * T;
    m->unit_params = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);
    m->unit_grads = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);

    m->acts = td_alloc(act_floats(c, B) * sizeof(float), TD_MEM_ACTS);
    float **ptrs = td_alloc(sizeof(float *) * (size_t)L * 15, TD_MEM_ACTS);
    float ***lists[15] = {&m->ln1, &m->ln1_mean, &m->ln1_rstd, &m->qkv, &m->atty,
                          &m->att, &m->attproj,  &m->res2,     &m->ln2, &m->ln2_mean,
                          &m->ln2_rstd, &m->fch, &m->fch_gelu, &m->fcproj, &m->res3};
    for (int i = 0; i < 15; i++) *lists[i] = ptrs + (size_t)i * L;
    float *cur = m->acts;
    m->encoded = carve(&cur, N * C);
    for (int l = 0; l < L; l++) {
        m->ln1[l] = carve(&cur, N * C);
        m->ln1_mean[l] = carve(&cur, N);
        m->ln1_rstd[l] = carve(&cur, N);
        m->qkv[l] = carve(&cur, N * 3 * C);
        m->atty[l] = carve(&cur, N * C);
        m->att[l] = carve(&cur, (size_t)B * NH * T * T);
        m->attproj[l] = carve(&cur, N * C);
        m->res2[l] = carve(&cur, N * C);
        m->ln2[l] = carve(&cur, N * C);
        m->ln2_mean[l] = carve(&cur, N);
        m->ln2_rstd[l] = carve(&cur, N);
        m->fch[l] = carve(&cur, N * 4 * C);
        m->fch_gelu[l] = carve(&cur, N * 4 * C);
        m->fcproj[l] = carve(&cur, N * C);
        m->res3[l] = carve(&cur, N * C);
    }
    m->lnf = carve(&cur, N * C);
    m->lnf_mean = carve(&cur, N);
    m->lnf_rstd = carve(&cur, N);
    m->logits = carve(&cur, N * c->Vp);
    m->losses = carve(&cur, N);
    TD_ASSERT((size_t)(cur - m->acts) == act_floats(c, B));

    m->grads_acts = td_alloc(grad_floats(c, B) * sizeof(float), TD_MEM_ACTS);
    cur = m->grads_acts;
    m->dres = carve(&cur, N * C);
    m->dln = carve(&cur, N * C);
    m->datty = carve(&cur, N * C);
    m->dqkv = carve(&cur, N * 3 * C);
    m->datt = carve(&cur, (size_t)B * NH * T * T);
    m->dfch = carve(&cur, N * 4 * C);
    m->dfchg = carve(&cur, N * 4 * C);
    m->dlosses = carve(&cur, N);
    m->inputs = td_alloc(N * sizeof(int), TD_MEM_ACTS);
    m->targets = td_alloc(N * sizeof(int), TD_MEM_ACTS);
    m->acts_bytes = td_gpt_activation_bytes(c, B);
}

void td_gpt_destroy(td_gpt *m) {
    td_free(m->ln1); /* the 15 per-layer pointer lists share one block */
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

double td_gpt_forward(td_gpt *m, const int *inputs, const int *targets) {
    const td_gpt_config *c = &m->cfg;
    const td_block_offsets *o = &m->table->blk;
    int B = m->B, T = c->T, C = c->C, NH = c->H, L = c->L, N = B * T;
    memcpy(m->inputs, inputs, sizeof(int) * N);
    if (targets) memcpy(m->targets, targets, sizeof(int) * N);

    event(m, TD_FWD_BEGIN, 0);
    const float *wte = m->unit_params[0];
    const float *wpe = wte + (size_t)c->Vp * C;
    td_embedding_forward(m->encoded, inputs, wte, wpe, B, T, C);

    const float *x = m->encoded; /* residual stream [N,C] */
    for (int l = 0; l < L; l++) {
        event(m, TD_FWD_BEGIN, l + 1);
        const float *p = m->unit_params[l + 1];
        td_layernorm_forward(m->ln1[l], m->ln1_mean[l], m->ln1_rstd[l], x, p + o->ln1w,
                             p + o->ln1b, N, C);
        td_matmul_forward(m->qkv[l], m->ln1[l], p + o->qkvw, p + o->qkvb, N, C, 3 * C);
        td_attention_forward(m->atty[l], m->att[l], m->qkv[l], B, T, C, NH);
        td_matmul_forward(m->attproj[l], m->atty[l], p + o->attprojw, p + o->attprojb, N, C, C);
        td_residual_forward(m->res2[l], x, m->attproj[l], (size_t)N * C);
        td_layernorm_forward(m->ln2[l], m->ln2_mean[l], m->ln2_rstd[l], m->res2[l], p + o->ln2w,
                             p + o->ln2b, N, C);
        td_matmul_forward(m->fch[l], m->ln2[l], p + o->fcw, p + o->fcb, N, C, 4 * C);
        td_gelu_forward(m->fch_gelu[l], m->fch[l], (size_t)N * 4 * C);
        td_matmul_forward(m->fcproj[l], m->fch_gelu[l], p + o->fcprojw, p + o->fcprojb, N,
                          4 * C, C);
        td_residual_forward(m->res3[l], m->res2[l], m->fcproj[l], (size_t)N * C);
        x = m->res3[l];
        event(m, TD_FWD_END, l + 1);
    }

    event(m, TD_FWD_BEGIN, L + 1);
    const float *pf = m->unit_params[L + 1];
    td_layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, pf, pf + C, N, C);
    /* LM head tied to wte: logits[N,Vp] = lnf @ wte^T */
    td_matmul_forward(m->logits, m->lnf, wte, NULL, N, C, c->Vp);
    double sum = 0.0;
    if (targets) {
        td_softmax_xent_forward(m->losses, m->logits, m->logits, targets, N, c->V, c->Vp);
        for (int i = 0; i < N; i++) sum += m->losses[i];
    }
    event(m, TD_FWD_END, L + 1);
    event(m, TD_FWD_END, 0);
    return sum;
}

void td_gpt_backward(td_gpt *m, float dloss) {
    const td_gpt_config *c = &m->cfg;
    const td_block_offsets *o = &m->table->blk;
    int B = m->B, T = c->T, C = c->C, NH = c->H, L = c->L, N = B * T;

    event(m, TD_BWD_BEGIN, 0);
    event(m, TD_BWD_BEGIN, L + 1);
    const float *wte = m->unit_params[0];
    float *dwte = m->unit_grads[0];
    float *dwpe = dwte + (size_t)c->Vp * C;
    const float *pf = m->unit_params[L + 1];
    float *gf = m->unit_grads[L + 1];

    for (int i = 0; i < N; i++) m->dlosses[i] = dloss;
    /* dlogits overwrite the probabilities in place */
    td_softmax_xent_backward(m->logits, m->logits, m->targets, m->dlosses, N, c->V, c->Vp);
    memset(m->dln, 0, sizeof(float) * N * C);
    td_matmul_backward(m->dln, dwte, NULL, m->logits, m->lnf, wte, N, C, c->Vp);
    memset(m->dres, 0, sizeof(float) * N * C);
    const float *xlast = L > 0 ? m->res3[L - 1] : m->encoded;
    td_layernorm_backward(m->dres, gf, gf + C, m->dln, xlast, pf, m->lnf_mean, m->lnf_rstd, N, C);
    event(m, TD_BWD_END, L + 1);

    for (int l = L - 1; l >= 0; l--) {
        event(m, TD_BWD_BEGIN, l + 1);
        const float *p = m->unit_params[l + 1];
        float *g = m->unit_grads[l + 1];
        const float *x = l > 0 ? m->res3[l - 1] : m->encoded;
        /* MLP branch: res3 = res2 + fcproj(gelu(fc(ln2(res2)))) */
        memset(m->dfchg, 0, sizeof(float) * N * 4 * C);
        td_matmul_backward(m->dfchg, g + o->fcprojw, g + o->fcprojb, m->dres, m->fch_gelu[l],
                           p + o->fcprojw, N, 4 * C, C);
        memset(m->dfch, 0, sizeof(float) * N * 4 * C);
        td_gelu_backward(m->dfch, m->fch[l], m->dfchg, (size_t)N * 4 * C);
        memset(m->dln, 0, sizeof(float) * N * C);
        td_matmul_backward(m->dln, g + o->fcw, g + o->fcb, m->dfch, m->ln2[l], p + o->fcw, N, C,
                           4 * C);
        /* dres already holds d(res2) through the identity; the norm adds its part */
        td_layernorm_backward(m->dres, g + o->ln2w, g + o->ln2b, m->dln, m->res2[l], p + o->ln2w,
                              m->ln2_mean[l], m->ln2_rstd[l], N, C);
        /* attention branch: res2 = x + attproj(attn(qkv(ln1(x)))) */
        memset(m->datty, 0, sizeof(float) * N * C);
        td_matmul_backward(m->datty, g + o->attprojw, g + o->attprojb, m->dres, m->atty[l],
                           p + o->attprojw, N, C, C);
        memset(m->dqkv, 0, sizeof(float) * N * 3 * C);
        td_attention_backward(m->dqkv, m->datt, m->datty, m->qkv[l], m->att[l], B, T, C, NH);
        memset(m->dln, 0, sizeof(float) * N * C);
        td_matmul_backward(m->dln, g + o->qkvw, g + o->qkvb, m->dqkv, m->ln1[l], p + o->qkvw, N,
                           C, 3 * C);
        td_layernorm_backward(m->dres, g + o->ln1w, g + o->ln1b, m->dln, x, p + o->ln1w,
                              m->ln1_mean[l], m->ln1_rstd[l], N, C);
        event(m, TD_BWD_END, l + 1);
    }
    td_embedding_backward(dwte, dwpe, m->dres, m->inputs, B, T, C);
    event(m, TD_BWD_END, 0);
}
