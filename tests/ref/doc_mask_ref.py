#!/usr/bin/python3
"""PyTorch reference for trident's document masking (--doc-mask): the Llama
of llama_ref.py with an explicit attention mask built here from document
ids, and optionally the loss without the end-of-text targets. A case whose
tensors are GPT-2's (transformer.wte.weight) runs GPT-2 written here
instead (gpt_ref.py's nanoGPT model, functional, tied head), its learned
positions looked up at the positions below.

Usage: /usr/bin/python3 tests/ref/doc_mask_ref.py IN OUT

IN (little-endian): int32 magic 0x4B53444D ('MDSK'), int32 ncases; per case
  int32 eod, eod_mask_loss, reset, then llama_ref.py's case (L, H, ...
  targets; a GPT-2 case writes the same header, its KV, F and rope fields
  unused). reset 1 (--doc-positions reset): the position of t, rotary or
  learned, is t minus the first position of t's document (the same
  document ids).
OUT (float32) per case: the mean loss (over the targets kept); logits
  [B][T][V]; the gradient of that loss per tensor in IN order.

The mask: a document begins after each eod token, so the document id of
position t is the count of eod tokens among inputs[0..t-1]; key j is
visible to query i iff j <= i and both have the same id (the full [B, T, T]
matrix, nothing blocked)."""
import math

import torch
import torch.nn.functional as nnf

import llama_ref as lr


def doc_ids(inputs, eod):
    ends = (inputs == eod).to(torch.int64)
    return torch.cumsum(ends, dim=1) - ends  # eods strictly before t


def doc_mask(inputs, eod):
    B, T = inputs.shape
    ids = doc_ids(inputs, eod)
    same = ids[:, :, None] == ids[:, None, :]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return ~(same & causal)[:, None]  # [B, 1, T, T], True: hidden


def doc_positions(inputs, eod):
    """[B, T]: t minus the smallest position with t's document id"""
    B, T = inputs.shape
    ids = doc_ids(inputs, eod)
    t = torch.arange(T)
    same = ids[:, :, None] == ids[:, None, :]
    first = torch.where(same, t[None, None, :], torch.full_like(same, T, dtype=torch.int64)).min(dim=-1).values
    return t[None, :] - first


def gpt2_forward(p, cfg, inputs, mask, pos=None):
    """GPT-2's logits (pre-LN blocks with biases, tanh GELU, tied head);
    mask [B, 1, T, T] True where hidden; pos [B, T]: the wpe rows (None:
    0..T-1 in every sequence)."""
    H, C, T, eps = cfg[1], cfg[3], cfg[5], 1e-5  # GPT-2's LayerNorm eps (the header's is Llama's)
    B = inputs.shape[0]
    hs = C // H
    if pos is None:
        pos = torch.arange(T)[None].expand(B, T)
    x = p["transformer.wte.weight"][inputs] + p["transformer.wpe.weight"][pos]
    for l in range(cfg[0]):
        pre = "transformer.h.%d." % l
        w = lambda n: p[pre + n]  # noqa: E731
        h = nnf.layer_norm(x, (C,), w("ln_1.weight"), w("ln_1.bias"), eps)
        q, k, v = nnf.linear(h, w("attn.c_attn.weight"), w("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (z.view(B, T, H, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(2, 3)) / math.sqrt(hs)
        y = (att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + nnf.linear(y, w("attn.c_proj.weight"), w("attn.c_proj.bias"))
        h = nnf.layer_norm(x, (C,), w("ln_2.weight"), w("ln_2.bias"), eps)
        h = nnf.gelu(nnf.linear(h, w("mlp.c_fc.weight"), w("mlp.c_fc.bias")), approximate="tanh")
        x = x + nnf.linear(h, w("mlp.c_proj.weight"), w("mlp.c_proj.bias"))
    x = nnf.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return x @ p["transformer.wte.weight"].T


def run_case(fin, fout):
    eod, mask_loss, reset = lr.rd(fin, "3i")
    cfg, names, p, inputs, targets = lr.read_case(fin)
    V = cfg[6]
    pos = doc_positions(inputs, eod) if reset else None
    fwd = gpt2_forward if "transformer.wte.weight" in p else lr.forward
    logits = fwd(p, cfg, inputs, mask=doc_mask(inputs, eod), pos=pos)
    per = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1), reduction="none")
    keep = (targets.view(-1) != eod) if mask_loss else torch.ones_like(per, dtype=torch.bool)
    loss = (per * keep).sum() / keep.sum()
    loss.backward()
    lr.write_results(fout, loss, logits, names, p)


if __name__ == "__main__":
    lr.run_cases(0x4B53444D, "doc_mask_ref", run_case)
