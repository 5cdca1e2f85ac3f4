/* Stale-synchronous parameter servers: staleness happens, stays within the
 * bound, and costs little. Worker 1 (world rank 1) is made slow on purpose
 * with the test-only hook TRIDENT_TEST_PS_DELAY_MS (src/parallel/ps.c: it
 * sleeps before pushing each step's gradient), so with --ps-staleness 2
 * worker 0 must be answered with parameters that miss worker 1's latest
 * gradient. The test asserts:
 *   - the synchronous run (K = 0) observed staleness 0, despite the delay;
 *   - the K = 2 run observed a maximum staleness >= 1 (it really ran stale;
 *     a stale mode that silently ran synchronously fails here) and <= 2;
 *   - the mean loss of the last 20% of steps is within 2% of the
 *     synchronous run's.
 * Run under mpirun with 2 workers + 1 server. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

enum { STEPS = 400, K = 2, DELAY_MS = 4 };

static double run(int staleness, int *max_stale, double *mean_stale) {
    td_train_opts o;
    td_train_opts_default(&o);
    o.data = TD_DATA_DIR "/tinyshakespeare.txt";
    o.layers = 2, o.heads = 4, o.embd = 32, o.seq = 32, o.batch = 16, o.steps = STEPS;
    o.optim.warmup = 20, o.optim.max_steps = o.steps;
    o.eval_every = 0, o.threads = 1, o.quiet = 1;
    o.dp_mode = "ps", o.ps_servers = 1, o.ps_staleness = staleness;
    td_train_opts_choices(&o);
    td_train_result res;
    td_train_run(&o, &res, 0);
    int n = STEPS / 5; /* the last 20% of steps */
    double tail = 0;
    for (int s = STEPS - n; s < STEPS; s++) tail += res.losses[s];
    *max_stale = res.max_staleness;
    *mean_stale = res.mean_staleness;
    td_train_result_free(&res);
    return tail / n;
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    TD_ASSERT(td_comm_size(td_comm_world()) == 3);
    /* every rank sets it before the layout is created: world rank 1 is a
     * worker (ranks 0..1 workers, rank 2 the server) */
    char delay[32];
    snprintf(delay, sizeof delay, "1:%d", DELAY_MS);
    setenv("TRIDENT_TEST_PS_DELAY_MS", delay, 1);
    int m0, mk;
    double a0, ak;
    double sync = run(0, &m0, &a0);
    double ssp = run(K, &mk, &ak);
    int fails = 0;
    if (td_comm_rank(td_comm_world()) == 0) {
        /* 2%: the bound. Measured 0.2..0.4% (timing decides how
         * often worker 0 is stale, mean 0.8..1.0, so it varies run to run).
         * The stale run lags while the loss still falls steeply (200 steps:
         * 0.4..0.9%; with C = 64 at 200 steps, 2.2%), hence 400 steps. */
        double rel = fabs(ssp - sync) / sync;
        printf("worker 1 sleeps %d ms before each push; %d steps, mean loss of the last %d:\n", DELAY_MS,
               STEPS, STEPS / 5);
        printf("sync ps (K=0): loss %.4f (staleness observed max %d, mean %.2f)\n", sync, m0, a0);
        printf("ssp K=%d:      loss %.4f (staleness observed max %d, mean %.2f)\n", K, ssp, mk, ak);
        printf("relative difference %.2f%% (tol 2%%) %s\n", 100 * rel, rel <= 0.02 ? "ok" : "FAIL");
        if (!(rel <= 0.02)) fails++;
        if (m0 != 0) printf("FAIL: the synchronous run observed staleness %d (want 0)\n", m0), fails++;
        if (mk < 1)
            printf("FAIL: --ps-staleness %d with a slow worker observed max staleness %d: stale mode ran "
                   "synchronously\n", K, mk), fails++;
        if (mk > K) printf("FAIL: staleness %d exceeds the bound %d\n", mk, K), fails++;
        printf(fails ? "test_ps_staleness: FAILED (%d)\n" : "test_ps_staleness: all passed%.0d\n", fails);
    }
    td_comm_finalize();
    return fails ? 1 : 0;
}
