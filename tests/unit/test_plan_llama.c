/* The planner's Llama family (no MPI): parameters against the model's own
 * table (td_param_table_build: n_global, and a stage's n_real under tp and
 * pp), FLOPs against td_gpt_flops_per_token and against 6 x the table's
 * matrices + 12 L T C, for every llama preset and small MHA / GQA / MQA,
 * tied and untied configs (gpt2 too, where Megatron's eq. 2 and 3 differ
 * from the model by the final LayerNorm and the head's 1.5 V C); each
 * preset's size against the published one; activation bytes per layer
 * against the tensors a block keeps, listed here; the cp ring's blocks
 * against the engine's lent scratch; tp refused where it does not divide
 * the kv heads or the MLP. Exits non-zero on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/planner.h"
#include "trident/schedule.h"
#include "trident/state_plan.h"
#include "test_util.h"

#define EXPECT TU_EXPECT

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

/* The model's config of a planner model (the oracle's own copy of the
 * fields, not the planner's conversion). */
static td_gpt_config config_of(const td_plan_model *m) {
    td_gpt_config c = {.L = m->L, .H = m->H, .C = m->C, .T = m->T, .V = m->V, .arch = (td_arch)m->arch,
                       .KV = m->KV, .F = m->F, .tie = m->tie};
    td_gpt_config_finish(&c);
    return c;
}

/* 6 x the weights each token meets in a GEMM (every 2-D row but the
 * embedding lookups; the tied head is the embedding, met once) + 12 L T C
 * of attention, from the table's rows. */
static double table_flops_per_token(const td_param_table *t) {
    double mat = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->ndim != 2 || p->kind == TD_T_WPE || p->kind == TD_T_WTE) continue;
        mat += (double)p->shape[0] * p->shape[1];
    }
    if (td_gpt_tied(&t->cfg)) mat += (double)t->cfg.V * t->cfg.C;
    return 6 * mat + 12.0 * t->cfg.L * t->cfg.T * t->cfg.C;
}

/* Parameters and FLOPs of m against the model's. */
static void check_counts(const td_plan_model *m) {
    td_gpt_config cfg = config_of(m);
    td_param_table t;
    td_param_table_build(&t, &cfg, 1);
    double n = (double)t.n_global, p = td_plan_params(m), B = 3, tok = B * m->T;
    double model = td_gpt_flops_per_token(&cfg), rows = table_flops_per_token(&t);
    EXPECT(rel(model, rows) < 1e-12, "%s: td_gpt_flops_per_token %.6g, the table's rows %.6g", m->name, model, rows);
    if (m->arch == TD_ARCH_LLAMA) {
        EXPECT(p == n, "%s: planner %.0f parameters, the model's table %.0f", m->name, p, n);
        EXPECT(rel(td_plan_flops(m, B, 72), tok * model) < 1e-12, "%s: FLOPs %.6g, the model's %.6g", m->name,
               td_plan_flops(m, B, 72), tok * model);
    } else { /* Megatron eq. 2 leaves out ln_f's 2C; eq. 3 counts the head's 6 V C as 4.5 */
        EXPECT(rel(p + 2.0 * m->C, n) < 1e-12, "%s: planner %.0f + 2C, the model's table %.0f", m->name, p, n);
        double head = 1.5 * m->V * (double)m->C;
        EXPECT(rel(td_plan_flops(m, B, 72), tok * (model - head)) < 1e-12, "%s: FLOPs %.6g, the model's less 1.5 V C %.6g",
               m->name, td_plan_flops(m, B, 72), tok * (model - head));
    }
    EXPECT(rel(td_plan_flops(m, B, 96), td_plan_flops(m, B, 72) * 4 / 3) < 1e-12, "%s: 96 is 4/3 of 72", m->name);
    td_param_table_free(&t);
}

/* A stage's parameters in the planner's memory (mixed precision, ZeRO 0:
 * td_state_plan of them) against the model's table for tp rank 0 of that
 * stage: n_real (vocabulary rows divide by tp here, so no padding). */
static double stage_state_bytes(const td_plan_model *m, int tp, int pp, int stage) {
    td_gpt_config cfg = config_of(m);
    unsigned char held[TD_MAX_LAYERS + 2];
    memset(held, 0, sizeof held);
    int per = m->L / pp;
    for (int l = stage * per; l < (stage + 1) * per; l++) held[1 + l] = 1;
    if (stage == 0) held[0] = 1;
    if (stage == pp - 1) {
        held[m->L + 1] = 1;
        if (td_gpt_tied(&cfg)) held[0] = 1; /* the tied copy */
    }
    td_table_layout lay = {.unit_align = 1, .tp = tp, .held = held};
    td_param_table t;
    td_param_table_build_layout(&t, &cfg, &lay);
    double psi = (double)t.n_real;
    td_param_table_free(&t);
    return td_state_total(td_state_plan(psi, 1, 0, td_state_elem_mixed()));
}

static void check_stages(const td_plan_model *m) {
    td_plan_cluster c;
    char err[256];
    td_plan_cluster_preset("a100-hdr", &c, err, sizeof err);
    c.mem_bytes = 1e30;
    for (int tp = 1; tp <= 2; tp++)
        for (int pp = 1; pp <= 2; pp++) {
            if (m->KV % tp) continue; /* multi-query: no tp */
            c.gpus = tp * pp;
            td_plan_layout l = {1, tp, pp, 0, 1, 2, pp > 1 ? TD_SCHED_1F1B : TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE,
                                0, 1, 0, 1, 1};
            EXPECT(td_plan_check(m, &c, 2, 0, &l, err, sizeof err) == 0, "%s tp %d pp %d: %s", m->name, tp, pp, err);
            td_plan_eval e;
            td_plan_evaluate(m, &c, 2, &l, &e);
            double s0 = stage_state_bytes(m, tp, pp, 0), sL = stage_state_bytes(m, tp, pp, pp - 1);
            /* the busiest stage's: which one depends on activations, so either */
            EXPECT(rel(e.mem_states, s0) < 1e-12 || rel(e.mem_states, sL) < 1e-12,
                   "%s tp %d pp %d: states %.6g, the tables' stages %.6g, %.6g", m->name, tp, pp, e.mem_states, s0,
                   sL);
        }
}

/* Published sizes: the parameter count each model's Hugging Face page
 * gives (from its safetensors), in billions, and half its last digit. */
static const struct {
    const char *name;
    double billions, half;
} published[] = {
    {"smollm-135m", 0.135, 0.0005}, {"tinyllama-1.1b", 1.1, 0.05}, {"llama2-7b", 6.74, 0.005},
    {"llama3-8b", 8.03, 0.005},     {"llama3.1-70b", 70.6, 0.05},  {"llama3.1-405b", 406, 0.5},
};

static void test_presets(void) {
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        td_plan_model m;
        td_gpt_config cfg;
        EXPECT(td_plan_model_preset(published[i].name, &m) == 0, "%s: no preset", published[i].name);
        EXPECT(td_plan_model_preset_config(published[i].name, &cfg) == 0, "%s: no config", published[i].name);
        EXPECT(strstr(td_plan_model_presets(), published[i].name) != NULL, "%s not listed", published[i].name);
        const char *note = td_plan_model_note(published[i].name);
        EXPECT(note && strstr(note, "config.json"), "%s: no citation", published[i].name);
        EXPECT(m.arch == TD_ARCH_LLAMA && cfg.arch == TD_ARCH_LLAMA && cfg.KV == m.KV && cfg.F == m.F &&
                   cfg.L == m.L && cfg.V == m.V && cfg.rope_theta >= 10000,
               "%s: the config is the preset's", published[i].name);
        int scaled = strstr(published[i].name, "3.1") != NULL;
        EXPECT(scaled == (cfg.rope_scaling.factor == 8 && cfg.rope_scaling.orig_max_pos == 8192),
               "%s: rope scaling %g", published[i].name, cfg.rope_scaling.factor);
        double p = td_plan_params(&m);
        printf("%-14s %.6fB parameters (published %gB)\n", m.name, p / 1e9, published[i].billions);
        EXPECT(fabs(p / 1e9 - published[i].billions) <= published[i].half, "%s: %.4gB parameters, published %gB",
               m.name, p / 1e9, published[i].billions);
        check_counts(&m);
    }
}

/* Small configs of each kind: MHA, GQA, MQA; tied and untied; gpt2 (always tied). */
static const td_plan_model smalls[] = {
    {"mha-untied", 4, 4, 64, 96, 16, TD_ARCH_LLAMA, 4, 160, TD_TIE_OFF, 0, 0, 0, 0, 0},
    {"gqa-tied", 4, 8, 64, 96, 16, TD_ARCH_LLAMA, 2, 128, TD_TIE_ON, 0, 0, 0, 0, 0},
    {"mqa-untied", 2, 4, 32, 64, 8, TD_ARCH_LLAMA, 1, 96, TD_TIE_OFF, 0, 0, 0, 0, 0},
    {"gqa-default-f", 2, 4, 96, 64, 8, TD_ARCH_LLAMA, 2, 0, 0, 0, 0, 0, 0, 0},
    {"gpt2", 4, 4, 64, 96, 16, TD_ARCH_GPT2, 0, 0, 0, 0, 0, 0, 0, 0},
};

static void test_small_configs(void) {
    for (size_t i = 0; i < sizeof smalls / sizeof smalls[0]; i++) {
        td_plan_model m = smalls[i];
        td_plan_model_finish(&m);
        EXPECT(m.arch != TD_ARCH_LLAMA || m.F == config_of(&smalls[i]).F, "%s: F %d, the model's default %d",
               m.name, m.F, config_of(&smalls[i]).F);
        check_counts(&m);
        if (m.arch == TD_ARCH_LLAMA) check_stages(&m); /* gpt2's: Megatron's, biases counted replicated */
    }
}

/* One llama block's activations per micro-batch (b = 1), in 2-byte
 * elements as Korthikanti et al. count them, from the tensors it keeps for
 * its backward: name, width per token, split by tp, kept under selective
 * recomputation. */
static double llama_block_bytes(const td_plan_model *m, int tp, int sp, int rc) {
    double C = m->C, kvc = (double)m->KV * (m->C / m->H), F = m->F, s = m->T, a = m->H;
    const struct {
        double width;
        int split, scores;
    } kept[] = {
        {C, 0, 0},       /* input_layernorm's input */
        {C, 0, 0},       /* its output: q|k|v's input */
        {C, 1, 0},       /* q (after the rotation) */
        {kvc, 1, 0},     /* k */
        {kvc, 1, 0},     /* v */
        {a * s, 1, 1},   /* softmax output (no dropout) */
        {C, 1, 0},       /* o_proj's input */
        {C, 0, 0},       /* post_attention_layernorm's input */
        {C, 0, 0},       /* its output: gate|up's input */
        {2 * F, 1, 0},   /* gate and up: SwiGLU's backward */
        {F, 1, 0},       /* silu(gate) * up: down's input */
    };
    if (rc == TD_PLAN_RC_FULL) return 2 * s * C / (sp ? tp : 1);
    double sum = 0;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        if (kept[i].scores && rc == TD_PLAN_RC_SELECTIVE) continue;
        sum += 2 * s * kept[i].width / (kept[i].split || sp ? tp : 1);
    }
    return sum;
}

static void test_activations(void) {
    td_plan_model m = {"llama3-8b-like", 32, 32, 4096, 128256, 8192, TD_ARCH_LLAMA, 8, 14336, TD_TIE_OFF, 0, 0, 0, 0, 0};
    for (int tp = 1; tp <= 8; tp *= 2)
        for (int sp = 0; sp <= (tp > 1); sp++)
            for (int rc = TD_PLAN_RC_NONE; rc <= TD_PLAN_RC_FULL; rc++) {
                double got = td_plan_layer_act_bytes(&m, 1, tp, sp, rc), want = llama_block_bytes(&m, tp, sp, rc);
                EXPECT(rel(got, want) < 1e-12, "tp %d sp %d rc %d: %.6g bytes, the kept tensors %.6g", tp, sp, rc,
                       got, want);
                EXPECT(rel(td_plan_layer_act_bytes(&m, 3, tp, sp, rc), 3 * got) < 1e-12, "b 3 is 3 x b 1");
            }
}

/* The ring's blocks (2 kv columns) against the engine's lent scratch
 * (td_gpt_cp_scratch_bytes, F1 + F columns): in it for Llama's widths, own
 * memory for a narrow MLP. Blocks of b = 1, cp 2, bf16. */
static void test_cp_ring_memory(void) {
    td_plan_model wide = {"wide", 2, 4, 64, 96, 64, TD_ARCH_LLAMA, 2, 160, TD_TIE_OFF, 0, 0, 0, 0, 0};
    td_plan_model narrow = {"narrow", 2, 4, 64, 96, 64, TD_ARCH_LLAMA, 4, 16, TD_TIE_OFF, 0, 0, 0, 0, 0};
    td_plan_model *ms[] = {&wide, &narrow};
    td_plan_cluster c;
    char err[256];
    td_plan_cluster_preset("a100-hdr", &c, err, sizeof err);
    for (int i = 0; i < 2; i++) {
        td_plan_model *m = ms[i];
        td_gpt_config cfg = config_of(m);
        td_table_layout lay = {.unit_align = 1, .tp = 1, .prec = TD_PREC_BF16, .cp = 2};
        td_param_table t;
        td_param_table_build_layout(&t, &cfg, &lay);
        double lent = (double)td_gpt_cp_scratch_bytes(&t, 1, 0);
        td_param_table_free(&t);
        double blocks = 4 * 2.0 * (m->T / 2) * 2 * m->KV * (m->C / m->H), want = blocks > lent ? blocks : 0;
        c.gpus = 2;
        td_plan_layout l1 = {2, 1, 1, 0, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 1, 1};
        td_plan_layout l2 = {1, 1, 1, 0, 1, 2, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 2, 0, 1, 1};
        td_plan_eval e1, e2;
        EXPECT(td_plan_check(m, &c, 2, 0, &l2, err, sizeof err) == 0, "%s: %s", m->name, err);
        td_plan_evaluate(m, &c, 2, &l1, &e1);
        td_plan_evaluate(m, &c, 2, &l2, &e2);
        EXPECT(fabs(e2.mem_comm - e1.mem_comm - want) <= 1e-9 * blocks, "%s: ring %g bytes, the engine's %g",
               m->name, e2.mem_comm - e1.mem_comm, want);
        EXPECT(i == 0 ? want == 0 : want > 0, "%s: the case is %s", m->name, i ? "a shortfall" : "lent");
    }
}

/* tp splits kv heads and MLP features on their own. */
static void test_tp_divides(void) {
    td_plan_model m = {"gqa", 4, 8, 64, 96, 16, TD_ARCH_LLAMA, 2, 96, TD_TIE_OFF, 0, 0, 0, 0, 0};
    td_plan_cluster c;
    char err[256];
    td_plan_cluster_preset("a100-hdr", &c, err, sizeof err);
    c.gpus = 4;
    td_plan_layout l = {1, 4, 1, 0, 1, 1, TD_PLAN_NO_SCHED, 1, TD_PLAN_RC_NONE, 0, 1, 0, 1, 1};
    EXPECT(td_plan_check(&m, &c, 1, 0, &l, err, sizeof err) != 0 && strstr(err, "2 kv heads"), "tp 4, 2 kv: '%s'",
           err);
    m.KV = 8, m.F = 90;
    EXPECT(td_plan_check(&m, &c, 1, 0, &l, err, sizeof err) != 0 && strstr(err, "90 MLP features"),
           "tp 4, F 90: '%s'", err);
    td_plan_fixed f;
    td_plan_fixed_init(&f);
    f.tp = 4;
    m.KV = 2, m.F = 96;
    EXPECT(td_plan_fixed_check(&m, &c, 4, &f, err, sizeof err) != 0 && strstr(err, "--tp 4") &&
               strstr(err, "kv heads") && strstr(err, "valid: 1, 2"),
           "--tp 4 fixed: '%s'", err);
}

int main(void) {
    test_presets();
    test_small_configs();
    test_activations();
    test_cp_ring_memory();
    test_tp_divides();
    return tu_finish("test_plan_llama");
}
