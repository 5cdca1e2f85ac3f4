/* GPT-2's pre-tokenization pattern, by hand. The reference (js-tiktoken)
 * runs it through JavaScript's RegExp:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * At each position the alternatives are tried in order and the first that
 * matches wins (not the longest), which is what makes "don't" -> "don" "'t"
 * but "!!'s" -> "!!'" "s". The optional prefix is U+0020 only; \s is
 * JavaScript's (it includes U+FEFF and not U+0085), \p{L} and \p{N} are its
 * Unicode tables (bpe_unicode.c). */
#include "bpe_internal.h"
#include "trident/bpe.h"

/* Classes of the first 256 code points, the common case, without a search. */
static unsigned char latin1[256];
static int latin1_ready;

static int search(uint32_t cp) {
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

int td_bpe_uc_class(uint32_t cp) {
    if (cp < 256) {
        /* filled on first use; racing threads write the same bytes */
        if (!__atomic_load_n(&latin1_ready, __ATOMIC_ACQUIRE)) {
            for (uint32_t c = 0; c < 256; c++) latin1[c] = (unsigned char)search(c);
            __atomic_store_n(&latin1_ready, 1, __ATOMIC_RELEASE);
        }
        return latin1[cp];
    }
    return search(cp);
}

/* The character at s[i] (i < n): its class, and its length in *len. A byte
 * that does not start a well-formed sequence is one "other" character. */
static inline int char_at(const unsigned char *s, size_t n, size_t i, int *len) {
    unsigned b = s[i];
    if (b < 0x80) return *len = 1, td_bpe_uc_class(b);
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

/* End of the run of characters of class `cls` (TD_UC_*) that starts at i. */
static size_t run_of(const unsigned char *s, size_t n, size_t i, int cls) {
    while (i < n) {
        int len, c = char_at(s, n, i, &len);
        if (c != cls) break;
        i += (size_t)len;
    }
    return i;
}

size_t td_bpe_pretok_next(const unsigned char *s, size_t n, size_t i) {
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
    int len, c = char_at(s, n, i, &len);
    /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then
     * a run of one class; with the space, the class is the next character's */
    size_t j = i;
    if (s[i] == ' ' && i + 1 < n) {
        int len2, c2 = char_at(s, n, i + 1, &len2);
        if (c2 != TD_UC_SPACE) j = i + 1, c = c2, len = len2;
    }
    if (c != TD_UC_SPACE) return run_of(s, n, j + (size_t)len, c);
    /* whitespace at i (a space not followed by a non-space lands here too):
     * '\s+(?!\S)' takes the run, backing off one character when a non-space
     * follows, unless that would leave it empty; then '\s+' takes one */
    size_t end = i, last = i;
    while (end < n) {
        int l, k = char_at(s, n, end, &l);
        if (k != TD_UC_SPACE) break;
        last = end;
        end += (size_t)l;
    }
    if (end == n || last == i) return end;
    return last;
}

size_t td_bpe_split_point(const unsigned char *s, size_t n, size_t from) {
    for (size_t p = from ? from : 1; p < n; p++)
        if ((s[p] == ' ' || s[p] == '\n') && s[p - 1] > 0x20 && s[p - 1] < 0x7F) return p;
    return n;
}
