/* The GPT-2 tensor names and layouts shared by export.c and import.c. */
#ifndef TD_CKPT_GPT2_NAMES_H
#define TD_CKPT_GPT2_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "trident/model.h"

/* Hugging Face's name of tensor kind k (GPT2Model: no "transformer."
 * prefix), without the "h.{layer}." of a block; whether HF stores it
 * transposed relative to trident's [out, in] (its Conv1D layers). */
typedef struct {
    const char *name;
    int transposed;
} td_hf_kind;
extern const td_hf_kind td_hf_kinds[TD_T_COUNT];

/* The full HF name of row p ("h.3.attn.c_attn.weight", "wte.weight"). */
void td_hf_name(char *buf, size_t cap, const td_param *p);
/* HF's shape of row p: transposed for Conv1D weights; wte has the real
 * vocabulary rows. Returns ndim. */
int td_hf_shape(const td_param *p, int64_t shape[2]);

#endif
