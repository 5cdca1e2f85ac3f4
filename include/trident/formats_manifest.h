/* formats_manifest: the parser of a sharded checkpoint's manifest.json
 * (src/formats/manifest.c; written by src/ckpt/manifest.c). Untrusted input:
 * never exits or prints, returns -1 with "field X: what" in td_err, fuzzed.
 *
 * The manifest describes the global training state in layout-independent
 * terms (the step directory's README is ckpt.h):
 *   {"format": "trident-checkpoint", "version": 3, "step": S,
 *    "config": {"layers", "heads", "embd", "seq", "vocab"},
 *    "tokenizer": {"kind": "char"|"byte"|"ids"|"gpt2", "vocab": V, "chars": [code points]},
 *    "seed": N, "lr_step": S,
 *    "loss_scale": {"mode": 0..2, "scale": F, "clean": n, "consecutive": n, "skipped": n},
 *    "layout": {"dp", "tp", "pp", "zero", "ranks", "precision", "dp_mode", "grad_compress"},
 *    "files": ["shard-00000.safetensors", ...],
 *    "tensors": [{"name", "shape": [..], "dtype": "F32",
 *                 "pieces": [{"section": "params"|"adam_m"|"adam_v", "file": i, "key": K,
 *                             "tp": n, "tp_rank": r, "split_dim": d, "groups": g,
 *                             "begin": b, "end": e}]}],
 *    "rank_state": [{"kind": 0..2, "rank": world rank, "file": i, "key": K, "numel": n}]}
 * A piece is elements [begin, end) of tp rank tp_rank's slice of the tensor
 * (under a layout of tp ranks), in the row-major order of that slice; the
 * slice's element -> global index mapping is td_param_global_index's. */
#ifndef TRIDENT_FORMATS_MANIFEST_H
#define TRIDENT_FORMATS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#define TD_MANIFEST_VERSION 3
#define TD_MANIFEST_MAX_BYTES (256u << 20)
enum { TD_MF_PARAMS, TD_MF_ADAM_M, TD_MF_ADAM_V, TD_MF_NSECTIONS };
extern const char *const td_mf_section_names[TD_MF_NSECTIONS]; /* "params", "adam_m", "adam_v" */

typedef struct {
    int section, file, tp, tp_rank, split_dim, groups;
    uint64_t begin, end;
    char *key;
} td_mf_piece;

typedef struct {
    char *name;
    int ndim;
    int64_t shape[2];
    int n_pieces;
    td_mf_piece *pieces;
} td_mf_tensor;

typedef struct {
    int kind, rank, file;
    uint64_t numel;
    char *key;
} td_mf_rank_state;

typedef struct {
    int version, step, lr_step;
    uint64_t seed;
    int layers, heads, embd, seq, vocab;
    int tok_kind, tok_vocab; /* td_tokenizer_kind */
    uint32_t *chars;         /* [tok_vocab] for the char tokenizer, else NULL */
    int ls_mode, ls_clean, ls_consecutive, ls_skipped;
    float ls_scale;
    int dp, tp, pp, zero, ranks;
    char precision[16], dp_mode[32], grad_compress[64];
    int n_files;
    char **files;
    int n_tensors;
    td_mf_tensor *tensors;
    int n_rank_state;
    td_mf_rank_state *rank_state;
} td_manifest;

/* Parses and checks every field (types, ranges, file indices, piece ranges
 * within the shape's element count, names unique, file names plain
 * "shard-NNNNN.safetensors"). On error *m is freed and zeroed. */
int td_manifest_parse(const char *text, size_t n, td_manifest *m, td_err *e);
void td_manifest_free(td_manifest *m);
const td_mf_tensor *td_manifest_tensor(const td_manifest *m, const char *name);

#endif
