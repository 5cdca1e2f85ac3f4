/* libFuzzer target: arbitrary bytes as a token file (src/formats/token_file.c)
 * and as the V of "synthetic:V". Beyond "no crash", every accepted file must
 * satisfy what the format promises (the oracles below abort otherwise):
 * offset + 2 * count is the file size, a raw file has an even size and does
 * not start inside the llm.c magic window, an llm.c file has the exact magic
 * and version; the id check refuses exactly when the largest id reaches the
 * vocabulary; synthetic:V accepts exactly the plain decimals in 2..2^24. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"

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
    if (tf.offset + 2 * tf.count != size) abort();
    if (tf.kind == TD_TOKFILE_RAW && (tf.offset != 0 || size % 2 != 0 || in_window || size == 0)) abort();
    if (tf.kind == TD_TOKFILE_LLMC &&
        (tf.offset != TD_LLMC_HEADER_BYTES || first != TD_LLMC_TOKENS_MAGIC ||
         le32(data + 4) != TD_LLMC_TOKENS_VERSION || (uint64_t)le32(data + 8) != tf.count))
        abort();
    /* the probe must say the same from a copy of the first bytes alone
     * (address sanitizer catches a read past them) */
    uint8_t *copy = malloc(head ? head : 1);
    if (!copy) return;
    memcpy(copy, data, head);
    td_tokfile tf2;
    if (td_tokfile_probe(copy, head, size, &tf2, &e) != 0 || tf2.kind != tf.kind || tf2.offset != tf.offset ||
        tf2.count != tf.count)
        abort();
    free(copy);
    size_t count = (size_t)tf.count;
    int *ids = malloc(sizeof(int) * (count ? count : 1));
    if (!ids) return;
    int max_id;
    td_tokfile_decode(data + tf.offset, count, ids, &max_id);
    int ref_max = -1;
    for (size_t i = 0; i < count; i++) {
        int id = data[tf.offset + 2 * i] | data[tf.offset + 2 * i + 1] << 8;
        if (ids[i] != id) abort();
        if (id > ref_max) ref_max = id;
    }
    if (max_id != ref_max) abort();
    /* a vocabulary from the file's last byte: 1..65536, both sides of max */
    int vocab = 1 + (size ? data[size - 1] : 0) * 257;
    rc = td_tokfile_check_ids(ids, count, vocab, &e);
    if ((rc != 0) != (max_id >= vocab)) abort();
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    token_file(data, size);
    if (size <= 64) synthetic(data, size); /* specs are short; keep the bulk on the file parser */
    return 0;
}
