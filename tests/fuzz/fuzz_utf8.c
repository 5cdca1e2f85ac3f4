/* libFuzzer target: arbitrary bytes as text for the strict UTF-8 decoder,
 * the char vocabulary and the encoder (src/formats/utf8.c). Oracles, not
 * just "no crash":
 * - a reference decoder written differently (read any 1-4 byte pattern,
 *   then require the shortest form, no surrogate, <= U+10FFFF) must agree on
 *   accept/refuse and on the offset of the first bad sequence;
 * - the vocabulary and the encoder refuse exactly the same inputs with the
 *   same message;
 * - an accepted text has a strictly ascending vocabulary of valid code
 *   points, every entry used, and its ids re-encode to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"

/* Returns 1 if valid; else 0 and *bad = offset of the first bad sequence. */
static int ref_valid(const uint8_t *s, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        int len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        int ok = len > 0 && i + (size_t)len <= n;
        uint32_t cp = 0;
        if (ok) {
            cp = len == 1 ? b : (uint32_t)(b & (0xFF >> (len + 1)));
            for (int k = 1; k < len; k++) {
                if ((s[i + k] & 0xC0) != 0x80) ok = 0;
                cp = (cp << 6) | (s[i + k] & 0x3F);
            }
            int shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (shortest != len || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) ok = 0;
        }
        if (!ok) return *bad = i, 0;
        i += (size_t)len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t ref_bad = (size_t)-1, bad = (size_t)-1;
    int valid = ref_valid(data, size, &ref_bad);
    td_err e1, e2, e3;
    memset(&e1, 0, sizeof e1), memset(&e2, 0, sizeof e2), memset(&e3, 0, sizeof e3);
    int rc = td_utf8_check(data, size, &bad, &e1);
    if ((rc == 0) != valid) abort();
    if (!valid && bad != ref_bad) abort();

    uint32_t *chars = NULL;
    size_t V = 0;
    int rv = td_utf8_vocab(data, size, &chars, &V, &e2);
    if ((rv == 0) != valid) abort();
    if (!valid) {
        if (chars || V || strcmp(e1.msg, e2.msg) != 0 || strchr(e1.msg, '\n')) abort();
        /* the encoder, given every code point, refuses with the same words */
        static uint32_t all[0x110000 - 0x800];
        static size_t n_all = 0;
        if (!n_all)
            for (uint32_t c = 0; c < 0x110000; c++)
                if (c < 0xD800 || c > 0xDFFF) all[n_all++] = c;
        int *ids = malloc(sizeof(int) * (size ? size : 1));
        size_t count;
        if (!ids) return 0;
        if (td_utf8_encode_ids(all, n_all, data, size, ids, &count, &e3) == 0 || strcmp(e1.msg, e3.msg) != 0)
            abort();
        free(ids);
        return 0;
    }
    for (size_t k = 0; k < V; k++) {
        unsigned char tmp[4];
        if ((k && chars[k] <= chars[k - 1]) || !td_utf8_put(chars[k], tmp)) abort();
    }
    int *ids = malloc(sizeof(int) * (size ? size : 1));
    unsigned char *back = malloc(size ? size : 1);
    char *used = calloc(V ? V : 1, 1);
    if (!ids || !back || !used) abort();
    size_t count = 0;
    if (td_utf8_encode_ids(chars, V, data, size, ids, &count, &e3) != 0) abort();
    size_t m = 0;
    for (size_t k = 0; k < count; k++) {
        if (ids[k] < 0 || (size_t)ids[k] >= V) abort();
        used[ids[k]] = 1;
        unsigned char u[4];
        int len = td_utf8_put(chars[ids[k]], u);
        if (len == 0 || m + (size_t)len > size) abort();
        memcpy(back + m, u, (size_t)len);
        m += (size_t)len;
        /* the decoder reads back what the encoder wrote */
        uint32_t cp;
        if (td_utf8_next(u, (size_t)len, &cp, NULL) != len || cp != chars[ids[k]]) abort();
    }
    if (m != size || (size && memcmp(back, data, size) != 0)) abort();
    for (size_t k = 0; k < V; k++)
        if (!used[k]) abort();
    free(used), free(back), free(ids), free(chars);
    return 0;
}
