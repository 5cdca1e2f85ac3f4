/* data.json of a token shard set (formats_data_manifest.h): the writer and
 * the parser, which checks every field and that the counts add up. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"
#include "trident/formats_data_manifest.h"
#include "trident/formats_hash.h"
#include "trident/formats_json.h"

static const char *const split_names[2] = {"train", "val"};
#define BIG (INT64_C(1) << 50) /* tokens and bytes: far beyond any corpus */

/* ---- writing ------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static int grow(sbuf *b, size_t more) {
    size_t cap = 2 * b->cap + more + 1024;
    char *p = realloc(b->p, cap);
    if (!p) return b->oom = 1, 0;
    b->p = p, b->cap = cap;
    return 1;
}

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    while (!b->oom) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) b->oom = 1;
        else if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        if (!grow(b, (size_t)k)) return;
    }
}

static void put_str(sbuf *b, const char *s) {
    int k = 0; /* set by the loop, which runs unless b is out of memory already */
    while (!b->oom && (k = td_json_put_str(b->p, b->cap, b->n, s)) < 0) grow(b, 6 * strlen(s) + 8);
    if (!b->oom) b->n = (size_t)k;
}

char *td_data_manifest_format(const td_data_manifest *m, size_t *len) {
    sbuf b = {malloc(4096), 0, 4096, 0};
    if (!b.p) return NULL;
    b.p[0] = 0;
    put(&b, "{\"format\": \"trident-data\", \"version\": %d, \"tokenizer\": ", TD_DATA_MANIFEST_VERSION);
    put_str(&b, m->tokenizer);
    put(&b, ", \"vocab\": %d, \"shard_format\": \"%s\",\n \"tokens\": %llu, \"documents\": %llu,\n", m->vocab,
        m->megatron ? "megatron" : "llmc", (unsigned long long)m->tokens, (unsigned long long)m->documents);
    for (int s = 0; s < 2; s++)
        put(&b, " \"%s\": {\"tokens\": %llu, \"documents\": %llu, \"shards\": %d},\n", split_names[s],
            (unsigned long long)m->split_tokens[s], (unsigned long long)m->split_documents[s], m->split_shards[s]);
    put(&b, " \"shards\": [");
    for (int i = 0; i < m->n_shards; i++) {
        const td_dm_shard *x = &m->shards[i];
        char hx[TD_HASH_HEX + 1];
        td_hash_hex(x->xxh3, hx);
        put(&b, "%s\n  {\"name\": ", i ? "," : "");
        put_str(&b, x->name);
        put(&b, ", \"split\": \"%s\", \"size\": %llu, \"tokens\": %llu, \"xxh3\": \"%s\"}", split_names[x->split],
            (unsigned long long)x->size, (unsigned long long)x->tokens, hx);
    }
    put(&b, "]}\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* ---- parsing ------------------------------------------------------------- */

static int get_u(const td_jv *o, const char *k, uint64_t *out, td_err *e) {
    int64_t v;
    if (td_json_get_int(o, k, 0, BIG, &v, e) != 0) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* a file name of this directory: no '/', not "." or "..", ending in .bin */
static int plain_bin_name(const char *s) {
    size_t n = strlen(s);
    return n > 4 && n < 256 && !strchr(s, '/') && strcmp(s + n - 4, ".bin") == 0;
}

int td_data_manifest_width(int vocab) { return vocab <= TD_UINT16_VOCAB_MAX ? 2 : 4; }

static int parse_shard(const td_jv *o, const td_data_manifest *m, td_dm_shard *x, td_err *e) {
    const char *name, *split, *hx;
    if (o->type != TD_JV_OBJ) return td_err_set(e, "must be an object");
    if (td_json_get_str(o, "name", &name, e) || td_json_get_str(o, "split", &split, e) ||
        get_u(o, "size", &x->size, e) || get_u(o, "tokens", &x->tokens, e) || td_json_get_str(o, "xxh3", &hx, e))
        return -1;
    if (!plain_bin_name(name))
        return td_err_set(e, "field name: \"%.64s\" is not a plain .bin file name of the directory", name);
    x->split = strcmp(split, "train") == 0 ? 0 : strcmp(split, "val") == 0 ? 1 : -1;
    if (x->split < 0) return td_err_set(e, "field split: \"%.16s\"; valid: train, val", split);
    uint64_t want = (m->megatron ? 0 : TD_LLMC_HEADER_BYTES) + (uint64_t)td_data_manifest_width(m->vocab) * x->tokens;
    if (x->size != want)
        return td_err_set(e, "field size: %llu bytes, but %s shard of %llu tokens has %llu", (unsigned long long)x->size,
                          m->megatron ? "a Megatron" : "an llm.c", (unsigned long long)x->tokens,
                          (unsigned long long)want);
    if (strlen(hx) != TD_HASH_HEX || td_hash_parse_hex(hx, &x->xxh3) != 0)
        return td_err_set(e, "field xxh3: must be 16 hex digits");
    x->name = strdup(name);
    return x->name ? 0 : td_err_set(e, "out of memory");
}

static int parse_top(const td_jv *j, td_data_manifest *m, td_err *e) {
    const char *fmt, *tok;
    int64_t ver, vocab;
    if (j->type != TD_JV_OBJ) return td_err_set(e, "not a JSON object");
    if (td_json_get_str(j, "format", &fmt, e) != 0) return -1;
    if (strcmp(fmt, "trident-data") != 0)
        return td_err_set(e, "field format: \"%.40s\"; not a trident data manifest", fmt);
    if (td_json_get_int(j, "version", 0, 1 << 30, &ver, e) != 0) return -1;
    if (ver != TD_DATA_MANIFEST_VERSION)
        return td_err_set(e, "field version: %lld; this build reads version %d", (long long)ver,
                          TD_DATA_MANIFEST_VERSION);
    if (td_json_get_str(j, "tokenizer", &tok, e) != 0) return -1;
    if (!*tok || strlen(tok) >= sizeof m->tokenizer)
        return td_err_set(e, "field tokenizer: \"%.40s\" is not a tokenizer name", tok);
    memcpy(m->tokenizer, tok, strlen(tok) + 1);
    if (td_json_get_int(j, "vocab", 1, TD_VOCAB_MAX, &vocab, e) != 0) return -1;
    m->vocab = (int)vocab;
    const td_jv *sf = td_json_get(j, "shard_format");
    if (sf) { /* absent in manifests written before Megatron shards: llm.c */
        const char *f;
        if (td_json_get_str(j, "shard_format", &f, e) != 0) return -1;
        m->megatron = strcmp(f, "megatron") == 0;
        if (!m->megatron && strcmp(f, "llmc") != 0)
            return td_err_set(e, "field shard_format: \"%.40s\"; valid: llmc, megatron", f);
    }
    if (get_u(j, "tokens", &m->tokens, e) || get_u(j, "documents", &m->documents, e)) return -1;
    for (int s = 0; s < 2; s++) {
        const td_jv *o = td_json_get(j, split_names[s]);
        int64_t k;
        if (!o || o->type != TD_JV_OBJ) return td_err_set(e, "field %s: missing or not an object", split_names[s]);
        if (get_u(o, "tokens", &m->split_tokens[s], e) || get_u(o, "documents", &m->split_documents[s], e) ||
            td_json_get_int(o, "shards", 0, 1 << 20, &k, e)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", e->msg);
            return td_err_set(e, "%s: %s", split_names[s], msg);
        }
        m->split_shards[s] = (int)k;
    }
    const td_jv *sh = td_json_get(j, "shards");
    if (!sh || sh->type != TD_JV_ARR) return td_err_set(e, "field shards: missing or not an array");
    if (sh->n < 1 || sh->n > 1 << 20) return td_err_set(e, "field shards: %d shards", sh->n);
    m->shards = calloc((size_t)sh->n, sizeof *m->shards);
    if (!m->shards) return td_err_set(e, "out of memory");
    m->n_shards = sh->n; /* entries not yet parsed have NULL names: the free frees them all */
    uint64_t tokens[2] = {0, 0};
    int count[2] = {0, 0};
    for (int i = 0; i < sh->n; i++) {
        if (parse_shard(&sh->items[i], m, &m->shards[i], e) != 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", e->msg);
            return td_err_set(e, "shard %d: %s", i, msg);
        }
        for (int k = 0; k < i; k++)
            if (strcmp(m->shards[k].name, m->shards[i].name) == 0)
                return td_err_set(e, "shard %d: name \"%.64s\" appears twice", i, m->shards[i].name);
        tokens[m->shards[i].split] += m->shards[i].tokens;
        count[m->shards[i].split]++;
    }
    for (int s = 0; s < 2; s++)
        if (tokens[s] != m->split_tokens[s] || count[s] != m->split_shards[s])
            return td_err_set(e, "field %s: %llu tokens in %d shards, but its shards hold %llu in %d", split_names[s],
                              (unsigned long long)m->split_tokens[s], m->split_shards[s],
                              (unsigned long long)tokens[s], count[s]);
    if (m->split_tokens[0] + m->split_tokens[1] != m->tokens)
        return td_err_set(e, "field tokens: %llu, but the splits hold %llu", (unsigned long long)m->tokens,
                          (unsigned long long)(m->split_tokens[0] + m->split_tokens[1]));
    if (m->split_documents[0] + m->split_documents[1] != m->documents)
        return td_err_set(e, "field documents: %llu, but the splits hold %llu", (unsigned long long)m->documents,
                          (unsigned long long)(m->split_documents[0] + m->split_documents[1]));
    return 0;
}

int td_data_manifest_parse(const char *text, size_t n, td_data_manifest *m, td_err *e) {
    memset(m, 0, sizeof *m);
    if (n > TD_DATA_MANIFEST_MAX_BYTES) return td_err_set(e, "%zu bytes; a data manifest is at most 64 MiB", n);
    td_jv *j;
    if (td_json_parse(text, n, &j, e) != 0) return -1;
    int rc = parse_top(j, m, e);
    td_json_free(j);
    if (rc != 0) td_data_manifest_free(m);
    return rc;
}

void td_data_manifest_free(td_data_manifest *m) {
    for (int i = 0; i < m->n_shards; i++) free(m->shards[i].name);
    free(m->shards);
    memset(m, 0, sizeof *m);
}

const td_dm_shard *td_data_manifest_find(const td_data_manifest *m, const char *name) {
    for (int i = 0; i < m->n_shards; i++)
        if (strcmp(m->shards[i].name, name) == 0) return &m->shards[i];
    return NULL;
}
