/* Internals of the byte-level BPE tokenizers (src/data/bpe*.c): the
 * character classes of their pre-tokenization patterns and the patterns
 * themselves, written by hand (GPT-2's in bpe_pretok.c, cl100k_base's and
 * o200k_base's in bpe_pretok_tiktoken.c). */
#ifndef TRIDENT_BPE_INTERNAL_H
#define TRIDENT_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* A code point's class: one Unicode general category the patterns name
 * (the letter categories, marks M, numbers N) or JavaScript's \s; the
 * categories and \s are disjoint, the rest is "other". */
enum {
    TD_UC_OTHER = 0,
    TD_UC_LU = 1,   /* \p{Lu} upper case */
    TD_UC_LL = 2,   /* \p{Ll} lower case */
    TD_UC_LT = 3,   /* \p{Lt} title case (U+01C5 ǅ) */
    TD_UC_LM = 4,   /* \p{Lm} modifier letters */
    TD_UC_LO = 5,   /* \p{Lo} other letters (CJK, Arabic, ...) */
    TD_UC_MARK = 6, /* \p{M} = Mn, Mc, Me (combining marks) */
    TD_UC_NUMBER = 7,
    TD_UC_SPACE = 8
};

/* Sets of classes as bit masks, the character classes of the patterns. */
#define TD_UC_BIT(c) (1u << (c))
#define TD_UCS_LETTER                                                                              \
    (TD_UC_BIT(TD_UC_LU) | TD_UC_BIT(TD_UC_LL) | TD_UC_BIT(TD_UC_LT) | TD_UC_BIT(TD_UC_LM) |       \
     TD_UC_BIT(TD_UC_LO))
#define TD_UCS_NUMBER TD_UC_BIT(TD_UC_NUMBER)
#define TD_UCS_SPACE TD_UC_BIT(TD_UC_SPACE)
#define TD_UCS_PUNCT (TD_UC_BIT(TD_UC_OTHER) | TD_UC_BIT(TD_UC_MARK)) /* [^\s\p{L}\p{N}] */

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint32_t cls;    /* TD_UC_* */
} td_uc_range;

/* bpe_unicode.c (generated from the reference's JavaScript engine) */
extern const char td_bpe_unicode_version[];
extern const int td_bpe_uc_nranges;
extern const td_uc_range td_bpe_uc_ranges[];
extern const unsigned char td_bpe_uc_ascii[128]; /* the classes of U+0000..U+007F */

/* The class of a code point, as JavaScript's RegExp with the u flag has it. */
int td_bpe_uc_class(uint32_t cp);

/* The character at s[i] (i < n): its class, and its length in *len. A byte
 * that does not start a well-formed sequence is one "other" character, so
 * any input is safe to scan (checked text never has one). */
static inline int td_bpe_char_at(const unsigned char *s, size_t n, size_t i, int *len) {
    unsigned b = s[i];
    if (b < 0x80) return *len = 1, td_bpe_uc_ascii[b];
    int k = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (k == 0 || b > 0xF4 || i + (size_t)k > n) return *len = 1, TD_UC_OTHER;
    uint32_t cp = b & (0x7Fu >> k);
    for (int j = 1; j < k; j++) {
        unsigned c = s[i + (size_t)j];
        if ((c & 0xC0) != 0x80) return *len = 1, TD_UC_OTHER;
        cp = (cp << 6) | (c & 0x3F);
    }
    *len = k;
    return td_bpe_uc_class(cp);
}

/* The end of the run of characters whose classes are in `mask` (TD_UCS_*)
 * that starts at i (i itself when s[i] is not in it). */
static inline size_t td_bpe_run_of(const unsigned char *s, size_t n, size_t i, unsigned mask) {
    while (i < n) {
        int len, c = td_bpe_char_at(s, n, i, &len);
        if (!(TD_UC_BIT(c) & mask)) break;
        i += (size_t)len;
    }
    return i;
}

/* The end of the match of a pattern that starts at s[i] (i < n), matching as
 * JavaScript does (leftmost alternative first, greedy, with backtracking
 * where it changes the result). The text is UTF-8; other bytes are one
 * "other" character each.
 *   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   cl100k, o200k: in bpe_pretok_tiktoken.c */
size_t td_bpe_pretok_gpt2(const unsigned char *s, size_t n, size_t i);
size_t td_bpe_pretok_cl100k(const unsigned char *s, size_t n, size_t i);
size_t td_bpe_pretok_o200k(const unsigned char *s, size_t n, size_t i);
/* The whitespace alternatives, \s+(?!\S)|\s+, at s[i] (whitespace). */
size_t td_bpe_pretok_spaces(const unsigned char *s, size_t n, size_t i);

struct td_bpe;
/* For tests: the rank of the token with bytes p[0..n) (-1: none), and the
 * merge of one piece by the array scan (heap == 0, n <= 256) or the heap. */
long td_bpe_rank_of(const struct td_bpe *b, const unsigned char *p, size_t n);
size_t td_bpe_merge_with(const struct td_bpe *b, const unsigned char *p, size_t n, int *out,
                         int heap);

#endif
