/* Internals of the byte-level BPE tokenizers (src/data/bpe*.c): the
 * character classes of GPT-2's pre-tokenization pattern and the pattern
 * itself, written by hand; a tokenizer.json's regex pre-tokenizer (PCRE2);
 * the tables a tokenizer.json builds. */
#ifndef TRIDENT_BPE_INTERNAL_H
#define TRIDENT_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

enum { TD_UC_OTHER = 0, TD_UC_LETTER = 1, TD_UC_NUMBER = 2, TD_UC_SPACE = 3 };

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint32_t cls;    /* TD_UC_* */
} td_uc_range;

/* bpe_unicode.c (generated from the reference's JavaScript engine) */
extern const char td_bpe_unicode_version[];
extern const int td_bpe_uc_nranges;
extern const td_uc_range td_bpe_uc_ranges[];

/* The class of a code point: \p{L}, \p{N}, \s or none (as JavaScript's
 * RegExp with the u flag has them). */
int td_bpe_uc_class(uint32_t cp);

/* The end of the match of GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * that starts at s[i] (i < n), matching as JavaScript does (leftmost
 * alternative first, greedy, with backtracking where it changes the result).
 * The text is UTF-8; bytes that are not (never in checked text) count as
 * one "other" character each, so any input is safe to scan. */
size_t td_bpe_pretok_next(const unsigned char *s, size_t n, size_t i);

struct td_bpe;
/* For tests: the rank of the token with bytes p[0..n) (-1: none), and the
 * merge of one piece by the array scan (heap == 0, n <= 256) or the heap. */
long td_bpe_rank_of(const struct td_bpe *b, const unsigned char *p, size_t n);
size_t td_bpe_merge_with(const struct td_bpe *b, const unsigned char *p, size_t n, int *out,
                         int heap);

/* ---- regex pre-tokenizers (bpe_regex.c) -------------------------------- */

/* Stages of regexes, each applied to every piece the stage before cut, as a
 * Hugging Face Split pre-tokenizer with behavior "Isolated" splits: each
 * match is a piece, and so is each gap between matches (empty ones are
 * dropped). Compiled by PCRE2 with UTF and UCP (\p{L}, \s, \w by Unicode),
 * JIT where the platform has it. Read-only once built: threads share it,
 * each with its own scratch. */
typedef struct td_bpe_regex td_bpe_regex;
typedef struct td_bpe_regex_scratch td_bpe_regex_scratch;
#define TD_BPE_REGEX_STAGES 8

td_bpe_regex *td_bpe_regex_new(void); /* no stages: one piece, the whole text; NULL: out of memory */
/* Adds a stage: pattern[0..len) as a regex, or as a literal string when
 * `literal`. -1 with e (PCRE2's message and offset; too many stages). */
int td_bpe_regex_add(td_bpe_regex *r, const char *pattern, size_t len, int literal, td_err *e);
int td_bpe_regex_stages(const td_bpe_regex *r);
void td_bpe_regex_free(td_bpe_regex *r);
td_bpe_regex_scratch *td_bpe_regex_scratch_new(const td_bpe_regex *r); /* dies when out of memory */
void td_bpe_regex_scratch_free(td_bpe_regex_scratch *sc);
/* Calls piece(ctx, start, end) for each piece of s[0..n), in order; s must
 * be valid UTF-8 (it is not checked again). A matching failure (PCRE2's
 * backtracking or JIT stack limits on a pathological text) is one error
 * line and exit 2. */
void td_bpe_regex_split(const td_bpe_regex *r, td_bpe_regex_scratch *sc, const unsigned char *s,
                        size_t n, void (*piece)(void *ctx, size_t start, size_t end), void *ctx);

/* ---- tables from a tokenizer.json (bpe_hfjson.c) ----------------------- */

typedef struct {
    uint32_t left, right, joined; /* tokens left and right merge into joined */
} td_bpe_merge;

/* What td_bpe_from_tables takes: ownership of data, offset, hashed and
 * regex (freed on failure too); merges stays the caller's. */
typedef struct {
    unsigned char *data;   /* the tokens' bytes */
    uint32_t *offset;      /* [n_tokens + 1]: token id is data[offset[id] .. offset[id + 1]) (empty: no token) */
    uint32_t n_tokens;     /* ids 0 .. n_tokens-1 */
    unsigned char *hashed; /* [n_tokens]: 1 for the tokens a whole piece may be (the model's vocabulary) */
    uint32_t byte_id[256]; /* the token of each single byte */
    const td_bpe_merge *merges; /* priority = index (lower merges first) */
    size_t n_merges;
    int whole_piece;       /* a piece that is a token as a whole is that token (ignore_merges) */
    int eot, bos;          /* <|endoftext|>, the token a document starts with (-1: none) */
    td_bpe_regex *regex;   /* the pre-tokenizer */
} td_bpe_tables;

/* GPT-2's byte-to-unicode alphabet: the code point that stands for byte b
 * (bpe_hf.c). */
unsigned td_bpe_byte_char(unsigned char b);

/* -1 with e when out of memory or two merges name the same pair. */
int td_bpe_from_tables(td_bpe_tables *t, struct td_bpe **out, td_err *e);

#endif
