#!/usr/bin/env bash
# Token files in the formats people have: nanoGPT's raw uint16 train.bin +
# val.bin, and llm.c's .bin (256-int32 header, magic 20240520, version 1)
# with *_val.bin beside it. Each trains for a few steps, the data line names
# both files and the vocabulary, and a token id beyond --vocab is an error.
# GPT-2-sized raw ids whose first two tokens sit next to the llm.c magic
# window (15 309 = int32 20250639) still load as raw tokens; the refusals
# are in test_bad_files.sh.
set -u
T=${1:?usage: test_token_files.sh TRIDENT_BINARY}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import os, struct, sys, random
d = sys.argv[1]
random.seed(1)
def toks(n): return [random.randrange(300) for _ in range(n)]
os.makedirs(f"{d}/nano"); os.makedirs(f"{d}/llmc")
for name, n in (("train", 20000), ("val", 3000)):
    t = toks(n)
    open(f"{d}/nano/{name}.bin", "wb").write(struct.pack(f"<{n}H", *t))
    hdr = [20240520, 1, n] + [0] * 253
    open(f"{d}/llmc/tiny_{name}.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{n}H", *t))
os.makedirs(f"{d}/gpt2")
for name, n in (("train", 20000), ("val", 3000)):
    t = [15, 309] + [random.randrange(50257) for _ in range(n - 2)]
    open(f"{d}/gpt2/{name}.bin", "wb").write(struct.pack(f"<{n}H", *t))
PY
fails=0
run() {
  local name=$1 want=$2; shift 2
  out=$("$T" train "$@" --layers 1 --embd 32 --heads 2 --seq 16 --batch 4 --steps 3 --eval-every 3 \
        --eval-iters 2 --threads 1 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -q "$want" <<<"$out" || ! grep -q "val loss" <<<"$out"; then
    echo "FAIL $name (exit $rc):"; echo "$out" | tail -5; fails=$((fails+1))
  else
    echo "ok   $name: $(grep -m1 '^data:' <<<"$out")"
  fi
}
run nanogpt "nano/train.bin + .*nano/val.bin (token ids)" --data "$tmp/nano/train.bin"
run llmc "tiny_train.bin + .*tiny_val.bin (token ids)" --data "$tmp/llmc/tiny_train.bin" --vocab 512
run gpt2-ids "gpt2/train.bin + .*gpt2/val.bin (token ids)" --data "$tmp/gpt2/train.bin" --vocab 50257
out=$("$T" train --data "$tmp/nano/train.bin" --vocab 100 --steps 1 2>&1)
if [ $? -ne 0 ] && grep -q "does not fit --vocab 100" <<<"$out"; then echo "ok   vocab-too-small: $(grep -m1 error <<<"$out")"
else echo "FAIL vocab-too-small:"; echo "$out" | tail -3; fails=$((fails+1)); fi
[ $fails -eq 0 ] && echo "token files: all passed"
exit $fails
