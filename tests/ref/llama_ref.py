#!/usr/bin/python3
"""PyTorch reference for trident's Llama: logits, loss and gradients.

Usage: /usr/bin/python3 tests/ref/llama_ref.py IN OUT

An independent Llama written after Hugging Face's LlamaForCausalLM eager
path (transformers' modeling_llama.py): RMSNorm computed in float32 then
scaled by its weight, separate q/k/v/o projections without biases, rotary
embeddings by rotate_half on cos/sin of pos * inv_freq (with rope_scaling
of rope_type llama3 as _compute_llama3_parameters), repeat_kv for grouped
query attention, an explicit causal softmax (torch 1.13 has no
scaled_dot_product_attention), the SwiGLU MLP down(silu(gate(x)) * up(x)),
and an LM head tied to embed_tokens or its own.

IN (little-endian): int32 magic 0x4645524C ('LREF'), int32 ncases; per case:
  int32 L, H, KV, C, F, T, V, B, tied; float32 eps; float64 theta;
  float64 rope factor, low_freq_factor, high_freq_factor (factor 0: none);
  int32 original_max_position_embeddings;
  int32 ntensors; per tensor: int32 namelen, name, int32 ndim,
        int32 shape[ndim], float32 data
  int32 inputs[B][T]; int32 targets[B][T]
OUT (float32) per case: the mean loss; logits[B][T][V]; the gradient of the
  loss per tensor in IN order.
"""
import math
import struct
import sys

import torch

torch.set_num_threads(1)


def rd(f, fmt):
    n = struct.calcsize(fmt)
    return struct.unpack("<" + fmt, f.read(n))


def inv_freq_of(theta, hs, factor, low, high, orig):
    inv = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    if factor <= 0:
        return inv
    low_wl, high_wl = orig / low, orig / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms(x, w, eps):
    """In float32 (HF's upcast of half-precision inputs), or float64 for a
    float64 model (tests/ref/moe_ref.py)."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def swiglu(h, gate_w, up_w, down_w):
    return (torch.nn.functional.silu(h @ gate_w.T) * (h @ up_w.T)) @ down_w.T


def dense_mlp(p, l, h):
    pre = "model.layers.%d.mlp." % l
    return swiglu(h, p[pre + "gate_proj.weight"], p[pre + "up_proj.weight"], p[pre + "down_proj.weight"])


def read_tensors(fin):
    """The per-tensor section of IN: the names in file order and
    {name: float32 tensor}."""
    (nt,) = rd(fin, "i")
    names, p = [], {}
    for _ in range(nt):
        (nl,) = rd(fin, "i")
        name = fin.read(nl).decode()
        (nd,) = rd(fin, "i")
        shape = rd(fin, "%di" % nd)
        n = 1
        for s in shape:
            n *= s
        data = torch.frombuffer(bytearray(fin.read(4 * n)), dtype=torch.float32)
        p[name] = data.view(*shape).clone()
        names.append(name)
    return names, p


def rope(theta, hs, rs, T, pos=None):
    """cos, sin [T, hs] of positions 0..T-1 (rs: factor, low, high, orig; factor 0: none);
    pos: [B, T] positions instead (cos, sin [B, 1, T, hs], one per sequence)"""
    inv = inv_freq_of(theta, hs, *rs)
    if pos is not None:
        freqs = pos[..., None].float() * inv  # a product, as the one-term matmul below
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos(), emb.sin()
    pos = torch.arange(T, dtype=torch.int64)
    freqs = pos[:, None].float() @ inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def attention(x, p, pre, H, KV, eps, cos, sin, mask=None):
    """x [B, T, C] plus block pre's attention (its input_layernorm first);
    mask: True where a key is hidden ([T, T] or [B, 1, T, T]; None:
    causal)"""
    B, T, C = x.shape
    hs = C // H
    if mask is None:
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    h = rms(x, p[pre + "input_layernorm.weight"], eps)
    q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, hs).transpose(1, 2)
    k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, KV, hs).transpose(1, 2)
    v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, KV, hs).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = H // KV  # repeat_kv
    k = k[:, :, None].expand(B, KV, rep, T, hs).reshape(B, H, T, hs)
    v = v[:, :, None].expand(B, KV, rep, T, hs).reshape(B, H, T, hs)
    att = (q @ k.transpose(2, 3)) / math.sqrt(hs)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return x + y @ p[pre + "self_attn.o_proj.weight"].T


def forward(p, cfg, inputs, mlp=dense_mlp, mask=None, pos=None):
    """The logits; mlp(p, l, h) is block l's MLP (moe_ref.py passes its
    mixture of experts); mask: attention's (None: causal); pos: the rotary
    positions [B, T] (None: 0..T-1 in every sequence)."""
    L, H, KV, C, F, T, V, B, tied, eps, theta, rs = cfg
    x = p["model.embed_tokens.weight"][inputs]  # [B, T, C]
    cos, sin = rope(theta, C // H, rs, T, pos)
    for l in range(L):
        pre = "model.layers.%d." % l
        x = attention(x, p, pre, H, KV, eps, cos, sin, mask)
        h = rms(x, p[pre + "post_attention_layernorm.weight"], eps)
        x = x + mlp(p, l, h)
    x = rms(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    return x @ head.T


def read_tokens(fin, B, T):
    """int32 inputs[B][T], then targets[B][T]."""
    return [torch.tensor(rd(fin, "%di" % (B * T)), dtype=torch.int64).view(B, T) for _ in range(2)]


def run_cases(magic, what, run_case):
    """IN (argv[1]): int32 magic, ncases, then per case what run_case(fin,
    fout) reads; it writes the case's results to OUT (argv[2])."""
    fin, fout = open(sys.argv[1], "rb"), open(sys.argv[2], "wb")
    m, ncases = rd(fin, "ii")
    assert m == magic, "not a %s input" % what
    for _ in range(ncases):
        run_case(fin, fout)
    fout.close()


def read_case(fin):
    """One case of IN: cfg, the tensor names, {name: tensor requiring grad},
    inputs, targets."""
    L, H, KV, C, F, T, V, B, tied = rd(fin, "9i")
    (eps,) = rd(fin, "f")
    theta, factor, low, high = rd(fin, "4d")
    (orig,) = rd(fin, "i")
    names, p = read_tensors(fin)
    for t in p.values():
        t.requires_grad_(True)
    inputs, targets = read_tokens(fin, B, T)
    cfg = (L, H, KV, C, F, T, V, B, tied, eps, theta, (factor, low, high, orig))
    return cfg, names, p, inputs, targets


def write_results(fout, loss, logits, names, p):
    """OUT's record of a case, after loss.backward()."""
    fout.write(struct.pack("<f", loss.item()))
    fout.write(logits.detach().numpy().astype("<f4").tobytes())
    for name in names:
        fout.write(p[name].grad.numpy().astype("<f4").tobytes())


def run_case(fin, fout):
    cfg, names, p, inputs, targets = read_case(fin)
    V = cfg[6]
    logits = forward(p, cfg, inputs)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()
    write_results(fout, loss, logits, names, p)


if __name__ == "__main__":
    run_cases(0x4645524C, "llama_ref", run_case)
