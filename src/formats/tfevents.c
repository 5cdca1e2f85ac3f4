/* TensorBoard event files: CRC32C, TFRecord framing and the protobuf
 * encoding of Event messages (include/trident/formats_tfevents.h). */
#include <string.h>

#include "trident/formats_tfevents.h"

/* Debian ships no CRC32C library trident links already: a byte-wise table
 * of the reflected Castagnoli polynomial, built once (fast enough for a few
 * hundred bytes per training step). */
static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;
}

uint32_t td_crc32c(uint32_t crc, const void *p, size_t n) {
    if (!crc_ready) crc_init(); /* rank 0's single thread only writes events */
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

uint32_t td_crc32c_masked(const void *p, size_t n) {
    uint32_t c = td_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

void td_tfrecord_frame(uint8_t *out, const void *data, size_t n) {
    put_le(out, n, 8);
    put_le(out + 8, td_crc32c_masked(out, 8), 4);
    memmove(out + 12, data, n);
    put_le(out + 12 + n, td_crc32c_masked(out + 12, n), 4);
}

/* --- protobuf wire format: tag = field << 3 | wire type ------------------ */
enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

static int put_bytes(td_tfevent *e, const void *p, size_t n) {
    if (e->len + n > e->cap || e->len + n < e->len) {
        e->len = e->cap + 1; /* poisoned: every later adder fails too */
        return -1;
    }
    memcpy(e->buf + e->len, p, n);
    e->len += n;
    return 0;
}

static int put_varint(td_tfevent *e, uint64_t v) {
    uint8_t b[10];
    int n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) b[n] |= 0x80;
        n++;
    } while (v);
    return put_bytes(e, b, (size_t)n);
}

static int put_tag(td_tfevent *e, int field, int type) { return put_varint(e, (uint64_t)field << 3 | type); }

static int put_string(td_tfevent *e, int field, const char *s) {
    size_t n = strlen(s);
    return put_tag(e, field, WT_LEN) || put_varint(e, n) || put_bytes(e, s, n) ? -1 : 0;
}

void td_tfevent_begin(td_tfevent *e, uint8_t *buf, size_t cap, double wall_time, int64_t step) {
    *e = (td_tfevent){buf, cap, 0, 0};
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    uint8_t w[8];
    put_le(w, bits, 8);
    if (put_tag(e, 1, WT_FIXED64) || put_bytes(e, w, 8)) return;
    /* proto3 leaves a zero scalar out (a reader takes the missing step for
     * 0): the bytes are then exactly protobuf's own serialization */
    if (step != 0 && !put_tag(e, 2, WT_VARINT)) put_varint(e, (uint64_t)step);
}

int td_tfevent_file_version(td_tfevent *e, const char *version) { return put_string(e, 3, version); }

int td_tfevent_session_start(td_tfevent *e) {
    /* session_log (7; 6 is the deprecated log_message) holding status (1)
     * = START (1): 2 bytes */
    static const uint8_t msg[] = {1 << 3 | WT_VARINT, 1};
    return put_tag(e, 7, WT_LEN) || put_varint(e, sizeof msg) || put_bytes(e, msg, sizeof msg) ? -1 : 0;
}

/* A Summary's length is known when it closes: its values are written after
 * a 2-byte slot for its varint length (summaries up to 16383 bytes), filled
 * then, the values moved down a byte when the length takes one. */
#define SUMMARY_SLOT 2

int td_tfevent_scalar(td_tfevent *e, const char *tag, float value) {
    if (!e->summary_at) {
        static const uint8_t slot[SUMMARY_SLOT] = {0};
        if (put_tag(e, 5, WT_LEN)) return -1;
        e->summary_at = e->len;
        if (put_bytes(e, slot, SUMMARY_SLOT)) return -1;
    }
    size_t n = strlen(tag);
    /* Value: tag (1, length-delimited), simple_value (2, fixed32) */
    uint64_t value_len = 1 + 1 + n + 1 + 4;
    if (n > 100) return e->len = e->cap + 1, -1; /* one-byte tag length: trident's tags are short */
    uint32_t bits;
    memcpy(&bits, &value, 4);
    uint8_t f[4];
    put_le(f, bits, 4);
    return put_tag(e, 1, WT_LEN) || put_varint(e, value_len) || put_string(e, 1, tag) ||
                   put_tag(e, 2, WT_FIXED32) || put_bytes(e, f, 4)
               ? -1
               : 0;
}

long td_tfevent_end(td_tfevent *e) {
    if (e->len > e->cap) return -1;
    if (e->summary_at) {
        size_t n = e->len - e->summary_at - SUMMARY_SLOT;
        if (n >= 1u << 14) return -1;
        if (n < 0x80) { /* a one-byte length: the values move down by one */
            e->buf[e->summary_at] = (uint8_t)n;
            memmove(e->buf + e->summary_at + 1, e->buf + e->summary_at + SUMMARY_SLOT, n);
            e->len--;
        } else {
            e->buf[e->summary_at] = (uint8_t)(0x80 | (n & 0x7f));
            e->buf[e->summary_at + 1] = (uint8_t)(n >> 7);
        }
        e->summary_at = 0;
    }
    return (long)e->len;
}
