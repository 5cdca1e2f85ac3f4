/* --tokenizer FILE.json (src/data/bpe_hfjson.c, bpe_regex.c) against
 * --tokenizer gpt2 (data/gpt2.bpe, itself tested against js-tiktoken):
 * GPT-2's tokenizer.json is built here from the shipped GPT-2 files
 * (vocab.json and merges.txt as bpe_hf.c exports them, wrapped the way
 * Hugging Face's GPT-2 tokenizer.json wraps them) in three forms, and each
 * must encode the tiny Shakespeare text and a generated stress text token
 * for token as gpt2 does:
 *   bytelevel  ByteLevel(use_regex) pre-tokenizer (GPT-2's pattern implied),
 *              merges as "a b" strings, ignore_merges false (the merges list
 *              alone decides; no whole-piece lookup);
 *   split      Sequence[Split(Regex: GPT-2's pattern, Isolated),
 *              ByteLevel(use_regex false)] (Llama 3's layout), merges as
 *              [a, b] pairs, ignore_merges true;
 *   permuted   bytelevel with the merged tokens' ids reversed, so ids no
 *              longer follow merge order: the ids must be gpt2's mapped
 *              through the same permutation (merge priority comes from the
 *              merges list, not from the ids).
 * Also: 1 thread == 2 threads (split), decode(encode(x)) == x, vocabulary 50257,
 * <|endoftext|> 50256; and bad files refused with the field named.
 * The stress text avoids the code points whose class (\p{L}, \p{N}, \s)
 * differs between PCRE2's Unicode tables and the JavaScript ones that gpt2
 * follows (it counts and prints them: newer Unicode letters, U+0085,
 * U+FEFF...). Usage: test_bpe_hfjson DATA_DIR TMPDIR [MAX_BYTES] (a prefix of
 * the Shakespeare text, for the sanitizer build); test_bpe_hfjson write
 * bytelevel|split OUT.json writes that form of the file (test_hfjson_cli.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/data/bpe_internal.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/formats_data.h"
#include "../unit/test_util.h"
#include "pcre2_class.h"

/* The stress text's choices: trident's counter-based generator (base.h). */
static uint64_t draws;
static uint32_t rnd(uint32_t n) { return (uint32_t)(td_rng_u64(2026, 12, draws++) % n); }

/* ---- a growing buffer ---------------------------------------------------- */

typedef struct {
    char *s;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        TD_CHECK(b->s, "out of memory");
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

/* s[0..n) as a JSON string literal ('"' and '\\' escaped; the text holds
 * no control characters) */
static void put_json_str(buf *b, const char *s, size_t n) {
    puts_(b, "\"");
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') puts_(b, "\\");
        put(b, s + i, 1);
    }
    puts_(b, "\"");
}

/* ---- GPT-2's tokenizer.json from the shipped files ----------------------- */

enum { FORM_BYTELEVEL, FORM_SPLIT, FORM_PERMUTED };
static const char *form_name[] = {"bytelevel", "split", "permuted"};

static const char gpt2_pattern_json[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\\\p{L}+| ?\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+";

/* The permuted form's id of gpt2 id: merged tokens (256 .. 50255) reversed. */
static int permute(int id) { return id >= 256 && id < TD_GPT2_EOT ? TD_GPT2_EOT - 1 - (id - 256) : id; }

/* Token `id`'s bytes in the byte-level alphabet, as UTF-8. */
static void put_alphabet(buf *b, const unsigned char *p, int n) {
    for (int i = 0; i < n; i++) {
        unsigned char u[4];
        put(b, u, (size_t)td_utf8_put(td_bpe_byte_char(p[i]), u));
    }
}

static int same_id(int id) { return id; }

/* vocab.json entries "token": new_id(id), for gpt2's ids 0 .. n-1, each
 * followed by ", " */
static void put_vocab(buf *b, const td_bpe *g, int n, int (*new_id)(int)) {
    for (int id = 0; id < n; id++) {
        int len;
        const unsigned char *p = td_bpe_token(g, id, &len);
        buf t = {0};
        put_alphabet(&t, p, len);
        put_json_str(b, t.s, t.n);
        char num[32];
        snprintf(num, sizeof num, ": %d, ", new_id(id));
        puts_(b, num);
        free(t.s);
    }
}

/* A tokenizer's vocab.json text, merges.txt text (its line count) and
 * the id of <|endoftext|>, to wrap as a tokenizer.json. */
typedef struct {
    char *vocab, *merges_txt;
    int merges, eot;
} hf_files;

/* GPT-2's, exported by bpe_hf.c from data/gpt2.bpe; with `permuted`, the
 * vocabulary's ids go through permute(). */
static hf_files gpt2_files(const td_bpe *g, int permuted) {
    td_err e;
    size_t len;
    hf_files f = {NULL, NULL, 0, TD_GPT2_EOT};
    f.merges_txt = td_bpe_hf_merges_txt(g, &len, &f.merges, &e);
    TD_CHECK(f.merges_txt, "exporting GPT-2's merges.txt: %s", e.msg);
    if (!permuted) {
        f.vocab = td_bpe_hf_vocab_json(g, &len, &e); /* encoder.json as OpenAI published it */
        TD_CHECK(f.vocab, "exporting GPT-2's vocab.json: %s", e.msg);
        return f;
    }
    buf b = {0};
    puts_(&b, "{");
    put_vocab(&b, g, td_bpe_vocab(g), permute);
    b.n -= 2; /* the last ", " */
    puts_(&b, "}");
    f.vocab = b.s;
    return f;
}

/* A small tokenizer: the 256 bytes in GPT-2's order, three merges that
 * make " the" and one that makes "12" (the bad files are edits of it: quick
 * to load). */
static hf_files mini_files(const td_bpe *g) {
    buf b = {0};
    puts_(&b, "{");
    put_vocab(&b, g, 256, same_id);
    puts_(&b, "\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"<|endoftext|>\": 259, "
              "\"12\": 260}");
    hf_files f = {b.s, strdup("#version: 0.2\n\xC4\xA0 t\nh e\n\xC4\xA0t he\n1 2\n"), 4, 259};
    return f;
}

static char *tokenizer_json(const hf_files *f, int form) {
    buf b = {0};
    char head[200];
    snprintf(head, sizeof head, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n "
             "\"added_tokens\": [{\"id\": %d, ", f->eot);
    puts_(&b, head);
    puts_(&b, "\"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": "
              "false, \"rstrip\": false, \"normalized\": true, \"special\": true}],\n"
              " \"normalizer\": null,\n \"pre_tokenizer\": ");
    if (form == FORM_SPLIT)
        puts_(&b, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                  "{\"Regex\": \"");
    if (form == FORM_SPLIT) puts_(&b, gpt2_pattern_json);
    puts_(&b, form == FORM_SPLIT
                  ? "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                    "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}"
                  : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                    "\"use_regex\": true}");
    puts_(&b, ",\n \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
              "\"trim_offsets\": false, \"use_regex\": true},\n \"decoder\": {\"type\": "
              "\"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": "
              "true},\n \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
              "\"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": \"\", \"fuse_unk\": "
              "false, \"byte_fallback\": false, \"ignore_merges\": ");
    puts_(&b, form == FORM_SPLIT ? "true" : "false");
    puts_(&b, ",\n  \"vocab\": ");
    puts_(&b, f->vocab);
    puts_(&b, ",\n  \"merges\": [");
    /* merges.txt: "#version: 0.2\n", then "left right\n" lines */
    /* memchr, not strchr: a sanitizer's strchr measures the whole rest */
    char *end = f->merges_txt + strlen(f->merges_txt);
    char *line = (char *)memchr(f->merges_txt, '\n', (size_t)(end - f->merges_txt)) + 1;
    for (int k = 0; k < f->merges; k++) {
        char *nl = memchr(line, '\n', (size_t)(end - line)), *sp = memchr(line, ' ', (size_t)(nl - line));
        if (k) puts_(&b, ", ");
        if (form == FORM_SPLIT) {
            puts_(&b, "[");
            put_json_str(&b, line, (size_t)(sp - line));
            puts_(&b, ", ");
            put_json_str(&b, sp + 1, (size_t)(nl - sp - 1));
            puts_(&b, "]");
        } else {
            put_json_str(&b, line, (size_t)(nl - line));
        }
        line = nl + 1;
    }
    puts_(&b, "]}}\n");
    return b.s;
}

static char *gpt2_tokenizer_json(const td_bpe *g, int form) {
    hf_files f = gpt2_files(g, form == FORM_PERMUTED);
    char *json = tokenizer_json(&f, form);
    free(f.vocab), free(f.merges_txt);
    return json;
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    TD_CHECK(f && fwrite(text, 1, n, f) == n && fclose(f) == 0, "%s: cannot write", path);
}

static unsigned char *read_all(const char *path, size_t *n) {
    td_err e;
    unsigned char *p = td_bpe_read_file(path, n, &e);
    TD_CHECK(p, "%s: %s", path, e.msg);
    return p;
}

/* ---- the stress text ------------------------------------------------------ */

/* gpt2's pattern sees letters, numbers, \s and the rest (marks too) */
static int coarse(int c) {
    return TD_UC_BIT(c) & TD_UCS_LETTER ? 1 : c == TD_UC_NUMBER ? 2 : c == TD_UC_SPACE ? 3 : 0;
}

/* Random fragments (contractions, whitespace runs, digits, punctuation,
 * emoji with joiners, several scripts) and random code points from the BMP
 * and beyond; code points the two engines' tables disagree on left out. */
static char *stress_text(size_t want, size_t *len, int *disagree) {
    static const char *const frag[] = {
        "don't", "I'm", "we'll", "they've", "you're", "she'd", "it's", "'S", "'T", "''s", "!!'s",
        "   ", "\t\t", "\n\n\n", " \n ", "\r\n", "  \t \n", " ", "\xC2\xA0", "\xE3\x80\x80",
        "123", "4567890", " 42", "\xD9\xA3\xD9\xA4", "\xE2\x85\xA0\xE2\x85\xA1", "\xC2\xBD",
        "...", "?!", " --", "#$%", "@@", "\xF0\x9F\x98\x80", "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0"
        "\x9F\x92\xBB", "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7", "\xE2\x9D\xA4\xEF\xB8\x8F",
        "na\xC3\xAFve", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82", "\xE6\x97\xA5\xE6\x9C"
        "\xAC\xE8\xAA\x9E", "\xD8\xA7\xD9\x84\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A\xD8\xA9",
        "e\xCC\x81", "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\x82\xE0\xA4\xA6\xE0\xA5\x80", "Hello",
        " world", "x", "<|endoftext|>", "\xEF\xBF\xBD"};
    pcre2_classes pc;
    pcre2_classes_init(&pc);
    buf b = {0};
    *disagree = 0;
    while (b.n < want) {
        uint32_t r = rnd(10);
        if (r < 6) {
            puts_(&b, frag[rnd(sizeof frag / sizeof *frag)]);
            continue;
        }
        uint32_t cp = r < 8 ? 0x20 + rnd(0x3000) : r < 9 ? rnd(0x10000) : 0x10000 + rnd(0x30000);
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (coarse(pcre2_class_of(&pc, cp)) != coarse(td_bpe_uc_class(cp))) {
            ++*disagree;
            continue;
        }
        unsigned char u[4];
        put(&b, u, (size_t)td_utf8_put(cp, u));
    }
    pcre2_classes_free(&pc);
    *len = b.n;
    return b.s;
}

/* ---- comparisons ---------------------------------------------------------- */

static size_t encode(const td_bpe *b, const unsigned char *s, size_t n, int threads, int **ids) {
    td_bpe_enc *encs[2];
    for (int t = 0; t < threads; t++) encs[t] = td_bpe_enc_new(b);
    *ids = malloc(sizeof(int) * (n ? n : 1));
    size_t k = td_bpe_encode_threads(encs, threads, s, n, *ids);
    for (int t = 0; t < threads; t++) td_bpe_enc_free(encs[t]);
    return k;
}

/* h's tokens of s[0..n) against gpt2's (want[0..kw)); 2 threads too for
 * the split form (the threads' path is the same for every regex form). */
static void compare(const td_bpe *h, int form, const char *name, const unsigned char *s, size_t n,
                    const int *want, size_t kw) {
    int *have, *have2 = NULL;
    size_t kh = encode(h, s, n, 1, &have), i = 0;
    size_t kh2 = form == FORM_SPLIT ? encode(h, s, n, 2, &have2) : kh;
    while (i < kw && i < kh && have[i] == (form == FORM_PERMUTED ? permute(want[i]) : want[i])) i++;
    TU_EXPECT(i == kw && kw == kh, "%s, %s: %zu tokens, gpt2 %zu; first difference at token %zu "
           "(%d, gpt2 %d)", form_name[form], name, kh, kw, i, i < kh ? have[i] : -1,
           i < kw ? want[i] : -1);
    TU_EXPECT(kh2 == kh && (!have2 || memcmp(have, have2, kh * sizeof *have) == 0),
           "%s, %s: 2 threads give other tokens than 1", form_name[form], name);
    size_t at = 0;
    int round = 1;
    for (size_t t = 0; t < kh && round; t++) { /* decode(encode(x)) == x */
        int len;
        const unsigned char *p = td_bpe_token(h, have[t], &len);
        round = p && at + (size_t)len <= n && memcmp(s + at, p, (size_t)len) == 0;
        at += round ? (size_t)len : 0;
    }
    TU_EXPECT(round && at == n, "%s, %s: decoding the tokens does not give the text back",
           form_name[form], name);
    if (i == kw && kw == kh)
        printf("ok   %-9s %-16s %zu bytes: %zu tokens equal gpt2's%s;%s decodes back\n",
               form_name[form], name, n, kh, form == FORM_PERMUTED ? " (through the permutation)" : "",
               have2 ? " 2 threads equal;" : "");
    free(have), free(have2);
}

/* ---- bad files ------------------------------------------------------------ */

/* text with the first `from` replaced by `to` */
static char *edit(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    TD_CHECK(at, "edit: '%s' not in the file", from);
    buf b = {0};
    put(&b, text, (size_t)(at - text));
    puts_(&b, to);
    puts_(&b, at + strlen(from));
    return b.s;
}

/* The tokens of text under tokenizer.json `json` (written to path);
 * -1 when it does not load. */
static int encode_with(const char *json, const char *path, const char *text, int *ids, int *vocab) {
    write_file(path, json, strlen(json));
    td_bpe *b;
    td_err e;
    int rc = td_bpe_load_hf(path, &b, NULL, &e);
    unlink(path);
    TU_EXPECT(rc == 0, "a small tokenizer: %s", rc ? e.msg : "");
    if (rc != 0) return -1;
    td_bpe_enc *enc = td_bpe_enc_new(b);
    int k = (int)td_bpe_encode(enc, (const unsigned char *)text, strlen(text), ids);
    *vocab = td_bpe_vocab(b);
    td_bpe_enc_free(enc);
    td_bpe_free(b);
    return k;
}

/* The small tokenizer, and its pre-tokenizer made a Sequence of a literal
 * Split or Digits before ByteLevel: each changes where pieces end, so the
 * merges see other pieces. Ids: 'e' 68, 'h' 71, 'a' 64, '1' 16, '2' 17. */
static void test_small_files(const char *good, const char *path) {
    static const char bytelevel[] = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                                    "\"trim_offsets\": true, \"use_regex\": true}";
    static const struct {
        const char *pre, *text, *what;
        int n, ids[6];
    } cases[] = {
        {NULL, " the the", "ByteLevel: \" the\" twice, each merged by three merges", 2, {258, 258}},
        {NULL, "a12", "ByteLevel: \"a\", \"12\" (merged)", 2, {64, 260}},
        {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": "
         "\"e\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
         "\"use_regex\": false}]}", " the the", "Split on the string \"e\": \" th\" \"e\" twice",
         6, {256, 71, 68, 256, 71, 68}},
        {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": "
         "true}, {\"type\": \"ByteLevel\", \"use_regex\": true}]}", "a12", "Digits (individual): \"a\" "
         "\"1\" \"2\"", 3, {64, 16, 17}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char *json = cases[c].pre ? edit(good, bytelevel, cases[c].pre) : strdup(good);
        int ids[16] = {0}, vocab = 0, k = encode_with(json, path, cases[c].text, ids, &vocab);
        int same = k == cases[c].n && memcmp(ids, cases[c].ids, sizeof(int) * (size_t)k) == 0;
        TU_EXPECT(same && vocab == 261, "small tokenizer, %s: %d tokens (%d %d %d ...), vocabulary %d",
                  cases[c].what, k, ids[0], ids[1], ids[2], vocab);
        if (same) printf("ok   a small tokenizer.json, %s\n", cases[c].what);
        free(json);
    }
}

static void test_bad_files(const td_bpe *g, const char *dir) {
    hf_files mini = mini_files(g);
    char *good = tokenizer_json(&mini, FORM_BYTELEVEL), path[4200];
    free(mini.vocab), free(mini.merges_txt);
    snprintf(path, sizeof path, "%s/mini.json", dir);
    test_small_files(good, path);
    td_bpe *b;
    td_err e;
    int rc;
    static const struct {
        const char *from, *to, *what;
    } cases[] = {
        {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type WordPiece is not supported"},
        {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer (type NFC)"},
        {"\"byte_fallback\": false", "\"byte_fallback\": true", "model.byte_fallback"},
        {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout"},
        {"\"merges\": [\"", "\"merges\": [\"Zq\\u00e9\\u00e9 x\", \"", "model.merges[0]: \"Zq"},
        {"\"merges\": [\"", "\"merges\": [\"a b c\", \"", "model.merges[0]: \"a b c\" is not two"},
        {"\"merges\": [\"", "\"merges\": [\"\\u0120the \\u0120the\", \"", "joined is not a token"},
        {"\"type\": \"ByteLevel\", \"add_prefix_space\": false", "\"type\": \"Metaspace\", "
         "\"add_prefix_space\": false", "pre_tokenizer type Metaspace is not supported"},
        {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false",
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true",
         "add_prefix_space is true"},
        {"\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"WordPiece\"",
         "decoder type WordPiece"},
        {"\"vocab\": {", "\"vocab\": {\"\\u20ac\": 3, ", "both have id 3"},
        {"\"vocab\": {", "\"vocab\": {\"\\u20ac\": 60000, ", "outside the byte-level alphabet"},
        {"\"vocab\": {\"!\": 0, ", "\"vocab\": {", "no token for byte 0x21"},
        {"\"model\": {", "\"model\": {\"x\": [1, 2,], ", "not valid JSON: byte"},
        {"\"added_tokens\": [{\"id\": 259", "\"added_tokens\": [{\"id\": -1", "added_tokens[0]: field id"},
    };
    snprintf(path, sizeof path, "%s/bad.json", dir);
    int ok = 0, n = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n; i++) {
        char *t = edit(good, cases[i].from, cases[i].to);
        write_file(path, t, strlen(t));
        free(t);
        int rc = td_bpe_load_hf(path, &b, NULL, &e);
        TU_EXPECT(rc != 0 && strstr(e.msg, cases[i].what), "bad file %d: rc %d, '%s', want '%s'", i,
               rc, rc ? e.msg : "", cases[i].what);
        if (rc == 0) td_bpe_free(b);
        else ok++, printf("       refused: %s\n", e.msg);
    }
    /* truncated JSON, and a Split regex PCRE2 cannot compile */
    write_file(path, good, strlen(good) / 2);
    rc = td_bpe_load_hf(path, &b, NULL, &e);
    TU_EXPECT(rc != 0 && strstr(e.msg, "not valid JSON"), "truncated: rc %d '%s'", rc, rc ? e.msg : "");
    ok += rc != 0;
    free(good);
    printf(ok == n + 1 ? "ok   %d bad files refused, each naming the field\n" : "", ok);
}

/* The pieces one Split stage of the regex in pattern_file cuts text into:
 * their end offsets as uint32 into out (test_hfjson_regex.py). */
static void add_piece_end(void *ctx, size_t start, size_t end) {
    (void)start;
    uint32_t e = (uint32_t)end;
    TD_CHECK(fwrite(&e, 4, 1, ctx) == 1, "split: write failed");
}

static int split_tool(const char *pattern_file, const char *text_file, const char *out) {
    size_t np, n, bad;
    char *pattern = (char *)read_all(pattern_file, &np);
    unsigned char *text = read_all(text_file, &n);
    td_err e;
    TD_CHECK(td_utf8_check(text, n, &bad, &e) == 0, "%s: %s", text_file, e.msg);
    while (np && (pattern[np - 1] == '\n')) np--;
    td_bpe_regex *r = td_bpe_regex_new();
    TD_CHECK(r && td_bpe_regex_add(r, pattern, np, 0, &e) == 0, "%s: %s", pattern_file, e.msg);
    td_bpe_regex_scratch *sc = td_bpe_regex_scratch_new(r);
    FILE *f = fopen(out, "wb");
    TD_CHECK(f, "%s: cannot write", out);
    td_bpe_regex_split(r, sc, text, n, add_piece_end, f);
    TD_CHECK(fclose(f) == 0, "%s: write failed", out);
    td_bpe_regex_scratch_free(sc), td_bpe_regex_free(r), free(pattern), free(text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "write") == 0) { /* for test_hfjson_cli.sh */
        int form = strcmp(argv[2], "split") == 0 ? FORM_SPLIT : FORM_BYTELEVEL;
        char *json = gpt2_tokenizer_json(td_bpe_gpt2(), form);
        write_file(argv[3], json, strlen(json));
        free(json);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "stress") == 0) { /* for test_hfjson_regex.py */
        int disagree;
        size_t n;
        char *text = stress_text(200000, &n, &disagree);
        write_file(argv[2], text, n);
        free(text);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "split") == 0) return split_tool(argv[2], argv[3], argv[4]);
    TD_CHECK(argc == 3 || argc == 4, "usage: test_bpe_hfjson DATA_DIR TMPDIR [MAX_BYTES] | write "
             "bytelevel|split OUT.json | stress OUT | split PATTERN_FILE TEXT OUT");
    char path[4200], tmpl[4200];
    snprintf(tmpl, sizeof tmpl, "%s/hfjson.XXXXXX", argv[2]);
    const char *dir = mkdtemp(tmpl);
    TD_CHECK(dir, "%s: cannot make a directory", tmpl);
    const td_bpe *g = td_bpe_gpt2();
    snprintf(path, sizeof path, "%s/tinyshakespeare.txt", argv[1]);
    size_t nshake, nstress;
    size_t limit = argc == 4 ? (size_t)atol(argv[3]) : SIZE_MAX;
    unsigned char *shake = read_all(path, &nshake);
    /* the sanitizer build reads a prefix (an ASCII text: any cut is UTF-8) */
    if (limit < nshake) nshake = limit;
    int disagree;
    char *stress = stress_text(limit < 200000 ? limit : 200000, &nstress, &disagree);
    size_t bad;
    td_err e;
    TD_CHECK(td_utf8_check((unsigned char *)stress, nstress, &bad, &e) == 0, "stress: %s", e.msg);
    printf("ok   stress text: %zu bytes; %d random code points left out where PCRE2's class "
           "differs from gpt2's\n", nstress, disagree);
    int *want_shake, *want_stress;
    size_t kw_shake = encode(g, shake, nshake, 1, &want_shake);
    size_t kw_stress = encode(g, (unsigned char *)stress, nstress, 1, &want_stress);
    for (int form = 0; form < 3; form++) {
        char *json = gpt2_tokenizer_json(g, form);
        snprintf(path, sizeof path, "%s/%s.json", dir, form_name[form]);
        write_file(path, json, strlen(json));
        td_bpe *h;
        int rc = td_bpe_load_hf(path, &h, NULL, &e);
        TU_EXPECT(rc == 0, "%s: %s", form_name[form], rc ? e.msg : "");
        if (rc != 0) continue;
        TU_EXPECT(td_bpe_vocab(h) == TD_GPT2_VOCAB && td_bpe_eot(h) == TD_GPT2_EOT &&
                   td_bpe_bos(h) == TD_GPT2_EOT,
               "%s: vocabulary %d, <|endoftext|> %d, document start %d", form_name[form],
               td_bpe_vocab(h), td_bpe_eot(h), td_bpe_bos(h));
        compare(h, form, "tinyshakespeare", shake, nshake, want_shake, kw_shake);
        compare(h, form, "stress", (unsigned char *)stress, nstress, want_stress, kw_stress);
        td_bpe_free(h);
        free(json);
        unlink(path);
    }
    test_bad_files(g, dir);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    unlink(path);
    rmdir(dir);
    free(shake), free(stress), free(want_shake), free(want_stress);
    return tu_finish("hf tokenizer.json");
}
