/* Private to src/ckpt: the shard files, the manifest writer and the commit. */
#ifndef TRIDENT_CKPT_INTERNAL_H
#define TRIDENT_CKPT_INTERNAL_H

#include <limits.h>
#include <stdint.h>

#include "trident/ckpt.h"
#include "trident/formats_safetensors.h"

/* td_ckpt_checksum_ms's counters (shard_write.c, shard_read.c) */
extern double td_ckpt_hash_ms, td_ckpt_verify_ms;

/* A save in progress: the temporary step directory every rank writes into. */
typedef struct {
    char out[PATH_MAX], tmp[PATH_MAX + 64], final[PATH_MAX + 64], name[32];
    int step;
    uint64_t run; /* the run's id, recorded in every shard and the manifest */
} td_ckpt_dir;

/* A shard's safetensors metadata (formats_manifest.h): what it is, and the
 * XXH3-64 of every TD_HASH_BLOCK bytes of each piece under "xxh3/KEY". */
#define TD_SHARD_META_STEP "trident_step"
#define TD_SHARD_META_RUN "trident_run"
#define TD_SHARD_META_RANK "trident_rank"
#define TD_SHARD_META_GRID "trident_grid"
#define TD_SHARD_META_BLOCK "trident_xxh3_block"
#define TD_SHARD_META_SUM "xxh3/"

/* out/.step-%08d.tmp.<tag>: the names only (rank 0 creates it); tag is
 * the saving job's id (td_job_id), so a cleanup tells its own apart */
void td_ckpt_dir_init(td_ckpt_dir *d, const char *out, int step, const char *tag);
/* removes a step directory trident wrote (its plain files, then itself) */
void td_ckpt_remove_dir(const char *dir);
/* Removes the step directory out/name so that no kill can leave it half
 * removed: renamed first to a temporary name of this job's
 * (.NAME.old.tmp.JOBID, which the next commit's clean-up removes if the
 * job dies), then emptied and removed. */
void td_ckpt_retire_dir(const char *out, const char *name);
/* creates --out (if missing) and the temporary directory */
void td_ckpt_dir_create(td_ckpt_dir *d);
/* A failed save on any rank: the temporary directory is removed (the
 * other ranks are stopped by the error's abort), earlier checkpoints and
 * `latest` stay, one line says so. */
_Noreturn void td_ckpt_save_failed(const td_ckpt_dir *d, const char *what, int err);

/* One shard file: tensors declared first (key, element count), the header
 * written at creation, each tensor's floats put by index. */
typedef struct {
    char key[192]; /* the longest: 22 + 1 + 95 (td_param.name) + 6 x 11 */
    uint64_t n;
} td_shard_item;
typedef struct td_shard td_shard;
/* items stays the caller's until td_shard_close; grid: the writer's grid
 * position ("dp 0 tp 1 pp 0"; "" for a consolidated shard). */
td_shard *td_shard_create(const td_ckpt_dir *d, int file_index, const char *grid, const td_shard_item *items, int n);
/* Hashes the piece's blocks as it writes them; a test fault (save-kill) may
 * SIGKILL this rank half-way through its data */
void td_shard_put(td_shard *s, int i, const float *data);
/* rewrites the header with the checksums, fsyncs, closes, frees */
void td_shard_close(td_shard *s);
/* bytes a save of n tensors holds beside the state: the item list, data
 * pointers, the header's tensor table and offsets */
size_t td_shard_bookkeeping(int n);
/* "shard-%05d.safetensors" */
void td_shard_name(char *buf, size_t cap, int file_index);

/* Piece keys inside shard files: "SECTION/NAME/TP/TP_RANK/BEGIN", for an
 * expert-parallel slice (ep > 1) "SECTION/NAME/TP/TP_RANK/EP/EP_RANK/BEGIN"
 * (section names: td_mf_section_name). */
void td_piece_key(char *buf, size_t cap, int section, const char *name, int tp, int tp_rank, int ep, int ep_rank,
                  size_t begin);

/* Elements [lo, lo + n) of a table's flat layout, lying at data. */
typedef struct {
    size_t lo, n;
    float *data;
} td_ckpt_range;

/* One rank's shard of a sharded save: its world rank (the file's number)
 * and grid position, its table (tp and ep slices, pipeline units held), the
 * owner ranges of each model section in that table's flat layout (where
 * the data lies) and its per-dp-rank state (NULL: none). Its pieces are the
 * ranges cut at tensor boundaries, less what another rank writes: rows
 * replicated over tp (td_param_tp_replicated) on tp ranks other than 0, the
 * tied embedding on the last pipeline stage. Keys name the tp slice and,
 * for the experts' rows, the ep slice. */
typedef struct {
    int world_rank, dp_rank, tp_rank, pp_rank;
    const td_param_table *t;
    const td_ckpt_range *ranges[TD_MF_NSECTIONS];
    int n_ranges[TD_MF_NSECTIONS];
    const float *state[TD_MF_RANK_KINDS];
} td_shard_src;
/* Writes d->tmp/shard-WORLD_RANK.safetensors; returns the bytes of
 * bookkeeping it held beside the state. td_ckpt_save_sharded's, and the
 * tests' (a layout without a run). */
size_t td_ckpt_write_shard(const td_ckpt_dir *d, const td_shard_src *src);

/* A mixture of experts as the flags that make it ("--moe-experts 8
 * --moe-top-k 2 ..."; with coefs the training coefficients too), for
 * messages; "no experts" for a dense model. */
void td_ckpt_moe_text(const td_moe_config *e, int coefs, char *buf, size_t cap);

/* Rank 0, after every shard is fsynced: manifest.json from the shards'
 * headers (t: any table of the model, for split dims), then the atomic
 * rename and `latest` (td_ckpt_prune applies --keep afterwards). */
/* --resume: the checkpoint's training data (m's "data") against this run's
 * (meta->data_*): other data is a note (printed when `print`), an error
 * under meta->strict_data, as is a checkpoint that records none. */
void td_ckpt_resume_data_check(const td_manifest *m, const td_ckpt_meta *meta, const char *dir, int print);
void td_ckpt_finish(const td_ckpt_dir *d, int n_files, const td_ckpt_meta *meta, const td_gpt_config *cfg,
                    const td_tokenizer *tok, const td_param_table *t, char *path, size_t cap);
/* The manifest's JSON text (malloc'd). */
char *td_manifest_format(const td_ckpt_dir *d, int n_files, const td_ckpt_meta *meta, const td_gpt_config *cfg,
                         const td_tokenizer *tok, const td_param_table *t, size_t *len);

/* Reading: a step directory's manifest and shards. */
typedef struct {
    char dir[PATH_MAX];
    td_manifest m;
    int *fd;             /* [n_files] opened lazily, -1 */
    td_st_header *hdr;   /* [n_files] parsed with the file's first use */
    uint64_t *flen;
    /* NULL: a block whose checksum differs is an error (every reader);
     * else it is reported here and the read goes on (ckpt check) */
    void (*report)(void *ctx, const char *path, int rank, const char *key, size_t block, size_t off, size_t len,
                   uint64_t have, uint64_t want);
    void *report_ctx;
} td_ckpt_reader;
/* path: a step directory or an --out directory (follows latest); what names
 * the flag in errors. */
void td_ckpt_reader_open(td_ckpt_reader *r, const char *path, const char *what);
/* Opens and checks every shard's header now (size, step, run, rank, header
 * checksum), no data: what a reader would find first, found up front. */
void td_ckpt_reader_open_shards(td_ckpt_reader *r);
void td_ckpt_reader_close(td_ckpt_reader *r);
/* Reads file f's tensor `key` (n floats, F32) into dst and verifies its
 * blocks' checksums; errors name the file, rank and tensor. The file is
 * checked against the manifest at its first use (size, step, run, rank,
 * the header's checksum). */
void td_ckpt_reader_get(td_ckpt_reader *r, int f, const char *key, uint64_t n, float *dst);
/* The ranges [lo, lo + n) of table t's flat layout this rank fills, with
 * where to: for each tensor of t overlapping them, the global tensor is put
 * together from the manifest's pieces of `section` and this rank's elements
 * copied. Returns 0 when the manifest holds no piece of the section. */
int td_ckpt_reader_fill(td_ckpt_reader *r, const td_param_table *t, int section, const td_ckpt_range *rg,
                        int n_ranges);

#endif
