/* ckpt_interop: GPT-2 weights in and out of the ecosystems around trident
 * (docs/export-import.md).
 *
 * Export (`trident export --ckpt DIR --format F --out PATH`) writes a
 * checkpoint's parameters as
 *   hf-gpt2:     a Hugging Face GPT2LMHeadModel directory: model.safetensors
 *                (GPT2LMHeadModel's names, "transformer.h.0.attn.c_attn.weight",
 *                Conv1D weights [in, out], the head tied to wte, so not
 *                stored), config.json, generation_config.json, and for the
 *                gpt2 tokenizer vocab.json, merges.txt (byte for byte
 *                OpenAI's files, recovered from the rank table),
 *                tokenizer_config.json, special_tokens_map.json;
 *   safetensors: one file with GPT2Model's names ("h.0.attn.c_attn.weight")
 *                and config.json beside it;
 *   llmc:        llm.c's GPT-2 checkpoint (formats_gpt2.h; the vocabulary
 *                padded to a multiple of 128 as llm.c's exporter pads it);
 * and a Llama-family checkpoint as
 *   hf-llama:    a Hugging Face LlamaForCausalLM directory: its names and
 *                [out, in] shapes, fp32 or bf16, one model.safetensors or,
 *                past --shard-mb, model-0000i-of-0000n.safetensors and
 *                model.safetensors.index.json; config.json (LlamaConfig),
 *                generation_config.json and the gpt2 tokenizer's files;
 * and a Llama-family mixture of experts as
 *   hf-mixtral:  a Hugging Face MixtralForCausalLM directory, the same form
 *                (MixtralConfig's config.json): each stacked expert row cut
 *                into the experts' w1 (gate), w3 (up) and w2 (down)
 *                tensors, the router as block_sparse_moe.gate; what
 *                Mixtral cannot express (shared experts, --moe-every > 1, a
 *                sigmoid router, --moe-norm-topk off, a non-zero balancing
 *                bias, rope scaling) is refused.
 * Each format takes one family; another is refused (one error line).
 * Import (`trident import --format safetensors|llmc --in FILE --out DIR`)
 * reads either GPT-2 file form (with or without "transformer.") into a new
 * checkpoint directory, parameters only: fine-tuning starts a fresh
 * optimizer; `--format hf-llama --in DIR|INDEX|FILE` reads such a
 * directory (F32, BF16 or F16), every tensor, shape and config field
 * checked (hidden_act silu, no biases, rope_scaling null or llama3), and
 * `--format hf-mixtral` a MixtralForCausalLM one likewise (its experts
 * stacked back). Both go through td_ckpt_load and td_ckpt_save only.
 *
 * Outputs are staged (src/ckpt/staged.h): written under PATH.tmp.PID and
 * renamed into place, an existing output refused unless overwrite (and then
 * replaced only if it is an earlier output of the same kind), every write
 * checked. Errors are one line and exit 2, with no temporary file left. One
 * process, no MPI. */
#ifndef TRIDENT_CKPT_INTEROP_H
#define TRIDENT_CKPT_INTEROP_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_EXPORT_HF_GPT2, TD_EXPORT_SAFETENSORS, TD_EXPORT_LLMC, TD_EXPORT_HF_LLAMA, TD_EXPORT_HF_MIXTRAL } td_export_format;

typedef struct {
    const char *ckpt; /* checkpoint DIR (follows DIR/latest) or a step directory */
    td_export_format format;
    const char *out;
    int overwrite;
    int bf16;        /* hf-llama, hf-mixtral: the weights in bf16 (rounded to nearest even), else fp32 */
    double shard_mb; /* hf-llama, hf-mixtral: the largest shard in MB (10^6 bytes); 0: 5000, HF's 5GB */
} td_export_opts;

typedef struct {
    const char *format;    /* "safetensors", "llmc", "hf-llama" or "hf-mixtral" */
    const char *in;        /* the file to read (hf-llama, hf-mixtral: a directory, its index or one file) */
    const char *config;    /* safetensors: config.json (NULL: beside in) */
    const char *tokenizer; /* char, byte, ids, gpt2 or NULL (from config.json / V) */
    const char *data;      /* --tokenizer char: the text whose characters are the vocabulary */
    const char *out;       /* checkpoint DIR: new, empty, or (overwrite) an earlier one */
    int overwrite;
    int seq;               /* hf-llama, hf-mixtral: the context T (0: config.json's max_position_embeddings) */
} td_import_opts;

/* Check out first (before loading anything), load, write, print one line
 * saying what was written. */
void td_export(const td_export_opts *o);
void td_import(const td_import_opts *o);
/* Removes the temporary outputs of an export or import in progress: for
 * td_set_abort_hook, so an error anywhere leaves none behind. */
void td_interop_abort_cleanup(int code);

#ifdef __cplusplus
}
#endif

#endif
