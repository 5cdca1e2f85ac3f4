/* The pieces export.c and import.c share with the Llama-family formats
 * (hf_llama.c, hf_mixtral.c): safetensors files prepared and written from
 * the canonical buffer, the tokenizer's Hugging Face files, untrusted files
 * read whole and their tensors converted, the tokenizer an import carries,
 * and a Hugging Face directory of the Llama family's form written and read
 * for a family's names. Every call fails as ckpt_interop.h says: one error
 * line, exit 2 (bad input) or 74 (a failed write, staged.h), no temporary
 * output left behind. */
#ifndef TD_CKPT_INTEROP_INTERNAL_H
#define TD_CKPT_INTEROP_INTERNAL_H

#include <stddef.h>

#include "staged.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_json.h"
#include "trident/formats_safetensors.h"

/* ---- export.c ------------------------------------------------------------ */

/* One tensor of a Hugging Face file: its name and shape there, and where
 * its elements lie in the canonical buffer: from element off on, row-major
 * in that shape, or (GPT-2's Conv1D weights) transposed: [shape[1],
 * shape[0]] there. A whole row of the table, or a part of one (an
 * expert's slice of a stacked row). */
typedef struct {
    char name[112];
    int ndim;
    int64_t shape[2];
    size_t off;
    int transposed;
} td_hf_item;
/* The items of rows [lo, hi) of a canonical table: GPT-2's (prefix +
 * GPT2Model's name, Conv1D weights transposed) or, for the Llama family,
 * the table's own names and shapes. */
void td_hf_items_of_rows(const td_param_table *t, int lo, int hi, const char *prefix, td_hf_item *out);
/* An item's elements. */
size_t td_hf_item_numel(const td_hf_item *it);

/* One safetensors file holding items[0..n), in dtype F32 or BF16 (round
 * to nearest even), prepared in memory (header and sizes) before anything
 * is created. The items are borrowed until td_st_plan_free. */
typedef struct {
    const td_hf_item *items;
    int n;
    td_st_tensor *st;
    td_st_dtype dtype;
    char *hdr;      /* u64 length + JSON header */
    size_t hlen;    /* its bytes */
    size_t bytes;   /* the whole file */
    size_t scratch; /* bytes of room the write needs: its largest tensor in fp32 (and bf16) */
} td_st_plan;
void td_st_plan_prepare(td_st_plan *sp, const td_hf_item *items, int n, td_st_dtype dtype);
/* One buffer of the scratch the writes of plans[0..n) need, allocated
 * before the output is created (the files of a sharded model share it). */
void *td_st_plan_scratch(const td_st_plan *plans, int n);
void td_st_plan_write(const td_st_plan *sp, const float *params, void *scratch, td_staged *s, int fd,
                      const char *name);
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

/* ---- hf_llama.c: a Hugging Face directory of the Llama family ------------- */

/* A family of Hugging Face's Llama-like causal LMs (LlamaForCausalLM,
 * MixtralForCausalLM): their directories are the same (model.safetensors
 * or shards with model.safetensors.index.json, config.json,
 * generation_config.json, the tokenizer's files) and so are their
 * config.json's common fields; the tensors' names and the family's own
 * fields differ. */
typedef struct td_hf_family {
    const char *cls;        /* "LlamaForCausalLM" */
    const char *model_type; /* "llama" */
    const char *model;      /* "Llama": what errors call trident's model of it */
    /* The family's own config.json fields after the common ones (",

     * "key": value" each; malloc'd), and read back into c (every field
     * checked: what trident cannot compute refused). */
    char *(*config_format)(const td_checkpoint *ck);
    void (*config_parse)(const td_jv *o, const char *path, td_gpt_config *c);
    /* The model's Hugging Face tensors, in file order: their count, and
     * with out, the items (td_hf_item). */
    int (*items)(const td_param_table *t, td_hf_item *out);
    /* for errors naming a tensor trident does not know: what config.json
     * says that decides the names (", attention_bias and mlp_bias false") */
    void (*names_note)(const td_gpt_config *c, char *buf, size_t cap);
} td_hf_family;
extern const td_hf_family td_hf_llama_family;

/* The shortest decimal that reads back (strtod, then to float for a float)
 * as x, so config.json says 1e-05 and 500000.0, not 9.99999975e-06. */
void td_hf_shortest(char *buf, size_t cap, double x, int is_float);
/* config.json's fields: an integer in [lo, hi]; a number in [lo, hi], def
 * when absent (def < 0: required; `in` prefixes the name in errors). */
int td_hf_get_int(const td_jv *o, const char *key, int64_t lo, int64_t hi, const char *path);
double td_hf_get_num(const td_jv *o, const char *key, double lo, double hi, double def, const char *path,
                     const char *in);

/* --overwrite replaces a directory of these entries only (td_export's
 * check, before anything is loaded). */
int td_hf_llama_file(const char *name);
/* Writes the family's directory of a canonical table's checkpoint to
 * o->out: its tensors cut into shards as save_pretrained cuts them
 * (--shard-mb), config.json, generation_config.json and the tokenizer's
 * files; one line says what was written. */
void td_hf_family_export(const td_hf_family *f, const td_checkpoint *ck, const td_param_table *t,
                         const td_export_opts *o);
/* Reads --in (a directory, a model.safetensors.index.json or one
 * safetensors file) and its config.json into the family's config (T: seq
 * when positive, else max_position_embeddings), its table and canonical
 * buffer, and the config's trident tokenizer fields (hc). */
void td_hf_family_import(const td_hf_family *f, const td_import_opts *o, td_gpt_config *cfg, td_hf_config *hc,
                         float **params, td_param_table *t);

/* ---- hf_mixtral.c ----------------------------------------------------------- */

extern const td_hf_family td_hf_mixtral_family;
/* Refuses (one error naming the flag) what MixtralForCausalLM cannot
 * express, before any output is created. */
void td_hf_mixtral_check(const td_checkpoint *ck, const td_param_table *t);

#endif
