/* The BPE tokenizers' parts without node (runs in the sanitizer subset):
 * - the merge: the array scan, the heap and a literal transcription of
 *   tiktoken's byte_pair_merge (byte ranges, ranks of joined bytes) agree on
 *   random pieces, short and long;
 * - encode then decode gives the text back, and 1, 2, 3 threads agree, on
 *   random UTF-8 of every class of character and on random bytes, with
 *   each tokenizer's pattern (gpt2, cl100k, o200k);
 * - td_utf8_out: a character split anywhere across writes prints whole,
 *   anything else prints as valid UTF-8;
 * - the rank-file parser refuses truncated, corrupt and inconsistent files
 *   with the reason. Usage: test_bpe_unit DATA_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/data/bpe_internal.h"
#include "trident/base.h"
#include "trident/formats_hash.h"
#include "trident/bpe.h"
#include "trident/data.h"
#include "trident/formats_bpe.h"
#include "trident/formats_hash.h"
#include "trident/formats_data.h"

static int fails;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            if (++fails > 10) exit(1);                                                             \
        }                                                                                          \
    } while (0)

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* tiktoken's byte_pair_merge as written there: parts are byte ranges; each
 * round merges the adjacent pair whose joined bytes have the lowest rank. */
static size_t merge_literal(const td_bpe *b, const unsigned char *p, size_t n, int *out) {
    size_t *start = malloc((n + 1) * sizeof *start), k = n;
    for (size_t i = 0; i <= n; i++) start[i] = i; /* part i is p[start[i] .. start[i + 1]) */
    for (;;) {
        long best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            long r = td_bpe_rank_of(b, p + start[i], start[i + 2] - start[i]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) break;
        memmove(start + at + 1, start + at + 2, (k - at - 1) * sizeof *start);
        k--;
    }
    for (size_t i = 0; i < k; i++)
        out[i] = (int)td_bpe_rank_of(b, p + start[i], start[i + 1] - start[i]);
    free(start);
    return k;
}

static void test_merge(const td_bpe *b) {
    /* letters that merge a lot, bytes that rarely do, and repeats */
    const char *alpha[] = {"abcdefghijklmnopqrstuvwxyz", "aeiou tnsrl", " \n\t", "0123456789"};
    unsigned char p[1200];
    int x[1200], y[1200], z[1200];
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 2 + rnd(trial % 10 == 0 ? 1000 : 200);
        const char *a = alpha[rnd(4)];
        for (size_t i = 0; i < n; i++)
            p[i] = trial % 7 == 0 ? (unsigned char)rnd(256)
                                  : (unsigned char)a[rnd((uint32_t)strlen(a))];
        size_t kh = td_bpe_merge_with(b, p, n, x, 1), kl = merge_literal(b, p, n, z);
        int same = kh == kl && memcmp(x, z, kh * sizeof *x) == 0;
        if (n <= 256) {
            size_t ks = td_bpe_merge_with(b, p, n, y, 0);
            same = same && ks == kh && memcmp(x, y, ks * sizeof *x) == 0;
        }
        EXPECT(same, "merge of a %zu-byte piece: heap %zu tokens, literal %zu (trial %d)", n, kh,
               kl, trial);
    }
}

/* Random UTF-8: every class of character, the separators of the pattern. */
static size_t random_text(unsigned char *s, size_t cap, int raw) {
    static const uint32_t pool[] = {'a',      'Z',    ' ',    ' ',    '\n',   '\t',    '\'',
                                    's',      't',    '1',    '.',    '!',    0xA0,    0xE9,
                                    0x3B1,    0x416,  0x5D0,  0x627,  0x928,  0x94D,   0x4E2D,
                                    0xAC00,   0x2028, 0x3000, 0xFEFF, 0x85,   0x1F600, 0x1D400,
                                    0x10FFFF, 0x200D, 0x301,  0x660,  0xFF11, 0x2167,
                                    0x1C5,    0x2B0,  0x903,  '\r',   '/',    'S',     'L'};
    size_t n = 0;
    if (raw) { /* any bytes: the patterns must not read past a broken sequence */
        for (; n < cap; n++) s[n] = (unsigned char)(rnd(3) ? rnd(256) : pool[rnd(12)]);
        return n;
    }
    while (n + 4 <= cap) {
        uint32_t cp = rnd(4) ? pool[rnd(sizeof pool / sizeof pool[0])] : rnd(0x110000);
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        n += (size_t)td_utf8_put(cp, s + n);
    }
    return n;
}

static void test_roundtrip(const td_bpe *b, size_t cap, int raw) {
    unsigned char *s = malloc(cap), *back = malloc(cap);
    int *ids = malloc(cap * sizeof *ids), *par = malloc(cap * sizeof *par);
    size_t n = random_text(s, cap, raw);
    td_bpe_enc *encs[3] = {td_bpe_enc_new(b), td_bpe_enc_new(b), td_bpe_enc_new(b)};
    size_t k = td_bpe_encode(encs[0], s, n, ids), m = 0;
    for (size_t i = 0; i < k; i++) {
        int len;
        const unsigned char *t = td_bpe_token(b, ids[i], &len);
        EXPECT(t && ids[i] < td_bpe_ranks(b) && m + (size_t)len <= n, "token %zu: id %d", i, ids[i]);
        if (!t || m + (size_t)len > n) break;
        memcpy(back + m, t, (size_t)len), m += (size_t)len;
    }
    EXPECT(m == n && memcmp(back, s, n) == 0, "decode(encode(x)) != x (%zu of %zu bytes)", m, n);
    for (int threads = 2; threads <= 3; threads++) {
        size_t kp = td_bpe_encode_threads(encs, threads, s, n, par);
        EXPECT(kp == k && memcmp(par, ids, k * sizeof *ids) == 0,
               "%d threads: %zu tokens, 1 thread %zu", threads, kp, k);
    }
    /* the cache gives what the merge gave: encode again with a warm cache */
    size_t k2 = td_bpe_encode(encs[0], s, n, par);
    EXPECT(k2 == k && memcmp(par, ids, k * sizeof *ids) == 0, "a second encoding differs");
    for (int t = 0; t < 3; t++) td_bpe_enc_free(encs[t]);
    printf("ok   roundtrip (%s): %zu random %s -> %zu tokens -> the same bytes; 1 = 2 = 3 "
           "threads\n",
           td_bpe_kind_name(td_bpe_kind_of(b)), n, raw ? "bytes" : "UTF-8 bytes", k);
    free(s), free(back), free(ids), free(par);
}

/* Writes bytes through td_utf8_out in pieces cut at cuts[]. */
static size_t through(const unsigned char *s, size_t n, const size_t *cuts, int ncuts, char *out,
                      size_t cap) {
    FILE *f = fmemopen(out, cap, "w");
    td_utf8_out u = {{0}, 0};
    size_t at = 0;
    for (int c = 0; c <= ncuts; c++) {
        size_t to = c < ncuts ? cuts[c] : n;
        td_utf8_out_write(&u, (const char *)s + at, (int)(to - at), f);
        at = to;
    }
    td_utf8_out_flush(&u, f);
    long len = ftell(f);
    fclose(f);
    return (size_t)len;
}

static void test_utf8_out(void) {
    const unsigned char text[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x91\x8D z\xF4\x8F\xBF\xBF";
    size_t n = sizeof text - 1;
    char out[256];
    for (size_t c1 = 0; c1 <= n; c1++)
        for (size_t c2 = c1; c2 <= n; c2++) {
            size_t cuts[2] = {c1, c2};
            size_t len = through(text, n, cuts, 2, out, sizeof out);
            EXPECT(len == n && memcmp(out, text, n) == 0,
                   "valid text cut at %zu, %zu prints differently", c1, c2);
        }
    struct {
        const char *in, *want;
    } cases[] = {
        {"\x80", "\xEF\xBF\xBD"},                 /* a lone continuation byte */
        {"\xE2\x82", "\xEF\xBF\xBD"},             /* a character cut off by the end */
        {"\xE2\x82x", "\xEF\xBF\xBDx"},           /* ... and by a new character */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"}, /* an overlong form: nothing starts with C0 */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* a surrogate */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = through((const unsigned char *)cases[i].in, strlen(cases[i].in), NULL, 0, out,
                             sizeof out);
        EXPECT(len == strlen(cases[i].want) && memcmp(out, cases[i].want, len) == 0, "case %zu", i);
    }
    /* random bytes in random pieces always print as valid UTF-8 */
    unsigned char junk[400];
    char big[2000];
    for (int trial = 0; trial < 2000; trial++) {
        size_t m = 1 + rnd(sizeof junk - 1), cuts[8];
        for (size_t i = 0; i < m; i++)
            junk[i] = (unsigned char)(rnd(3) ? 0x80 + rnd(0x80) : rnd(256));
        for (int c = 0; c < 8; c++) cuts[c] = rnd((uint32_t)m + 1);
        for (int a = 0; a < 8; a++) /* sorted */
            for (int c = a + 1; c < 8; c++)
                if (cuts[c] < cuts[a]) {
                    size_t t = cuts[a];
                    cuts[a] = cuts[c];
                    cuts[c] = t;
                }
        size_t len = through(junk, m, cuts, 8, big, sizeof big), bad;
        td_err e;
        EXPECT(td_utf8_check((const unsigned char *)big, len, &bad, &e) == 0, "trial %d: %s", trial,
               e.msg);
    }
    printf("ok   td_utf8_out: split characters held, broken bytes U+FFFD, output always UTF-8\n");
}

static void test_parser(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2.bpe", dir);
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "%s: cannot open", path);
    unsigned char *p = malloc(400000), *q = malloc(400000);
    size_t n = fread(p, 1, 400000, f);
    fclose(f);
    td_bpe_file bf;
    td_err e;
    EXPECT(td_bpe_file_parse(p, n, &bf, &e) == 0 && bf.n_ranks == 50256 && bf.n_special == 1,
           "data/gpt2.bpe does not parse");
    td_bpe_file_free(&bf);
    /* each corruption, with the checksum made right again where it is not
     * the point, must be refused for its own reason */
    struct {
        const char *what;
        size_t at;
        unsigned char val;
        int fix;
        size_t len;
    } cases[] = {
        {"not a trident BPE rank file", 0, 'X', 0, 0},
        {"checksum mismatch", 40000, 'Z', 0, 0},
        {"truncated", 0, 0, 0, 1000},
        {"bytes after the last special token", 0, 0, 1, 1},
        {"has length 0", 32 + 300, 0, 1, 0},
        {"n_ranks", 11, 0x7F, 0, 0},
        {"header field at offset 20", 20, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t m = n;
        memcpy(q, p, n);
        if (cases[i].len == 1)
            q[m++] = 0; /* one byte too many */
        else if (cases[i].len)
            m = cases[i].len;
        else
            q[cases[i].at] = cases[i].val;
        if (cases[i].fix) {
            uint64_t h = td_xxh3(q + 32, m - 32);
            for (int k = 0; k < 8; k++) q[24 + k] = (unsigned char)(h >> (8 * k));
        }
        int rc = td_bpe_file_parse(q, m, &bf, &e);
        EXPECT(rc != 0 && strstr(e.msg, cases[i].what), "%s: rc %d, '%s'", cases[i].what, rc,
               rc ? e.msg : "");
        if (rc == 0) td_bpe_file_free(&bf);
    }
    printf("ok   parser: data/gpt2.bpe parses; magic, checksum, truncation, trailing bytes, sizes "
           "refused\n");
    free(p), free(q);
}

int main(int argc, char **argv) {
    TD_CHECK(argc == 2, "usage: test_bpe_unit DATA_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2.bpe", argv[1]);
    td_bpe *b;
    td_err e;
    TD_CHECK(td_bpe_load(path, TD_BPE_GPT2, &b, &e) == 0, "%s: %s", path, e.msg);
    test_merge(b);
    if (!fails)
        printf("ok   merge: scan, heap and tiktoken's literal merge agree on 3000 pieces up to "
               "1001 bytes\n");
    test_roundtrip(b, 300000, 0);
    test_roundtrip(b, 100000, 1);
    /* the other patterns: smaller texts, their tables take longer to build */
    for (int k = TD_BPE_CL100K; k <= TD_BPE_O200K; k++) {
        td_bpe *other;
        snprintf(path, sizeof path, "%s/%s.bpe", argv[1], td_bpe_kind_name((td_bpe_kind)k));
        TD_CHECK(td_bpe_load(path, (td_bpe_kind)k, &other, &e) == 0, "%s: %s", path, e.msg);
        test_roundtrip(other, 100000, 0);
        test_roundtrip(other, 50000, 1);
        td_bpe_free(other);
    }
    test_utf8_out();
    test_parser(argv[1]);
    td_bpe_free(b);
    printf(fails ? "bpe unit: %d FAILED\n" : "bpe unit: all passed\n", fails);
    return fails != 0;
}
