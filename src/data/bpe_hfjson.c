/* A Hugging Face tokenizer.json of the byte-level BPE kind, as GPT-2,
 * SmolLM and Llama 3 ship it, into the BPE engine of bpe.c. The file is
 * parsed by src/formats/json.c; what it says is honored, not assumed:
 *   - merges: the pair table is the merges list itself, priority = index
 *     and result = the id model.vocab gives the joined string, so a file
 *     whose ids do not follow its merge order (or that lists several pairs
 *     for one token, as Llama 3's does) merges as Hugging Face merges it;
 *   - ignore_merges: a piece that is a vocabulary token as a whole is that
 *     token (tiktoken's rule) only when the file says so;
 *   - pre_tokenizer: ByteLevel (GPT-2's pattern when use_regex), or a
 *     Sequence of Split (Isolated), Digits and a final ByteLevel, each a
 *     PCRE2 stage (bpe_regex.c).
 * Everything else that changes the tokens (a normalizer, another model or
 * pre-tokenizer, byte_fallback, dropout, subword prefixes) is refused with
 * the field named. Added tokens are ids to decode, never matched in the
 * text: the encoding is ordinary, as --tokenizer gpt2's is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "trident/bpe.h"
#include "trident/formats_bpe.h"
#include "trident/formats_data.h"
#include "trident/formats_hash.h"
#include "trident/formats_json.h"

/* GPT-2's pattern, which ByteLevel with use_regex applies */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    int byte_of[0x144]; /* the byte a code point of the alphabet stands for; -1: none */
    /* the vocabulary's tokens by their bytes (open addressing on XXH3) */
    uint32_t *slot, mask;
    td_bpe_tables t;
    int id_set; /* ids given so far */
} loader;

/* A vocabulary string in the byte-level alphabet to bytes (out has room for
 * len); -1 for a character outside the alphabet. */
static long alphabet_bytes(const loader *L, const char *s, size_t len, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int w = td_utf8_next((const unsigned char *)s + i, len - i, &cp, NULL);
        if (w <= 0 || cp >= 0x144 || L->byte_of[cp] < 0) return -1;
        out[k++] = (unsigned char)L->byte_of[cp];
        i += (size_t)w;
    }
    return (long)k;
}

static size_t tok_len(const loader *L, uint32_t id) { return L->t.offset[id + 1] - L->t.offset[id]; }

/* The id of the vocabulary token with bytes p[0..n), or -1. */
static long lookup(const loader *L, const unsigned char *p, size_t n) {
    for (uint32_t i = (uint32_t)td_xxh3(p, n) & L->mask;; i = (i + 1) & L->mask) {
        uint32_t id = L->slot[i];
        if (id == UINT32_MAX) return -1;
        if (tok_len(L, id) == n && memcmp(L->t.data + L->t.offset[id], p, n) == 0) return id;
    }
}

static const char *type_of(const td_jv *v) {
    const td_jv *t = td_json_get(v, "type");
    return t && t->type == TD_JV_STR ? t->str : "(none)";
}

static int is_null(const td_jv *v) { return !v || v->type == TD_JV_NULL; }
static int is_true(const td_jv *v) { return v && v->type == TD_JV_BOOL && v->boolean; }

/* Fields of model that would change the tokens and that trident does not
 * implement must be absent, null, false or empty. */
static int check_model_options(const td_jv *model, td_err *e) {
    static const char *const off[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 3; k++) {
        const td_jv *v = td_json_get(model, off[k]);
        if (!is_null(v) && !(v->type == TD_JV_STR && v->len == 0))
            return td_err_set(e, "model.%s is set; trident's BPE supports none (null)", off[k]);
    }
    if (is_true(td_json_get(model, "byte_fallback")))
        return td_err_set(e, "model.byte_fallback is true (a SentencePiece-style BPE); trident "
                             "reads byte-level BPE, whose vocabulary holds every byte");
    return 0;
}

/* The ids of model.vocab and added_tokens: n_tokens and the bytes of each. */
static int read_tokens(loader *L, const td_jv *vocab, const td_jv *added, td_err *e) {
    int64_t max_id = -1;
    size_t bytes = 0;
    for (int k = 0; k < vocab->n; k++) {
        const td_jv *v = &vocab->items[k];
        if (v->type != TD_JV_NUM || !v->is_int || v->i < 0 || v->i >= TD_BPE_MAX_RANKS)
            return td_err_set(e, "model.vocab[\"%.80s\"]: the id must be an integer in [0, %d)",
                              vocab->keys[k], TD_BPE_MAX_RANKS);
        if (v->i > max_id) max_id = v->i;
        bytes += strlen(vocab->keys[k]);
    }
    for (int k = 0; added && k < added->n; k++) {
        const td_jv *a = &added->items[k];
        int64_t id;
        const char *content;
        if (td_json_get_int(a, "id", 0, TD_BPE_MAX_RANKS - 1, &id, e) != 0 ||
            td_json_get_str(a, "content", &content, e) != 0) {
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            return td_err_set(e, "added_tokens[%d]: %s", k, why);
        }
        if (!*content) return td_err_set(e, "added_tokens[%d]: content is empty", k);
        if (id > max_id) max_id = id;
        bytes += strlen(content);
    }
    if (max_id < 0) return td_err_set(e, "model.vocab is empty");
    if (bytes >= UINT32_MAX) return td_err_set(e, "the tokens hold %zu bytes; at most 4 GiB", bytes);
    uint32_t n = (uint32_t)max_id + 1;
    L->t.n_tokens = n;
    L->t.data = malloc(bytes + 1);
    L->t.offset = calloc((size_t)n + 1, sizeof *L->t.offset);
    L->t.hashed = calloc(n, 1);
    const td_jv **by_id = calloc(n, sizeof *by_id); /* each id's vocab or added entry */
    char *is_added = calloc(n, 1);
    if (!L->t.data || !L->t.offset || !L->t.hashed || !by_id || !is_added) {
        free(by_id), free(is_added);
        return td_err_set(e, "out of memory for %u tokens", n);
    }
    int rc = 0;
    const char **name = calloc(n, sizeof *name); /* each id's vocabulary string */
    if (!name) rc = td_err_set(e, "out of memory for %u tokens", n);
    for (int k = 0; rc == 0 && k < vocab->n; k++) {
        uint32_t id = (uint32_t)vocab->items[k].i;
        if (name[id])
            rc = td_err_set(e, "model.vocab: \"%.80s\" and \"%.80s\" both have id %u", name[id],
                            vocab->keys[k], id);
        name[id] = vocab->keys[k];
    }
    for (int k = 0; rc == 0 && added && k < added->n; k++) {
        uint32_t id = (uint32_t)td_json_get(&added->items[k], "id")->i;
        if (is_added[id]) rc = td_err_set(e, "added_tokens: two tokens have id %u", id);
        is_added[id] = 1, by_id[id] = td_json_get(&added->items[k], "content");
    }
    /* each id's bytes: an added token's content as written, a vocabulary
     * string through the alphabet (it must be in it unless the id is an
     * added token too, whose content then wins, as Hugging Face decodes) */
    uint32_t at = 0;
    for (uint32_t id = 0; rc == 0 && id < n; id++) {
        L->t.offset[id] = at;
        long k = name[id] ? alphabet_bytes(L, name[id], strlen(name[id]), L->t.data + at) : -1;
        if (name[id] && k <= 0 && !is_added[id])
            rc = td_err_set(e, "model.vocab[\"%.80s\"] (id %u) holds a character outside the "
                               "byte-level alphabet (bytes_to_unicode), so it is no byte-level BPE",
                            name[id], id);
        if (rc) break;
        if (is_added[id]) {
            const td_jv *c = by_id[id];
            L->t.hashed[id] = k == (long)c->len && memcmp(L->t.data + at, c->str, c->len) == 0;
            memcpy(L->t.data + at, c->str, c->len);
            k = (long)c->len;
        } else {
            L->t.hashed[id] = name[id] != NULL;
        }
        at += k > 0 ? (uint32_t)k : 0;
    }
    L->t.offset[n] = at;
    free(name), free(by_id), free(is_added);
    return rc;
}

static int build_lookup(loader *L, td_err *e) {
    size_t cap = 1;
    while (cap < 2 * (size_t)L->t.n_tokens) cap <<= 1;
    L->slot = malloc(cap * sizeof *L->slot);
    if (!L->slot) return td_err_set(e, "out of memory for the vocabulary");
    memset(L->slot, 0xFF, cap * sizeof *L->slot);
    L->mask = (uint32_t)(cap - 1);
    for (uint32_t id = 0; id < L->t.n_tokens; id++) {
        if (!L->t.hashed[id]) continue;
        const unsigned char *p = L->t.data + L->t.offset[id];
        uint32_t i = (uint32_t)td_xxh3(p, tok_len(L, id)) & L->mask;
        while (L->slot[i] != UINT32_MAX) i = (i + 1) & L->mask;
        L->slot[i] = id; /* distinct strings of one alphabet: distinct bytes */
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        long id = lookup(L, &c, 1);
        if (id < 0)
            return td_err_set(e, "model.vocab has no token for byte 0x%02x (U+%04X in the "
                                 "byte-level alphabet), so some text could not be encoded",
                              b, td_bpe_byte_char(c));
        L->t.byte_id[b] = (uint32_t)id;
    }
    return 0;
}

/* One side of merge k: its string to a vocabulary token; *bytes, *len its bytes. */
static long merge_side(const loader *L, int k, const char *s, size_t len, unsigned char *buf,
                       td_err *e) {
    long n = alphabet_bytes(L, s, len, buf);
    long id = n > 0 ? lookup(L, buf, (size_t)n) : -1;
    if (id < 0)
        td_err_set(e, "model.merges[%d]: \"%.*s\" is not a token of model.vocab", k,
                   (int)(len > 80 ? 80 : len), s);
    return id;
}

/* model.merges, "left right" strings or [left, right] pairs. */
static int read_merges(loader *L, const td_jv *merges, td_bpe_merge *out, td_err *e) {
    size_t cap = 1024;
    unsigned char *buf = malloc(cap);
    if (!buf) return td_err_set(e, "out of memory for the merges");
    int rc = 0;
    for (int k = 0; rc == 0 && k < merges->n; k++) {
        const td_jv *m = &merges->items[k];
        const char *side[2];
        size_t len[2];
        if (m->type == TD_JV_STR) {
            const char *sp = memchr(m->str, ' ', m->len);
            if (!sp || memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str))) {
                rc = td_err_set(e, "model.merges[%d]: \"%.80s\" is not two tokens split by one space",
                                k, m->str);
                break;
            }
            side[0] = m->str, len[0] = (size_t)(sp - m->str);
            side[1] = sp + 1, len[1] = m->len - len[0] - 1;
        } else if (m->type == TD_JV_ARR && m->n == 2 && m->items[0].type == TD_JV_STR &&
                   m->items[1].type == TD_JV_STR) {
            for (int j = 0; j < 2; j++) side[j] = m->items[j].str, len[j] = m->items[j].len;
        } else {
            rc = td_err_set(e, "model.merges[%d]: neither a \"left right\" string nor a pair of strings", k);
            break;
        }
        if (2 * (len[0] + len[1]) > cap) {
            cap = 2 * (len[0] + len[1]);
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                rc = td_err_set(e, "out of memory for the merges");
                break;
            }
            buf = nb;
        }
        long a = merge_side(L, k, side[0], len[0], buf, e);
        long na = a < 0 ? 0 : (long)tok_len(L, (uint32_t)a);
        long b = a < 0 ? -1 : merge_side(L, k, side[1], len[1], buf + na, e);
        if (a < 0 || b < 0) {
            rc = -1;
            break;
        }
        long joined = lookup(L, buf, (size_t)na + tok_len(L, (uint32_t)b));
        if (joined < 0) {
            rc = td_err_set(e, "model.merges[%d]: \"%.*s\" + \"%.*s\" joined is not a token of "
                               "model.vocab", k, (int)(len[0] > 60 ? 60 : len[0]), side[0],
                            (int)(len[1] > 60 ? 60 : len[1]), side[1]);
            break;
        }
        out[k] = (td_bpe_merge){(uint32_t)a, (uint32_t)b, (uint32_t)joined};
    }
    free(buf);
    return rc;
}

/* A ByteLevel pre-tokenizer: its regex stage when use_regex (the default). */
static int byte_level(td_bpe_regex *r, const td_jv *p, const char *where, td_err *e) {
    if (is_true(td_json_get(p, "add_prefix_space")))
        return td_err_set(e, "%s: ByteLevel add_prefix_space is true; trident encodes the text "
                             "as it is (false)", where);
    const td_jv *use = td_json_get(p, "use_regex");
    if (use && use->type == TD_JV_BOOL && !use->boolean) return 0;
    return td_bpe_regex_add(r, gpt2_pattern, sizeof gpt2_pattern - 1, 0, e);
}

/* One member of a Sequence pre-tokenizer (not the final ByteLevel). */
static int split_stage(td_bpe_regex *r, const td_jv *p, int k, td_err *e) {
    const char *type = type_of(p);
    if (strcmp(type, "Digits") == 0) {
        const char *re = is_true(td_json_get(p, "individual_digits")) ? "\\p{N}" : "\\p{N}+";
        return td_bpe_regex_add(r, re, strlen(re), 0, e);
    }
    if (strcmp(type, "Split") != 0)
        return td_err_set(e, "pre_tokenizer.pretokenizers[%d]: type %s is not supported (Split, "
                             "Digits, then ByteLevel last)", k, type);
    const td_jv *behavior = td_json_get(p, "behavior"), *pat = td_json_get(p, "pattern");
    if (!behavior || behavior->type != TD_JV_STR || strcmp(behavior->str, "Isolated") != 0)
        return td_err_set(e, "pre_tokenizer.pretokenizers[%d]: Split behavior %s is not "
                             "supported (Isolated)", k,
                          behavior && behavior->type == TD_JV_STR ? behavior->str : "(none)");
    if (is_true(td_json_get(p, "invert")))
        return td_err_set(e, "pre_tokenizer.pretokenizers[%d]: Split invert true is not supported", k);
    const td_jv *re = td_json_get(pat, "Regex"), *lit = td_json_get(pat, "String");
    const td_jv *s = re ? re : lit;
    if (!s || s->type != TD_JV_STR)
        return td_err_set(e, "pre_tokenizer.pretokenizers[%d]: Split pattern is neither "
                             "{\"Regex\": ...} nor {\"String\": ...}", k);
    if (td_bpe_regex_add(r, s->str, s->len, !re, e) == 0) return 0;
    char why[sizeof e->msg];
    snprintf(why, sizeof why, "%s", e->msg);
    return td_err_set(e, "pre_tokenizer.pretokenizers[%d]: Split pattern: %s", k, why);
}

static int read_pre_tokenizer(td_bpe_regex *r, const td_jv *p, td_err *e) {
    const char *type = type_of(p);
    if (is_null(p))
        return td_err_set(e, "pre_tokenizer is null; byte-level BPE needs ByteLevel");
    if (strcmp(type, "ByteLevel") == 0) return byte_level(r, p, "pre_tokenizer", e);
    if (strcmp(type, "Sequence") != 0)
        return td_err_set(e, "pre_tokenizer type %s is not supported (ByteLevel, or a Sequence "
                             "of Split and Digits ending in ByteLevel)", type);
    const td_jv *list = td_json_get(p, "pretokenizers");
    if (!list || list->type != TD_JV_ARR || list->n == 0 ||
        strcmp(type_of(&list->items[list->n - 1]), "ByteLevel") != 0)
        return td_err_set(e, "pre_tokenizer.pretokenizers: a Sequence must end in ByteLevel");
    for (int k = 0; k + 1 < list->n; k++)
        if (split_stage(r, &list->items[k], k, e) != 0) return -1;
    return byte_level(r, &list->items[list->n - 1], "pre_tokenizer.pretokenizers (last)", e);
}

/* The id of added token `content`, or -1. */
static int added_id(const td_jv *added, const char *content) {
    for (int k = 0; added && k < added->n; k++) {
        const td_jv *c = td_json_get(&added->items[k], "content");
        if (c && c->type == TD_JV_STR && strcmp(c->str, content) == 0)
            return (int)td_json_get(&added->items[k], "id")->i;
    }
    return -1;
}

/* The token a document starts with: the special token a TemplateProcessing
 * post-processor puts before a single text (Llama 3's <|begin_of_text|>),
 * else <|endoftext|> (GPT-2's convention, which --tokenizer gpt2 follows). */
static int document_start(const td_jv *root, const td_jv *added, int eot) {
    const td_jv *pp = td_json_get(root, "post_processor");
    const td_jv *list = td_json_get(pp, "processors");
    for (int k = -1; k < (list && list->type == TD_JV_ARR ? list->n : 0); k++) {
        const td_jv *p = k < 0 ? pp : &list->items[k];
        if (strcmp(type_of(p), "TemplateProcessing") != 0) continue;
        const td_jv *single = td_json_get(p, "single");
        if (!single || single->type != TD_JV_ARR || single->n == 0) continue;
        const td_jv *st = td_json_get(&single->items[0], "SpecialToken");
        const td_jv *id = td_json_get(st, "id");
        if (id && id->type == TD_JV_STR) return added_id(added, id->str);
    }
    return eot;
}

static int load(loader *L, const td_jv *root, td_err *e) {
    if (root->type != TD_JV_OBJ) return td_err_set(e, "not a JSON object");
    const td_jv *model = td_json_get(root, "model"), *norm = td_json_get(root, "normalizer");
    if (!model || model->type != TD_JV_OBJ) return td_err_set(e, "model: missing");
    if (strcmp(type_of(model), "BPE") != 0)
        return td_err_set(e, "model.type %s is not supported; trident reads byte-level BPE (BPE)",
                          type_of(model));
    if (!is_null(norm))
        return td_err_set(e, "normalizer (type %s) is not supported; trident reads tokenizers "
                             "without one (null), as GPT-2's and Llama 3's", type_of(norm));
    const td_jv *dec = td_json_get(root, "decoder");
    if (strcmp(type_of(dec), "ByteLevel") != 0)
        return td_err_set(e, "decoder type %s is not supported; byte-level BPE decodes with "
                             "ByteLevel", type_of(dec));
    if (check_model_options(model, e) != 0) return -1;
    const td_jv *vocab = td_json_get(model, "vocab"), *merges = td_json_get(model, "merges");
    const td_jv *added = td_json_get(root, "added_tokens");
    if (!vocab || vocab->type != TD_JV_OBJ) return td_err_set(e, "model.vocab: missing or not an object");
    if (!merges || merges->type != TD_JV_ARR) return td_err_set(e, "model.merges: missing or not a list");
    if (added && added->type != TD_JV_ARR && added->type != TD_JV_NULL)
        return td_err_set(e, "added_tokens: not a list");
    if (added && added->type != TD_JV_ARR) added = NULL;
    if (!(L->t.regex = td_bpe_regex_new())) return td_err_set(e, "out of memory");
    if (read_pre_tokenizer(L->t.regex, td_json_get(root, "pre_tokenizer"), e) != 0) return -1;
    if (read_tokens(L, vocab, added, e) != 0 || build_lookup(L, e) != 0) return -1;
    td_bpe_merge *m = malloc(sizeof *m * (size_t)(merges->n ? merges->n : 1));
    if (!m) return td_err_set(e, "out of memory for the merges");
    L->t.merges = m, L->t.n_merges = (size_t)merges->n;
    if (read_merges(L, merges, m, e) != 0) return -1;
    L->t.whole_piece = is_true(td_json_get(model, "ignore_merges"));
    static const unsigned char eot_text[] = "<|endoftext|>";
    long eot = lookup(L, eot_text, sizeof eot_text - 1);
    L->t.eot = eot >= 0 ? (int)eot : added_id(added, (const char *)eot_text);
    L->t.bos = document_start(root, added, L->t.eot);
    return 0;
}

int td_bpe_load_hf(const char *path, td_bpe **out, uint64_t *xxh3, td_err *e) {
    *out = NULL;
    size_t n;
    char *text = (char *)td_bpe_read_file(path, &n, e);
    if (!text) return -1;
    if (xxh3) *xxh3 = td_xxh3(text, n);
    td_jv *root;
    int rc = td_json_parse(text, n, &root, e);
    free(text);
    if (rc != 0) {
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return td_err_set(e, "not valid JSON: %s", why);
    }
    loader L = {0};
    for (unsigned c = 0; c < 0x144; c++) L.byte_of[c] = -1;
    for (int b = 0; b < 256; b++) L.byte_of[td_bpe_byte_char((unsigned char)b)] = b;
    rc = load(&L, root, e);
    td_json_free(root);
    free(L.slot);
    if (rc == 0) rc = td_bpe_from_tables(&L.t, out, e); /* takes the tables, even on failure */
    else free(L.t.data), free(L.t.offset), free(L.t.hashed), td_bpe_regex_free(L.t.regex);
    free((void *)L.t.merges);
    return rc;
}
