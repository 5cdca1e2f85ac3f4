/* data.json (src/formats/data_manifest.c), the manifest tokenize writes:
 * a written manifest parses back field for field; every edit the parser
 * must refuse is refused naming its field; and every truncation, and every
 * byte of a valid text replaced by each of five characters, each parsed
 * from a buffer of exactly its length (so the sanitizer build sees any
 * read past it), is refused or accepted without a leak, an accepted one
 * formatting back to text that parses to the same manifest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "trident/formats_data_manifest.h"

static td_dm_shard shards[3] = {
    {"fort_train_000000.bin", 0, 1024 + 2 * 300, 300, 0x1ca1fb772001fbc3ULL},
    {"fort_train_000001.bin", 0, 1024 + 2 * 120, 120, 0xf91508949c1cf87eULL},
    {"fort_val_000000.bin", 1, 1024 + 2 * 45, 45, 0x0000000000000001ULL},
};

static td_data_manifest sample(void) {
    td_data_manifest m;
    memset(&m, 0, sizeof m);
    strcpy(m.tokenizer, "gpt2");
    m.vocab = 50257;
    m.tokens = 465, m.documents = 3;
    m.split_tokens[0] = 420, m.split_tokens[1] = 45;
    m.split_documents[0] = 2, m.split_documents[1] = 1;
    m.split_shards[0] = 2, m.split_shards[1] = 1;
    m.n_shards = 3;
    m.shards = shards;
    return m;
}

/* Equal manifests format to the same text (every field is written). */
static int same(const td_data_manifest *a, const td_data_manifest *b) {
    size_t na, nb;
    char *ta = td_data_manifest_format(a, &na), *tb = td_data_manifest_format(b, &nb);
    int eq = ta && tb && na == nb && memcmp(ta, tb, na) == 0;
    free(ta);
    free(tb);
    return eq;
}

/* Parses text[0..n) from a heap copy of exactly n bytes. */
static int parse_exact(const char *text, size_t n, td_data_manifest *m, td_err *e) {
    char *copy = malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, text, n);
    int rc = td_data_manifest_parse(copy, n, m, e);
    free(copy);
    return rc;
}

/* The text with the first `from` replaced by `to`, refused with `want`. */
static void refused(const char *text, const char *from, const char *to, const char *want) {
    const char *at = strstr(text, from);
    TU_EXPECT(at, "the sample has no '%s'", from);
    if (!at) return;
    char buf[4096];
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    td_data_manifest m;
    td_err e = {0};
    int rc = parse_exact(buf, strlen(buf), &m, &e);
    TU_EXPECT(rc == -1 && strstr(e.msg, want), "'%s' -> '%s': rc %d, '%s' (want '%s')", from, to, rc, e.msg, want);
    TU_EXPECT(m.n_shards == 0 && m.shards == NULL, "'%s' -> '%s': the refused manifest is not zeroed", from, to);
}

int main(void) {
    td_data_manifest m = sample(), back;
    size_t n;
    char *text = td_data_manifest_format(&m, &n);
    TU_EXPECT(text && strlen(text) == n, "format");
    td_err e = {0};
    TU_EXPECT(parse_exact(text, n, &back, &e) == 0 && same(&m, &back), "round trip: %s", e.msg);
    TU_EXPECT(td_data_manifest_find(&back, "fort_val_000000.bin") == &back.shards[2] &&
                  !td_data_manifest_find(&back, "fort_val_000001.bin"),
              "find");
    td_data_manifest_free(&back);

    refused(text, "\"trident-data\"", "\"trident-ckpt\"", "field format: \"trident-ckpt\"; not a trident data manifest");
    refused(text, "\"version\": 1", "\"version\": 2", "field version: 2; this build reads version 1");
    refused(text, "\"documents\": 3", "\"documents\": 4", "field documents: 4, but the splits hold 3");
    refused(text, "\"tokens\": 465", "\"tokens\": 466", "field tokens: 466, but the splits hold 465");
    refused(text, "\"tokens\": 420", "\"tokens\": 421", "field train: 421 tokens in 2 shards, but its shards hold 420");
    refused(text, "\"size\": 1624", "\"size\": 1625", "field size: 1625 bytes, but an llm.c shard of 300 tokens has 1624");
    refused(text, "\"fort_train_000001.bin\"", "\"../x.bin\"", "is not a plain .bin file name of the directory");
    refused(text, "\"fort_train_000001.bin\"", "\"fort.txt\"", "is not a plain .bin file name of the directory");
    refused(text, "\"split\": \"val\"", "\"split\": \"test\"", "field split: \"test\"; valid: train, val");
    refused(text, "\"0000000000000001\"", "\"000000000000001\"", "field xxh3: must be 16 hex digits");
    refused(text, "\"0000000000000001\"", "\"000000000000000g\"", "field xxh3: must be 16 hex digits");
    refused(text, "\"vocab\": 50257", "\"vocab\": 0", "vocab");
    refused(text, "\"tokenizer\": \"gpt2\"", "\"tokenizer\": \"\"", "field tokenizer: \"\" is not a tokenizer name");
    refused(text, "\"val\": {", "\"vax\": {", "field val: missing or not an object");

    /* every truncation is refused */
    int trunc_ok = 1;
    for (size_t k = 0; k < n - 1; k++) { /* n - 1: the final newline is whitespace */
        td_data_manifest t;
        td_err te = {0};
        int rc = parse_exact(text, k, &t, &te);
        if (rc == 0 || !te.msg[0]) {
            trunc_ok = 0;
            printf("truncated to %zu bytes: %s\n", k, rc == 0 ? "accepted" : "no message");
        }
        if (rc == 0) td_data_manifest_free(&t);
    }
    TU_EXPECT(trunc_ok, "every truncation of the %zu bytes refused with a message", n);

    /* every byte replaced by each of five characters: refused with a
     * message, or accepted and stable under a format/parse round trip */
    const char subst[] = "0\"},\\"; /* digits, string ends, structure, escapes */
    int accepted = 0, refusedn = 0, stable = 1;
    char *buf = malloc(n);
    for (size_t k = 0; k < n; k++) {
        for (const char *c = subst; *c; c++) {
            memcpy(buf, text, n);
            if (buf[k] == *c) continue;
            buf[k] = *c;
            td_data_manifest t;
            td_err te = {0};
            if (parse_exact(buf, n, &t, &te) != 0) {
                refusedn++;
                if (!te.msg[0]) stable = 0;
                continue;
            }
            accepted++;
            size_t n2;
            char *t2 = td_data_manifest_format(&t, &n2);
            td_data_manifest u;
            if (!t2 || parse_exact(t2, n2, &u, &te) != 0) {
                stable = 0;
            } else {
                stable &= same(&t, &u);
                td_data_manifest_free(&u);
            }
            free(t2);
            td_data_manifest_free(&t);
        }
    }
    free(buf);
    TU_EXPECT(stable && refusedn > 0, "one-byte changes: %d refused, %d accepted (each stable)", refusedn, accepted);
    printf("one-byte changes of %zu bytes: %d refused with a message, %d accepted and stable\n", n, refusedn, accepted);
    free(text);
    return tu_finish("test_data_manifest");
}
