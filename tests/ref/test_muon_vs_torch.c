/* --optimizer muon against PyTorch (tests/ref/muon_ref.py, float64, the
 * speedrun's Muon written there) on gpt_ref's model: STEPS steps of Muon on
 * the blocks' matrices (c_attn's q, k, v each on its own) and AdamW on the
 * rest from the same weights and tokens, through td_muon_update_on as the
 * step calls it; the losses and the final weights must match. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/model.h"
#include "trident/optim.h"
#include "ref_io.h"

#ifndef TD_SOURCE_DIR
#define TD_SOURCE_DIR "."
#endif

enum { L = 2, H = 4, C = 32, T = 16, V = 37, B = 3, STEPS = 3 };

int main(void) {
    td_gpt_config cfg = {.L = L, .H = H, .C = C, .T = T, .V = V};
    td_gpt_config_finish(&cfg);
    td_param_table t;
    td_param_table_build(&t, &cfg, 1);
    float *params = td_alloc(sizeof(float) * t.numel, TD_MEM_PARAMS);
    float *grads = td_alloc(sizeof(float) * t.numel, TD_MEM_GRADS);
    float *m = td_alloc(sizeof(float) * t.numel, TD_MEM_OPTIM);
    float *v = td_alloc(sizeof(float) * t.numel, TD_MEM_OPTIM);
    td_param_init_range(&t, 42, 0, t.numel, params);
    int *inputs = malloc(sizeof(int) * STEPS * B * T), *targets = malloc(sizeof(int) * STEPS * B * T);
    ref_tokens(inputs, targets, STEPS * B * T, V);
    /* clip 0.25 engages at every step (gpt_ref's case: norms 0.69..0.99);
     * Muon's decay 0.5 and AdamW's 1.0 move weights by more than the bound */
    td_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 1.0f, .clip = 0.25f, .warmup = 0, .max_steps = STEPS,
                          .schedule = TD_LR_CONSTANT, .optimizer = TD_OPT_MUON, .muon_lr = 0.02f,
                          .muon_momentum = 0.95f, .muon_wd = 0.5f, .muon_nesterov = 1};
    char in_path[] = "/tmp/td_muon_in_XXXXXX", out_path[256];
    FILE *f = ref_create(in_path, out_path, sizeof out_path);
    int32_t hdr[8] = {0x46455254, L, H, C, T, V, B, STEPS};
    float hp[6] = {oc.lr, oc.beta1, oc.beta2, oc.eps, oc.weight_decay, oc.clip};
    ref_write(f, hdr, sizeof hdr);
    ref_write(f, hp, sizeof hp);
    ref_write_tensors(f, &t, params, V, C);
    ref_write(f, inputs, 4 * STEPS * B * T);
    ref_write(f, targets, 4 * STEPS * B * T);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/muon_ref.py %s %s %g %g %g %d", TD_SOURCE_DIR,
             in_path, out_path, oc.muon_lr, oc.muon_momentum, oc.muon_wd, oc.muon_nesterov);
    if (system(cmd) != 0) {
        fprintf(stderr, "FAIL: the PyTorch reference did not run (%s)\n", cmd);
        return 1;
    }
    FILE *o = fopen(out_path, "rb");
    TD_ASSERT(o);
    float *w0 = malloc(sizeof(float) * t.numel);
    memcpy(w0, params, sizeof(float) * t.numel);
    td_gpt model;
    td_gpt_create(&model, &t, B, 0);
    td_gpt_bind_flat(&model, params, grads);
    int fails = 0;
    float ref_losses[STEPS];
    ref_read(o, ref_losses, sizeof ref_losses);
    for (int s = 0; s < STEPS; s++) {
        memset(grads, 0, sizeof(float) * t.numel);
        double loss = td_gpt_forward(&model, inputs + s * B * T, targets + s * B * T) / (B * T);
        td_gpt_backward(&model, 1.0f / (B * T));
        double norm = sqrt(td_sumsq_host(td_ops_cpu(TD_K_F32), grads, t.numel));
        td_muon_update_on(td_ops_cpu(TD_K_F32), params, grads, m, v, 0, t.numel, &t, &oc, oc.lr, s + 1,
                          td_clip_scale(norm, oc.clip), 0);
        double rel = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
        printf("step %d: loss %.7f torch %.7f rel %.2e %s\n", s, loss, ref_losses[s], rel,
               rel <= 1e-5 ? "ok" : "FAIL");
        fails += rel > 1e-5;
    }
    /* The bound, in units of how far one step can move an element: AdamW's
     * lr, Muon's lr sqrt(max(1, R/C)) x the largest element of an
     * orthogonalized matrix (< 1). 1% of that x STEPS, as test_vs_torch
     * judges AdamW: fp32 gradients (~1e-6 relative) through Newton-Schulz
     * move an element by ~1e-4 of a step; a matrix orthogonalized whole
     * instead of as q, k, v, a wrong coefficient, scale or momentum moves
     * it by O(1) of a step. Each Muon row must move by >= 4x its bound. */
    double worst = 0.0;
    for (int i = 0; i < t.n_rows; i++) {
        td_param *p = &t.rows[i];
        size_t n = strcmp(p->name, "transformer.wte.weight") == 0 ? (size_t)V * C : p->numel;
        float *ref = malloc(4 * n);
        ref_read(o, ref, 4 * n);
        int mu = td_muon_row(p);
        int parts = p->groups > 1 ? p->groups : 1;
        double R = (double)p->shape[0] / parts, Cc = p->ndim == 2 ? p->shape[1] : 1;
        double step_move = mu ? oc.muon_lr * sqrt(fmax(1.0, R / Cc)) : oc.lr;
        double bound = 1e-2 * step_move * STEPS;
        if (strstr(p->name, "attn.c_attn.bias")) /* gpt_ref's zero-gradient key bias */
            for (int k = C; k < 2 * C; k++) ref[k] = params[p->offset + k];
        double e = 0.0, moved = 0.0;
        size_t w = 0;
        for (size_t k = 0; k < n; k++) {
            double d = fabs((double)params[p->offset + k] - ref[k]);
            if (d > e) e = d, w = k;
            moved = fmax(moved, fabs((double)ref[k] - w0[p->offset + k]));
        }
        int bad = e > bound || (mu && moved < 4 * bound);
        if (bad || mu)
            printf("%s %s%s: worst diff %.2e (bound %.2e), moved %.2e; element %zu trident %.8g torch %.8g\n",
                   bad ? "FAIL" : "ok  ", p->name, mu ? " (muon)" : "", e, bound, moved, w,
                   params[p->offset + w], ref[w]);
        fails += bad;
        worst = fmax(worst, e / bound);
        free(ref);
    }
    printf("parameters after %d steps: worst difference %.3f of the bound\n", STEPS, worst);
    fclose(o);
    remove(in_path);
    remove(out_path);
    td_gpt_destroy(&model);
    free(w0);
    td_free(params), td_free(grads), td_free(m), td_free(v);
    free(inputs), free(targets);
    td_param_table_free(&t);
    printf(fails ? "test_muon_vs_torch: FAILED (%d)\n" : "test_muon_vs_torch: all passed%.0d\n", fails);
    return fails ? 1 : 0;
}
