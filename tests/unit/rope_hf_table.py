#!/usr/bin/env python3
"""Prints, as C, the fp32 bits of Llama 3.1's rotary inv_freq table (theta
500000, head size 128, rope_scaling llama3: factor 8, low_freq_factor 1,
high_freq_factor 4, original_max_position_embeddings 8192) computed by torch
on the CPU with the code of Hugging Face transformers'
_compute_default_rope_parameters and _compute_llama3_parameters
(modeling_rope_utils.py). test_rope.c holds the output (HF_LLAMA31_INV_FREQ)
and checks td_rope_inv_freq + td_rope_llama3_scale against it bit for bit.
Not run by ctest (no torch needed there); produced with Debian's torch 1.13.
"""
import math

import numpy as np
import torch

dim, base = 128, 500000.0
factor, low_freq_factor, high_freq_factor, old_context_len = 8.0, 1.0, 4.0, 8192

inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

low_freq_wavelen = old_context_len / low_freq_factor
high_freq_wavelen = old_context_len / high_freq_factor
wavelen = 2 * math.pi / inv_freq
inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)

bits = inv_freq_llama.numpy().astype(np.float32).view(np.uint32)
print("static const uint32_t HF_LLAMA31_INV_FREQ[64] = {")
for i in range(0, 64, 6):
    print("    " + " ".join("0x%08xu," % b for b in bits[i:i + 6]))
print("};")
