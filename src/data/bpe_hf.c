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

/* tiktoken's patterns as js-tiktoken 1.0.21 spells them (pat_str of
 * cl100k_base and o200k_base): the text that bpe_pretok_tiktoken.c matches
 * by hand, so a Split with it pre-tokenizes as --tokenizer cl100k/o200k
 * does (PCRE2 and Hugging Face's Oniguruma both take this syntax). */
#define TIKTOKEN_C "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)"
static const char cl100k_pattern[] =
    TIKTOKEN_C "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char o200k_pattern[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" TIKTOKEN_C
    "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" TIKTOKEN_C
    "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *tiktoken_pattern(td_bpe_kind k) {
    return k == TD_BPE_CL100K ? cl100k_pattern : k == TD_BPE_O200K ? o200k_pattern : NULL;
}

/* s[0..n) as the inside of a JSON string: '"' and '\\' backslashed (the
 * patterns and the alphabet's UTF-8 hold no control character) */
static void put_json_chars(text *t, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') put(t, "\\", 1);
        put(t, s + i, 1);
    }
}

char *td_bpe_hf_tokenizer_json(const td_bpe *b, size_t *len, int *merges, td_err *e) {
    const char *pattern = tiktoken_pattern(td_bpe_kind_of(b));
    if (!pattern || td_bpe_has_regex(b)) {
        td_err_set(e, "a tokenizer.json is written for tiktoken's cl100k_base and o200k_base only");
        return NULL;
    }
    text t = {0};
    char num[64];
    int V = td_bpe_vocab(b), ranks = td_bpe_ranks(b), first = 1;
    /* special tokens are added tokens: ids to decode, not pieces of BPE */
    puts_(&t, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
              "  \"added_tokens\": [");
    for (int id = ranks; id < V; id++) {
        int n;
        const unsigned char *p = td_bpe_token(b, id, &n);
        if (!p) continue;
        for (int i = 0; i < n; i++)
            if (p[i] < 0x20 || p[i] >= 0x7F || p[i] == '"' || p[i] == '\\') {
                free(t.s);
                td_err_set(e, "special token %d is not printable ASCII without quotes", id);
                return NULL;
            }
        snprintf(num, sizeof num, "%s\n    {\"id\": %d, \"content\": \"", first ? "" : ",", id);
        puts_(&t, num);
        put(&t, p, (size_t)n);
        puts_(&t, "\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                  "\"normalized\": false, \"special\": true}");
        first = 0;
    }
    puts_(&t, "\n  ],\n  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"Sequence\", "
              "\"pretokenizers\": [\n    {\"type\": \"Split\", \"pattern\": {\"Regex\": \"");
    put_json_chars(&t, pattern, strlen(pattern));
    /* use_regex false: the Split above is the whole pattern; ByteLevel only
     * maps bytes to the alphabet */
    puts_(&t, "\"}, \"behavior\": \"Isolated\", \"invert\": false},\n    {\"type\": \"ByteLevel\", "
              "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]},\n"
              "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", "
              "\"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
              /* ignore_merges: tiktoken's rule, a piece that is a token as a whole is that token */
              "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
              "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": false, "
              "\"byte_fallback\": false, \"ignore_merges\": true,\n    \"vocab\": {");
    for (int id = 0; id < ranks; id++) {
        int n;
        const unsigned char *p = td_bpe_token(b, id, &n);
        puts_(&t, id ? ", \"" : "\"");
        put_token(&t, p, n, 1);
        snprintf(num, sizeof num, "\": %d", id);
        puts_(&t, num);
    }
    puts_(&t, "},\n    \"merges\": [");
    /* one pair per merged token, in rank order: when every token's lower
     * ranks bring its bytes to exactly two parts (checked here), tiktoken's
     * merge of any piece only ever joins those two into it, so the list
     * merges as the ranks do */
    char *merge_lines = td_bpe_hf_merges_txt(b, len, merges, e);
    if (!merge_lines) {
        free(t.s);
        return NULL;
    }
    /* merges.txt's lines after its "#version" line, each a JSON string */
    const char *lines = strchr(merge_lines, '\n') + 1;
    for (const char *line = lines, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        puts_(&t, line == lines ? "\"" : ", \"");
        put_json_chars(&t, line, (size_t)(end - line));
        puts_(&t, "\"");
    }
    free(merge_lines);
    puts_(&t, "]\n  }\n}\n");
    return finish(&t, len, e);
}
