/* `trident export` and `trident import`: flags into ckpt_interop.h's calls. */
#include <string.h>

#include "trident/base.h"
#include "trident/ckpt_interop.h"
#include "trident/cli.h"
#include "trident/flags.h"

int td_export_main(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *out = NULL, *dtype = NULL;
    int overwrite = 0;
    double shard_mb = 0;
    const td_flag flags[] = {
        {"--ckpt", TD_FLAG_STR, &ckpt, "checkpoint DIR written by train --out (follows DIR/latest) or one of its step directories", NULL},
        {"--format", TD_FLAG_STR, &format, "hf-gpt2 (a Hugging Face GPT2LMHeadModel directory, with the tokenizer's files for gpt2), "
                                           "safetensors (one file, config.json beside it) or llmc (llm.c's GPT-2 checkpoint) for a "
                                           "gpt2 model; hf-llama (a Hugging Face LlamaForCausalLM directory) for a llama model; "
                                           "hf-mixtral (MixtralForCausalLM) for a llama mixture of experts", NULL},
        {"--out", TD_FLAG_STR, &out, "hf-gpt2, hf-llama, hf-mixtral: the DIR to write; safetensors, llmc: the FILE (written whole, then renamed into place)", NULL},
        {"--dtype", TD_FLAG_STR, &dtype, "hf-llama, hf-mixtral: fp32 (default; import gives the same bits back) or bf16 (rounded to nearest even)", NULL},
        {"--shard-mb", TD_FLAG_DOUBLE, &shard_mb, "hf-llama, hf-mixtral: the largest model file in MB (10^6 bytes; default 5000, "
                                                  "save_pretrained's 5GB); a larger model is cut into model-0000i-of-0000n.safetensors "
                                                  "with model.safetensors.index.json", "(0, inf)"},
        {"--overwrite", TD_FLAG_BOOL, &overwrite, "replace an existing --out (an earlier export of the same format only)", NULL},
    };
    td_flags_parse("export", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    TD_CHECK(ckpt, "export: --ckpt DIR is required (a directory written by 'trident train --out DIR')");
    TD_CHECK(out, "export: --out %s is required",
             format && strncmp(format, "hf-", 3) == 0 ? "DIR" : "PATH");
    TD_CHECK(!dtype || strcmp(dtype, "fp32") == 0 || strcmp(dtype, "bf16") == 0,
             "export: --dtype %s is not known; use fp32 or bf16", dtype);
    td_export_opts o = {ckpt, TD_EXPORT_HF_GPT2, out, overwrite, dtype && strcmp(dtype, "bf16") == 0, shard_mb};
    if (format && strcmp(format, "safetensors") == 0) o.format = TD_EXPORT_SAFETENSORS;
    else if (format && strcmp(format, "llmc") == 0) o.format = TD_EXPORT_LLMC;
    else if (format && strcmp(format, "hf-llama") == 0) o.format = TD_EXPORT_HF_LLAMA;
    else if (format && strcmp(format, "hf-mixtral") == 0) o.format = TD_EXPORT_HF_MIXTRAL;
    else TD_CHECK(format && strcmp(format, "hf-gpt2") == 0,
                  "export: --format %s is not known; use hf-gpt2, safetensors, llmc, hf-llama or hf-mixtral",
                  format ? format : "(missing)");
    TD_CHECK(o.format == TD_EXPORT_HF_LLAMA || o.format == TD_EXPORT_HF_MIXTRAL || (!dtype && shard_mb == 0),
             "export: --dtype and --shard-mb apply to --format hf-llama and hf-mixtral (the GPT-2 formats are one fp32 "
             "file)");
    /* one process, no MPI: the abort hook is free to remove what an error
     * anywhere (out of memory, a bad checkpoint) would leave half-written */
    td_set_abort_hook(td_interop_abort_cleanup);
    td_export(&o);
    return 0;
}

int td_import_main(int argc, char **argv) {
    td_import_opts o = {0};
    const td_flag flags[] = {
        {"--format", TD_FLAG_STR, &o.format, "safetensors (Hugging Face GPT-2), llmc (llm.c's GPT-2 checkpoint, version 3), "
                                             "hf-llama (Hugging Face LlamaForCausalLM) or hf-mixtral (MixtralForCausalLM)", NULL},
        {"--in", TD_FLAG_STR, &o.in, "FILE to read (an hf-gpt2 export: its DIR/model.safetensors); hf-llama, hf-mixtral: the "
                                     "DIR, its model.safetensors.index.json or one .safetensors file", NULL},
        {"--out", TD_FLAG_STR, &o.out, "checkpoint DIR to create (must not exist or be empty); holds step-00000000 and latest", NULL},
        {"--overwrite", TD_FLAG_BOOL, &o.overwrite, "replace an existing checkpoint DIR whole (every step in it), atomically", NULL},
        {"--config", TD_FLAG_STR, &o.config, "safetensors, hf-llama, hf-mixtral: the HF config.json (default: config.json "
                                             "beside --in, or in the DIR)", NULL},
        {"--seq", TD_FLAG_INT, &o.seq, "hf-llama, hf-mixtral: the context to train and sample at (default: config.json's "
                                       "max_position_embeddings)", "[1, 1048576]"},
        {"--tokenizer", TD_FLAG_STR, &o.tokenizer, "char, byte, ids, gpt2 or FILE.json, a Hugging Face tokenizer.json (default: config.json's trident_tokenizer, else gpt2 for a vocabulary of 50257, else ids)", NULL},
        {"--data", TD_FLAG_STR, &o.data, "with --tokenizer char: the text whose characters are the vocabulary", NULL},
    };
    td_flags_parse("import", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    td_set_abort_hook(td_interop_abort_cleanup);
    td_import(&o);
    return 0;
}
