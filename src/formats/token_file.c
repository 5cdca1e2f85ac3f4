/* Token files (llm.c headed .bin of uint16 or uint32 tokens, nanoGPT raw
 * uint16 .bin) and the synthetic:V spec. The rule that tells the file
 * formats apart is in include/trident/formats_data.h. */
#include <inttypes.h>
#include <string.h>

#include "trident/formats_data.h"

/* Little-endian int32 whatever the host's byte order. */
static int32_t rd_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* What the other llm.c files are, for a message that says what was given. */
static const char *llmc_other_kind(int32_t magic) {
    switch (magic) {
    case 20240326: return "model (weights)";
    case 20240327: return "debug state";
    case 20240328: return "tokenizer";
    default: return NULL;
    }
}

/* The llm.c token-file kinds: magic, the version it must have, token width. */
static const struct {
    int32_t magic, version;
    int width;
    td_tokfile_kind kind;
} llmc_kinds[] = {{TD_LLMC_TOKENS_MAGIC, TD_LLMC_TOKENS_VERSION, 2, TD_TOKFILE_LLMC},
                  {TD_LLMC_TOKENS32_MAGIC, TD_LLMC_TOKENS32_VERSION, 4, TD_TOKFILE_LLMC32}};

int td_tokfile_probe(const unsigned char *head, size_t head_len, uint64_t file_size, td_tokfile *tf,
                     td_err *e) {
    uint64_t want_head = file_size < TD_TOKFILE_PROBE_BYTES ? file_size : TD_TOKFILE_PROBE_BYTES;
    if (head_len != want_head)
        return td_err_set(e, "internal: probe given %zu bytes of a %" PRIu64 "-byte file (want %" PRIu64 ")",
                          head_len, file_size, want_head);
    if (file_size == 0) return td_err_set(e, "the file is empty; give a non-empty token file");
    int32_t magic = head_len >= 4 ? rd_i32(head) : 0;
    if (head_len >= 4 && magic >= TD_LLMC_MAGIC_LO && magic <= TD_LLMC_MAGIC_HI) {
        const char *other = llmc_other_kind(magic);
        if (other)
            return td_err_set(e, "magic %d is an llm.c %s file, not a token file; trident reads llm.c "
                                 "token files (magic %d version %d, magic %d version %d) and raw uint16 files",
                              (int)magic, other, TD_LLMC_TOKENS_MAGIC, TD_LLMC_TOKENS_VERSION,
                              TD_LLMC_TOKENS32_MAGIC, TD_LLMC_TOKENS32_VERSION);
        int k = magic == TD_LLMC_TOKENS_MAGIC ? 0 : magic == TD_LLMC_TOKENS32_MAGIC ? 1 : -1;
        if (k < 0)
            return td_err_set(e, "the header looks like llm.c's but its magic is %d; trident reads llm.c "
                                 "token files with magic %d (version %d) of uint16 tokens or %d (version %d) of uint32 "
                                 "tokens "
                                 "(a raw uint16 file starting with tokens %u %u is refused as ambiguous)",
                              (int)magic, TD_LLMC_TOKENS_MAGIC, TD_LLMC_TOKENS_VERSION, TD_LLMC_TOKENS32_MAGIC,
                              TD_LLMC_TOKENS32_VERSION, (unsigned)(head[0] | head[1] << 8),
                              (unsigned)(head[2] | head[3] << 8));
        if (file_size < TD_LLMC_HEADER_BYTES)
            return td_err_set(e, "the llm.c header (magic %d) is truncated: the file has %" PRIu64
                                 " bytes, the header alone needs %d",
                              (int)magic, file_size, TD_LLMC_HEADER_BYTES);
        int32_t version = rd_i32(head + 4), count = rd_i32(head + 8);
        int width = llmc_kinds[k].width;
        if (version != llmc_kinds[k].version)
            return td_err_set(e, "llm.c token file version %d is not supported; trident reads version %d "
                                 "(uint%d tokens) with magic %d",
                              (int)version, (int)llmc_kinds[k].version, 8 * width, (int)magic);
        if (count < 0)
            return td_err_set(e, "the llm.c header's token count %d is negative", (int)count);
        uint64_t body = file_size - TD_LLMC_HEADER_BYTES, want = (uint64_t)width * (uint64_t)count;
        if (body != want)
            return td_err_set(e, "the llm.c header says %d tokens (%" PRIu64 " bytes) but %" PRIu64
                                 " bytes follow it (%s)",
                              (int)count, want, body,
                              body > want ? "trailing bytes" : "the file is cut short");
        *tf = (td_tokfile){llmc_kinds[k].kind, TD_LLMC_HEADER_BYTES, (uint64_t)count, width};
        return 0;
    }
    if (file_size % 2 != 0)
        return td_err_set(e, "a raw uint16 token file must have an even size; this one has %" PRIu64 " bytes",
                          file_size);
    *tf = (td_tokfile){TD_TOKFILE_RAW, 0, file_size / 2, 2};
    return 0;
}

size_t td_tokfile_decode(const unsigned char *tokens, size_t count, int width, int *ids, int *max_id) {
    int mx = -1;
    size_t bad = count;
    if (width == 2) {
        for (size_t i = 0; i < count; i++) {
            int id = tokens[2 * i] | tokens[2 * i + 1] << 8;
            ids[i] = id;
            if (id > mx) mx = id;
        }
    } else {
        for (size_t i = 0; i < count; i++) {
            int32_t id = rd_i32(tokens + 4 * i);
            ids[i] = id;
            if (id > mx) mx = id;
            if (id < 0 && bad == count) bad = i;
        }
    }
    *max_id = mx;
    return bad;
}

int td_tokfile_check_width(int width, int vocab, const char *what, td_err *e) {
    if (width == 2 && vocab > TD_UINT16_VOCAB_MAX)
        return td_err_set(e, "%s holds uint16 tokens, which cannot hold the ids of a vocabulary of %d (above %d); "
                             "write the data as int32 (Megatron) or uint32 (llm.c) tokens",
                          what, vocab, TD_UINT16_VOCAB_MAX);
    return 0;
}

int td_tokfile_check_ids(const int *ids, size_t count, int vocab, td_err *e) {
    for (size_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return td_err_set(e, "token id %d at index %zu does not fit --vocab %d", ids[i], i, vocab);
    return 0;
}

/* At most 64 bytes of s with control bytes as '?': a message quoting a
 * user's value stays one printable line (fuzzing found a newline in a spec
 * splitting the error line in two). */
static const char *printable(const char *s, char out[65]) {
    size_t k = 0;
    for (; s[k] && k < 64; k++) out[k] = (unsigned char)s[k] < 0x20 || s[k] == 0x7F ? '?' : s[k];
    out[k] = 0;
    return out;
}

int td_synthetic_parse(const char *spec, int *V, td_err *e) {
    static const char prefix[] = "synthetic:";
    const size_t plen = sizeof prefix - 1;
    if (!spec || strncmp(spec, prefix, plen) != 0)
        return td_err_set(e, "not a synthetic spec; use synthetic:V with V an integer from 2 to %d",
                          TD_VOCAB_MAX);
    const char *s = spec + plen;
    char shown[65];
    if (!*s)
        return td_err_set(e, "no vocabulary size after 'synthetic:'; use synthetic:V with V an integer "
                             "from 2 to %d",
                          TD_VOCAB_MAX);
    uint64_t v = 0;
    int too_big = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return td_err_set(e, "'%s' is not a whole number; use synthetic:V with V an integer from 2 "
                                 "to %d",
                              printable(s, shown), TD_VOCAB_MAX);
        /* stop accumulating once past the limit so v never overflows */
        if (!too_big) v = v * 10 + (uint64_t)(*p - '0');
        if (v > TD_VOCAB_MAX) too_big = 1;
    }
    if (too_big)
        return td_err_set(e, "vocabulary %s is larger than %d; use synthetic:V with V from 2 to %d",
                          printable(s, shown), TD_VOCAB_MAX, TD_VOCAB_MAX);
    if (v < 2)
        return td_err_set(e, "vocabulary %s is too small; use synthetic:V with V from 2 to %d",
                          printable(s, shown), TD_VOCAB_MAX);
    *V = (int)v;
    return 0;
}
