/* Fuzz target: arbitrary bytes as a safetensors file (length prefix, JSON
 * header, data), as bare JSON text, as an llm.c GPT-2 checkpoint and as a
 * Hugging Face GPT-2 config.json (src/formats/safetensors.c, json.c,
 * gpt2_files.c), as the planner's calibration profile (profile.c) and as
 * a shard set's data.json (data_manifest.c): every input goes to all six,
 * so no selector byte.
 * Both must return 0 or -1 with a message for any input: no crash, no read
 * past the buffer, no leak, no overflow in the offset arithmetic. A header
 * that parses must describe tensors inside the data, tiling it, and must
 * survive a round trip through the writer.
 * A config that parses must parse again, equal, after td_hf_config_format;
 * so must a profile after td_profile_format.
 * Seeds (tests/fuzz/corpus/safetensors/): small files written by
 * td_st_header_format, JSON texts with escapes and nesting, a config.json
 * written by trident export, an llm.c header, a calibration profile and a
 * data.json written by trident tokenize. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data_manifest.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_profile.h"
#include "trident/formats_safetensors.h"

static void check_header(const td_st_header *h, uint64_t size) {
    uint64_t at = 0;
    for (int k = 0; k < h->n; k++) { /* the parser's promise, checked independently */
        if (h->t[k].begin != at || h->t[k].end < h->t[k].begin) __builtin_trap();
        at = h->t[k].end;
    }
    if (h->data_off + at != size) __builtin_trap();
    char *out;
    size_t len;
    td_err e;
    if (td_st_header_format(h->t, h->n, (const char *const *)h->meta_key,
                            (const char *const *)h->meta_val, h->n_meta, &out, &len, &e) != 0)
        __builtin_trap();
    free(out);
}

static int same(const td_data_manifest *a, const td_data_manifest *b) {
    if (strcmp(a->tokenizer, b->tokenizer) || a->vocab != b->vocab || a->tokens != b->tokens ||
        a->documents != b->documents || a->n_shards != b->n_shards)
        return 0;
    for (int s = 0; s < 2; s++)
        if (a->split_tokens[s] != b->split_tokens[s] || a->split_documents[s] != b->split_documents[s] ||
            a->split_shards[s] != b->split_shards[s])
            return 0;
    for (int i = 0; i < a->n_shards; i++) {
        const td_dm_shard *x = &a->shards[i], *y = &b->shards[i];
        if (strcmp(x->name, y->name) || x->split != y->split || x->size != y->size || x->tokens != y->tokens ||
            x->xxh3 != y->xxh3)
            return 0;
    }
    return 1;
}

/* a shard set's data.json: the parser's promises (the counts add up, each
 * shard a plain .bin name of 1024 + 2 * tokens bytes, names unique) and a
 * round trip through the writer */
static void data_manifest(const uint8_t *data, size_t size) {
    td_data_manifest m, back;
    td_err e;
    if (td_data_manifest_parse((const char *)data, size, &m, &e) != 0) {
        if (m.n_shards != 0 || m.shards != NULL) __builtin_trap(); /* freed and zeroed */
        return;
    }
    uint64_t tokens[2] = {0, 0};
    for (int i = 0; i < m.n_shards; i++) {
        const td_dm_shard *x = &m.shards[i];
        if (strchr(x->name, '/') || x->size != 1024 + 2 * x->tokens || (x->split != 0 && x->split != 1))
            __builtin_trap();
        tokens[x->split] += x->tokens;
        if (td_data_manifest_find(&m, x->name) != &m.shards[i]) __builtin_trap();
    }
    if (tokens[0] != m.split_tokens[0] || tokens[1] != m.split_tokens[1] || tokens[0] + tokens[1] != m.tokens)
        __builtin_trap();
    size_t len;
    char *text = td_data_manifest_format(&m, &len);
    if (!text || td_data_manifest_parse(text, len, &back, &e) != 0 || !same(&m, &back)) __builtin_trap();
    free(text);
    td_data_manifest_free(&back);
    td_data_manifest_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    td_err e;
    uint64_t n;
    td_st_header h;
    if (td_st_header_len(data, size, &n, &e) == 0 &&
        td_st_header_parse((const char *)data + 8, n, size, &h, &e) == 0) {
        check_header(&h, size);
        td_st_header_free(&h);
    }
    td_jv *v;
    if (td_json_parse((const char *)data, size, &v, &e) == 0) {
        int64_t x;
        const char *s;
        td_json_get_int(v, "a", INT64_MIN, INT64_MAX, &x, &e);
        td_json_get_str(v, "a", &s, &e);
        td_json_free(v);
    }
    td_llmc_header lh;
    td_llmc_header_parse(data, size, size, &lh, &e);
    td_hf_config c, again;
    if (td_hf_config_parse((const char *)data, size, &c, &e) == 0) {
        char *text = td_hf_config_format(&c);
        if (!text || td_hf_config_parse(text, strlen(text), &again, &e) != 0 || again.L != c.L ||
            again.H != c.H || again.C != c.C || again.T != c.T || again.V != c.V ||
            (c.chars && memcmp(c.chars, again.chars, sizeof *c.chars * (size_t)c.V) != 0))
            __builtin_trap();
        td_hf_config_free(&again);
        td_hf_config_free(&c);
        free(text);
    }
    td_profile p, q;
    if (td_profile_parse((const char *)data, size, &p, &e) == 0) {
        char *text = td_profile_format(&p);
        if (!text || td_profile_parse(text, strlen(text), &q, &e) != 0 || memcmp(&p, &q, sizeof p) != 0)
            __builtin_trap();
        free(text);
    }
    data_manifest(data, size);
    return 0;
}
