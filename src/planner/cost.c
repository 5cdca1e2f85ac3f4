/* The planner's cost model: memory per device and step time of one layout.
 *
 * Time per micro-batch and layer on a device: GEMMs at the device's
 * achievable GEMM rate (peak x gemm_eff, or `local`'s measured rate by
 * size), attention's batched GEMMs at their measured rate, the memory-bound
 * elementwise operations at the achievable memory bandwidth, the
 * tensor-parallel collectives on the node's links. Per step: m micro-batches, the pipeline bubble of the
 * schedule, point-to-point transfers between stages, the data-parallel
 * reduction less what hides behind the backward, the optimizer, and under
 * context parallelism the ring's K/V transfers less what hides behind the
 * attention they feed.
 *
 * Context parallelism (cp devices per sequence): every per-token cost runs
 * on the device's s / cp rows (the model seen with T / cp), attention's
 * products on its s / cp queries against all s keys; parameters do not
 * split, the model state shards over dp x cp (or a shard of it). */
#include <math.h>
#include <string.h>

#include "cost_internal.h"
#include "trident/planner.h"
#include "trident/schedule.h"
#include "trident/state_plan.h"

const char *td_plan_cost_name(int cost) {
    static const char *n[TD_COST_N] = {"compute", "tp comm", "pp p2p", "bubble", "dp comm", "optimizer", "cp ring",
                                       "ep a2a"};
    return n[cost];
}

/* columns of k (and of v): KV heads of C / H */
static double kv_cols(const td_plan_model *m) { return (double)(m->KV ? m->KV : m->H) * (m->C / m->H); }
static int untied(const td_plan_model *m) {
    return m->tie == TD_TIE_OFF || (m->tie == TD_TIE_DEFAULT && pl_llama(m));
}
/* Llama's weight matrices per block: q and o (C x C), k and v (KV hs x C),
 * gate, up and down (F x C) */
static double llama_block_matrices(const td_plan_model *m) {
    double h = m->C;
    return 2 * h * h + 2 * kv_cols(m) * h + 3 * pl_ffn(m) * h;
}
/* The model's config for td_gpt_flops_per_token (the sizes it reads). */
static td_gpt_config gpt_config_of(const td_plan_model *m) {
    return (td_gpt_config){.L = m->L, .H = m->H, .C = m->C, .T = m->T, .V = m->V, .arch = (td_arch)m->arch,
                           .KV = m->KV ? m->KV : m->H, .F = (int)pl_ffn(m), .tie = untied(m) ? TD_TIE_OFF : TD_TIE_ON};
}

static double dense_params(const td_plan_model *m) {
    double l = m->L, h = m->C;
    if (pl_llama(m)) /* blocks with their two RMSNorms, the embedding, the final norm, the head */
        return l * (llama_block_matrices(m) + 2 * h) + (double)m->V * h + h + (untied(m) ? (double)m->V * h : 0);
    return 12 * l * h * h * (1 + 13 / (12 * h) + (m->V + m->T) / (12 * l * h));
}

/* MoE: the dense count with each MoE block's MLP replaced (cost_moe.c) */
double td_plan_params(const td_plan_model *m) {
    return m->E > 0 ? dense_params(m) + pl_moe_params_delta(m, 0) : dense_params(m);
}

static double dense_flops(const td_plan_model *m, double batch, int factor) {
    double l = m->L, h = m->C, s = m->T;
    if (pl_llama(m)) {
        td_gpt_config cfg = gpt_config_of(m);
        return factor / 72.0 * batch * s * td_gpt_flops_per_token(&cfg);
    }
    return factor * batch * s * l * h * h * (1 + s / (6 * h) + m->V / (16 * l * h));
}

/* MoE: 6 FLOPs per active weight and token (72 / 72 of them; 96 with the
 * forward recomputed) for what each MoE block adds: the router's C x E,
 * K + S experts in place of the dense MLP (Megatron-core's count, less the
 * router's, which it leaves out: 0.01% of Mixtral 8x7B's) */
double td_plan_flops(const td_plan_model *m, double batch, int factor) {
    if (m->E <= 0) return dense_flops(m, batch, factor);
    return dense_flops(m, batch, factor) + factor / 72.0 * batch * m->T * 6 * pl_moe_matrices_delta(m);
}

/* A device's s / cp rows; their attention scores span all s keys. */
static double act_bytes_cp(const td_plan_model *m, int b, int tp, int sp, int rc, int cp) {
    double sbh = (double)m->T / cp * b * m->C, t = tp;
    if (rc == TD_PLAN_RC_FULL) return 2 * sbh / (sp ? t : 1); /* the layer's input */
    double per, attn;
    if (pl_llama(m)) {
        /* Korthikanti's accounting for Llama's block (no dropout): 8 sbh
         * unsplit without sequence parallelism (the two RMSNorms' inputs,
         * the q|k|v and gate|up GEMMs' inputs); split by tp: q 2, k and v
         * 2 KV/H each, o's input 2, gate|up 4 F/h and their product 2 F/h;
         * the softmax output 2 a s / h (no dropout mask or output) */
        double split = 4 + 4 * kv_cols(m) / m->C + 6 * pl_ffn(m) / m->C;
        per = sp ? (8 + split) / t : 8 + split / t;
        attn = 2.0 * m->H * m->T / ((double)m->C * t);
    } else {
        /* 34 sbh of the layer's own tensors: 24 of them split by tp; the 10 of
         * LayerNorm and dropout inputs only with sequence parallelism; the
         * 5 a s / h of attention scores go with selective recomputation */
        per = sp ? 34 / t : 10 + 24 / t;
        attn = 5.0 * m->H * m->T / ((double)m->C * t);
    }
    if (rc == TD_PLAN_RC_NONE) per += attn;
    return sbh * per;
}

double td_plan_layer_act_bytes(const td_plan_model *m, int b, int tp, int sp, int rc) {
    return act_bytes_cp(m, b, tp, sp, rc, 1);
}

/* Ranks sharing cores, o threads per core: the costs are at each rank's
 * share of a core, o times its time alone, and so is the bubble the
 * schedule's fraction gives. A rank waiting in the bubble frees its share
 * for the ranks that run (the scheduler is work-conserving), so only cores
 * left with nothing to run are lost. While a pipeline fills and drains, the
 * number of active stages s runs through 1 .. p-1 (twice each: forward and
 * backward), s/p of the ranks: on K cores they leave max(0, 1 - s o / p) of
 * them idle. With a core per rank (o = 1) that sums to (p-1)/2 of the
 * slots, which is the schedule's bubble; the bubble at o is the idle cores'
 * share of that, at full speed (1/o of the shared-rate figure). At p = 2 and
 * 2 ranks per core nothing idles; at p = 4 a lone first or last stage still
 * leaves cores idle. */
double td_plan_bubble_shared(int p, double o) {
    if (p <= 1 || o <= 1) return 1;
    double idle = 0;
    for (int s = 1; s < p; s++) idle += fmax(0, 1 - s * o / p);
    return idle / ((p - 1) / 2.0) / o;
}

int td_plan_inflight(int sched, int p, int m, int v, int stage) {
    if (sched == TD_PLAN_NO_SCHED) return 1;
    if (sched == TD_SCHED_GPIPE) return m;
    if (sched == TD_SCHED_INTERLEAVED) { /* Megatron's warm-up, as src/schedule builds it */
        int warm = m == p ? m * v : 2 * (p - stage - 1) + (v - 1) * p;
        return warm + 1 < m * v ? warm + 1 : m * v;
    }
    return m < p - stage ? m : p - stage;
}

double td_plan_allreduce_s(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

double td_plan_allgather_s(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return (double)(n - 1) / n * bytes / bw + (n - 1) * lat;
}

double td_plan_dp_volume(double psi, int d, int zero, int m) {
    if (d <= 1) return 0;
    double ring = (double)(d - 1) / d, S = 2 * psi;
    if (zero <= 1) return 2 * S * ring;       /* all-reduce, or reduce-scatter + all-gather */
    if (zero == 2) return (m + 1) * S * ring; /* reduce-scatter per micro-batch, one gather */
    return 3.0 * m * S * ring;                /* gather forward, gather backward, reduce-scatter */
}

/* Parameters one device holds: the layers of a stage split by tp (their
 * biases and norms replicated), with the vocabulary-parallel embedding (and
 * gpt2's positions) on the first stage and on the last the head: the tied
 * copy, or the untied head (a single stage holds both); llama's final norm
 * on the last (gpt2's, like eq. 2, is left out). */
static double layer_params(const td_plan_model *m, int tp) {
    double h = m->C;
    if (pl_llama(m)) return llama_block_matrices(m) / tp + 2 * h;
    return 12 * h * h / tp + 13 * h;
}
static double stage_params(const td_plan_model *m, int tp, int pp, int first, int last) {
    double h = m->C, p = (double)m->L / pp * layer_params(m, tp) + (double)m->V * h / tp;
    if (first && last && untied(m)) p += (double)m->V * h / tp;
    if (last && pl_llama(m)) p += h;
    return first && !pl_llama(m) ? p + (double)m->T * h : p;
}

/* Elementwise bytes of one layer's forward per micro-batch. gpt2:
 * LayerNorms and bias-dropout-residual adds (10 h elements of 2 bytes and
 * 2 h one-byte masks per token, split only with sequence parallelism), GeLU
 * (8 h), softmax and attention dropout (4 a s elements and an a s mask)
 * split by tp. llama: RMSNorms and residual adds (10 h elements), split by
 * tp rotary positions on q and k (read and written in place), SwiGLU (gate
 * and up read, F written) and softmax (4 a s bytes). */
static double layer_ew_bytes(const td_plan_model *m, int b, int tp, int sp, int cp) {
    double h = m->C, as = (double)m->H * m->T; /* a device's s / cp rows against all s keys */
    if (pl_llama(m))
        return (double)b * m->T / cp *
               (20 * h / (sp ? tp : 1) + (4 * (h + kv_cols(m)) + 6 * pl_ffn(m) + 4 * as) / tp);
    return (double)b * m->T / cp * (22 * h / (sp ? tp : 1) + (16 * h + 9 * as) / tp);
}

/* Bytes the loss moves per logit (b s V / t of them on the last stage). In
 * mixed precision as Megatron-LM's vocab-parallel cross entropy runs it
 * (megatron/mpu/cross_entropy.py, 2021, on logits cast with .float()): the
 * cast (2 read, 4 written), the max (4), its subtraction in place (8), exp
 * in place (8), the sum (4), the division in place to the softmax kept for
 * the backward (8); backward: scaling it in place by the loss's gradient (8)
 * and the cast back to 2 bytes (6): 52. The fp32 engine (`local`): 4 fp32
 * passes. */
static double loss_bytes_per_logit(const td_plan_cluster *c) { return c->elem_bytes == 4 ? 16 : 52; }

/* Bytes the optimizer step moves per owned parameter. In mixed precision as
 * Megatron-LM's FP16OptimizerWithFP16Params.step runs it
 * (megatron/optimizer/optimizer.py, 2021): the fp32 gradient made from the
 * 2-byte one (2 read, 4 written), unscaled and checked for inf/nan (8), its
 * norm for clipping (4), Adam (gradient, master, m, v read, the last three
 * written: 28), the 2-byte parameters copied from the master (6): 52; the
 * clipping's scaling, when the norm exceeds the limit, is 8 more. The fp32
 * engine (`local`): AdamW's master, m, v read and written and the gradient
 * read, 28. */
static double optim_bytes_per_param(const td_plan_cluster *c) { return c->elem_bytes == 4 ? 28 : 52; }

/* Members of one dp group on a node: ranks are tp fastest, then dp, then pp
 * (include/trident/grid.h; Megatron-LM's initialize_model_parallel orders
 * them alike), so a group's members sit tp apart and G / tp of them share a
 * node, all of it when the group is smaller. */
static int dp_per_node(int t, int d, int G) {
    int k = t < G ? G / t : 1;
    return k < d ? k : d;
}

/* Bus bandwidth of a dp group's ring collectives. Across nodes NCCL runs one
 * ring (channel) per network port, each crossing between nodes on its own
 * port, so a group with k members on a node drives k of the node's ports (one
 * per GPU; the tp peers' k-member groups run beside it on the others): 3 nodes
 * of 8 A100 with 4 HDR ports reach 96 GB/s, the 4 ports' line rate (the
 * measurement behind IB_ACHIEVED, src/planner/presets.c), not one port's
 * 24. Never above the node's links, which carry the same ring. */
static double dp_bus_bw(const td_plan_cluster *c, int t, int d) {
    int G = c->gpus_per_node, k = dp_per_node(t, d, G);
    if (k == d) return c->intra_bw;
    return fmin(c->intra_bw, k * c->inter_bw);
}

/* MoE: a stage's non-expert parameters (each MoE block's router and shared
 * experts in place of the dense MLP) into *psi0 and *psiL (the first and
 * last stage), its experts' into *x0 and *xL (0 for a dense model). */
static void stage_moe_params(const td_plan_model *m, const td_plan_layout *l, double *psi0, double *psiL, double *x0,
                             double *xL) {
    *x0 = *xL = 0;
    if (m->E <= 0) return;
    int p = l->pp, v = l->sched == TD_SCHED_INTERLEAVED ? l->v : 1, t = l->tp;
    int n0 = pl_moe_on_stage(m, p, v, 0), nL = pl_moe_on_stage(m, p, v, p - 1);
    double block = pl_moe_block_params(m, t) - pl_dense_mlp_params(m, t);
    double experts = pl_moe_expert_params(m, td_plan_ep(l), td_plan_etp(l));
    *psi0 += n0 * block, *psiL += nL * block;
    *x0 = n0 * experts, *xL = nL * experts;
}

/* Memory of the first stage (most activations in flight) and of the last
 * (the logits); the larger goes to e. Model states are the ZeRO paper's
 * (2 + 2 + 12) psi from the engine's state plan; MoE experts' apart,
 * sharded over edp. */
static void plan_memory(const td_plan_model *m, const td_plan_cluster *c, const td_plan_layout *l, td_plan_eval *e) {
    int t = l->tp, p = l->pp, d = td_plan_shards(l), b = l->micro_batch, mb = l->micro_batches;
    int v = l->sched == TD_SCHED_INTERLEAVED ? l->v : 1, cp = td_plan_cp(l);
    td_plan_model local = *m; /* a device's rows of each sequence */
    local.T = m->T / cp;
    double h = m->C, s = local.T, lps = (double)m->L / p;
    double psi0 = stage_params(m, t, p, 1, p == 1), psiL = stage_params(m, t, p, p == 1, 1), x0, xL;
    stage_moe_params(m, l, &psi0, &psiL, &x0, &xL);
    /* mixed precision's (2 + 2 + 12) psi; fp32 elements on `local` (the
     * engine there trains in fp32: 4 + 4 + 8 psi) */
    double eb = c->elem_bytes ? c->elem_bytes / 2.0 : 1;
    td_state_elem mixed = c->elem_bytes == 4 ? td_state_elem_engine(0) : td_state_elem_mixed();
    double act_l = eb * act_bytes_cp(m, b, t, l->sp, l->rc, cp);
    double work = l->rc == TD_PLAN_RC_NONE ? 0 : eb * act_bytes_cp(m, b, t, l->sp, TD_PLAN_RC_NONE, cp);
    /* a layer's average activations on the first and last stage: MoE
     * blocks keep their experts' in place of the dense MLP's */
    double per0 = act_l, perL = act_l, comm = 0;
    pl_moe_block blk = {0};
    if (m->E > 0) {
        pl_moe_block_cost(m, c, l, eb, 0, &blk);
        int n0 = pl_moe_on_stage(m, p, v, 0), nL = pl_moe_on_stage(m, p, v, p - 1);
        double delta = blk.act - blk.dense_act, act_m = l->rc == TD_PLAN_RC_FULL ? act_l : act_l + delta;
        per0 = ((lps - n0) * act_l + n0 * act_m) / lps, perL = ((lps - nL) * act_l + nL * act_m) / lps;
        if (work > 0 && delta > 0) work += delta; /* the recomputed layer an MoE block */
        if (n0 || nL) comm += blk.buf;            /* the dropless worst case, a block at a time */
    }
    double acts0 = td_plan_inflight(l->sched, p, mb, v, 0) * lps / v * per0 + work;
    double logits = 4.0 * s * b * m->V / t; /* fp32 logits for the loss */
    double actsL = (p == 1 ? acts0 : td_plan_inflight(l->sched, p, mb, v, p - 1) * lps / v * perL + work) + logits;
    if (l->zero == 3) { /* two layers gathered (prefetch): an MoE block's with its experts */
        double lay = layer_params(m, t);
        if (m->E > 0) lay += fmax(0, pl_moe_block_params(m, t) - pl_dense_mlp_params(m, t) +
                                         pl_moe_expert_params(m, td_plan_ep(l), td_plan_etp(l)));
        comm += 2 * 2 * eb * lay;
    }
    if (p > 1) comm += 2 * 2 * eb * s * b * h / (l->sp ? t : 1); /* send and receive buffers */
    if (cp > 1) { /* the ring's 4 K/V blocks, as the engine's plan counts them
                   * (td_cp_ring_plan_bytes): held in the MLP backward's
                   * scratch, idle while attention runs (td_gpt_cp_scratch_bytes:
                   * the first MLP GEMM's output gradient and the second's
                   * input gradient, F1 + F columns), own memory only where
                   * they do not fit there */
        double blocks = 4 * 2 * eb * s * b * 2 * kv_cols(m) / t;
        double lent = 2 * eb * s * b * ((pl_llama(m) ? 2 : 1) * pl_ffn(m) + pl_ffn(m)) / t;
        if (blocks > lent) comm += blocks;
    }
    int edp = td_plan_edp(l);
    double st0 = td_state_total(td_state_plan(psi0, d, l->zero, mixed));
    double stL = td_state_total(td_state_plan(psiL, d, l->zero, mixed));
    if (x0 > 0) st0 += td_state_total(td_state_plan(x0, edp, l->zero, mixed));
    if (xL > 0) stL += td_state_total(td_state_plan(xL, edp, l->zero, mixed));
    double mem0 = st0 + acts0, memL = stL + actsL;
    int last = memL > mem0;
    e->mem_states = last ? stL : st0;
    e->mem_acts = last ? actsL : acts0;
    e->mem_comm = comm;
    e->mem_bytes = e->mem_states + e->mem_acts + comm;
}

void td_plan_evaluate(const td_plan_model *m, const td_plan_cluster *c, int global_batch,
                      const td_plan_layout *l, td_plan_eval *e) {
    memset(e, 0, sizeof *e);
    e->lay = *l;
    plan_memory(m, c, l, e);
    int t = l->tp, p = l->pp, b = l->micro_batch, mb = l->micro_batches, G = c->gpus_per_node;
    int v = l->sched == TD_SCHED_INTERLEAVED ? l->v : 1, cp = td_plan_cp(l);
    int d = l->dp * cp, k = td_plan_shards(l); /* the gradient group; ZeRO's shard of it */
    td_plan_model local = *m; /* a device's s / cp rows of each sequence */
    local.T = m->T / cp;
    double h = m->C, s = local.T, s_all = m->T, lps = (double)m->L / p, eb = c->elem_bytes ? c->elem_bytes / 2.0 : 1;
    double psi0 = stage_params(m, t, p, 1, p == 1), psiL = stage_params(m, t, p, p == 1, 1), x0, xL;
    stage_moe_params(m, l, &psi0, &psiL, &x0, &xL);
    double psi = psi0 > psiL ? psi0 : psiL, logits = 4.0 * s * b * m->V / t;
    double px = x0 > xL ? x0 : xL; /* MoE: the expert parameters (0: dense) */
    int edp = td_plan_edp(l);

    /* one layer, one micro-batch */
    /* the dense GEMMs (QKV, projection, MLP) at the GEMM rate; attention's
     * per-head batched GEMMs (scores and their product with the values,
     * inner size h/a) at their own measured rate: they write or read an
     * a s^2 matrix per 2 h/a FLOPs per element, so memory-bound */
    double bs = (double)b * s, hd = h / m->H;
    double bmm = c->bmm_flops > 0 ? c->bmm_flops : td_plan_gemm_rate(c, s, s_all, hd);
    double gemm_t = 2 * bs * h * (3 * h / t) / td_plan_gemm_rate(c, bs, 3 * h / t, h) +  /* QKV */
                    2 * bs * (h / t) * h / td_plan_gemm_rate(c, bs, h, h / t) +          /* projection */
                    2 * 2 * bs * h * (4 * h / t) / td_plan_gemm_rate(c, bs, 4 * h / t, h); /* MLP */
    if (pl_llama(m)) { /* q|k|v of h + 2 KV hs columns; gate|up (2F) and down (F) */
        double qkv = (h + 2 * kv_cols(m)) / t, f = pl_ffn(m) / t;
        gemm_t = 2 * bs * h * qkv / td_plan_gemm_rate(c, bs, qkv, h) +
                 2 * bs * (h / t) * h / td_plan_gemm_rate(c, bs, h, h / t) +
                 2 * bs * h * 2 * f / td_plan_gemm_rate(c, bs, 2 * f, h) +
                 2 * bs * f * h / td_plan_gemm_rate(c, bs, h, f);
    }
    double attn_gemm = 4 * b * s * s_all * h / t; /* local queries, every key */
    /* the scores' softmax (and gpt2's dropout): 4 (9) bytes per score */
    double ew = eb * layer_ew_bytes(m, b, t, l->sp, cp);
    double attn_ew = eb * (double)b * s * (pl_llama(m) ? 4 : 9) * m->H * s_all / t;
    /* at the bandwidth of the largest tensor an elementwise op streams (in
     * and out): GeLU's 4h wide one (SwiGLU's 2F in, F out), or the attention
     * scores */
    double ws = 2 * eb * 2 * bs * fmax(4 * h / t, (double)m->H * s_all / t);
    if (pl_llama(m)) ws = 2 * eb * bs * fmax(3 * pl_ffn(m) / t, 2.0 * m->H * s_all / t);
    double mbw = td_plan_mem_rate(c, ws);
    double tf = gemm_t + attn_gemm / bmm + ew / mbw;
    /* backward: twice the FLOPs; each elementwise op's backward moves 3
     * tensors for its forward's 2 */
    double tb = 2 * (gemm_t + attn_gemm / bmm) + 1.5 * ew / mbw;
    double trc = l->rc == TD_PLAN_RC_FULL ? tf
                 : l->rc == TD_PLAN_RC_SELECTIVE ? attn_gemm / bmm + attn_ew / mbw : 0;
    /* tp: f/g operators, 2 in the forward, 2 in the backward, 2 more when
     * the forward reruns; all-gather + reduce-scatter with sp */
    double n_tp = 2 * eb * b * s * h, g_op = 0;
    if (t > 1) {
        double bw = t <= G ? c->intra_bw : c->inter_bw, lat = t <= G ? c->intra_lat : c->inter_lat;
        g_op = l->sp ? 2 * td_plan_allgather_s(n_tp, t, bw, lat) : td_plan_allreduce_s(n_tp, t, bw, lat);
    }
    double ttp = g_op * (4 + (l->rc == TD_PLAN_RC_FULL ? 2 : 0));
    /* the output layer and loss on the last stage: 6 b s h V / t GEMM FLOPs,
     * the loss's passes over the logits */
    double head = 6 * bs * h * m->V / t / td_plan_gemm_rate(c, bs, (double)m->V / t, h) +
                  loss_bytes_per_logit(c) * logits / 4 / td_plan_mem_rate(c, logits);
    double comp_mb = lps * (tf + tb + trc) + head, tp_mb = lps * ttp;
    if (m->E > 0) {
        /* the busiest stage's MoE blocks: the dense MLP's GEMMs, elementwise
         * passes and collectives replaced by the block's (cost_moe.c); its
         * all-to-all forward, backward, and again when the forward reruns */
        pl_moe_block blk;
        pl_moe_block_cost(m, c, l, eb, g_op, &blk);
        double f = pl_ffn(m) / t, mlp_t = 2 * 2 * bs * h * (4 * h / t) / td_plan_gemm_rate(c, bs, 4 * h / t, h);
        if (pl_llama(m))
            mlp_t = 2 * bs * h * 2 * f / td_plan_gemm_rate(c, bs, 2 * f, h) + 2 * bs * f * h / td_plan_gemm_rate(c, bs, h, f);
        double gm = gemm_t - mlp_t + blk.gemm_s, ewm = ew - blk.dense_ew_bytes + blk.ew_bytes;
        double tfm = gm + attn_gemm / bmm + ewm / mbw, tbm = 2 * (gm + attn_gemm / bmm) + 1.5 * ewm / mbw;
        double trcm = l->rc == TD_PLAN_RC_FULL ? tfm : trc, again = 2 + (l->rc == TD_PLAN_RC_FULL);
        int nm = pl_moe_busiest(m, p, v);
        comp_mb = (lps - nm) * (tf + tb + trc) + nm * (tfm + tbm + trcm) + head;
        tp_mb = (lps - nm) * ttp + nm * (g_op + blk.tp_s) * again;
        e->t[TD_COST_EP] = mb * nm * blk.a2a_s * again;
    }
    /* each micro-batch after the first adds its weight gradients into the
     * accumulated ones (autograd keeps the first's as they are); ZeRO-2 and
     * 3 keep only the reduce-scattered shard (the experts' over edp) */
    double acc_elems = l->zero >= 2 ? psi / k : psi;
    if (px > 0) acc_elems += l->zero >= 2 ? px / edp : px;
    double acc_bytes = c->grad_acc_bytes * acc_elems;
    double acc = acc_bytes > 0 ? (mb - 1) * acc_bytes / td_plan_mem_rate(c, acc_bytes) : 0;
    e->t[TD_COST_COMPUTE] = mb * comp_mb + acc;
    e->t[TD_COST_TP] = mb * tp_mb;
    if (p > 1) {
        /* each stage sends one activation forward and one gradient back per
         * micro-batch and chunk; with tp > 1 as 1/t scatters, re-gathered on
         * the node (Megatron's scatter/gather) */
        int cross = t * p > G;
        double bw = cross ? c->inter_bw : c->intra_bw, lat = cross ? c->inter_lat : c->intra_lat;
        double x = n_tp / t / bw + lat;
        if (t > 1 && !l->sp) x += td_plan_allgather_s(n_tp, t, c->intra_bw, c->intra_lat);
        if (c->p2p_bw > 0) /* `local`: trident's engine sends each tp rank's rows, all of
                            * them without sequence parallelism (src/parallel/pp.c) */
            x = n_tp / (l->sp ? t : 1) / c->p2p_bw + c->p2p_lat;
        e->t[TD_COST_PP] = mb * 2.0 * v * x;
        double frac = td_schedule_bubble_theory((td_sched_kind)l->sched, p, mb, v, 1, 2, 0);
        e->t[TD_COST_BUBBLE] = frac * (e->t[TD_COST_COMPUTE] + e->t[TD_COST_TP]);
        if (m->E > 0) e->t[TD_COST_BUBBLE] += frac * e->t[TD_COST_EP]; /* the all-to-all waits in it too */
    }
    if (cp > 1) {
        /* Per layer and micro-batch the ring sends cp - 1 K/V blocks
         * forward and cp - 1 K/V plus cp dK/dV blocks backward (a block: 2 b
         * s/cp KV hs/t elements, trident's td_cp_ring_formula); each step's
         * transfer hides behind the attention of the block before it. The
         * cp peers sit tp apart (order tp-cp-dp-pp): on a node while t cp
         * fits. */
        int cross = t * cp > G;
        double bw = cross ? c->inter_bw : c->intra_bw, lat = cross ? c->inter_lat : c->intra_lat;
        double blk = 2 * eb * 2.0 * b * s * kv_cols(m) / t, af = attn_gemm / bmm;
        double fwd = (cp - 1) * (blk / bw + lat), bwd = (2 * cp - 1) * (blk / bw + lat);
        double ring = fmax(0, fwd - af) * (l->rc == TD_PLAN_RC_FULL ? 2 : 1) + fmax(0, bwd - 2 * af);
        e->t[TD_COST_CP] = mb * lps * ring;
    }
    /* MoE: the experts' gradients reduce over edp, whose members sit
     * etp x ep apart (the experts' order etp-ep-edp-pp), after the dense
     * part's on the same links */
    double piece_x = 0;
    if (px > 0 && edp > 1) {
        int ex = td_plan_etp(l) * td_plan_ep(l), xcross = dp_per_node(ex, edp, G) < edp;
        piece_x = eb * td_plan_dp_volume(px, edp, 0, 1) / 2 / dp_bus_bw(c, ex, edp) +
                  (lps + 1) * (edp - 1) * (xcross ? c->inter_lat : c->intra_lat);
    }
    if (d > 1 || piece_x > 0) {
        /* A piece is one ring collective of the stage's 2-byte parameters or
         * gradients, one call per layer (bucket). */
        int cross = dp_per_node(t, k, G) < k;
        double bw = dp_bus_bw(c, t, k), lat = cross ? c->inter_lat : c->intra_lat;
        double piece = k > 1 ? eb * td_plan_dp_volume(psi, k, 0, 1) / 2 / bw + (lps + 1) * (k - 1) * lat : 0;
        if (piece_x > 0) piece += piece_x;
        /* hybrid sharding: the d / k replicas of each shard all-reduce its
         * gradient sum after the backward (trident's engine: exposed), one
         * member per node each, on the node's ports side by side */
        int R = d / k;
        double rep = 0;
        if (R > 1) {
            int rcross = (long)k * t * R > G;
            rep = td_plan_allreduce_s(2 * eb * psi / k, R, rcross ? c->inter_bw : c->intra_bw,
                                      rcross ? c->inter_lat : c->intra_lat);
        }
        /* software that reduces after the backward hides nothing */
        double bwd = c->dp_serial ? 0 : lps * (tb + trc), exposed;
        if (l->zero == 0) /* buckets all-reduce during the last micro-batch's backward */
            exposed = fmax(0, 2 * piece - bwd);
        else if (l->zero == 1) /* reduce-scatter there, gather the parameters after the update */
            exposed = piece + fmax(0, piece - bwd);
        else if (l->zero == 2) /* reduce-scatter beside every micro-batch's backward */
            exposed = piece + mb * fmax(0, piece - bwd);
        else /* gather, gather, reduce-scatter beside every micro-batch's forward and backward */
            exposed = mb * fmax(0, 3 * piece - (c->dp_serial ? 0 : lps * (tf + tb + trc)));
        e->t[TD_COST_DP] = exposed + rep;
        e->dp_traffic_s = piece * (l->zero <= 1 ? 2 : l->zero == 2 ? mb + 1 : 3.0 * mb) + rep;
    }
    /* the optimizer step over the owned parameters: on `local` at the
     * engine's measured rate per element, elsewhere memory-bound */
    double owned = l->zero >= 1 ? psi / k : psi;
    if (px > 0) owned += l->zero >= 1 ? px / edp : px;
    double ob = owned * optim_bytes_per_param(c);
    e->t[TD_COST_OPTIM] = c->optim_rate > 0 ? owned / c->optim_rate : ob / td_plan_mem_rate(c, ob);

    if (c->oversub > 1) e->t[TD_COST_BUBBLE] *= td_plan_bubble_shared(p, c->oversub);
    e->step_s = 0;
    e->dominant = 0;
    double worst = 0;
    for (int i = 0; i < TD_COST_N; i++) {
        e->step_s += e->t[i];
        double w = i == TD_COST_DP && e->t[i] > 0 ? e->dp_traffic_s : e->t[i];
        if (w > worst) worst = w, e->dominant = i;
    }
    double gpus = (double)d * t * p; /* d counts dp x cp */
    e->tflops_per_device = td_plan_flops(m, global_batch, l->rc == TD_PLAN_RC_FULL ? 96 : 72) / (gpus * e->step_s) / 1e12;
    e->mfu = td_plan_flops(m, global_batch, 72) / (gpus * e->step_s * c->peak_flops);
}
