/* fault: test-only fault injection, so tests can show that a run which goes
 * wrong stops and loses nothing. Never set it in production runs.
 *
 *   TRIDENT_FAULT=nan-loss:STEP[:RANK]   the loss of step STEP (0-based, as the
 *                                        step lines count) is NaN on world rank
 *                                        RANK (default 0) before it is summed
 *   TRIDENT_FAULT=nan-grad:STEP[:RANK]   one gradient element of
 *                                        TD_FAULT_GRAD_TENSOR is NaN on RANK at
 *                                        step STEP (after its backward)
 *   TRIDENT_FAULT=grad-inf:STEP[:RANK]   as nan-grad with +inf, at the first
 *                                        attempt of optimizer step STEP only
 *                                        (a step skipped by dynamic loss
 *                                        scaling is retried clean)
 *   TRIDENT_FAULT=grad-inf-stuck:STEP[:RANK]  the same at every attempt of
 *                                        step STEP: the step never passes
 *   TRIDENT_FAULT=save-fail:STEP         writing the checkpoint of step STEP
 *                                        (steps done) fails as on a full disk
 *   TRIDENT_FAULT=save-kill:STEP[:RANK]  world rank RANK (default 0) kills
 *                                        itself (SIGKILL) half-way through
 *                                        writing its shard of the checkpoint
 *                                        of step STEP (steps done)
 *   TRIDENT_FAULT=skip-embed-sum:STEP    a broken reduction: at step STEP the
 *                                        pipeline's embedding group does not
 *                                        sum the tied embedding's gradients
 *                                        (every rank skips it, so nothing hangs;
 *                                        `trident verify` must name the tensor)
 *   TRIDENT_FAULT=route-flip:STEP[:RANK] a broken router: in step STEP (the
 *                                        model's STEP-th routing statistics
 *                                        reset, 0-based) every token on RANK
 *                                        swaps its last chosen expert for the
 *                                        best one left out (`trident verify`
 *                                        must not take those for near ties)
 *   TRIDENT_FAULT=kill:STEP[:RANK]       RANK SIGKILLs itself in step STEP,
 *                                        between its forward and its backward
 *                                        (a crash: the heartbeat must end the job)
 *   TRIDENT_FAULT=stop:STEP[:RANK]       the same with SIGSTOP (a hung rank)
 *   TRIDENT_FAULT=host-read:STEP[:RANK]  RANK reads its data-parallel gradient
 *                                        buffer (the parameters where it keeps
 *                                        none) from host code at the start of
 *                                        step STEP: on a device other than cpu
 *                                        that is a host access to a step tensor,
 *                                        which the guard ends naming the buffer
 *                                        (a step tensor left in host memory
 *                                        would let it pass); on cpu it passes
 *   TRIDENT_FAULT=slow-load:MS           every rank sleeps MS milliseconds after
 *                                        its data load and again after its
 *                                        model build (start-up made long, so a
 *                                        test can send a stop signal into it);
 *                                        with TRIDENT_FAULT_RELEASE=FILE each
 *                                        sleep also ends once FILE exists and
 *                                        removes it, a token per sleep (one
 *                                        process: a test holds a job at each
 *                                        point exactly as long as it needs)
 *
 * A fault fires on a job's first attempt only: with TRIDENT_RESTART=N, N > 0
 * (scripts/launch.sh sets it when it restarts a job) none fires, so a
 * restarted job runs clean.
 *
 * The variable is parsed and validated here only; a malformed value is a
 * one-line error naming it. */
#ifndef TRIDENT_FAULT_H
#define TRIDENT_FAULT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_FAULT_NONE = 0, TD_FAULT_NAN_LOSS, TD_FAULT_NAN_GRAD, TD_FAULT_SAVE_FAIL, TD_FAULT_SKIP_EMBED_SUM,
    TD_FAULT_GRAD_INF, TD_FAULT_GRAD_INF_STUCK, TD_FAULT_KILL, TD_FAULT_STOP, TD_FAULT_SAVE_KILL,
    TD_FAULT_SLOW_LOAD, TD_FAULT_ROUTE_FLIP, TD_FAULT_HOST_READ
} td_fault_kind;

#define TD_FAULT_GRAD_TENSOR "transformer.h.0.mlp.c_fc.weight"

typedef struct {
    td_fault_kind kind;
    int step;
    int rank;
} td_fault;

/* The fault asked for (kind NONE without TRIDENT_FAULT); parsed on first use. */
const td_fault *td_fault_get(void);
/* Reads TRIDENT_FAULT again at the next use (tests running several
 * trainings, each with its own fault, in one process). */
void td_fault_reload(void);
/* Whether fault `kind` fires at `step` on world rank `rank` (rank -1: any). */
int td_fault_at(td_fault_kind kind, int step, int rank);
/* kill / stop: when one is due at `step` on world rank `rank`, says so on
 * stderr and sends the signal to this process (a stop returns after SIGCONT). */
void td_fault_signal_at(int step, int rank);
/* slow-load: sleeps its milliseconds (returns early when a signal arrives,
 * or when TRIDENT_FAULT_RELEASE names a file that exists: it is removed); without that
 * fault returns at once. */
void td_fault_slow_load(void);

#ifdef __cplusplus
}
#endif

#endif
