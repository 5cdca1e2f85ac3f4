/* `trident train`: the command. Its options become the run's spec
 * (spec.c), which src/run trains (td_run_train). */
#include <stdio.h>
#include <string.h>

#include "auto.h"
#include "trident/base.h"
#include "trident/train.h"

void td_train_run(const td_train_opts *o, td_train_result *res, int keep_state) {
    td_run_spec spec;
    td_train_spec(o, &spec);
    td_run_train(&spec, res, keep_state);
}

void td_train_result_free(td_train_result *r) { td_run_result_free(r); }

int td_train_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, argc, argv);
    if (o.print_config) return td_train_print_config(&o);
    td_auto au = {0};
    if (o.autoplan) td_auto_choose(&o, &au);
    td_train_result res;
    td_train_run(&o, &res, 0);
    td_auto_report(&au, &res);
    int rc = 0;
    int root = td_log_rank() == 0;
    if (res.io_failed) {
        /* one line, from rank 0 (the files are rank 0's); every rank exits TD_EXIT_IO */
        if (root) {
            char tail[8400];
            if (res.stopped_startup)
                snprintf(tail, sizeof tail, "the run stopped before its first step and saved nothing");
            else if (o.out)
                snprintf(tail, sizeof tail, "the run %s after step %d with a checkpoint in %s", res.stopped_after > 0 ? "stopped" : "ended",
                         res.steps_done, o.out);
            else
                snprintf(tail, sizeof tail, "the run %s after step %d (no --out: nothing saved)",
                         res.stopped_after > 0 ? "stopped" : "ended", res.steps_done);
            fflush(stdout);
            fprintf(stderr, "trident: error: %s; %s\n", res.io_msg[0] ? res.io_msg : "a write failed on another rank", tail);
            fflush(stderr);
        }
        rc = TD_EXIT_IO;
    } else if (res.stopped_startup) {
        if (root) {
            if (o.resume)
                printf("stopped during start-up by a stop signal: nothing trained or saved; the resumed checkpoint "
                       "(step %d) and --out's latest are unchanged\n", res.steps_done);
            else
                printf("stopped during start-up by a stop signal: nothing trained, nothing to save\n");
            fflush(stdout);
        }
    } else if (res.stop_step >= 0) {
        /* one line, from rank 0; every rank exits non-zero after finalize */
        if (td_log_rank() == 0) {
            fflush(stdout);
            if (res.stop_saved > 0) /* --max-loss: the diverged state is kept for a look */
                fprintf(stderr, "trident: error: %s; the run stopped with the checkpoint %s/step-%08d "
                        "(now latest: resuming it continues the diverged run)\n",
                        res.stop_msg, o.out, res.stop_saved);
            else
                fprintf(stderr, "trident: error: %s; the run stopped%s%s%s\n",
                        res.stop_msg[0] ? res.stop_msg : "the run stopped on another rank",
                        o.out ? " and saved nothing from this step on (--out " : "", o.out ? o.out : "",
                        o.out ? ": earlier checkpoints and latest are untouched)" : "");
            fflush(stderr);
        }
        rc = 3;
    } else if (res.stopped_after > 0 && root) {
        if (o.out)
            printf("stopped after step %d of %d with a checkpoint in %s; to continue, run the same command with "
                   "--resume latest%s\n", res.stopped_after, o.steps, o.out, o.overwrite ? " (in place of --overwrite)" : "");
        else
            printf("stopped at step %d: nothing saved (no --out)\n", res.stopped_after);
        fflush(stdout);
    }
    td_train_result_free(&res);
    return rc;
}
