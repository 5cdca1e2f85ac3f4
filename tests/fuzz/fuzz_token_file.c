/* libFuzzer target: arbitrary bytes as a token file (src/formats/token_file.c)
 * and as the V of "synthetic:V". Beyond "no crash", every accepted file must
 * satisfy what the format promises (the oracles below abort otherwise):
 * offset + width * count is the file size, a raw file has an even size and
 * does not start inside the llm.c magic window, an llm.c file has the exact
 * magic and version of its width (uint16 or uint32); decoding agrees with a
 * plain reading and names the first negative 32-bit id; the id check refuses
 * exactly when the largest id reaches the vocabulary; synthetic:V accepts
 * exactly the plain decimals in 2..2^24. The same bytes are a Megatron-LM
 * .idx (src/formats/indexed.c) whose .bin size is the last 8 bytes: an
 * accepted index has dtype uint16 or int32, counts that fill it exactly,
 * pointers at the running sum of the lengths and tokens * width equal to
 * the .bin's size (recomputed from the bytes), and td_mmidx_format of its
 * lengths parses back to the same totals. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"
#include "trident/formats_indexed.h"

static int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static void check_message(const td_err *e) {
    if (!memchr(e->msg, 0, sizeof e->msg) || e->msg[0] == 0 || strchr(e->msg, '\n')) abort();
}

static void token_file(const uint8_t *data, size_t size) {
    td_tokfile tf;
    td_err e;
    memset(&e, 0, sizeof e);
    size_t head = size < TD_TOKFILE_PROBE_BYTES ? size : TD_TOKFILE_PROBE_BYTES;
    int rc = td_tokfile_probe(data, head, size, &tf, &e);
    int32_t first = size >= 4 ? le32(data) : 0;
    int in_window = size >= 4 && first >= TD_LLMC_MAGIC_LO && first <= TD_LLMC_MAGIC_HI;
    if (rc != 0) {
        check_message(&e);
        if (size > 0 && !in_window && size % 2 == 0) abort(); /* a plain raw file was refused */
        return;
    }
    int w = tf.kind == TD_TOKFILE_LLMC32 ? 4 : 2;
    if (tf.width != w || tf.offset + (uint64_t)w * tf.count != size) abort();
    if (tf.kind == TD_TOKFILE_RAW && (tf.offset != 0 || size % 2 != 0 || in_window || size == 0)) abort();
    if (tf.kind == TD_TOKFILE_LLMC &&
        (tf.offset != TD_LLMC_HEADER_BYTES || first != TD_LLMC_TOKENS_MAGIC ||
         le32(data + 4) != TD_LLMC_TOKENS_VERSION || (uint64_t)le32(data + 8) != tf.count))
        abort();
    if (tf.kind == TD_TOKFILE_LLMC32 &&
        (tf.offset != TD_LLMC_HEADER_BYTES || first != TD_LLMC_TOKENS32_MAGIC ||
         le32(data + 4) != TD_LLMC_TOKENS32_VERSION || (uint64_t)le32(data + 8) != tf.count))
        abort();
    /* the probe must say the same from a copy of the first bytes alone
     * (address sanitizer catches a read past them) */
    uint8_t *copy = malloc(head ? head : 1);
    if (!copy) return;
    memcpy(copy, data, head);
    td_tokfile tf2;
    if (td_tokfile_probe(copy, head, size, &tf2, &e) != 0 || tf2.kind != tf.kind || tf2.offset != tf.offset ||
        tf2.count != tf.count || tf2.width != tf.width)
        abort();
    free(copy);
    size_t count = (size_t)tf.count;
    int *ids = malloc(sizeof(int) * (count ? count : 1));
    if (!ids) return;
    int max_id;
    size_t bad = td_tokfile_decode(data + tf.offset, count, w, ids, &max_id);
    int ref_max = -1;
    size_t ref_bad = count;
    for (size_t i = 0; i < count; i++) {
        const uint8_t *p = data + tf.offset + (size_t)w * i;
        int id = w == 2 ? p[0] | p[1] << 8 : le32(p);
        if (ids[i] != id) abort();
        if (id > ref_max) ref_max = id;
        if (id < 0 && ref_bad == count) ref_bad = i;
    }
    if (max_id != ref_max || bad != ref_bad) abort();
    if (bad < count) { /* negative ids are the caller's error; the range check below needs ids */
        free(ids);
        return;
    }
    /* a vocabulary from the file's last byte: 1..65536, both sides of max */
    int vocab = 1 + (size ? data[size - 1] : 0) * 257;
    rc = td_tokfile_check_ids(ids, count, vocab, &e);
    if ((rc != 0) != (max_id >= vocab)) abort();
    if (rc != 0) check_message(&e);
    /* uint16 files serve vocabularies up to 65536 only */
    int big = vocab * 2;
    rc = td_tokfile_check_width(w, big, "this file", &e);
    if ((rc != 0) != (w == 2 && big > TD_UINT16_VOCAB_MAX)) abort();
    if (rc != 0) check_message(&e);
    free(ids);
}

static void synthetic(const uint8_t *data, size_t size) {
    char *spec = malloc(size + 11);
    if (!spec) return;
    memcpy(spec, "synthetic:", 10);
    memcpy(spec + 10, data, size);
    spec[10 + size] = 0;
    const char *v = spec + 10;
    /* reference: plain digits, leading zeros skipped, then at most 8 digits
     * (2^24 = 16777216 has 8) and the value in range */
    int digits = *v != 0;
    for (const char *p = v; *p; p++) digits &= *p >= '0' && *p <= '9';
    long long want = -1;
    if (digits) {
        const char *p = v;
        while (*p == '0' && p[1]) p++;
        if (strlen(p) <= 8) {
            want = atoll(p);
            if (want < 2 || want > TD_VOCAB_MAX) want = -1;
        }
    }
    int V = -1;
    td_err e;
    memset(&e, 0, sizeof e);
    int rc = td_synthetic_parse(spec, &V, &e);
    if (rc == 0 ? (want < 0 || V != want) : want >= 0) abort();
    if (rc != 0) check_message(&e);
    free(spec);
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The input as a Megatron .idx followed by the size of its .bin (the last
 * 8 bytes). */
static void indexed(const uint8_t *data, size_t size) {
    if (size < 8) return;
    size_t n = size - 8;
    uint64_t bin_size = le64(data + n);
    uint8_t *idx = malloc(n ? n : 1); /* an exact-size copy: a read past it is caught */
    if (!idx) return;
    memcpy(idx, data, n);
    td_mmidx x;
    td_err e;
    memset(&e, 0, sizeof e);
    if (td_mmidx_parse(idx, n, bin_size, &x, &e) != 0) {
        check_message(&e);
        free(idx);
        return;
    }
    int w = x.width;
    if (!((x.dtype == TD_MMIDX_DTYPE_UINT16 && w == 2) || (x.dtype == TD_MMIDX_DTYPE_INT32 && w == 4))) abort();
    uint64_t S = le64(idx + 18), D = le64(idx + 26);
    if (S != x.sequences || D != x.documents + 1 || n != TD_MMIDX_HEADER_BYTES + 12 * S + 8 * D) abort();
    uint64_t *lengths = malloc(sizeof(uint64_t) * (S ? S : 1));
    if (!lengths) abort();
    uint64_t sum = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t len = le32(idx + TD_MMIDX_HEADER_BYTES + 4 * i);
        if (len < 0 || le64(idx + TD_MMIDX_HEADER_BYTES + 4 * S + 8 * i) != sum * (uint64_t)w) abort();
        lengths[i] = (uint64_t)len;
        sum += (uint64_t)len;
    }
    if (sum != x.tokens || sum * (uint64_t)w != bin_size) abort();
    /* the writer's index of the same lengths reads back the same */
    size_t m = td_mmidx_size(S);
    uint8_t *out = malloc(m);
    if (!out) abort();
    td_mmidx y;
    if (td_mmidx_format(lengths, S, w, out, &e) != 0 || td_mmidx_parse(out, m, bin_size, &y, &e) != 0 ||
        y.dtype != x.dtype || y.tokens != x.tokens || y.sequences != S || y.documents != S)
        abort();
    free(out);
    free(lengths);
    free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    token_file(data, size);
    indexed(data, size);
    if (size <= 64) synthetic(data, size); /* specs are short; keep the bulk on the file parser */
    return 0;
}
