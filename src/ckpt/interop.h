/* The pieces export.c and import.c share with the Llama format
 * (hf_llama.c): safetensors files prepared and written from the canonical
 * buffer, the tokenizer's Hugging Face files, untrusted files read whole
 * and their tensors converted, the tokenizer an import carries. Every call
 * fails as ckpt_interop.h says: one error line, exit 2 (bad input) or 74
 * (a failed write, staged.h), no temporary output left behind. */
#ifndef TD_CKPT_INTEROP_INTERNAL_H
#define TD_CKPT_INTEROP_INTERNAL_H

#include <stddef.h>

#include "staged.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_safetensors.h"

/* ---- export.c ------------------------------------------------------------ */

/* One safetensors file holding rows [lo, hi) of a canonical table, in
 * dtype F32 or BF16 (round to nearest even), prepared in memory (header and
 * sizes) before anything is created. Names and shapes are Hugging Face's:
 * GPT-2's (prefix + GPT2Model's name, Conv1D weights transposed) or, for
 * the Llama family, the table's own names and shapes. */
typedef struct {
    td_st_tensor *st;
    char (*names)[112];
    int lo, hi;
    td_st_dtype dtype;
    char *hdr;      /* u64 length + JSON header */
    size_t hlen;    /* its bytes */
    size_t bytes;   /* the whole file */
    size_t scratch; /* bytes of room the write needs: its largest tensor in fp32 (and bf16) */
} td_st_plan;
void td_st_plan_prepare(td_st_plan *sp, const td_param_table *t, int lo, int hi, const char *prefix,
                        td_st_dtype dtype);
/* One buffer of the scratch the writes of plans[0..n) need, allocated
 * before the output is created (the files of a sharded model share it). */
void *td_st_plan_scratch(const td_st_plan *plans, int n);
void td_st_plan_write(const td_st_plan *sp, const td_param_table *t, const float *params, void *scratch,
                      td_staged *s, int fd, const char *name);
void td_st_plan_free(td_st_plan *sp);
/* text, or the error "export: out of memory formatting WHAT" */
char *td_export_checked(char *text, const char *what);
/* A whole file `name` inside a directory output. */
void td_export_put(td_staged *d, const char *name, const char *text, size_t len);

/* The tokenizer's Hugging Face files of a checkpoint: for gpt2 vocab.json,
 * merges.txt, tokenizer_config.json, special_tokens_map.json (texts[i] of
 * td_tok_file_names[i], malloc'd, lens[i] bytes); none (all NULL) for the
 * tokenizers no Hugging Face tokenizer reproduces. */
enum { TD_TOK_FILES = 5 }; /* GPT-2's four files, or a tokenizer.json */
extern const char *const td_tok_file_names[TD_TOK_FILES];
void td_export_tok_files(const td_checkpoint *ck, const td_hf_config *hc, char *texts[TD_TOK_FILES],
                         size_t lens[TD_TOK_FILES], int *merges);
/* The end of export's summary line: the tokenizer files written, or a
 * note saying why there are none. */
void td_export_tok_summary(const td_checkpoint *ck, int merges);
/* The config.json fields of a checkpoint that are not the model's: its
 * tokenizer (name, characters) and sizes, for td_hf_*_format. */
td_hf_config td_export_hf_config(const td_checkpoint *ck);

/* ---- import.c ------------------------------------------------------------ */

/* The whole file (its size from fstat, not from its contents). */
unsigned char *td_import_read_all(const char *path, size_t *len);
/* n elements of dtype (F32, BF16, F16) at src as floats, each finite. */
void td_import_to_float(float *dst, const unsigned char *src, size_t n, td_st_dtype dt, const char *path,
                        const char *name);

/* ---- hf_llama.c ---------------------------------------------------------- */

/* --format hf-llama: the directory (refused first by td_export through
 * td_hf_llama_file, which names the entries --overwrite may replace). */
int td_hf_llama_file(const char *name);
void td_export_hf_llama(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o);
/* Reads --in (a directory, a model.safetensors.index.json or one
 * safetensors file) and its config.json into a Llama config (T: seq when
 * positive, else max_position_embeddings), its table and canonical buffer,
 * and the config's trident tokenizer fields (hc). */
void td_import_hf_llama(const td_import_opts *o, td_gpt_config *cfg, td_hf_config *hc, float **params,
                        td_param_table *t);

#endif
