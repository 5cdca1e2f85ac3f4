/* The checkpoint files: model.bin's header and sections, config.json (see
 * include/trident/formats_ckpt.h). Every check a loader needs lives here,
 * so a file that passes can be used without further checks. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/formats_ckpt.h"

static const char *tok_name(int32_t k) {
    return k == 0 ? "char" : k == 1 ? "byte" : k == 3 ? "gpt2" : "ids";
}

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

static void put32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(u >> (8 * i));
}
static int32_t get32(const unsigned char *p) {
    uint32_t u = 0;
    for (int i = 0; i < 4; i++) u |= (uint32_t)p[i] << (8 * i);
    return (int32_t)u;
}

void td_ckpt_header_encode(const td_ckpt_header *h, unsigned char out[TD_CKPT_HEADER_BYTES]) {
    memcpy(out, TD_CKPT_MAGIC, 8);
    const int32_t f[12] = {h->version, h->layers, h->heads, h->embd, h->seq, h->vocab,
                           h->vocab_padded, h->step, h->tokenizer, h->tokenizer_vocab,
                           h->has_optimizer, h->reserved};
    for (int i = 0; i < 12; i++) put32(out + 8 + 4 * i, f[i]);
    for (int i = 0; i < 8; i++) out[56 + i] = (unsigned char)(h->numel >> (8 * i));
}

#define FAIL(...) return td_err_set(e, __VA_ARGS__)

int td_ckpt_header_parse(const void *buf, size_t avail, uint64_t file_len, td_ckpt_header *h,
                         td_ckpt_layout *lay, td_err *e) {
    const unsigned char *p = buf;
    memset(h, 0, sizeof *h);
    memset(lay, 0, sizeof *lay);
    if (file_len < TD_CKPT_HEADER_BYTES || avail < TD_CKPT_HEADER_BYTES)
        FAIL("field header: the file is %" PRIu64 " bytes, shorter than the %d-byte header (truncated)",
             file_len, TD_CKPT_HEADER_BYTES);
    if (memcmp(p, TD_CKPT_MAGIC, 8) != 0)
        FAIL("field magic: the first 8 bytes are not \"%s\"; not a trident checkpoint", TD_CKPT_MAGIC);
    int32_t *f[12] = {&h->version, &h->layers, &h->heads, &h->embd, &h->seq, &h->vocab,
                      &h->vocab_padded, &h->step, &h->tokenizer, &h->tokenizer_vocab,
                      &h->has_optimizer, &h->reserved};
    for (int i = 0; i < 12; i++) *f[i] = get32(p + 8 + 4 * i);
    for (int i = 0; i < 8; i++) h->numel |= (uint64_t)p[56 + i] << (8 * i);
    if (h->version != TD_CKPT_VERSION)
        FAIL("field version: %d; this build reads version %d", (int)h->version, TD_CKPT_VERSION);
    if (h->layers < 1 || h->layers > TD_CKPT_MAX_LAYERS)
        FAIL("field layers: %d, valid is 1..%d", (int)h->layers, TD_CKPT_MAX_LAYERS);
    if (h->heads < 1) FAIL("field heads: %d, valid is a positive integer", (int)h->heads);
    if (h->embd < 1) FAIL("field embd: %d, valid is a positive integer", (int)h->embd);
    if (h->embd % h->heads)
        FAIL("field embd: %d is not divisible by field heads %d", (int)h->embd, (int)h->heads);
    if (h->seq < 1) FAIL("field seq: %d, valid is a positive integer", (int)h->seq);
    if (h->vocab < 1) FAIL("field vocab: %d, valid is a positive integer", (int)h->vocab);
    int64_t vp = ((int64_t)h->vocab + TD_CKPT_VOCAB_PAD - 1) / TD_CKPT_VOCAB_PAD * TD_CKPT_VOCAB_PAD;
    if (h->vocab_padded != vp)
        FAIL("field vocab_padded: %d, but vocab %d pads to %" PRId64, (int)h->vocab_padded,
             (int)h->vocab, vp);
    if (h->step < 0) FAIL("field step: %d, valid is >= 0", (int)h->step);
    if (h->tokenizer < 0 || h->tokenizer > 3)
        FAIL("field tokenizer: %d, valid is 0 (char), 1 (byte), 2 (ids) or 3 (gpt2)", (int)h->tokenizer);
    if (h->tokenizer_vocab != h->vocab)
        FAIL("field tokenizer_vocab: %d, but field vocab is %d", (int)h->tokenizer_vocab, (int)h->vocab);
    if (h->tokenizer == 1 && h->vocab != 256)
        FAIL("field vocab: %d, but the byte tokenizer has 256", (int)h->vocab);
    if (h->tokenizer == 3 && h->vocab != 50257)
        FAIL("field vocab: %d, but the gpt2 tokenizer has 50257", (int)h->vocab);
    if (h->has_optimizer != 0 && h->has_optimizer != 1)
        FAIL("field has_optimizer: %d, valid is 0 or 1", (int)h->has_optimizer);
    if (h->reserved != 0) FAIL("field reserved: %d, valid is 0", (int)h->reserved);
    uint64_t want = td_ckpt_numel(h->layers, h->embd, h->seq, h->vocab_padded);
    if (want == 0)
        FAIL("field params: layers %d embd %d seq %d vocab_padded %d make a model whose size overflows 64 bits",
             (int)h->layers, (int)h->embd, (int)h->seq, (int)h->vocab_padded);
    if (h->numel != want)
        FAIL("field params: %" PRIu64 " elements, but layers %d embd %d seq %d vocab_padded %d make %" PRIu64,
             h->numel, (int)h->layers, (int)h->embd, (int)h->seq, (int)h->vocab_padded, want);
    uint64_t sec, nsec = h->has_optimizer ? 3 : 1, off = TD_CKPT_HEADER_BYTES;
    lay->vocab_off = off;
    lay->vocab_bytes = h->tokenizer == 0 ? 4 * (uint64_t)h->vocab : 0;
    off += lay->vocab_bytes;
    if (!mul_ok(h->numel, 4, &sec)) FAIL("field params: %" PRIu64 " elements overflow", h->numel);
    lay->params_off = off;
    if (h->has_optimizer) {
        lay->m_off = off + sec; /* cannot overflow once the total below does not */
        lay->v_off = off + 2 * sec;
    }
    if (!mul_ok(sec, nsec, &sec) || !add_ok(off, sec, &lay->total))
        FAIL("field params: %" PRIu64 " elements overflow the file size", h->numel);
    if (file_len < lay->total)
        FAIL("field params: the file is %" PRIu64 " bytes but its header needs %" PRIu64 " (truncated)",
             file_len, lay->total);
    if (file_len > lay->total)
        FAIL("end of file: %" PRIu64 " trailing bytes after the %" PRIu64 " its header describes",
             file_len - lay->total, lay->total);
    return 0;
}

int td_ckpt_vocab_check(const void *buf, uint64_t n, td_err *e) {
    const unsigned char *p = buf;
    uint32_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)get32(p + 4 * i);
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            FAIL("field vocabulary: entry %" PRIu64 " is U+%04X, not a Unicode scalar value", i, (unsigned)c);
        if (i > 0 && c <= prev)
            FAIL("field vocabulary: entry %" PRIu64 " (U+%04X) does not follow entry %" PRIu64
                 " (U+%04X); code points must be strictly increasing",
                 i, (unsigned)c, i - 1, (unsigned)prev);
        prev = c;
    }
    return 0;
}

int td_ckpt_finite_check(const void *buf, uint64_t n, const char *field, int nonneg, td_err *e) {
    const unsigned char *p = buf;
    for (uint64_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, p + 4 * i, 4);
        if (!isfinite(x))
            FAIL("field %s: element %" PRIu64 " of %" PRIu64 " is %s; a checkpoint holds finite values only",
                 field, i, n, isnan(x) ? "nan" : "inf");
        if (nonneg && x < 0)
            FAIL("field %s: element %" PRIu64 " of %" PRIu64 " is %g; second moments are >= 0", field, i, n,
                 (double)x);
    }
    return 0;
}

int td_ckpt_parse(const void *buf, size_t len, td_ckpt_header *h, td_ckpt_layout *lay, td_err *e) {
    const unsigned char *p = buf;
    if (td_ckpt_header_parse(buf, len, len, h, lay, e)) return -1;
    if (h->tokenizer == 0 && td_ckpt_vocab_check(p + lay->vocab_off, (uint64_t)h->vocab, e)) return -1;
    if (td_ckpt_finite_check(p + lay->params_off, h->numel, "params", 0, e)) return -1;
    if (h->has_optimizer && (td_ckpt_finite_check(p + lay->m_off, h->numel, "adam_m", 0, e) ||
                             td_ckpt_finite_check(p + lay->v_off, h->numel, "adam_v", 1, e)))
        return -1;
    return 0;
}

/* ---- config.json -------------------------------------------------------- */

int td_ckpt_config_format(const td_ckpt_header *h, char *out, size_t cap) {
    int n = snprintf(out, cap,
                     "{\"format\": \"%s\", \"version\": %d, \"layers\": %d, \"heads\": %d, \"embd\": %d, "
                     "\"seq\": %d, \"vocab\": %d, \"vocab_padded\": %d, \"step\": %d, "
                     "\"tokenizer\": \"%s\", \"params\": %" PRIu64 ", \"has_optimizer\": %s}\n",
                     TD_CKPT_MAGIC, (int)h->version, (int)h->layers, (int)h->heads, (int)h->embd,
                     (int)h->seq, (int)h->vocab, (int)h->vocab_padded, (int)h->step,
                     tok_name(h->tokenizer), h->numel, h->has_optimizer ? "true" : "false");
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

typedef struct {
    const char *s;
    size_t n, i;
    td_err *e;
} jcur;

static void skip_ws(jcur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static int jfail(jcur *c, const char *what) {
    return td_err_set(c->e, "byte %zu: %s", c->i, what);
}

/* A string into out (cap bytes with the NUL); escapes \" \\ \/ \b \f \n \r
 * \t only (trident writes none of the others). */
static int parse_string(jcur *c, char *out, size_t cap) {
    if (c->i >= c->n || c->s[c->i] != '"') return jfail(c, "expected '\"'");
    c->i++;
    size_t k = 0;
    for (;;) {
        if (c->i >= c->n) return jfail(c, "unterminated string");
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') break;
        if (ch < 0x20) return jfail(c, "control character in a string");
        if (ch == '\\') {
            if (++c->i >= c->n) return jfail(c, "unterminated string");
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *q = strchr(from, c->s[c->i]);
            if (!q || !c->s[c->i]) return jfail(c, "unsupported escape in a string");
            ch = (unsigned char)to[q - from];
        }
        if (k + 1 >= cap) return jfail(c, "string too long");
        out[k++] = (char)ch;
        c->i++;
    }
    c->i++;
    out[k] = 0;
    return 0;
}

static int parse_value(jcur *c, td_json_entry *en) {
    if (c->i >= c->n) return jfail(c, "expected a value");
    char ch = c->s[c->i];
    if (ch == '"') {
        en->type = TD_JSON_STRING;
        return parse_string(c, en->str, sizeof en->str);
    }
    if (c->n - c->i >= 4 && memcmp(c->s + c->i, "true", 4) == 0) {
        en->type = TD_JSON_BOOL, en->num = 1, c->i += 4;
        return 0;
    }
    if (c->n - c->i >= 5 && memcmp(c->s + c->i, "false", 5) == 0) {
        en->type = TD_JSON_BOOL, en->num = 0, c->i += 5;
        return 0;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        int neg = ch == '-';
        if (neg) c->i++;
        size_t start = c->i;
        uint64_t v = 0;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
            uint64_t d = (uint64_t)(c->s[c->i] - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10) return jfail(c, "integer out of range");
            v = v * 10 + d;
            c->i++;
        }
        if (c->i == start) return jfail(c, "expected digits");
        if (c->i - start > 1 && c->s[start] == '0') return jfail(c, "leading zero in an integer");
        if (c->i < c->n && (c->s[c->i] == '.' || c->s[c->i] == 'e' || c->s[c->i] == 'E'))
            return jfail(c, "not an integer (trident writes integers only)");
        en->type = TD_JSON_INT;
        en->num = neg ? -(int64_t)v : (int64_t)v;
        return 0;
    }
    return jfail(c, "expected a string, an integer, true or false");
}

int td_json_parse_flat(const char *text, size_t n, td_json_object *out, td_err *e) {
    jcur c = {text, n, 0, e};
    out->n = 0;
    skip_ws(&c);
    if (c.i >= n || text[c.i] != '{') return jfail(&c, "expected '{'");
    c.i++;
    skip_ws(&c);
    if (c.i < n && text[c.i] == '}') {
        c.i++;
    } else {
        for (;;) {
            if (out->n == TD_JSON_MAX_KEYS) return jfail(&c, "too many keys");
            td_json_entry *en = &out->e[out->n];
            memset(en, 0, sizeof *en);
            skip_ws(&c);
            if (parse_string(&c, en->key, sizeof en->key)) return -1;
            for (int k = 0; k < out->n; k++)
                if (strcmp(out->e[k].key, en->key) == 0)
                    return td_err_set(e, "byte %zu: key \"%s\" appears twice", c.i, en->key);
            skip_ws(&c);
            if (c.i >= n || text[c.i] != ':') return jfail(&c, "expected ':'");
            c.i++;
            skip_ws(&c);
            if (parse_value(&c, en)) { /* name the field whose value is malformed */
                if (e) {
                    char m[sizeof e->msg];
                    snprintf(m, sizeof m, "%s", e->msg);
                    td_err_set(e, "field %s: %s", en->key, m);
                }
                return -1;
            }
            out->n++;
            skip_ws(&c);
            if (c.i < n && text[c.i] == ',') {
                c.i++;
                continue;
            }
            if (c.i < n && text[c.i] == '}') {
                c.i++;
                break;
            }
            return jfail(&c, "expected ',' or '}'");
        }
    }
    skip_ws(&c);
    if (c.i != n) return jfail(&c, "unexpected bytes after the object");
    return 0;
}

int td_ckpt_config_check(const char *text, size_t n, const td_ckpt_header *h, td_err *e) {
    td_json_object o;
    if (td_json_parse_flat(text, n, &o, e)) return -1;
    struct {
        const char *key;
        td_json_type type;
        int64_t num;
        const char *str;
    } want[] = {
        {"format", TD_JSON_STRING, 0, TD_CKPT_MAGIC},
        {"version", TD_JSON_INT, h->version, NULL},
        {"layers", TD_JSON_INT, h->layers, NULL},
        {"heads", TD_JSON_INT, h->heads, NULL},
        {"embd", TD_JSON_INT, h->embd, NULL},
        {"seq", TD_JSON_INT, h->seq, NULL},
        {"vocab", TD_JSON_INT, h->vocab, NULL},
        {"vocab_padded", TD_JSON_INT, h->vocab_padded, NULL},
        {"step", TD_JSON_INT, h->step, NULL},
        {"tokenizer", TD_JSON_STRING, 0, tok_name(h->tokenizer)},
        {"params", TD_JSON_INT, (int64_t)h->numel, NULL},
        {"has_optimizer", TD_JSON_BOOL, h->has_optimizer, NULL},
    };
    const int nw = (int)(sizeof want / sizeof want[0]);
    static const char *tname[] = {"a string", "an integer", "a boolean"};
    for (int k = 0; k < o.n; k++) {
        int found = 0;
        for (int w = 0; w < nw; w++) found |= strcmp(o.e[k].key, want[w].key) == 0;
        if (!found) FAIL("field %s: not a field of a version-%d checkpoint", o.e[k].key, TD_CKPT_VERSION);
    }
    for (int w = 0; w < nw; w++) {
        const td_json_entry *en = NULL;
        for (int k = 0; k < o.n; k++)
            if (strcmp(o.e[k].key, want[w].key) == 0) en = &o.e[k];
        if (!en) FAIL("field %s: missing", want[w].key);
        if (en->type != want[w].type) FAIL("field %s: must be %s", want[w].key, tname[want[w].type]);
        if (en->type == TD_JSON_STRING && strcmp(en->str, want[w].str) != 0)
            FAIL("field %s: \"%s\", but model.bin says \"%s\"", want[w].key, en->str, want[w].str);
        if (en->type == TD_JSON_INT && en->num != want[w].num)
            FAIL("field %s: %" PRId64 ", but model.bin says %" PRId64, want[w].key, en->num, want[w].num);
        if (en->type == TD_JSON_BOOL && en->num != want[w].num)
            FAIL("field %s: %s, but model.bin says %s", want[w].key, en->num ? "true" : "false",
                 want[w].num ? "true" : "false");
    }
    return 0;
}
