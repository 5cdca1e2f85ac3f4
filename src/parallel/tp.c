/* Tensor parallelism: the model's communication table (td_model_comm) over
 * the grid's tp group, and the accounting of what it moves. The model
 * decides where f and g sit (src/model); this file only carries them out,
 * so the model links without MPI. Payload bytes are read from the comm
 * layer's own trace around each call, not computed here, so the benchmark's
 * comparison with the formula checks what really went through the group. */
#include "trident/parallel.h"
#include "trident/ep.h"

#include <string.h>

#include "trident/base.h"

static void account(td_tp_comm *c, int op, uint64_t before) {
    c->calls[op]++;
    c->bytes[op] += td_comm_bytes() - before;
}

static void tp_allreduce(void *ctx, float *buf, size_t n, td_reduce_op op) {
    td_tp_comm *c = ctx;
    uint64_t before = td_comm_bytes();
    td_allreduce(c->group, buf, n, TD_F32, op == TD_REDUCE_MAX ? TD_MAX : TD_SUM);
    account(c, TD_TP_ALLREDUCE, before);
}

static void seq_all_gather(void *ctx, float *out, const float *in, size_t n_local) {
    td_tp_comm *c = ctx;
    uint64_t before = td_comm_bytes();
    td_all_gather(c->group, in, out, n_local, TD_F32);
    account(c, TD_TP_ALL_GATHER, before);
}

static void seq_reduce_scatter(void *ctx, float *out, const float *in, size_t n_local) {
    td_tp_comm *c = ctx;
    uint64_t before = td_comm_bytes();
    td_reduce_scatter(c->group, in, out, n_local, TD_F32);
    account(c, TD_TP_REDUCE_SCATTER, before);
}

void td_tp_comm_init(td_tp_comm *c, const td_grid *g) {
    memset(c, 0, sizeof *c);
    c->group = g->axis[TD_TP].comm;
    c->size = g->axis[TD_TP].size;
    c->ops = (td_model_comm){.ctx = c, .tp_allreduce = tp_allreduce, .seq_all_gather = seq_all_gather,
                             .seq_reduce_scatter = seq_reduce_scatter};
}

const td_model_comm *td_tp_comm_ops(const td_tp_comm *c) {
    return c->size > 1 || c->ops.cp_ctx || c->ops.moe_ctx ? &c->ops : NULL;
}

void td_tp_comm_reset(td_tp_comm *c) {
    memset(c->calls, 0, sizeof c->calls);
    memset(c->bytes, 0, sizeof c->bytes);
}

size_t td_tp_comm_plan_bytes(const td_param_table *t, int B, int seq_parallel) {
    if (t->tp == 1 || !seq_parallel) return 0;
    /* Sequence parallelism reduce-scatters from model scratch, which is no
     * shared buffer, so the comm layer sends MPI pieces: one piece moves
     * piece / (tp x 4) elements of every rank's block, and anything larger
     * than one piece is packed into a scratch buffer of the comm layer's
     * blocking request (kept, so its peak is the largest). All-gathers and
     * all-reduces need none. */
    size_t tp = (size_t)t->tp, count = (size_t)B * (t->cfg.T / t->cp) / tp * (size_t)t->cfg.C;
    size_t piece_elems = td_max_sz(1, td_comm_piece_bytes() / (tp * sizeof(float)));
    if (count <= piece_elems) return 0; /* one piece: MPI reads the input as it is */
    return piece_elems * tp * sizeof(float);
}

void td_tp_formula_stage(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro, int tp,
                         int seq_parallel, int n_blocks, int embed, int head) {
    memset(f, 0, sizeof *f);
    if (tp == 1) return;
    uint64_t NC = (uint64_t)B * cfg->T * cfg->C * sizeof(float), N = (uint64_t)B * cfg->T * 4;
    uint64_t L = (uint64_t)n_blocks, K = (uint64_t)n_micro;
    /* per block: attention and MLP, a g in forward and an f in backward each;
     * plus the embedding's g (forward) and the tied head's f (backward) */
    uint64_t big = (4 * L + (uint64_t)embed + (uint64_t)head) * K;
    /* the loss: each row's max, sum of exponentials and target logit */
    f->calls[TD_TP_ALLREDUCE] = head ? 3 * K : 0;
    f->bytes[TD_TP_ALLREDUCE] = head ? 3 * N * K : 0;
    if (seq_parallel) {
        f->calls[TD_TP_ALL_GATHER] = f->calls[TD_TP_REDUCE_SCATTER] = big;
        f->bytes[TD_TP_ALL_GATHER] = f->bytes[TD_TP_REDUCE_SCATTER] = big * NC;
        /* the replicated LayerNorms' partial gradients (ln_1, ln_2, ln_f) */
        uint64_t norms = (2 * L + (uint64_t)head) * K;
        f->calls[TD_TP_ALLREDUCE] += norms;
        f->bytes[TD_TP_ALLREDUCE] += norms * 2 * (uint64_t)cfg->C * sizeof(float);
    } else {
        f->calls[TD_TP_ALLREDUCE] += big;
        f->bytes[TD_TP_ALLREDUCE] += big * NC;
    }
}

void td_tp_formula_add_recompute(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro,
                                 int tp, int seq_parallel, int n_blocks) {
    if (tp == 1) return;
    uint64_t NC = (uint64_t)B * cfg->T * cfg->C * sizeof(float);
    /* a block's forward: ln_1 and ln_2 feed column-parallel projections (f:
     * an all-gather with sequence parallelism, nothing without), attention
     * and MLP outputs leave row-parallel ones (g: a reduce-scatter, or an
     * all-reduce) */
    uint64_t g = 2 * (uint64_t)n_blocks * (uint64_t)n_micro;
    if (seq_parallel) {
        f->calls[TD_TP_ALL_GATHER] += g, f->bytes[TD_TP_ALL_GATHER] += g * NC;
        f->calls[TD_TP_REDUCE_SCATTER] += g, f->bytes[TD_TP_REDUCE_SCATTER] += g * NC;
    } else {
        f->calls[TD_TP_ALLREDUCE] += g, f->bytes[TD_TP_ALLREDUCE] += g * NC;
    }
}

void td_tp_formula(td_tp_traffic *f, const td_gpt_config *cfg, int B, int n_micro, int tp,
                   int seq_parallel) {
    td_tp_formula_stage(f, cfg, B, n_micro, tp, seq_parallel, cfg->L, 1, 1);
}

size_t td_tp_gather_scratch_floats(const td_param_table *t, const td_param_table *canon) {
    size_t unit = 0, cunit = 0;
    for (int u = 0; u < t->n_units; u++) unit = td_max_sz(unit, td_unit_numel(t, u));
    if (t->tp == 1 && t->ep == 1) return unit;
    for (int u = 0; u < canon->n_units; u++) cunit = td_max_sz(cunit, td_unit_numel(canon, u));
    if (t->ep > 1) return unit + (size_t)t->tp * unit + (size_t)(t->ep + 2) * cunit; /* td_ep_gather_unit */
    return unit + (size_t)t->tp * unit + cunit;
}

const float *td_tp_gather_unit(td_dp *dp, const td_grid *g, const td_param_table *t,
                               const td_param_table *canon, int section, int u, float *scratch,
                               const td_param_table **layout) {
    if (t->ep > 1) return td_ep_gather_unit(dp, g, t, canon, section, u, scratch, layout);
    *layout = t;
    const float *mine = td_dp_gather_unit(dp, section, u, scratch); /* on dp rank 0 */
    if (t->tp == 1) return mine;
    *layout = canon;
    if (!mine) return NULL;
    /* the dp rank 0 of every tp rank holds its slices: gather them ... */
    size_t unit = 0, n = td_unit_numel(t, u);
    for (int k = 0; k < t->n_units; k++) unit = td_max_sz(unit, td_unit_numel(t, k));
    float *all = scratch + unit, *out = all + (size_t)t->tp * unit;
    td_all_gather(g->axis[TD_TP].comm, mine, all, n, TD_F32);
    if (g->axis[TD_TP].rank != 0) return NULL;
    td_tp_place_unit(t, canon, u, all, out);
    return out;
}

void td_tp_place_unit(const td_param_table *t, const td_param_table *canon, int u, const float *all, float *out) {
    size_t n = td_unit_numel(t, u);
    /* each element at its global index (padding rows stay 0) */
    memset(out, 0, td_unit_numel(canon, u) * sizeof(float));
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->unit != u) continue;
        float *dst = out + (canon->rows[i].offset - canon->unit_offset[u]);
        for (int r = 0; r < t->tp; r++) {
            const float *src = all + (size_t)r * n + (p->offset - t->unit_offset[u]);
            for (size_t k = 0; k < p->numel; k++) {
                long long gi = td_param_global_index(t, p, r, k);
                if (gi >= 0) dst[gi] = src[k];
            }
        }
    }
}
