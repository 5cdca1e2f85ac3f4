/* lr_table SCHEDULE SHAPE WARMUP HORIZON LR MIN_LR DECAY_FRACTION LAST:
 * td_lr_at for steps 0..LAST, one "step lr" line each (%.9g: a float's
 * bits), for test_lr_schedules.py to compare with its own formulas;
 * lr_table --batch START INCREMENT SAMPLES FULL LAST: td_batch_at's batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/optim.h"

int main(int argc, char **argv) {
    /* lr_table --batch START INCREMENT SAMPLES FULL LAST: td_batch_at instead */
    if (argc == 7 && strcmp(argv[1], "--batch") == 0) {
        td_batch_rampup r = {atoi(argv[2]), atoi(argv[3]), atoll(argv[4])};
        for (int step = 0, last = atoi(argv[6]); step <= last; step++)
            printf("%d %d\n", step, td_batch_at(&r, atoi(argv[5]), step));
        return 0;
    }
    if (argc != 9) {
        fprintf(stderr, "usage: lr_table SCHEDULE SHAPE WARMUP HORIZON LR MIN_LR DECAY_FRACTION LAST\n");
        return 2;
    }
    int s = td_lr_schedule_parse(argv[1]), d = td_lr_decay_shape_parse(argv[2]);
    if (s < 0 || d < 0) {
        fprintf(stderr, "lr_table: unknown schedule '%s' or shape '%s'\n", argv[1], argv[2]);
        return 2;
    }
    td_optim_config o = {.lr = strtof(argv[5], NULL), .min_lr = strtof(argv[6], NULL),
                         .warmup = atoi(argv[3]), .max_steps = atoi(argv[4]),
                         .schedule = (td_lr_schedule)s, .decay_shape = (td_lr_decay_shape)d,
                         .decay_fraction = strtof(argv[7], NULL)};
    for (int step = 0, last = atoi(argv[8]); step <= last; step++) printf("%d %.9g\n", step, (double)td_lr_at(&o, step));
    return 0;
}
