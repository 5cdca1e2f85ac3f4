/* llm.c's GPT-2 checkpoint header and Hugging Face's GPT-2 config.json
 * (formats_gpt2.h). A file that passes holds a model trident can build
 * (td_gpt_config_finish's ranges), so import can proceed without exits. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_json.h"

static int mul_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static int add_ok(uint64_t a, uint64_t b, uint64_t *r) { return !__builtin_add_overflow(a, b, r); }

uint64_t td_ckpt_numel(int64_t L, int64_t C, int64_t T, int64_t Vp) {
    /* wte [Vp,C] + wpe [T,C] + L x (12 C^2 + 13 C) + ln_f 2C (model.h) */
    if (L < 0 || C < 0 || T < 0 || Vp < 0) return 0;
    uint64_t c = (uint64_t)C, a, b, blk, t;
    if (!mul_ok((uint64_t)Vp, c, &a) || !mul_ok((uint64_t)T, c, &b) || !add_ok(a, b, &t)) return 0;
    if (!mul_ok(c, c, &a) || !mul_ok(a, 12, &a) || !mul_ok(c, 13, &b) || !add_ok(a, b, &blk)) return 0;
    if (!mul_ok(blk, (uint64_t)L, &blk) || !add_ok(t, blk, &t) || !add_ok(t, 2 * c, &t)) return 0;
    return t;
}

/* model.h's limits (TD_MAX_LAYERS, TD_MAX_EMBD, TD_MAX_SEQ, TD_MAX_VOCAB):
 * formats links without the model library */
#define MAX_LAYERS 256
#define MAX_EMBD 65536
#define MAX_SEQ 1048576

#define FAIL(...) return td_err_set(e, __VA_ARGS__)

/* The sizes every GPT-2 file must satisfy; `names` are the file's field
 * names for L, H, C, T, V. */
static int check_sizes(int64_t L, int64_t H, int64_t C, int64_t T, int64_t V,
                       const char *const names[5], td_err *e) {
    const int64_t v[5] = {L, H, C, T, V}, hi[5] = {MAX_LAYERS, MAX_EMBD, MAX_EMBD, MAX_SEQ, TD_VOCAB_MAX};
    for (int k = 0; k < 5; k++)
        if (v[k] < 1 || v[k] > hi[k])
            FAIL("field %s: %" PRId64 ", valid is 1..%" PRId64, names[k], v[k], hi[k]);
    if (C % H) FAIL("field %s: %" PRId64 " is not divisible by field %s %" PRId64, names[2], C, names[1], H);
    return 0;
}

static int32_t get32(const unsigned char *p) {
    uint32_t u = 0;
    for (int i = 0; i < 4; i++) u |= (uint32_t)p[i] << (8 * i);
    return (int32_t)u;
}

int td_llmc_header_parse(const void *buf, size_t avail, uint64_t file_len, td_llmc_header *h,
                         td_err *e) {
    const unsigned char *p = buf;
    memset(h, 0, sizeof *h);
    if (avail < TD_LLMC_HEADER_BYTES || file_len < TD_LLMC_HEADER_BYTES)
        FAIL("header: the file is %" PRIu64 " bytes, shorter than llm.c's %d-byte header (truncated)",
             file_len, TD_LLMC_HEADER_BYTES);
    int32_t magic = get32(p), version = get32(p + 4);
    if (magic != TD_LLMC_MAGIC)
        FAIL("header[0] (magic): %d, want %d; not an llm.c GPT-2 checkpoint", (int)magic, TD_LLMC_MAGIC);
    if (version != TD_LLMC_VERSION_FP32)
        FAIL("header[1] (version): %d; trident reads version 3 (fp32)%s", (int)version,
             version == 5 ? ", not 5 (bf16)" : "");
    h->maxT = get32(p + 8), h->V = get32(p + 12), h->L = get32(p + 16), h->H = get32(p + 20);
    h->C = get32(p + 24), h->Vp = get32(p + 28);
    static const char *const names[5] = {"header[4] (layers)", "header[5] (heads)",
                                         "header[6] (channels)", "header[2] (max_seq_len)",
                                         "header[3] (vocab_size)"};
    if (check_sizes(h->L, h->H, h->C, h->maxT, h->V, names, e)) return -1;
    if (h->Vp < h->V || h->Vp > TD_VOCAB_MAX)
        FAIL("header[7] (padded_vocab_size): %d, valid is %d..%d (at least vocab_size)", (int)h->Vp,
             (int)h->V, TD_VOCAB_MAX);
    h->numel = td_ckpt_numel(h->L, h->C, h->maxT, h->Vp); /* the same 16 tensors */
    uint64_t want = TD_LLMC_HEADER_BYTES + 4 * h->numel; /* < 2^60 within the limits above */
    if (file_len != want)
        FAIL("size: the file is %" PRIu64 " bytes, but its header's sizes need %" PRIu64 " (%s)",
             file_len, want, file_len < want ? "truncated" : "trailing bytes");
    return 0;
}

void td_llmc_header_encode(const td_llmc_header *h, unsigned char out[TD_LLMC_HEADER_BYTES]) {
    memset(out, 0, TD_LLMC_HEADER_BYTES);
    const int32_t f[8] = {TD_LLMC_MAGIC, TD_LLMC_VERSION_FP32, h->maxT, h->V, h->L, h->H, h->C, h->Vp};
    for (int i = 0; i < 8; i++)
        for (int b = 0; b < 4; b++) out[4 * i + b] = (unsigned char)((uint32_t)f[i] >> (8 * b));
}

/* ---- config.json ------------------------------------------------------- */

/* A field that, when present, must have one value for trident's model. */
static int want_str(const td_jv *o, const char *key, const char *a, const char *b, td_err *e) {
    const td_jv *v = td_json_get(o, key);
    if (!v) return 0;
    if (v->type != TD_JV_STR || (strcmp(v->str, a) && (!b || strcmp(v->str, b))))
        FAIL("field %s: trident's GPT-2 needs \"%s\"", key, a);
    return 0;
}
static int want_bool(const td_jv *o, const char *key, int want, td_err *e) {
    const td_jv *v = td_json_get(o, key);
    if (v && (v->type != TD_JV_BOOL || v->boolean != want))
        FAIL("field %s: trident's GPT-2 needs %s", key, want ? "true" : "false");
    return 0;
}

static int parse_fields(const td_jv *o, td_hf_config *c, td_err *e) {
    if (o->type != TD_JV_OBJ) FAIL("the JSON is not an object");
    if (want_str(o, "model_type", "gpt2", NULL, e) ||
        want_str(o, "activation_function", "gelu_new", "gelu_pytorch_tanh", e) ||
        want_bool(o, "tie_word_embeddings", 1, e) ||
        want_bool(o, "scale_attn_by_inverse_layer_idx", 0, e) ||
        want_bool(o, "reorder_and_upcast_attn", 0, e) || want_bool(o, "add_cross_attention", 0, e))
        return -1;
    static const char *const keys[5] = {"n_layer", "n_head", "n_embd", "n_positions", "vocab_size"};
    int64_t *dst[5] = {&c->L, &c->H, &c->C, &c->T, &c->V};
    for (int k = 0; k < 5; k++)
        if (td_json_get_int(o, keys[k], INT64_MIN, INT64_MAX, dst[k], e)) return -1;
    if (check_sizes(c->L, c->H, c->C, c->T, c->V, keys, e)) return -1;
    const td_jv *v = td_json_get(o, "n_inner");
    if (v && v->type != TD_JV_NULL && !(v->type == TD_JV_NUM && v->is_int && v->i == 4 * c->C))
        FAIL("field n_inner: trident's MLP has 4 x n_embd = %" PRId64 " (or null)", 4 * c->C);
    v = td_json_get(o, "layer_norm_epsilon");
    if (v && (v->type != TD_JV_NUM || fabs(v->num - 1e-5) > 1e-12))
        FAIL("field layer_norm_epsilon: trident's LayerNorm uses 1e-05");
    return td_hf_trident_fields_parse(o, c, e);
}

int td_hf_trident_fields_parse(const td_jv *o, td_hf_config *c, td_err *e) {
    const td_jv *v = td_json_get(o, "trident_tokenizer");
    if (!v) return 0;
    /* hf: a tokenizer.json, which an export writes beside config.json */
    static const char *const kinds[] = {"char", "byte", "ids", "gpt2", "cl100k", "o200k", "hf"};
    static const int vocab[] = {0, 256, 0, 50257, 100277, 200019, 0}; /* 0: the model's */
    enum { N = (int)(sizeof kinds / sizeof kinds[0]) };
    int k = 0;
    while (k < N && !(v->type == TD_JV_STR && strcmp(v->str, kinds[k]) == 0)) k++;
    if (k == N)
        FAIL("field trident_tokenizer: valid is \"char\", \"byte\", \"ids\", \"gpt2\", \"cl100k\", \"o200k\" or \"hf\"");
    snprintf(c->tokenizer, sizeof c->tokenizer, "%s", kinds[k]);
    if (vocab[k] && c->V != vocab[k])
        FAIL("field vocab_size: %" PRId64 ", but the %s tokenizer has %d", c->V, kinds[k], vocab[k]);
    if (k != 0) return 0;
    v = td_json_get(o, "trident_chars");
    if (!v || v->type != TD_JV_ARR || v->n != c->V)
        FAIL("field trident_chars: the char tokenizer needs an array of vocab_size (%" PRId64
             ") code points", c->V);
    c->chars = malloc(sizeof *c->chars * (size_t)c->V);
    if (!c->chars) FAIL("field trident_chars: out of memory");
    for (int i = 0; i < v->n; i++) {
        const td_jv *x = &v->items[i];
        if (x->type != TD_JV_NUM || !x->is_int || x->i < 0 || x->i > 0x10FFFF ||
            (x->i >= 0xD800 && x->i <= 0xDFFF) || (i > 0 && x->i <= (int64_t)c->chars[i - 1]))
            FAIL("field trident_chars: entry %d is not a Unicode scalar value above the one before", i);
        c->chars[i] = (uint32_t)x->i;
    }
    return 0;
}

int td_hf_config_parse(const char *text, size_t n, td_hf_config *c, td_err *e) {
    memset(c, 0, sizeof *c);
    td_jv *o;
    td_err je;
    if (td_json_parse(text, n, &o, &je)) FAIL("%s", je.msg);
    int rc = parse_fields(o, c, e);
    td_json_free(o);
    if (rc) td_hf_config_free(c);
    return rc;
}

void td_hf_config_free(td_hf_config *c) {
    free(c->chars);
    memset(c, 0, sizeof *c);
}

int64_t td_hf_eos_id(const td_hf_config *c) {
    if (strcmp(c->tokenizer, "gpt2") == 0) return 50256;
    return c->eot > 0 ? c->eot : -1;
}

/* config.json's "bos_token_id" and "eos_token_id" lines: the id or null */
static void td_hf_bos_eos_format(char *buf, size_t cap, const td_hf_config *c) {
    int64_t id = td_hf_eos_id(c);
    if (id >= 0)
        snprintf(buf, cap, "  \"bos_token_id\": %" PRId64 ",\n  \"eos_token_id\": %" PRId64 ",\n", id, id);
    else
        snprintf(buf, cap, "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n");
}

char *td_hf_config_format(const td_hf_config *c) {
    size_t cap = 2048 + (c->chars ? 12 * (size_t)c->V : 0), len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    char ids[96];
    td_hf_bos_eos_format(ids, sizeof ids, c);
    len += (size_t)snprintf(s, cap,
        "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
        "  \"n_layer\": %" PRId64 ",\n  \"n_head\": %" PRId64 ",\n  \"n_embd\": %" PRId64 ",\n"
        "  \"n_positions\": %" PRId64 ",\n  \"n_ctx\": %" PRId64 ",\n  \"vocab_size\": %" PRId64 ",\n"
        "  \"n_inner\": null,\n  \"activation_function\": \"gelu_new\",\n"
        "  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
        "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
        "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n%s"
        "  \"trident_tokenizer\": \"%s\"",
        c->L, c->H, c->C, c->T, c->T, c->V,
        /* GPT2Config defaults both to 50256: a smaller vocabulary must say it has none */
        ids, c->tokenizer[0] ? c->tokenizer : "ids");
    len = td_hf_trident_chars_format(s, cap, len, c);
    snprintf(s + len, cap - len, "\n}\n");
    return s;
}

size_t td_hf_trident_chars_format(char *s, size_t cap, size_t len, const td_hf_config *c) {
    if (!c->chars) return len;
    len += (size_t)snprintf(s + len, cap - len, ",\n  \"trident_chars\": [");
    for (int64_t i = 0; i < c->V; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s%" PRIu32, i ? ", " : "", c->chars[i]);
    return len + (size_t)snprintf(s + len, cap - len, "]");
}

char *td_hf_generation_config_format(const td_hf_config *c) {
    char *s = malloc(256);
    if (!s) return NULL;
    int64_t id = td_hf_eos_id(c);
    if (id >= 0)
        snprintf(s, 256, "{\n  \"bos_token_id\": %" PRId64 ",\n  \"eos_token_id\": %" PRId64 "\n}\n", id, id);
    else
        snprintf(s, 256, "{\n  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n  "
                         "\"pad_token_id\": null\n}\n");
    return s;
}

char *td_hf_tokenizer_config_format(const td_hf_config *c) {
    char *s = malloc(1024);
    if (!s) return NULL;
    /* clean_up_tokenization_spaces false: decoding gives the text back
     * exactly, as trident's and tiktoken's decoders do */
    snprintf(s, 1024,
             "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %" PRId64 ",\n"
             "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
             "  \"unk_token\": \"<|endoftext|>\",\n  \"pad_token\": null,\n"
             "  \"add_bos_token\": false,\n  \"add_prefix_space\": false,\n  \"errors\": \"replace\",\n"
             "  \"clean_up_tokenization_spaces\": false,\n"
             "  \"added_tokens_decoder\": {\n    \"50256\": {\"content\": \"<|endoftext|>\", \"lstrip\": false, "
             "\"normalized\": true, \"rstrip\": false, \"single_word\": false, \"special\": true}\n  }\n}\n",
             c->T);
    return s;
}

char *td_hf_tokenizer_config_fast_format(const td_hf_config *c) {
    char *s = malloc(1024);
    if (!s) return NULL;
    snprintf(s, 1024,
             "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"model_max_length\": %" PRId64 ",\n"
             "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n  \"pad_token\": null,\n"
             "  \"add_bos_token\": false,\n  \"clean_up_tokenization_spaces\": false,\n"
             "  \"added_tokens_decoder\": {\n    \"%" PRId64 "\": {\"content\": \"<|endoftext|>\", \"lstrip\": false, "
             "\"normalized\": false, \"rstrip\": false, \"single_word\": false, \"special\": true}\n  }\n}\n",
             c->T, c->eot);
    return s;
}

const char td_hf_special_tokens_map[] =
    "{\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
    "  \"unk_token\": \"<|endoftext|>\"\n}\n";
