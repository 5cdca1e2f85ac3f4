#!/usr/bin/env bash
# Checkpoints never lose good work: the step-directory layout with its
# atomic `latest`, a run stopped by a non-finite loss or gradient (every dp
# mode) or by a failed save leaves every earlier checkpoint byte-identical,
# sampling reads DIR or a step directory, and every malformed checkpoint is
# one error line naming the file and the field.
# Usage: test_checkpoints.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_checkpoints.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 60000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --steps 8
   --eval-every 0 --threads 1 --save-every 2)

# snapshot DIR: every file's checksum and every link's target, sorted
snap() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k2; find . -type l -printf '%p -> %l\n' | sort); }

# run NAME WANT_RC REGEX CMD...: exit status WANT_RC (or any non-zero for "nz"),
# output matches REGEX, no signal death
run() {
  local name=$1 want=$2 re=$3; shift 3
  local out rc
  out=$(timeout 120 "$@" 2>&1 </dev/null); rc=$?
  if [ "$want" = nz ] && { [ $rc -eq 0 ] || [ $rc -ge 124 ]; }; then
    fail "$name: exit code $rc (want a clean non-zero exit)"; echo "$out" | tail -5; return 1
  elif [ "$want" != nz ] && [ $rc -ne "$want" ]; then
    fail "$name: exit code $rc (want $want)"; echo "$out" | tail -5; return 1
  fi
  if ! grep -qE -e "$re" <<<"$out"; then
    fail "$name: output does not match /$re/:"; echo "$out" | tail -5; return 1
  fi
  echo "ok   $name: $(grep -m1 -E -e "$re" <<<"$out")"
}

# --- the layout -------------------------------------------------------------
run reference 0 "checkpoint: .*/ref/step-00000008" "$T" train "${A[@]}" --out "$tmp/ref"
for s in 2 4 6 8; do [ -f "$tmp/ref/step-0000000$s/model.bin" ] && [ -f "$tmp/ref/step-0000000$s/config.json" ] \
  || fail "layout: $tmp/ref/step-0000000$s is missing or incomplete"; done
[ "$(readlink "$tmp/ref/latest")" = step-00000008 ] || fail "layout: latest -> $(readlink "$tmp/ref/latest"), want step-00000008"
ls -A "$tmp/ref" | grep -q '^\.' && fail "layout: temporary files left in --out: $(ls -A "$tmp/ref" | grep '^\.')"

# --- sampling from DIR (follows latest) and from a step directory ------------
d=$("$T" sample --ckpt "$tmp/ref" --tokens 40 --seed 5 2>&1) || fail "sample DIR: $d"
s8=$("$T" sample --ckpt "$tmp/ref/step-00000008" --tokens 40 --seed 5 2>&1) || fail "sample step dir: $s8"
[ -n "$d" ] && [ "$d" = "$s8" ] && echo "ok   sample: DIR and DIR/step-00000008 give the same text" \
  || fail "sample: DIR gave '$d', its latest step dir '$s8'"
run sample-step2 0 "." "$T" sample --ckpt "$tmp/ref/step-00000002" --tokens 10

# --- a non-finite loss or gradient stops the run; earlier saves stay ---------
# In a fresh --out: the saves before the bad step equal the reference's bytes,
# nothing of the bad step or later exists, latest names the last good one.
check_stopped() { # NAME DIR LAST_GOOD
  local name=$1 dir=$2 last=$3
  [ "$(readlink "$dir/latest")" = "step-0000000$last" ] || fail "$name: latest -> $(readlink "$dir/latest"), want step-0000000$last"
  for s in 2 4 6 8; do
    if [ $s -le "$last" ]; then
      cmp -s "$dir/step-0000000$s/model.bin" "$tmp/ref/step-0000000$s/model.bin" \
        && cmp -s "$dir/step-0000000$s/config.json" "$tmp/ref/step-0000000$s/config.json" \
        || fail "$name: step-0000000$s differs from the uninterrupted run's"
    elif [ -e "$dir/step-0000000$s" ]; then fail "$name: step-0000000$s was written after the bad step"; fi
  done
  ls -A "$dir" | grep -q '^\.' && fail "$name: temporary files left: $(ls -A "$dir" | grep '^\.')"
}
run nan-loss 3 "error: step 5: the loss is nan; the run stopped" \
  env TRIDENT_FAULT=nan-loss:5 "$T" train "${A[@]}" --out "$tmp/nl" && check_stopped nan-loss "$tmp/nl" 4
run nan-grad 3 "error: step 4: the gradient norm is nan; first non-finite gradient in transformer.h.0.mlp.c_fc.weight" \
  env TRIDENT_FAULT=nan-grad:4 "$T" train "${A[@]}" --out "$tmp/ng" && check_stopped nan-grad "$tmp/ng" 4
# every dp mode finds the same tensor, the fault on rank 1 (its gradient
# element lands in one rank's shard under ZeRO; the ranks agree on it; top-k
# of the AdamW update: the NaN update is sent first and stays in the grads)
for mode in "2 --zero 0" "2 --zero 1" "2 --zero 2" "2 --zero 3" "2 --dp-mode reduce-broadcast" "3 --dp-mode ps --ps-servers 1" \
            "4 --dp-mode ps --ps-servers 2 --ps-staleness 1" \
            "2 --grad-compress topk:0.01" "2 --grad-compress topk:0.01 --zero 1"; do
  np=${mode%% *}; flags=${mode#* }
  out="$tmp/m$np${flags// /}"
  run "nan-grad np$np $flags" nz \
    "error: step 3: the gradient norm is (nan|not finite); first non-finite gradient in transformer.h.0.mlp.c_fc.weight" \
    env TRIDENT_FAULT=nan-grad:3:1 $MPIRUN -np $np "$T" train "${A[@]}" $flags --out "$out"
  [ "$(readlink "$out/latest")" = step-00000002 ] && [ ! -e "$out/step-00000004" ] \
    || fail "nan-grad np$np $flags: latest -> $(readlink "$out/latest"), want step-00000002 and nothing later"
done
run nan-loss-ps nz "error: step 2: the loss is nan" \
  env TRIDENT_FAULT=nan-loss:2:1 $MPIRUN -np 3 "$T" train "${A[@]}" --dp-mode ps --ps-servers 1 --out "$tmp/nlps"
[ "$(readlink "$tmp/nlps/latest")" = step-00000002 ] || fail "nan-loss-ps: latest -> $(readlink "$tmp/nlps/latest")"
# parameter servers save during the run too: the same bytes as one process up
# to float reassociation is the round-trip test's job; here, the layout
run ps-save-every 0 "checkpoint: .*/pss/step-00000008" \
  $MPIRUN -np 4 "$T" train "${A[@]}" --dp-mode ps --ps-servers 2 --ps-staleness 1 --out "$tmp/pss"
for s in 2 4 6 8; do [ -f "$tmp/pss/step-0000000$s/model.bin" ] || fail "ps-save-every: step-0000000$s missing"; done
run ps-sample 0 "." "$T" sample --ckpt "$tmp/pss/step-00000004" --tokens 10

# A run into an --out holding good work fails before its first save: every
# byte and link there is as before.
cp -a "$tmp/ref" "$tmp/keep"; before=$(snap "$tmp/keep")
run nan-grad-existing 3 "error: step 1: the gradient norm is nan" \
  env TRIDENT_FAULT=nan-grad:1 "$T" train "${A[@]}" --out "$tmp/keep"
[ "$(snap "$tmp/keep")" = "$before" ] && echo "ok   nan-grad-existing: --out byte-identical, latest unchanged" \
  || fail "nan-grad-existing: --out changed"

# --- a failed save: temp removed, latest and earlier saves unchanged, error ---
run save-fail nz "error: saving checkpoint .*/sf/step-00000004 failed: writing model.bin: No space left on device; the partial save was removed" \
  env TRIDENT_FAULT=save-fail:4 "$T" train "${A[@]}" --out "$tmp/sf" && check_stopped save-fail "$tmp/sf" 2
cp -a "$tmp/ref" "$tmp/keep2"; before=$(snap "$tmp/keep2")
run save-fail-end nz "error: saving checkpoint .*/keep2/step-00000008 failed" \
  env TRIDENT_FAULT=save-fail:8 "$T" train "${A[@]}" --save-every 0 --out "$tmp/keep2"
[ "$(snap "$tmp/keep2")" = "$before" ] && echo "ok   save-fail-end: --out byte-identical, latest unchanged" \
  || fail "save-fail-end: --out changed"
run bad-fault 2 "error: TRIDENT_FAULT=nan-grad:x is not|error: TRIDENT_FAULT=nan-grad:x: the step" \
  env TRIDENT_FAULT=nan-grad:x "$T" train "${A[@]}" --out "$tmp/bf"

# --- loading validates everything, naming file and field ---------------------
# bad NAME REGEX EDIT: copy step-00000008, apply the python edit to
# m (model.bin bytes) / c (config.json text), expect one error line
good="$tmp/ref/step-00000008"
bad() {
  local name=$1 re=$2 edit=$3 d="$tmp/bad-$1"
  cp -r "$good" "$d"
  $PY - "$d" <<PYEOF
import struct, sys
d = sys.argv[1]
m = bytearray(open(d + "/model.bin", "rb").read()); c = open(d + "/config.json").read()
V = struct.unpack_from("<i", m, 8 + 4 * 5)[0]
P = 64 + 4 * V   # first parameter (char tokenizer)
$edit
open(d + "/model.bin", "wb").write(m); open(d + "/config.json", "w").write(c)
PYEOF
  run "load-$name" 2 "$re" "$T" sample --ckpt "$d" --tokens 5
  local n; n=$("$T" sample --ckpt "$d" --tokens 5 2>&1 | grep -c 'trident: error')
  [ "$n" = 1 ] || fail "load-$name: $n error lines (want one)"
}
bad truncated   "error: .*/model.bin: field params: .* \(truncated\)"          'del m[-4:]'
bad trailing    "error: .*/model.bin: end of file: 1 trailing bytes"           'm += b"\0"'
bad magic       "error: .*/model.bin: field magic: .*not a trident checkpoint" 'm[0:8] = b"GPT2CKPT"'
bad version     "error: .*/model.bin: field version: 1; this build reads version 2" 'struct.pack_into("<i", m, 8, 1)'
bad tokenizer   "error: .*/model.bin: field tokenizer: 7, valid is 0 \(char\), 1 \(byte\), 2 \(ids\) or 3 \(gpt2\)" 'struct.pack_into("<i", m, 8 + 4 * 8, 7)'
bad vocab-order "error: .*/model.bin: field vocabulary: entry 1 .* strictly increasing" 'struct.pack_into("<I", m, 68, 0)'
bad nan-weight  "error: .*/model.bin: field params: element 3 of [0-9]+ is nan" 'struct.pack_into("<f", m, P + 12, float("nan"))'
bad inf-moment  "error: .*/model.bin: field adam_v: element 0 of [0-9]+ is inf" \
  'n = struct.unpack_from("<Q", m, 56)[0]; struct.pack_into("<f", m, P + 8 * n, float("inf"))'
bad negative-v  "error: .*/model.bin: field adam_v: element 2 of [0-9]+ is -1; second moments are >= 0" \
  'n = struct.unpack_from("<Q", m, 56)[0]; struct.pack_into("<f", m, P + 8 * n + 8, -1.0)'
bad huge-sizes  "error: .*/model.bin: field params: .* overflows 64 bits" \
  'struct.pack_into("<i", m, 8 + 4 * 3, 2147483632); struct.pack_into("<i", m, 8 + 4 * 2, 16)'
bad config-layers  "error: .*/config.json: field layers: 2, but model.bin says 1" 'c = c.replace("\"layers\": 1", "\"layers\": 2")'
bad config-dup     "error: .*/config.json: byte [0-9]+: key \"seq\" appears twice" 'c = c.replace("{", "{\"seq\": 16, ", 1)'
bad config-missing "error: .*/config.json: field has_optimizer: missing" 'c = c.replace(", \"has_optimizer\": true", "")'
bad config-garbage "error: .*/config.json: byte [0-9]+: unexpected bytes after the object" 'c = c + "x"'
bad config-cut     "error: .*/config.json: field has_optimizer: byte [0-9]+: expected a string, an integer, true or false" 'c = c[:-4]'
bad config-type    "error: .*/config.json: field step: must be an integer" 'c = c.replace("\"step\": 8", "\"step\": \"8\"")'

# --- two ranks, ZeRO-3: --out and --sample-tokens, the save within plan + one unit
run zero3-save 0 "checkpoint: .*/z3/step-00000008 .*one unit" \
  $MPIRUN -np 2 "$T" train "${A[@]}" --zero 3 --out "$tmp/z3" --sample-tokens 20
run zero3-sample 0 "." "$T" sample --ckpt "$tmp/z3" --tokens 20

if [ $fails -ne 0 ]; then echo "test_checkpoints: $fails failure(s)"; exit 1; fi
echo "test_checkpoints: all passed"
