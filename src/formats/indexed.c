/* Megatron-LM's .idx (formats_indexed.h): the checking parser and the
 * writer of the index trident's own shards carry. */
#include <inttypes.h>
#include <string.h>

#include "trident/formats_indexed.h"

static uint64_t rd_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void wr_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static const char *dtype_name(int code) {
    static const char *const names[] = {NULL, "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
    return code >= 1 && code <= 8 ? names[code] : NULL;
}

int td_mmidx_parse(const unsigned char *idx, size_t n, uint64_t bin_size, td_mmidx *x, td_err *e) {
    if (n < TD_MMIDX_HEADER_BYTES)
        return td_err_set(e, "%zu bytes, shorter than a Megatron index header (%d bytes)", n, TD_MMIDX_HEADER_BYTES);
    if (memcmp(idx, TD_MMIDX_MAGIC, TD_MMIDX_MAGIC_BYTES) != 0)
        return td_err_set(e, "not a Megatron-LM index: its first 9 bytes are not the magic MMIDIDX\\0\\0");
    uint64_t version = rd_u64(idx + 9);
    if (version != TD_MMIDX_VERSION)
        return td_err_set(e, "Megatron index version %" PRIu64 " is not supported; trident reads version %d",
                          version, TD_MMIDX_VERSION);
    int dtype = idx[17];
    const char *name = dtype_name(dtype);
    if (!name) return td_err_set(e, "unknown dtype code %d; Megatron's codes are 1..8", dtype);
    if (dtype != TD_MMIDX_DTYPE_UINT16 && dtype != TD_MMIDX_DTYPE_INT32)
        return td_err_set(e, "dtype %s (code %d) is not read; trident reads token ids as uint16 (code %d) or int32 "
                             "(code %d)",
                          name, dtype, TD_MMIDX_DTYPE_UINT16, TD_MMIDX_DTYPE_INT32);
    int width = dtype == TD_MMIDX_DTYPE_UINT16 ? 2 : 4;
    uint64_t S = rd_u64(idx + 18), D = rd_u64(idx + 26), body = n - TD_MMIDX_HEADER_BYTES;
    /* bounded by the bytes present before any product is formed */
    if (S > body / 12 || D > body / 8 || 12 * S + 8 * D > body)
        return td_err_set(e, "the header says %" PRIu64 " sequences and %" PRIu64 " document-index entries, "
                             "more than its %zu bytes hold (the index is cut short)",
                          S, D, n);
    uint64_t want = 12 * S + 8 * D;
    if (body != want) {
        if (body == want + S && S > 0)
            return td_err_set(e, "it carries per-sequence modes (a multimodal index); trident reads text indexes");
        return td_err_set(e, "%zu bytes, but %" PRIu64 " sequences and %" PRIu64 " document-index entries take "
                             "%" PRIu64 " (trailing bytes)",
                          n, S, D, TD_MMIDX_HEADER_BYTES + want);
    }
    const unsigned char *len = idx + TD_MMIDX_HEADER_BYTES, *ptr = len + 4 * S, *doc = ptr + 8 * S;
    uint64_t tokens = 0;
    for (uint64_t i = 0; i < S; i++) {
        int32_t l = (int32_t)((uint32_t)len[4 * i] | (uint32_t)len[4 * i + 1] << 8 | (uint32_t)len[4 * i + 2] << 16 |
                              (uint32_t)len[4 * i + 3] << 24);
        uint64_t p = rd_u64(ptr + 8 * i);
        if (l < 0) return td_err_set(e, "sequence %" PRIu64 " has a negative length %d", i, (int)l);
        if (p != tokens * (uint64_t)width)
            return td_err_set(e, "sequence %" PRIu64 " points at byte %" PRIu64 " of the .bin, but the lengths before "
                                 "it put it at byte %" PRIu64 " (the index disagrees with its .bin)",
                              i, p, tokens * (uint64_t)width);
        tokens += (uint64_t)l; /* at most S * 2^31 < 2^63: no overflow */
    }
    if (tokens * (uint64_t)width != bin_size)
        return td_err_set(e, "the index's %" PRIu64 " sequences hold %" PRIu64 " %s tokens (%" PRIu64
                             " bytes), but the .bin has %" PRIu64 " bytes (the index disagrees with its .bin)",
                          S, tokens, name, tokens * (uint64_t)width, bin_size);
    if (D == 0) return td_err_set(e, "the document index is empty; it starts with 0");
    uint64_t prev = 0;
    for (uint64_t k = 0; k < D; k++) {
        uint64_t d = rd_u64(doc + 8 * k);
        if ((k == 0 && d != 0) || d < prev || d > S)
            return td_err_set(e, "document-index entry %" PRIu64 " is %" PRId64 "; the entries start at 0 and rise "
                                 "to at most the %" PRIu64 " sequences",
                              k, (int64_t)d, S);
        prev = d;
    }
    *x = (td_mmidx){dtype, width, S, D - 1, tokens};
    return 0;
}

size_t td_mmidx_size(uint64_t nseq) { return TD_MMIDX_HEADER_BYTES + 12 * nseq + 8 * (nseq + 1); }

int td_mmidx_format(const uint64_t *lengths, uint64_t nseq, int width, unsigned char *out, td_err *e) {
    memcpy(out, TD_MMIDX_MAGIC, TD_MMIDX_MAGIC_BYTES);
    wr_u64(out + 9, TD_MMIDX_VERSION);
    out[17] = (unsigned char)(width == 2 ? TD_MMIDX_DTYPE_UINT16 : TD_MMIDX_DTYPE_INT32);
    wr_u64(out + 18, nseq);
    wr_u64(out + 26, nseq + 1); /* one document per sequence, plus the leading 0 */
    unsigned char *len = out + TD_MMIDX_HEADER_BYTES, *ptr = len + 4 * nseq, *doc = ptr + 8 * nseq;
    uint64_t at = 0;
    for (uint64_t i = 0; i < nseq; i++) {
        if (lengths[i] > INT32_MAX)
            return td_err_set(e, "sequence %" PRIu64 " has %" PRIu64 " tokens; a Megatron index holds at most %d",
                              i, lengths[i], INT32_MAX);
        for (int b = 0; b < 4; b++) len[4 * i + b] = (unsigned char)(lengths[i] >> (8 * b));
        wr_u64(ptr + 8 * i, at);
        at += lengths[i] * (uint64_t)width;
    }
    for (uint64_t k = 0; k <= nseq; k++) wr_u64(doc + 8 * k, k);
    return 0;
}
