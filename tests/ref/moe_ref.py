#!/usr/bin/python3
"""PyTorch reference for trident's mixture of experts (--moe-*): logits, the
LM loss, the aux and z losses, the chosen experts and every gradient.

Usage: /usr/bin/python3 tests/ref/moe_ref.py IN OUT

Written from the semantics in include/trident/model.h (td_moe_config), not
from trident's code. The models around the block are gpt_ref.py's nanoGPT
(its MLP is also the GPT-2 expert) and llama_ref.py's Llama (its swiglu is
the Llama expert); every block l with l % every == 0 has its MLP replaced by
MoE below: a router nn.Linear(C, E) without bias, softmax or sigmoid scores,
the top K of (score + expert_bias) by a stable sort of the negated key (so
ties go to the lower expert id), gates = the chosen scores, combine weights
= the gates divided by their sum with norm_topk, each expert its own module,
the shared experts one MLP of S*F features. The loss is the mean LM
cross-entropy over the targets that are not -1 (--eod-mask-loss's masked
end-of-text targets; the aux and z losses below keep every token) plus, per MoE block, aux_coef E sum_i f_i P_i (f_i: the share
of the N K assignments routed to i, a constant; P_i: the mean score of i)
and z_coef mean(logsumexp(logits)^2). Autograd gives every gradient. The
whole model runs in float64, so the reference's own error (~1e-16, ~6e-8
where llama_ref.py computes rotary cos/sin in float32, and the float32 the
tensors are written in) is far below trident's fp32 error.

IN (little-endian): int32 magic 0x4645524D ('MREF'), int32 ncases; per case:
  int32 arch (0 gpt2, 1 llama), L, H, KV, C, F, T, V, B, tied,
        E, K, every, Fe (an expert's features), S (shared experts),
        router (0 softmax, 1 sigmoid), norm_topk (0/1);
  float32 eps, aux_coef, z_coef; float64 rope theta;
  the tensors (ref_io.h: trident's names and global shapes);
  int32 inputs[B][T]; int32 targets[B][T]
OUT per case:
  float64 lm loss (mean), aux (summed over the MoE blocks), z (likewise),
          lm_vis, aux_vis, z_vis (the largest, over the MoE blocks, of
          max|d lm / d router| / max|d loss / d router|, and of aux's,
          z's: how much of the router's gradient each term makes),
          gap (the smallest nonzero difference between neighbours among
          the first min(K+1, E) sorted keys of any token: how far the
          choice is from a tie);
  int32 ties (exact ties among those neighbours), nmoe;
  per MoE block in order: int32 chosen experts [B*T][K], best first;
  float32 logits [B*T][V];
  float32 the gradient of the loss per tensor in IN order (expert_bias:
          zeros, it has none);
  float32 per expert or shared-expert weight in IN order: its first Muon
          update from zero state (below), each module's weight on its own.
"""
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

import gpt_ref
import llama_ref
import muon_ref
from llama_ref import rd

torch.set_num_threads(1)


class SwiGLU(nn.Module):
    """Llama's MLP as a module: a Llama expert, or the shared experts."""

    def __init__(self, C, F_):
        super().__init__()
        self.gate = nn.Linear(C, F_, bias=False)
        self.up = nn.Linear(C, F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def forward(self, x):
        return llama_ref.swiglu(x, self.gate.weight, self.up.weight, self.down.weight)


class MoE(nn.Module):
    def __init__(self, C, E, K, Fe, S, sigmoid, norm_topk, aux_coef, z_coef, expert):
        super().__init__()
        self.E, self.K, self.sigmoid, self.norm_topk = E, K, sigmoid, norm_topk
        self.aux_coef, self.z_coef = aux_coef, z_coef
        self.router = nn.Linear(C, E, bias=False)
        self.register_buffer("expert_bias", torch.zeros(E))
        self.experts = nn.ModuleList([expert(C, Fe) for _ in range(E)])
        self.shared = expert(C, S * Fe) if S else None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        N, E, K = x.shape[0], self.E, self.K
        logits = self.router(x)
        scores = torch.sigmoid(logits) if self.sigmoid else logits.softmax(-1)
        key = (scores + self.expert_bias).detach()
        neg, order = torch.sort(-key, dim=-1, stable=True)  # descending, ties: lower id first
        idx = order[:, :K]
        gate = scores.gather(1, idx)
        w = gate / gate.sum(-1, keepdim=True) if self.norm_topk else gate
        out = torch.zeros_like(x)
        for e in range(E):
            tok, k = (idx == e).nonzero(as_tuple=True)
            if len(tok):
                out = out.index_add(0, tok, w[tok, k, None] * self.experts[e](x[tok]))
        if self.shared is not None:
            out = out + self.shared(x)
        f = torch.bincount(idx.reshape(-1), minlength=E).to(x.dtype) / (N * K)  # no gradient
        self.aux = self.aux_coef * E * (f * scores.mean(0)).sum()
        self.z = self.z_coef * (torch.logsumexp(logits, -1) ** 2).mean()
        self.idx = idx
        self.gaps = (neg[:, 1:K + 1] - neg[:, :min(K, E - 1)]).reshape(-1)
        return out.view(shape)


def expert_pieces(arch, pre, m, C, Fe, S):
    """trident's stacked tensors of MoE block m as lists of the module's
    parameters along dim 0 (model.h, arch.c)."""
    E = m.E
    if arch == 0:
        b = {pre + "router.weight": [m.router.weight], pre + "router.expert_bias": [m.expert_bias]}
        for t in ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"):
            mod, kind = t.split(".")
            b[pre + "experts." + t] = [getattr(getattr(m.experts[e], mod), kind) for e in range(E)]
            if S:
                b[pre + "shared." + t] = [getattr(getattr(m.shared, mod), kind)]
        return b
    b = {pre + "gate.weight": [m.router.weight], pre + "expert_bias": [m.expert_bias],
         pre + "experts.w13.weight": [w for e in range(E) for w in (m.experts[e].gate.weight,
                                                                    m.experts[e].up.weight)],
         pre + "experts.w2.weight": [m.experts[e].down.weight for e in range(E)]}
    if S:
        b[pre + "shared_experts.gate_up_proj.weight"] = [m.shared.gate.weight, m.shared.up.weight]
        b[pre + "shared_experts.down_proj.weight"] = [m.shared.down.weight]
    return b


def run_case(fin, fout):
    (arch, L, H, KV, C, F_, T, V, B, tied, E, K, every, Fe, S, router, norm_topk) = rd(fin, "17i")
    eps, aux_coef, z_coef = rd(fin, "3f")
    (theta,) = rd(fin, "d")
    names, raw = llama_ref.read_tensors(fin)
    inputs, targets = llama_ref.read_tokens(fin, B, T)
    expert = gpt_ref.MLP if arch == 0 else SwiGLU
    moes = {l: MoE(C, E, K, Fe, S, router == 1, norm_topk, aux_coef, z_coef, expert).double()
            for l in range(L) if l % every == 0}
    pieces = {}  # trident name -> the torch tensors it is made of, along dim 0
    if arch == 0:
        model = gpt_ref.GPT(L, H, C, T, V)
        for l, m in moes.items():
            model.transformer.h[l].mlp = m
        model.double()
        params = dict(model.named_parameters())
        for l, m in moes.items():
            pieces.update(expert_pieces(0, "transformer.h.%d.moe." % l, m, C, Fe, S))
    else:
        p = {n: t.double().requires_grad_(True) for n, t in raw.items() if ".block_sparse_moe." not in n}
        for l, m in moes.items():
            pieces.update(expert_pieces(1, "model.layers.%d.block_sparse_moe." % l, m, C, Fe, S))
        params = p
    for n in names:
        if n not in pieces:
            pieces[n] = [params[n]]
    with torch.no_grad():
        for n in names:
            parts = pieces[n]
            for t, chunk in zip(parts, torch.split(raw[n].double(), [t.shape[0] for t in parts])):
                t.copy_(chunk.view(t.shape))
    if arch == 0:
        logits = model.logits(inputs)
    else:
        cfg = (L, H, KV, C, F_, T, V, B, tied, eps, theta, (0.0, 1.0, 4.0, 8))
        logits = llama_ref.forward(
            p, cfg, inputs, mlp=lambda p, l, h: moes[l](h) if l in moes else llama_ref.dense_mlp(p, l, h))
    lm = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1)
    aux = sum(m.aux for m in moes.values())
    z = sum(m.z for m in moes.values())
    routers = [m.router.weight for m in moes.values()]
    parts = [torch.autograd.grad(term, routers, retain_graph=True) if term.requires_grad and coef > 0
             else [torch.zeros(1)] * len(routers) for term, coef in ((lm, 1), (aux, aux_coef), (z, z_coef))]
    (lm + aux + z).backward()
    vis = [max(float(g.abs().max() / r.grad.abs().max()) for g, r in zip(gs, routers)) for gs in parts]
    gaps = torch.cat([m.gaps for m in moes.values()])
    nz = gaps[gaps > 0]
    fout.write(struct.pack("<7d", lm.item(), aux.item(), z.item(), *vis,
                           nz.min().item() if len(nz) else float("inf")))
    fout.write(struct.pack("<2i", int((gaps == 0).sum()), len(moes)))
    for m in moes.values():
        fout.write(m.idx.to(torch.int32).numpy().astype("<i4").tobytes())
    fout.write(logits.detach().numpy().astype("<f4").tobytes())
    for n in names:
        g = torch.cat([t.grad.reshape(t.shape[0], -1) if t.grad is not None
                       else torch.zeros(t.shape[0], t[0].numel(), dtype=torch.float64) for t in pieces[n]])
        fout.write(g.numpy().astype("<f4").tobytes())
    # --optimizer muon's first step from zero state (lr 0.02, momentum 0.95,
    # Nesterov, no decay) on the experts' and shared experts' weights, each
    # module's weight a matrix of its own: an expert's c_fc and c_proj, or
    # its gate, up and down; the shared MLP's likewise
    lr, mom = 0.02, 0.95
    for n in names:
        if not (n.endswith("weight") and raw[n].ndim == 2 and ("experts" in n or ".shared." in n)):
            continue
        ups = []
        for t in pieces[n]:
            g = t.grad if t.grad is not None else torch.zeros_like(t)
            u = g.lerp((1 - mom) * g, mom)
            ups.append(-lr * max(1.0, t.shape[0] / t.shape[1]) ** 0.5 * muon_ref.newton_schulz5(u))
        fout.write(torch.cat(ups).detach().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    llama_ref.run_cases(0x4645524D, "moe_ref", run_case)
