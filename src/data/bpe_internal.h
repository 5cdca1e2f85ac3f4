/* Internals of the byte-level BPE tokenizers (src/data/bpe*.c): the
 * character classes of their pre-tokenization patterns and the patterns
 * themselves, written by hand (GPT-2's in bpe_pretok.c, cl100k_base's and
 * o200k_base's in bpe_pretok_tiktoken.c); a tokenizer.json's regex
 * pre-tokenizer (PCRE2); the tables a tokenizer.json builds. */
#ifndef TRIDENT_BPE_INTERNAL_H
#define TRIDENT_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

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
/* The work bound of each piece a stage matches in: PCRE2 match-limit steps,
 * STEPS_PER_BYTE a byte plus STEPS_BASE (bpe_regex.c says how they are
 * counted); past it td_bpe_regex_split refuses the text, naming the pattern.
 * Tests lower the steps a byte (_budget) and read the piece that used the
 * largest share of its budget (_usage: steps charged, the budget). */
#define TD_BPE_REGEX_STEPS_PER_BYTE 256
#define TD_BPE_REGEX_STEPS_BASE 4096
void td_bpe_regex_scratch_budget(td_bpe_regex_scratch *sc, uint64_t per_byte);
void td_bpe_regex_scratch_usage(const td_bpe_regex_scratch *sc, uint64_t *used, uint64_t *budget);

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
