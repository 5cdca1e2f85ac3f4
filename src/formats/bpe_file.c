/* trident's BPE rank file (format: include/trident/formats_bpe.h). Every
 * size is checked against the bytes present before anything is allocated,
 * so a corrupt or hostile file costs at most its own size in memory. */
#include <stdlib.h>
#include <string.h>

#include "trident/formats_bpe.h"
#include "trident/formats_hash.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Finds the first token that appears twice: a table of ranks keyed by their
 * bytes. Returns the later rank of the pair, or -1 (also when out of memory,
 * reported through *oom). */
static long long first_duplicate(const td_bpe_file *f, int *oom) {
    size_t cap = 1;
    while (cap < 2 * (size_t)f->n_ranks) cap <<= 1;
    uint32_t *slot = malloc(cap * sizeof *slot);
    if (!slot) return *oom = 1, -1;
    memset(slot, 0xFF, cap * sizeof *slot);
    long long dup = -1;
    for (uint32_t r = 0; r < f->n_ranks && dup < 0; r++) {
        const unsigned char *t = f->data + f->offset[r];
        size_t len = f->offset[r + 1] - f->offset[r];
        size_t i = (size_t)td_xxh3(t, len) & (cap - 1);
        for (; slot[i] != UINT32_MAX; i = (i + 1) & (cap - 1)) {
            uint32_t o = slot[i];
            if (f->offset[o + 1] - f->offset[o] == len &&
                memcmp(f->data + f->offset[o], t, len) == 0) {
                dup = r;
                break;
            }
        }
        slot[i] = r;
    }
    free(slot);
    return dup;
}

int td_bpe_file_parse(const unsigned char *p, size_t n, td_bpe_file *f, td_err *e) {
    memset(f, 0, sizeof *f);
    if (n < TD_BPE_HEADER_BYTES)
        return td_err_set(e, "%zu bytes, shorter than the %d-byte header of a trident BPE file", n,
                          TD_BPE_HEADER_BYTES);
    if (memcmp(p, TD_BPE_MAGIC, 8) != 0)
        return td_err_set(e, "not a trident BPE rank file (its first 8 bytes are not \"%s\")",
                          TD_BPE_MAGIC);
    uint32_t n_ranks = rd32(p + 8), n_special = rd32(p + 12), data_bytes = rd32(p + 16);
    if (rd32(p + 20) != 0)
        return td_err_set(e, "header field at offset 20 is %u, must be 0", rd32(p + 20));
    if (n_ranks < 256 || n_ranks > TD_BPE_MAX_RANKS)
        return td_err_set(e, "n_ranks %u; valid: 256 .. %d", n_ranks, TD_BPE_MAX_RANKS);
    if (n_special > TD_BPE_MAX_SPECIAL)
        return td_err_set(e, "n_special %u; valid: 0 .. %d", n_special, TD_BPE_MAX_SPECIAL);
    /* the fixed parts first: then every later read is inside the file */
    uint64_t need = (uint64_t)TD_BPE_HEADER_BYTES + n_ranks + data_bytes + 5ULL * n_special;
    if (need > n)
        return td_err_set(e, "truncated: %zu bytes, but the header's sizes need at least %llu", n,
                          (unsigned long long)need);
    uint64_t want = 0;
    for (int i = 7; i >= 0; i--) want = want << 8 | p[24 + i];
    uint64_t have = td_xxh3(p + TD_BPE_HEADER_BYTES, n - TD_BPE_HEADER_BYTES);
    if (have != want)
        return td_err_set(e,
                          "checksum mismatch, the file is corrupt (XXH3-64 of bytes 32.. is "
                          "%016llx, the header says %016llx)",
                          (unsigned long long)have, (unsigned long long)want);
    const unsigned char *lens = p + TD_BPE_HEADER_BYTES;
    uint64_t total = 0;
    for (uint32_t r = 0; r < n_ranks; r++) {
        if (lens[r] == 0) return td_err_set(e, "token %u has length 0", r);
        total += lens[r];
    }
    if (total != data_bytes)
        return td_err_set(e, "the token lengths add up to %llu bytes, the header says %u",
                          (unsigned long long)total, data_bytes);
    f->n_ranks = n_ranks;
    f->data = lens + n_ranks;
    f->offset = malloc(((size_t)n_ranks + 1) * sizeof *f->offset);
    if (!f->offset) return td_err_set(e, "out of memory for %u token offsets", n_ranks);
    f->offset[0] = 0;
    for (uint32_t r = 0; r < n_ranks; r++) f->offset[r + 1] = f->offset[r] + lens[r];
    for (int b = 0; b < 256; b++) f->byte_rank[b] = UINT32_MAX;
    for (uint32_t r = 0; r < n_ranks; r++)
        if (lens[r] == 1) {
            unsigned b = f->data[f->offset[r]];
            if (f->byte_rank[b] == UINT32_MAX) f->byte_rank[b] = r;
        }
    for (int b = 0; b < 256; b++)
        if (f->byte_rank[b] == UINT32_MAX) {
            td_bpe_file_free(f);
            return td_err_set(e,
                              "byte 0x%02x has no one-byte token, so some text could not be "
                              "encoded",
                              b);
        }
    int oom = 0;
    long long dup = first_duplicate(f, &oom);
    if (oom || dup >= 0) {
        td_bpe_file_free(f);
        return oom ? td_err_set(e, "out of memory checking %u tokens", n_ranks)
                   : td_err_set(e, "token %lld repeats an earlier token's bytes", dup);
    }
    const unsigned char *q = f->data + data_bytes, *end = p + n;
    for (uint32_t k = 0; k < n_special; k++) {
        if (end - q < 5) break;
        uint32_t id = rd32(q), len = q[4];
        q += 5;
        if ((size_t)(end - q) < len) break;
        if (id < n_ranks || id >= TD_BPE_MAX_RANKS || len == 0) {
            td_bpe_file_free(f);
            return td_err_set(e,
                              "special token %u: id %u, length %u; valid: an id from %u (after "
                              "the ranks) below %d, a length from 1",
                              k, id, len, n_ranks, TD_BPE_MAX_RANKS);
        }
        for (uint32_t j = 0; j < k; j++)
            if (f->special[j].id == id) {
                td_bpe_file_free(f);
                return td_err_set(e, "special tokens %u and %u share id %u", j, k, id);
            }
        f->special[k] = (td_bpe_special){id, len, q};
        q += len;
        f->n_special = k + 1;
    }
    if (f->n_special != n_special) {
        uint32_t got = f->n_special;
        td_bpe_file_free(f);
        return td_err_set(e, "truncated inside the special tokens (%u of %u complete)", got,
                          n_special);
    }
    if (q != end) {
        td_bpe_file_free(f);
        return td_err_set(e, "%zu bytes after the last special token; the file ends there",
                          (size_t)(end - q));
    }
    return 0;
}

void td_bpe_file_free(td_bpe_file *f) {
    free(f->offset);
    f->offset = NULL;
}
