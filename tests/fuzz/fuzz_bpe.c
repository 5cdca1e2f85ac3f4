/* libFuzzer target: arbitrary bytes as a BPE rank file for
 * td_bpe_file_parse (src/formats/bpe_file.c). Inputs of even length get
 * their checksum made right first, so the fuzzer reaches the checks after
 * it. Oracles, not just "no crash":
 * - a refusal leaves no allocation and gives one line of reason;
 * - an accepted file is consistent: every byte's rank is a one-byte token of
 *   that byte, no token appears twice (checked by sorting, unlike the
 *   parser's hash table), special ids are distinct and above the ranks, and
 *   writing the parsed tables back gives the input's bytes exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_bpe.h"
#include "trident/formats_hash.h"

static const td_bpe_file *sorted_file;

static int cmp_tok(const void *a, const void *b) {
    const td_bpe_file *f = sorted_file;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx = f->offset[x + 1] - f->offset[x], ly = f->offset[y + 1] - f->offset[y];
    int c = memcmp(f->data + f->offset[x], f->data + f->offset[y], lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *p = malloc(size ? size : 1);
    if (!p) return 0;
    memcpy(p, data, size);
    if (size >= TD_BPE_HEADER_BYTES && size % 2 == 0) {
        uint64_t h = td_xxh3(p + TD_BPE_HEADER_BYTES, size - TD_BPE_HEADER_BYTES);
        for (int k = 0; k < 8; k++) p[24 + k] = (uint8_t)(h >> (8 * k));
    }
    td_bpe_file f;
    td_err e;
    memset(&e, 0, sizeof e);
    if (td_bpe_file_parse(p, size, &f, &e) != 0) {
        if (f.offset || !e.msg[0] || strchr(e.msg, '\n')) abort();
        free(p);
        return 0;
    }
    if (f.n_ranks < 256 || f.n_special > TD_BPE_MAX_SPECIAL) abort();
    for (int b = 0; b < 256; b++) {
        uint32_t r = f.byte_rank[b];
        if (r >= f.n_ranks || f.offset[r + 1] - f.offset[r] != 1 || f.data[f.offset[r]] != b)
            abort();
    }
    uint32_t *idx = malloc(f.n_ranks * sizeof *idx);
    if (!idx) abort();
    for (uint32_t r = 0; r < f.n_ranks; r++) idx[r] = r;
    sorted_file = &f;
    qsort(idx, f.n_ranks, sizeof *idx, cmp_tok);
    for (uint32_t r = 1; r < f.n_ranks; r++)
        if (cmp_tok(&idx[r - 1], &idx[r]) == 0) abort();
    free(idx);
    /* written back from the parsed tables, the file is the input */
    uint8_t *w = malloc(size), *q = w + TD_BPE_HEADER_BYTES;
    if (!w) abort();
    memcpy(w, p, TD_BPE_HEADER_BYTES);
    for (uint32_t r = 0; r < f.n_ranks; r++) *q++ = (uint8_t)(f.offset[r + 1] - f.offset[r]);
    memcpy(q, f.data, f.offset[f.n_ranks]);
    q += f.offset[f.n_ranks];
    for (uint32_t k = 0; k < f.n_special; k++) {
        const td_bpe_special *s = &f.special[k];
        if (s->id < f.n_ranks || s->len == 0 || s->text < p || s->text + s->len > p + size) abort();
        for (uint32_t j = 0; j < k; j++)
            if (f.special[j].id == s->id) abort();
        for (int b = 0; b < 4; b++) *q++ = (uint8_t)(s->id >> (8 * b));
        *q++ = (uint8_t)s->len;
        memcpy(q, s->text, s->len);
        q += s->len;
    }
    if ((size_t)(q - w) != size || memcmp(w, p, size) != 0) abort();
    free(w);
    td_bpe_file_free(&f);
    free(p);
    return 0;
}
