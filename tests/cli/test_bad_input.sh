#!/usr/bin/env bash
# Each bad input gives one clear error line ("trident: error: ...") naming
# what is wrong, and a non-zero exit; never a crash, a hang or a default.
set -u
T=${1:?usage: test_bad_input.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
printf 'hello world\n' > "$tmp/short.txt"
: > "$tmp/empty.txt"
printf '\xff\xfe bad utf8' > "$tmp/bad.txt"
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
mkdir -p "$tmp/otherckpt"
printf 'TRIDENT1garbage' > "$tmp/otherckpt/model.bin"
Q="--steps 2 --eval-every 0 --threads 1"

# expect NAME REGEX CMD...: non-zero exit, stderr matches REGEX, no signal death
expect() {
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL $name: exit code $rc (want a clean non-zero exit)"; echo "$out" | tail -3; fails=$((fails+1)); return
  fi
  if ! grep -qE -e "$re" <<<"$out"; then
    echo "FAIL $name: message does not match /$re/:"; echo "$out" | tail -3; fails=$((fails+1)); return
  fi
  echo "ok   $name: $(grep -m1 'trident: error' <<<"$out")"
}

expect missing-data    "error: --data .*/nope.txt: No such file"  "$T" train --data "$tmp/nope.txt" $Q
expect no-data         "error: train: --data is required"        "$T" train $Q
expect empty-data      "error: --data .* is empty"                "$T" train --data "$tmp/empty.txt" $Q
expect unreadable-dir  "error: --data .* is not a regular file"   "$T" train --data "$tmp" $Q
expect bad-utf8        "is not valid UTF-8"                       "$T" train --data "$tmp/bad.txt" $Q
expect short-corpus    "too short for --seq 64"                   "$T" train --data "$tmp/short.txt" $Q
expect heads-divide    "--embd 130 is not divisible by --heads 4" "$T" train --data "$tmp/small.txt" --embd 130 $Q
expect zero-layers     "--layers must be a positive integer"      "$T" train --data "$tmp/small.txt" --layers 0 $Q
expect neg-batch       "--batch must be a positive"               "$T" train --data "$tmp/small.txt" --batch -3 $Q
expect not-a-number    "--lr: 'abc' is not a number"              "$T" train --data "$tmp/small.txt" --lr abc $Q
expect unknown-flag    "unknown flag '--lerning-rate'"            "$T" train --data "$tmp/small.txt" --lerning-rate 1 $Q
expect bad-tokenizer   "--tokenizer wordpiece is not known"       "$T" train --data "$tmp/small.txt" --tokenizer wordpiece $Q
expect bad-zero        "--zero 5 is not a ZeRO stage"             "$T" train --data "$tmp/small.txt" --zero 5 $Q
expect bad-dp-mode     "--dp-mode ring is not known"              "$T" train --data "$tmp/small.txt" --dp-mode ring $Q
expect batch-split     "--batch 12 does not split over 1 data-parallel replicas x 5 micro-batches" \
                       "$T" train --data "$tmp/small.txt" --grad-accum 5 $Q
expect missing-ckpt    "--ckpt .*/none: cannot open"              "$T" sample --ckpt "$tmp/none"
expect foreign-ckpt    "is not a trident checkpoint|truncated"    "$T" sample --ckpt "$tmp/otherckpt"
expect unknown-command "unknown command 'trian'"                  "$T" trian
expect factors-mismatch "--dp 2 x --tp 1 x --pp 1 \(\+ 0 servers\) = 2 ranks, but mpirun started 3" \
                       $MPIRUN -np 3 "$T" train --data "$tmp/small.txt" --dp 2 $Q
expect batch-split-dp  "--batch 12 does not split over 5 data-parallel replicas" \
                       $MPIRUN -np 5 "$T" train --data "$tmp/small.txt" $Q
# a checkpoint of another model: sample with a prompt outside its vocabulary
"$T" train --data "$tmp/small.txt" --steps 1 --eval-every 0 --threads 1 --layers 1 --embd 16 --heads 2 \
     --seq 8 --out "$tmp/ck" >/dev/null 2>&1 || { echo "FAIL: could not train the tiny model"; fails=$((fails+1)); }
expect prompt-vocab    "character '@' .* is not in the model's"   "$T" sample --ckpt "$tmp/ck" --prompt "@@"
if [ $fails -ne 0 ]; then echo "bad-input checks: $fails failed"; exit 1; fi
echo "bad-input checks: all passed"
