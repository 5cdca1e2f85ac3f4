/* The trainer's side of checkpoints: saving during and after a run,
 * resuming, and stopping early (--stop-after, preemption signals). */
#ifndef TRIDENT_CKPT_RUN_H
#define TRIDENT_CKPT_RUN_H

#include "run.h"
#include "trident/ckpt.h"
#include "trident/run_spec.h"

/* Collective over the world, at the start of a run: agrees on a new run id
 * (world rank 0's random one); a resume replaces it with the checkpoint's. */
void td_run_id_start(const td_grid *g);
/* The data this run trains on (--data and its fingerprint), which every
 * checkpoint of the run records; set once after it is loaded. */
void td_run_set_data(const char *path, const td_data_fingerprint *fp);
/* What the manifest records about this run after steps_done steps. */
void td_run_ckpt_meta(const td_run_spec *spec, const td_grid *g, const td_loss_scaler *s, int steps_done,
                      td_ckpt_meta *m);
/* Saves the state after steps_done steps to --out: sharded (every training
 * rank writes its shard), or with parameter servers gathered unit by unit
 * to world rank 0. Collective over the training ranks. measure: record the
 * save's memory in res and print it. */
void td_run_save(const td_run *r, int steps_done, int measure);
/* --resume's checks that need no state (td_ckpt_resume_check, and the
 * checkpoint's step against --steps and --stop-after), on one process:
 * td_preflight runs them on world rank 0 before it creates --out. */
void td_run_resume_check(const td_run_spec *spec, const td_gpt_config *cfg, const td_tokenizer *tok);
/* --resume: this rank's state from the checkpoint, the loss scaler's too;
 * returns the step to continue at (0 without --resume). */
int td_run_resume(td_run *r);
/* What td_stop_agreed returns (bits). */
enum { TD_STOP_SIGNAL = 1, TD_STOP_IO = 2 };
/* At an agreed point (start-up, a step boundary): whether any training
 * rank got a stop signal, or has a failed write (io_failed: this rank's
 * --log or --trace); one small all-reduce (MAX) over the training ranks,
 * so every rank returns the same. */
int td_stop_agreed(const td_grid *g, int io_failed);

#endif
