/* formats_gpt2: the GPT-2 files of other ecosystems that `trident export`
 * writes and `trident import` reads, parsed without MPI, exits or printing
 * (formats.h; fuzzed in tests/fuzz/fuzz_safetensors.c):
 *
 * llm.c's GPT-2 checkpoint (train_gpt2.c, gpt2_build_from_checkpoint):
 *   int32[256] header: [0] magic 20240326, [1] version (3 = fp32), [2] maxT,
 *   [3] V, [4] L, [5] H, [6] C, [7] Vp (padded vocabulary), the rest 0;
 *   then float32 tensors grouped by kind across layers, in td_tensor_kind's
 *   order: wte [Vp,C] (rows V.. zero), wpe [maxT,C], ln1w [L,C], ln1b,
 *   qkvw [L,3C,C], qkvb [L,3C], attprojw [L,C,C], attprojb, ln2w, ln2b,
 *   fcw [L,4C,C], fcb [L,4C], fcprojw [L,C,4C], fcprojb, lnfw [C], lnfb [C];
 *   nothing after. Weights are [out, in] (nn.Linear), as in trident.
 *
 * Hugging Face's GPT-2 config.json (GPT2Config): n_layer, n_head, n_embd,
 * n_positions, vocab_size, plus fields that must hold for trident's model
 * (tanh GELU, LayerNorm eps 1e-5, tied head, 4C MLP). trident adds
 * "trident_tokenizer" (char, byte, ids, gpt2, or hf: the tokenizer.json
 * beside it) and, for the char tokenizer, "trident_chars" (the code
 * points), which other readers ignore. */
#ifndef TRIDENT_FORMATS_GPT2_H
#define TRIDENT_FORMATS_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"
#include "trident/formats_json.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_LLMC_MAGIC 20240326
#define TD_LLMC_VERSION_FP32 3
#define TD_LLMC_HEADER_BYTES 1024
#define TD_LLMC_VOCAB_PAD 128 /* llm.c's export pads V to a multiple of 128 */

typedef struct {
    int32_t maxT, V, L, H, C, Vp;
    uint64_t numel; /* floats after the header */
} td_llmc_header;

/* Header of a file of file_len bytes from its first `avail` bytes: magic,
 * version, every size in trident's range (C divisible by H, Vp >= V), and
 * the file length exactly 1024 + 4 numel. Errors name the field. */
int td_llmc_header_parse(const void *buf, size_t avail, uint64_t file_len, td_llmc_header *h,
                         td_err *e);
/* The 1024 header bytes for h (numel is not stored). */
void td_llmc_header_encode(const td_llmc_header *h, unsigned char out[TD_LLMC_HEADER_BYTES]);

typedef struct {
    int64_t L, H, C, T, V;
    char tokenizer[8]; /* "char", "byte", "ids", "gpt2", or "" when absent */
    uint32_t *chars;   /* [V] strictly increasing code points ("char" only; malloc'd) */
    int64_t eot;       /* export: <|endoftext|>'s id, bos/eos_token_id (cl100k 100257, o200k
                        * 199999); 0: none, or gpt2's 50256 by the tokenizer's name */
} td_hf_config;

/* Parses config.json text: a JSON object with model_type "gpt2" (if
 * given) and the five sizes in trident's ranges; rejects a config trident's
 * model cannot compute (another activation, eps, an untied head, n_inner
 * other than 4 n_embd, ...). Errors name the field. */
int td_hf_config_parse(const char *text, size_t n, td_hf_config *c, td_err *e);
void td_hf_config_free(td_hf_config *c);
/* The config.json text for c (malloc'd, NUL-terminated), or NULL: GPT2Config's
 * fields for trident's model, bos/eos_token_id 50256 for the gpt2
 * tokenizer (null otherwise), and the trident_ fields above. */
char *td_hf_config_format(const td_hf_config *c);
/* trident's own fields of a Hugging Face config.json (any family's), for
 * the vocabulary c->V: "trident_tokenizer" into c->tokenizer ("" when
 * absent) and, for "char", "trident_chars" into c->chars (malloc'd); errors
 * as td_hf_config_parse's (the caller frees c on error). */
int td_hf_trident_fields_parse(const td_jv *o, td_hf_config *c, td_err *e);
/* Appends ",\n  \"trident_chars\": [...]" for a char tokenizer (nothing
 * otherwise) to s (len bytes used of cap, which needs 24 + 12 V bytes
 * free); returns the new length. */
size_t td_hf_trident_chars_format(char *s, size_t cap, size_t len, const td_hf_config *c);
/* The other files of a Hugging Face GPT-2 directory (malloc'd, or NULL):
 * generation_config.json (GPT-2's bos/eos <|endoftext|>, or none), and for
 * the gpt2 tokenizer tokenizer_config.json (GPT2Tokenizer, model_max_length
 * = n_positions, <|endoftext|> as bos, eos and unk) and
 * special_tokens_map.json (constant). vocab.json and merges.txt come from
 * the BPE tables (bpe.h). */
char *td_hf_generation_config_format(const td_hf_config *c);
char *td_hf_tokenizer_config_format(const td_hf_config *c);
/* tokenizer_config.json beside a tokenizer.json (cl100k's, o200k's):
 * PreTrainedTokenizerFast, model_max_length = n_positions, <|endoftext|>
 * as bos and eos (id c->eot), no unk. */
char *td_hf_tokenizer_config_fast_format(const td_hf_config *c);
/* The bos/eos id of c for config.json: gpt2's 50256, c->eot, or -1: null. */
int64_t td_hf_eos_id(const td_hf_config *c);
extern const char td_hf_special_tokens_map[];

/* Elements of a GPT-2's tensors laid out flat (wte [Vp,C], wpe [T,C], L
 * blocks, ln_f), or 0 when the count overflows 64 bits. */
uint64_t td_ckpt_numel(int64_t L, int64_t C, int64_t T, int64_t Vp);

#ifdef __cplusplus
}
#endif

#endif
