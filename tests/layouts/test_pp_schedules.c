/* The pipeline schedules compute the same step: gpipe, 1f1b and zb-h1 at
 * the same pp and micro-batches give the same losses and gradient norms,
 * bit for bit. Every schedule accumulates a unit's micro-batch gradients in
 * micro-batch order and reduces them the same way, so only the order of
 * independent work differs; a schedule that dropped, repeated or reordered
 * a micro-batch's contribution would not be bitwise equal. interleaved (2
 * chunks per stage) places other blocks on each stage, so the gradient
 * norm's per-stage partial sums group differently (last-bit differences,
 * which reach the update through clipping): it is held to 1e-6 relative.
 * (Each is also checked against one process within 1e-5 by test_layouts.)
 * Usage (under mpirun -np P): test_pp_schedules [train flags] */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int P = td_comm_size(td_comm_world()), me = td_comm_rank(td_comm_world());
    const char *kinds[] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
    enum { STEPS = 12 };
    float loss[4][STEPS], norm[4][STEPS];
    for (int k = 0; k < 4; k++) {
        td_train_opts o;
        td_train_opts_default(&o);
        o.data = TD_DATA_DIR "/tinyshakespeare.txt";
        o.layers = 4, o.heads = 4, o.embd = 64, o.seq = 32, o.batch = 12, o.steps = STEPS;
        o.optim.warmup = 3;
        o.eval_every = 0, o.threads = 1, o.quiet = 1, o.log_every = 1000;
        o.pp = P, o.grad_accum = 2 * P, o.schedule = kinds[k];
        o.virtual_stages = strcmp(kinds[k], "interleaved") == 0 ? 2 : 1;
        td_train_opts_parse(&o, argc - 1, argv + 1);
        td_train_result res;
        td_train_run(&o, &res, 0);
        memcpy(loss[k], res.losses, sizeof loss[k]);
        memcpy(norm[k], res.grad_norms, sizeof norm[k]);
        td_train_result_free(&res);
    }
    int fails = 0;
    if (me == 0) {
        for (int k = 1; k < 4; k++) {
            int exact = strcmp(kinds[k], "interleaved") != 0, same = 1;
            double worst = 0;
            for (int s = 0; s < STEPS; s++) {
                double dl = fabs((double)loss[k][s] - loss[0][s]) / fabs((double)loss[0][s]);
                double dn = fabs((double)norm[k][s] - norm[0][s]) / fabs((double)norm[0][s]);
                worst = fmax(worst, fmax(dl, dn));
                int bad = exact ? memcmp(&loss[k][s], &loss[0][s], sizeof(float)) ||
                                      memcmp(&norm[k][s], &norm[0][s], sizeof(float))
                                : !(dl <= 1e-6 && dn <= 1e-6);
                if (bad) {
                    printf("FAIL %s step %d: loss %.9g norm %.9g, gpipe loss %.9g norm %.9g\n", kinds[k], s,
                           loss[k][s], norm[k][s], loss[0][s], norm[0][s]);
                    same = 0;
                }
            }
            printf("%s: %d steps %s gpipe's %s (largest relative difference %.2e; last loss %.7f)\n", kinds[k],
                   STEPS, same ? "equal to" : "DIFFERENT from", exact ? "bit for bit" : "within 1e-6",
                   worst, loss[k][STEPS - 1]);
            fails += !same;
        }
    }
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_MAX);
    td_comm_finalize();
    return f > 0 ? 1 : 0;
}
