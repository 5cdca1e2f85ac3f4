/* Shared between the corpus loaders of src/data (not a public interface). */
#ifndef TRIDENT_DATA_INTERNAL_H
#define TRIDENT_DATA_INTERNAL_H

#include <stddef.h>

#include "trident/data.h"

/* Tokens of one .bin token file (llm.c or raw uint16) into *out (td_alloc'd);
 * returns the count, *max_id the largest (-1 if none). Errors name `label`. */
size_t td_data_load_bin(const char *path, const char *label, int **out, int *max_id);

/* --data naming a set of token shards: a directory, or a pattern with * ? [ */
int td_data_is_shard_set(const char *path);
/* Loads every shard of the set (sorted by name): a file whose name starts
 * with "val" or holds "_val" is validation, one that starts with "train" or
 * holds "_train" is training; without validation shards the training tokens
 * are split 90/10. vocab > 0: every id must be below it (errors name the
 * shard). Sets d's tokens and description; returns the largest id. */
int td_data_load_shards(td_dataset *d, const char *path, int vocab);

#endif
