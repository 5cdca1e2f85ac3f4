/* formats (data): the parsers of the corpus files a user hands to --data —
 * token files (llm.c's headed .bin of uint16 or uint32 tokens and nanoGPT's
 * raw uint16 .bin), the `synthetic:V` spec, and strict UTF-8 text for the
 * char tokenizer. Like all
 * of src/formats: no MPI, no exit, no printing; errors come back as td_err
 * and src/data turns them into "trident: error: --data PATH: <msg>". */
#ifndef TRIDENT_FORMATS_DATA_H
#define TRIDENT_FORMATS_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- token files ---------------------------------------------------------
 * llm.c: 256 little-endian int32 (magic, version, token count, 253
 * reserved), then exactly `count` tokens; nothing may follow. Two kinds:
 * magic 20240520 version 1 holds uint16 tokens (GPT-2), magic 20240801
 * version 7 holds uint32 tokens (llm.c's llama3 branch, dev/data/
 * data_common.py HEADERS_INFO["llama-3"], for vocabularies above 65536).
 * nanoGPT: the whole file is uint16 tokens (even size).
 *
 * Which one a file is: its first int32 decides. llm.c's magics are dates
 * (20240326 model, 20240327 debug state, 20240328 tokenizer, 20240520 and
 * 20240801 tokens), so a first int32 in 20240000..20249999 is read as an
 * llm.c header and must then be one of the token-file magics with its
 * version; any other first int32 means a raw file. As uint16 pairs that
 * window is the tokens (54912..64911, 308): a raw file can only start so
 * with a vocabulary above 54912 (GPT-2's 50257 cannot), and such a file is
 * refused as ambiguous rather than trained on a guess. Raw files starting
 * with small ids (e.g. 54911 308, or 15 309) are always raw. Megatron-LM's
 * indexed datasets (a .bin beside its .idx) are formats_indexed.h's. */
#define TD_LLMC_TOKENS_MAGIC 20240520
#define TD_LLMC_TOKENS_VERSION 1
#define TD_LLMC_TOKENS32_MAGIC 20240801 /* uint32 tokens */
#define TD_LLMC_TOKENS32_VERSION 7
#define TD_LLMC_HEADER_BYTES 1024
#define TD_LLMC_MAGIC_LO 20240000 /* the window of llm.c-looking magics */
#define TD_LLMC_MAGIC_HI 20249999
/* The most a probe looks at: callers may pass only the file's first bytes. */
#define TD_TOKFILE_PROBE_BYTES TD_LLMC_HEADER_BYTES
/* The largest vocabulary whose ids fit uint16 tokens. */
#define TD_UINT16_VOCAB_MAX 65536

typedef enum { TD_TOKFILE_RAW = 0, TD_TOKFILE_LLMC = 1, TD_TOKFILE_LLMC32 = 2 } td_tokfile_kind;

typedef struct {
    td_tokfile_kind kind;
    uint64_t offset; /* byte offset of the first token */
    uint64_t count;  /* tokens from offset to the end of the file */
    int width;       /* bytes per token: 2 (uint16) or 4 (uint32, LLMC32) */
} td_tokfile;

/* Decides the format of a token file of file_size bytes from its first
 * head_len = min(file_size, TD_TOKFILE_PROBE_BYTES) bytes and checks the
 * sizes: an llm.c file must be exactly 1024 + width * count bytes, a raw one
 * even and non-empty. On success offset + width * count == file_size. */
int td_tokfile_probe(const unsigned char *head, size_t head_len, uint64_t file_size, td_tokfile *tf,
                     td_err *e);
/* Little-endian tokens of `width` bytes (2: uint16; 4: int32 or uint32) to
 * ints; *max_id = the largest (-1 if none). Returns the index of the first
 * 4-byte token that is not an id (negative as int32, above 2^31 - 1 as
 * uint32: both read negative), count when every one is. */
size_t td_tokfile_decode(const unsigned char *tokens, size_t count, int width, int *ids, int *max_id);
/* Every id must be in [0, vocab): names the first that is not and its index. */
int td_tokfile_check_ids(const int *ids, size_t count, int vocab, td_err *e);
/* A file of `width`-byte tokens (its format named by `what`) for a model of
 * `vocab` ids: uint16 cannot hold the ids of a vocabulary above 65536 (its
 * ids were cut by whatever wrote it), so that is an error saying so. */
int td_tokfile_check_width(int width, int vocab, const char *what, td_err *e);

/* ---- synthetic:V ---------------------------------------------------------- */
/* The largest vocabulary trident accepts anywhere (a sanity limit: beyond it
 * a token id no longer fits the embedding table of any sensible model). */
#define TD_VOCAB_MAX 16777216 /* 2^24, a plain literal: flag ranges quote it */
/* spec is the whole --data value, "synthetic:V" with V a plain decimal
 * integer in 2..TD_VOCAB_MAX (no sign, spaces or suffix). */
int td_synthetic_parse(const char *spec, int *V, td_err *e);

/* ---- strict UTF-8 --------------------------------------------------------
 * Unicode's Table 3-7 well-formed sequences only: no overlong forms (C0 80,
 * E0 80 80, F0 80 80 80), no surrogates (ED A0 80..ED BF BF), nothing above
 * U+10FFFF (F4 90.., F5..FF), no truncated sequences or stray continuation
 * bytes. Errors give the byte offset of the first byte of the bad sequence. */

/* Decodes the sequence at s (n > 0 bytes left): its length (1..4) and *cp,
 * or 0 when malformed, with *why (if not NULL) a short reason. */
int td_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, const char **why);
/* Writes cp as UTF-8 into out; its length, or 0 if cp is not a Unicode
 * scalar value (a surrogate or above U+10FFFF). */
int td_utf8_put(uint32_t cp, unsigned char out[4]);
/* 0 if s is strict UTF-8; else -1, *bad (if not NULL) = the offset. */
int td_utf8_check(const unsigned char *s, size_t n, size_t *bad, td_err *e);
/* The char vocabulary of s: its distinct code points in ascending order, in a
 * malloc'd array the caller frees (NULL when *V is 0). */
int td_utf8_vocab(const unsigned char *s, size_t n, uint32_t **chars, size_t *V, td_err *e);
/* Encodes s with the sorted vocabulary chars[V] into ids (room for n) and
 * sets *count; a character outside the vocabulary is an error naming it and
 * its byte offset. */
int td_utf8_encode_ids(const uint32_t *chars, size_t V, const unsigned char *s, size_t n, int *ids,
                       size_t *count, td_err *e);

#ifdef __cplusplus
}
#endif

#endif
