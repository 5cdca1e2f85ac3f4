/* Document masking (--doc-mask, --eod-mask-loss) against PyTorch
 * (tests/ref/doc_mask_ref.py: llama_ref.py's independent Llama with an
 * explicit [B, T, T] mask built there from document ids): the logits, the
 * loss and every parameter gradient of one step, on tokens with documents
 * of one token, documents across the sequence's start and end, and a
 * sequence of one document; grouped-query attention with rotary positions.
 * The second case also drops the loss on end-of-text targets (the mean over
 * the targets kept); the third restarts the rotary positions at each
 * document start (--doc-positions reset; the reference counts them from
 * its document ids). And the mask matters: the same step unmasked differs
 * from the reference by far more than the tolerance. The reset does not,
 * by design of rotary positions: attention within a document sees only
 * i - j, which shifting the document's positions keeps, so the packed
 * positions match the reset reference too (checked: it is the reference's
 * statement as well); what the reset changes is the rows' table, checked
 * against cos/sin of t - start(t) computed here in double from the ends
 * placed (a wrong sequence's or position's table also moves i - j and
 * fails the reference). Learned positions are absolute, so there the reset
 * is the reference's check itself: GPT-2 (the reference's own GPT-2, its
 * wpe rows looked up at t - start(t) computed there) with the reset
 * matches, and the same model without it, the packed positions, fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/model.h"
#include "ref_io.h"

#ifndef TD_SOURCE_DIR
#define TD_SOURCE_DIR "."
#endif

enum { L = 2, H = 4, KV = 2, C = 32, F = 48, T = 16, V = 37, B = 3, EOD = 5, NCASE = 3 };

static void build(ref_model *mc) {
    mc->cfg = (td_gpt_config){.L = L, .H = H, .C = C, .T = T, .V = V, .arch = TD_ARCH_LLAMA, .KV = KV, .F = F,
                              .tie = TD_TIE_OFF, .rope_theta = 10000};
    ref_model_build(mc);
}

/* GPT-2 of the same sizes: learned positions, tied head */
static void build_gpt2(ref_model *mc) {
    mc->cfg = (td_gpt_config){.L = L, .H = H, .C = C, .T = T, .V = V, .arch = TD_ARCH_GPT2};
    ref_model_build(mc);
}

static void write_case(FILE *f, const ref_model *mc, int mask_loss, int reset, const int *inputs,
                       const int *targets) {
    int32_t pre[3] = {EOD, mask_loss, reset};
    ref_write(f, pre, sizeof pre);
    ref_write_llama_case(f, mc, B, mc->cfg.arch == TD_ARCH_GPT2, inputs, targets);
}

/* One step of the model (masked: documents set) against the reference's
 * output; returns the worst of loss, logits and gradient errors relative
 * to their tolerances (> 1: outside). */
static double step_vs(ref_model *m, FILE *o, int masked, int mask_loss, int reset, const int *inputs,
                      const int *targets, float *ref, const char *what) {
    const double tol_loss = 1e-5, tol = 1e-4; /* as test_llama_vs_torch derives them */
    td_gpt model;
    td_gpt_create(&model, &m->t, B, 0);
    td_gpt_bind_flat(&model, m->params, m->grads);
    memset(m->grads, 0, sizeof(float) * m->t.numel);
    if (masked) td_gpt_doc_mask(&model, EOD);
    if (reset) td_gpt_doc_positions(&model, 1);
    td_gpt_set_documents(&model, inputs);
    int *tg = malloc(sizeof(int) * B * T);
    memcpy(tg, targets, sizeof(int) * B * T);
    long kept = mask_loss ? td_doc_mask_targets(tg, (size_t)B * T, EOD) : B * T;
    float ref_loss;
    ref_read(o, &ref_loss, 4);
    ref_read(o, ref, sizeof(float) * (size_t)B * T * V);
    td_gpt_forward(&model, inputs, NULL);
    double elog = ref_cmp(model.logits, (size_t)m->cfg.Vp, ref, (size_t)B * T, V);
    double loss = td_gpt_forward(&model, inputs, tg) / (double)kept;
    td_gpt_backward(&model, 1.0f / (float)kept);
    double rel = fabs(loss - ref_loss) / fabs(ref_loss);
    const char *worst_name;
    double worst = ref_cmp_grads(o, m, ref, &worst_name);
    double r = fmax(rel / tol_loss, fmax(elog / tol, worst / tol));
    printf("%s: loss %.7f torch %.7f (rel %.1e, %ld targets) | logits %.1e | %d gradients, worst %.1e (%s)\n", what,
           loss, ref_loss, rel, kept, elog, m->t.n_rows, worst, worst_name);
    td_gpt_destroy(&model);
    free(tg);
    return r;
}

/* The reset's rotary table [B, T, hs] against cos/sin, in double, of
 * t minus the position after the last end-of-text before t. */
static int table_vs(ref_model *m, const int *inputs) {
    td_gpt model;
    td_gpt_create(&model, &m->t, B, 0);
    td_gpt_doc_mask(&model, EOD);
    td_gpt_doc_positions(&model, 1);
    td_gpt_set_documents(&model, inputs);
    const int hs = C / H;
    double worst = 0.0;
    for (int b = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && inputs[b * T + t - 1] == EOD) start = t;
            const float *cs = model.rope_doc_host + ((size_t)b * T + t) * hs;
            for (int i = 0; i < hs / 2; i++) {
                double a = (t - start) * pow(10000.0, -2.0 * i / hs);
                worst = fmax(worst, fmax(fabs(cs[i] - cos(a)), fabs(cs[hs / 2 + i] - sin(a))));
            }
        }
    }
    td_gpt_destroy(&model);
    /* fp32 angles up to T: a few ulps of T's size */
    int bad = worst > 1e-5;
    printf("%s the reset's rotary table vs cos/sin of t - start(t): worst %.1e\n", bad ? "FAIL" : "ok  ", worst);
    return bad;
}

int main(void) {
    int *inputs = malloc(sizeof(int) * B * T), *targets = malloc(sizeof(int) * B * T);
    ref_tokens(inputs, targets, B * T, V);
    for (int i = 0; i < B * T; i++)
        if (inputs[i] == EOD) inputs[i] = EOD + 1; /* only the end-of-texts placed below */
    /* sequence 0: documents [0,3] [4] [5,10] [11,15]; 1: one document;
     * 2: an end-of-text first and last */
    int ends[][2] = {{0, 3}, {0, 4}, {0, 10}, {2, 0}, {2, 15}};
    for (size_t e = 0; e < sizeof ends / sizeof ends[0]; e++) inputs[ends[e][0] * T + ends[e][1]] = EOD;
    for (int b = 0; b < B; b++) /* targets: the next input, so end-of-text targets occur */
        for (int t = 0; t + 1 < T; t++) targets[b * T + t] = inputs[b * T + t + 1];
    ref_model mc[NCASE], mg;
    char in_path[] = "/tmp/td_docmask_ref_XXXXXX", out_path[256];
    FILE *f = ref_create(in_path, out_path, sizeof out_path);
    int32_t top[2] = {0x4B53444D, NCASE + 4};
    ref_write(f, top, sizeof top);
    for (int c = 0; c < NCASE; c++) { /* masked; eod loss masked; positions reset */
        build(&mc[c]);
        write_case(f, &mc[c], c == 1, c == 2, inputs, targets);
    }
    write_case(f, &mc[0], 0, 0, inputs, targets); /* again, for the unmasked model */
    write_case(f, &mc[2], 0, 1, inputs, targets); /* again, for the model without the reset */
    build_gpt2(&mg); /* GPT-2, positions reset: for the model with and without the reset */
    write_case(f, &mg, 0, 1, inputs, targets);
    write_case(f, &mg, 0, 1, inputs, targets);
    fclose(f);
    if (ref_run(TD_SOURCE_DIR "/tests/ref/doc_mask_ref.py", in_path, out_path)) return 1;
    FILE *o = fopen(out_path, "rb");
    TD_ASSERT(o);
    float *ref = malloc(sizeof(float) * (size_t)B * T * V * 4);
    int fails = 0;
    double r0 = step_vs(&mc[0], o, 1, 0, 0, inputs, targets, ref, "doc mask");
    double r1 = step_vs(&mc[1], o, 1, 1, 0, inputs, targets, ref, "doc mask, eod loss masked");
    double r2 = step_vs(&mc[2], o, 1, 0, 1, inputs, targets, ref, "doc mask, positions reset");
    double ru = step_vs(&mc[0], o, 0, 0, 0, inputs, targets, ref, "unmasked model vs the masked reference");
    double rp = step_vs(&mc[2], o, 1, 0, 0, inputs, targets, ref, "packed positions vs the reset reference");
    double rg = step_vs(&mg, o, 1, 0, 1, inputs, targets, ref, "gpt2 doc mask, learned positions reset");
    double rl = step_vs(&mg, o, 1, 0, 0, inputs, targets, ref, "gpt2 packed positions vs the reset reference");
    fails += r0 > 1, fails += r1 > 1, fails += r2 > 1, fails += rg > 1;
    printf("doc mask %s, eod loss masked %s, positions reset %s (worst %.2f, %.2f, %.2f of the tolerances)\n",
           r0 > 1 ? "FAIL" : "ok", r1 > 1 ? "FAIL" : "ok", r2 > 1 ? "FAIL" : "ok", r0, r1, r2);
    if (ru < 100) fails++, printf("FAIL: without the mask the model is only %.1f tolerances off\n", ru);
    else printf("ok   the mask matters: unmasked, %.0f tolerances off\n", ru);
    if (rp > 1) fails++, printf("FAIL: rotary is relative, yet the packed positions are %.1f tolerances off\n", rp);
    else printf("ok   rotary is relative within a document: packed positions %.2f of the tolerances\n", rp);
    printf("gpt2 learned positions reset %s (worst %.2f of the tolerances)\n", rg > 1 ? "FAIL" : "ok", rg);
    if (rl < 100) fails++, printf("FAIL: without the reset gpt2 is only %.1f tolerances off\n", rl);
    else printf("ok   learned positions are absolute: without the reset, %.0f tolerances off\n", rl);
    fails += table_vs(&mc[2], inputs);
    for (int c = 0; c < NCASE; c++) ref_model_free(&mc[c]);
    ref_model_free(&mg);
    fclose(o);
    remove(in_path);
    remove(out_path);
    free(ref), free(inputs), free(targets);
    printf(fails ? "test_doc_mask_vs_torch: FAILED (%d)\n" : "test_doc_mask_vs_torch: all passed%.0d\n", fails);
    return fails ? 1 : 0;
}
