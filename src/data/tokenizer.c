/* Character-level (code points of UTF-8 text) and byte-level tokenizers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/data.h"

const char *td_tokenizer_name(td_tokenizer_kind k) {
    return k == TD_TOK_CHAR ? "char" : k == TD_TOK_BYTE ? "byte" : "ids";
}

/* Decodes one UTF-8 sequence at s (n bytes left); returns its length, 0 if
 * malformed. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80) return *cp = s[0], 1;
    int len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cp = c;
    return len;
}

static int encode_utf8(uint32_t c, char *buf) {
    if (c < 0x80) return buf[0] = (char)c, 1;
    if (c < 0x800) return buf[0] = (char)(0xC0 | (c >> 6)), buf[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000) {
        buf[0] = (char)(0xE0 | (c >> 12));
        buf[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    buf[0] = (char)(0xF0 | (c >> 18));
    buf[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    buf[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Builds the char vocabulary from text (sorted distinct code points). */
void td_tokenizer_build_char(td_tokenizer *tk, const char *text, size_t n, const char *what) {
    const unsigned char *s = (const unsigned char *)text;
    /* a bitmap over the Unicode range is 136 KiB: cheap and order-free */
    unsigned char *seen = calloc(0x110000 / 8 + 1, 1);
    TD_ASSERT(seen);
    size_t i = 0;
    int V = 0;
    while (i < n) {
        uint32_t cp;
        int len = utf8_next(s + i, n - i, &cp);
        TD_CHECK(len > 0 && cp < 0x110000,
                 "%s is not valid UTF-8 at byte %zu; use --tokenizer byte for binary text", what, i);
        if (!(seen[cp >> 3] & (1 << (cp & 7)))) seen[cp >> 3] |= 1 << (cp & 7), V++;
        i += (size_t)len;
    }
    tk->kind = TD_TOK_CHAR;
    tk->V = V;
    tk->chars = td_alloc(sizeof(uint32_t) * (size_t)V, TD_MEM_OTHER);
    int k = 0;
    for (uint32_t c = 0; c < 0x110000; c++)
        if (seen[c >> 3] & (1 << (c & 7))) tk->chars[k++] = c;
    free(seen);
}

size_t td_tokenizer_encode(const td_tokenizer *tk, const char *text, size_t n, int **out) {
    int *ids = td_alloc(sizeof(int) * (n ? n : 1), TD_MEM_OTHER);
    const unsigned char *s = (const unsigned char *)text;
    size_t count = 0, i = 0;
    if (tk->kind == TD_TOK_BYTE) {
        for (; i < n; i++) ids[count++] = s[i];
    } else {
        TD_CHECK(tk->kind == TD_TOK_CHAR, "this model's tokens are ids from a token file; "
                                          "it has no text tokenizer to encode a prompt with");
        while (i < n) {
            uint32_t cp;
            int len = utf8_next(s + i, n - i, &cp);
            TD_CHECK(len > 0, "text is not valid UTF-8 at byte %zu", i);
            uint32_t *hit = bsearch(&cp, tk->chars, (size_t)tk->V, sizeof(uint32_t), cmp_u32);
            char ch[5] = {0};
            encode_utf8(cp, ch);
            TD_CHECK(hit, "character '%s' (U+%04X) is not in the model's %d-character vocabulary",
                     ch, cp, tk->V);
            ids[count++] = (int)(hit - tk->chars);
            i += (size_t)len;
        }
    }
    *out = ids;
    return count;
}

int td_tokenizer_decode(const td_tokenizer *tk, int token, char *buf, int cap) {
    TD_ASSERT(cap >= 16);
    if (token < 0 || token >= tk->V) return snprintf(buf, (size_t)cap, "<%d>", token);
    if (tk->kind == TD_TOK_BYTE) return buf[0] = (char)token, 1;
    if (tk->kind == TD_TOK_CHAR) return encode_utf8(tk->chars[token], buf);
    return snprintf(buf, (size_t)cap, "<%d>", token);
}

void td_tokenizer_free(td_tokenizer *tk) {
    td_free(tk->chars);
    memset(tk, 0, sizeof *tk);
}
