/* --max-loss and the rising-loss warning (divergence.h).
 *
 * The warning. A fresh GPT predicts close to uniformly, so its first loss
 * is about ln(V), the loss of knowing nothing; a run that learns stays
 * below it, batch noise moving it by a few percent. Twice the first loss
 * is a model that is confidently wrong, worse than knowing nothing by a
 * factor of V in probability: it is no longer learning, whatever comes
 * next (a run at --lr 10 --clip 0 climbs to hundreds). Warm-up is left
 * out: while the learning rate ramps and AdamW's moments settle, early
 * spikes come and go. One line per run, so a noisy run is not flooded; the
 * run goes on (it may recover, and only the user knows what is normal).
 *
 * The stop. One step above --max-loss is a bad batch or a spike; a loss
 * above it for TD_MAX_LOSS_STEPS steps in a row is a run that diverged
 * and wastes its allocation. */
#include <stdio.h>

#include "divergence.h"
#include "trident/base.h"

void td_divergence_init(td_divergence *d, float max_loss, int warmup) {
    *d = (td_divergence){.max_loss = max_loss, .warmup = warmup};
}

int td_divergence_step(td_divergence *d, int step, float loss, char *msg, size_t n) {
    if (!d->have_initial) d->initial = loss, d->have_initial = 1;
    if (!d->warned && step >= d->warmup && d->initial > 0 && loss > 2.0f * d->initial) {
        d->warned = 1;
        if (td_log_rank() == 0) {
            fflush(stdout);
            fprintf(stderr,
                    "trident: warning: step %d: the loss %.4g is above twice the first step's %.4g after "
                    "warm-up: the run is diverging (lower --lr, keep --clip on; --max-loss X stops such "
                    "a run)\n",
                    step, (double)loss, (double)d->initial);
            fflush(stderr);
        }
    }
    if (d->max_loss <= 0) return 0;
    d->over = loss > d->max_loss ? d->over + 1 : 0;
    if (d->over < TD_MAX_LOSS_STEPS) return 0;
    snprintf(msg, n, "step %d: the loss %.4g stayed above --max-loss %g for %d steps in a row (steps %d..%d)",
             step, (double)loss, (double)d->max_loss, TD_MAX_LOSS_STEPS, step - TD_MAX_LOSS_STEPS + 1, step);
    return 1;
}
