/* ckpt_interop: GPT-2 weights in and out of the ecosystems around trident.
 *
 * `trident export --ckpt DIR --format safetensors|llmc --out FILE` writes a
 * checkpoint's parameters as Hugging Face GPT-2 safetensors (GPT2Model
 * names, Conv1D weights [in, out], the head tied to wte, the real
 * vocabulary) with an HF config.json beside FILE, or as llm.c's GPT-2
 * checkpoint (formats_gpt2.h; the vocabulary padded to a multiple of 128 as
 * llm.c's exporter pads it). `trident import --format safetensors|llmc --in
 * FILE --out DIR` reads either into a new checkpoint directory (parameters
 * only: fine-tuning starts a fresh optimizer). Both go through td_ckpt_load
 * and td_ckpt_save only, so they follow the checkpoint format wherever it
 * goes. */
#ifndef TRIDENT_CKPT_INTEROP_H
#define TRIDENT_CKPT_INTEROP_H

int td_export_main(int argc, char **argv);
int td_import_main(int argc, char **argv);

#endif
