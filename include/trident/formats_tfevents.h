/* formats_tfevents: the bytes of a TensorBoard event file
 * (events.out.tfevents.*): TFRecord framing around protobuf-encoded Event
 * messages. Like the rest of src/formats: no I/O, no exits.
 *
 * A record is: uint64 length (little-endian), the masked CRC32C of those 8
 * bytes (uint32), the data, the masked CRC32C of the data. The messages are
 * the subset of TensorBoard's published schema (tensorboard/compat/proto
 * event.proto, summary.proto) trident writes:
 *   Event      { double wall_time = 1; int64 step = 2; oneof what {
 *                string file_version = 3; Summary summary = 5;
 *                SessionLog session_log = 7; } }   (6: log_message, unused)
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { enum Status { START = 1; } Status status = 1; }
 * encoded by hand (varints, fixed64, fixed32 and length-delimited fields:
 * a few lines, no protobuf library in the engine). */
#ifndef TRIDENT_FORMATS_TFEVENTS_H
#define TRIDENT_FORMATS_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of p[0..n)
 * continuing crc (0 to start); CRC32C("123456789") = 0xE3069283. */
uint32_t td_crc32c(uint32_t crc, const void *p, size_t n);
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t td_crc32c_masked(const void *p, size_t n);

/* Bytes a record of n data bytes takes in the file: 8 + 4 + n + 4. */
#define TD_TFRECORD_OVERHEAD 16
/* Frames data[0..n) into out (n + TD_TFRECORD_OVERHEAD bytes). */
void td_tfrecord_frame(uint8_t *out, const void *data, size_t n);

/* An Event under construction in a caller-owned buffer; every adder
 * returns 0, or -1 when the buffer is full (the event is then unusable). */
typedef struct {
    uint8_t *buf;
    size_t cap, len;
    size_t summary_at; /* where the open Summary's length goes; 0: none open */
} td_tfevent;

/* Starts an Event with its wall time (seconds since the epoch) and step. */
void td_tfevent_begin(td_tfevent *e, uint8_t *buf, size_t cap, double wall_time, int64_t step);
/* file_version (the file's first event: "brain.Event:2"). */
int td_tfevent_file_version(td_tfevent *e, const char *version);
/* session_log { status: START } (a resumed run's first event). */
int td_tfevent_session_start(td_tfevent *e);
/* One summary value { tag, simple_value }; the values of one event share
 * one Summary, closed by td_tfevent_end. */
int td_tfevent_scalar(td_tfevent *e, const char *tag, float value);
/* Closes the Summary, if any. Returns the event's length, or -1. */
long td_tfevent_end(td_tfevent *e);

#ifdef __cplusplus
}
#endif

#endif
