/* The learning-rate schedule, step by step, through the trainer: each case
 * runs `trident train` flags through td_train_opts_parse and td_train_run
 * with --log, reads the "lr" the trainer logged for every step, and compares
 * it with nanoGPT's get_lr() written out here independently (linear warm-up,
 * cosine decay, floor at min-lr). Cases: warm-up then cosine, no warm-up,
 * warm-up as long as or longer than the run, min-lr = lr, and a decay
 * horizon shorter than the run (nanoGPT's lr_decay_iters < max_iters, set
 * in-process: the command line ties it to --steps) so the floor is reached. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

/* nanoGPT train.py get_lr(it), with warmup_iters, lr_decay_iters,
 * learning_rate, min_lr:
 *   if it < warmup_iters: return learning_rate * (it + 1) / (warmup_iters + 1)
 *   if it > lr_decay_iters: return min_lr
 *   decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
 *   coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
 *   return min_lr + coeff * (learning_rate - min_lr)
 * The one case nanoGPT leaves undefined (it == lr_decay_iters ==
 * warmup_iters divides 0 by 0) is the end of the decay: min_lr. */
static double oracle_lr(int it, int warmup, int decay_iters, double lr, double min_lr) {
    if (it < warmup) return lr * (it + 1) / (warmup + 1);
    if (it >= decay_iters) return min_lr; /* it == decay_iters: coeff = 0 in nanoGPT's formula */
    double ratio = (double)(it - warmup) / (double)(decay_iters - warmup);
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));
    return min_lr + coeff * (lr - min_lr);
}

typedef struct {
    const char *name;
    int steps, warmup;
    const char *lr, *min_lr;
    int decay_iters; /* 0: the command line's (= --steps) */
} lr_case;

/* Returns the number of failures; rank 0 reads the log. */
static int run_case(const lr_case *c, const char *log) {
    char steps[16], warmup[16];
    snprintf(steps, sizeof steps, "%d", c->steps);
    snprintf(warmup, sizeof warmup, "%d", c->warmup);
    char *argv[] = {"--data", TD_DATA_DIR "/tinyshakespeare.txt", "--layers", "1", "--heads", "2",
                    "--embd", "16", "--seq", "16", "--batch", "2", "--eval-every", "0",
                    "--threads", "1", "--steps", steps, "--warmup", warmup, "--lr", (char *)c->lr,
                    "--min-lr", (char *)c->min_lr, "--log", (char *)log};
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, (int)(sizeof argv / sizeof argv[0]), argv);
    o.quiet = 1;
    int decay = c->decay_iters ? c->decay_iters : c->steps;
    if (c->decay_iters) o.optim.max_steps = c->decay_iters;
    td_train_result res;
    td_train_run(&o, &res, 0);
    td_train_result_free(&res);
    if (td_comm_rank(td_comm_world()) != 0) return 0;

    double lr = atof(c->lr), min_lr = atof(c->min_lr);
    double *got = calloc((size_t)c->steps, sizeof(double));
    int *seen = calloc((size_t)c->steps, sizeof(int));
    FILE *f = fopen(log, "r");
    TD_ASSERT(f && got && seen);
    char line[4096];
    int fails = 0;
    while (fgets(line, sizeof line, f)) {
        const char *ps = strstr(line, "\"step\": "), *pl = strstr(line, "\"lr\": ");
        if (!ps || !pl) continue; /* start, memory and eval lines */
        int s = atoi(ps + 8);
        if (s < 0 || s >= c->steps) {
            printf("FAIL %s: log has step %d outside [0, %d)\n", c->name, s, c->steps);
            fails++;
            continue;
        }
        got[s] = atof(pl + 6);
        seen[s]++;
    }
    fclose(f);
    /* Tolerance: the log prints lr with "%.6g", 6 significant digits, so a
     * correct value reads back within 5e-6 relative; the trainer's float32
     * lr adds 6e-8. 1e-5 relative is above both, and far below what a wrong
     * convention changes (a warm-up of (it+1)/W instead of (it+1)/(W+1)
     * differs by 1/W, a cosine off by one step by ~1/steps). */
    const double tol = 1e-5;
    double worst = 0.0;
    int worst_step = -1;
    for (int s = 0; s < c->steps; s++) {
        if (seen[s] != 1) {
            printf("FAIL %s: step %d appears %d times in the log (want every step once)\n", c->name, s,
                   seen[s]);
            fails++;
            continue;
        }
        double want = oracle_lr(s, c->warmup, decay, lr, min_lr);
        double rel = fabs(got[s] - want) / want;
        if (rel > worst) worst = rel, worst_step = s;
        if (rel > tol) fails++;
    }
    if (worst_step >= 0)
        printf("%-34s %2d steps: worst step %2d lr %.6g, nanoGPT formula %.6g (rel %.1e, tol %.0e) %s\n",
               c->name, c->steps, worst_step, got[worst_step],
               oracle_lr(worst_step, c->warmup, decay, lr, min_lr), worst, tol, fails ? "FAIL" : "ok");
    /* a few points of the curve, for the reader */
    printf("    lr:");
    for (int s = 0; s < c->steps; s += (c->steps + 7) / 8) printf(" [%d] %.4g", s, got[s]);
    printf(" [%d] %.4g\n", c->steps - 1, got[c->steps - 1]);
    free(got);
    free(seen);
    return fails;
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    char log[] = "/tmp/td_lr_XXXXXX";
    int fd = -1;
    if (td_comm_rank(td_comm_world()) == 0) {
        fd = mkstemp(log);
        TD_ASSERT(fd >= 0);
        close(fd);
    }
    const lr_case cases[] = {
        {"warm-up 8, cosine 1e-2 -> 1e-3", 40, 8, "1e-2", "1e-3", 0},
        {"no warm-up", 20, 0, "1e-2", "1e-3", 0},
        {"warm-up = steps", 20, 20, "1e-2", "1e-3", 0},
        {"warm-up > steps", 20, 30, "1e-2", "1e-3", 0},
        {"min-lr = lr", 20, 4, "3e-3", "3e-3", 0},
        {"decay horizon 24 < 32 steps: floor", 32, 4, "1e-2", "1e-3", 24},
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fails += run_case(&cases[i], log);
    if (td_comm_rank(td_comm_world()) == 0) {
        remove(log);
        printf(fails ? "test_lr_schedule: FAILED (%d)\n" : "test_lr_schedule: all passed%.0d\n", fails);
    }
    td_comm_finalize();
    return fails ? 1 : 0;
}
