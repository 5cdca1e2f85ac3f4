/* Fuzz target: arbitrary bytes as a checkpoint's model.bin and as its
 * config.json (src/formats/ckpt_format.c). The parsers must return 0 or -1
 * with a message for any input: no crash, no read past the buffer, no
 * undefined behaviour, no overflow in the size arithmetic.
 * Seeds (tests/fuzz/corpus/ckpt/): model.bin and config.json of a tiny run
 * (L1 H2 C16 T4, char vocabulary of 5), written by trident train --out. */
#include <stdint.h>
#include <string.h>

#include "trident/formats_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    td_ckpt_header h, ref;
    td_ckpt_layout lay;
    td_err e;
    /* model.bin as a whole, and as the loader reads it: the header from a
     * prefix against the file's length */
    int ok = td_ckpt_parse(data, size, &h, &lay, &e) == 0;
    size_t avail = size < TD_CKPT_HEADER_BYTES ? size : TD_CKPT_HEADER_BYTES;
    td_ckpt_header_parse(data, avail, (uint64_t)size, &ref, &lay, &e);
    td_ckpt_header_parse(data, avail, UINT64_MAX, &ref, &lay, &e);
    if (ok) { /* a valid model.bin round-trips through its own config.json */
        char json[1024];
        int n = td_ckpt_config_format(&h, json, sizeof json);
        if (n <= 0 || td_ckpt_config_check(json, (size_t)n, &h, &e) != 0) __builtin_trap();
    }
    /* config.json text against the seed's header */
    memset(&ref, 0, sizeof ref);
    ref = (td_ckpt_header){TD_CKPT_VERSION, 1, 2, 16, 4, 5, 16, 20, 0, 5, 1, 0, 0};
    ref.numel = td_ckpt_numel(1, 16, 4, 16);
    td_ckpt_config_check((const char *)data, size, &ref, &e);
    td_json_object o;
    td_json_parse_flat((const char *)data, size, &o, &e);
    if (size >= 4) td_ckpt_vocab_check(data, size / 4, &e);
    return 0;
}
