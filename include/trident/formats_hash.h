/* formats_hash: XXH3-64 checksums (Debian's libxxhash) of checkpoint data
 * blocks, shard headers, manifests, token shards and the GPT-2 rank file.
 * Like the rest of src/formats: no I/O, no exits, fuzzable.
 *
 * A tensor piece of n bytes is checked in blocks of TD_HASH_BLOCK bytes
 * (the last one shorter; an empty piece has none), so that a reader that
 * needs only part of a piece reads and verifies only the blocks holding it.
 * Checksums are written as 16 lowercase hex digits; a piece's list joins
 * its blocks' with commas. */
#ifndef TRIDENT_FORMATS_HASH_H
#define TRIDENT_FORMATS_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_HASH_BLOCK ((size_t)4 << 20)
#define TD_HASH_HEX 16 /* digits of one checksum */

uint64_t td_xxh3(const void *p, size_t n);

/* Streaming XXH3-64 over pieces given in order (equal to td_xxh3 of their
 * concatenation). */
typedef struct td_hash_stream td_hash_stream;
td_hash_stream *td_hash_stream_new(void); /* NULL: out of memory */
void td_hash_stream_add(td_hash_stream *s, const void *p, size_t n);
uint64_t td_hash_stream_value(const td_hash_stream *s);
uint64_t td_hash_stream_bytes(const td_hash_stream *s); /* added so far */
void td_hash_stream_free(td_hash_stream *s);

/* Blocks of a piece of n bytes: ceil(n / TD_HASH_BLOCK). */
size_t td_hash_n_blocks(uint64_t n);
/* out[0 .. td_hash_n_blocks(n)) = XXH3 of each block of p[0..n). */
void td_hash_blocks(const void *p, size_t n, uint64_t *out);

/* 16 hex digits and a NUL into out. */
void td_hash_hex(uint64_t h, char out[TD_HASH_HEX + 1]);
/* Exactly 16 hex digits (either case) at s[0..16), nothing checked after. */
int td_hash_parse_hex(const char *s, uint64_t *h);
/* "h0,h1,...": malloc'd text of n checksums (NULL: out of memory; n = 0
 * gives ""). */
char *td_hash_list_format(const uint64_t *h, size_t n);
/* Parses a list of exactly `want` checksums; -1 with e otherwise. */
int td_hash_list_parse(const char *s, size_t want, uint64_t *out, td_err *e);

#ifdef __cplusplus
}
#endif

#endif
