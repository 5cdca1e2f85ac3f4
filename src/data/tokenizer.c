/* Character-level (code points of UTF-8 text) and byte-level tokenizers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/data.h"
#include "trident/formats_data.h"

const char *td_tokenizer_name(td_tokenizer_kind k) {
    return k == TD_TOK_CHAR ? "char" : k == TD_TOK_BYTE ? "byte" : "ids";
}

/* Builds the char vocabulary from text (sorted distinct code points);
 * strict UTF-8 (src/formats/utf8.c), errors prefixed with `what`. */
void td_tokenizer_build_char(td_tokenizer *tk, const char *text, size_t n, const char *what) {
    uint32_t *chars;
    size_t V;
    td_err e;
    TD_CHECK(td_utf8_vocab((const unsigned char *)text, n, &chars, &V, &e) == 0,
             "%s: %s; use --tokenizer byte for text that is not UTF-8", what, e.msg);
    tk->kind = TD_TOK_CHAR;
    tk->V = (int)V; /* at most 0x110000 code points */
    tk->chars = td_alloc(sizeof(uint32_t) * (V ? V : 1), TD_MEM_OTHER);
    if (V) memcpy(tk->chars, chars, sizeof(uint32_t) * V);
    free(chars);
}

size_t td_tokenizer_encode(const td_tokenizer *tk, const char *text, size_t n, int **out) {
    int *ids = td_alloc(sizeof(int) * (n ? n : 1), TD_MEM_OTHER);
    const unsigned char *s = (const unsigned char *)text;
    size_t count = 0;
    if (tk->kind == TD_TOK_BYTE) {
        for (size_t i = 0; i < n; i++) ids[count++] = s[i];
    } else {
        TD_CHECK(tk->kind == TD_TOK_CHAR, "this model's tokens are ids from a token file; "
                                          "it has no text tokenizer to encode a prompt with");
        td_err e;
        TD_CHECK(td_utf8_encode_ids(tk->chars, (size_t)tk->V, s, n, ids, &count, &e) == 0, "%s", e.msg);
    }
    *out = ids;
    return count;
}

int td_tokenizer_decode(const td_tokenizer *tk, int token, char *buf, int cap) {
    TD_ASSERT(cap >= 16);
    if (token < 0 || token >= tk->V) return snprintf(buf, (size_t)cap, "<%d>", token);
    if (tk->kind == TD_TOK_BYTE) return buf[0] = (char)token, 1;
    if (tk->kind == TD_TOK_CHAR) {
        unsigned char u[4];
        int k = td_utf8_put(tk->chars[token], u);
        if (k) return memcpy(buf, u, (size_t)k), k;
    }
    return snprintf(buf, (size_t)cap, "<%d>", token);
}

void td_tokenizer_free(td_tokenizer *tk) {
    td_free(tk->chars);
    memset(tk, 0, sizeof *tk);
}
