#!/usr/bin/python3
"""PyTorch reference for trident's document masking (--doc-mask): the Llama
of llama_ref.py with an explicit attention mask built here from document
ids, and optionally the loss without the end-of-text targets.

Usage: /usr/bin/python3 tests/ref/doc_mask_ref.py IN OUT

IN (little-endian): int32 magic 0x4B53444D ('MDSK'), int32 ncases; per case
  int32 eod, eod_mask_loss, reset, then llama_ref.py's case (L, H, ...
  targets). reset 1 (--doc-positions reset): the rotary position of t is
  t minus the first position of t's document (the same document ids).
OUT (float32) per case: the mean loss (over the targets kept); logits
  [B][T][V]; the gradient of that loss per tensor in IN order.

The mask: a document begins after each eod token, so the document id of
position t is the count of eod tokens among inputs[0..t-1]; key j is
visible to query i iff j <= i and both have the same id (the full [B, T, T]
matrix, nothing blocked)."""
import torch

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


def run_case(fin, fout):
    eod, mask_loss, reset = lr.rd(fin, "3i")
    cfg, names, p, inputs, targets = lr.read_case(fin)
    V = cfg[6]
    pos = doc_positions(inputs, eod) if reset else None
    logits = lr.forward(p, cfg, inputs, mask=doc_mask(inputs, eod), pos=pos)
    per = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1), reduction="none")
    keep = (targets.view(-1) != eod) if mask_loss else torch.ones_like(per, dtype=torch.bool)
    loss = (per * keep).sum() / keep.sum()
    loss.backward()
    lr.write_results(fout, loss, logits, names, p)


if __name__ == "__main__":
    lr.run_cases(0x4B53444D, "doc_mask_ref", run_case)
