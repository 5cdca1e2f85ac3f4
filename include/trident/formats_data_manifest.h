/* formats_data_manifest: DIR/data.json, the manifest `trident tokenize`
 * writes beside its token shards, so that a shard set says what it is:
 *   {"format": "trident-data", "version": 1, "tokenizer": "gpt2" | "hf:XXH3", "vocab": 50257,
 *    "shard_format": "llmc", "tokens": N, "documents": D,
 *    "train": {"tokens": n, "documents": d, "shards": k}, "val": {...},
 *    "shards": [{"name": "NAME_train_000000.bin", "split": "train", "size": bytes,
 *                "tokens": n, "xxh3": "16 hex digits"}, ...]}
 * A document is counted in the split where it starts (its <|endoftext|>);
 * a shard's xxh3 is the XXH3-64 of all its bytes (header and tokens).
 * Untrusted input, like all of src/formats: no I/O, no exits; every error is
 * "field X: what" in td_err. The parser checks the totals against the
 * splits and the shards (an edited count is refused) and that every shard
 * has a plain .bin file name and the size its format gives its tokens.
 * shard_format says what the shards are: "llmc" (llm.c token files, 1024 +
 * width * tokens bytes; the default when absent, as older manifests are) or
 * "megatron" (Megatron-LM .bin files of width * tokens bytes, each beside
 * its .idx, formats_indexed.h). The width is the vocabulary's: 2 bytes up
 * to 65536 ids, else 4 (llm.c uint32, Megatron int32). */
#ifndef TRIDENT_FORMATS_DATA_MANIFEST_H
#define TRIDENT_FORMATS_DATA_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_DATA_MANIFEST_VERSION 1
#define TD_DATA_MANIFEST_NAME "data.json"
#define TD_DATA_MANIFEST_MAX_BYTES (64u << 20)

typedef struct {
    char *name;      /* a plain file name in the manifest's directory (malloc'd) */
    int split;       /* 0 train, 1 val */
    uint64_t size, tokens, xxh3;
} td_dm_shard;

typedef struct {
    char tokenizer[32];            /* "gpt2", or "hf:" and the tokenizer.json's XXH3 in 16 hex digits */
    int vocab;
    int megatron;                  /* shard_format: 1 "megatron", 0 "llmc" */
    uint64_t tokens, documents;    /* totals */
    uint64_t split_tokens[2], split_documents[2]; /* train, val */
    int split_shards[2];
    int n_shards;
    td_dm_shard *shards;           /* [n_shards] (malloc'd) */
} td_data_manifest;

/* Parses and checks data.json's text; on error *m is freed and zeroed. */
int td_data_manifest_parse(const char *text, size_t n, td_data_manifest *m, td_err *e);
/* The JSON text of m (malloc'd, *len bytes, NUL-terminated; NULL: out of memory). */
char *td_data_manifest_format(const td_data_manifest *m, size_t *len);
void td_data_manifest_free(td_data_manifest *m);
/* Bytes per token of a vocabulary's shards: 2 (uint16) up to 65536 ids,
 * else 4 (int32 / uint32). */
int td_data_manifest_width(int vocab);
/* The entry of shard file `name` (a plain name); NULL if not listed. */
const td_dm_shard *td_data_manifest_find(const td_data_manifest *m, const char *name);

#ifdef __cplusplus
}
#endif

#endif
