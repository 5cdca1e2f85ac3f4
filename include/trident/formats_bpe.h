/* formats (bpe): trident's file of byte-level BPE ranks (data/gpt2.bpe,
 * cl100k.bpe and o200k.bpe hold GPT-2's, cl100k_base's and o200k_base's,
 * converted once from the npm package js-tiktoken; data/README.md).
 * Like all of src/formats: no MPI, no exit, no printing; errors come back as
 * td_err. All integers little-endian:
 *
 *   0   char[8]  "TRIDBPE1" (magic and version)
 *   8   u32      n_ranks: mergeable tokens, ids 0 .. n_ranks-1 in rank order
 *   12  u32      n_special: special tokens (GPT-2: 1, <|endoftext|>)
 *   16  u32      data_bytes: the sum of the token lengths
 *   20  u32      0
 *   24  u64      XXH3-64 (seed 0; formats_hash.h's td_xxh3) of every byte
 *                from offset 32 to the end
 *   32  u8[n_ranks]      token lengths, 1..255
 *       u8[data_bytes]   the tokens' bytes, in rank order
 *       n_special x {u32 id, u8 len, u8[len] text}
 *
 * A token's rank is its id and its merge priority (lower merges first), as
 * in tiktoken. Checked: the magic, sizes that add up to the file's length
 * exactly, the checksum, every one of the 256 bytes present as a one-byte
 * token (so any text encodes), no token twice, special ids from n_ranks up,
 * distinct, and special texts that are not empty. */
#ifndef TRIDENT_FORMATS_BPE_H
#define TRIDENT_FORMATS_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_BPE_MAGIC "TRIDBPE1"
#define TD_BPE_HEADER_BYTES 32
#define TD_BPE_MAX_RANKS 16777216 /* 2^24, trident's vocabulary limit */
#define TD_BPE_MAX_SPECIAL 64

typedef struct {
    uint32_t id;
    uint32_t len;
    const unsigned char *text; /* points into the parsed bytes */
} td_bpe_special;

typedef struct {
    uint32_t n_ranks;
    uint32_t n_special;
    const unsigned char *data; /* the tokens' bytes (points into the parsed bytes) */
    uint32_t *offset;          /* [n_ranks + 1]: token r is data[offset[r] .. offset[r + 1]) */
    uint32_t byte_rank[256];   /* the rank of each one-byte token */
    td_bpe_special special[TD_BPE_MAX_SPECIAL];
} td_bpe_file;

/* Parses the whole file p[0..n). On success f points into p (keep it) and
 * f->offset is malloc'd: release with td_bpe_file_free. */
int td_bpe_file_parse(const unsigned char *p, size_t n, td_bpe_file *f, td_err *e);
void td_bpe_file_free(td_bpe_file *f);

#ifdef __cplusplus
}
#endif

#endif
