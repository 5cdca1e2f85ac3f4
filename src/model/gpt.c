/* The model's driver: allocation of one micro-batch's activations (llm.c
 * style: one allocation carved into per-block slices, backward scratch
 * reused block after block) and the passes over the per-block functions of
 * block.c and embed_head.c, with the unit hook's events around them. */
#include <string.h>

#include "internal.h"
#include "trident/compat.h"
#include "trident/base.h"
#include "trident/rope.h"
#include "trident/moe.h"

void td_gpt_dims_of(td_gpt_dims *d, const td_param_table *t, int B, int seq_parallel) {
    const td_gpt_config *c = &t->cfg;
    td_gpt_check_tp(c, t->tp, seq_parallel);
    memset(d, 0, sizeof *d);
    d->cp = t->cp, d->cp_rank = t->cp_rank;
    d->B = B, d->T = c->T / t->cp, d->C = c->C, d->N = B * d->T;
    d->tp = t->tp, d->tp_rank = t->tp_rank, d->sp = seq_parallel;
    d->Ns = seq_parallel ? d->N / t->tp : d->N;
    d->row0 = seq_parallel ? t->tp_rank * d->Ns : 0;
    d->Ca = c->C / t->tp, d->Ha = c->H / t->tp, d->F = c->F / t->tp;
    d->hs = c->C / c->H, d->KVa = c->KV / t->tp;
    d->QKV = d->Ca + 2 * d->KVa * d->hs;
    d->F1 = td_arch_desc_of(c->arch)->mlp == TD_MLP_SWIGLU ? 2 * d->F : d->F;
    d->Vl = t->vocab_local, d->vocab_lo = t->vocab_lo;
    int real = c->V - t->vocab_lo;
    d->Vreal = real < 0 ? 0 : real > d->Vl ? d->Vl : real;
    d->prec = t->prec, d->lp = t->prec != TD_PREC_FP32;
    d->es = d->lp ? 2 : sizeof(float);
    /* a reduced precision's rows under tp (rule lowp-tp-rows, compat.h) */
    td_compat_cfg cc;
    td_compat_cfg_init(&cc);
    cc.precision = d->prec, cc.tp = d->tp, cc.rows = d->Ns, cc.embd = d->C;
    cc.cp = t->cp, cc.seq = c->T; /* the split into 2 cp chunks (rule cp-seq) */
    cc.precision_name = td_precision_name(d->prec);
    td_compat_check(&cc, TD_COMPAT_AT_MODEL_DIMS);
}

/* Bytes of n activation elements / n fp32 values, kept 4-byte aligned so
 * that fp32 tensors carved after an odd count of 2-byte elements stay
 * aligned (a no-op under FP32: the sizes are those of the fp32 model). */
static size_t A(const td_gpt_dims *d, size_t n) { return td_round_up(n * d->es, 4); }
static size_t F(size_t n) { return n * sizeof(float); }

/* Per-block activation bytes (td_block_acts), in carve_block's order. */
static size_t block_bytes(const td_gpt_dims *d) {
    size_t N = d->N, Ns = d->Ns, C = d->C, rows = (size_t)d->B * d->Ha * d->T;
    return 2 * (A(d, N * C) + F(2 * Ns))              /* ln1, ln2 and their statistics */
           + A(d, N * d->QKV) + A(d, N * d->Ca)       /* qkv, atty */
           + F(rows)                                  /* lse */
           + 4 * A(d, Ns * C)                         /* attproj, res2, fcproj, res3 */
           + A(d, N * d->F1) + A(d, N * d->F);        /* fch, fch_gelu */
}

/* Saved tensors of L blocks: L full sets, or with recomputation one shared
 * set (holding block 0's res3) and the other L - 1 blocks' outputs res3. */
static size_t blocks_bytes(const td_gpt_dims *d, int L, td_recompute rc) {
    if (rc == TD_RECOMPUTE_BLOCK) return block_bytes(d) + (size_t)(L - 1) * A(d, (size_t)d->Ns * d->C);
    return (size_t)L * block_bytes(d);
}

static size_t head_bytes(const td_gpt_dims *d) {
    size_t N = d->N;
    return A(d, N * d->C) + F(2 * (size_t)d->Ns)      /* ln_f (gathered), statistics */
           + F(N * d->Vl + N + 3 * N);                /* logits, losses, row max, sum of
                                                         exps, target logit (fp32 always) */
}

static size_t act_bytes(const td_gpt_dims *d, int L, td_recompute rc) {
    return A(d, (size_t)d->Ns * d->C)                 /* encoded */
           + blocks_bytes(d, L, rc) + head_bytes(d);
}

/* The rotary table: cos and sin of each of this rank's T rows (rope.h). */
static size_t rope_bytes(const td_gpt_dims *d, const td_gpt_config *c) {
    return td_arch_desc_of(c->arch)->rope ? F((size_t)d->T * d->hs) : 0;
}

/* A forward reads of the scratch only the fp32 rows of a row-parallel
 * output before its reduction (full: sp or lp; dln_local: sp and lp, the
 * reduced rows before rounding) and the rotary table; the rest holds
 * activation gradients, which a TD_GPT_FORWARD model has none of. */
static size_t scratch_bytes(const td_gpt_dims *d, const td_gpt_config *c, td_gpt_use use) {
    size_t N = d->N, C = d->C, Ns = d->Ns;
    if (use == TD_GPT_FORWARD)
        return (d->sp || d->lp ? F(N * C) : 0) + (d->sp && d->lp ? F(Ns * C) : 0) + rope_bytes(d, c);
    size_t f = A(d, Ns * C) + F(N * C)                /* dres, dln */
               + A(d, N * d->Ca) + A(d, N * d->QKV)   /* datty, dqkv */
               + A(d, N * d->F1) + A(d, N * d->F)     /* dfch, dfchg */
               + F(N);                                /* dlosses */
    if (d->sp || d->lp) f += F(N * C) + F(Ns * C);    /* full, dln_local */
    if (d->sp) f += F(2 * C);                         /* dnorm */
    if (d->lp) f += A(d, Ns * C) + A(d, N * d->Vl);   /* dln_lp, dlogits_lp */
    return f + rope_bytes(d, c);
}

/* A mixture of experts' blocks among the n from block l0 this rank holds:
 * each keeps its own routing and expert tensors (moe.c), also under
 * recomputation. */
static size_t moe_bytes(const td_gpt_dims *d, const td_param_table *t, int l0, int n) {
    size_t b = 0;
    for (int l = l0; l < l0 + n && l < t->cfg.L; l++)
        if (td_gpt_moe_layer(&t->cfg, l) && t->held[td_m_block_unit(l)])
            b += td_dev_footprint(td_moe_block_bytes(d, &t->cfg, t->ep));
    return b;
}

/* The moe scratch buffer (moe.c td_moe_state_create), when there are experts. */
static size_t moe_scratch(const td_gpt_dims *d, const td_param_table *t) {
    return t->cfg.moe.E ? td_dev_footprint(td_moe_scratch_bytes(d, &t->cfg, t->ep)) : 0;
}

/* Each buffer as the run's device takes it (td_dev_footprint: whole pages
 * on the guard, the bytes on cpu): td_gpt_create_use's activations,
 * scratch, inputs and targets, and the experts' buffers. The host array of
 * block pointers is metadata (TD_MEM_OTHER), not planned. */
size_t td_gpt_activation_bytes_use(const td_param_table *t, int B, int seq_parallel, td_recompute rc,
                                   td_gpt_use use) {
    td_gpt_dims d;
    td_gpt_dims_of(&d, t, B, seq_parallel);
    return td_dev_footprint(act_bytes(&d, t->cfg.L, rc)) + td_dev_footprint(scratch_bytes(&d, &t->cfg, use)) +
           2 * td_dev_footprint((size_t)d.N * sizeof(int)) + moe_bytes(&d, t, 0, t->cfg.L) + moe_scratch(&d, t);
}

size_t td_gpt_activation_bytes_rc(const td_param_table *t, int B, int seq_parallel, td_recompute rc) {
    return td_gpt_activation_bytes_use(t, B, seq_parallel, rc, TD_GPT_TRAIN);
}

size_t td_gpt_activation_bytes(const td_param_table *t, int B, int seq_parallel) {
    return td_gpt_activation_bytes_rc(t, B, seq_parallel, TD_RECOMPUTE_NONE);
}

/* The next `bytes` of an allocation (sizes from A and F above). */
static void *carve(char **cur, size_t bytes) {
    void *p = *cur;
    *cur += bytes;
    return p;
}

/* In-unit offset of each tensor kind, found through the table; every held
 * block must agree (blocks are units of identical shape). A pipeline stage's
 * table leaves the units it does not hold empty: their offsets are unused. */
static void find_offsets(td_gpt *m, const td_param_table *t) {
    for (int k = 0; k < TD_T_COUNT; k++) {
        m->off[k] = TD_NO_TENSOR;
        const td_arch_row *row = td_arch_row_of(m->cfg.arch, (td_tensor_kind)k);
        if (!row) continue; /* not of this family */
        int block = row->place == TD_PLACE_BLOCK;
        int n = block ? m->cfg.L : 1, found = 0, any = 0;
        for (int l = 0; l < n; l++) {
            /* absent: tied away, or a block of the other kind (dense / experts) */
            const td_param *p = td_param_lookup_opt(t, (td_tensor_kind)k, l);
            if (!p) continue;
            any = 1;
            TD_ASSERT(!block || p->unit == td_m_block_unit(l));
            if (!t->held[p->unit]) continue;
            size_t off = p->offset - t->unit_offset[p->unit];
            if (!found) m->off[k] = off, found = 1;
            TD_ASSERT(off == m->off[k]);
        }
        /* a unit this rank does not hold: the offset of a full table (unused) */
        if (any && !found) m->off[k] = 0;
    }
    const td_arch_desc *ad = m->arch;
    TD_ASSERT(td_param_lookup(t, TD_T_WTE, 0)->unit == 0);
    TD_ASSERT(td_param_lookup(t, TD_T_LNFW, 0)->unit == m->cfg.L + 1);
    /* the fused weights the block's GEMMs read: q|k|v and gate|up lie next
     * to each other in every block (arch.c's row order) */
    if (ad->qkv == TD_T_QW && m->off[TD_T_QW] != 0) { /* 0: this stage holds no block */
        const td_gpt_dims *d = &m->d;
        TD_ASSERT(m->off[TD_T_KW] == m->off[TD_T_QW] + (size_t)d->Ca * d->C);
        TD_ASSERT(m->off[TD_T_VW] == m->off[TD_T_KW] + (size_t)d->KVa * d->hs * d->C);
        TD_ASSERT(m->off[TD_T_GATEW] == TD_NO_TENSOR || /* every block has experts */
                  m->off[TD_T_UPW] == m->off[TD_T_GATEW] + (size_t)d->F * d->C);
    }
    m->head_kind = td_gpt_tied(&m->cfg) ? TD_T_WTE : TD_T_HEAD;
    m->head_unit = td_gpt_tied(&m->cfg) ? 0 : m->cfg.L + 1;
}

static void carve_block(td_block_acts *a, const td_gpt_dims *d, char **cur) {
    size_t N = d->N, Ns = d->Ns, C = d->C, rows = (size_t)d->B * d->Ha * d->T;
    a->ln1 = carve(cur, A(d, N * C));
    a->ln1_mean = carve(cur, F(Ns));
    a->ln1_rstd = carve(cur, F(Ns));
    a->qkv = carve(cur, A(d, N * d->QKV));
    a->atty = carve(cur, A(d, N * d->Ca));
    a->lse = carve(cur, F(rows));
    a->attproj = carve(cur, A(d, Ns * C));
    a->res2 = carve(cur, A(d, Ns * C));
    a->ln2 = carve(cur, A(d, N * C));
    a->ln2_mean = carve(cur, F(Ns));
    a->ln2_rstd = carve(cur, F(Ns));
    a->fch = carve(cur, A(d, N * d->F1));
    a->fch_gelu = carve(cur, A(d, N * d->F));
    a->fcproj = carve(cur, A(d, Ns * C));
    a->res3 = carve(cur, A(d, Ns * C));
}

static void carve_head(td_head_acts *h, const td_gpt_dims *d, char **cur) {
    size_t N = d->N, Ns = d->Ns, C = d->C;
    h->lnf = carve(cur, A(d, N * C));
    h->lnf_mean = carve(cur, F(Ns));
    h->lnf_rstd = carve(cur, F(Ns));
    h->logits = carve(cur, F(N * d->Vl));
    h->losses = carve(cur, F(N));
    h->row_max = carve(cur, F(N));
    h->row_sum = carve(cur, F(N));
    h->tgt_logit = carve(cur, F(N));
}

/* ---- pipeline stages: one activation slot per in-flight micro-batch ---- */

static size_t slot_mem_bytes(const td_gpt_dims *d, const td_slot_shape *sh) {
    size_t NsC = A(d, (size_t)d->Ns * d->C);
    return (sh->forward_only ? 1 : 2) * NsC                /* x, dx */
           + (size_t)sh->n_blocks * (sh->recompute ? NsC : block_bytes(d)) /* blocks (or res3 only) */
           + (sh->wstash && !sh->forward_only ? (size_t)sh->n_blocks * td_block_wstash_bytes(d) : 0)
           + (sh->head ? head_bytes(d) : 0);
}

size_t td_gpt_slot_bytes(const td_param_table *t, int B, int seq_parallel, const td_slot_shape *sh) {
    td_gpt_dims d;
    td_gpt_dims_of(&d, t, B, seq_parallel);
    /* a mixture of experts: each slot block's own routing and expert tensors
     * (an upper bound when --moe-every leaves some blocks dense) */
    size_t moe = t->cfg.moe.E ? (size_t)sh->n_blocks * td_dev_footprint(td_moe_block_bytes(&d, &t->cfg, t->ep)) : 0;
    /* each buffer as the device takes it; the host arrays of block and
     * stash pointers are metadata (TD_MEM_OTHER), not planned */
    return td_dev_footprint(slot_mem_bytes(&d, sh)) + 2 * td_dev_footprint((size_t)d.N * sizeof(int)) + moe;
}

void td_gpt_slot_create(td_gpt_slot *s, const td_gpt *m, const td_slot_shape *sh) {
    const td_gpt_dims *d = &m->d;
    memset(s, 0, sizeof *s);
    s->shape = *sh;
    s->mem = td_dev_alloc(slot_mem_bytes(d, sh), TD_MEM_ACTS, "pipeline slot activations");
    s->blocks = td_alloc(sizeof(td_block_acts) * (size_t)(sh->n_blocks > 0 ? sh->n_blocks : 1), TD_MEM_OTHER);
    char *cur = s->mem;
    size_t NsC = A(d, (size_t)d->Ns * d->C);
    TD_ASSERT(!sh->forward_only || !sh->wstash);
    s->x = carve(&cur, NsC);
    s->dx = sh->forward_only ? NULL : carve(&cur, NsC);
    TD_ASSERT(!sh->recompute || (m->rc_set.ln1 && !sh->wstash));
    for (int i = 0; i < sh->n_blocks; i++) {
        if (sh->recompute) {
            s->blocks[i] = m->rc_set; /* scratch for the forward; only res3 is kept */
            s->blocks[i].res3 = carve(&cur, NsC);
        } else
            carve_block(&s->blocks[i], d, &cur);
    }
    if (sh->wstash) {
        s->w = td_alloc(sizeof(td_block_wstash) * (size_t)(sh->n_blocks > 0 ? sh->n_blocks : 1), TD_MEM_OTHER);
        for (int i = 0; i < sh->n_blocks; i++) {
            td_block_wstash_carve(&s->w[i], d, cur);
            cur += td_block_wstash_bytes(d);
        }
    }
    if (sh->head) carve_head(&s->head, d, &cur);
    TD_ASSERT((size_t)(cur - (char *)s->mem) == slot_mem_bytes(d, sh));
    s->inputs = td_dev_alloc((size_t)d->N * sizeof(int), TD_MEM_ACTS, "pipeline slot inputs");
    s->targets = td_dev_alloc((size_t)d->N * sizeof(int), TD_MEM_ACTS, "pipeline slot targets");
}

void td_gpt_slot_destroy(td_gpt_slot *s) {
    td_dev_free(s->mem);
    td_free(s->blocks);
    td_free(s->w);
    td_dev_free(s->inputs);
    td_dev_free(s->targets);
    memset(s, 0, sizeof *s);
}

size_t td_gpt_scratch_bytes(const td_param_table *t, int B, int seq_parallel) {
    td_gpt_dims d;
    td_gpt_dims_of(&d, t, B, seq_parallel);
    return scratch_bytes(&d, &t->cfg, TD_GPT_TRAIN);
}

/* Global positions of this rank's T rows: 0..T-1, or under context
 * parallelism the load-balanced split (cp.h): chunks r and 2cp-1-r of 2cp. */
void td_gpt_positions(const td_gpt *m, int *pos) {
    int T = m->d.T, Tc = T / 2, r = m->d.cp_rank;
    for (int i = 0; i < T; i++)
        pos[i] = m->d.cp <= 1 ? i : i < Tc ? r * Tc + i : (2 * m->d.cp - 1 - r) * Tc + (i - Tc);
}

static void create_common(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_gpt_use use) {
    memset(m, 0, sizeof *m);
    m->use = use;
    m->cfg = t->cfg;
    m->table = t;
    m->B = B;
    td_gpt_dims_of(&m->d, t, B, seq_parallel);
    m->arch = td_arch_desc_of(t->cfg.arch);
    find_offsets(m, t);
    td_moe_state_create(m);
    m->unit_params = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);
    m->unit_grads = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);
    m->ops = td_ops_for(m->d.prec == TD_PREC_BF16 ? TD_K_BF16 : m->d.prec == TD_PREC_FP16 ? TD_K_F16 : TD_K_F32);
    m->loss_sum = td_dev_alloc(sizeof(double), TD_MEM_OTHER, "loss sum");
    m->doc_eod = -1;
    if (m->d.cp > 1) { /* the positions, uploaded once: the embedding's kernels read them */
        int *pos = td_alloc(sizeof(int) * (size_t)m->d.T, TD_MEM_OTHER);
        td_gpt_positions(m, pos);
        m->pos = td_dev_alloc(sizeof(int) * (size_t)m->d.T, TD_MEM_OTHER, "cp positions");
        td_dev_upload(m->pos, pos, sizeof(int) * (size_t)m->d.T, TD_HOST_INIT);
        td_free(pos);
    }
    if (m->d.lp) { /* the compute copies, one per held unit */
        m->params_lp = td_dev_alloc(td_gpt_compute_param_bytes(t), TD_MEM_PARAMS, "16-bit compute copies");
        m->unit_params_lp = td_alloc(sizeof(void *) * t->n_units, TD_MEM_OTHER);
        m->lp_src = td_alloc(sizeof(float *) * t->n_units, TD_MEM_OTHER);
        m->lp_epoch = td_alloc(sizeof(unsigned) * t->n_units, TD_MEM_OTHER);
        char *cur = m->params_lp;
        for (int u = 0; u < t->n_units; u++) {
            m->unit_params_lp[u] = cur;
            cur += td_round_up(td_unit_numel(t, u) * m->d.es, 64);
            m->lp_src[u] = NULL;
            m->lp_epoch[u] = 0;
        }
        m->params_epoch = 1;
    }
}

size_t td_gpt_compute_param_bytes(const td_param_table *t) {
    if (t->prec == TD_PREC_FP32) return 0;
    size_t b = 0;
    for (int u = 0; u < t->n_units; u++) b += td_round_up(td_unit_numel(t, u) * 2, 64);
    return b;
}

void td_gpt_params_changed(td_gpt *m) { m->params_epoch++; }

void td_gpt_rope_freqs(const td_gpt_config *c, int hs, float *inv) {
    td_rope_inv_freq(inv, c->rope_theta, hs);
    const td_rope_scaling *r = &c->rope_scaling;
    if (r->factor > 0)
        td_rope_llama3_scale(inv, hs, r->factor, r->low_freq_factor, r->high_freq_factor, r->orig_max_pos);
}

/* The rotary table of this rank's rows (positions()), made on the host
 * and uploaded once. */
static void rope_table(td_gpt *m) {
    const td_gpt_config *c = &m->cfg;
    int hs = m->d.hs, T = m->d.T;
    size_t bytes = sizeof(float) * (size_t)T * hs;
    float *inv = td_alloc(sizeof(float) * (size_t)(hs / 2), TD_MEM_OTHER);
    int *pos = td_alloc(sizeof(int) * (size_t)T, TD_MEM_OTHER);
    float *cs = td_alloc(bytes, TD_MEM_OTHER);
    td_gpt_rope_freqs(c, hs, inv);
    td_gpt_positions(m, pos);
    td_rope_table(cs, pos, inv, T, hs);
    td_dev_upload(m->rope_cs, cs, bytes, TD_HOST_INIT);
    td_free(cs);
    td_free(pos);
    td_free(inv);
}

/* Backward scratch, shared by every block and micro-batch (a forward-only
 * model: the forward's part of it, scratch_bytes). */
static void create_scratch(td_gpt *m) {
    const td_gpt_dims *d = &m->d;
    size_t N = d->N, Ns = d->Ns, C = d->C, bytes = scratch_bytes(d, &m->cfg, m->use);
    m->grads_acts = td_dev_alloc(bytes, TD_MEM_ACTS, "model scratch");
    char *cur = m->grads_acts;
    td_gpt_scratch *s = &m->s;
    if (m->use == TD_GPT_FORWARD) {
        if (d->sp || d->lp) s->full = carve(&cur, F(N * C));
        if (d->sp && d->lp) s->dln_local = carve(&cur, F(Ns * C));
    } else {
        s->dres = carve(&cur, A(d, Ns * C));
        s->dln = carve(&cur, F(N * C));
        s->datty = carve(&cur, A(d, N * d->Ca));
        s->dqkv = carve(&cur, A(d, N * d->QKV));
        s->dfch = carve(&cur, A(d, N * d->F1));
        s->dfchg = carve(&cur, A(d, N * d->F));
        s->dlosses = carve(&cur, F(N));
        if (d->sp || d->lp) {
            s->full = carve(&cur, F(N * C));
            s->dln_local = carve(&cur, F(Ns * C));
        }
        if (d->sp) s->dnorm = carve(&cur, F(2 * C));
        if (d->lp) {
            s->dln_lp = carve(&cur, A(d, Ns * C));
            s->dlogits_lp = carve(&cur, A(d, N * d->Vl));
        }
    }
    if (m->arch->rope) {
        m->rope_cs = carve(&cur, rope_bytes(d, &m->cfg));
        rope_table(m);
    }
    TD_ASSERT((size_t)(cur - (char *)m->grads_acts) == bytes);
}

/* dfch and dfchg, carved one after the other by create_scratch */
size_t td_gpt_cp_scratch_bytes(const td_param_table *t, int B, int seq_parallel) {
    td_gpt_dims d;
    td_gpt_dims_of(&d, t, B, seq_parallel);
    return A(&d, (size_t)d.N * d.F1) + A(&d, (size_t)d.N * d.F);
}

void *td_gpt_cp_scratch(td_gpt *m, size_t *bytes) {
    if (m->use == TD_GPT_FORWARD) { /* no MLP backward: the ring keeps blocks of its own */
        *bytes = 0;
        return NULL;
    }
    TD_ASSERT((char *)m->s.dfchg == (char *)m->s.dfch + A(&m->d, (size_t)m->d.N * m->d.F1));
    *bytes = A(&m->d, (size_t)m->d.N * m->d.F1) + A(&m->d, (size_t)m->d.N * m->d.F);
    return m->s.dfch;
}

size_t td_gpt_stage_bytes_use(const td_param_table *t, int B, int seq_parallel, td_recompute rc, td_gpt_use use) {
    td_gpt_dims d;
    td_gpt_dims_of(&d, t, B, seq_parallel);
    size_t moe = moe_scratch(&d, t); /* and the recomputed block's own set */
    if (rc == TD_RECOMPUTE_BLOCK && t->cfg.moe.E) moe += td_dev_footprint(td_moe_block_bytes(&d, &t->cfg, t->ep));
    /* each buffer as the device takes it (td_gpt_activation_bytes_use) */
    return td_dev_footprint(scratch_bytes(&d, &t->cfg, use)) +
           (rc == TD_RECOMPUTE_BLOCK ? td_dev_footprint(block_bytes(&d)) : 0) + moe;
}

size_t td_gpt_stage_bytes(const td_param_table *t, int B, int seq_parallel, td_recompute rc) {
    return td_gpt_stage_bytes_use(t, B, seq_parallel, rc, TD_GPT_TRAIN);
}

void td_gpt_create_stage_use(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc,
                             td_gpt_use use) {
    create_common(m, t, B, seq_parallel, use);
    m->recompute = rc;
    create_scratch(m);
    if (rc == TD_RECOMPUTE_BLOCK) {
        m->acts = td_dev_alloc(block_bytes(&m->d), TD_MEM_ACTS, "recomputed block activations");
        char *cur = (char *)m->acts;
        carve_block(&m->rc_set, &m->d, &cur);
    }
    m->acts_bytes = td_gpt_stage_bytes_use(t, B, seq_parallel, rc, use);
}

void td_gpt_create_stage_rc(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc) {
    td_gpt_create_stage_use(m, t, B, seq_parallel, rc, TD_GPT_TRAIN);
}

void td_gpt_create_stage(td_gpt *m, const td_param_table *t, int B, int seq_parallel) {
    td_gpt_create_stage_rc(m, t, B, seq_parallel, TD_RECOMPUTE_NONE);
}

void td_gpt_create_use(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc, td_gpt_use use) {
    create_common(m, t, B, seq_parallel, use);
    m->recompute = rc;
    const td_gpt_dims *d = &m->d;
    int L = m->cfg.L;
    size_t Ns = d->Ns, C = d->C;

    m->acts = td_dev_alloc(act_bytes(d, L, rc), TD_MEM_ACTS, "activations");
    m->blocks = td_alloc(sizeof(td_block_acts) * (size_t)L, TD_MEM_OTHER); /* host metadata */
    char *cur = (char *)m->acts;
    m->embed.encoded = carve(&cur, A(d, Ns * C));
    for (int l = 0; l < L; l++) {
        if (rc == TD_RECOMPUTE_BLOCK && l > 0) {
            /* the shared set, with this block's own output (the next input) */
            m->blocks[l] = m->blocks[0];
            m->blocks[l].res3 = carve(&cur, A(d, Ns * C));
        } else
            carve_block(&m->blocks[l], d, &cur);
    }
    carve_head(&m->head, d, &cur);
    m->logits = m->head.logits;
    TD_ASSERT((size_t)(cur - (char *)m->acts) == act_bytes(d, L, rc));
    create_scratch(m);
    size_t N = d->N;
    m->inputs = td_dev_alloc(N * sizeof(int), TD_MEM_ACTS, "inputs");
    m->targets = td_dev_alloc(N * sizeof(int), TD_MEM_ACTS, "targets");
    m->acts_bytes = td_gpt_activation_bytes_use(t, B, seq_parallel, rc, use);
}

void td_gpt_create_rc(td_gpt *m, const td_param_table *t, int B, int seq_parallel, td_recompute rc) {
    td_gpt_create_use(m, t, B, seq_parallel, rc, TD_GPT_TRAIN);
}

void td_gpt_create(td_gpt *m, const td_param_table *t, int B, int seq_parallel) {
    td_gpt_create_rc(m, t, B, seq_parallel, TD_RECOMPUTE_NONE);
}

void td_gpt_destroy(td_gpt *m) {
    td_moe_state_destroy(m);
    td_free(m->blocks);
    td_dev_free(m->acts);
    td_dev_free(m->grads_acts);
    td_dev_free(m->inputs);
    td_dev_free(m->targets);
    td_free(m->unit_params);
    td_free(m->unit_grads);
    td_dev_free(m->pos);
    td_gpt_doc_mask(m, -1);
    td_dev_free(m->loss_sum);
    td_dev_free(m->params_lp);
    td_free(m->unit_params_lp);
    td_free(m->lp_src);
    td_free(m->lp_epoch);
    memset(m, 0, sizeof *m);
}

void td_gpt_bind_flat(td_gpt *m, float *params, float *grads) {
    for (int u = 0; u < m->table->n_units; u++) {
        m->unit_params[u] = params ? params + m->table->unit_offset[u] : NULL;
        m->unit_grads[u] = grads ? grads + m->table->unit_offset[u] : NULL;
    }
}

/* Under reduced precision a unit's compute copy is remade on use when its
 * fp32 source is another buffer (a ZeRO-3 gather, a rebinding) or the
 * parameters changed since it was made: checked at every use, so no caller
 * (whole pass, pipeline executor, recomputation) has to say when. */
void *td_m_unit_lp(td_gpt *m, int u) {
    const float *src = m->unit_params[u];
    TD_ASSERT(m->d.lp && src);
    if (m->lp_src[u] != src || m->lp_epoch[u] != m->params_epoch) {
        td_m_round_n(m, m->unit_params_lp[u], src, td_unit_numel(m->table, u));
        m->lp_src[u] = src;
        m->lp_epoch[u] = m->params_epoch;
    }
    return m->unit_params_lp[u];
}

void td_gpt_upload_tokens(const td_gpt *m, int *inputs_dev, const int *inputs, int *targets_dev,
                          const int *targets) {
    size_t N = (size_t)m->d.N;
    /* a target < 0 is ignored (loss 0, no gradient): trident eval's masked positions */
    if (targets)
        for (size_t i = 0; i < N; i++) TD_ASSERT(targets[i] < m->cfg.V);
    td_dev_upload(inputs_dev, inputs, sizeof(int) * N, TD_HOST_TOKENS);
    if (targets) td_dev_upload(targets_dev, targets, sizeof(int) * N, TD_HOST_TOKENS);
}

static void event(td_gpt *m, td_unit_event ev, int unit) {
    if (m->hook) m->hook(m->hook_ctx, ev, unit);
}

/* Input of block l in the whole pass. */
static const td_act *block_input(const td_gpt *m, int l) {
    return l > 0 ? m->blocks[l - 1].res3 : m->embed.encoded;
}

const td_act *td_gpt_forward_blocks(td_gpt *m, int l0, int l1, const td_act *x) {
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

void td_gpt_backward_blocks(td_gpt *m, int l0, int l1, const td_act *x, td_act *dres) {
    TD_ASSERT(0 <= l0 && l0 < l1 && l1 <= m->cfg.L && m->use == TD_GPT_TRAIN);
    for (int l = l1 - 1; l >= l0; l--) {
        int u = td_m_block_unit(l);
        const td_act *in = l > l0 ? m->blocks[l - 1].res3 : x;
        event(m, TD_BWD_BEGIN, u);
        /* the shared set holds another block's tensors: rebuild block l's
         * (its res3 is rewritten with the same bits; nothing reads it again) */
        if (m->recompute == TD_RECOMPUTE_BLOCK) td_gpt_recompute_block(m, l, in, &m->blocks[l]);
        td_block_backward(m, l, in, &m->blocks[l], dres);
        event(m, TD_BWD_END, u);
    }
}

double td_gpt_forward(td_gpt *m, const int *inputs, const int *targets) {
    int L = m->cfg.L;
    /* tensor and context parallelism need their communication */
    TD_ASSERT((m->d.tp == 1 && m->d.cp == 1) || m->comm);
    td_gpt_upload_tokens(m, m->inputs, inputs, m->targets, targets);

    event(m, TD_FWD_BEGIN, 0);
    td_embed_forward(m, m->inputs, &m->embed);
    const td_act *x = td_gpt_forward_blocks(m, 0, L, m->embed.encoded);
    event(m, TD_FWD_BEGIN, L + 1);
    double sum = td_head_forward(m, x, targets ? m->targets : NULL, &m->head);
    event(m, TD_FWD_END, L + 1);
    event(m, TD_FWD_END, 0);
    return sum;
}

void td_gpt_recompute_block(td_gpt *m, int l, const td_act *x, td_block_acts *a) {
    td_moe_set_quiet(m, 1);
    td_block_forward(m, l, x, a);
    td_moe_set_quiet(m, 0);
}

void td_gpt_backward(td_gpt *m, float dloss) {
    TD_ASSERT(m->use == TD_GPT_TRAIN); /* a forward-only model has no gradient buffers */
    int L = m->cfg.L;
    td_gpt_set_dloss(m, dloss);
    event(m, TD_BWD_BEGIN, 0);
    event(m, TD_BWD_BEGIN, L + 1);
    td_head_backward(m, block_input(m, L), m->targets, &m->head, dloss, m->s.dres);
    event(m, TD_BWD_END, L + 1);
    td_gpt_backward_blocks(m, 0, L, m->embed.encoded, m->s.dres);
    td_embed_backward(m, m->inputs, m->s.dres);
    event(m, TD_BWD_END, 0);
}
