/* GPT-2's pre-tokenization pattern, by hand, and the class lookup all the
 * patterns share. The reference (js-tiktoken) runs the pattern through
 * JavaScript's RegExp:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * At each position the alternatives are tried in order and the first that
 * matches wins (not the longest), which is what makes "don't" -> "don" "'t"
 * but "!!'s" -> "!!'" "s". The optional prefix is U+0020 only; \s is
 * JavaScript's (it includes U+FEFF and not U+0085), \p{L} and \p{N} are its
 * Unicode tables (bpe_unicode.c). */
#include <pthread.h>

#include "bpe_internal.h"
#include "trident/bpe.h"

/* Classes of the Basic Multilingual Plane, nearly all text, without a
 * search: filled from the ranges once per process. */
static unsigned char bmp[0x10000];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static void bmp_fill(void) {
    for (int r = 0; r < td_bpe_uc_nranges && td_bpe_uc_ranges[r].lo < 0x10000; r++)
        for (uint32_t c = td_bpe_uc_ranges[r].lo; c <= td_bpe_uc_ranges[r].hi && c < 0x10000; c++)
            bmp[c] = (unsigned char)td_bpe_uc_ranges[r].cls;
}

int td_bpe_uc_class(uint32_t cp) {
    if (cp < 0x10000) {
        pthread_once(&bmp_once, bmp_fill);
        return bmp[cp];
    }
    int lo = 0, hi = td_bpe_uc_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < td_bpe_uc_ranges[mid].lo)
            hi = mid - 1;
        else if (cp > td_bpe_uc_ranges[mid].hi)
            lo = mid + 1;
        else
            return (int)td_bpe_uc_ranges[mid].cls;
    }
    return TD_UC_OTHER;
}

/* The set a class belongs to in GPT-2's pattern: \p{L}, \p{N}, \s or the rest. */
static unsigned gpt2_set(int c) {
    unsigned bit = TD_UC_BIT(c);
    return bit & TD_UCS_LETTER ? TD_UCS_LETTER : bit & TD_UCS_PUNCT ? TD_UCS_PUNCT : bit;
}

size_t td_bpe_pretok_spaces(const unsigned char *s, size_t n, size_t i) {
    /* '\s+(?!\S)' takes the run, backing off one character when a non-space
     * follows, unless that would leave it empty; then '\s+' takes one */
    size_t end = i, last = i;
    while (end < n) {
        int l, k = td_bpe_char_at(s, n, end, &l);
        if (k != TD_UC_SPACE) break;
        last = end;
        end += (size_t)l;
    }
    if (end == n || last == i) return end;
    return last;
}

size_t td_bpe_pretok_gpt2(const unsigned char *s, size_t n, size_t i) {
    /* 's 't 're 've 'm 'll 'd: ASCII apostrophe, lower case only */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char b = s[i + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return i + 3;
        }
    }
    int len, c = td_bpe_char_at(s, n, i, &len);
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then
     * a run of one set; with the space, the set is the next character's */
    size_t j = i;
    if (s[i] == ' ' && i + 1 < n) {
        int len2, c2 = td_bpe_char_at(s, n, i + 1, &len2);
        if (c2 != TD_UC_SPACE) j = i + 1, c = c2, len = len2;
    }
    if (c != TD_UC_SPACE) return td_bpe_run_of(s, n, j + (size_t)len, gpt2_set(c));
    /* whitespace at i (a space not followed by a non-space lands here too) */
    return td_bpe_pretok_spaces(s, n, i);
}

size_t td_bpe_split_point(const td_bpe *b, const unsigned char *s, size_t n, size_t from) {
    /* cl100k's and o200k's punctuation takes the line breaks after it, so
     * only a space is a split point for them */
    int newline_ok = td_bpe_kind_of(b) == TD_BPE_GPT2;
    for (size_t p = from ? from : 1; p < n; p++)
        if ((s[p] == ' ' || (newline_ok && s[p] == '\n')) && s[p - 1] > 0x20 && s[p - 1] < 0x7F)
            return p;
    return n;
}
