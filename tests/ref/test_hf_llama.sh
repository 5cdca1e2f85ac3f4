#!/usr/bin/env bash
# export / import --format hf-llama (tests/ref/hf_llama_files.py reads and
# writes the Hugging Face files independently of trident):
#  - a tiny trained Llama (GQA, untied, char vocabulary) exported fp32 and
#    imported back: bitwise-equal parameters and config; the bf16 export is
#    the fp32 one rounded to nearest even; a sharded export (--shard-mb) has
#    a correct index, the single file's bytes, and imports bitwise equal;
#    the gpt2 tokenizer's files are GPT-2's (SHA-256 as test_export_hf.sh);
#  - a LlamaForCausalLM directory written by Python (random weights, GQA,
#    untied, rope_theta 500000, llama3 rope_scaling, an inv_freq buffer),
#    and its tied form, imported: trident's logits equal llama_ref.py's
#    (HF's eager path) within 1e-5 of the largest; a bf16 file imports
#    exactly;
#  - bad input: one error line naming the file and what is wrong, --out
#    never written; exporting the other family refused;
#  - the imported checkpoint resumed under tp 2: the losses of 2 steps
#    equal one process's within 1e-5 (relative), no model flag given (the
#    resume takes the family, its rope scaling included, from the checkpoint).
# Usage: test_hf_llama.sh TRIDENT INTEROP_TOOL DATA_DIR
set -u
T=${1:?usage: test_hf_llama.sh TRIDENT INTEROP_TOOL DATA_DIR}
TOOL=${2:?}
DATA=${3:?}
HERE=$(cd "$(dirname "$0")" && pwd)
F="$HERE/hf_llama_files.py"
. "$HERE/../cli/ckpt_lib.sh" # MPIRUN, PY, $tmp, fail, $tmp/small.txt
. "$HERE/hf_lib.sh"        # bad, resume, same_losses
llama=(--arch llama --kv-heads 2 --ffn-hidden 64 --norm-eps 1e-5 --rope-theta 10000 --tie-embeddings off)
tiny=(--layers 2 --heads 4 --embd 32 --seq 16 --batch 4 --eval-every 0 --threads 1)
"$T" train --data "$tmp/small.txt" "${llama[@]}" "${tiny[@]}" --steps 3 --out "$tmp/ck" > "$tmp/train.log" 2>&1 \
  || { tail -5 "$tmp/train.log"; exit 1; }

# --- round trips ------------------------------------------------------------------
"$T" export --ckpt "$tmp/ck" --format hf-llama --out "$tmp/hf" >/dev/null || fail "export hf-llama"
files=$(cd "$tmp/hf" && ls | tr '\n' ' ')
[ "$files" = "config.json generation_config.json model.safetensors " ] && echo "ok   hf-llama directory: $files" \
  || fail "hf-llama files: $files"
$PY - "$tmp/hf/config.json" <<'PYEOF' || fail "config.json fields"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "hidden_act": "silu", "max_position_embeddings": 16, "vocab_size": 59, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "float32", "trident_tokenizer": "char"}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v or type(c.get(k)) != type(v)}
assert not bad, bad
print("ok   config.json: LlamaConfig's fields")
PYEOF
"$T" import --format hf-llama --in "$tmp/hf" --out "$tmp/im" >/dev/null || fail "import hf-llama"
"$TOOL" cmp "$tmp/ck" "$tmp/im" >/dev/null && echo "ok   fp32 round trip: config and parameters bitwise equal" \
  || fail "fp32 round trip"
"$T" export --ckpt "$tmp/ck" --format hf-llama --dtype bf16 --out "$tmp/hf16" >/dev/null || fail "export bf16"
$PY "$F" bf16 "$tmp/hf" "$tmp/hf16" || fail "bf16 values"
# BF16 read exactly: the import's fp32 export, rounded again, is the bf16 file
"$T" import --format hf-llama --in "$tmp/hf16" --out "$tmp/im16" >/dev/null \
  && "$T" export --ckpt "$tmp/im16" --format hf-llama --out "$tmp/hf16b" >/dev/null || fail "bf16 import"
$PY "$F" bf16 "$tmp/hf16b" "$tmp/hf16" "the bf16 file imported and exported fp32" || fail "bf16 import values"
"$T" export --ckpt "$tmp/ck" --format hf-llama --shard-mb 0.02 --out "$tmp/hfs" >/dev/null || fail "export sharded"
$PY "$F" shards "$tmp/hf" "$tmp/hfs" 20000 || fail "shards"
"$T" import --format hf-llama --in "$tmp/hfs" --out "$tmp/ims" >/dev/null && "$TOOL" cmp "$tmp/ck" "$tmp/ims" >/dev/null \
  && echo "ok   sharded round trip (--in DIR): bitwise equal" || fail "sharded round trip"
# --overwrite replaces a directory of hf-llama's own files (the shards included)
cp -r "$tmp/hfs" "$tmp/hfo"
out=$("$T" export --ckpt "$tmp/ck" --format hf-llama --out "$tmp/hfo" 2>&1) && fail "existing --out replaced" \
  || grep -q "exists" <<<"$out" || fail "existing --out: $out"
"$T" export --ckpt "$tmp/ck" --format hf-llama --out "$tmp/hfo" --overwrite >/dev/null \
  && [ "$(cd "$tmp/hfo" && ls | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] \
  && cmp -s "$tmp/hf/model.safetensors" "$tmp/hfo/model.safetensors" \
  && echo "ok   --overwrite: the sharded directory refused without it, replaced by the single file with it" \
  || fail "--overwrite of a sharded directory"
"$T" import --format hf-llama --in "$tmp/hfs/model.safetensors.index.json" --out "$tmp/ims2" >/dev/null \
  && "$TOOL" cmp "$tmp/ck" "$tmp/ims2" >/dev/null && echo "ok   sharded round trip (--in the index): bitwise equal" \
  || fail "sharded round trip from the index"
head -c 4000 "$tmp/small.txt" > "$tmp/4k.txt" # BPE under ASan: a few KB are enough for one step
"$T" train --data "$tmp/4k.txt" --tokenizer gpt2 "${llama[@]}" "${tiny[@]}" --steps 1 --out "$tmp/ckg" \
  > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
"$T" export --ckpt "$tmp/ckg" --format hf-llama --out "$tmp/g" >/dev/null || fail "export gpt2-tokenizer llama"
sum() { sha256sum "$1" | cut -d' ' -f1; }
[ "$(cd "$tmp/g" && ls | tr '\n' ' ')" = "config.json generation_config.json merges.txt model.safetensors special_tokens_map.json tokenizer_config.json vocab.json " ] \
  && [ "$(sum "$tmp/g/vocab.json")" = 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 ] \
  && [ "$(sum "$tmp/g/merges.txt")" = 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 ] \
  && grep -q '"bos_token_id": 50256' "$tmp/g/config.json" && grep -q '"tokenizer_class": "GPT2Tokenizer"' "$tmp/g/tokenizer_config.json" \
  && echo "ok   gpt2 tokenizer: vocab.json and merges.txt are GPT-2's (SHA-256), tokenizer_config.json, bos 50256" \
  || fail "gpt2 tokenizer files"

# --- an HF directory made by Python: logits against the PyTorch reference ----------
$PY "$F" make "$tmp/py" >/dev/null || fail "make the HF directory"
# tied: the head is embed_tokens (HF's tied files store no lm_head.weight)
$PY "$F" edit "$tmp/py" "$tmp/pytied" 'cfg["tie_word_embeddings"] = True; del hdr["lm_head.weight"]'
for d in py pytied; do
  "$T" import --format hf-llama --in "$tmp/$d" --out "$tmp/${d}_im" >/dev/null || fail "import the Python-made $d"
  "$TOOL" logits "$tmp/${d}_im" "$tmp/$d.tokens" "$tmp/$d.logits" >/dev/null || fail "logits $d"
done
$PY "$F" logits "$tmp/py" "$tmp/py.tokens" "$tmp/py.logits" "$tmp/pytied" "$tmp/pytied.tokens" "$tmp/pytied.logits" \
  || fail "logits against PyTorch"

# --- bad input --------------------------------------------------------------------
# e NAME REGEX PYTHON: the Python-made directory edited by PYTHON (into $tmp/eN,
# all in one Python process below), then imported
names=(); res=(); codes=()
e() { names+=("$1"); res+=("$2"); codes+=("$3"); }
e "unknown tensor" "e1/model.safetensors: tensor \"model.layers.0.mlp.gate.weight\" is not a LlamaForCausalLM tensor" \
  'ren("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.gate.weight")'
e "missing tensor" "e2/model.safetensors: tensor \"model.norm.weight\" is missing" 'del hdr["model.norm.weight"]'
e "wrong shape" "tensor \"model.layers.1.self_attn.k_proj.weight\": shape \[32, 16\], but .*config.json's sizes need \[16, 32\]" \
  'hdr["model.layers.1.self_attn.k_proj.weight"]["shape"] = [32, 16]'
e "hidden_act gelu" "e4/config.json: field hidden_act: \"gelu\"; trident's Llama has \"silu\"" 'cfg["hidden_act"] = "gelu"'
e "attention_bias" "e5/config.json: field attention_bias: true; trident's Llama has none" 'cfg["attention_bias"] = True'
e "mlp_bias" "e6/config.json: field mlp_bias: true" 'cfg["mlp_bias"] = True'
e "rope_scaling linear" "e7/config.json: field rope_scaling: rope_type \"linear\" is not supported" \
  'cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}'
e "head_dim" "e8/config.json: field head_dim: trident's heads are hidden_size / num_attention_heads = 8" \
  'cfg["head_dim"] = 16'
e "layer past the config" "tensor \"model.layers.2.input_layernorm.weight\": layer 2, but .*num_hidden_layers 2" \
  'ren("model.layers.1.input_layernorm.weight", "model.layers.2.input_layernorm.weight")'
e "config disagrees (GQA)" "tensor \"model.layers.0.self_attn.k_proj.weight\": shape \[16, 32\], but .*need \[32, 32\]" \
  'cfg["num_key_value_heads"] = 4'
e "other model_type" "e11/config.json: field model_type: \"mistral\"" 'cfg["model_type"] = "mistral"'
e "tied, another head stored" "e12/model.safetensors: tensor \"lm_head.weight\" differs from \"model.embed_tokens.weight\", but .*tie_word_embeddings true" \
  'cfg["tie_word_embeddings"] = True'
edits=(); for i in "${!codes[@]}"; do edits+=("$tmp/e$((i + 1))" "${codes[$i]}"); done
$PY "$F" edit "$tmp/py" "${edits[@]}" || fail "edit the Python-made directory"
for i in "${!names[@]}"; do bad "${names[$i]}" "${res[$i]}" import --format hf-llama --in "$tmp/e$((i + 1))"; done
cp -r "$tmp/hfs" "$tmp/i1"
$PY -c 'import json,sys; p=sys.argv[1]; i=json.load(open(p)); m=i["weight_map"]; m["model.norm.weight"]=min(m.values()); json.dump(i,open(p,"w"))' \
  "$tmp/i1/model.safetensors.index.json"
bad "index disagrees with a shard" "tensor \"model.norm.weight\" is in model-0000[2-9]-of-0000[2-9].safetensors, but .*index.json maps it to model-00001-" \
  import --format hf-llama --in "$tmp/i1"
cp -r "$tmp/hfs" "$tmp/i2"; $PY -c 'import json,sys; p=sys.argv[1]; i=json.load(open(p)); i["weight_map"]["model.norm.weight"]="../x.safetensors"; json.dump(i,open(p,"w"))' \
  "$tmp/i2/model.safetensors.index.json"
bad "index names a path" "weight_map: tensor \"model.norm.weight\": file \"../x.safetensors\" is not a file name" \
  import --format hf-llama --in "$tmp/i2"
bad "llama as llmc" "the checkpoint is a llama model; --format llmc writes GPT-2's tensors, so use --format hf-llama" \
  export --ckpt "$tmp/ck" --format llmc
bad "llama as hf-gpt2" "the checkpoint is a llama model; --format hf-gpt2" export --ckpt "$tmp/ck" --format hf-gpt2
"$T" train --data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 8 --batch 2 --steps 1 --eval-every 0 --threads 1 \
  --out "$tmp/ck2" > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
bad "gpt2 as hf-llama" "the checkpoint is a gpt2 model; --format hf-llama writes Llama's tensors" \
  export --ckpt "$tmp/ck2" --format hf-llama
bad "bf16 for hf-gpt2" "--dtype and --shard-mb apply to --format hf-llama" export --ckpt "$tmp/ck2" --format hf-gpt2 --dtype bf16

# --- resume across layouts: the imported checkpoint, 2 steps ------------------------
resume one --; resume tp2 $MPIRUN -np 2 -- --tp 2
same_losses tp2

[ $fails -eq 0 ] && echo "test_hf_llama: all passed" || echo "test_hf_llama: $fails failed"
exit $((fails > 0))
