/* schedule: pure pipeline schedules (docs/design.md principle 6). Inputs (kind,
 * stages P, micro-batches M, chunks per stage V) -> per-stage action lists
 * that the pipeline executor runs in order, plus a timing simulation, a
 * structural validator, the printer behind `trident schedule`, and the
 * automatic stage partition. Depends on base only: no MPI, no model. */
#ifndef TRIDENT_SCHEDULE_H
#define TRIDENT_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_SCHED_GPIPE, TD_SCHED_1F1B, TD_SCHED_INTERLEAVED, TD_SCHED_ZBH1 } td_sched_kind;
/* Parses gpipe|1f1b|interleaved|zb-h1 (user error naming --schedule otherwise). */
td_sched_kind td_sched_parse(const char *s);
/* The same without failing: the kind, or -1 for another name. */
int td_sched_find(const char *s);
const char *td_sched_name(td_sched_kind k);

typedef enum {
    TD_A_FWD,       /* forward of micro-batch mb through this stage's model chunk `chunk` */
    TD_A_BWD,       /* full backward (input and weight gradients) of (mb, chunk) */
    TD_A_BWD_INPUT, /* zb-h1: the input-gradient half of the backward */
    TD_A_BWD_WEIGHT,/* zb-h1: the weight-gradient half (after BWD_INPUT of the same mb, chunk) */
    TD_A_RECV_ACT,  /* receive the activation for (mb, chunk) from stage `peer` */
    TD_A_SEND_ACT,  /* send the output activation of (mb, chunk) to stage `peer` */
    TD_A_RECV_GRAD, /* receive the gradient of (mb, chunk)'s output from stage `peer` */
    TD_A_SEND_GRAD  /* send the gradient of (mb, chunk)'s input to stage `peer` */
} td_action_kind;

/* (mb, chunk) of a RECV names the receiver's micro-batch-chunk (whose input
 * or output gradient arrives); of a SEND, the sender's. peer: -1 for compute.
 * With P = 1 consecutive chunks sit on the same stage and hand over locally:
 * no SEND/RECV is emitted, list order carries the dependency. */
typedef struct { td_action_kind kind; int mb, chunk, peer; } td_action;

typedef struct {
    td_sched_kind kind;
    int P, M, V;         /* stages, micro-batches, model chunks per stage (virtual stages; 1 unless interleaved) */
    int *n;              /* [P] actions per stage */
    td_action **a;       /* [P][n[s]] each stage's actions in execution order */
    int *peak;           /* [P] most micro-batch-chunks whose forward has run and whose backward (for zb-h1: weight
                            half) has not, at any point of stage s's list: the activations the stage stashes */
    int bound;           /* the schedule's documented bound on max(peak): min(M,P) for 1f1b and zb-h1, M for gpipe,
                            interleaved: Megatron's warm-up of stage 0 + 1 (capped at M*V), in micro-batch-chunks */
} td_schedule;

/* Builds the schedule; returns 0, or -1 with a one-line reason in err naming
 * the flag (--pp, --micro-batches, --virtual-stages). No exit, no printing.
 * On -1, s holds nothing to free. */
int td_schedule_build(td_schedule *s, td_sched_kind kind, int P, int M, int V, char *err, size_t errlen);
void td_schedule_free(td_schedule *s);

/* Virtual stage of (stage, chunk) = chunk * P + stage; data flows virtual stage v -> v + 1. */

/* A simulated run: compute actions take tf (FWD), tb (BWD_INPUT), tw (BWD_WEIGHT), tb + tw (BWD);
 * sends never block and take no time; a receive blocks until its matching send has run
 * (the k-th RECV on channel (src->dst, kind) matches the k-th SEND on it). */
typedef struct {
    int ok;              /* 0: deadlock or invalid (err says which stage, which action) */
    double makespan;     /* time the last stage action finishes */
    double *busy;        /* [P] compute time per stage */
    double *end;         /* [P] time stage s finishes its last action */
    double bubble;       /* mean over stages of (makespan - busy[s]) / busy[s] */
    int *peak;           /* [P] in-flight peak observed in the simulation */
    double **start;      /* [P][n[s]] start time of each action (a RECV: when it completes) */
} td_sched_sim;
/* Returns 0, or -1 (out->ok = 0) with the reason in err. tf > 0, tb > 0,
 * tw >= 0, finite (a programmer error otherwise). out must be freed either way. */
int td_schedule_simulate(const td_schedule *s, double tf, double tb, double tw, td_sched_sim *out,
                         char *err, size_t errlen);
void td_sched_sim_free(td_sched_sim *r);

/* Structural validation (no timing): per stage each (mb, chunk) has exactly one FWD and one BWD (or one
 * BWD_INPUT then one BWD_WEIGHT), every forward precedes its backward, every RECV precedes the compute that
 * needs it and every SEND follows the compute that produces it; every SEND on the channel (src->dst, kind)
 * has a matching RECV on the peer in the same order; the simulation finishes (no deadlock); peak[] equals the
 * simulated peak and max(peak) <= bound. Returns 0 or -1 with the first violation in err. */
int td_schedule_validate(const td_schedule *s, char *err, size_t errlen);

/* Theoretical bubble fraction (idle / compute per stage): (P-1)/M for gpipe and 1f1b, (P-1)/(V M) for
 * interleaved, (P-1)(tf + tb - tw) / (M (tf + tb + tw)) for zb-h1 (Qi et al. 2023, "Zero Bubble Pipeline
 * Parallelism", ZB-H1). The zb-h1 figure is what the simulation gives for M >= P when tw <= min(tf, tb). */
double td_schedule_bubble_theory(td_sched_kind kind, int P, int M, int V, double tf, double tb, double tw);

/* Text timeline (one row per stage, one column per time unit with tf = tb = tw = 1 unless given, showing
 * F<mb>, B<mb>, W<mb> with the chunk when V > 1, '.' for idle), the peak per stage and the bound, and the
 * theoretical and simulated bubble. */
void td_schedule_print(FILE *f, const td_schedule *s, double tf, double tb, double tw);

/* Automatic partition: cost[n] items (in trident: embedding, block 0..L-1, head), split into `parts`
 * contiguous non-empty groups minimizing the largest group sum (ties: the lexicographically smallest
 * vector of group ends). first[parts + 1]: group g is items [first[g], first[g+1]). Returns the max group
 * sum. Group sums add items left to right. 1 <= parts <= n, costs finite and >= 0 (asserted). */
double td_pp_partition(const double *cost, int n, int parts, int *first);

#ifdef __cplusplus
}
#endif

#endif
