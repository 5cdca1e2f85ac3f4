/* The whole model against PyTorch (tests/ref/gpt_ref.py, Debian's
 * python3-torch) on the same weights and tokens: the loss and every
 * parameter gradient of one step, then 10 AdamW steps whose losses, grad
 * norms and final weights must match. The steps are chosen so that gradient
 * clipping engages at every step and weight decay moves the weights by more
 * than the tolerance (both asserted), so a build without either fails. */
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

enum { L = 2, H = 4, C = 32, T = 16, V = 37, B = 3, STEPS = 10 };

/* Worst |a - b| relative to max|b| of the tensor (elements near zero make a
 * per-element relative error meaningless). */
static double cmp(const float *a, const float *b, size_t n, size_t *worst) {
    double maxb = 0.0, maxd = 0.0;
    for (size_t i = 0; i < n; i++) maxb = fmax(maxb, fabs(b[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > maxd) maxd = d, *worst = i;
    }
    return maxb > 0 ? maxd / maxb : maxd;
}

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
    /* perturb biases and norm gains so that their gradients are exercised */
    for (int i = 0; i < t.n_rows; i++) {
        td_param *p = &t.rows[i];
        if (p->ndim == 2) continue;
        for (size_t k = 0; k < p->numel; k++)
            params[p->offset + k] += (float)(0.1 * td_rng_normal(9, (uint64_t)i, k));
    }
    int *inputs = malloc(sizeof(int) * STEPS * B * T), *targets = malloc(sizeof(int) * STEPS * B * T);
    ref_tokens(inputs, targets, STEPS * B * T, V);
    /* clip: the pre-clip gradient norms of this case are 0.69..0.99 (printed
     * below), so 0.25 clips every step, and the test asserts that it did.
     * weight_decay: 1.0, so decay moves the largest 2-D weights by several
     * times the parameter tolerance over the run (asserted below); at 0.1 a
     * build without decay passed. */
    td_optim_config oc = {.lr = 1e-3f, .min_lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .weight_decay = 1.0f, .clip = 0.25f, .warmup = 0, .max_steps = STEPS};

    char in_path[] = "/tmp/td_ref_in_XXXXXX", out_path[256];
    FILE *f = ref_create(in_path, out_path, sizeof out_path);
    int32_t hdr[8] = {0x46455254, L, H, C, T, V, B, STEPS};
    float hp[6] = {oc.lr, oc.beta1, oc.beta2, oc.eps, oc.weight_decay, oc.clip};
    ref_write(f, hdr, sizeof hdr);
    ref_write(f, hp, sizeof hp);
    ref_write_tensors(f, &t, params, V, C);
    ref_write(f, inputs, 4 * STEPS * B * T);
    ref_write(f, targets, 4 * STEPS * B * T);
    fclose(f);

    if (ref_run(TD_SOURCE_DIR "/tests/ref/gpt_ref.py", in_path, out_path)) return 1;
    FILE *o = fopen(out_path, "rb");
    TD_ASSERT(o);

    float *w0 = malloc(sizeof(float) * t.numel); /* initial weights, for the decay check */
    memcpy(w0, params, sizeof(float) * t.numel);
    td_gpt model;
    td_gpt_create(&model, &t, B, 0);
    td_gpt_bind_flat(&model, params, grads);
    int fails = 0;
    /* Tolerances. Loss: 1e-5 relative, the aim; fp32 sums of 48
     * tokens reordered differ by ~1e-7. Gradients: 1e-4 of the tensor's
     * largest element: GEMM reductions over up to 4C = 128 terms and 48 rows
     * in a different order than PyTorch's give errors of ~1e-6 here; 1e-4
     * leaves margin without hiding a wrong term (a missing or doubled path
     * changes gradients by O(1) of their scale). */
    const double tol_loss = 1e-5, tol_grad = 1e-4;
    float ref_loss0;
    ref_read(o, &ref_loss0, 4);
    double loss0 = td_gpt_forward(&model, inputs, targets) / (B * T);
    td_gpt_backward(&model, 1.0f / (B * T));
    double rel = fabs(loss0 - ref_loss0) / fabs(ref_loss0);
    printf("loss0: trident %.7f torch %.7f rel %.2e %s\n", loss0, ref_loss0, rel,
           rel <= tol_loss ? "ok" : "FAIL");
    fails += rel > tol_loss;
    double worst_grad = 0.0;
    for (int i = 0; i < t.n_rows; i++) {
        td_param *p = &t.rows[i];
        size_t n = p->numel;
        if (strcmp(p->name, "transformer.wte.weight") == 0) {
            n = (size_t)V * C;
            for (size_t k = n; k < p->numel; k++)
                if (grads[p->offset + k] != 0.0f) {
                    printf("FAIL: padded vocab row element %zu has gradient %g\n", k, grads[p->offset + k]);
                    fails++;
                    break;
                }
        }
        float *ref = malloc(4 * n);
        ref_read(o, ref, 4 * n);
        size_t w = 0;
        double e = cmp(grads + p->offset, ref, n, &w);
        if (e > worst_grad) worst_grad = e;
        if (e > tol_grad) {
            printf("FAIL grad %s: worst element %zu trident %.8g torch %.8g (err %.2e of max)\n", p->name,
                   w, grads[p->offset + w], ref[w], e);
            fails++;
        }
        free(ref);
    }
    printf("gradients: %d tensors, worst error %.2e of the tensor max (tol %.0e) %s\n", t.n_rows,
           worst_grad, tol_grad, worst_grad <= tol_grad ? "ok" : "FAIL");

    /* 10 AdamW steps from the same start */
    float ref_losses[STEPS], ref_norms[STEPS];
    ref_read(o, ref_losses, sizeof ref_losses);
    ref_read(o, ref_norms, sizeof ref_norms);
    for (int s = 0; s < STEPS; s++) {
        memset(grads, 0, sizeof(float) * t.numel);
        double loss = td_gpt_forward(&model, inputs + s * B * T, targets + s * B * T) / (B * T);
        td_gpt_backward(&model, 1.0f / (B * T));
        double norm = sqrt(td_sumsq_host(td_ops_cpu(TD_K_F32), grads, t.numel));
        td_adamw_update_on(td_ops_cpu(TD_K_F32), params, grads, m, v, 0, t.numel, &t, &oc, oc.lr, s + 1,
                           td_clip_scale(norm, oc.clip), 0);
        double lr_ = fabs(loss - ref_losses[s]) / fabs(ref_losses[s]);
        double nr = fabs(norm - ref_norms[s]) / fabs(ref_norms[s]);
        int bad = lr_ > tol_loss || nr > tol_grad;
        printf("step %d: loss %.7f torch %.7f rel %.2e | norm %.6f torch %.6f rel %.2e | clip %g %s\n", s,
               loss, ref_losses[s], lr_, norm, ref_norms[s], nr, oc.clip, bad ? "FAIL" : "ok");
        fails += bad;
        /* The case must keep clipping: a norm at or below the threshold
         * would leave clipping untested without anyone noticing. */
        if (!(norm > oc.clip)) {
            printf("FAIL: step %d: gradient norm %.6f is not above --clip %g, so clipping is not exercised; "
                   "lower the clip in this test\n", s, norm, oc.clip);
            fails++;
        }
    }
    /* Weights after 10 Adam steps are judged in units of how far Adam can
     * move an element: |m_hat / sqrt(v_hat)| <= ~1, so at most lr per step.
     * Where an element's gradient is near zero (e.g. c_proj columns behind a
     * GELU unit that is off for the batch), fp32 rounding differences become
     * O(1) relative differences of m/sqrt(v) and move it by a fraction of lr,
     * so tensor-relative tolerances fail on healthy code. A wrong gradient
     * term moves elements by O(lr) per step; 1% of lr x steps separates the
     * two (measured worst: ~0.06%). */
    double worst_param = 0.0, bound = 1e-2 * oc.lr * STEPS;
    /* Weight decay must be visible above that bound: alone it shrinks a 2-D
     * weight w by about STEPS x lr x wd x |w| (the initial weights, as the
     * decay is the same with or without the rest of the update). Require the
     * largest such shift to be >= 4x the bound, so a build without decay (or
     * decaying the wrong tensors: 1-D gains near 1 would move by
     * STEPS x lr x wd) fails the comparison below. */
    double max_w = 0.0;
    for (int i = 0; i < t.n_rows; i++)
        if (t.rows[i].ndim == 2)
            for (size_t k = 0; k < t.rows[i].numel; k++) max_w = fmax(max_w, fabs(w0[t.rows[i].offset + k]));
    double decay_shift = STEPS * oc.lr * oc.weight_decay * max_w;
    printf("weight decay: moves the largest 2-D weight (|w| %.4f) by ~%.2e = %.1fx the parameter tolerance "
           "%.1e (need >= 4x) %s\n", max_w, decay_shift, decay_shift / bound, bound,
           decay_shift >= 4 * bound ? "ok" : "FAIL");
    fails += decay_shift < 4 * bound;
    for (int i = 0; i < t.n_rows; i++) {
        td_param *p = &t.rows[i];
        size_t n = strcmp(p->name, "transformer.wte.weight") == 0 ? (size_t)V * C : p->numel;
        float *ref = malloc(4 * n);
        ref_read(o, ref, 4 * n);
        /* The key bias (c_attn.bias [C, 2C)) has an exactly zero gradient
         * (a constant added to every key shifts each score row by a constant,
         * which softmax ignores; its step-0 gradient is checked above). Its
         * computed gradient is pure rounding noise that Adam normalises into
         * updates of up to lr, different in each implementation, so the
         * trajectory comparison leaves those elements out. */
        if (strstr(p->name, "attn.c_attn.bias"))
            for (int k = C; k < 2 * C; k++) ref[k] = params[p->offset + k];
        size_t w = 0;
        double e = 0.0;
        for (size_t k = 0; k < n; k++) {
            double d = fabs((double)params[p->offset + k] - ref[k]);
            if (d > e) e = d, w = k;
        }
        if (e > worst_param) worst_param = e;
        if (e > bound) {
            printf("FAIL param %s after %d steps: element %zu trident %.8g torch %.8g (diff %.2e > %.1e)\n",
                   p->name, STEPS, w, params[p->offset + w], ref[w], e, bound);
            fails++;
        }
        free(ref);
    }
    printf("parameters after %d steps: worst difference %.2e = %.3f%% of lr x steps (tol 1%%) %s\n", STEPS,
           worst_param, 100.0 * worst_param / (oc.lr * STEPS), worst_param <= bound ? "ok" : "FAIL");
    fclose(o);
    remove(in_path);
    remove(out_path);
    td_gpt_destroy(&model);
    free(w0);
    td_free(params), td_free(grads), td_free(m), td_free(v);
    free(inputs), free(targets);
    td_param_table_free(&t);
    printf(fails ? "test_vs_torch: FAILED (%d)\n" : "test_vs_torch: all passed%.0d\n", fails);
    return fails ? 1 : 0;
}
