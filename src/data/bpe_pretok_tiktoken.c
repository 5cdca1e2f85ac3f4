/* cl100k_base's and o200k_base's pre-tokenization patterns, by hand, as
 * js-tiktoken 1.0.21 writes them (it spells tiktoken's (?i:'s|...) out case
 * by case, "C" below) and runs them through JavaScript's RegExp with the u
 * flag:
 *   C = 's|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D
 *   cl100k: (C)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *           \s*[\r\n]+|\s+(?!\S)|\s+
 *   o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(C)?|
 *           [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(C)?|
 *           \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * As for GPT-2's (bpe_pretok.c), the first alternative that matches wins;
 * the comments say where backtracking decides the result. */
#include "bpe_internal.h"

/* o200k's "upper" run [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and "lower" run
 * [\p{Ll}\p{Lm}\p{Lo}\p{M}]: modifier and other letters and marks are both */
#define UCS_UPPER                                                                                  \
    (TD_UC_BIT(TD_UC_LU) | TD_UC_BIT(TD_UC_LT) | TD_UC_BIT(TD_UC_LM) | TD_UC_BIT(TD_UC_LO) |       \
     TD_UC_BIT(TD_UC_MARK))
#define UCS_LOWER                                                                                  \
    (TD_UC_BIT(TD_UC_LL) | TD_UC_BIT(TD_UC_LM) | TD_UC_BIT(TD_UC_LO) | TD_UC_BIT(TD_UC_MARK))

/* The length of C at s[i] ('s, 'LL, 'rE, ...), or 0. ASCII only: x | 0x20
 * is 's' exactly for 'S' and 's'. */
static size_t contraction(const unsigned char *s, size_t n, size_t i) {
    if (s[i] != '\'' || i + 1 >= n) return 0;
    unsigned a = s[i + 1] | 0x20u;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n) return 0;
    unsigned b = s[i + 2] | 0x20u;
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

/* [^\r\n\p{L}\p{N}]: the optional one-character prefix of a word */
static int word_prefix(const unsigned char *s, size_t i, int c) {
    return s[i] != '\r' && s[i] != '\n' && !(TD_UC_BIT(c) & (TD_UCS_LETTER | TD_UCS_NUMBER));
}

/* \p{N}{1,3} at i (a number) */
static size_t digits(const unsigned char *s, size_t n, size_t i, int len) {
    size_t j = i + (size_t)len;
    for (int k = 1; k < 3 && j < n; k++) {
        int l, c = td_bpe_char_at(s, n, j, &l);
        if (c != TD_UC_NUMBER) break;
        j += (size_t)l;
    }
    return j;
}

/* ' ?[^\s\p{L}\p{N}]+' then the tail [\r\n]* (cl100k) or [\r\n/]* (o200k)
 * at i, whose class is c; 0 when it does not match */
static size_t punctuation(const unsigned char *s, size_t n, size_t i, int c, int len, int slash) {
    size_t j = i;
    if (c == TD_UC_SPACE) { /* only U+0020, and only before punctuation */
        if (s[i] != ' ' || i + 1 >= n) return 0;
        c = td_bpe_char_at(s, n, i + 1, &len);
        j = i + 1;
    }
    if (!(TD_UC_BIT(c) & TD_UCS_PUNCT)) return 0;
    j = td_bpe_run_of(s, n, j + (size_t)len, TD_UCS_PUNCT);
    while (j < n && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/'))) j++;
    return j;
}

/* '\s*[\r\n]+', then '\s+(?!\S)|\s+', at i (whitespace). \s* first takes
 * the whole run and gives back characters until [\r\n]+ can match, so the
 * match ends after the run's last line break; a run without one goes on to
 * the other two alternatives. */
static size_t spaces(const unsigned char *s, size_t n, size_t i) {
    size_t end = i, after_break = 0;
    while (end < n) {
        int l, k = td_bpe_char_at(s, n, end, &l);
        if (k != TD_UC_SPACE) break;
        if (s[end] == '\r' || s[end] == '\n') after_break = end + 1;
        end += (size_t)l;
    }
    return after_break ? after_break : td_bpe_pretok_spaces(s, n, i);
}

size_t td_bpe_pretok_cl100k(const unsigned char *s, size_t n, size_t i) {
    size_t k = contraction(s, n, i);
    if (k) return i + k;
    int len, c = td_bpe_char_at(s, n, i, &len);
    /* [^\r\n\p{L}\p{N}]?\p{L}+: the prefix is taken when letters follow it */
    if (TD_UC_BIT(c) & TD_UCS_LETTER) return td_bpe_run_of(s, n, i + (size_t)len, TD_UCS_LETTER);
    if (word_prefix(s, i, c) && i + (size_t)len < n) {
        int l2, c2 = td_bpe_char_at(s, n, i + (size_t)len, &l2);
        if (TD_UC_BIT(c2) & TD_UCS_LETTER)
            return td_bpe_run_of(s, n, i + (size_t)len + (size_t)l2, TD_UCS_LETTER);
    }
    if (c == TD_UC_NUMBER) return digits(s, n, i, len);
    size_t j = punctuation(s, n, i, c, len, 0);
    return j ? j : spaces(s, n, i);
}

/* o200k's first word alternative without its prefix, U*W+ at j (U: upper
 * run, W: lower run): the end, or 0 when it does not match. U* takes the
 * whole upper run; if a lower-case letter (the only class in W and not in
 * U) follows, W+ takes the lower run from there. Otherwise U* gives back
 * characters until W+ can start: at the run's last character that is also
 * in W (Lm, Lo, M), and W+ ends after it, since what followed it was not. */
static size_t upper_lower(const unsigned char *s, size_t n, size_t j) {
    size_t u = j, after_w = 0;
    while (u < n) {
        int l, c = td_bpe_char_at(s, n, u, &l);
        if (!(TD_UC_BIT(c) & UCS_UPPER)) {
            if (c == TD_UC_LL) return td_bpe_run_of(s, n, u, UCS_LOWER);
            break;
        }
        u += (size_t)l;
        if (TD_UC_BIT(c) & UCS_LOWER) after_w = u;
    }
    return after_w;
}

size_t td_bpe_pretok_o200k(const unsigned char *s, size_t n, size_t i) {
    int len, c = td_bpe_char_at(s, n, i, &len);
    /* the two word alternatives, each first with the prefix (when s[i] can
     * be one), then without it */
    int pre = word_prefix(s, i, c) && i + (size_t)len < n;
    size_t end = pre ? upper_lower(s, n, i + (size_t)len) : 0;
    if (!end) end = upper_lower(s, n, i);
    if (!end) {
        /* U+W*: both U*W+ failed, so no lower-case letter follows the upper
         * run and W* is empty; the upper run must not be */
        if (pre) {
            size_t u = td_bpe_run_of(s, n, i + (size_t)len, UCS_UPPER);
            if (u > i + (size_t)len) end = u;
        }
        if (!end) {
            size_t u = td_bpe_run_of(s, n, i, UCS_UPPER);
            if (u > i) end = u;
        }
    }
    if (end) return end < n ? end + contraction(s, n, end) : end;
    if (c == TD_UC_NUMBER) return digits(s, n, i, len);
    size_t j = punctuation(s, n, i, c, len, 1);
    return j ? j : spaces(s, n, i);
}
