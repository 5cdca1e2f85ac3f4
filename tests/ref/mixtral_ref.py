#!/usr/bin/python3
"""An independent Mixtral forward for test_hf_mixtral.sh, after Hugging Face's
MixtralForCausalLM eager path (transformers' modeling_mixtral.py), on the
files of a MixtralForCausalLM directory read here with struct + json
(hf_llama_files.py's reader; Debian has no python3-safetensors, and no
transformers):

  mixtral_ref.py check DIR TOKENS LOGITS
      config.json's MixtralConfig fields as test_hf_mixtral.sh's model has
      them, and every tensor MixtralForCausalLM has (names, shapes), no
      other; then the forward on DIR's weights and config.json of the
      tokens int32[T]: passes when trident's LOGITS (float32[T][V]) are
      within 1e-5 x max |torch logit| of torch's

The attention is llama_ref.py's (Mixtral's is Llama's: RMSNorm, rotary
rotate_half, grouped-query attention, full causal with sliding_window null);
the block's MLP is MixtralSparseMoeBlock: router logits = gate(x), softmax
over the E experts in float32, the top K, renormalised to sum 1, each
expert w2(silu(w1 x) * w3 x) weighted and summed.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama_files import read_st, tensor  # noqa: E402


def moe(h, p, pre, E, K):
    import torch
    x = h.reshape(-1, h.shape[-1])
    w = torch.softmax((x @ p[pre + "gate.weight"].T).float(), dim=1)
    w, chosen = torch.topk(w, K, dim=-1)
    w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):
        rows, k = torch.where(chosen == e)
        if rows.numel() == 0:
            continue
        ex = "%sexperts.%d." % (pre, e)
        xe = x[rows]
        y = (torch.nn.functional.silu(xe @ p[ex + "w1.weight"].T) * (xe @ p[ex + "w3.weight"].T)) @ p[ex + "w2.weight"].T
        out.index_add_(0, rows, y * w[rows, k, None])
    return out.view(h.shape)


def forward(p, c, inputs):
    from llama_ref import attention, rms, rope
    L, H, KV, C, E, K = (c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
                         c["hidden_size"], c["num_local_experts"], c["num_experts_per_tok"])
    eps = c["rms_norm_eps"]
    x = p["model.embed_tokens.weight"][inputs]
    cos, sin = rope(c["rope_theta"], C // H, (0, 0, 0, 0), inputs.shape[1])
    for l in range(L):
        pre = "model.layers.%d." % l
        x = attention(x, p, pre, H, KV, eps, cos, sin)
        x = x + moe(rms(x, p[pre + "post_attention_layernorm.weight"], eps), p, pre + "block_sparse_moe.", E, K)
    x = rms(x, p["model.norm.weight"], eps)
    return x @ (p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]).T


def logits(d, tok_path, logit_path):
    import torch
    torch.set_num_threads(1)
    c = json.load(open(os.path.join(d, "config.json")))
    hdr, raw = read_st(os.path.join(d, "model.safetensors"))
    p = {k: torch.from_numpy(tensor(hdr, raw, k).astype(np.float32)) for k in hdr}
    tokens = np.fromfile(tok_path, dtype="<i4")
    T, V = tokens.size, c["vocab_size"]
    with torch.no_grad():
        ref = forward(p, c, torch.from_numpy(tokens.astype(np.int64)).view(1, T))[0].double()
    ours = torch.from_numpy(np.fromfile(logit_path, dtype="<f4").astype(np.float64)).view(T, V)
    err, scale = (ours - ref).abs().max().item(), ref.abs().max().item()
    ok = err <= 1e-5 * scale
    print("%s  logits of the hf-mixtral export against an independent torch Mixtral: max |trident - torch| = %.3e, "
          "1e-5 x max |logit| = %.3e (%d tokens x %d vocabulary)" % ("ok " if ok else "FAIL", err, 1e-5 * scale, T, V))
    return 0 if ok else 1


def config(d):
    c = json.load(open(os.path.join(d, "config.json")))
    want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 32,
            "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "hidden_act": "silu", "max_position_embeddings": 16, "num_local_experts": 4,
            "num_experts_per_tok": 2, "router_aux_loss_coef": 0.005, "output_router_logits": False,
            "sliding_window": None, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "torch_dtype": "float32", "trident_tokenizer": "char"}
    bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v or type(c.get(k)) != type(v)}
    assert not bad, bad
    C, F, KV, V, E = 32, 32, 16, c["vocab_size"], 4
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]}
    for l in range(2):
        pre = "model.layers.%d." % l
        shapes.update({pre + "input_layernorm.weight": [C], pre + "post_attention_layernorm.weight": [C],
                       pre + "self_attn.q_proj.weight": [C, C], pre + "self_attn.k_proj.weight": [KV, C],
                       pre + "self_attn.v_proj.weight": [KV, C], pre + "self_attn.o_proj.weight": [C, C],
                       pre + "block_sparse_moe.gate.weight": [E, C]})
        for e in range(E):
            ex = "%sblock_sparse_moe.experts.%d." % (pre, e)
            shapes.update({ex + "w1.weight": [F, C], ex + "w3.weight": [F, C], ex + "w2.weight": [C, F]})
    hdr, _ = read_st(os.path.join(d, "model.safetensors"))
    got = {k: tuple(v["shape"]) for k, v in hdr.items()}
    shapes = {k: tuple(v) for k, v in shapes.items()}
    assert got == shapes, "tensors: %s" % sorted(set(got.items()) ^ set(shapes.items()))
    print("ok   config.json: MixtralConfig's fields; model.safetensors: MixtralForCausalLM's %d tensors and shapes"
          % len(shapes))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "check":
        print(__doc__)
        sys.exit(2)
    sys.exit(config(sys.argv[2]) or logits(*sys.argv[2:5]))
