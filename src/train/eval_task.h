/* trident eval --task FILE.jsonl: multiple-choice scoring of a checkpoint
 * (eval_task.c). Internal to src/train: eval.c opens it, hands
 * td_task_pass to the run as its layout pass, then reports on world rank 0. */
#ifndef TRIDENT_EVAL_TASK_H
#define TRIDENT_EVAL_TASK_H

#include <stdio.h>

#include "trident/data.h"
#include "trident/run_spec.h"

typedef struct td_task td_task;

/* Reads and tokenizes every example of path with tk (every rank does the
 * same): one candidate row per ending, context + " " + ending, the context
 * cut from the left to fit T + 1 tokens. Bad input is one error line
 * naming the file, the line and the field. batch: the global batch's rows. */
td_task *td_task_open(const char *path, const td_tokenizer *tk, int T, int batch);
/* The layout pass (train.h's layout_pass hook): every candidate row's
 * summed loss over its ending's tokens, in the run's layout. Collective. */
void td_task_pass(void *ctx, td_layout_pass *p);
/* World rank 0, after the run: the result line on stdout, the task's
 * members of --log's JSON object and its closing brace (log: the object
 * opened and its run members written, then closed here; NULL: none) and
 * --task-out's JSON lines, one per example (NULL: none). */
void td_task_report(const td_task *t, FILE *log, const char *log_path, const char *out_path);
/* The place the pass ran in: world rank, dp, tp and pp sizes. */
void td_task_grid(const td_task *t, int *world_rank, int *dp, int *tp, int *pp);
void td_task_close(td_task *t);

#endif
