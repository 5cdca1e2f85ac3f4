/* Strict UTF-8 (Unicode Table 3-7) and the char vocabulary built on it.
 * Strict because the char tokenizer maps code points to ids and back: an
 * overlong or surrogate sequence would decode to a character that encodes
 * to different bytes, so a sample or checkpoint would not round-trip. */
#include <stdio.h>
#include <stdlib.h>

#include "trident/formats_data.h"

/* One sequence at s (n > 0): its length, or 0 with *why and *seen = the
 * bytes looked at (for the message). */
static int decode(const unsigned char *s, size_t n, uint32_t *cp, const char **why, int *seen) {
    unsigned b0 = s[0];
    *seen = 1;
    if (b0 < 0x80) return *cp = b0, 1;
    if (b0 < 0xC0) return *why = "stray continuation byte", 0;
    if (b0 < 0xC2) { /* C0, C1: U+0000..U+007F in two bytes; show both */
        if (n > 1 && (s[1] & 0xC0) == 0x80) *seen = 2;
        return *why = "overlong encoding", 0;
    }
    if (b0 > 0xF4) return *why = "lead byte above F4 (code point beyond U+10FFFF)", 0;
    int len = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    /* the second byte's range depends on the lead (Table 3-7); outside it,
     * a continuation byte means one of these */
    unsigned lo = 0x80, hi = 0xBF;
    const char *out_of_range = "";
    switch (b0) {
    case 0xE0: lo = 0xA0, out_of_range = "overlong encoding"; break;
    case 0xED: hi = 0x9F, out_of_range = "surrogate (U+D800..U+DFFF)"; break;
    case 0xF0: lo = 0x90, out_of_range = "overlong encoding"; break;
    case 0xF4: hi = 0x8F, out_of_range = "code point beyond U+10FFFF"; break;
    }
    uint32_t c = b0 & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return *why = "sequence truncated by the end of the text", 0;
        unsigned b = s[i];
        *seen = i + 1;
        if ((b & 0xC0) != 0x80) return *why = "truncated sequence (a continuation byte is missing)", 0;
        if (i == 1 && (b < lo || b > hi)) return *why = out_of_range, 0;
        c = (c << 6) | (b & 0x3F);
    }
    *cp = c;
    return len;
}

int td_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, const char **why) {
    const char *w = NULL;
    int seen;
    int len = decode(s, n, cp, &w, &seen);
    if (why) *why = w;
    return len;
}

int td_utf8_put(uint32_t c, unsigned char out[4]) {
    if (c < 0x80) return out[0] = (unsigned char)c, 1;
    if (c < 0x800) return out[0] = (unsigned char)(0xC0 | (c >> 6)), out[1] = (unsigned char)(0x80 | (c & 0x3F)), 2;
    if (c >= 0xD800 && c <= 0xDFFF) return 0;
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (c >> 12));
        out[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    if (c > 0x10FFFF) return 0;
    out[0] = (unsigned char)(0xF0 | (c >> 18));
    out[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* The message for a bad sequence at offset i: reason and the bytes seen. */
static int bad_at(td_err *e, size_t i, const unsigned char *s, int seen, const char *why) {
    char hex[16] = "";
    for (int k = 0, at = 0; k < seen; k++) at += snprintf(hex + at, sizeof hex - (size_t)at, k ? " %02X" : "%02X", s[k]);
    return td_err_set(e, "the text is not valid UTF-8 at byte %zu: %s (bytes %s)", i, why, hex);
}

int td_utf8_check(const unsigned char *s, size_t n, size_t *bad, td_err *e) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const char *why;
        int seen, len = decode(s + i, n - i, &cp, &why, &seen);
        if (!len) {
            if (bad) *bad = i;
            return bad_at(e, i, s + i, seen, why);
        }
        i += (size_t)len;
    }
    return 0;
}

int td_utf8_vocab(const unsigned char *s, size_t n, uint32_t **chars, size_t *V, td_err *e) {
    *chars = NULL;
    *V = 0;
    /* A bitmap over the code space (136 KiB: cheap, order-free, O(n)), and a
     * summary bit per bitmap word so reading it back visits only the words
     * in use: a short text costs no scan of the whole code space (that scan
     * was most of the fuzzer's time per input). */
    enum { WORDS = 0x110000 / 64, SUMMARY = WORDS / 64 };
    uint64_t *bits = calloc(WORDS, sizeof(uint64_t)), summary[SUMMARY] = {0};
    if (!bits) return td_err_set(e, "out of memory for the character vocabulary");
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const char *why;
        int seen, len = decode(s + i, n - i, &cp, &why, &seen);
        if (!len) {
            free(bits);
            return bad_at(e, i, s + i, seen, why);
        }
        uint64_t bit = (uint64_t)1 << (cp & 63);
        if (!(bits[cp >> 6] & bit)) {
            bits[cp >> 6] |= bit, count++;
            summary[cp >> 12] |= (uint64_t)1 << ((cp >> 6) & 63);
        }
        i += (size_t)len;
    }
    uint32_t *out = NULL;
    if (count) {
        out = malloc(sizeof(uint32_t) * count);
        if (!out) {
            free(bits);
            return td_err_set(e, "out of memory for the character vocabulary");
        }
        size_t k = 0; /* ascending: summary words, then their words, then bits */
        for (uint32_t sw = 0; sw < SUMMARY; sw++)
            for (uint64_t used = summary[sw]; used; used &= used - 1) {
                uint32_t w = sw * 64 + (uint32_t)__builtin_ctzll(used);
                for (uint64_t b = bits[w]; b; b &= b - 1) out[k++] = w * 64 + (uint32_t)__builtin_ctzll(b);
            }
    }
    free(bits);
    *chars = out;
    *V = count;
    return 0;
}

int td_utf8_encode_ids(const uint32_t *chars, size_t V, const unsigned char *s, size_t n, int *ids,
                       size_t *count, td_err *e) {
    size_t k = 0;
    *count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const char *why;
        int seen, len = decode(s + i, n - i, &cp, &why, &seen);
        if (!len) return bad_at(e, i, s + i, seen, why);
        size_t lo = 0, hi = V; /* binary search: chars is ascending */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (chars[mid] < cp) lo = mid + 1;
            else hi = mid;
        }
        if (lo == V || chars[lo] != cp) {
            /* a control character is named by its code point only, so the
             * message stays one line */
            int shown = cp < 0x20 || (cp >= 0x7F && cp < 0xA0) ? 0 : len;
            return td_err_set(e, "character '%.*s' (U+%04X) at byte %zu is not in the model's %zu-character "
                                 "vocabulary",
                              shown, (const char *)(s + i), (unsigned)cp, i, V);
        }
        ids[k++] = (int)lo;
        i += (size_t)len;
    }
    *count = k;
    return 0;
}
