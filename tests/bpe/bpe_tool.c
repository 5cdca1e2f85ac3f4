/* The BPE tokenizers as the reference tests drive them (tests/bpe/test_bpe_ref.sh):
 *   bpe_tool [--tokenizer=T] encode FILE OUT [THREADS]
 *                                       ordinary encoding of FILE as int32
 *                                       ids into OUT (no <|endoftext|>);
 *                                       T: gpt2 (default), cl100k, o200k
 *   bpe_tool [--tokenizer=T] roundtrip FILE
 *                                       decode(encode(FILE)) == FILE, and
 *                                       1 thread == 2 and 3 threads
 *   bpe_tool [--tokenizer=T] shards DIR TEXT
 *                                       the shards `trident tokenize` wrote
 *                                       from TEXT, loaded as `train --data
 *                                       DIR --tokenizer T` loads them,
 *                                       equal `train --data TEXT
 *                                       --tokenizer T`'s tokens
 *   bpe_tool stress OUT BYTES           a random text for the tiktoken
 *                                       patterns (fragments and code
 *                                       points), without the code points
 *                                       whose class PCRE2's Unicode tables
 *                                       give otherwise (see stress_text)
 *   bpe_tool classes OUT                the patterns' class of every code
 *                                       point, one byte each (TD_UC_*:
 *                                       0 other, 1 Lu ... 8 space)
 * Exits 1 on any mismatch, printing the first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/data/bpe_internal.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/data.h"
#include "trident/formats_data.h"
#include "pcre2_class.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    TD_CHECK(buf && fread(buf, 1, (size_t)len, f) == (size_t)len, "%s: read failed", path);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static td_bpe_kind kind = TD_BPE_GPT2;

static size_t encode(const unsigned char *s, size_t n, int threads, int **ids) {
    const td_bpe *b = td_bpe_get(kind);
    td_bpe_enc *encs[8];
    for (int t = 0; t < threads; t++) encs[t] = td_bpe_enc_new(b);
    *ids = malloc(sizeof(int) * (n ? n : 1));
    size_t k = td_bpe_encode_threads(encs, threads, s, n, *ids);
    for (int t = 0; t < threads; t++) td_bpe_enc_free(encs[t]);
    return k;
}

/* Fragments the patterns treat specially (contractions in both cases,
 * whitespace runs before text, digit runs, punctuation with newlines and
 * o200k's '/', case changes inside words, marks) and random code points.
 * Code points PCRE2 classifies otherwise are left out (pcre2_class.h): on
 * them the patterns are the same text but the engines are not. */
static void stress_text(const char *out, size_t want) {
    static const char *const frag[] = {
        "don't", "I'M", "we'LL", "they'Ve", "YOU'RE", "she'd", "it's", "'S", "''s", "!!'t",
        "   ", "\t\t", "\n\n\n", " \n ", "\r\n", "  \t \n", " ", "\xC2\xA0", "\xE3\x80\x80",
        "123", "4567890", " 42", "\xD9\xA3\xD9\xA4", "\xC2\xBD", "...\n", "?!\r\n", " --", "a/b//",
        "https://x.y/z", "#$%", "CamelCase", "HTTPServer", "iPhone", "\xF0\x9F\x98\x80",
        "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB", "na\xC3\xAFve", "e\xCC\x81",
        "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", "\xE6\x97\xA5\xE6\x9C\xAC",
        "\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9", "\xC7\x85" "a", " Hello", " world"};
    pcre2_classes pc;
    pcre2_classes_init(&pc);
    unsigned char *s = malloc(want + 64);
    size_t n = 0, left_out = 0;
    for (uint64_t draw = 0; n < want; draw++) {
        uint64_t r = td_rng_u64(2026, 12, draw);
        uint32_t pick = (uint32_t)(r % 10), x = (uint32_t)(r >> 8);
        if (pick < 6) {
            const char *f = frag[x % (sizeof frag / sizeof *frag)];
            memcpy(s + n, f, strlen(f)), n += strlen(f);
            continue;
        }
        uint32_t cp = pick < 8 ? 0x20 + x % 0x3000 : pick < 9 ? x % 0x10000 : 0x10000 + x % 0x30000;
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (pcre2_class_of(&pc, cp) != td_bpe_uc_class(cp)) {
            left_out++;
            continue;
        }
        n += (size_t)td_utf8_put(cp, s + n);
    }
    pcre2_classes_free(&pc);
    FILE *f = fopen(out, "wb");
    TD_CHECK(f && fwrite(s, 1, n, f) == n && fclose(f) == 0, "%s: write failed", out);
    free(s);
    printf("stress text: %zu bytes, %zu code points left out\n", n, left_out);
}

int main(int argc, char **argv) {
    if (argc > 1 && strncmp(argv[1], "--tokenizer=", 12) == 0) {
        int k = td_bpe_kind_parse(argv[1] + 12);
        TD_CHECK(k >= 0, "%s: valid are gpt2, cl100k, o200k", argv[1]);
        kind = (td_bpe_kind)k;
        argv++, argc--;
    }
    TD_CHECK(argc >= 3, "usage: bpe_tool encode FILE OUT [THREADS] | roundtrip FILE | classes OUT");
    if (strcmp(argv[1], "classes") == 0) {
        unsigned char *t = malloc(0x110000);
        for (uint32_t cp = 0; cp < 0x110000; cp++) t[cp] = (unsigned char)td_bpe_uc_class(cp);
        FILE *f = fopen(argv[2], "wb");
        TD_CHECK(f && fwrite(t, 1, 0x110000, f) == 0x110000 && fclose(f) == 0, "%s: write failed",
                 argv[2]);
        free(t);
        return 0;
    }
    if (strcmp(argv[1], "stress") == 0) {
        TD_CHECK(argc == 4, "stress needs OUT BYTES");
        stress_text(argv[2], (size_t)atol(argv[3]));
        return 0;
    }
    if (strcmp(argv[1], "shards") == 0) {
        TD_CHECK(argc == 4, "shards needs DIR TEXT");
        td_dataset a, b;
        td_data_load(&a, argv[2], td_bpe_kind_name(kind), -1, 16);
        td_data_load(&b, argv[3], td_bpe_kind_name(kind), -1, 16);
        const char *name[2] = {"train", "val"};
        for (int split = 0; split < 2; split++) {
            const int *x = split ? a.val : a.train, *y = split ? b.val : b.train;
            size_t nx = split ? a.n_val : a.n_train, ny = split ? b.n_val : b.n_train, i = 0;
            while (i < nx && i < ny && x[i] == y[i]) i++;
            if (i < nx || nx != ny) {
                printf("shards %s: %s split: %zu tokens from the shards, %zu from the text; first "
                       "difference at token %zu\n", argv[2], name[split], nx, ny, i);
                return 1;
            }
        }
        if (a.tok.kind != (td_tokenizer_kind)td_tokenizer_bpe_kind(td_bpe_kind_name(kind)) ||
            a.tok.V != td_bpe_kind_vocab(kind)) {
            printf("shards %s: loaded with tokenizer %s, vocabulary %d\n", argv[2],
                   td_tokenizer_name(a.tok.kind), a.tok.V);
            return 1;
        }
        printf("shards %s: %zu train + %zu val tokens equal the in-memory encoding of %s "
               "(<|endoftext|> first, split 90/10)\n", argv[2], a.n_train, a.n_val, argv[3]);
        td_data_free(&a), td_data_free(&b);
        return 0;
    }
    size_t n, bad;
    unsigned char *s = slurp(argv[2], &n);
    td_err e;
    TD_CHECK(td_utf8_check(s, n, &bad, &e) == 0, "%s: %s", argv[2], e.msg);
    int *ids;
    if (strcmp(argv[1], "encode") == 0) {
        TD_CHECK(argc >= 4, "encode needs OUT");
        int threads = argc > 4 ? atoi(argv[4]) : 1;
        TD_CHECK(threads >= 1 && threads <= 8, "THREADS: 1..8");
        size_t k = encode(s, n, threads, &ids);
        FILE *f = fopen(argv[3], "wb");
        TD_CHECK(f && fwrite(ids, sizeof(int), k, f) == k && fclose(f) == 0, "%s: write failed",
                 argv[3]);
        free(ids), free(s);
        return 0;
    }
    TD_CHECK(strcmp(argv[1], "roundtrip") == 0, "unknown mode %s", argv[1]);
    size_t k = encode(s, n, 1, &ids);
    const td_bpe *b = td_bpe_get(kind);
    unsigned char *back = malloc(n + 1);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        int len;
        const unsigned char *t = td_bpe_token(b, ids[i], &len);
        if (!t || ids[i] == td_bpe_eot(b) || m + (size_t)len > n ||
            memcmp(s + m, t, (size_t)len) != 0) {
            printf("roundtrip %s: token %zu (id %d) does not decode to the bytes at offset %zu\n",
                   argv[2], i, ids[i], m);
            return 1;
        }
        m += (size_t)len;
    }
    if (m != n) {
        printf("roundtrip %s: the tokens decode to %zu of %zu bytes\n", argv[2], m, n);
        return 1;
    }
    for (int threads = 2; threads <= 3; threads++) {
        int *par;
        size_t kp = encode(s, n, threads, &par);
        size_t i = 0;
        while (i < k && i < kp && par[i] == ids[i]) i++;
        if (i < k || kp != k) {
            printf("roundtrip %s: %d threads give %zu tokens, 1 thread %zu; first difference at "
                   "token %zu\n",
                   argv[2], threads, kp, k, i);
            return 1;
        }
        free(par);
    }
    printf("roundtrip %s (%s): %zu bytes -> %zu tokens -> the same bytes; 1, 2 and 3 threads "
           "agree\n", argv[2], td_bpe_kind_name(kind), n, k);
    free(ids), free(back), free(s);
    return 0;
}
