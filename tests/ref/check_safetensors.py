#!/usr/bin/python3
"""Loads a model exported by `trident export --format safetensors` (or the
model.safetensors + config.json of `--format hf-gpt2`'s directory) the way a
Hugging Face reader would, and checks trident's logits against a PyTorch
forward of it.

Usage: check_safetensors.py MODEL.safetensors CONFIG.json TOKENS LOGITS [PREFIX]

PREFIX: "" (default) for the file export's GPT2Model names ("wte.weight"),
"transformer." for the directory's GPT2LMHeadModel names
("transformer.wte.weight", no lm_head.weight: it is tied to wte).

The safetensors file is parsed here directly (u64 header length, JSON
header, data; no safetensors package exists on this system), every tensor
checked against GPT-2's names and Hugging Face's shapes (Conv1D weights
[in, out], wte [vocab_size, n_embd], no separate head), then loaded into
tests/ref/gpt_ref.py's GPT (nanoGPT: nn.Linear weights [out, in], so the
Conv1D weights are transposed back, as nanoGPT's from_pretrained does). The
forward runs in float64 on TOKENS (int32[T]); LOGITS (float32[T][V]) are
trident's. Passes when max |trident - torch| <= 1e-5 * max |torch logit|.
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import GPT  # noqa: E402

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", "%s: dtype %s" % (name, info["dtype"])
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[base + b:base + e]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"])
    return header.get("__metadata__", {}), out


def main(argv):
    st_path, cfg_path, tok_path, logit_path = argv[1:5]
    prefix = argv[5] if len(argv) > 5 else ""
    cfg = json.load(open(cfg_path))
    assert cfg["model_type"] == "gpt2" and cfg["tie_word_embeddings"] is True
    assert cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["activation_function"] == "gelu_new"
    assert cfg["n_ctx"] == cfg["n_positions"] and cfg["layer_norm_epsilon"] == 1e-5
    L, H, C, T, V = (cfg[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"))
    meta, tensors = read_safetensors(st_path)
    assert meta.get("format") == "pt", meta
    # Hugging Face GPT2Model's names (GPT2LMHeadModel's with PREFIX) and shapes, nothing else
    want = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        for k, s in (("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                     ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]),
                     ("attn.c_proj.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                     ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
                     ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])):
            want["h.%d.%s" % (i, k)] = s
    want = {prefix + k: s for k, s in want.items()}
    got = {k: list(v.shape) for k, v in tensors.items()}
    if got != want:
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        print("FAIL: tensor names/shapes (file, HF GPT-2) differ:", diff)
        return 1
    model = GPT(L, H, C, T, V)
    state = {}
    for name, t in tensors.items():
        state["transformer." + name[len(prefix):]] = t.t() if name.endswith(CONV1D) else t
    model.load_state_dict(state, strict=True)
    model = model.double().eval()
    tokens = np.fromfile(tok_path, dtype="<i4")
    assert tokens.shape == (T,)
    idx = torch.from_numpy(tokens.astype(np.int64)).view(1, T)
    with torch.no_grad():
        tr = model.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(T))
        for block in tr.h:
            x = block(x)
        ref = F.linear(tr.ln_f(x), tr.wte.weight)[0]  # tied head
    ours = torch.from_numpy(np.fromfile(logit_path, dtype="<f4").astype(np.float64)).view(T, V)
    err = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    ok = err <= 1e-5 * scale
    print("%s: max |trident - torch| = %.3e, 1e-5 x max |logit| = %.3e (%d tokens x %d vocabulary)"
          % ("ok" if ok else "FAIL", err, 1e-5 * scale, T, V))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
