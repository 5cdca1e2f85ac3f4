/* The planner's mixture-of-experts models (no MPI): Mixtral 8x7B's and
 * OLMoE's parameters, total and active, counted here tensor by tensor
 * against the planner and the published sizes; FLOPs against 6 per active
 * weight + attention's and against Megatron-core's formula (which leaves
 * the router out); MoE blocks every N-th layer; the expert state divided
 * by ep (and sharded over edp under ZeRO); the all-to-all's bytes and
 * seconds, inside a node and across; the search's layouts keep the
 * experts' grid (ep dividing E and tp x cp x dp / etp, etp dividing tp);
 * the rules table's rows refuse the rest; a fixed --ep / --moe-etp is
 * refused exactly when the search has no layout. Exits non-zero on any
 * mismatch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/planner.h"
#include "trident/schedule.h"
#include "trident/state_plan.h"
#include "test_util.h"

#define EXPECT TU_EXPECT

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

static td_plan_model preset(const char *name) {
    td_plan_model m;
    EXPECT(td_plan_model_preset(name, &m) == 0, "%s: no preset", name);
    return m;
}

/* A llama MoE model's parameters, tensor by tensor: per block q, o (C x C),
 * k, v (KV hs x C), two RMSNorms, the router (E x C), `experts` experts of
 * gate, up, down (moe_ffn x C each); the embedding, the final norm, the
 * untied head. */
static double count_llama_moe(const td_plan_model *m, int experts) {
    double C = m->C, kvc = (double)m->KV * (m->C / m->H), fx = m->moe_ffn;
    double block = 2 * C * C + 2 * kvc * C + 2 * C + (double)m->E * C + experts * 3.0 * fx * C;
    return m->L * block + (double)m->V * C + C + (double)m->V * C;
}

/* Published: Mixtral 8x7B "46.7B total parameters but only uses 12.9B
 * parameters per token" (Mistral AI, "Mixtral of experts", 2023-12-11);
 * OLMoE-1B-7B 6.9B total, 1.3B active per token (AI2's model summary;
 * Muennighoff et al. 2024's abstract rounds them to 7B and 1B; its q and k
 * norms, 65,536 parameters, are not modelled). */
static void test_params(void) {
    static const struct {
        const char *name;
        double total, active, half; /* billions, half the last digit */
        double exact_total, exact_active;
    } rows[] = {
        {"mixtral-8x7b", 46.7, 12.9, 0.05, 46702792704.0, 12879925248.0},
        {"olmoe-1b-7b", 6.9, 1.3, 0.05, 0, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        td_plan_model m = preset(rows[i].name);
        double total = td_plan_params(&m), active = td_plan_params_active(&m);
        printf("%-13s %.0f parameters (published %gB), %.0f active (published %gB)\n", m.name, total,
               rows[i].total, active, rows[i].active);
        EXPECT(total == count_llama_moe(&m, m.E), "%s: %.0f parameters, tensor by tensor %.0f", m.name, total,
               count_llama_moe(&m, m.E));
        EXPECT(active == count_llama_moe(&m, m.K), "%s: %.0f active, tensor by tensor %.0f", m.name, active,
               count_llama_moe(&m, m.K));
        EXPECT(fabs(total / 1e9 - rows[i].total) <= rows[i].half && fabs(active / 1e9 - rows[i].active) <= rows[i].half,
               "%s: %.4gB / %.4gB, published %gB / %gB", m.name, total / 1e9, active / 1e9, rows[i].total,
               rows[i].active);
        if (rows[i].exact_total)
            EXPECT(total == rows[i].exact_total && active == rows[i].exact_active, "%s: %.0f / %.0f", m.name, total,
                   active);
    }
    /* a dense model: active is all */
    td_plan_model d = preset("llama3-8b");
    EXPECT(td_plan_params_active(&d) == td_plan_params(&d) && td_plan_moe_layers(&d) == 0, "dense: active = all");
}

/* FLOPs per token at 72: 6 per weight a token meets in a GEMM (attention's
 * four matrices, the router, K experts; the head) + 12 L T C of attention;
 * Megatron-core's num_floating_point_operations (training.py, MCore 0.8:
 * 12 B s L h^2 ((1 + KV/H + s/h) + F/h K 3/2 + V / (2 L h))) is the same
 * without the router's 6 L C E. */
static void test_flops(void) {
    td_plan_model m = preset("mixtral-8x7b");
    double C = m.C, L = m.L, s = m.T, B = 3, kvc = (double)m.KV * (m.C / m.H);
    double per_token = 6 * (L * (2 * C * C + 2 * kvc * C + (double)m.E * C + m.K * 3.0 * m.moe_ffn * C) + m.V * C) +
                       12 * L * s * C;
    double got = td_plan_flops(&m, B, 72);
    EXPECT(rel(got, B * s * per_token) < 1e-12, "mixtral FLOPs %.6g, 6 x active + attention %.6g", got,
           B * s * per_token);
    double mcore = 12 * B * s * L * C * C *
                   ((1 + (double)m.KV / m.H + s / C) + (double)m.moe_ffn / C * m.K * 1.5 + m.V / (2 * L * C));
    EXPECT(rel(got - B * s * 6 * L * C * m.E, mcore) < 1e-12, "less the router %.6g, Megatron-core's %.6g",
           got - B * s * 6 * L * C * m.E, mcore);
    EXPECT(rel(td_plan_flops(&m, B, 96), got * 4 / 3) < 1e-12, "96 is 4/3 of 72");
    printf("mixtral-8x7b: %.4g FLOPs per token (Megatron-core's count %.4g: router 6 L C E = %.2g)\n",
           got / (B * s), mcore / (B * s), 6 * L * C * m.E);
    /* one expert of the dense width, top-1: the dense model and a router */
    td_plan_model d = preset("llama2-7b"), x = d;
    x.E = 1, x.K = 1, x.moe_ffn = 0;
    td_plan_model_finish(&x);
    EXPECT(rel(td_plan_flops(&x, B, 72) - td_plan_flops(&d, B, 72), B * d.T * 6.0 * d.L * d.C) < 1e-9,
           "one expert: dense + the router");
    EXPECT(td_plan_params(&x) - td_plan_params(&d) == (double)d.L * d.C, "one expert: dense + the router's C");
    /* every second block: half the blocks' difference */
    td_plan_model h = preset("mixtral-8x7b"), dense = h;
    h.moe_every = 2, dense.E = dense.K = dense.moe_every = dense.moe_ffn = 0;
    EXPECT(td_plan_moe_layers(&h) == 16 && td_plan_moe_layers_in(&h, 1, 5) == 2 && td_plan_moe_layers_in(&h, 0, 1) == 1,
           "moe_every 2: blocks 0, 2, ...");
    EXPECT(rel(td_plan_params(&h) - td_plan_params(&dense), (td_plan_params(&m) - td_plan_params(&dense)) / 2) < 1e-12,
           "moe_every 2: half the experts");
}

static td_plan_cluster h100(int gpus) {
    td_plan_cluster c;
    char err[256];
    EXPECT(td_plan_cluster_preset("h100-ndr", &c, err, sizeof err) == 0, "%s", err);
    c.gpus = gpus, c.gpus_per_node = 8, c.mem_bytes = 1e30;
    return c;
}

/* Expert state over ep: without ZeRO a device's states are the dense
 * part's plus 16 bytes per expert parameter it holds, E / ep experts of
 * 3 C F per block; under ZeRO-1 the expert state's 12 optimizer bytes
 * shard over edp = dp / ep and the dense part's over dp. */
static void test_ep_memory(void) {
    td_plan_model m = preset("mixtral-8x7b");
    td_plan_cluster c = h100(8);
    double per_ep1 = 0, expert = 3.0 * m.moe_ffn * m.C * m.E * m.L; /* all experts of all blocks */
    for (int zero = 0; zero <= 1; zero++)
        for (int ep = 1; ep <= 8; ep *= 2) {
            td_plan_layout l = {8, 1, 1, zero, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_FULL, 0, 1, 0, ep, 1};
            char why[160];
            EXPECT(td_plan_check(&m, &c, 8, 0, &l, why, sizeof why) == 0, "ep %d: %s", ep, why);
            td_plan_eval e;
            td_plan_evaluate(&m, &c, 8, &l, &e);
            int edp = 8 / ep;
            double dense = td_plan_params(&m) - expert;
            double want = zero ? (4 + 12.0 / 8) * dense + (4 + 12.0 / edp) * expert / ep : 16 * (dense + expert / ep);
            EXPECT(rel(e.mem_states, want) < 1e-12, "zero %d ep %d: states %.6g, want %.6g", zero, ep, e.mem_states,
                   want);
            if (zero == 0 && ep == 1) per_ep1 = e.mem_states;
            if (zero == 0)
                EXPECT(rel(per_ep1 - e.mem_states, 16 * expert * (1 - 1.0 / ep)) < 1e-12, "ep %d: expert state / ep",
                       ep);
        }
}

/* The all-to-all: 2 x (tokens x K x (ep - 1) / ep) x C x bytes forward per
 * block and micro-batch, a device's tokens b T / (cp tp); the same
 * backward. Its seconds per step: inside a node at NVLink's bus bandwidth;
 * an ep group over nodes sends its off-node share through the device's own
 * port, side by side with NVLink. */
static void test_a2a(void) {
    td_plan_model m = preset("mixtral-8x7b");
    double want = 2 * (2.0 * 4096 / (1 * 2) * 2 * 7 / 8) * 4096 * 2;
    EXPECT(td_plan_a2a_bytes(&m, 2, 2, 1, 8, 2) == want, "bytes %.6g, want %.6g", td_plan_a2a_bytes(&m, 2, 2, 1, 8, 2),
           want);
    EXPECT(td_plan_a2a_bytes(&m, 2, 2, 1, 1, 2) == 0, "ep 1 sends nothing");
    EXPECT(td_plan_a2a_bytes(&m, 1, 1, 2, 8, 2) == td_plan_a2a_bytes(&m, 1, 2, 1, 8, 2), "cp and tp split alike");
    char why[160];
    /* inside a node: ep 8, 8 micro-batches of 1, 32 blocks, full recomputation (3 passes) */
    td_plan_cluster c = h100(8);
    td_plan_layout l = {8, 1, 1, 1, 1, 8, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_FULL, 0, 1, 0, 8, 1};
    EXPECT(td_plan_check(&m, &c, 64, 0, &l, why, sizeof why) == 0, "%s", why);
    td_plan_eval e;
    td_plan_evaluate(&m, &c, 64, &l, &e);
    double V = td_plan_a2a_bytes(&m, 1, 1, 1, 8, 2);
    double one = V / c.intra_bw + 2 * 7 * c.intra_lat;
    EXPECT(rel(e.t[TD_COST_EP], 8 * 32 * 3 * one) < 1e-12, "in a node: %.6g s, want %.6g", e.t[TD_COST_EP],
           8 * 32 * 3 * one);
    /* OLMoE, ep 16 over 2 nodes: 8 peers on the node (7 others), 8 off it */
    td_plan_model o = preset("olmoe-1b-7b");
    c = h100(16);
    td_plan_layout x = {16, 1, 1, 1, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 16, 1};
    EXPECT(td_plan_check(&o, &c, 16, 0, &x, why, sizeof why) == 0, "%s", why);
    td_plan_evaluate(&o, &c, 16, &x, &e);
    V = td_plan_a2a_bytes(&o, 1, 1, 1, 16, 2);
    one = fmax(V * 7 / 15 / c.intra_bw, V * 8 / 15 / c.inter_bw) + 2 * 15 * c.inter_lat;
    EXPECT(rel(e.t[TD_COST_EP], 16 * 2 * one) < 1e-12, "over nodes: %.6g s, want %.6g", e.t[TD_COST_EP],
           16 * 2 * one);
    printf("a2a: Mixtral %.3g MB a device per block and micro-batch forward; OLMoE over 2 nodes %.3g ms a step\n",
           td_plan_a2a_bytes(&m, 1, 1, 1, 8, 2) / 1e6, 1e3 * e.t[TD_COST_EP]);
}

/* The search keeps the experts' grid; the rules table refuses the rest;
 * fixed ep and etp are refused exactly when the search has no layout. */
static void test_search(void) {
    td_plan_model m = preset("olmoe-1b-7b");
    m.T = 512, m.L = 4;
    td_plan_cluster c = h100(16);
    c.gpus_per_node = 4;
    td_plan_fixed f;
    td_plan_fixed_init(&f);
    td_plan_result r;
    td_plan_search(&m, &c, 16, &f, &r);
    int with_ep = 0, with_etp = 0;
    for (int i = 0; i < r.n; i++) {
        const td_plan_layout *l = &r.plans[i].lay;
        int ep = td_plan_ep(l), etp = td_plan_etp(l), g = l->tp * td_plan_cp(l) * l->dp;
        EXPECT(m.E % ep == 0 && l->tp % etp == 0 && g % (ep * etp) == 0 && td_plan_edp(l) * ep * etp == g,
               "plan %d: tp %d cp %d dp %d ep %d etp %d", i, l->tp, td_plan_cp(l), l->dp, ep, etp);
        EXPECT(l->tp == 1 || l->sp, "plan %d: tp %d without sequence parallelism", i, l->tp);
        /* what trident train runs (the rules table's moe-etp and ep-divides):
         * experts replicated over tp, ep out of dp x cp */
        EXPECT((l->dp * td_plan_cp(l)) % ep == 0, "plan %d: ep %d out of tp", i, ep);
        with_ep += ep > 1, with_etp += etp > 1;
    }
    EXPECT(r.n > 0 && with_ep > 0 && with_etp == 0, "%d plans, %d with ep, %d with etp", r.n, with_ep, with_etp);
    td_plan_result_free(&r);
    /* the rules table, in the planner's words */
    char why[200];
    td_plan_layout l = {16, 1, 1, 0, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 3, 1};
    EXPECT(td_plan_check(&m, &c, 16, 0, &l, why, sizeof why) != 0 && strstr(why, "ep 3 does not divide the 64 experts"),
           "ep 3: '%s'", why);
    l.ep = 32;
    EXPECT(td_plan_check(&m, &c, 16, 0, &l, why, sizeof why) != 0 && strstr(why, "ep 32 does not divide tp x cp x dp"),
           "ep 32 of 16: '%s'", why);
    td_plan_layout t = {8, 2, 1, 0, 1, 2, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 1, 1};
    EXPECT(td_plan_check(&m, &c, 16, 0, &t, why, sizeof why) != 0 && strstr(why, "sequence parallelism"),
           "tp 2 without sp: '%s'", why);
    t.sp = 1, t.etp = 4;
    EXPECT(td_plan_check(&m, &c, 16, 0, &t, why, sizeof why) != 0 && strstr(why, "etp 4 does not divide tp 2"),
           "etp 4 of tp 2: '%s'", why);
    td_plan_model d = preset("gpt2-124m");
    td_plan_layout g = {16, 1, 1, 0, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 2, 1};
    EXPECT(td_plan_check(&d, &c, 16, 0, &g, why, sizeof why) != 0 && strstr(why, "mixture-of-experts"),
           "ep 2 on a dense model: '%s'", why);
    /* fixed choices: refused exactly when the search finds no layout */
    static const int eps[] = {0, 1, 2, 3, 4, 8, 16, 32}, etps[] = {0, 1, 2, 3, 4}, tps[] = {0, 1, 2, 4},
                     dps[] = {0, 1, 2, 4, 8, 16};
    unsigned long long rng = 88172645463325252ull;
    int refused = 0, n = 300;
    for (int k = 0; k < n; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned long long x = rng >> 20;
        td_plan_fixed_init(&f);
        f.ep = eps[x % 8], f.etp = etps[(x >> 3) % 5], f.tp = tps[(x >> 6) % 4], f.dp = dps[(x >> 9) % 6];
        td_plan_search(&m, &c, 16, &f, &r);
        int ok = td_plan_fixed_check(&m, &c, 16, &f, why, sizeof why) == 0;
        EXPECT(ok == (r.n > 0), "ep %d etp %d tp %d dp %d: check %s, search %d plans", f.ep, f.etp, f.tp, f.dp,
               ok ? "passes" : why, r.n);
        EXPECT(ok || strncmp(why, "--", 2) == 0, "a refusal without its flag: %s", why);
        refused += !ok;
        td_plan_result_free(&r);
    }
    printf("%d of %d sampled fixed ep / etp / tp / dp refused\n", refused, n);
    EXPECT(refused > n / 10 && refused < n * 9 / 10, "%d of %d refused: the sample tests little", refused, n);
}

int main(void) {
    test_params();
    test_flops();
    test_ep_memory();
    test_a2a();
    test_search();
    return tu_finish("test_plan_moe");
}
