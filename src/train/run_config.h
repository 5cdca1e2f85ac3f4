/* The run's configuration beyond the flag table: what --resume takes from
 * its checkpoint (docs/config.md). */
#ifndef TRIDENT_RUN_CONFIG_H
#define TRIDENT_RUN_CONFIG_H

#include "trident/flags.h"
#include "trident/train.h"

/* --resume (given or from --config): reads the checkpoint's manifest (no
 * shard) and, for each of --layers --heads --embd --seq --vocab
 * --tokenizer --data --seed not given, takes the checkpoint's value (the
 * model config and tokenizer it records; data from its run_config, if it
 * has one; the seed unless it is a step-0 import); a given one that
 * contradicts the checkpoint is one error naming both values. Every rank
 * reads the manifest; no communication. Nothing without --resume. */
void td_train_resume_defaults(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info);

#endif
