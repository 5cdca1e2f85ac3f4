/* formats_manifest: the parser of a sharded checkpoint's manifest.json
 * (src/formats/manifest.c; written by src/ckpt/manifest.c). Untrusted input:
 * never exits or prints, returns -1 with "field X: what" in td_err, fuzzed.
 *
 * The manifest describes the global training state in layout-independent
 * terms (the step directory's README is ckpt.h):
 *   {"format": "trident-checkpoint", "version": 5, "step": S, "run": "16 hex digits",
 *    "config": {"layers", "heads", "embd", "seq", "vocab"[, llama's: "arch", "kv_heads", "ffn_hidden",
 *               "tie_embeddings", "norm_eps", "rope_theta", "rope_scaling"]
 *               [, "moe": {"experts", "top_k", "every", "ffn_hidden", "shared", "router":
 *                          "softmax"|"sigmoid", "norm_topk": bool, "aux_coef", "z_coef",
 *                          "bias_rate", "capacity"}] (absent: a dense model)},
 *    "tokenizer": {"kind": "char"|"byte"|"ids"|"gpt2"|"cl100k"|"o200k"|"hf", "vocab": V,
 *                  "chars": [code points] (char), "file": tokenizer.json path, "xxh3": "16
 *                  hex digits" of its bytes (hf)},
 *    "seed": N, "lr_step": S,
 *    "loss_scale": {"mode": 0..2, "scale": F, "clean": n, "consecutive": n, "skipped": n},
 *    "layout": {"dp", "cp", "tp", "pp", "ep", "zero", "ranks", "precision", "dp_mode", "grad_compress"}
 *              (cp, ep: 1 where absent),
 *    "data": {"path": --data, "bytes": N, "xxh3": "16 hex digits"} (optional: the training data),
 *    "files": [{"name": "shard-00000.safetensors", "rank": r, "grid": "dp 0 tp 0 pp 0",
 *               "size": bytes, "header_xxh3": "16 hex digits"}, ...],
 *    "run_config": {"layers": 4, "data": "x.txt", ...} (optional: train's flags, docs/config.md),
 *    "tensors": [{"name", "shape": [..], "dtype": "F32",
 *                 "pieces": [{"section": "params"|"adam_m"|"adam_v"|"rsK_dpD", "file": i, "key": K,
 *                             "tp": n, "tp_rank": r, ["ep": n, "ep_rank": r,] "split_dim": d,
 *                             "groups": g, "begin": b, "end": e}]}],
 *    "manifest_xxh3": "16 hex digits"}
 * Integrity: "run" names the training run (one id from the first start on,
 * kept by every resume), so a shard of another run is told from this run's.
 * Each file's entry records its size and the XXH3-64 of its header (the
 * first 8 + N bytes), and the header's metadata records the step, run and
 * rank it was written for and an XXH3-64 per 4 MiB block of every piece
 * ("xxh3/KEY"): the header's checksum thus covers every byte of the data.
 * manifest_xxh3 is the last member: the XXH3-64 of every byte of the text
 * before its value's opening quote; only "}" and white space may follow.
 * A piece's key must be SECTION/NAME/TP/TP_RANK/BEGIN of its own fields, or
 * SECTION/NAME/TP/TP_RANK/EP/EP_RANK/BEGIN for a piece with ep > 1.
 * Section rsK_dpD is data-parallel rank D's (D < layout.dp) per-dp-rank
 * state of kind K (td_dp_rank_state: 0 the top-k residual, 1 and 2 the
 * top-k update scheme's local AdamW moments), a tensor like the others.
 * Every holder of a replicated tensor has its own state of it (its top-k
 * selection is its own): rsK_dpD holds tp rank 0's and the first stage's;
 * rsK_dpD_tpR tp rank R's copies of tensors replicated over tp, and
 * ..._tied the last pipeline stage's copy of the tied embedding.
 * A piece is elements [begin, end) of tp rank tp_rank's slice of the tensor
 * (under a layout of tp ranks), in the row-major order of that slice; the
 * slice's element -> global index mapping is td_param_global_index's. The
 * rows of a mixture of experts' stacked experts (TD_SPLIT_EXPERT: the same
 * on every tp rank, split over the expert-parallel ranks) name the slice
 * by "ep" and "ep_rank" too (written for every piece of such a row; absent:
 * 1 and 0): ep rank r of ep holds the experts [r E/ep, (r+1) E/ep), rows
 * [r shape[0]/ep, (r+1) shape[0]/ep) of the stack. */
#ifndef TRIDENT_FORMATS_MANIFEST_H
#define TRIDENT_FORMATS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_MANIFEST_VERSION 5
#define TD_MANIFEST_MAX_BYTES (256u << 20)
enum { TD_MF_PARAMS, TD_MF_ADAM_M, TD_MF_ADAM_V, TD_MF_NSECTIONS };
extern const char *const td_mf_section_names[TD_MF_NSECTIONS]; /* "params", "adam_m", "adam_v" */
/* Sections past the model's: per-dp-rank state kind k of dp rank d (below
 * TD_MF_MAX_DP), copy (tp replica r, tied: the last stage's copy of the
 * tied embedding); the ids stay within an int. */
#define TD_MF_RANK_KINDS 3
#define TD_MF_MAX_DP 65536
#define TD_MF_MAX_TP 4096
static inline int td_mf_rank_section(int kind, int dp_rank, int tied, int replica) {
    return TD_MF_NSECTIONS + ((2 * dp_rank + tied) * TD_MF_MAX_TP + replica) * TD_MF_RANK_KINDS + kind;
}
/* "params" ... or "rsK_dpD[_tpR][_tied]" (buf: at least 32 bytes) */
void td_mf_section_name(int section, char *buf, size_t cap);

typedef struct {
    int section, file, tp, tp_rank, split_dim, groups;
    int ep, ep_rank; /* 1, 0 where the piece names none */
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

/* One shard file's entry (files[]). */
typedef struct {
    char *name;           /* "shard-NNNNN.safetensors" */
    int rank;             /* the world rank that wrote it */
    char grid[64];        /* its grid position, as its header says ("dp 0 tp 1 pp 0") */
    uint64_t size;        /* bytes */
    uint64_t header_xxh3; /* of its first 8 + N bytes */
} td_mf_file;

typedef struct {
    int version, step, lr_step;
    uint64_t seed;
    uint64_t run;            /* the run's id */
    int layers, heads, embd, seq, vocab;
    /* the model family (optional in "config": absent = gpt2, whose other
     * fields are then 0); llama writes every one of them */
    char arch[16];
    int kv_heads, ffn_hidden, tie;  /* tie: 1 tied head, 2 untied (TD_TIE_*), 0 absent */
    double norm_eps, rope_theta;
    double rope_factor, rope_low_freq, rope_high_freq; /* rope_scaling (llama3); factor 0: none */
    int rope_orig_max_pos;
    /* "moe" (optional in "config": absent = dense, moe_experts 0) */
    int moe_experts, moe_top_k, moe_every, moe_ffn_hidden, moe_shared;
    int moe_router;    /* td_moe_router: 0 softmax, 1 sigmoid */
    int moe_norm_topk; /* 1 on, 2 off (TD_TIE_*) */
    double moe_aux_coef, moe_z_coef, moe_bias_rate, moe_capacity;
    int tok_kind, tok_vocab; /* td_tokenizer_kind */
    uint32_t *chars;         /* [tok_vocab] for the char tokenizer, else NULL */
    char *tok_file;          /* hf: the tokenizer.json (malloc'd), else NULL; td_ckpt_reader_open
                              * makes it the path of tok_copy when there is one */
    char *tok_copy;          /* hf: "copy", the output directory's copy of the file, a name in the
                              * step directory's parent (malloc'd); NULL in older manifests */
    uint64_t tok_xxh3;       /* hf: the XXH3-64 of its bytes */
    int ls_mode, ls_clean, ls_consecutive, ls_skipped;
    float ls_scale;
    int dp, cp, tp, pp, ep, zero, ranks; /* cp, ep: 1 where the layout names none (older manifests) */
    char precision[16], dp_mode[32], grad_compress[64];
    int n_files;
    char **files;            /* [n_files] names (= shards[i].name) */
    td_mf_file *shards;      /* [n_files] */
    int n_tensors;
    td_mf_tensor *tensors;
    /* "data" (optional; absent in older manifests: has_data 0, unknown) */
    int has_data;
    char *data_path;         /* --data as the run gave it */
    uint64_t data_bytes, data_xxh3; /* td_data_fingerprint */
    /* "run_config" (optional; manifests before it have none): the run's
     * effective flag values, the JSON object --config reads, verbatim
     * (malloc'd), or NULL */
    char *run_config;
} td_manifest;

/* Parses and checks every field (types, ranges, file indices, piece ranges
 * within the shape's element count, names unique, file names plain
 * "shard-NNNNN.safetensors", each piece's key its own fields') and the
 * manifest's own checksum first. On error *m is freed and zeroed. */
int td_manifest_parse(const char *text, size_t n, td_manifest *m, td_err *e);
void td_manifest_free(td_manifest *m);
const td_mf_tensor *td_manifest_tensor(const td_manifest *m, const char *name);
/* The key a piece of tensor `name` must have: "SECTION/NAME/TP/TP_RANK/BEGIN", or with ep > 1
 * "SECTION/NAME/TP/TP_RANK/EP/EP_RANK/BEGIN". */
void td_mf_piece_key(char *buf, size_t cap, int section, const char *name, int tp, int tp_rank, int ep, int ep_rank,
                     uint64_t begin);
/* The text the writer appends after the last member: ",\n \"manifest_xxh3\": \"" then 16 hex
 * digits then "\"}\n"; td_manifest_seal writes it for text[0..n) into out (cap >= n + 64) and
 * returns the sealed length. */
size_t td_manifest_seal(const char *text, size_t n, char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
