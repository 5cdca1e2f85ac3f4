/* Character-level (code points of UTF-8 text), byte-level, the BPE
 * tokenizers of rank files (gpt2, cl100k, o200k) and a tokenizer.json's BPE
 * behind one interface. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/data.h"
#include "trident/formats_data.h"

static const char *const names[TD_TOK_KINDS] = {"char", "byte", "ids", "gpt2", "cl100k", "o200k", "hf"};

const char *td_tokenizer_name(td_tokenizer_kind k) {
    return k >= 0 && k < TD_TOK_KINDS ? names[k] : "ids";
}

int td_tokenizer_is_file(const char *name) {
    size_t n = name ? strlen(name) : 0;
    return n > 5 && strcmp(name + n - 5, ".json") == 0;
}

void td_tokenizer_hf(td_tokenizer *tk, const char *path, const char *flag) {
    memset(tk, 0, sizeof *tk);
    td_bpe *b;
    td_err e;
    TD_CHECK(td_bpe_load_hf(path, &b, &tk->file_xxh3, &e) == 0, "%s %s: %s", flag, path, e.msg);
    tk->kind = TD_TOK_HF;
    tk->bpe = b;
    tk->V = td_bpe_vocab(b);
    tk->file = td_alloc(strlen(path) + 1, TD_MEM_OTHER);
    memcpy(tk->file, path, strlen(path) + 1);
}

/* td_bpe_kind in the order of td_tokenizer_kind, from gpt2 */
int td_tokenizer_is_bpe(td_tokenizer_kind kind) { return kind >= TD_TOK_GPT2 && kind <= TD_TOK_O200K; }
int td_tokenizer_has_bpe(td_tokenizer_kind kind) { return td_tokenizer_is_bpe(kind) || kind == TD_TOK_HF; }

int td_tokenizer_bpe_kind(const char *name) {
    int k = td_bpe_kind_parse(name);
    return k < 0 ? -1 : TD_TOK_GPT2 + k;
}

int td_tokenizer_bpe(td_tokenizer *tk, const char *name) {
    int k = td_bpe_kind_parse(name);
    if (k < 0) return -1;
    memset(tk, 0, sizeof *tk);
    tk->kind = (td_tokenizer_kind)(TD_TOK_GPT2 + k);
    tk->bpe = td_bpe_get((td_bpe_kind)k);
    tk->V = td_bpe_vocab(tk->bpe);
    return 0;
}

void td_tokenizer_gpt2(td_tokenizer *tk) { td_tokenizer_bpe(tk, "gpt2"); }

/* Builds the char vocabulary from text (sorted distinct code points);
 * strict UTF-8 (src/formats/utf8.c), errors prefixed with `what`. */
void td_tokenizer_build_char(td_tokenizer *tk, const char *text, size_t n, const char *what) {
    uint32_t *chars;
    size_t V;
    td_err e;
    TD_CHECK(td_utf8_vocab((const unsigned char *)text, n, &chars, &V, &e) == 0,
             "%s: %s; use --tokenizer byte for text that is not UTF-8", what, e.msg);
    memset(tk, 0, sizeof *tk); /* every field known, so td_tokenizer_free may free it */
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
    } else if (td_tokenizer_has_bpe(tk->kind)) {
        td_err e;
        size_t bad;
        TD_CHECK(td_utf8_check(s, n, &bad, &e) == 0, "the text to encode with %s: %s",
                 tk->kind == TD_TOK_HF ? tk->file : td_tokenizer_name(tk->kind), e.msg);
        td_bpe_enc *enc = td_bpe_enc_new(tk->bpe);
        count = td_bpe_encode(enc, s, n, ids);
        td_bpe_enc_free(enc);
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
    if (td_tokenizer_has_bpe(tk->kind)) {
        int len;
        const unsigned char *t = td_bpe_token(tk->bpe, token, &len);
        if (t && len <= cap) return memcpy(buf, t, (size_t)len), len;
    }
    if (tk->kind == TD_TOK_CHAR) {
        unsigned char u[4];
        int k = td_utf8_put(tk->chars[token], u);
        if (k) return memcpy(buf, u, (size_t)k), k;
    }
    return snprintf(buf, (size_t)cap, "<%d>", token);
}

void td_tokenizer_free(td_tokenizer *tk) {
    if (tk->kind == TD_TOK_HF) td_bpe_free((td_bpe *)tk->bpe);
    td_free(tk->file);
    td_free(tk->chars);
    memset(tk, 0, sizeof *tk);
}

void td_tokenizer_copy(td_tokenizer *dst, const td_tokenizer *src) {
    memset(dst, 0, sizeof *dst);
    if (td_tokenizer_is_bpe(src->kind)) {
        td_tokenizer_bpe(dst, td_tokenizer_name(src->kind));
    } else if (src->kind == TD_TOK_HF) {
        td_tokenizer_hf(dst, src->file, "the tokenizer.json");
        TD_CHECK(dst->file_xxh3 == src->file_xxh3, "the tokenizer.json %s has changed while it was in use; restore "
                 "it", src->file);
    } else {
        dst->kind = src->kind, dst->V = src->V;
        if (src->kind == TD_TOK_CHAR) {
            dst->chars = td_alloc(sizeof(uint32_t) * (size_t)(src->V ? src->V : 1), TD_MEM_OTHER);
            memcpy(dst->chars, src->chars, sizeof(uint32_t) * (size_t)src->V);
        }
    }
}

/* The length of the sequence a lead byte starts (0: none can), and whether
 * b may stand at position i of it (Unicode Table 3-7). */
static int seq_len(unsigned b) { return b < 0x80 ? 1 : b < 0xC2 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF5 ? 4 : 0; }
static int cont_ok(unsigned lead, int i, unsigned b) {
    if (i == 1 && lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (i == 1 && lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (i == 1 && lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (i == 1 && lead == 0xF4) return b >= 0x80 && b <= 0x8F;
    return (b & 0xC0) == 0x80;
}

void td_utf8_out_write(td_utf8_out *u, const char *bytes, int n, FILE *out) {
    for (int k = 0; k < n; k++) {
        unsigned b = (unsigned char)bytes[k];
        if (u->n > 0 && !cont_ok(u->held[0], u->n, b)) { /* the held start is broken */
            fputs("\xEF\xBF\xBD", out);
            u->n = 0;
        }
        if (u->n == 0 && seq_len(b) == 0) { /* nothing starts with b */
            fputs("\xEF\xBF\xBD", out);
            continue;
        }
        u->held[u->n++] = (unsigned char)b;
        if (u->n == seq_len(u->held[0])) {
            fwrite(u->held, 1, (size_t)u->n, out);
            u->n = 0;
        }
    }
}

void td_utf8_out_flush(td_utf8_out *u, FILE *out) {
    if (u->n) fputs("\xEF\xBF\xBD", out);
    u->n = 0;
}
