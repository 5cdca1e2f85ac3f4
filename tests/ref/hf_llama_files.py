#!/usr/bin/python3
"""Hugging Face Llama directories for test_hf_llama.sh, read and written
here with struct + json (Debian has no python3-safetensors), independent of
trident's reader and writer.

  hf_llama_files.py make DIR            a LlamaForCausalLM directory of random
      weights (GQA 4/2 heads, untied head, rope_theta 500000, rope_scaling
      llama3 with original_max_position_embeddings 8 so all three frequency
      bands occur in 16 positions, vocabulary 83 so trident pads it), F32,
      with an older save's rotary_emb.inv_freq buffer, which is no weight
  hf_llama_files.py logits DIR TOKENS LOGITS [DIR TOKENS LOGITS ...]
      the PyTorch reference (llama_ref.py's forward, HF's eager path) on
      DIR's weights and TOKENS (int32[T]) against trident's LOGITS
      (float32[T][V]): passes when max |diff| <= 1e-5 x max |torch logit|
  hf_llama_files.py bf16 FP32DIR BF16DIR [WHAT]
      every BF16 tensor is its F32 tensor rounded to nearest, ties to even
      (computed here on the bits), names and shapes the same, torch_dtype
  hf_llama_files.py shards ONEDIR SHARDDIR LIMIT_BYTES
      the index names every tensor of the single file once, total_size is the
      tensors' bytes, each shard holds exactly its tensors with the same bytes,
      no shard above LIMIT unless it is one tensor, shards cut in order
  hf_llama_files.py edit SRCDIR DSTDIR PYTHON [DSTDIR PYTHON ...]
      a copy with `hdr` (the safetensors header: name -> dtype, shape) and
      `cfg` (config.json) changed by PYTHON (ren(A, B) renames a tensor);
      each tensor keeps its data bytes, a removed one's are dropped
"""
import json
import os
import struct
import sys

import numpy as np

DT = {"F32": "<f4", "BF16": "<u2", "F16": "<f2"}


def read_st(path):
    s = open(path, "rb").read()
    (n,) = struct.unpack("<Q", s[:8])
    hdr = json.loads(s[8:8 + n])
    hdr.pop("__metadata__", None)
    raw = {k: s[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in hdr.items()}
    return hdr, raw


def write_st(path, hdr, raw):
    out, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in hdr.items():
        b = raw[k]
        out[k] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tensor(hdr, raw, k):
    return np.frombuffer(raw[k], dtype=DT[hdr[k]["dtype"]]).reshape(hdr[k]["shape"])


def make(d):
    L, H, KV, C, F, T, V = 2, 4, 2, 32, 80, 16, 83
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "head_dim": C // H, "hidden_act": "silu",
           "max_position_embeddings": T, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
           "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
           "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    rng = np.random.default_rng(20261204)
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
    for l in range(L):
        p = "model.layers.%d." % l
        shapes.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                       p + "self_attn.q_proj.weight": [C, C], p + "self_attn.k_proj.weight": [KV * C // H, C],
                       p + "self_attn.v_proj.weight": [KV * C // H, C], p + "self_attn.o_proj.weight": [C, C],
                       p + "mlp.gate_proj.weight": [F, C], p + "mlp.up_proj.weight": [F, C],
                       p + "mlp.down_proj.weight": [C, F]})
    hdr, raw = {}, {}
    for k, s in sorted(shapes.items()):  # HF's files are sorted by name, not in forward order
        x = (1 + 0.1 * rng.standard_normal(s)) if len(s) == 1 else 0.08 * rng.standard_normal(s)
        hdr[k] = {"dtype": "F32", "shape": s}
        raw[k] = x.astype("<f4").tobytes()
    k = "model.layers.0.self_attn.rotary_emb.inv_freq"
    hdr[k], raw[k] = {"dtype": "F32", "shape": [C // H // 2]}, np.ones(C // H // 2, "<f4").tobytes()
    os.makedirs(d, exist_ok=True)
    write_st(os.path.join(d, "model.safetensors"), hdr, raw)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    print("ok   made %s: L%d H%d KV%d C%d F%d T%d V%d, untied, llama3 rope_scaling" % (d, L, H, KV, C, F, T, V))


def logits(d, tok_path, logit_path):
    import torch  # here only: the other commands start in a fraction of torch's import time

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_ref
    cfg = json.load(open(os.path.join(d, "config.json")))
    hdr, raw = read_st(os.path.join(d, "model.safetensors"))
    p = {k: torch.from_numpy(tensor(hdr, raw, k).astype(np.float32)) for k in hdr}
    tokens = np.fromfile(tok_path, dtype="<i4")
    T, V = tokens.size, cfg["vocab_size"]
    rs = cfg["rope_scaling"]
    c = (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"],
         cfg["intermediate_size"], T, V, 1, cfg["tie_word_embeddings"], cfg["rms_norm_eps"], cfg["rope_theta"],
         (rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]))
    with torch.no_grad():
        ref = llama_ref.forward(p, c, torch.from_numpy(tokens.astype(np.int64)).view(1, T))[0].double()
    ours = torch.from_numpy(np.fromfile(logit_path, dtype="<f4").astype(np.float64)).view(T, V)
    err, scale = (ours - ref).abs().max().item(), ref.abs().max().item()
    ok = err <= 1e-5 * scale
    print("%s  logits of the imported HF file %s: max |trident - torch| = %.3e, 1e-5 x max |logit| = %.3e "
          "(%d tokens x %d vocabulary, %s)" % ("ok " if ok else "FAIL", os.path.basename(d), err, 1e-5 * scale, T,
                                              V, "tied" if cfg["tie_word_embeddings"] else "untied"))
    return 0 if ok else 1


def rne(f32):
    u = f32.view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def bf16(d32, d16, what="the bf16 export"):
    h32, r32 = read_st(os.path.join(d32, "model.safetensors"))
    h16, r16 = read_st(os.path.join(d16, "model.safetensors"))
    assert list(h32) == list(h16), "tensor names differ"
    for k in h32:
        assert h32[k]["dtype"] == "F32" and h16[k]["dtype"] == "BF16" and h32[k]["shape"] == h16[k]["shape"], k
        assert np.array_equal(tensor(h16, r16, k), rne(tensor(h32, r32, k))), "%s: not the rounded fp32" % k
    c32 = json.load(open(os.path.join(d32, "config.json")))
    c16 = json.load(open(os.path.join(d16, "config.json")))
    assert c32.pop("torch_dtype") == "float32" and c16.pop("torch_dtype") == "bfloat16" and c32 == c16
    print("ok   %s: each of %d tensors is the fp32 one rounded to nearest even" % (what, len(h32)))
    return 0


def shards(one, d, limit):
    h1, r1 = read_st(os.path.join(one, "model.safetensors"))
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wm = idx["weight_map"]
    assert sorted(wm) == sorted(h1), "index names %s" % sorted(set(wm) ^ set(h1))
    assert idx["metadata"]["total_size"] == sum(len(b) for b in r1.values())
    files = sorted(set(wm.values()))
    n = len(files)
    assert n > 1 and files == ["model-%05d-of-%05d.safetensors" % (i + 1, n) for i in range(n)], files
    order = []
    for f in files:
        h, r = read_st(os.path.join(d, f))
        assert sorted(h) == sorted(k for k in wm if wm[k] == f), f
        assert len(h) == 1 or sum(len(b) for b in r.values()) <= limit, "%s is over the limit" % f
        for k in h:
            assert h[k] == {**h1[k], "data_offsets": h[k]["data_offsets"]} and r[k] == r1[k], k
        order += list(h)
    assert order == list(h1), "shards do not cut the tensors in order"
    print("ok   %d shards: the index maps all %d tensors, total_size %d, bytes equal the single file's"
          % (n, len(h1), idx["metadata"]["total_size"]))
    return 0


def edit(src, dst, code):
    os.makedirs(dst, exist_ok=True)
    hdr, raw = read_st(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))

    def ren(a, b):  # a tensor under another name, its data kept
        hdr[b], raw[b] = hdr.pop(a), raw.pop(a)

    exec(code, {"hdr": hdr, "raw": raw, "cfg": cfg, "ren": ren})
    write_st(os.path.join(dst, "model.safetensors"), hdr, {k: raw[k] for k in hdr})
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)


def main(a):
    if a[1] == "make":
        make(a[2])
        return 0
    if a[1] == "logits":  # one or more DIR TOKENS LOGITS, in one process (torch loads once)
        return max(logits(*a[i:i + 3]) for i in range(2, len(a), 3))
    if a[1] == "bf16":
        return bf16(*a[2:5])
    if a[1] == "shards":
        return shards(a[2], a[3], float(a[4]))
    if a[1] == "edit":  # SRC, then one or more DST PYTHON
        for i in range(3, len(a), 2):
            edit(a[2], a[i], a[i + 1])
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
