/* A training run inside a test, shared by the tests that train for hundreds
 * of steps and compare what they reach (test_precision, test_grad_compress):
 * the tiny Shakespeare text, no evals, one thread per rank, quiet, then the
 * run's own flags. */
#ifndef TRIDENT_TESTS_TRAIN_RUN_H
#define TRIDENT_TESTS_TRAIN_RUN_H

#include <stdio.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

/* Trains `steps` steps with the flags argv[0..argc) into res and returns the
 * number of failed checks: every memory category up to the activations
 * planned = measured peak, every step run. *mean_last gets the mean loss of
 * the last `last` steps. */
static int tr_train(int argc, char **argv, int steps, int last, td_train_opts *o,
                    td_train_result *res, double *mean_last) {
    td_train_opts_default(o);
    o->data = TD_DATA_DIR "/tinyshakespeare.txt";
    o->steps = steps;
    o->eval_every = 0;
    o->threads = 1;
    o->quiet = 1;
    td_train_opts_parse(o, argc, argv);
    td_train_run(o, res, 0);
    int fails = 0, rank = td_comm_rank(td_comm_world());
    for (int c = TD_MEM_PARAMS; c <= TD_MEM_ACTS; c++)
        if (res->mem_peak[c] != res->mem_planned[c]) {
            printf("FAIL rank %d memory %s: measured peak %zu B, planned %zu B\n", rank,
                   td_mem_cat_name(c), res->mem_peak[c], res->mem_planned[c]);
            fails++;
        }
    double mean = 0.0;
    for (int s = o->steps - last; s < o->steps; s++) mean += res->losses[s];
    *mean_last = mean / last;
    if (res->steps_done != o->steps) {
        printf("FAIL rank %d: %d of %d steps\n", rank, res->steps_done, o->steps);
        fails++;
    }
    return fails;
}

#endif
