/* ckpt: checkpoints.
 *
 * `--out DIR` holds one directory per saved step, named by the steps done
 * (DIR/step-00000400/ with model.bin and config.json, formats_ckpt.h), and a
 * symbolic link DIR/latest naming the newest complete one. A save writes a
 * new step directory under a temporary name (DIR/.step-00000400.tmp.PID),
 * checks every write and close, fsyncs the files and the directory, renames
 * it into place, then points `latest` at it atomically (a new link renamed
 * over the old) and fsyncs DIR. A failed save removes its temporary files,
 * leaves every earlier checkpoint and `latest` as they were, and is an error.
 *
 * The writer streams: the trainer gathers one unit at a time to the writing
 * rank and hands it over, so no rank holds the whole state twice.
 * (Sharded, resharding checkpoints are a later issue; this single-file
 * format is what they will import from.) */
#ifndef TRIDENT_CKPT_H
#define TRIDENT_CKPT_H

#include "trident/data.h"
#include "trident/model.h"

typedef struct {
    td_gpt_config cfg;
    td_tokenizer tok;
    int step;
    float *params;      /* [numel] canonical flat layout (unit_align 1) */
    float *m, *v;       /* [numel] or NULL */
    size_t numel;
    char dir[4096];     /* the step directory read */
} td_checkpoint;

typedef struct td_ckpt_writer td_ckpt_writer;

/* Starts the save of `step` (steps done) under out (created if missing):
 * the temporary step directory and model.bin's header and vocabulary. */
td_ckpt_writer *td_ckpt_writer_open(const char *out, const td_gpt_config *cfg,
                                    const td_tokenizer *tok, int step, int has_optimizer);
/* Section 0 parameters, 1 AdamW m, 2 AdamW v: unit u of a buffer laid out
 * by table t (buf[0] is element t->unit_offset[u]); written to its place
 * in the canonical layout. */
void td_ckpt_writer_put(td_ckpt_writer *w, int section, const td_param_table *t, int u,
                        const float *buf);
/* Every unit of every section must have been put. Commits as above and
 * frees w; the step directory's path goes to path (cap bytes). */
void td_ckpt_writer_commit(td_ckpt_writer *w, char *path, size_t cap);

/* Whole flat canonical buffers in one call (m, v may be NULL). */
void td_ckpt_save(const char *out, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel);

/* Loads a checkpoint: path is a step directory (holds model.bin) or a
 * directory written by --out (follows its `latest`). Everything read is
 * validated (formats_ckpt.h); an error names the file and the field. */
void td_ckpt_load(td_checkpoint *ck, const char *path);
void td_ckpt_free(td_checkpoint *ck);

#endif
