#!/usr/bin/python3
"""PyTorch reference for trident's --optimizer muon (issue 42): gpt_ref.py's
GPT and input file, trained in float64 with Muon (Keller Jordan's
modded-nanogpt speedrun: momentum buf.lerp_(g, 1 - m), Nesterov
g.lerp_(buf, m), zeropower_via_newtonschulz5 with (3.4445, -4.7750,
2.0315), update scale max(1, rows/cols)^0.5, decoupled decay) on the blocks'
2-D weights, each logical matrix on its own (c_attn's q, k and v), and
torch.optim.AdamW (nanoGPT's grouping) on the rest, after gpt_ref's clip.

Usage: /usr/bin/python3 tests/ref/muon_ref.py IN OUT MUON_LR MOMENTUM WD NESTEROV [bf16]
bf16: also OUT.bf16, the same steps with Newton-Schulz in the speedrun's
bf16 (trident's bf16 runs); OUT's in float64.
OUT: losses[nsteps] float32, then every tensor after the steps (file order).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_ref  # noqa: E402


def newton_schulz5(G, steps=5, eps=1e-7, bf16=False):
    a, b, c = (3.4445, -4.7750, 2.0315)
    if bf16:  # the speedrun's X = G.bfloat16() and everything after it bf16
        return newton_schulz5_bf16(G, steps, eps).to(G.dtype)
    X = G / (G.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


def newton_schulz5_bf16(G, steps, eps):
    """The speedrun's bf16 iterations as its eager ops run on a GPU: each op's
    result rounded to bf16, products of bf16 tensors accumulated in fp32,
    and a Python scalar times a bf16 tensor computed in fp32 (CUDA's
    opmath), which this CPU torch would round to bf16 first: s(k, T) does it
    by hand. B = b A + c A @ A parses as b A + (c A) @ A."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    bf = torch.bfloat16

    def s(k, T):
        return (T.float() * k).to(bf)
    X = G.to(bf)
    if G.size(0) > G.size(1):
        X = X.T
    n = X.float().norm().to(bf)
    X = X / (n.float() + eps).to(bf)
    for _ in range(steps):
        A = X @ X.T
        B = s(b, A) + s(c, A) @ A
        X = s(a, X) + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


def main(argv):
    if len(argv) not in (7, 8):
        sys.stderr.write(__doc__)
        return 2
    torch.set_num_threads(1)
    cfg, hyper, tensors, inputs, targets = gpt_ref.read_input(argv[1])
    mlr, mom, mwd, nesterov = float(argv[3]), float(argv[4]), float(argv[5]), int(argv[6])
    runs = [(argv[2], False)] + ([(argv[2] + ".bf16", True)] if len(argv) == 8 and argv[7] == "bf16" else [])
    for out, bf16 in runs:  # one interpreter for both: torch's import is most of the time
        train(cfg, hyper, tensors, inputs, targets, mlr, mom, mwd, nesterov, bf16, out)
    return 0


def train(cfg, hyper, tensors, inputs, targets, mlr, mom, mwd, nesterov, bf16, out):
    dt = torch.float64
    model = gpt_ref.GPT(cfg["L"], cfg["H"], cfg["C"], cfg["T"], cfg["V"]).to(dt)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, _, arr in tensors:
            params[name].copy_(torch.from_numpy(arr.astype(np.float64)))
    order = [params[name] for name, _, _ in tensors]
    muon = {name for name, p in params.items() if p.dim() == 2 and ".h." in name}
    rest = [p for name, p in params.items() if name not in muon]
    decay = [p for p in rest if p.dim() >= 2]
    nodecay = [p for p in rest if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hyper["weight_decay"]},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])
    bufs = {name: torch.zeros_like(params[name]) for name in muon}
    C = cfg["C"]
    losses = []
    for s in range(cfg["nsteps"]):
        opt.zero_grad(set_to_none=True)
        for p in params.values():
            p.grad = None
        loss = model(torch.from_numpy(inputs[s]), torch.from_numpy(targets[s]))
        loss.backward()
        gpt_ref.grad_norm_and_clip(list(model.parameters()), hyper["clip"])
        with torch.no_grad():
            for name in sorted(muon):
                p, buf = params[name], bufs[name]
                g = p.grad
                buf.lerp_(g, 1 - mom)
                u = g.lerp(buf, mom) if nesterov else buf.clone()
                parts = 3 if name.endswith("c_attn.weight") else 1  # q, k, v
                rows = p.size(0) // parts
                p.mul_(1 - mlr * mwd)
                for q in range(parts):
                    uq = newton_schulz5(u[q * rows:(q + 1) * rows], bf16=bf16)
                    scale = max(1.0, uq.size(0) / uq.size(1)) ** 0.5
                    p[q * rows:(q + 1) * rows].add_(uq, alpha=-mlr * scale)
                p.grad = None  # AdamW skips them
        opt.step()
        losses.append(float(loss))
    with open(out, "wb") as f:
        f.write(np.array(losses, dtype="<f4").tobytes())
        for name, _, arr in tensors:
            f.write(params[name].detach().to(torch.float32).numpy().astype("<f4").tobytes())
    print("muon_ref%s: steps=%d losses %s" % (" (bf16 Newton-Schulz)" if bf16 else "", cfg["nsteps"],
                                                 " ".join("%.6f" % x for x in losses)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
