/* Mixture-of-experts blocks against PyTorch (tests/ref/moe_ref.py: an
 * independent MoE written from model.h's semantics, inside gpt_ref.py's
 * GPT-2 and llama_ref.py's Llama, in float64) on the same weights and
 * tokens: the logits, the LM loss, the aux and z losses (td_moe_stats), the
 * experts chosen for every token of every MoE block (identical, and the
 * per-expert loads), and every parameter gradient of one step (router,
 * each expert, shared experts and the rest). Cases: GPT-2 and Llama, top-1
 * and top-2, softmax and sigmoid routers, norm_topk on and off, shared
 * experts, --moe-every 2, the z-loss, an aux coefficient large enough that
 * its gradient stands far above the tolerance, a nonzero expert_bias that
 * changes the choice, and exact ties (two identical router rows) that must
 * go to the lower expert id; and --eod-mask-loss's normalization (a
 * quarter of the targets the end-of-text id, masked: the LM loss the mean
 * over the targets kept, the aux and z losses over every token, as
 * Megatron-LM's; its aux gradient made to stand out, so that a weight
 * divided by the kept count fails). The step's host traffic for routing
 * (TD_HOST_MOE): one download and one upload per MoE block and pass, of
 * the sizes the routing half has (moe_internal.h), nothing in the
 * backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/model.h"
#include "trident/moe.h"
#include "trident/optim.h"
#include "ref_io.h"

#ifndef TD_SOURCE_DIR
#define TD_SOURCE_DIR "."
#endif

enum { L = 2, H = 4, C = 32, T = 16, V = 37, B = 3, N = B * T, E = 4, FE = 24, MAXK = 2 };

typedef struct {
    const char *what;
    td_arch arch;
    int K, every, shared, router, norm; /* norm: TD_TIE_* (0: default, on for K >= 2) */
    float aux, z;
    int bias;     /* a nonzero expert_bias (selection only) */
    int tie;      /* router row 2 = row 1 in every MoE block: exact ties */
    int show_aux; /* the case is there for the aux gradient: it must stand out (asserted) */
    int show_z;   /* likewise the z-loss's */
    int eod;      /* --eod-mask-loss: every 4th target made EOD, then masked (-1) */
} test_case;

enum { EOD = 5 }; /* a token id of the vocabulary */

#define SM TD_ROUTER_SOFTMAX
#define SG TD_ROUTER_SIGMOID
static const test_case CASES[] = {
    {"gpt2 top-1 softmax", TD_ARCH_GPT2, 1, 1, 0, SM, 0, 0.01f, 0, 0, 0, 0, 0, 0},
    {"gpt2 top-2 softmax, 1 shared", TD_ARCH_GPT2, 2, 1, 1, SM, 0, 0.01f, 0, 0, 0, 0, 0, 0},
    {"llama top-2 sigmoid, 2 shared, z 0.01", TD_ARCH_LLAMA, 2, 1, 2, SG, 0, 0.01f, 0.01f, 0, 0, 0, 1, 0},
    {"llama top-1 sigmoid, norm-topk on", TD_ARCH_LLAMA, 1, 1, 0, SG, TD_TIE_ON, 0.01f, 0, 0, 0, 1, 0, 0},
    {"llama top-2 softmax, every 2, z 0.01", TD_ARCH_LLAMA, 2, 2, 0, SM, 0, 0.01f, 0.01f, 0, 0, 0, 1, 0},
    {"gpt2 top-2 softmax, aux 0.1", TD_ARCH_GPT2, 2, 1, 0, SM, 0, 0.1f, 0, 0, 0, 1, 0, 0},
    {"llama top-2 softmax, expert_bias", TD_ARCH_LLAMA, 2, 1, 1, SM, 0, 0.01f, 0, 1, 0, 0, 0, 0},
    {"gpt2 top-2 sigmoid, norm off, ties", TD_ARCH_GPT2, 2, 1, 0, SG, TD_TIE_OFF, 0.01f, 0, 0, 1, 0, 0, 0},
    {"gpt2 top-2 softmax, aux 0.1, z, eod loss", TD_ARCH_GPT2, 2, 1, 0, SM, 0, 0.1f, 0.01f, 0, 0, 1, 0, 1},
};
#define NCASE ((int)(sizeof CASES / sizeof CASES[0]))

static double rel(double a, double b) { return b != 0.0 ? fabs(a - b) / fabs(b) : fabs(a); }

static void build(ref_model *mc, const test_case *tc) {
    mc->cfg = (td_gpt_config){.L = L, .H = H, .C = C, .T = T, .V = V, .arch = tc->arch};
    if (tc->arch == TD_ARCH_LLAMA) mc->cfg.KV = 2, mc->cfg.F = 48;
    mc->cfg.moe = (td_moe_config){.E = E, .K = tc->K, .every = tc->every, .F = FE, .shared = tc->shared,
                                  .router = tc->router, .norm_topk = tc->norm, .aux_coef = tc->aux,
                                  .z_coef = tc->z};
    ref_model_build(mc);
    for (int i = 0; i < mc->t.n_rows; i++) {
        td_param *p = &mc->t.rows[i];
        float *w = mc->params + p->offset;
        if (p->kind == TD_T_ROUTERB && tc->bias) /* of the scores' spread (~0.03) */
            for (int k = 0; k < E; k++) w[k] = (float)(0.03 * td_rng_normal(11, (uint64_t)i, k));
        if (p->kind == TD_T_ROUTERW && tc->tie) memcpy(w + 2 * C, w + C, sizeof(float) * C);
    }
}

static void write_case(FILE *f, const ref_model *mc, const int *inputs, const int *targets) {
    const td_gpt_config *c = &mc->cfg;
    const td_moe_config *e = &c->moe;
    int32_t hdr[17] = {c->arch, c->L, c->H, c->KV, c->C, c->F, c->T, c->V, B, td_gpt_tied(c),
                       e->E, e->K, e->every, e->F, e->shared, e->router, e->norm_topk == TD_TIE_ON};
    float fl[3] = {c->norm_eps, e->aux_coef, e->z_coef};
    ref_write(f, hdr, sizeof hdr);
    ref_write(f, fl, sizeof fl);
    ref_write(f, &c->rope_theta, 8);
    ref_write_tensors(f, &mc->t, mc->params, V, C);
    ref_write(f, inputs, 4 * N);
    ref_write(f, targets, 4 * N);
}

/* The worst gradient error of a group of tensors, and its tensor. */
typedef struct {
    double err;
    const char *name;
} worst;

static void note(worst *w, double e, const char *name) {
    if (e > w->err || !w->name) w->err = e, w->name = name;
}

/* The case's targets: the common ones, or with --eod-mask-loss's mask
 * (td_doc_mask_targets: -1 where EOD); returns the count kept. */
static long case_targets(const test_case *tc, const int *common, int *tg) {
    memcpy(tg, common, sizeof(int) * N);
    if (!tc->eod) return N;
    for (int i = 3; i < N; i += 4) tg[i] = EOD;
    return td_doc_mask_targets(tg, N, EOD);
}

/* --optimizer muon's first step (td_muon_update_on from zero state, as
 * the step calls it, on the gradients just computed) against moe_ref's
 * torch step, in which each expert is a module and each of its weights a
 * matrix: every expert stack and shared-expert weight. The worst element
 * difference in units of the matrix's step, lr sqrt(max(1, R/C)): as
 * test_muon_vs_torch's 1% of a step (gradients 1e-4 apart, per expert,
 * through Newton-Schulz); a stack orthogonalized whole, or gate|up as one
 * matrix, is O(1) of a step off. */
static double muon_step(ref_model *m, FILE *o, float *ref) {
    const td_param_table *t = &m->t;
    float *p = calloc(t->numel, sizeof(float)), *mo = calloc(t->numel, sizeof(float));
    float *v = calloc(t->numel, sizeof(float)), *g = malloc(sizeof(float) * t->numel);
    memcpy(g, m->grads, sizeof(float) * t->numel);
    td_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .max_steps = 1, .schedule = TD_LR_CONSTANT, .optimizer = TD_OPT_MUON,
                          .muon_lr = 0.02f, .muon_momentum = 0.95f, .muon_nesterov = 1};
    td_muon_update_on(td_ops_cpu(TD_K_F32), p, g, mo, v, 0, t->numel, t, &oc, oc.lr, 1, 1.0f, 0);
    double worst = 0.0;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        if (r->kind != TD_T_EXPFCW && r->kind != TD_T_EXPPROJW && r->kind != TD_T_SHFCW && r->kind != TD_T_SHPROJW)
            continue;
        int R, C_;
        td_muon_matrices(t, r, &R, &C_);
        ref_read(o, ref, sizeof(float) * r->numel);
        double step = oc.muon_lr * sqrt(fmax(1.0, (double)R / C_));
        for (size_t k = 0; k < r->numel; k++) worst = fmax(worst, fabs(p[r->offset + k] - ref[k]) / step);
    }
    free(p), free(mo), free(v), free(g);
    return worst;
}

int main(void) {
    int *inputs = malloc(sizeof(int) * N), *common = malloc(sizeof(int) * N), *targets = malloc(sizeof(int) * N);
    ref_tokens(inputs, common, N, V);
    ref_model mc[NCASE];
    char in_path[] = "/tmp/td_moe_ref_XXXXXX", out_path[256];
    FILE *f = ref_create(in_path, out_path, sizeof out_path);
    int32_t top[2] = {0x4645524D, NCASE};
    ref_write(f, top, sizeof top);
    for (int c = 0; c < NCASE; c++) {
        build(&mc[c], &CASES[c]);
        case_targets(&CASES[c], common, targets);
        write_case(f, &mc[c], inputs, targets);
    }
    fclose(f);
    if (ref_run(TD_SOURCE_DIR "/tests/ref/moe_ref.py", in_path, out_path)) return 1;
    FILE *o = fopen(out_path, "rb");
    TD_ASSERT(o);
    /* Tolerances. The reference computes in float64 (its tensors come back
     * as float32), so the differences are trident's fp32 rounding. The LM
     * loss, aux and z: 1e-5 relative (fp32 sums of 48 tokens' terms,
     * reordered, differ by ~1e-7). Logits and gradients: 1e-4 of the
     * tensor's largest element, as test_vs_torch derives it (GEMM
     * reductions of up to 4C = 128 terms over 48 rows give ~1e-6; a
     * missing or doubled term is O(1) of the scale), each expert's
     * slice of a stacked tensor on its own (an expert that got few tokens
     * has small gradients a busy one's scale would hide). The choice: exact,
     * and the reference's smallest gap between a chosen key and the next
     * must be >= 1e-5, 10x the fp32 error of a score after a block (~1e-6),
     * else agreement would be luck. A term the case is there to show (aux,
     * z), and the LM loss's path through the combine weights wherever it
     * exists, must make >= 10 x tol of the router's gradient, so that a
     * wrong one fails (at init the aux term dominates the router's
     * gradient: its LM part comes through small expert outputs). */
    const double tol_loss = 1e-5, tol = 1e-4, min_gap = 1e-5, show = 10 * tol;
    int fails = 0;
    const size_t ref_cap = (size_t)N * V * 4; /* floats: the logits, the largest tensor (w13, 6144) */
    float *ref = malloc(sizeof(float) * ref_cap);
    int *ref_idx = malloc(sizeof(int) * (size_t)L * N * MAXK), *nobias = malloc(sizeof(int) * (size_t)L * N * MAXK);
    for (int c = 0; c < NCASE; c++) {
        const test_case *tc = &CASES[c];
        ref_model *m = &mc[c];
        const int K = m->cfg.moe.K;
        const long kept = case_targets(tc, common, targets);
        td_gpt model;
        td_gpt_create(&model, &m->t, B, 0);
        td_gpt_bind_flat(&model, m->params, m->grads);
        memset(m->grads, 0, sizeof(float) * m->t.numel);
        double hd[7];
        int32_t hi[2];
        ref_read(o, hd, sizeof hd);
        ref_read(o, hi, sizeof hi);
        const double ref_lm = hd[0], ref_aux = hd[1], ref_z = hd[2], vis_lm = hd[3], vis_aux = hd[4], vis_z = hd[5];
        const double gap = hd[6];
        /* the LM loss reaches the router through the combine weights, but
         * for top-1 with norm_topk (weight 1) */
        int show_lm = !(K == 1 && m->cfg.moe.norm_topk == TD_TIE_ON);
        int nmoe = hi[1], moe_l[L], n = 0;
        for (int l = 0; l < L; l++)
            if (td_gpt_moe_layer(&m->cfg, l)) moe_l[n++] = l;
        TD_ASSERT(n == nmoe);
        ref_read(o, ref_idx, sizeof(int) * (size_t)nmoe * N * K);
        ref_read(o, ref, sizeof(float) * (size_t)N * V);

        /* the expert_bias case: the choice without the bias, for the count of changes */
        int changed = 0;
        if (tc->bias) {
            const td_param *pb = td_param_lookup(&m->t, TD_T_ROUTERB, 0);
            float keep[E];
            memcpy(keep, m->params + pb->offset, sizeof keep);
            memset(m->params + pb->offset, 0, sizeof keep);
            td_gpt_forward(&model, inputs, NULL);
            memcpy(nobias, td_moe_chosen(&model.blocks[0]), sizeof(int) * (size_t)N * K);
            memcpy(m->params + pb->offset, keep, sizeof keep);
        }
        td_gpt_moe_stats_reset(&model);
        td_gpt_forward(&model, inputs, NULL); /* the logits */
        double elog = ref_cmp(model.logits, (size_t)m->cfg.Vp, ref, N, V);
        td_gpt_moe_stats_reset(&model);
        td_dev_traffic_reset();
        double lm = td_gpt_forward(&model, inputs, targets) / (double)kept;
        td_host_traffic fwd;
        td_dev_traffic(&fwd);
        const td_moe_stats *st = td_gpt_moe_stats(&model);
        double e_lm = rel(lm, ref_lm), e_aux = rel(st->aux, ref_aux), e_z = rel(st->z, ref_z);
        double e_sum = rel(st->loss_sum / N, ref_aux + ref_z);
        /* the choice of every token, and the loads counted from it */
        int mism = 0, bad_load = 0;
        for (int i = 0; i < nmoe; i++) {
            const int *got = td_moe_chosen(&model.blocks[moe_l[i]]), *want = ref_idx + (size_t)i * N * K;
            double cnt[E] = {0};
            for (int j = 0; j < N * K; j++) mism += got[j] != want[j], cnt[want[j]] += 1;
            for (int e = 0; e < E; e++) bad_load += st->load[(size_t)moe_l[i] * E + e] != cnt[e];
            if (tc->bias && i == 0)
                for (int t = 0; t < N; t++) {
                    int same = 1;
                    for (int k = 0; k < K; k++) same &= got[t * K + k] == nobias[t * K + k];
                    changed += !same;
                }
        }
        td_dev_traffic_reset();
        td_gpt_set_aux_weight(&model, (float)kept / N); /* the run's: aux and z over every token */
        td_gpt_backward(&model, 1.0f / (float)kept);
        td_host_traffic bwd;
        td_dev_traffic(&bwd);
        /* routing's named copies: logits, scores (and the bias) down; idx,
         * gate, wts, pos and the statistics up */
        int has_bias = td_param_lookup_opt(&m->t, TD_T_ROUTERB, moe_l[0]) != NULL;
        uint64_t want_down = (uint64_t)nmoe * 4 * (2 * N * E + (has_bias ? E : 0)),
                 want_up = (uint64_t)nmoe * 4 * (4 * N * K + 2 * E + 3);
        int bad_traffic = fwd.down_calls[TD_HOST_MOE] != (uint64_t)nmoe || fwd.up_calls[TD_HOST_MOE] != (uint64_t)nmoe ||
                          fwd.down_bytes[TD_HOST_MOE] != want_down || fwd.up_bytes[TD_HOST_MOE] != want_up ||
                          bwd.down_calls[TD_HOST_MOE] || bwd.up_calls[TD_HOST_MOE];
        worst wr = {0}, wx = {0}, ws = {0}, wo = {0};
        int bias_grad = 0;
        for (int i = 0; i < m->t.n_rows; i++) {
            const td_param *p = &m->t.rows[i];
            size_t rows = p->split == TD_SPLIT_VOCAB ? (size_t)V : (size_t)p->shape[0], cols = (size_t)p->shape[1];
            TD_ASSERT(rows * cols <= ref_cap);
            ref_read(o, ref, sizeof(float) * rows * cols);
            const float *g = m->grads + p->offset;
            switch (p->kind) {
            case TD_T_ROUTERB: /* selection only: no gradient, exactly */
                for (size_t k = 0; k < rows; k++) bias_grad += g[k] != 0.0f || ref[k] != 0.0f;
                break;
            case TD_T_ROUTERW: note(&wr, ref_cmp(g, cols, ref, rows, cols), p->name); break;
            case TD_T_EXPFCW: case TD_T_EXPFCB: case TD_T_EXPPROJW: case TD_T_EXPPROJB: {
                size_t r = rows / E; /* expert e's rows [e r, (e+1) r) */
                for (int e = 0; e < E; e++)
                    note(&wx, ref_cmp(g + e * r * cols, cols, ref + e * r * cols, r, cols), p->name);
                break;
            }
            case TD_T_SHFCW: case TD_T_SHFCB: case TD_T_SHPROJW: case TD_T_SHPROJB:
                note(&ws, ref_cmp(g, cols, ref, rows, cols), p->name);
                break;
            default: note(&wo, ref_cmp(g, cols, ref, rows, cols), p->name);
            }
        }
        double e_muon = muon_step(m, o, ref);
        int ties = hi[0];
        int bad = e_muon > 1e-2 || e_lm > tol_loss || e_aux > tol_loss || e_z > tol_loss || e_sum > tol_loss || elog > tol ||
                  wr.err > tol || wx.err > tol || ws.err > tol || wo.err > tol || mism || bad_load || bias_grad ||
                  gap < min_gap || (show_lm && vis_lm < show) || (tc->show_aux && vis_aux < show) || (tc->show_z && vis_z < show) ||
                  (tc->bias && changed == 0) || (tc->tie && ties == 0) || (!tc->tie && ties != 0) || bad_traffic;
        fails += bad;
        printf("  muon first step on the experts' matrices: worst difference %.2e of a step%s\n", e_muon,
               e_muon > 1e-2 ? " FAIL (1e-2)" : "");
        printf("%-38s %s\n"
               "  lm loss %.7f torch %.7f (rel %.1e) | aux %.6g (rel %.1e) | z %.6g (rel %.1e) | loss_sum rel %.1e\n"
               "  logits %.1e | grads: router %.1e, experts %.1e (%s), shared %.1e, rest %.1e (%s)\n"
               "  choice: %d of %d differ, loads %s, min gap %.1e, %d exact ties%s | router grad share: lm %.1e aux "
               "%.1e z %.1e\n",
               tc->what, bad ? "FAIL" : "ok", lm, ref_lm, e_lm, st->aux, e_aux, st->z, e_z, e_sum, elog, wr.err,
               wx.err, wx.name ? wx.name : "", ws.err, wo.err, wo.name ? wo.name : "", mism, nmoe * N * K,
               bad_load ? "DIFFER" : "equal", gap, ties, tc->tie ? " (wanted)" : "", vis_lm, vis_aux, vis_z);
        if (tc->eod) printf("  --eod-mask-loss: %ld of %d targets kept\n", kept, N);
        if (tc->bias) printf("  expert_bias changed the choice of %d of %d tokens in block 0 (need > 0)\n", changed, N);
        printf("  host traffic (moe): forward %llu down (%llu B), %llu up (%llu B); backward %llu + %llu calls%s\n",
               (unsigned long long)fwd.down_calls[TD_HOST_MOE], (unsigned long long)fwd.down_bytes[TD_HOST_MOE],
               (unsigned long long)fwd.up_calls[TD_HOST_MOE], (unsigned long long)fwd.up_bytes[TD_HOST_MOE],
               (unsigned long long)bwd.down_calls[TD_HOST_MOE], (unsigned long long)bwd.up_calls[TD_HOST_MOE],
               bad_traffic ? " FAIL: want one each way per block in the forward, none in the backward" : "");
        if (bias_grad) printf("  FAIL: expert_bias has a nonzero gradient (%d elements)\n", bias_grad);
        if (gap < min_gap) printf("  FAIL: a near tie (gap %.1e < %.0e): the case compares rounding, change it\n", gap, min_gap);
        if (show_lm && vis_lm < show) printf("  FAIL: the LM loss's router gradient (%.1e) does not stand out of %.0e\n", vis_lm, show);
        if (tc->show_aux && vis_aux < show) printf("  FAIL: the aux gradient (%.1e) does not stand out of %.0e\n", vis_aux, show);
        if (tc->show_z && vis_z < show) printf("  FAIL: the z gradient (%.1e) does not stand out of %.0e\n", vis_z, show);
        td_gpt_destroy(&model);
        ref_model_free(m);
    }
    fclose(o);
    remove(in_path);
    remove(out_path);
    free(ref), free(ref_idx), free(nobias), free(inputs), free(common), free(targets);
    printf(fails ? "test_moe_vs_torch: FAILED (%d)\n" : "test_moe_vs_torch: all passed%.0d\n", fails);
    return fails ? 1 : 0;
}
