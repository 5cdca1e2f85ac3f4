/* Stale-synchronous parameter server converges: 200 steps with
 * --ps-staleness 2 end within 5% of the synchronous run's loss (mean of the
 * last 20 steps, so one noisy batch does not decide). Also prints the
 * staleness actually observed. Run under mpirun with dp workers + 1 server. */
#include <math.h>
#include <stdio.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

static double run(int staleness, int *max_stale, double *mean_stale) {
    td_train_opts o;
    td_train_opts_default(&o);
    o.data = TD_DATA_DIR "/tinyshakespeare.txt";
    o.layers = 2, o.heads = 4, o.embd = 64, o.seq = 32, o.batch = 16, o.steps = 200;
    o.optim.warmup = 20, o.optim.max_steps = o.steps;
    o.eval_every = 0, o.threads = 1, o.quiet = 1;
    o.dp_mode = "ps", o.ps_servers = 1, o.ps_staleness = staleness;
    td_train_result res;
    td_train_run(&o, &res, 0);
    double tail = 0;
    for (int s = o.steps - 20; s < o.steps; s++) tail += res.losses[s];
    *max_stale = res.max_staleness;
    *mean_stale = res.mean_staleness;
    td_train_result_free(&res);
    return tail / 20;
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int m0, m2;
    double a0, a2;
    double sync = run(0, &m0, &a0);
    double ssp = run(2, &m2, &a2);
    int fails = 0;
    if (td_comm_rank(td_comm_world()) == 0) {
        double rel = fabs(ssp - sync) / sync;
        printf("sync ps: loss %.4f (staleness max %d)\n", sync, m0);
        printf("ssp K=2: loss %.4f (staleness observed max %d, mean %.2f)\n", ssp, m2, a2);
        printf("relative difference %.2f%% (tol 5%%) %s\n", 100 * rel, rel <= 0.05 ? "ok" : "FAIL");
        fails = rel > 0.05 || m0 != 0 || m2 > 2;
        if (m0 != 0) printf("FAIL: synchronous run observed staleness %d\n", m0);
        if (m2 > 2) printf("FAIL: staleness %d exceeds the bound 2\n", m2);
    }
    td_comm_finalize();
    return fails;
}
