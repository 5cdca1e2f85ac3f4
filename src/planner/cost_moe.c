/* The planner's cost model of mixture-of-experts blocks (cost_internal.h):
 * their parameters, FLOPs, memory and time on a device, and expert
 * parallelism's all-to-all.
 *
 * Grid. As in Megatron-core's parallel folding, the experts have a grid of
 * their own over the same ranks: etp x ep x edp x pp = the devices, the
 * dense part's tp x cp x dp folded into the experts' etp x ep x edp (etp
 * divides tp; ep divides tp x cp x dp / etp and the experts). Ranks are
 * tp fastest, then cp, dp, pp for the dense part and etp, ep, edp, pp for
 * the experts, so an ep group's members sit etp apart and span etp x ep
 * consecutive ranks: inside a node while that fits, else G / etp of them
 * per node. Non-expert parameters reduce over dp x cp, expert parameters
 * over edp (whose members sit etp x ep apart).
 *
 * A block on a device (per micro-batch of b sequences): each tp rank routes
 * and dispatches its own b s / (cp tp) rows (sequence parallelism, which
 * an MoE model with tp > 1 needs: the rules table's moe-tp-sp). Each row
 * goes to K experts; routing is taken as uniform on average (what the load
 * balancing loss aims at), so (ep - 1) / ep of the copies leave the rank
 * and a device's E / ep experts take b s K etp / (cp tp) rows in all (the
 * etp group gathers its members' rows), b s K etp ep / (cp tp E) each,
 * run one expert after another at the GEMM rate of that shape. The
 * all-to-all sends each copy out (dispatch) and back (combine), forward
 * and backward again, and is not hidden behind compute (Megatron-core
 * 0.8's alltoall dispatcher runs it in line).
 *
 * Memory: the expert state is E / ep experts of 1 / etp each per MoE
 * block, ZeRO-sharded over edp; activations kept for the backward at the
 * average routing; plus, once (a block at a time), the worst case of a
 * dropless dispatch beyond that average: every row of the ep group's
 * micro-batch routed to one rank's experts, min(K, E / ep) copies of each,
 * with the experts' input, output and hidden features for them. */
#include <math.h>

#include "cost_internal.h"

/* the weight matrices alone (what GEMMs meet), and with gpt2's biases */
static double mlp_matrices(const td_plan_model *m, double f) { return (pl_llama(m) ? 3 : 2) * f * m->C; }
double pl_mlp_params(const td_plan_model *m, double f) {
    return pl_llama(m) ? mlp_matrices(m, f) : mlp_matrices(m, f) + f + m->C;
}

int td_plan_moe_layers_in(const td_plan_model *m, int lo, int hi) {
    if (m->E <= 0 || hi <= lo) return 0;
    int n = m->moe_every > 1 ? m->moe_every : 1;
    return (hi + n - 1) / n - (lo + n - 1) / n; /* multiples of n in [lo, hi) */
}

int td_plan_moe_layers(const td_plan_model *m) { return td_plan_moe_layers_in(m, 0, m->L); }

int pl_moe_on_stage(const td_plan_model *m, int p, int v, int stage) {
    int per = m->L / (p * v), n = 0;
    for (int j = 0; j < v; j++) {
        int lo = (j * p + stage) * per;
        n += td_plan_moe_layers_in(m, lo, lo + per);
    }
    return n;
}

int pl_moe_busiest(const td_plan_model *m, int p, int v) {
    int most = 0;
    for (int s = 0; s < p; s++) {
        int n = pl_moe_on_stage(m, p, v, s);
        if (n > most) most = n;
    }
    return most;
}

/* shared experts: one MLP of S x the expert's width (Megatron-core's
 * --moe-shared-expert-intermediate-size) */
static double shared_ffn(const td_plan_model *m) { return m->S * pl_expert_ffn(m); }

/* the router's C x E, the E experts (or the K active), the shared ones, in
 * place of the dense MLP of F: what an MoE block adds to a dense block */
static double moe_block_delta(const td_plan_model *m, int experts, double (*mlp)(const td_plan_model *, double)) {
    double fx = pl_expert_ffn(m), h = m->C;
    return (double)m->E * h + experts * mlp(m, fx) + (m->S ? mlp(m, shared_ffn(m)) : 0) - mlp(m, pl_ffn(m));
}

double pl_moe_params_delta(const td_plan_model *m, int active) {
    return td_plan_moe_layers(m) * moe_block_delta(m, active ? pl_top_k(m) : m->E, pl_mlp_params);
}

double pl_moe_matrices_delta(const td_plan_model *m) {
    return td_plan_moe_layers(m) * moe_block_delta(m, pl_top_k(m), mlp_matrices);
}

double td_plan_params_active(const td_plan_model *m) {
    if (m->E <= 0) return td_plan_params(m);
    return td_plan_params(m) - pl_moe_params_delta(m, 0) + pl_moe_params_delta(m, 1);
}

double pl_dense_mlp_params(const td_plan_model *m, int tp) {
    double f = pl_ffn(m), h = m->C;
    return pl_llama(m) ? 3 * f * h / tp : 2 * f * h / tp + f + h; /* biases replicated */
}

double pl_moe_block_params(const td_plan_model *m, int tp) {
    double h = m->C, w = shared_ffn(m), p = (double)m->E * h; /* the router, on every tp rank */
    if (m->S) p += pl_llama(m) ? 3 * w * h / tp : 2 * w * h / tp + w + h;
    return p;
}

double pl_moe_expert_params(const td_plan_model *m, int ep, int etp) {
    double f = pl_expert_ffn(m), h = m->C;
    double one = pl_llama(m) ? 3 * f * h / etp : (2 * f * h + f) / etp + h; /* the down bias replicated */
    return (double)m->E / ep * one;
}

double td_plan_a2a_bytes(const td_plan_model *m, int b, int tp, int cp, int ep, double elem_bytes) {
    if (m->E <= 0 || ep <= 1) return 0;
    double tok = (double)b * m->T / ((double)cp * tp);
    return 2 * tok * pl_top_k(m) * (ep - 1.0) / ep * m->C * elem_bytes;
}

/* One all-to-all pair (dispatch and combine) of V bytes leaving each
 * device. Inside a node: NVLink at the collectives' bus bandwidth. Across
 * nodes: each device's k - 1 peers on its node by NVLink and the ep - k
 * others through its own network port, side by side; (ep - 1) steps of
 * latency each way. */
static double a2a_seconds(const td_plan_cluster *c, double V, int ep, int etp) {
    if (ep <= 1 || V <= 0) return 0;
    int G = c->gpus_per_node, k = etp * ep <= G ? ep : G / etp > 1 ? G / etp : 1;
    if (k >= ep) return V / c->intra_bw + 2 * (ep - 1) * c->intra_lat;
    double in = V * (k - 1) / (ep - 1), out = V * (ep - k) / (ep - 1);
    return fmax(in / c->intra_bw, out / c->inter_bw) + 2 * (ep - 1) * c->inter_lat;
}

void pl_moe_block_cost(const td_plan_model *m, const td_plan_cluster *c, const td_plan_layout *l, double eb,
                       double g_mlp, pl_moe_block *x) {
    int t = l->tp, cp = td_plan_cp(l), ep = td_plan_ep(l), etp = td_plan_etp(l), K = pl_top_k(m);
    int llama = pl_llama(m), G = c->gpus_per_node;
    double h = m->C, fx = pl_expert_ffn(m), E = m->E, bs = (double)l->micro_batch * m->T / cp;
    double tok = bs / t;            /* the rows this device routes */
    double rows = tok * K * etp;    /* the rows its experts take, gathered over etp */
    double local = E / ep, r = rows / local, f = fx / etp, up = (llama ? 2 : 1) * f;
    /* the router, then the local experts one after another: gate|up (or
     * GELU's up) and down, r rows each */
    x->gemm_s = 2 * tok * h * E / td_plan_gemm_rate(c, tok, E, h) +
                local * (2 * r * h * up / td_plan_gemm_rate(c, r, up, h) + 2 * r * f * h / td_plan_gemm_rate(c, r, h, f));
    if (m->S) { /* shared experts: a dense MLP of S fx, split by tp */
        double w = shared_ffn(m) / t, wu = (llama ? 2 : 1) * w;
        x->gemm_s += 2 * bs * h * wu / td_plan_gemm_rate(c, bs, wu, h) + 2 * bs * w * h / td_plan_gemm_rate(c, bs, h, w);
    }
    /* bytes per hidden feature of the activation function (2-byte
     * elements): SwiGLU reads gate and up and writes their product (6),
     * GELU reads and writes (4); permuting K copies out (read and write
     * C each) and combining them back (read K, write one); the router's
     * fp32 softmax and top-k (read and write E) */
    double fn = llama ? 6 : 4;
    x->ew_bytes = eb * (fn * (tok * K * fx + bs * shared_ffn(m) / t) + tok * (4.0 * K + 2.0 * (K + 1)) * h +
                        tok * 8 * E);
    x->dense_ew_bytes = eb * fn * bs * pl_ffn(m) / t;
    /* etp: the group gathers its members' routed rows and reduce-scatters
     * the experts' outputs (consecutive ranks: a node's links while etp
     * fits); shared experts: the dense MLP's tp collectives */
    x->tp_s = m->S ? g_mlp : 0;
    if (etp > 1) {
        int in = etp <= G;
        x->tp_s += 2 * td_plan_allgather_s(2 * eb * rows * h, etp, in ? c->intra_bw : c->inter_bw,
                                           in ? c->intra_lat : c->inter_lat);
    }
    x->a2a_s = a2a_seconds(c, td_plan_a2a_bytes(m, l->micro_batch, t, cp, ep, 2 * eb), ep, etp);
    /* kept for the backward (the dense MLP's: its hidden features, split by
     * tp): each expert's hidden features on its rows, the K gathered input
     * copies and the K outputs (the routing weights' gradient reads them),
     * the router's fp32 probabilities, the shared experts' hidden features */
    x->dense_act = eb * fn * bs * pl_ffn(m) / t;
    x->act = eb * (tok * (fn * K * fx + 2.0 * K * etp * h + 2.0 * K * h + 4 * E) + fn * bs * shared_ffn(m) / t);
    /* the dropless worst case beyond the average: all ep x tok rows of the
     * ep group, min(K, E / ep) copies each, on one rank's experts (input,
     * output and hidden features: SwiGLU's gate|up and product, GELU's
     * input and output) */
    double worst = ep * tok * fmin(K, local) * etp;
    x->buf = worst > rows ? 2 * eb * (worst - rows) * (2 * h + (llama ? 3 : 2) * f) : 0;
}
