/* ckpt: checkpoints. A checkpoint is a directory holding model.bin (config,
 * tokenizer, parameters in the flat layout, optionally the AdamW moments)
 * and config.json for people. Written to a temporary name and renamed, so a
 * crash never leaves a half-written checkpoint under the real name.
 * (Sharded, resharding checkpoints are a later issue; this format is the
 * single-file export they will import from.) */
#ifndef TRIDENT_CKPT_H
#define TRIDENT_CKPT_H

#include "trident/data.h"
#include "trident/model.h"

typedef struct {
    td_gpt_config cfg;
    td_tokenizer tok;
    int step;
    float *params;      /* [numel] flat layout */
    float *m, *v;       /* [numel] or NULL */
} td_checkpoint;

/* params/m/v are full flat buffers (m, v may be NULL). */
void td_ckpt_save(const char *dir, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel);
/* Loads DIR/model.bin; a missing or malformed checkpoint is a clear error. */
void td_ckpt_load(td_checkpoint *ck, const char *dir);
void td_ckpt_free(td_checkpoint *ck);

#endif
