/* Internals of the GPT-2 tokenizer (src/data/bpe*.c): the character classes
 * of its pre-tokenization pattern and the pattern itself, written by hand. */
#ifndef TRIDENT_BPE_INTERNAL_H
#define TRIDENT_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
