/* bpe: byte-level BPE tokenizers (GPT-2's, tiktoken's cl100k_base and
 * o200k_base), exact to the reference tokenizer (js-tiktoken 1.0.21,
 * getEncoding("gpt2" | "cl100k_base" | "o200k_base"), ordinary encoding: the
 * literal text of a special token such as "<|endoftext|>" is text).
 * Pre-tokenization by the tokenizer's pattern (src/data/bpe_pretok.c,
 * bpe_pretok_tiktoken.c), then tiktoken's merge: within each piece, the
 * adjacent pair whose joined bytes have the lowest rank merges first
 * (leftmost on ties) until no joined pair is a token; a piece that is a
 * token as a whole is that token. The ranks come from a trident BPE file
 * (include/trident/formats_bpe.h; data/gpt2.bpe, cl100k.bpe, o200k.bpe).
 * A Hugging Face tokenizer.json (td_bpe_load_hf; src/data/bpe_hfjson.c)
 * drives the same engine with its own pairs (its merges list: priority =
 * position, result = the joined token's id) and its pre-tokenizer regexes
 * run by PCRE2 (src/data/bpe_regex.c); its encoding is ordinary too. */
#ifndef TRIDENT_BPE_H
#define TRIDENT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* Loads a Hugging Face tokenizer.json of the byte-level BPE kind (model
 * BPE, pre-tokenizer ByteLevel or a Sequence of Split / Digits ending in
 * ByteLevel, no normalizer, decoder ByteLevel); 0, or -1 with e naming the
 * field that is wrong or unsupported (the caller adds the path). Ids are
 * the file's; td_bpe_vocab is the largest id + 1 (model.vocab and
 * added_tokens). td_bpe_ranks counts the same ids, some of which may hold
 * no token (td_bpe_token: NULL). *xxh3 (unless NULL): the XXH3-64 of the
 * file's bytes, so a checkpoint can tell the same file from an edited one. */
int td_bpe_load_hf(const char *path, td_bpe **out, uint64_t *xxh3, td_err *e);
/* A whole file, malloc'd with a NUL after its *n bytes (a tokenizer file,
 * or the copy export makes of one); NULL with e (naming nothing: the caller
 * adds the path). */
unsigned char *td_bpe_read_file(const char *path, size_t *n, td_err *e);
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
/* The token a document starts with (-1: none): GPT-2's <|endoftext|>; a
 * tokenizer.json's TemplateProcessing special token (Llama 3's
 * <|begin_of_text|>), else its <|endoftext|>. */
int td_bpe_bos(const td_bpe *b);
int td_bpe_ranks(const td_bpe *b);  /* mergeable tokens: ids 0 .. ranks-1 (GPT-2: 50256) */
/* The bytes of token id (a rank or a special token); NULL for other ids. */
const unsigned char *td_bpe_token(const td_bpe *b, int id, int *len);

/* Whether b pre-tokenizes by regexes (a tokenizer.json), for which
 * td_bpe_split_point is not safe. */
int td_bpe_has_regex(const td_bpe *b);

td_bpe_enc *td_bpe_enc_new(const td_bpe *b);
const td_bpe *td_bpe_enc_tables(const td_bpe_enc *enc); /* the tables enc encodes with */
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
 * parts (never for GPT-2's), and for a tokenizer.json's tables. */
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
/* Hugging Face's tokenizer.json for tiktoken's cl100k_base or o200k_base
 * (an error for other tables): model BPE with vocab (the ranks, in that
 * alphabet), merges (merges.txt's pairs, "left right") and ignore_merges
 * true (tiktoken's whole-piece rule); the special tokens as added_tokens;
 * pre_tokenizer a Split with tiktoken's pattern as js-tiktoken writes it,
 * then ByteLevel without its regex. Same returns as above. */
char *td_bpe_hf_tokenizer_json(const td_bpe *b, size_t *len, int *merges, td_err *e);

#ifdef __cplusplus
}
#endif

#endif
