/* Hugging Face's GPT2Tokenizer files (vocab.json, merges.txt) from a BPE
 * rank table (bpe.h). tiktoken's ranks and HF's files hold the same
 * tokenizer in two forms: a token's rank is its id and its merge priority,
 * and merges.txt lists, in rank order, the pair that BPE joins into each
 * merged token; td_bpe_merge_pair recovers that pair from the ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "trident/bpe.h"

/* A growing text buffer; `failed` once an allocation has failed. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} text;

static void put(text *t, const void *p, size_t n) {
    if (t->failed) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->s = s, t->cap = cap;
    }
    memcpy(t->s + t->len, p, n);
    t->len += n;
    t->s[t->len] = 0;
}
static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

/* GPT-2's bytes_to_unicode: the 188 printable Latin-1 bytes ('!'..'~',
 * U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68, in
 * increasing order, for U+0100, U+0101, ... (so no token holds a space or a
 * control character). */
unsigned td_bpe_byte_char(unsigned char b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    unsigned k = 0; /* non-printable bytes before b */
    for (unsigned c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) k++;
    return 256 + k;
}

/* Token bytes in that alphabet: as UTF-8 (merges.txt), or as a JSON string
 * the way Python's json.dumps writes it (vocab.json: '"' and '\\'
 * backslashed, everything above ASCII as \\u00e9; no control characters
 * occur), so that both files come out byte for byte as OpenAI published
 * them (encoder.json and vocab.bpe, which Hugging Face ships unchanged). */
static void put_token(text *t, const unsigned char *p, int n, int json) {
    for (int i = 0; i < n; i++) {
        unsigned cp = td_bpe_byte_char(p[i]);
        char u[12];
        if (json && (cp == '"' || cp == '\\')) u[0] = '\\', u[1] = (char)cp, put(t, u, 2);
        else if (cp < 0x80) u[0] = (char)cp, put(t, u, 1);
        else if (json) snprintf(u, sizeof u, "\\u%04x", cp), put(t, u, 6);
        else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), put(t, u, 2);
    }
}

static char *finish(text *t, size_t *len, td_err *e) {
    if (t->failed) {
        free(t->s);
        td_err_set(e, "out of memory formatting the tokenizer files");
        return NULL;
    }
    *len = t->len;
    return t->s;
}

char *td_bpe_hf_vocab_json(const td_bpe *b, size_t *len, td_err *e) {
    text t = {0};
    puts_(&t, "{");
    int V = td_bpe_vocab(b), ranks = td_bpe_ranks(b), first = 1;
    for (int id = 0; id < V; id++) {
        int n;
        const unsigned char *p = td_bpe_token(b, id, &n);
        if (!p) continue; /* an id between the ranks and a special token */
        puts_(&t, first ? "\"" : ", \"");
        first = 0;
        if (id < ranks) {
            put_token(&t, p, n, 1);
        } else { /* a special token is matched as its own text, not as bytes */
            for (int i = 0; i < n; i++)
                if (p[i] < 0x20 || p[i] >= 0x7F || p[i] == '"' || p[i] == '\\') {
                    free(t.s);
                    td_err_set(e, "special token %d is not printable ASCII without quotes", id);
                    return NULL;
                }
            put(&t, p, (size_t)n);
        }
        char num[32];
        snprintf(num, sizeof num, "\": %d", id);
        puts_(&t, num);
    }
    puts_(&t, "}"); /* no newline after: encoder.json has none */
    return finish(&t, len, e);
}

char *td_bpe_hf_merges_txt(const td_bpe *b, size_t *len, int *merges, td_err *e) {
    text t = {0};
    puts_(&t, "#version: 0.2\n");
    *merges = 0;
    for (int id = 0; id < td_bpe_ranks(b); id++) {
        int n, pair[2];
        td_bpe_token(b, id, &n);
        if (n == 1) continue;
        if (td_bpe_merge_pair(b, id, pair) != 0) {
            free(t.s);
            td_err_set(e, "token %d: its bytes do not merge into two lower-ranked tokens, so it has "
                          "no line in merges.txt", id);
            return NULL;
        }
        for (int k = 0; k < 2; k++) {
            const unsigned char *p = td_bpe_token(b, pair[k], &n);
            put_token(&t, p, n, 0);
            puts_(&t, k ? "\n" : " ");
        }
        ++*merges;
    }
    return finish(&t, len, e);
}
