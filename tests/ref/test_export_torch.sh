#!/usr/bin/env bash
# trident export against PyTorch: a tiny trained model (L2 H2 C32 T16, char
# vocabulary) exported as --format safetensors (GPT2Model names) and as
# --format hf-gpt2's directory (GPT2LMHeadModel names), each parsed and
# loaded by check_safetensors.py (HF GPT-2 names and shapes), its forward in
# float64 compared with trident's logits on the same tokens (interop_tool
# logits).
# Usage: test_export_torch.sh TRIDENT INTEROP_TOOL DATA_DIR
set -eu
T=${1:?usage: test_export_torch.sh TRIDENT INTEROP_TOOL DATA_DIR}
TOOL=${2:?}
DATA=${3:?}
HERE=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
"$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 10 \
  --lr 3e-3 --eval-every 0 --threads 1 --out "$tmp/ck" > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
mkdir "$tmp/hf"
"$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/model.safetensors"
"$TOOL" logits "$tmp/ck" "$tmp/tokens.bin" "$tmp/logits.bin"
/usr/bin/python3 "$HERE/check_safetensors.py" "$tmp/hf/model.safetensors" "$tmp/hf/config.json" \
  "$tmp/tokens.bin" "$tmp/logits.bin"
"$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out "$tmp/hfdir"
/usr/bin/python3 "$HERE/check_safetensors.py" "$tmp/hfdir/model.safetensors" "$tmp/hfdir/config.json" \
  "$tmp/tokens.bin" "$tmp/logits.bin" transformer.
