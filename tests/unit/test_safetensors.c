/* The JSON DOM parser and the safetensors header (formats_json.h,
 * formats_safetensors.h) on exact byte strings: values, escapes and limits
 * of the JSON reader; headers written by td_st_header_format parse back to
 * the same tensors; every rejection (lying offsets, overlap, gap, offsets
 * past the file, element count vs bytes, unknown dtype, duplicate names,
 * bad JSON, a length prefix larger than the file, deep nesting) with the
 * tensor and field its message must name. Expected values are written out
 * by hand; nothing has a tolerance. Also llm.c's GPT-2 header and HF's
 * GPT-2 config.json (formats_gpt2.h): round trips and each rejection. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_gpt2.h"
#include "trident/formats_safetensors.h"
#include "test_util.h"

#define EXPECT TU_EXPECT

/* ---- JSON ---------------------------------------------------------------- */

static void json_bad(const char *text, const char *want) {
    td_jv *v = (td_jv *)&v;
    td_err e = {{0}};
    int rc = td_json_parse(text, strlen(text), &v, &e);
    EXPECT(rc == -1 && v == NULL && strstr(e.msg, want), "json '%.60s': rc %d, message '%s', want '%s'",
           text, rc, e.msg, want);
}

static void test_json(void) {
    const char *text = " {\"a\": [1, -2, 3.5, 1e2, true, false, null, \"x\\n\\u00e9\\ud83d\\ude00\"],"
                       " \"big\": 9223372036854775807, \"neg\": -9223372036854775808,"
                       " \"over\": 9223372036854775808, \"s\": \"\", \"o\": {}} \n";
    td_jv *v;
    td_err e = {{0}};
    EXPECT(td_json_parse(text, strlen(text), &v, &e) == 0, "valid text refused: %s", e.msg);
    if (!v) return;
    const td_jv *a = td_json_get(v, "a");
    EXPECT(v->type == TD_JV_OBJ && v->n == 6 && a && a->type == TD_JV_ARR && a->n == 8, "shape");
    if (a && a->n == 8) {
        EXPECT(a->items[0].is_int && a->items[0].i == 1 && a->items[1].i == -2, "ints");
        EXPECT(!a->items[2].is_int && a->items[2].num == 3.5 && !a->items[3].is_int &&
               a->items[3].num == 100.0, "reals");
        EXPECT(a->items[4].type == TD_JV_BOOL && a->items[4].boolean == 1 &&
               a->items[5].boolean == 0 && a->items[6].type == TD_JV_NULL, "literals");
        /* x, newline, e-acute (2 bytes), U+1F600 (4 bytes) */
        EXPECT(a->items[7].len == 8 && memcmp(a->items[7].str, "x\n\xc3\xa9\xf0\x9f\x98\x80", 9) == 0,
               "escapes decode to len %zu", a->items[7].len);
    }
    int64_t x = 0;
    EXPECT(td_json_get_int(v, "big", 0, INT64_MAX, &x, &e) == 0 && x == INT64_MAX, "int64 max");
    EXPECT(td_json_get_int(v, "neg", INT64_MIN, 0, &x, &e) == 0 && x == INT64_MIN, "int64 min");
    EXPECT(td_json_get_int(v, "over", 0, INT64_MAX, &x, &e) == -1 && strstr(e.msg, "field over: not an integer"),
           "2^63 is not an int64: '%s'", e.msg);
    EXPECT(td_json_get_int(v, "big", 0, 10, &x, &e) == -1 && strstr(e.msg, "field big:") &&
           strstr(e.msg, "out of [0,10]"), "range: '%s'", e.msg);
    EXPECT(td_json_get_int(v, "nope", 0, 10, &x, &e) == -1 && strstr(e.msg, "field nope: missing"), "missing");
    const char *s = NULL;
    EXPECT(td_json_get_str(v, "s", &s, &e) == 0 && s && s[0] == 0, "empty string");
    EXPECT(td_json_get_str(v, "o", &s, &e) == -1 && strstr(e.msg, "field o: not a string"), "type");
    EXPECT(td_json_get(a, "x") == NULL, "get on an array");
    td_json_free(v);

    json_bad("", "byte 0: unexpected end");
    json_bad("{} x", "byte 3: text after");
    json_bad("{\"a\":1,}", "byte 7: expected a key");
    json_bad("[1,]", "byte 3: invalid number");
    json_bad("[01]", "byte 2: expected ','");
    json_bad("+1", "byte 0: invalid number");
    json_bad("[1.]", "byte 1: invalid number");
    json_bad("\"abc", "byte 0: unterminated");
    json_bad("\"a\tb\"", "byte 2: control character");
    json_bad("\"\\x\"", "byte 1: invalid escape");
    json_bad("\"\\ud800\"", "byte 1: unpaired surrogate");
    json_bad("\"\\udc00\\ud800\"", "byte 1: unpaired surrogate");
    json_bad("\"a\xc3\"", "byte 2: invalid UTF-8");
    json_bad("{\"k\\u0000\":1}", "byte 1: key contains");
    json_bad("{\"a\":1,\"b\":2,\"a\":3}", "byte 0: object has the key \"a\" twice");
    json_bad("tru", "byte 0: unexpected character");
    /* depth: 64 nested arrays parse, 65 do not */
    char deep[200];
    for (int d = 64; d <= 65; d++) {
        memset(deep, '[', (size_t)d);
        memset(deep + d, ']', (size_t)d);
        deep[2 * d] = 0;
        td_jv *dv = NULL;
        int rc = td_json_parse(deep, strlen(deep), &dv, &e);
        EXPECT(d == 64 ? rc == 0 : rc == -1 && strstr(e.msg, "byte 64: nesting deeper than 64"),
               "depth %d: rc %d '%s'", d, rc, e.msg);
        td_json_free(dv);
    }
    /* the writer's literals read back */
    char buf[64];
    int n = td_json_put_str(buf, sizeof buf, 0, "q\"\\\n\x01z");
    EXPECT(n == 20 && strcmp(buf, "\"q\\\"\\\\\\u000a\\u0001z\"") == 0, "put_str '%s' %d", buf, n);
    if (n > 0 && td_json_parse(buf, (size_t)n, &v, &e) == 0) {
        EXPECT(strcmp(v->str, "q\"\\\n\x01z") == 0, "put_str round trip");
        td_json_free(v);
    }
    EXPECT(td_json_put_str(buf, 6, 0, "abcd") == -1 && buf[0] == 0, "put_str overflow");
}

/* ---- safetensors ------------------------------------------------------- */

/* A file in memory: u64 N, the header text, `data` zero bytes. */
static unsigned char *file_of(const char *hdr, uint64_t data, uint64_t *len) {
    uint64_t N = strlen(hdr);
    *len = 8 + N + data;
    unsigned char *f = calloc(1, (size_t)*len);
    for (int i = 0; i < 8; i++) f[i] = (unsigned char)(N >> (8 * i));
    memcpy(f + 8, hdr, N);
    return f;
}

/* Both steps as a reader runs them; 0 or -1 with the message in e. */
static int parse_file(const unsigned char *f, uint64_t len, td_st_header *h, td_err *e) {
    uint64_t N;
    memset(h, 0, sizeof *h);
    if (td_st_header_len(f, len, &N, e)) return -1;
    return td_st_header_parse((const char *)f + 8, N, len, h, e);
}

static void st_bad(const char *hdr, uint64_t data, const char *want1, const char *want2) {
    uint64_t len;
    unsigned char *f = file_of(hdr, data, &len);
    td_st_header h;
    td_err e = {{0}};
    int rc = parse_file(f, len, &h, &e);
    EXPECT(rc == -1 && strstr(e.msg, want1) && strstr(e.msg, want2) && h.json == NULL && h.t == NULL,
           "header '%.70s': rc %d, message '%s', want '%s' and '%s'", hdr, rc, e.msg, want1, want2);
    if (rc == 0) td_st_header_free(&h);
    free(f);
}

#define T(name, dt, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":[2,3],\"data_offsets\":[" #b "," #e "]}"

static void test_safetensors(void) {
    /* write a header, append the data, parse it back */
    td_st_tensor t[4] = {{.name = "wte.weight", .dtype = TD_ST_F32, .ndim = 2, .shape = {5, 3}},
                         {.name = "h.0.attn \"q\"", .dtype = TD_ST_BF16, .ndim = 1, .shape = {7}},
                         {.name = "scalar", .dtype = TD_ST_I64, .ndim = 0},
                         {.name = "empty", .dtype = TD_ST_U8, .ndim = 3, .shape = {2, 0, 4}}};
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "a\nb"};
    char *hdr;
    size_t hlen;
    td_err e = {{0}};
    EXPECT(td_st_header_format(t, 4, mk, mv, 2, &hdr, &hlen, &e) == 0, "format: %s", e.msg);
    EXPECT(hlen % 8 == 0 && t[0].begin == 0 && t[0].end == 60 && t[1].begin == 60 && t[1].end == 74 &&
           t[2].begin == 74 && t[2].end == 82 && t[3].begin == 82 && t[3].end == 82,
           "offsets %zu: %llu %llu %llu", hlen, (unsigned long long)t[1].begin,
           (unsigned long long)t[2].begin, (unsigned long long)t[3].end);
    uint64_t len = hlen + 82;
    unsigned char *f = calloc(1, (size_t)len);
    memcpy(f, hdr, hlen);
    td_st_header h;
    EXPECT(parse_file(f, len, &h, &e) == 0, "written header refused: %s", e.msg);
    if (h.json) {
        EXPECT(h.n == 4 && h.n_meta == 2 && h.header_len == hlen - 8 && h.data_off == hlen, "counts");
        for (int k = 0; k < 4; k++) {
            const td_st_tensor *g = td_st_find(&h, t[k].name);
            EXPECT(g && g->dtype == t[k].dtype && g->ndim == t[k].ndim && g->begin == t[k].begin &&
                       g->end == t[k].end && memcmp(g->shape, t[k].shape, sizeof g->shape) == 0,
                   "tensor %s differs after the round trip", t[k].name);
        }
        EXPECT(strcmp(h.t[0].name, "wte.weight") == 0 && h.t[3].begin == 82, "sorted by begin");
        EXPECT(strcmp(h.meta_key[1], "note") == 0 && strcmp(h.meta_val[1], "a\nb") == 0, "metadata");
        EXPECT(td_st_find(&h, "nope") == NULL, "find absent");
        td_st_header_free(&h);
    }
    /* one byte short or long: the last tensor no longer ends at the end */
    EXPECT(parse_file(f, len - 1, &h, &e) == -1 && strstr(e.msg, "tensor \"scalar\"") &&
           strstr(e.msg, "past the 81 bytes"), "truncated: '%s'", e.msg);
    free(f);
    free(hdr);
    EXPECT(td_st_dtype_size(TD_ST_BF16) == 2 && strcmp(td_st_dtype_name(TD_ST_I64), "I64") == 0, "dtypes");

    /* rejections; two F32 [2,3] tensors are 24 bytes each */
    uint64_t ok_len;
    unsigned char *ok = file_of("{" T("b", "F32", 24, 48) "," T("a", "F32", 0, 24) "}", 48, &ok_len);
    EXPECT(parse_file(ok, ok_len, &h, &e) == 0 && h.n == 2 && strcmp(h.t[0].name, "a") == 0,
           "hand-written header: %s", e.msg);
    if (h.json) td_st_header_free(&h);
    free(ok);
    st_bad("{" T("a", "F32", 0, 24) "," T("b", "F32", 24, 40) "}", 40, "tensor \"b\": field data_offsets",
           "holds 16 bytes, but shape and dtype F32 need 24");
    st_bad("{" T("a", "F32", 0, 24) "," T("b", "F32", 16, 40) "}", 40, "tensor \"b\"", "overlaps tensor \"a\"");
    st_bad("{" T("a", "F32", 0, 24) "," T("b", "F32", 32, 56) "}", 56, "tensor \"b\"", "leaving a gap after byte 24");
    st_bad("{" T("a", "F32", 8, 32) "}", 32, "tensor \"a\"", "begins at 8");
    st_bad("{" T("a", "F32", 0, 24) "," T("b", "F32", 24, 48) "}", 40, "tensor \"b\"", "past the 40 bytes");
    st_bad("{" T("a", "F32", 0, 24) "}", 30, "header: the tensors cover 24 bytes", "has 30");
    st_bad("{" T("a", "F32", 24, 0) "}", 24, "tensor \"a\"", "end 0 before begin 24");
    st_bad("{" T("a", "F64", 0, 48) "}", 48, "tensor \"a\": field dtype: \"F64\"", "not one of");
    st_bad("{" T("a", "F32", 0, 24) "," T("a", "F32", 24, 48) "}", 48, "header JSON: byte 0:", "key \"a\" twice");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}", 24, "header JSON:", "expected ','");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "tensor \"a\": field shape",
           "dimension 0 is not a non-negative");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
           "tensor \"a\": field shape", "overflows");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
           "tensor \"a\": field shape", "byte count overflows");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "tensor \"a\": field data_offsets",
           "[begin, end]");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor \"a\": field shape", "missing");
    st_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor \"a\": field dtype", "missing");
    st_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "tensor \"a\"",
           "unknown field \"x\"");
    st_bad("{\"a\":[]}", 0, "tensor \"a\"", "not a JSON object");
    st_bad("[]", 0, "header: the JSON is not an object", "");
    st_bad("{\"__metadata__\":{\"k\":1}}", 0, "field __metadata__", "entry \"k\" is not a string");
    char deep[300] = "{\"__metadata__\":";
    for (int d = 0; d < 70; d++) strcat(deep, "[");
    st_bad(deep, 0, "header JSON: byte", "nesting deeper than 64");
    /* the length prefix: larger than the file, over the cap, too short */
    uint64_t N;
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    EXPECT(td_st_header_len(big, 16, &N, &e) == -1 && strstr(e.msg, "more than the 104857600-byte limit"),
           "cap: '%s'", e.msg);
    unsigned char lie[16] = {9};
    EXPECT(td_st_header_len(lie, 16, &N, &e) == -1 && strstr(e.msg, "header length 9 (+ the 8-byte prefix) exceeds the file's size 16"),
           "lie: '%s'", e.msg);
    EXPECT(td_st_header_len(lie, 7, &N, &e) == -1 && strstr(e.msg, "shorter than the 8-byte"), "short: '%s'", e.msg);
    unsigned char two[16] = {8};
    EXPECT(td_st_header_len(two, 16, &N, &e) == 0 && N == 8, "exact fit");
    td_st_header hh;
    EXPECT(td_st_header_parse("{}", 2, 9, &hh, &e) == -1 && strstr(e.msg, "do not fit a 9-byte file"),
           "parse checks N itself: '%s'", e.msg);
    EXPECT(td_st_header_parse("{}      ", 8, 16, &hh, &e) == 0 && hh.n == 0, "empty file: %s", e.msg);
    td_st_header_free(&hh); /* parsed: its JSON and tables are ours to free */
    /* a length that runs past the JSON into the data: where the text starts */
    EXPECT(td_st_header_parse("{}  \x01\x02", 6, 16, &hh, &e) == -1 &&
               strstr(e.msg, "header length 6 runs past the header's JSON object: text follows it at byte 4 of the header"),
           "past the JSON: '%s'", e.msg);
    td_st_header_free(&hh);
}

/* ---- llm.c header, HF config.json --------------------------------------- */

static void test_gpt2_files(void) {
    td_llmc_header h = {16, 58, 2, 2, 32, 128, 0}, g;
    unsigned char b[TD_LLMC_HEADER_BYTES];
    td_llmc_header_encode(&h, b);
    /* wte 128x32 + wpe 16x32 + 2 x (12 x 32^2 + 13 x 32) + 2 x 32, by hand */
    const uint64_t numel = 4096 + 512 + 2 * (12288 + 416) + 64, len = 1024 + 4 * numel;
    td_err e = {{0}};
    EXPECT(td_llmc_header_parse(b, sizeof b, len, &g, &e) == 0 && g.numel == numel && g.Vp == 128 &&
           g.maxT == 16 && g.V == 58 && g.L == 2 && g.H == 2 && g.C == 32, "llmc round trip: %s", e.msg);
    EXPECT(b[0] == 0xc6 && b[1] == 0xd7 && b[2] == 0x34 && b[3] == 0x01 && b[4] == 3 && b[28] == 128 &&
           b[1023] == 0, "llmc bytes: 20240326 = 0x0134d7c6 little-endian, version 3, Vp 128");
    EXPECT(td_llmc_header_parse(b, sizeof b, len + 4, &g, &e) == -1 && strstr(e.msg, "trailing bytes"), "%s", e.msg);
    EXPECT(td_llmc_header_parse(b, sizeof b, len - 4, &g, &e) == -1 && strstr(e.msg, "(truncated)"), "%s", e.msg);
    EXPECT(td_llmc_header_parse(b, 1000, len, &g, &e) == -1 && strstr(e.msg, "1024-byte header"), "%s", e.msg);
    td_llmc_header bad = h;
    bad.Vp = 57;
    td_llmc_header_encode(&bad, b);
    EXPECT(td_llmc_header_parse(b, sizeof b, len, &g, &e) == -1 && strstr(e.msg, "header[7] (padded_vocab_size): 57"),
           "%s", e.msg);
    bad = h;
    bad.L = 0;
    td_llmc_header_encode(&bad, b);
    EXPECT(td_llmc_header_parse(b, sizeof b, len, &g, &e) == -1 && strstr(e.msg, "header[4] (layers): 0"), "%s", e.msg);
    b[4] = 5;
    EXPECT(td_llmc_header_parse(b, sizeof b, len, &g, &e) == -1 && strstr(e.msg, "not 5 (bf16)"), "%s", e.msg);
    b[0] = 0;
    EXPECT(td_llmc_header_parse(b, sizeof b, len, &g, &e) == -1 && strstr(e.msg, "header[0] (magic)"), "%s", e.msg);

    static uint32_t chars[3] = {10, 65, 0x1F600};
    td_hf_config c = {2, 2, 32, 16, 3, "char", chars, 0}, r;
    char *text = td_hf_config_format(&c);
    EXPECT(text && td_hf_config_parse(text, strlen(text), &r, &e) == 0 && r.L == 2 && r.H == 2 && r.C == 32 &&
           r.T == 16 && r.V == 3 && strcmp(r.tokenizer, "char") == 0 && r.chars && r.chars[2] == 0x1F600,
           "config round trip: %s", e.msg);
    td_hf_config_free(&r);
    free(text);
    const char *base = "\"model_type\":\"gpt2\",\"n_layer\":2,\"n_head\":2,\"n_embd\":32,\"n_positions\":16";
    struct { const char *extra, *want; } cases[] = {
        {",\"vocab_size\":50257}", NULL},
        {"}", "field vocab_size: missing"},
        {",\"vocab_size\":5,\"activation_function\":\"relu\"}", "field activation_function"},
        {",\"vocab_size\":5,\"n_inner\":100}", "field n_inner: trident's MLP has 4 x n_embd = 128"},
        {",\"vocab_size\":5,\"layer_norm_epsilon\":1e-6}", "field layer_norm_epsilon"},
        {",\"vocab_size\":5,\"tie_word_embeddings\":false}", "field tie_word_embeddings"},
        {",\"vocab_size\":0}", "field vocab_size: 0, valid is 1..16777216"},
        {",\"vocab_size\":5,\"trident_tokenizer\":\"byte\"}", "but the byte tokenizer has 256"},
        {",\"vocab_size\":2,\"trident_tokenizer\":\"char\",\"trident_chars\":[66,65]}",
         "field trident_chars: entry 1"},
        {",\"vocab_size\":2,\"trident_tokenizer\":\"char\",\"trident_chars\":[55296,65536]}",
         "field trident_chars: entry 0"},
        {",\"vocab_size\":2,\"trident_tokenizer\":\"char\"}", "field trident_chars: the char tokenizer needs"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char t[512];
        snprintf(t, sizeof t, "{%s%s", base, cases[k].extra);
        int rc = td_hf_config_parse(t, strlen(t), &r, &e);
        EXPECT(cases[k].want ? rc == -1 && strstr(e.msg, cases[k].want) && r.chars == NULL : rc == 0 && r.V == 50257,
               "config %s: rc %d '%s'", cases[k].extra, rc, e.msg);
        if (rc == 0) td_hf_config_free(&r);
    }
    text = "{\"n_layer\":2,\"n_layer\":3}";
    EXPECT(td_hf_config_parse(text, strlen(text), &r, &e) == -1 && strstr(e.msg, "twice"), "dup: %s", e.msg);
}

int main(void) {
    test_json();
    test_safetensors();
    test_gpt2_files();
    printf("test_safetensors: %d checks, %d failures\n", tu_checks, tu_failures);
    return tu_failures != 0;
}
