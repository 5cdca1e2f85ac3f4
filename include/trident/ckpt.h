/* ckpt: sharded checkpoints with resharding on load.
 *
 * `--out DIR` holds one directory per saved step, named by the steps done
 * (DIR/step-00000400/), and a symbolic link DIR/latest naming the newest
 * complete one. A step directory holds manifest.json (formats_manifest.h:
 * the model config, tokenizer, step, seed, loss-scaler state, the layout it
 * was saved under, and for every tensor its global name, shape and the
 * pieces of it each file holds) and shard-NNNNN.safetensors, one per writing
 * rank: its pieces of the fp32 parameters (master weights) and AdamW
 * moments, each range written once by the lowest rank holding it, and its
 * per-dp-rank state (top-k residuals, local moments) as pieces of the same
 * tensors in its dp rank's sections (one per holder's copy of a replicated
 * tensor: formats_manifest.h). A save writes a temporary directory
 * (DIR/.step-00000400.tmp.TAG), every rank its shard in parallel; once all
 * are fsynced, world rank 0 writes the manifest, fsyncs, renames the
 * directory into place and points `latest` at it atomically (a new link
 * renamed over the old), then --keep removes older step directories. A
 * failed save removes the temporary directory and is an error; a save killed
 * half-way leaves the temporary directory behind (the next commit removes
 * it) and every earlier checkpoint and `latest` as they were.
 *
 * Loading reads any layout into any other: each rank puts together one
 * global tensor at a time from the pieces that hold it and copies the
 * elements it holds (td_param_global_index maps a tp slice, and an ep slice
 * of the experts' rows, to the tensor);
 * per-dp-rank state likewise when dp is unchanged, else it is dropped with
 * a note. */
#ifndef TRIDENT_CKPT_H
#define TRIDENT_CKPT_H

#include "trident/data.h"
#include "trident/formats_manifest.h"
#include "trident/grid.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    td_gpt_config cfg;
    td_tokenizer tok;
    int step;
    float *params;      /* [numel] canonical flat layout (unit_align 1) */
    float *m, *v;       /* [numel] or NULL */
    size_t numel;
    char dir[4096];     /* the step directory read */
    unsigned long long seed; /* the run's --seed */
} td_checkpoint;

/* What a checkpoint records beside the tensors, and the run's layout. */
typedef struct {
    int step;                 /* steps done (= the lr schedule's position) */
    unsigned long long seed;  /* init and data order are functions of (seed, step) */
    uint64_t run;             /* the run's id: made at its first start, kept by resumes */
    td_loss_scaler scaler;
    int dp, cp, tp, pp, zero, ranks; /* cp: context parallelism (1 in manifests before it) */
    int ep;                   /* expert parallelism (1 in manifests before it; 0 reads as 1) */
    const char *precision, *dp_mode, *grad_compress;
    int keep;                 /* --keep N: step directories kept, 0 = all */
    /* the training data: --data as given and its fingerprint (td_dataset.fp),
     * recorded as the manifest's "data"; data_path NULL: none recorded.
     * strict_data: a resume onto other data (or onto a checkpoint that
     * records none) is an error, else other data is a note */
    const char *data_path;
    uint64_t data_bytes, data_xxh3;
    int strict_data;
    int batch;                /* sequences per step: a blend's sample index is step x batch (0: unknown) */
    const char *run_config;   /* the run's flag values as JSON (td_flags_json), the manifest's
                                 "run_config"; NULL: none written (imports, tests) */
} td_ckpt_meta;
/* A one-process fp32 layout, no loss scaling, seed 0, a new run id. */
void td_ckpt_meta_default(td_ckpt_meta *m, int step);

/* The live state a sharded save writes and a resume fills: this rank's
 * strategy, grid and parameter table, and the model and tokenizer it
 * belongs to. Borrowed for the call. */
typedef struct {
    td_dp *dp;
    const td_grid *g;
    const td_param_table *t;
    const td_gpt_config *cfg;
    const td_tokenizer *tok;
} td_ckpt_state;

/* Sharded save of the state after meta->step steps into --out `out`:
 * every training rank writes its shard (td_dp_ranges, owner ranges only),
 * then world rank 0 commits. Collective over the training ranks (not
 * parameter servers: their mode has no ranges; use the writer below).
 * The step directory's path goes to path (rank 0). Returns the bytes of
 * bookkeeping the save held beside the state (no copy of it). */
size_t td_ckpt_save_sharded(const td_ckpt_state *st, const char *out, const td_ckpt_meta *meta, char *path,
                            size_t cap);
/* After a commit, on the rank that committed (world rank 0): --keep N
 * removes all but the N newest step directories (none when keep <= 0),
 * and the temporary directories of saves killed half-way are removed.
 * Apart from the save, so that its time is the writing's alone. Returns
 * the step directories removed. */
int td_ckpt_prune(const char *out, int step, int keep);
/* the same bytes for the consolidated writer of a model of n_rows tensors */
size_t td_ckpt_writer_bookkeeping(int n_rows);
/* --resume PATH (a step directory, or an --out directory: its latest):
 * checks that the checkpoint is of this model (config, tokenizer, seed) and
 * of this run's data (meta->data_*: other data is a note on rank 0, an error
 * under meta->strict_data), and
 * fills everything this rank holds in its own layout. Per-dp-rank state is
 * read (resharded) when dp equals the saved one, else dropped with a note.
 * meta: in, this run's layout; out, step and loss-scaler state. Every
 * training rank; no communication. */
void td_ckpt_resume(const td_ckpt_state *st, const char *path, td_ckpt_meta *meta);
/* The checks of td_ckpt_resume that need no state (the path, latest, the
 * manifest, the model, tokenizer and seed, every shard's header; not the
 * data blocks' checksums, which the load verifies), on one process: the trainer
 * runs them before it creates --out, so a refused resume leaves no empty
 * directory behind. Returns the checkpoint's step; fails as td_ckpt_resume. */
int td_ckpt_resume_check(const char *path, const td_gpt_config *cfg, const td_tokenizer *tok, unsigned long long seed);

/* Milliseconds this process has spent so far computing the checksums of
 * shard data it wrote (*write_ms) and verifying what it read (*read_ms):
 * differences around a save or a load are the integrity checks' cost
 * (bench/bench_ckpt.sh prints their share). */
void td_ckpt_checksum_ms(double *write_ms, double *read_ms);

/* The consolidated writer, on one rank (parameter servers' gathered saves,
 * td_ckpt_save): one shard holding whole tensors. */
typedef struct td_ckpt_writer td_ckpt_writer;
/* Starts the save of `step` (steps done) under out (created if missing). */
td_ckpt_writer *td_ckpt_writer_open(const char *out, const td_gpt_config *cfg,
                                    const td_tokenizer *tok, int step, int has_optimizer);
void td_ckpt_writer_meta(td_ckpt_writer *w, const td_ckpt_meta *meta);
/* Section 0 parameters, 1 AdamW m, 2 AdamW v: unit u of a buffer laid out
 * by table t (buf[0] is element t->unit_offset[u]). */
void td_ckpt_writer_put(td_ckpt_writer *w, int section, const td_param_table *t, int u,
                        const float *buf);
/* Every unit of every section must have been put. Commits as above and
 * frees w; the step directory's path goes to path (cap bytes). */
void td_ckpt_writer_commit(td_ckpt_writer *w, char *path, size_t cap);

/* Whole flat canonical buffers in one call (m, v may be NULL). */
void td_ckpt_save(const char *out, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel);

/* Loads a checkpoint of any layout into the canonical flat layout: path is a
 * step directory or an --out directory (follows its `latest`). Everything
 * read is validated; an error names the file and the field. */
void td_ckpt_load(td_checkpoint *ck, const char *path);
/* The same without the tensors (params, m, v NULL, numel 0): the manifest's
 * model, tokenizer, step and seed, checked as td_ckpt_load checks them. */
void td_ckpt_describe(td_checkpoint *ck, const char *path);
/* The manifest alone of the checkpoint at path (as td_ckpt_load's), parsed
 * and checked; dir gets the step directory. Errors name `what` (the flag)
 * and the file. The caller frees m (td_manifest_free). No shard is read. */
void td_ckpt_read_manifest(const char *path, const char *what, td_manifest *m, char *dir, size_t cap);
/* Document masking as a checkpoint was trained (its run_config's
 * --doc-mask, --eod-mask-loss, --eod, --doc-positions): all off and eod -1
 * (the tokenizer's) when absent, as in imports. A run_config that is not
 * JSON is an error naming dir's manifest. */
typedef struct {
    int doc_mask, eod_mask_loss, eod, pos_reset;
} td_ckpt_docs;
void td_ckpt_manifest_docs(const td_manifest *m, const char *dir, td_ckpt_docs *d);
/* The model a manifest describes, finished (td_gpt_config_finish); a
 * config the model refuses is an error naming dir's manifest. */
void td_ckpt_manifest_config(const td_manifest *m, const char *dir, td_gpt_config *cfg);
void td_ckpt_free(td_checkpoint *ck);

/* `trident ckpt check`: verifies a checkpoint without building a model:
 * the manifest (its own checksum, every field), every shard against it
 * (size, step, run, rank, header checksum), every block of every piece,
 * that the pieces of each tensor cover it exactly once per section, and
 * the values (finite weights, second moments >= 0). A block whose checksum
 * differs is printed (one line each, naming shard, rank, tensor and bytes)
 * and counted; anything else wrong is one error line and exit 2. No
 * communication, one process. */
typedef struct {
    char dir[4096];      /* the step directory checked */
    int step, layers, heads, embd, seq, vocab, n_files, n_tensors, n_sections, bad_blocks;
    int dp, cp, tp, pp, ep, zero, ranks;
    char moe[256];           /* the mixture of experts as flags ("--moe-experts 8 ..."), "" dense */
    char precision[16], dp_mode[32], grad_compress[64], tokenizer[16], run[17];
    unsigned long long seed;
    uint64_t bytes, blocks;  /* data read and checked */
    uint64_t elements[3];    /* params, adam_m, adam_v elements (0: absent) */
    double seconds;
} td_ckpt_summary;
void td_ckpt_check(const char *path, td_ckpt_summary *s);

#ifdef __cplusplus
}
#endif

#endif
