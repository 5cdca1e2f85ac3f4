/* bpe: GPT-2's byte-level BPE tokenizer, exact to the reference tokenizer
 * (js-tiktoken 1.0.21, getEncoding("gpt2"), ordinary encoding: a literal
 * "<|endoftext|>" in the text is text). Pre-tokenization by GPT-2's pattern
 * (src/data/bpe_pretok.c), then tiktoken's merge: within each piece, the
 * adjacent pair whose joined bytes have the lowest rank merges first
 * (leftmost on ties) until no joined pair is a token; a piece that is a
 * token as a whole is that token. The ranks come from a trident BPE file
 * (include/trident/formats_bpe.h; data/gpt2.bpe). */
#ifndef TRIDENT_BPE_H
#define TRIDENT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#define TD_GPT2_VOCAB 50257 /* 50,256 merged tokens and <|endoftext|> */
#define TD_GPT2_EOT 50256

typedef struct td_bpe td_bpe;         /* the tables: read-only once loaded, shared by threads */
typedef struct td_bpe_enc td_bpe_enc; /* one thread's encoder (its cache of pieces) */

/* Loads and checks a BPE rank file; 0, or -1 with e (naming nothing: the
 * caller adds the path). */
int td_bpe_load(const char *path, td_bpe **out, td_err *e);
void td_bpe_free(td_bpe *b);
/* GPT-2's tables, loaded once per process from td_bpe_gpt2_path(); any
 * failure (missing, corrupt, not GPT-2's) is one error line and exit 2. */
const td_bpe *td_bpe_gpt2(void);
/* $TRIDENT_GPT2_BPE when set, else data/gpt2.bpe of the source tree the
 * binary was built from. */
const char *td_bpe_gpt2_path(void);

int td_bpe_vocab(const td_bpe *b); /* ranks + special tokens (GPT-2: 50257) */
int td_bpe_eot(const td_bpe *b);   /* the id of <|endoftext|>, or -1 */
/* The bytes of token id (a rank or a special token); NULL for other ids. */
const unsigned char *td_bpe_token(const td_bpe *b, int id, int *len);

td_bpe_enc *td_bpe_enc_new(const td_bpe *b);
void td_bpe_enc_free(td_bpe_enc *enc);
/* Ordinary encoding of s[0..n) (UTF-8: check it first, see td_utf8_check;
 * other bytes are encoded, never read past n). ids needs room for n (a token
 * holds at least one byte). Returns the token count. */
size_t td_bpe_encode(td_bpe_enc *enc, const unsigned char *s, size_t n, int *ids);
/* The same tokens, with `threads` encoders (encs[0..threads)) over chunks
 * split where pre-tokenization splits anyway (td_bpe_split_point), so the
 * result equals td_bpe_encode's for any thread count. */
size_t td_bpe_encode_threads(td_bpe_enc **encs, int threads, const unsigned char *s, size_t n,
                             int *ids);

/* A split point at or after `from` (<= n) where every match of the pattern
 * ends, so text before and after it can be pre-tokenized apart with the same
 * pieces: s[p-1] is a printable ASCII character and s[p] ASCII whitespace
 * (the match holding s[p-1] cannot take whitespace, and none looks back).
 * Returns n when there is none. */
size_t td_bpe_split_point(const unsigned char *s, size_t n, size_t from);

#endif
