/* timeline: a per-rank recorder of what each rank did when, for `--trace`.
 *
 * Events are Chrome trace-event "complete" events ("ph":"X": a name, a
 * category, a start and a duration), the format Perfetto and chrome://tracing
 * read. Each rank records its own; the training run gathers them into one
 * file with one lane (tid) per world rank (src/run/trace_file.c).
 *
 * Off unless enabled: every recording site tests td_timeline_enabled() first,
 * so a run without --trace pays one branch per site. Recording is a bounded
 * append: the capacity is fixed at enable, storage grows in blocks as events
 * arrive (a short run does not hold the capacity's memory), and events beyond
 * the capacity are counted and dropped, and reported when written.
 *
 * Categories in use: "compute" (forward "F mb k", backward "B mb k", weight
 * gradients "W mb k"), "p2p", "collective", "optimizer", "data", "eval".
 *
 * Complete events on one lane must nest (viewers drop or mangle slices that
 * overlap without nesting): td_timeline_add is for what runs on the rank's
 * thread from start to end (a forward, a blocking collective inside it).
 * What overlaps other work, a nonblocking collective or send from its start
 * to its completion, goes through td_timeline_add_async and is written as an
 * async pair ("ph":"b" / "ph":"e" with a shared "id"), which may overlap.
 * Single-threaded: call from the thread that drives MPI (the comm layer's
 * rule as well). Base module: no MPI. */
#ifndef TRIDENT_TIMELINE_H
#define TRIDENT_TIMELINE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Names and categories are copied into fixed fields of these sizes (longer
 * ones are cut), so callers may pass any string, static or not. */
#define TD_TIMELINE_NAME 48
#define TD_TIMELINE_CAT 12
/* The capacity `trident train --trace` enables: 1M events per rank, about
 * 88 MiB at most (88 B an event), far beyond what a run of thousands of
 * steps of a small model records; a longer run keeps its first 1M events. */
#define TD_TIMELINE_DEFAULT_CAPACITY ((size_t)1 << 20)

/* Starts recording with room for `capacity` events (>= 1); the epoch is set
 * to now. Enabling again discards what was recorded. */
void td_timeline_enable(size_t capacity);
int td_timeline_enabled(void);
void td_timeline_disable(void);   /* frees the events */
double td_timeline_now_us(void);  /* microseconds on this rank's clock since its epoch */
/* The time now while the timeline records (0 otherwise, unread), and an
 * event from t0 to now named "<what> mb k" (or "<what>" for mb < 0): the
 * training loop's marks, cheap when --trace is off. */
double td_timeline_mark_start(void);
void td_timeline_mark(const char *what, const char *cat, int mb, double t0_us);
void td_timeline_set_epoch(void); /* epoch = now (called right after a barrier so lanes line up) */
/* One complete event from t0_us to t1_us (td_timeline_now_us times; t1 < t0
 * is stored as a zero duration). mb: micro-batch, chunk: model chunk of a
 * pipeline stage, -1 for none; both go into "args". No-op when disabled. */
void td_timeline_add(const char *name, const char *cat, double t0_us, double t1_us, int mb,
                     int chunk);
/* The same for an interval that may overlap others on this lane. */
void td_timeline_add_async(const char *name, const char *cat, double t0_us, double t1_us, int mb,
                           int chunk);
/* Events recorded and events dropped (beyond the capacity) so far. */
size_t td_timeline_count(void);
long td_timeline_dropped(void);
/* This rank's events as serialized JSON objects, comma separated (no
 * brackets), "pid":0 and "tid":lane (async pairs' ids: lane * 2^32 + the
 * event's number, unique in the file), preceded by metadata events naming the
 * lane lane_name and sorting lanes by number. *len gets the text's length
 * (without the NUL), *dropped the events dropped. Caller frees (free()). */
char *td_timeline_json(int lane, const char *lane_name, size_t *len, long *dropped);

#ifdef __cplusplus
}
#endif

#endif
