/* Shared between the corpus loaders of src/data (not a public interface). */
#ifndef TRIDENT_DATA_INTERNAL_H
#define TRIDENT_DATA_INTERNAL_H

#include <stddef.h>

#include "trident/data.h"
#include "trident/formats_hash.h"

/* Tokens of one .bin token file (llm.c uint16 or uint32, raw uint16, or a
 * Megatron-LM .bin, which a PREFIX.idx beside it marks) into *out
 * (td_alloc'd); returns the count, *max_id the largest (-1 if none). Their
 * sequences are concatenated in index order, nothing inserted between
 * documents. Errors name `label` (and the .idx). vocab > 0: a file of
 * uint16 tokens for a vocabulary above 65536 is an error. */
size_t td_data_load_bin(const char *path, const char *label, int vocab, int **out, int *max_id);

/* --data naming a set of token shards: a directory, or a pattern with * ? [ */
int td_data_is_shard_set(const char *path);
/* Loads every shard of the set (sorted by name): a file whose name starts
 * with "val" or holds "_val" is validation, one that starts with "train" or
 * holds "_train" is training; without validation shards the training tokens
 * are split 90/10. vocab > 0: every id must be below it (errors name the
 * shard). Sets d's tokens and description; returns the largest id. With
 * a manifest m (read from json; NULL: none) each shard is checked against
 * it before it is parsed, and a directory must hold every shard it lists;
 * every byte goes to `all` (the data's fingerprint). */
int td_data_load_shards(td_dataset *d, const char *path, int vocab, const td_data_manifest *m, const char *json,
                        td_hash_stream *all);

/* The XXH3-64 of the file at path (read in chunks; errors name `label`),
 * its size in *size; every byte also goes to `all` when not NULL (the
 * data's fingerprint). */
uint64_t td_data_file_hash(const char *path, const char *label, uint64_t *size, td_hash_stream *all);
/* The shard at path (its label for errors) against manifest m (read from
 * json): listed, of its size and XXH3; else an error naming the shard. */
void td_data_shard_check(const td_data_manifest *m, const char *json, const char *path, const char *label,
                         uint64_t size, uint64_t xxh3);

/* One source as td_data_load reads a PATH that is not a blend. */
void td_data_load_one(td_dataset *d, const char *path, const char *tokenizer, int vocab, int T);
/* A blend (blend.c): each source loaded, one tokenizer checked, their
 * splits concatenated into d, d->blend set. */
void td_data_load_blend(td_dataset *d, const td_data_blend_spec *bs, const char *tokenizer, int vocab, int T);
void td_data_blend_free(struct td_data_blend *b);
/* td_data_batch of a blend (data.h: the greedy rule) */
void td_data_blend_batch(const td_dataset *d, int split, uint64_t seed, int64_t step, int first, int count, int T,
                         int *inputs, int *targets);

#endif
