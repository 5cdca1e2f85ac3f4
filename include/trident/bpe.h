/* bpe: byte-level BPE tokenizers (GPT-2's, tiktoken's cl100k_base and
 * o200k_base), exact to the reference tokenizer (js-tiktoken 1.0.21,
 * getEncoding("gpt2" | "cl100k_base" | "o200k_base"), ordinary encoding: the
 * literal text of a special token such as "<|endoftext|>" is text).
 * Pre-tokenization by the tokenizer's pattern (src/data/bpe_pretok.c,
 * bpe_pretok_tiktoken.c), then tiktoken's merge: within each piece, the
 * adjacent pair whose joined bytes have the lowest rank merges first
 * (leftmost on ties) until no joined pair is a token; a piece that is a
 * token as a whole is that token. The ranks come from a trident BPE file
 * (include/trident/formats_bpe.h; data/gpt2.bpe, cl100k.bpe, o200k.bpe). */
#ifndef TRIDENT_BPE_H
#define TRIDENT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#define TD_GPT2_VOCAB 50257 /* 50,256 merged tokens and <|endoftext|> */
#define TD_GPT2_EOT 50256

typedef struct td_bpe td_bpe;         /* the tables: read-only once loaded, shared by threads */
typedef struct td_bpe_enc td_bpe_enc; /* one thread's encoder (its cache of pieces) */

/* The tokenizers, by the name --tokenizer gives them: gpt2 (vocabulary
 * 50257), cl100k (100277, ids 100261..100275 unused), o200k (200019). */
typedef enum { TD_BPE_GPT2 = 0, TD_BPE_CL100K = 1, TD_BPE_O200K = 2 } td_bpe_kind;
#define TD_BPE_KINDS 3
const char *td_bpe_kind_name(td_bpe_kind k); /* "gpt2", "cl100k", "o200k" */
int td_bpe_kind_parse(const char *name);     /* a td_bpe_kind, or -1 for another name */
int td_bpe_kind_vocab(td_bpe_kind k);        /* 50257, 100277, 200019 (without loading) */

/* Loads and checks a BPE rank file, to pre-tokenize with kind's pattern; 0,
 * or -1 with e (naming nothing: the caller adds the path). */
int td_bpe_load(const char *path, td_bpe_kind kind, td_bpe **out, td_err *e);
void td_bpe_free(td_bpe *b);
/* A tokenizer's tables, loaded once per process from td_bpe_path(k) (not
 * thread-safe: the first call comes before any threads); any failure
 * (missing, corrupt, another tokenizer's ranks) is one error line naming
 * the file and the environment variable, and exit 2. */
const td_bpe *td_bpe_get(td_bpe_kind k);
const td_bpe *td_bpe_gpt2(void); /* td_bpe_get(TD_BPE_GPT2) */
/* $TRIDENT_GPT2_BPE, $TRIDENT_CL100K_BPE or $TRIDENT_O200K_BPE when set,
 * else data/gpt2.bpe, cl100k.bpe or o200k.bpe of the source tree the binary
 * was built from. */
const char *td_bpe_path(td_bpe_kind k);
td_bpe_kind td_bpe_kind_of(const td_bpe *b);

int td_bpe_vocab(const td_bpe *b); /* ranks + special tokens (GPT-2: 50257) */
int td_bpe_eot(const td_bpe *b);   /* the id of <|endoftext|>, or -1 */
int td_bpe_ranks(const td_bpe *b);  /* mergeable tokens: ids 0 .. ranks-1 (GPT-2: 50256) */
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

/* A split point at or after `from` (<= n) where every match of b's pattern
 * ends, so text before and after it can be pre-tokenized apart with the same
 * pieces: s[p-1] is a printable ASCII character and s[p] a space (gpt2: or
 * a newline); the match holding s[p-1] cannot take it, and none looks back.
 * Returns n when there is none. */
size_t td_bpe_split_point(const td_bpe *b, const unsigned char *s, size_t n, size_t from);

/* The two tokens (pair[0], pair[1]) that BPE joins into token `id`: the
 * token's own bytes merged with the ranks below id only, as tiktoken-to-
 * Hugging-Face converters recover merges.txt. 0, or -1 for a one-byte
 * token, a special token, or a token its lower ranks do not bring to two
 * parts (never for GPT-2's). */
int td_bpe_merge_pair(const td_bpe *b, int id, int pair[2]);

/* Hugging Face's GPT2Tokenizer files for b (src/data/bpe_hf.c), as text in
 * GPT-2's byte-to-unicode alphabet (bytes_to_unicode in OpenAI's
 * encoder.py: printable Latin-1 bytes stand for themselves, the other 68
 * for U+0100 up):
 *   vocab.json: {"token": id, ...} for every rank and special token, by id;
 *   merges.txt: "#version: 0.2", then "left right" for each merged token in
 *               rank order (the pair td_bpe_merge_pair recovers), '\n' after
 *               every line.
 * Each returns malloc'd text (*len bytes, NUL-terminated; *merges: the
 * merge lines), or NULL with e (out of memory, or a token with no pair).
 * No I/O. */
char *td_bpe_hf_vocab_json(const td_bpe *b, size_t *len, td_err *e);
char *td_bpe_hf_merges_txt(const td_bpe *b, size_t *len, int *merges, td_err *e);

#endif
