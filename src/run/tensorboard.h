/* --tensorboard DIR: a TensorBoard event file of the run's scalars (rank 0
 * only: the values are the reduced ones the --log line holds). The bytes
 * are formats_tfevents.h's; this is the file: its name, the writes, and a
 * failed write remembered rather than fatal (the run stops at its next
 * agreed point, as for --log: report.h's td_report_log_error). */
#ifndef TRIDENT_TENSORBOARD_H
#define TRIDENT_TENSORBOARD_H

#include <stdint.h>
#include <stdio.h>

#include "trident/formats_tfevents.h"

typedef struct {
    FILE *f;            /* NULL: none open (not rank 0, no flag, or after a failure) */
    char path[4096];    /* the file, for the error line */
    int err;            /* errno of the first failed write or close, 0: none */
    td_tfevent ev;      /* the event being built */
    uint8_t buf[8192];  /* its bytes, then the record framing them */
    uint8_t rec[8192 + TD_TFRECORD_OVERHEAD];
} td_tensorboard;

/* Creates DIR if missing (its parent must exist) and a new file
 * DIR/events.out.tfevents.<unix time>.<host>.<pid>, whose name sorts after
 * every event file already there (TensorBoard reads a directory's files in
 * name order), and writes its file_version event. Returns 0, or -1 with a
 * sentence in why[0..cap) (nothing is left open). */
int td_tensorboard_open(td_tensorboard *tb, const char *dir, char *why, size_t cap);
/* A resumed run's SessionLog START at the first step it trains: TensorBoard
 * then drops what earlier files hold from that step on (a run stopped
 * after its last checkpoint trained steps that are trained again now). */
void td_tensorboard_start(td_tensorboard *tb, int64_t step);
/* One event of scalars: begin, any number of scalars, then end, which
 * writes and flushes it (a crash loses at most the step being written). */
void td_tensorboard_begin(td_tensorboard *tb, int64_t step);
void td_tensorboard_scalar(td_tensorboard *tb, const char *tag, double value);
void td_tensorboard_end(td_tensorboard *tb);
/* Closes the file; returns the errno of the first failure (0: none). */
int td_tensorboard_close(td_tensorboard *tb);

#endif
