/* Divergence: --max-loss's stop and the rising-loss warning (divergence.c).
 * Fed the global training loss of each clean step, which every training
 * rank holds bit for bit (reduced over dp and pp, the cross-entropy's rows
 * over tp), so every rank decides the same with no communication. */
#ifndef TRIDENT_DIVERGENCE_H
#define TRIDENT_DIVERGENCE_H

#include <stddef.h>

/* Consecutive steps above --max-loss that stop a run. */
#define TD_MAX_LOSS_STEPS 20

typedef struct {
    float max_loss;  /* 0: no stop */
    int warmup;      /* warm-up steps: no warning during them */
    int over;        /* consecutive steps above max_loss so far */
    int have_initial, warned;
    float initial;   /* the loss of the first step this process trained */
} td_divergence;

void td_divergence_init(td_divergence *d, float max_loss, int warmup);
/* After the clean step `step` with global loss `loss`: prints the warning
 * (world rank 0, once per run) when the rule of divergence.c says so;
 * returns 1 when the run must stop, with the reason in msg. */
int td_divergence_step(td_divergence *d, int step, float loss, char *msg, size_t n);

#endif
