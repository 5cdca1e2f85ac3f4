/* Dynamic loss scaling through the trainer, on the layout given on the
 * command line (after --fault-rank R, the world rank whose gradient the test
 * fault turns +inf; it must hold TD_FAULT_GRAD_TENSOR, i.e. be on the first
 * pipeline stage). Runs, each 8 steps of a small model:
 *   ref    --loss-scale none
 *   dyn    --loss-scale dynamic, no fault: losses, norms and the final
 *          parameters and AdamW moments bitwise equal to ref (the scale is
 *          2^16, a power of two: scaling dloss and unscaling in the step
 *          pipeline are exact in fp32 unless a value under- or overflows,
 *          which these gradients (~1e-6..1) do not come near)
 *   skip   dynamic, growth window 3, TRIDENT_FAULT=grad-inf:3:R: exactly one
 *          skip, on every rank, naming the fault's tensor, rank R and the
 *          last micro-batch (-1 under pp: not known there); then everything
 *          bitwise equal to ref: a skip that moved a parameter, a moment,
 *          AdamW's t or the lr schedule would show; the logged scale of
 *          every step (and the final one) as the rules written out here say
 *   stuck  grad-inf-stuck:3:R: the run stops at step 3 after 10 skips in a
 *          row, scale 2^16 / 2^10 = 64
 *   below1 the same starting at scale 2: stops after 2 skips, scale 0.5 < 1 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/fault.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

#define STEPS 8
#define FAULT_STEP 3
#define WINDOW 3

static int fails, rank0;
#define FAIL(...)                       \
    do {                                \
        printf("FAIL: " __VA_ARGS__);   \
        printf("\n");                   \
        fails++;                        \
    } while (0)

static void run(td_train_result *res, int argc, char **argv, const char *scale, const char *fault,
                float init, int window, const char *log) {
    char *base[] = {"--data", TD_DATA_DIR "/tinyshakespeare.txt", "--layers", "2", "--heads", "2",
                    "--embd", "32", "--seq", "32", "--batch", "8", "--steps", "8", "--eval-every", "0",
                    "--threads", "1", "--loss-scale", (char *)scale, "--log", (char *)log};
    int nb = (int)(sizeof base / sizeof base[0]);
    char **all = malloc(sizeof(char *) * (size_t)(nb + argc));
    memcpy(all, base, sizeof base);
    memcpy(all + nb, argv, sizeof(char *) * (size_t)argc);
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, nb + argc, all);
    o.quiet = 1;
    o.loss_scale_init = init;
    o.loss_scale_window = window;
    if (fault)
        setenv("TRIDENT_FAULT", fault, 1);
    else
        unsetenv("TRIDENT_FAULT");
    td_fault_reload();
    td_train_run(&o, res, 1);
    free(all);
}

/* Bitwise equality of n floats; prints the worst element. */
static void same(const char *what, const char *run, const float *a, const float *b, size_t n) {
    size_t worst = 0, bad = 0;
    double wd = -1.0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            bad++;
            double d = fabs((double)a[i] - b[i]);
            if (!(d <= wd)) wd = d, worst = i;
        }
    if (bad)
        FAIL("%s: %s differs from ref in %zu of %zu elements (tolerance 0: power-of-two scaling is "
             "exact); worst [%zu] %.9g vs %.9g", run, what, bad, n, worst, a[worst], b[worst]);
}

static void same_run(const char *name, const td_train_result *r, const td_train_result *ref) {
    if (r->stop_step >= 0 || r->steps_done != STEPS) {
        FAIL("%s: stopped at %d after %d steps (%s)", name, r->stop_step, r->steps_done, r->stop_msg);
        return;
    }
    same("losses", name, r->losses, ref->losses, STEPS);
    same("gradient norms", name, r->grad_norms, ref->grad_norms, STEPS);
    if (!rank0) return;
    same("parameters", name, r->final_params, ref->final_params, ref->numel);
    same("AdamW m", name, r->final_m, ref->final_m, ref->numel);
    same("AdamW v", name, r->final_v, ref->final_v, ref->numel);
}

/* The skip run's log against the rules: one step line per step 0..7 with
 * the scale it ran with, one skip event at FAULT_STEP. */
static void check_log(const char *log) {
    double want[STEPS], scale = 65536.0;
    int clean = 0;
    for (int s = 0; s < STEPS; s++) {
        if (s == FAULT_STEP) scale *= 0.5, clean = 0; /* the skipped attempt */
        want[s] = scale;
        if (++clean == WINDOW) scale *= 2.0, clean = 0;
    }
    FILE *f = fopen(log, "r");
    if (!f) {
        FAIL("skip: no log %s", log);
        return;
    }
    char line[8192];
    int seen[STEPS] = {0}, skips = 0;
    double final = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p;
        if (strstr(line, "\"event\": \"skip\"")) {
            skips++;
            if (!strstr(line, "\"step\": 3,") || !strstr(line, TD_FAULT_GRAD_TENSOR))
                FAIL("skip: the skip event is not at step 3 or does not name %s: %s", TD_FAULT_GRAD_TENSOR, line);
            continue;
        }
        if (strncmp(line, "{\"event\": \"loss_scale\"", 22) == 0 && (p = strstr(line, "\"loss_scale\": ")))
            final = atof(p + 14);
        if (strncmp(line, "{\"step\": ", 9) != 0 || !strstr(line, "\"loss\"")) continue;
        int s = atoi(line + 9);
        p = strstr(line, "\"loss_scale\": ");
        if (s < 0 || s >= STEPS || !p) {
            FAIL("skip: step line without a loss scale or out of range: %s", line);
            continue;
        }
        seen[s]++;
        if (atof(p + 14) != want[s]) FAIL("skip: step %d ran at scale %g, want %g", s, atof(p + 14), want[s]);
    }
    fclose(f);
    for (int s = 0; s < STEPS; s++)
        if (seen[s] != 1) FAIL("skip: step %d logged %d times, want once (a skip must not advance the step)", s, seen[s]);
    if (skips != 1) FAIL("skip: %d skip events in the log, want 1", skips);
    if (final != scale) FAIL("skip: final scale logged %g, want %g", final, scale);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int me = td_comm_rank(td_comm_world());
    rank0 = me == 0;
    TD_CHECK(argc >= 3 && strcmp(argv[1], "--fault-rank") == 0, "usage: test_loss_scale --fault-rank R [layout flags]");
    int R = atoi(argv[2]);
    int n = argc - 3, pp = 0, K = 1;
    char **lay = argv + 3;
    for (int i = 0; i + 1 < n; i++) {
        if (strcmp(lay[i], "--pp") == 0) pp = atoi(lay[i + 1]) > 1;
        if (strcmp(lay[i], "--grad-accum") == 0 || strcmp(lay[i], "--micro-batches") == 0) K = atoi(lay[i + 1]);
    }
    char log[256], fault[64];
    snprintf(log, sizeof log, "/tmp/td_test_loss_scale_%d.jsonl", (int)getppid()); /* mpirun's: one name for all ranks */

    /* Under --precision fp16 the reference is dynamic scaling without a
     * fault (at scale 1 fp16 activation gradients underflow: what scaling is
     * for), and the skip run is not compared bit for bit: its retry of step
     * 3 runs at 2^15, where a few fp16 gradients round differently than at
     * 2^16 (measured: losses and norms equal, 54 of 29056 parameters 1 ulp
     * apart after 8 steps). That a skip moves no parameter, moment, t or lr
     * is shown bit for bit by the fp32 runs of this test (the step pipeline
     * does not depend on the precision); here the skip itself, its origin,
     * the scale schedule and the stops are checked under fp16 arithmetic. */
    int fp16 = 0;
    for (int i = 0; i + 1 < n; i++)
        if (strcmp(lay[i], "--precision") == 0 && strcmp(lay[i + 1], "fp16") == 0) fp16 = 1;
    td_train_result ref, dyn, skip, stuck, below;
    run(&ref, n, lay, fp16 ? "dynamic" : "none", NULL, 0, 0, log);
    run(&dyn, n, lay, "dynamic", NULL, 0, 0, log);
    same_run("dyn", &dyn, &ref);
    if (dyn.skipped_steps != 0 || dyn.loss_scale != 65536.0f)
        FAIL("dyn: %d skips, scale %g; want 0 and 65536", dyn.skipped_steps, dyn.loss_scale);

    snprintf(fault, sizeof fault, "grad-inf:%d:%d", FAULT_STEP, R);
    run(&skip, n, lay, "dynamic", fault, 0, WINDOW, log);
    if (!fp16) same_run("skip", &skip, &ref);
    int want_micro = pp ? -1 : K - 1;
    if (skip.skipped_steps != 1) FAIL("skip: %d steps skipped on rank %d, want 1", skip.skipped_steps, me);
    /* the same row on every rank (the tensor's name: check_log) */
    float rows[2] = {(float)skip.skip_row, -(float)skip.skip_row};
    td_allreduce(td_comm_world(), rows, 2, TD_F32, TD_MAX);
    if (skip.skip_row < 0 || rows[0] != -rows[1]) FAIL("skip: rank %d named row %d; rows differ over the ranks", me, skip.skip_row);
    if (skip.skip_rank != R || skip.skip_micro != want_micro)
        FAIL("skip: origin named rank %d micro-batch %d, want rank %d micro-batch %d", skip.skip_rank,
             skip.skip_micro, R, want_micro);
    if (rank0) check_log(log);

    snprintf(fault, sizeof fault, "grad-inf-stuck:%d:%d", FAULT_STEP, R);
    run(&stuck, n, lay, "dynamic", fault, 0, 0, log);
    if (stuck.stop_step != FAULT_STEP || stuck.skipped_steps != 10 || stuck.loss_scale != 64.0f ||
        (rank0 && !strstr(stuck.stop_msg, "10 steps in a row skipped")))
        FAIL("stuck: stop at %d, %d skips, scale %g, '%s'; want step %d, 10 skips, 64, '10 steps in a row "
             "skipped'", stuck.stop_step, stuck.skipped_steps, stuck.loss_scale, stuck.stop_msg, FAULT_STEP);
    run(&below, n, lay, "dynamic", fault, 2.0f, 0, log);
    if (below.stop_step != FAULT_STEP || below.skipped_steps != 2 || below.loss_scale != 0.5f ||
        (rank0 && !strstr(below.stop_msg, "loss scale fell below 1")))
        FAIL("below1: stop at %d, %d skips, scale %g, '%s'; want step %d, 2 skips, 0.5, 'loss scale fell "
             "below 1'", below.stop_step, below.skipped_steps, below.loss_scale, below.stop_msg, FAULT_STEP);
    if (rank0) unlink(log);
    td_train_result_free(&ref);
    td_train_result_free(&dyn);
    td_train_result_free(&skip);
    td_train_result_free(&stuck);
    td_train_result_free(&below);
    /* every rank's verdict */
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_SUM);
    if (rank0) printf("loss scaling: %s (%g failures over the ranks)\n", f > 0 ? "FAILED" : "all checks passed", f);
    td_comm_finalize();
    return f > 0 ? 1 : 0;
}
