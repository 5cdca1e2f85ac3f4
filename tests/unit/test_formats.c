/* The data parsers of src/formats (formats_data.h) on exact byte strings:
 * every class of malformed UTF-8 with the offset it must report, the valid
 * 1-4 byte forms at their boundaries, llm.c token-file headers (good, wrong
 * magic, wrong version, truncated, trailing bytes, count mismatch), raw
 * files (odd size, first tokens near the llm.c magic window), the token-id
 * range check, the synthetic:V spec, and the TensorBoard event encoding
 * (CRC32C's published check values, a record's framing, an Event's bytes
 * and a Summary past 127 bytes). Exact comparisons only: these are
 * integers and strings, nothing has a tolerance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"
#include "trident/formats_tfevents.h"
#include "test_util.h"

#define EXPECT TU_EXPECT /* test_util.h */

#define U(s) (const unsigned char *)(s), sizeof(s) - 1

/* ---- UTF-8 ------------------------------------------------------------- */

/* A malformed input must be refused by the checker, the vocabulary builder
 * and the encoder alike, all at offset `at`, with `why` and "at byte N" in
 * the message. */
static void bad_utf8(const char *name, const unsigned char *s, size_t n, size_t at, const char *why,
                     const char *bytes) {
    td_err e = {{0}};
    size_t bad = (size_t)-1;
    int rc = td_utf8_check(s, n, &bad, &e);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu:", at);
    EXPECT(rc == -1 && bad == at, "%s: check rc %d offset %zu, want -1 at %zu", name, rc, bad, at);
    EXPECT(strstr(e.msg, want) && strstr(e.msg, why) && strstr(e.msg, bytes),
           "%s: message '%s' lacks '%s' / '%s' / '%s'", name, e.msg, want, why, bytes);
    uint32_t *chars = (uint32_t *)&e; /* must be reset to NULL on failure */
    size_t V = 99;
    td_err e2 = {{0}};
    rc = td_utf8_vocab(s, n, &chars, &V, &e2);
    EXPECT(rc == -1 && chars == NULL && V == 0 && strcmp(e.msg, e2.msg) == 0,
           "%s: vocab rc %d V %zu message '%s' (want '%s')", name, rc, V, e2.msg, e.msg);
    static const uint32_t all[] = {0x41};
    int ids[16];
    size_t count = 99;
    td_err e3 = {{0}};
    rc = td_utf8_encode_ids(all, 1, s, n, ids, &count, &e3);
    /* the encoder may stop earlier at a character outside its vocabulary;
     * with 'A' alone, inputs holding only 'A' before `at` must give the
     * UTF-8 error */
    int only_a = 1;
    for (size_t i = 0; i < at; i++) only_a &= s[i] == 'A';
    if (only_a)
        EXPECT(rc == -1 && strcmp(e.msg, e3.msg) == 0, "%s: encode rc %d message '%s' (want '%s')", name,
               rc, e3.msg, e.msg);
}

static void good_utf8(const char *name, const unsigned char *s, size_t n, uint32_t want_cp) {
    uint32_t cp = 0;
    const char *why = "unset";
    int len = td_utf8_next(s, n, &cp, &why);
    EXPECT(len == (int)n && cp == want_cp, "%s: length %d U+%04X, want %zu U+%04X (%s)", name, len,
           (unsigned)cp, n, (unsigned)want_cp, len ? "" : why);
    unsigned char out[4] = {0};
    int k = td_utf8_put(want_cp, out);
    EXPECT(k == (int)n && memcmp(out, s, n) == 0, "%s: re-encoding U+%04X gives %d bytes", name,
           (unsigned)want_cp, k);
    td_err e = {{0}};
    EXPECT(td_utf8_check(s, n, NULL, &e) == 0, "%s: check refuses it: %s", name, e.msg);
}

static void test_utf8(void) {
    /* overlong encodings */
    bad_utf8("C0 80", U("ab\xC0\x80"), 2, "overlong", "(bytes C0 80)");
    bad_utf8("C1 BF", U("\xC1\xBF"), 0, "overlong", "(bytes C1 BF)");
    bad_utf8("E0 80 80", U("A\xE0\x80\x80"), 1, "overlong", "(bytes E0 80)");
    bad_utf8("E0 9F BF (U+07FF in 3)", U("\xE0\x9F\xBF"), 0, "overlong", "E0 9F");
    bad_utf8("F0 80 80 80", U("\xF0\x80\x80\x80"), 0, "overlong", "F0 80");
    bad_utf8("F0 8F BF BF (U+FFFF in 4)", U("\xF0\x8F\xBF\xBF"), 0, "overlong", "F0 8F");
    /* surrogates */
    bad_utf8("ED A0 80", U("AAA\xED\xA0\x80"), 3, "surrogate", "(bytes ED A0)");
    bad_utf8("ED BF BF", U("\xED\xBF\xBF"), 0, "surrogate", "ED BF");
    /* beyond U+10FFFF */
    bad_utf8("F4 90 80 80", U("\xF4\x90\x80\x80"), 0, "beyond U+10FFFF", "F4 90");
    bad_utf8("F5 lead", U("A\xF5\x80\x80\x80"), 1, "lead byte above F4", "(bytes F5)");
    bad_utf8("F8 lead", U("\xF8\x88\x80\x80\x80"), 0, "lead byte above F4", "(bytes F8)");
    bad_utf8("FF", U("\xFF"), 0, "lead byte above F4", "(bytes FF)");
    /* truncated sequences */
    bad_utf8("E2 82 at end", U("AA\xE2\x82"), 2, "truncated by the end", "(bytes E2 82)");
    bad_utf8("F0 9F 98 at end", U("\xF0\x9F\x98"), 0, "truncated by the end", "F0 9F 98");
    bad_utf8("C3 at end", U("A\xC3"), 1, "truncated by the end", "(bytes C3)");
    bad_utf8("E2 82 41", U("A\xE2\x82\x41"), 1, "continuation byte is missing", "(bytes E2 82 41)");
    bad_utf8("C3 41", U("\xC3\x41"), 0, "continuation byte is missing", "(bytes C3 41)");
    /* stray continuation bytes */
    bad_utf8("80", U("\x80"), 0, "stray continuation", "(bytes 80)");
    bad_utf8("e-acute then BF", U("\xC3\xA9\xBF"), 2, "stray continuation", "(bytes BF)");
    /* valid forms at the edges of each length class */
    good_utf8("U+0000", U("\x00"), 0x0);
    good_utf8("U+007F", U("\x7F"), 0x7F);
    good_utf8("U+0080", U("\xC2\x80"), 0x80);
    good_utf8("U+07FF", U("\xDF\xBF"), 0x7FF);
    good_utf8("U+0800", U("\xE0\xA0\x80"), 0x800);
    good_utf8("U+D7FF", U("\xED\x9F\xBF"), 0xD7FF);
    good_utf8("U+E000", U("\xEE\x80\x80"), 0xE000);
    good_utf8("U+FFFF", U("\xEF\xBF\xBF"), 0xFFFF);
    good_utf8("U+10000", U("\xF0\x90\x80\x80"), 0x10000);
    good_utf8("U+10FFFF", U("\xF4\x8F\xBF\xBF"), 0x10FFFF);
    unsigned char out[4];
    EXPECT(td_utf8_put(0xD800, out) == 0 && td_utf8_put(0xDFFF, out) == 0 && td_utf8_put(0x110000, out) == 0,
           "td_utf8_put accepts a surrogate or a code point above U+10FFFF");

    /* vocabulary: sorted distinct code points, ids are their ranks, and the
     * ids decode back to the text */
    const unsigned char text[] = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x82\xAC\xF0\x9D\x84\x9E";
    size_t n = sizeof text - 1;
    uint32_t *chars;
    size_t V;
    td_err e = {{0}};
    int rc = td_utf8_vocab(text, n, &chars, &V, &e);
    static const uint32_t want[] = {' ', 'd', 'h', 'l', 'o', 'r', 'w', 0xE9, 0xF6, 0x20AC, 0x1D11E};
    EXPECT(rc == 0 && V == 11 && memcmp(chars, want, sizeof want) == 0, "vocab: rc %d V %zu (want 11): %s",
           rc, V, e.msg);
    if (rc == 0 && V == 11) {
        int ids[64];
        size_t count;
        rc = td_utf8_encode_ids(chars, V, text, n, ids, &count, &e);
        static const int want_ids[] = {2, 7, 3, 3, 4, 0, 6, 8, 5, 3, 1, 0, 9, 10};
        EXPECT(rc == 0 && count == 14 && memcmp(ids, want_ids, sizeof want_ids) == 0,
               "encode: rc %d count %zu (want 14): %s", rc, count, e.msg);
        unsigned char back[64];
        size_t m = 0;
        for (size_t i = 0; i < count; i++) m += (size_t)td_utf8_put(chars[ids[i]], back + m);
        EXPECT(m == n && memcmp(back, text, n) == 0, "round trip: %zu bytes back, want %zu", m, n);
        /* a character outside the vocabulary names itself and its offset */
        rc = td_utf8_encode_ids(chars, V, U("dx"), ids, &count, &e);
        EXPECT(rc == -1 && strstr(e.msg, "character 'x' (U+0078) at byte 1") &&
                   strstr(e.msg, "11-character vocabulary"),
               "unknown char: rc %d message '%s'", rc, e.msg);
        /* a control character is not printed raw: the message stays one line */
        rc = td_utf8_encode_ids(chars, V, U("d\n"), ids, &count, &e);
        EXPECT(rc == -1 && strstr(e.msg, "(U+000A) at byte 1") && !strchr(e.msg, '\n'),
               "unknown newline: rc %d message '%s'", rc, e.msg);
    }
    free(chars);
    rc = td_utf8_vocab(text, 0, &chars, &V, &e);
    EXPECT(rc == 0 && V == 0 && chars == NULL, "empty text: rc %d V %zu", rc, V);
}

/* ---- token files ----------------------------------------------------------- */

/* An llm.c file: header (magic, version, count) + `written` tokens 0,1,2..
 * + `extra` trailing bytes; returns its size. */
static size_t llmc_file(unsigned char *buf, int magic, int version, int count, int written, int extra) {
    memset(buf, 0, TD_LLMC_HEADER_BYTES);
    const int hdr[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) buf[4 * i + b] = (unsigned char)((unsigned)hdr[i] >> (8 * b));
    size_t n = TD_LLMC_HEADER_BYTES;
    for (int t = 0; t < written; t++) buf[n++] = (unsigned char)(t * 100), buf[n++] = (unsigned char)t;
    for (int x = 0; x < extra; x++) buf[n++] = 0xAB;
    return n;
}

/* probe on the whole file, then on its first 1024 bytes + size: both must
 * agree. Returns the probe's rc; *tf, e as the probe left them. */
static int probe(const unsigned char *buf, size_t n, td_tokfile *tf, td_err *e) {
    size_t head = n < TD_TOKFILE_PROBE_BYTES ? n : TD_TOKFILE_PROBE_BYTES;
    memset(tf, 0xEE, sizeof *tf);
    return td_tokfile_probe(buf, head, n, tf, e);
}

static void refused(const char *name, const unsigned char *buf, size_t n, const char *want1, const char *want2) {
    td_tokfile tf;
    td_err e = {{0}};
    int rc = probe(buf, n, &tf, &e);
    EXPECT(rc == -1 && strstr(e.msg, want1) && strstr(e.msg, want2), "%s: rc %d message '%s' (want '%s', '%s')",
           name, rc, e.msg, want1, want2);
}

/* A raw file starting with uint16 tokens a, b (then c, d): read as raw. */
static void raw_starting(const char *name, unsigned a, unsigned b, int want_raw) {
    unsigned char buf[8] = {a & 255, a >> 8, b & 255, b >> 8, 7, 0, 9, 0};
    td_tokfile tf;
    td_err e = {{0}};
    int rc = probe(buf, sizeof buf, &tf, &e);
    if (want_raw)
        EXPECT(rc == 0 && tf.kind == TD_TOKFILE_RAW && tf.offset == 0 && tf.count == 4,
               "%s: tokens %u %u not read as 4 raw tokens (rc %d: %s)", name, a, b, rc, e.msg);
    else
        EXPECT(rc == -1 && strstr(e.msg, "llm.c"), "%s: tokens %u %u not refused as an llm.c header (rc %d)",
               name, a, b, rc);
}

static void test_token_files(void) {
    static unsigned char buf[TD_LLMC_HEADER_BYTES + 64];
    td_tokfile tf;
    td_err e = {{0}};
    /* a good llm.c file: 3 tokens */
    size_t n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 3, 3, 0);
    buf[TD_LLMC_HEADER_BYTES + 4] = 0xFF, buf[TD_LLMC_HEADER_BYTES + 5] = 0xFF; /* token 2 = 65535 */
    int rc = probe(buf, n, &tf, &e);
    EXPECT(rc == 0 && tf.kind == TD_TOKFILE_LLMC && tf.offset == 1024 && tf.count == 3,
           "good llm.c: rc %d kind %d offset %llu count %llu: %s", rc, tf.kind, (unsigned long long)tf.offset,
           (unsigned long long)tf.count, e.msg);
    int ids[8], max_id;
    td_tokfile_decode(buf + 1024, 3, 2, ids, &max_id);
    EXPECT(ids[0] == 0 && ids[1] == 356 && ids[2] == 65535 && max_id == 65535, "decode: %d %d %d max %d",
           ids[0], ids[1], ids[2], max_id);
    EXPECT(td_tokfile_check_ids(ids, 3, 65536, &e) == 0, "ids within --vocab 65536 refused: %s", e.msg);
    rc = td_tokfile_check_ids(ids, 3, 65535, &e);
    EXPECT(rc == -1 && strstr(e.msg, "token id 65535 at index 2 does not fit --vocab 65535"),
           "id 65535 vs --vocab 65535: rc %d message '%s'", rc, e.msg);
    rc = td_tokfile_check_ids(ids, 3, 300, &e);
    EXPECT(rc == -1 && strstr(e.msg, "token id 356 at index 1"), "first bad id: rc %d message '%s'", rc, e.msg);
    td_tokfile_decode(buf, 0, 2, ids, &max_id);
    EXPECT(max_id == -1, "max id of no tokens is %d, want -1", max_id);
    /* a header with count 0 and nothing after it is a valid, empty file */
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 0, 0, 0);
    rc = probe(buf, n, &tf, &e);
    EXPECT(rc == 0 && tf.count == 0 && tf.offset == 1024, "empty llm.c: rc %d: %s", rc, e.msg);

    /* llm.c-looking headers that trident must refuse, with what it reads */
    n = llmc_file(buf, 20240521, 1, 3, 3, 0);
    refused("magic 20240521", buf, n, "magic is 20240521", "magic 20240520 (version 1)");
    n = llmc_file(buf, 20240000, 1, 3, 3, 0);
    refused("magic 20240000 (window start)", buf, n, "magic is 20240000", "20240520");
    n = llmc_file(buf, 20249999, 1, 3, 3, 0);
    refused("magic 20249999 (window end)", buf, n, "magic is 20249999", "20240520");
    n = llmc_file(buf, 20240326, 3, 1024, 0, 0);
    refused("llm.c model file", buf, n, "20240326 is an llm.c model", "token files (magic 20240520");
    n = llmc_file(buf, 20240328, 2, 50257, 0, 0);
    refused("llm.c tokenizer file", buf, n, "llm.c tokenizer file", "20240520");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 2, 3, 3, 0);
    refused("version 2", buf, n, "version 2 is not supported", "reads version 1");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 0, 3, 3, 0);
    refused("version 0", buf, n, "version 0 is not supported", "reads version 1");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, -1, 0, 0);
    refused("negative count", buf, n, "token count -1 is negative", "");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 3, 4, 0);
    refused("one token too many", buf, n, "says 3 tokens (6 bytes) but 8 bytes follow", "trailing bytes");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 3, 3, 1);
    refused("one trailing byte", buf, n, "but 7 bytes follow", "trailing bytes");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 3, 2, 0);
    refused("count above the data", buf, n, "says 3 tokens (6 bytes) but 4 bytes follow", "cut short");
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 0x7FFFFFFF, 2, 0);
    refused("huge count", buf, n, "says 2147483647 tokens (4294967294 bytes) but 4 bytes follow", "cut short");
    llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 3, 0, 0);
    refused("truncated header (12 bytes)", buf, 12, "truncated: the file has 12 bytes", "needs 1024");
    refused("truncated header (1023 bytes)", buf, 1023, "truncated: the file has 1023 bytes", "needs 1024");

    /* the probe reads only the first 1024 bytes: head + size gives the same */
    n = llmc_file(buf, TD_LLMC_TOKENS_MAGIC, 1, 20, 20, 0);
    rc = td_tokfile_probe(buf, TD_TOKFILE_PROBE_BYTES, n, &tf, &e);
    EXPECT(rc == 0 && tf.count == 20, "head-only probe: rc %d count %llu: %s", rc, (unsigned long long)tf.count,
           e.msg);
    rc = td_tokfile_probe(buf, 100, n, &tf, &e);
    EXPECT(rc == -1 && strstr(e.msg, "internal"), "probe with a short head accepted (rc %d)", rc);

    /* raw files */
    raw_starting("small ids", 1, 2, 1);
    raw_starting("zeros", 0, 0, 1);
    raw_starting("just below the window", 54911, 308, 1);
    raw_starting("just above the window", 64912, 308, 1);
    raw_starting("15 309", 15, 309, 1);
    raw_starting("55432 309", 55432, 309, 1);
    raw_starting("window start (20240000)", 54912, 308, 0);
    raw_starting("llm.c magic 20240520 as tokens", 55432, 308, 0); /* the documented ambiguity */
    raw_starting("window end (20249999)", 64911, 308, 0);
    unsigned char odd[5] = {1, 0, 2, 0, 3};
    refused("raw odd size", odd, 5, "must have an even size", "has 5 bytes");
    refused("one byte", odd, 1, "must have an even size", "has 1 bytes");
    refused("empty file", odd, 0, "empty", "");
    rc = probe(odd, 2, &tf, &e);
    EXPECT(rc == 0 && tf.kind == TD_TOKFILE_RAW && tf.count == 1, "2-byte raw file: rc %d: %s", rc, e.msg);
}

/* ---- synthetic:V ------------------------------------------------------------ */

static void synthetic_ok(const char *spec, int want) {
    int V = -7;
    td_err e = {{0}};
    int rc = td_synthetic_parse(spec, &V, &e);
    EXPECT(rc == 0 && V == want, "%s: rc %d V %d, want %d (%s)", spec, rc, V, want, e.msg);
}

static void synthetic_bad(const char *spec, const char *want) {
    int V = -7;
    td_err e = {{0}};
    int rc = td_synthetic_parse(spec, &V, &e);
    EXPECT(rc == -1 && V == -7 && strstr(e.msg, want) && strstr(e.msg, "synthetic:V"),
           "%s: rc %d V %d message '%s' (want '%s' and the valid form)", spec, rc, V, e.msg, want);
}

static void test_synthetic(void) {
    synthetic_ok("synthetic:2", 2);
    synthetic_ok("synthetic:65", 65);
    synthetic_ok("synthetic:0050257", 50257);
    synthetic_ok("synthetic:16777216", TD_VOCAB_MAX);
    synthetic_bad("synthetic:10abc", "'10abc' is not a whole number");
    synthetic_bad("synthetic:", "no vocabulary size");
    synthetic_bad("synthetic:-3", "'-3' is not a whole number");
    synthetic_bad("synthetic:+3", "'+3' is not a whole number");
    synthetic_bad("synthetic: 3", "' 3' is not a whole number");
    synthetic_bad("synthetic:3 ", "'3 ' is not a whole number");
    synthetic_bad("synthetic:0x10", "'0x10' is not a whole number");
    synthetic_bad("synthetic:1", "vocabulary 1 is too small");
    synthetic_bad("synthetic:0", "vocabulary 0 is too small");
    synthetic_bad("synthetic:16777217", "vocabulary 16777217 is larger than 16777216");
    synthetic_bad("synthetic:4294967298", "is larger than");           /* wraps to 2 in 32 bits */
    synthetic_bad("synthetic:18446744073709551618", "is larger than"); /* wraps to 2 in 64 bits */
    synthetic_bad("synthetic:99999999999999999999999999999999abc", "is not a whole number");
    synthetic_bad("synth:3", "not a synthetic spec");
    synthetic_bad("synthetic:1\n2", "'1?2' is not a whole number"); /* one line: found by fuzzing */
}

/* ---- TensorBoard events ------------------------------------------------ */

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_tfevents(void) {
    /* CRC32C check values: "123456789", and RFC 3720's 32 zeros / 32 0xFF */
    uint8_t z[32] = {0}, ff[32];
    memset(ff, 0xff, sizeof ff);
    EXPECT(td_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c(123456789) = %08x", td_crc32c(0, "123456789", 9));
    EXPECT(td_crc32c(0, z, 32) == 0x8A9136AAu, "crc32c(32 zeros) = %08x", td_crc32c(0, z, 32));
    EXPECT(td_crc32c(0, ff, 32) == 0x62A8AB43u, "crc32c(32 0xff) = %08x", td_crc32c(0, ff, 32));
    EXPECT(td_crc32c(td_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u, "crc32c continued");
    uint32_t c = 0xE3069283u;
    EXPECT(td_crc32c_masked("123456789", 9) == ((c >> 15 | c << 17) + 0xa282ead8u), "masked crc32c");
    /* file_version at wall time 0, step 0: the bytes protobuf writes */
    uint8_t buf[512], rec[512 + TD_TFRECORD_OVERHEAD];
    td_tfevent e;
    td_tfevent_begin(&e, buf, sizeof buf, 0.0, 0);
    td_tfevent_file_version(&e, "brain.Event:2");
    static const uint8_t want[] = {0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x1a, 13, /* step 0: left out */
                                   'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    long n = td_tfevent_end(&e);
    EXPECT(n == (long)sizeof want && memcmp(buf, want, sizeof want) == 0, "file_version event: %ld bytes", n);
    td_tfrecord_frame(rec, buf, (size_t)n);
    EXPECT(le32(rec) == (uint32_t)n && le32(rec + 4) == 0 && le32(rec + 8) == td_crc32c_masked(rec, 8) &&
               memcmp(rec + 12, want, sizeof want) == 0 && le32(rec + 12 + n) == td_crc32c_masked(want, sizeof want),
           "the record's framing");
    /* SessionLog START at step 300: step as a 2-byte varint, field 7 */
    td_tfevent_begin(&e, buf, sizeof buf, 0.0, 300);
    td_tfevent_session_start(&e);
    static const uint8_t start[] = {0x10, 0xac, 0x02, 0x3a, 2, 0x08, 1};
    n = td_tfevent_end(&e);
    EXPECT(n == 9 + (long)sizeof start && memcmp(buf + 9, start, sizeof start) == 0, "SessionLog START event");
    /* one scalar: summary (5) { value (1) { tag (1) "a", simple_value (2) 1.0f } } */
    td_tfevent_begin(&e, buf, sizeof buf, 0.0, 1);
    td_tfevent_scalar(&e, "a", 1.0f);
    static const uint8_t one[] = {0x2a, 10, 0x0a, 8, 0x0a, 1, 'a', 0x15, 0, 0, 0x80, 0x3f};
    n = td_tfevent_end(&e);
    EXPECT(n == 11 + (long)sizeof one && memcmp(buf + 11, one, sizeof one) == 0, "one scalar's event");
    /* 20 scalars "t/NN": a Summary of 260 bytes, its length a 2-byte varint */
    td_tfevent_begin(&e, buf, sizeof buf, 0.0, 1);
    for (int i = 0; i < 20; i++) {
        char tag[8];
        snprintf(tag, sizeof tag, "t/%02d", i);
        td_tfevent_scalar(&e, tag, (float)i);
    }
    n = td_tfevent_end(&e);
    EXPECT(n == 11 + 3 + 260 && buf[11] == 0x2a && buf[12] == (0x80 | (260 & 0x7f)) && buf[13] == 260 >> 7 &&
               buf[14] == 0x0a && buf[15] == 11 && memcmp(buf + 16, "\x0a\x04t/00", 6) == 0,
           "20 scalars: %ld bytes, summary length bytes %02x %02x", n, buf[12], buf[13]);
    /* a buffer too small: -1, nothing claimed */
    td_tfevent_begin(&e, buf, 16, 0.0, 1);
    td_tfevent_scalar(&e, "loss", 1.0f);
    EXPECT(td_tfevent_end(&e) == -1, "an event larger than its buffer is refused");
}

int main(void) {
    test_utf8();
    test_token_files();
    test_synthetic();
    test_tfevents();
    return tu_finish("test_formats");
}
