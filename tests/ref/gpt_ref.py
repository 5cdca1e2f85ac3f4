#!/usr/bin/python3
"""PyTorch reference for trident's GPT: loss, gradients and AdamW training.

Usage: /usr/bin/python3 tests/ref/gpt_ref.py IN OUT
(training and gradients, or with an evaluation input, the mean loss)

The model is nanoGPT's GPT (pre-LN blocks, learned positions, bias=True, no
dropout, lm_head tied to wte, LayerNorm eps 1e-5, explicit causal softmax
attention) with one deliberate difference: the MLP uses the tanh
approximation of GELU (as GPT-2 and llm.c do), not nn.GELU()'s exact erf.

IN (little-endian):
  int32 magic 0x46455254 ('TREF'), L, H, C, T, V, B, nsteps
  float32 lr, beta1, beta2, eps, weight_decay, clip
  int32 ntensors; per tensor: int32 namelen, name (utf-8), int32 ndim,
        int32 shape[ndim], float32 data[prod(shape)]
  int32 inputs[nsteps][B][T]; int32 targets[nsteps][B][T]
OUT (float32):
  loss0; grad of loss0 per tensor in IN order (no clipping);
  losses[nsteps]; grad_norms[nsteps] (before clipping);
  final parameters per tensor in IN order.

Evaluation input (IN starts with EVAL_MAGIC 0x4C415654, 'TVAL'):
  int32 magic, L, H, C, T, V, nseq; the tensors as above;
  int32 inputs[nseq][T]; int32 targets[nseq][T]
OUT (float64): the mean cross-entropy over all nseq*T tokens (each token's
  loss in float32, summed in float64), then the token count.

Training step s: loss on batch s, backward, clip_grad_norm_(all, clip) (none
when clip <= 0), AdamW step with nanoGPT's grouping (weight decay on params
with dim >= 2, none on the rest), constant lr. torch's clip_grad_norm_ scales
by clip / (norm + 1e-6) when that is below 1 (and by exactly 1.0 otherwise).

The model class GPT is also used by bench/torch_gpt.py.
"""

import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MAGIC = 0x46455254
EVAL_MAGIC = 0x4C415654


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.n_head = n_head
        self.n_embd = n_embd
        # Causal mask; not persistent so it stays out of the state_dict.
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, T)
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    """GPT-2's MLP of `hidden` features (4 n_embd by default); also a
    mixture of experts' expert (tests/ref/moe_ref.py)."""

    def __init__(self, n_embd, hidden=None):
        super().__init__()
        hidden = hidden or 4 * n_embd
        self.c_fc = nn.Linear(n_embd, hidden, bias=True)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(hidden, n_embd, bias=True)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """nanoGPT's GPT; parameter names equal nanoGPT's state_dict names."""

    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        super().__init__()
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size)
                             for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, eps=1e-5),
        ))
        self.n_layer = n_layer
        self.init_weights()

    def init_weights(self, generator=None):
        """nanoGPT's init: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
        zero biases, unit LayerNorm gains."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
                elif ".ln_" in name or name.startswith("transformer.ln_f"):
                    p.fill_(1.0)
                elif name.endswith("c_proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * self.n_layer), generator=generator)
                else:
                    p.normal_(0.0, 0.02, generator=generator)

    def logits(self, idx):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return F.linear(x, self.transformer.wte.weight)  # tied lm_head

    def forward(self, idx, targets, reduction="mean"):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1),
                               reduction=reduction)

    def configure_optimizer(self, lr, betas, eps, weight_decay):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def grad_norm_and_clip(params, clip):
    """Total L2 grad norm before clipping; clips in place when clip > 0."""
    if clip > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip))
    # Same reduction torch uses inside clip_grad_norm_, without the scaling.
    norms = torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params])
    return float(torch.norm(norms, 2.0))


# ---------------------------------------------------------------- file input


class InputError(Exception):
    pass


class Reader:
    def __init__(self, data, path):
        self.data = data
        self.pos = 0
        self.path = path

    def take(self, nbytes, what):
        if nbytes < 0 or self.pos + nbytes > len(self.data):
            raise InputError("%s: truncated at byte %d while reading %s (need %d bytes, %d left)"
                             % (self.path, self.pos, what, nbytes, len(self.data) - self.pos))
        b = self.data[self.pos:self.pos + nbytes]
        self.pos += nbytes
        return b

    def i32(self, n, what):
        return list(struct.unpack("<%di" % n, self.take(4 * n, what)))

    def f32(self, n, what):
        return list(struct.unpack("<%df" % n, self.take(4 * n, what)))

    def f32_array(self, n, what):
        return np.frombuffer(self.take(4 * n, what), dtype="<f4").astype(np.float32)

    def i32_array(self, n, what):
        return np.frombuffer(self.take(4 * n, what), dtype="<i4").astype(np.int64)


def expected_shapes(L, C, T, V):
    shapes = {
        "transformer.wte.weight": (V, C),
        "transformer.wpe.weight": (T, C),
        "transformer.ln_f.weight": (C,),
        "transformer.ln_f.bias": (C,),
    }
    for l in range(L):
        p = "transformer.h.%d." % l
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,),
        })
    return shapes


def read_tensors(r, path, L, C, T, V):
    """The per-tensor section: nanoGPT names and shapes, finite data."""
    want = expected_shapes(L, C, T, V)
    ntensors = r.i32(1, "ntensors")[0]
    if ntensors != len(want):
        raise InputError("%s: ntensors=%d but a model with L=%d has %d tensors"
                         % (path, ntensors, L, len(want)))
    tensors = []  # (name, shape, np.float32 array) in file order
    seen = set()
    for i in range(ntensors):
        namelen = r.i32(1, "name length of tensor %d" % i)[0]
        if not 0 < namelen <= 4096:
            raise InputError("%s: tensor %d has name length %d" % (path, i, namelen))
        try:
            name = r.take(namelen, "name of tensor %d" % i).decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("%s: tensor %d name is not valid utf-8" % (path, i))
        if name not in want:
            raise InputError("%s: tensor %d has unknown name '%s' (expected nanoGPT state_dict names, "
                             "e.g. transformer.h.0.attn.c_attn.weight)" % (path, i, name))
        if name in seen:
            raise InputError("%s: tensor '%s' appears twice" % (path, name))
        seen.add(name)
        ndim = r.i32(1, "ndim of %s" % name)[0]
        if not 0 < ndim <= 8:
            raise InputError("%s: tensor '%s' has ndim=%d" % (path, name, ndim))
        shape = tuple(r.i32(ndim, "shape of %s" % name))
        if shape != want[name]:
            raise InputError("%s: tensor '%s' has shape %s, expected %s"
                             % (path, name, list(shape), list(want[name])))
        arr = r.f32_array(int(np.prod(shape)), "data of %s" % name).reshape(shape)
        if not np.all(np.isfinite(arr)):
            raise InputError("%s: tensor '%s' contains non-finite values" % (path, name))
        tensors.append((name, shape, arr))
    return tensors


def open_input(path, want_magic):
    """The file's bytes and a Reader past its magic, which must be want_magic."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError("%s: cannot read input file: %s" % (path, e.strerror))
    r = Reader(data, path)
    magic = r.i32(1, "magic")[0]
    if magic != want_magic:
        raise InputError("%s: bad magic 0x%08x (expected 0x%08x)" % (path, magic & 0xffffffff, want_magic))
    return data, r


def read_input(path):
    data, r = open_input(path, MAGIC)
    L, H, C, T, V, B, nsteps = r.i32(7, "header ints L,H,C,T,V,B,nsteps")
    cfg = dict(L=L, H=H, C=C, T=T, V=V, B=B, nsteps=nsteps)
    for k, v in cfg.items():
        if v < 1:
            raise InputError("%s: header %s=%d must be >= 1" % (path, k, v))
    if C % H != 0:
        raise InputError("%s: C=%d is not divisible by H=%d" % (path, C, H))
    lr, beta1, beta2, eps, wd, clip = r.f32(6, "header floats lr,beta1,beta2,eps,weight_decay,clip")
    hyper = dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=wd, clip=clip)
    for k, v in hyper.items():
        if not math.isfinite(v):
            raise InputError("%s: header %s=%r is not finite" % (path, k, v))
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0) or lr < 0 or eps < 0 or wd < 0:
        raise InputError("%s: invalid optimizer settings %r (need lr,eps,wd >= 0, 0 <= betas < 1)"
                         % (path, hyper))

    # Reject absurd headers before building name tables or reading payloads.
    nparams = V * C + T * C + 2 * C + L * (12 * C * C + 13 * C)
    min_bytes = 4 * (nparams + 2 * nsteps * B * T)
    if min_bytes > len(data):
        raise InputError("%s: header (L=%d H=%d C=%d T=%d V=%d B=%d nsteps=%d) implies at least %d bytes, "
                         "file has %d" % (path, L, H, C, T, V, B, nsteps, min_bytes, len(data)))
    tensors = read_tensors(r, path, L, C, T, V)

    ntok = nsteps * B * T
    inputs = r.i32_array(ntok, "inputs").reshape(nsteps, B, T)
    targets = r.i32_array(ntok, "targets").reshape(nsteps, B, T)
    for what, a in (("inputs", inputs), ("targets", targets)):
        if a.min() < 0 or a.max() >= V:
            raise InputError("%s: %s hold token ids in [%d, %d], outside [0, %d)"
                             % (path, what, a.min(), a.max(), V))
    if r.pos != len(data):
        raise InputError("%s: %d trailing bytes after targets (header says nsteps=%d, B=%d, T=%d)"
                         % (path, len(data) - r.pos, nsteps, B, T))
    return cfg, hyper, tensors, inputs, targets


def read_eval_input(path):
    data, r = open_input(path, EVAL_MAGIC)
    L, H, C, T, V, nseq = r.i32(6, "header ints L,H,C,T,V,nseq")
    cfg = dict(L=L, H=H, C=C, T=T, V=V, nseq=nseq)
    for k, v in cfg.items():
        if v < 1:
            raise InputError("%s: header %s=%d must be >= 1" % (path, k, v))
    if C % H != 0:
        raise InputError("%s: C=%d is not divisible by H=%d" % (path, C, H))
    nparams = V * C + T * C + 2 * C + L * (12 * C * C + 13 * C)
    min_bytes = 4 * (nparams + 2 * nseq * T)
    if min_bytes > len(data):
        raise InputError("%s: header (L=%d H=%d C=%d T=%d V=%d nseq=%d) implies at least %d bytes, "
                         "file has %d" % (path, L, H, C, T, V, nseq, min_bytes, len(data)))
    tensors = read_tensors(r, path, L, C, T, V)
    inputs = r.i32_array(nseq * T, "inputs").reshape(nseq, T)
    targets = r.i32_array(nseq * T, "targets").reshape(nseq, T)
    for what, a in (("inputs", inputs), ("targets", targets)):
        if a.min() < 0 or a.max() >= V:
            raise InputError("%s: %s hold token ids in [%d, %d], outside [0, %d)"
                             % (path, what, a.min(), a.max(), V))
    if r.pos != len(data):
        raise InputError("%s: %d trailing bytes after targets (header says nseq=%d, T=%d)"
                         % (path, len(data) - r.pos, nseq, T))
    return cfg, tensors, inputs, targets


# ------------------------------------------------------------------ running


def run_eval(cfg, tensors, inputs, targets):
    """Mean loss over every token, as a float64; the model in float32."""
    model = GPT(cfg["L"], cfg["H"], cfg["C"], cfg["T"], cfg["V"])
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, _, arr in tensors:
            params[name].copy_(torch.from_numpy(arr))
        total = 0.0
        x_all, y_all = torch.from_numpy(inputs), torch.from_numpy(targets)
        for i in range(0, cfg["nseq"], 16):
            x, y = x_all[i:i + 16], y_all[i:i + 16]
            # per-token losses (float32), summed in float64
            loss = model(x, y, reduction="none")
            total += float(loss.to(torch.float64).sum())
    n = cfg["nseq"] * cfg["T"]
    return total / n, n



def run_reference(cfg, hyper, tensors, inputs, targets, dtype=torch.float32):
    """Returns (loss0, grads0 list, losses, grad_norms, finals list) in file order."""
    torch.manual_seed(0)
    model = GPT(cfg["L"], cfg["H"], cfg["C"], cfg["T"], cfg["V"]).to(dtype)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, _, arr in tensors:
            params[name].copy_(torch.from_numpy(arr.astype(np.float64)).to(dtype))
    order = [params[name] for name, _, _ in tensors]
    all_params = list(model.parameters())
    opt = model.configure_optimizer(hyper["lr"], (hyper["beta1"], hyper["beta2"]),
                                    hyper["eps"], hyper["weight_decay"])

    x_all = torch.from_numpy(inputs)
    y_all = torch.from_numpy(targets)
    losses, norms = [], []
    loss0 = None
    grads0 = None
    for s in range(cfg["nsteps"]):
        opt.zero_grad(set_to_none=True)
        loss = model(x_all[s], y_all[s])
        loss.backward()
        if s == 0:
            loss0 = float(loss)
            grads0 = [p.grad.detach().clone() for p in order]
        norms.append(grad_norm_and_clip(all_params, hyper["clip"]))
        opt.step()
        losses.append(float(loss))
    finals = [p.detach().clone() for p in order]
    return loss0, grads0, losses, norms, finals


def write_output(path, loss0, grads0, losses, norms, finals):
    parts = [np.array([loss0], dtype="<f4").tobytes()]
    parts += [g.to(torch.float32).numpy().astype("<f4").tobytes() for g in grads0]
    parts.append(np.array(losses, dtype="<f4").tobytes())
    parts.append(np.array(norms, dtype="<f4").tobytes())
    parts += [p.to(torch.float32).numpy().astype("<f4").tobytes() for p in finals]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for b in parts:
            f.write(b)
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: /usr/bin/python3 %s IN OUT\n" % argv[0])
        return 2
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with open(argv[1], "rb") as f:
            head = f.read(4)
        if len(head) == 4 and struct.unpack("<i", head)[0] == EVAL_MAGIC:
            cfg, tensors, inputs, targets = read_eval_input(argv[1])
            mean, n = run_eval(cfg, tensors, inputs, targets)
            with open(argv[2], "wb") as f:
                f.write(struct.pack("<dd", mean, float(n)))
            print("gpt_ref: eval L=%d H=%d C=%d T=%d V=%d: mean loss %.9f over %d tokens"
                  % (cfg["L"], cfg["H"], cfg["C"], cfg["T"], cfg["V"], mean, n))
            return 0
        cfg, hyper, tensors, inputs, targets = read_input(argv[1])
    except InputError as e:
        sys.stderr.write("gpt_ref: error: %s\n" % e)
        return 1
    except OSError as e:
        sys.stderr.write("gpt_ref: error: %s: %s\n" % (argv[1], e.strerror))
        return 1
    loss0, grads0, losses, norms, finals = run_reference(cfg, hyper, tensors, inputs, targets)
    try:
        write_output(argv[2], loss0, grads0, losses, norms, finals)
    except OSError as e:
        sys.stderr.write("gpt_ref: error: cannot write %s: %s\n" % (argv[2], e.strerror))
        return 1
    print("gpt_ref: L=%d H=%d C=%d T=%d V=%d B=%d steps=%d loss0=%.6f final_loss=%.6f grad_norm0=%.6f"
          % (cfg["L"], cfg["H"], cfg["C"], cfg["T"], cfg["V"], cfg["B"], cfg["nsteps"],
             loss0, losses[-1], norms[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
