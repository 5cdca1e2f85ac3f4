/* A mixture of experts' share of a training step (moe_run.c). */
#ifndef TRIDENT_RUN_MOE_RUN_H
#define TRIDENT_RUN_MOE_RUN_H

#include "run.h"

/* Before the step's forward passes: the model's statistics start over. */
void td_run_moe_begin(td_run *r);
/* After the optimizer step: the step's figures into r->res (collective over
 * grad and pp), the balancing bias moved (--moe-bias-balance), and this
 * rank's share of the loss sum (N (aux + z) of its micro-batches) returned;
 * 0 for a dense model. */
double td_run_moe_end(td_run *r, int step);

#endif
