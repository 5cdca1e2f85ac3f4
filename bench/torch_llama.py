#!/usr/bin/python3
"""Eager PyTorch baseline for the Llama family: the model of
tests/ref/llama_ref.py (Hugging Face's eager LlamaForCausalLM path) trained
on random tokens with AdamW and grad clipping, timed as bench/torch_gpt.py
times GPT-2 (same flags, same output line, with arch=llama).

Run with /usr/bin/python3 (Debian's torch 1.13).
"""

import argparse
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))
sys.path.insert(0, here)
from llama_ref import forward  # noqa: E402
from torch_gpt import nonnegative, openblas_threads, positive, report, train_steps  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=positive, default=6)
    ap.add_argument("--heads", type=positive, default=6)
    ap.add_argument("--kv-heads", type=positive, default=2)
    ap.add_argument("--embd", type=positive, default=384)
    ap.add_argument("--ffn-hidden", type=positive, default=1024)
    ap.add_argument("--seq", type=positive, default=256)
    ap.add_argument("--batch", type=positive, default=8)
    ap.add_argument("--vocab", type=positive, default=65)
    ap.add_argument("--steps", type=positive, default=3)
    ap.add_argument("--warmup-steps", type=nonnegative, default=2)
    ap.add_argument("--threads", type=positive, default=1)
    ap.add_argument("--blas-threads", type=positive, default=None)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.embd % a.heads or a.heads % a.kv_heads:
        ap.error("--embd must divide by --heads and --heads by --kv-heads")
    torch.set_num_threads(a.threads)
    blas_note = openblas_threads(a.blas_threads)
    torch.manual_seed(a.seed)
    L, C, F, V, hs = a.layers, a.embd, a.ffn_hidden, a.vocab, a.embd // a.heads
    kvc = a.kv_heads * hs
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for l in range(L):
        pre = "model.layers.%d." % l
        shapes.update({pre + "input_layernorm.weight": (C,), pre + "post_attention_layernorm.weight": (C,),
                       pre + "self_attn.q_proj.weight": (C, C), pre + "self_attn.k_proj.weight": (kvc, C),
                       pre + "self_attn.v_proj.weight": (kvc, C), pre + "self_attn.o_proj.weight": (C, C),
                       pre + "mlp.gate_proj.weight": (F, C), pre + "mlp.up_proj.weight": (F, C),
                       pre + "mlp.down_proj.weight": (C, F)})
    p = {}
    for k, s in shapes.items():
        p[k] = torch.nn.Parameter(torch.ones(s) if len(s) == 1 else torch.randn(s) * 0.02)
    params = list(p.values())
    decay = [x for x in params if x.dim() == 2]
    no_decay = [x for x in params if x.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), eps=1e-8)
    n = a.warmup_steps + a.steps
    g = torch.Generator().manual_seed(a.seed)
    data = torch.randint(0, V, (n, a.batch, a.seq + 1), generator=g)
    cfg = (L, a.heads, a.kv_heads, C, F, a.seq, V, a.batch, 0, 1e-5, 10000.0, (0.0, 1.0, 4.0, 8192))

    def loss_of(i):
        logits = forward(p, cfg, data[i, :, :-1])
        return torch.nn.functional.cross_entropy(logits.float().view(-1, V), data[i, :, 1:].reshape(-1))

    return report("torch_llama", a, train_steps(loss_of, opt, params, a), blas_note, " arch=llama")


if __name__ == "__main__":
    sys.exit(main())
