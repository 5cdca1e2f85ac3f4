#!/usr/bin/env bash
# Checkpoints never lose good work: the step-directory layout (manifest.json
# + one safetensors shard per writing rank) with its atomic `latest` and
# --keep, a run stopped by a non-finite loss or gradient (every dp mode), by a
# failed save or by a rank killed half-way through its shard leaves every
# earlier checkpoint byte-identical and loadable, sampling reads DIR or a step
# directory, and every malformed checkpoint (or one of another model) is one
# error line naming the file and what is wrong, with nothing overwritten.
# Usage: test_checkpoints.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_checkpoints.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
# A single-process run starts no Open MPI daemon (as in test_config.sh): it
# has no peers to reach, and the daemon's start was half of its time (CI budget).
export OMPI_MCA_ess_singleton_isolated=1
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --steps 8
   --eval-every 0 --threads 1 --save-every 2)

# snapshot DIR: every file's checksum and every link's target, sorted
snap() { (cd "$1" && find . -type f -exec sha256sum {} + | sort -k2; find . -type l -printf '%p -> %l\n' | sort); }

# run NAME WANT_RC REGEX CMD...: exit status WANT_RC (or any non-zero for "nz"),
# output matches REGEX, no signal death; the output stays in $run_out
run() {
  local name=$1 want=$2 re=$3; shift 3
  local rc
  run_out=$(timeout 120 "$@" 2>&1 </dev/null); rc=$?
  if [ "$want" = nz ] && { [ $rc -eq 0 ] || [ $rc -ge 124 ]; }; then
    fail "$name: exit code $rc (want a clean non-zero exit)"; echo "$run_out" | tail -5; return 1
  elif [ "$want" != nz ] && [ $rc -ne "$want" ]; then
    fail "$name: exit code $rc (want $want)"; echo "$run_out" | tail -5; return 1
  fi
  if ! grep -qE -e "$re" <<<"$run_out"; then
    fail "$name: output does not match /$re/:"; echo "$run_out" | tail -5; return 1
  fi
  echo "ok   $name: $(grep -m1 -E -e "$re" <<<"$run_out")"
}

# --- the layout -------------------------------------------------------------
run reference 0 "checkpoint: .*/ref/step-00000008" "$T" train "${A[@]}" --out "$tmp/ref"
for s in 2 4 6 8; do [ -f "$tmp/ref/step-0000000$s/manifest.json" ] && [ -f "$tmp/ref/step-0000000$s/shard-00000.safetensors" ] \
  || fail "layout: $tmp/ref/step-0000000$s is missing or incomplete"; done
[ "$(readlink "$tmp/ref/latest")" = step-00000008 ] || fail "layout: latest -> $(readlink "$tmp/ref/latest"), want step-00000008"
# hidden entries: temporary names only (.trident-lock, the --out lock, stays)
hidden() { ls -A "$1" | grep '^\.' | grep -vx '\.trident-lock'; }
hidden "$tmp/ref" >/dev/null && fail "layout: temporary files left in --out: $(hidden "$tmp/ref")"

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
      $PY "$XXH3" same "$dir/step-0000000$s" "$tmp/ref/step-0000000$s" \
        || fail "$name: step-0000000$s differs from the uninterrupted run's"
    elif [ -e "$dir/step-0000000$s" ]; then fail "$name: step-0000000$s was written after the bad step"; fi
  done
  hidden "$dir" >/dev/null && fail "$name: temporary files left: $(hidden "$dir")"
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
for s in 2 4 6 8; do [ -f "$tmp/pss/step-0000000$s/manifest.json" ] || fail "ps-save-every: step-0000000$s missing"; done
run ps-sample 0 "." "$T" sample --ckpt "$tmp/pss/step-00000004" --tokens 10

# A run into an --out holding good work (resumed from its step 6) fails
# before its next save: every byte and link there is as before.
cp -a "$tmp/ref" "$tmp/keep"; before=$(snap "$tmp/keep")
run nan-grad-existing 3 "error: step 7: the gradient norm is nan" \
  env TRIDENT_FAULT=nan-grad:7 "$T" train "${A[@]}" --out "$tmp/keep" --resume "$tmp/keep/step-00000006"
[ "$(snap "$tmp/keep")" = "$before" ] && echo "ok   nan-grad-existing: --out byte-identical, latest unchanged" \
  || fail "nan-grad-existing: --out changed"

# --- a failed save: temp removed, latest and earlier saves unchanged, error ---
run save-fail nz "error: saving checkpoint .*/sf/step-00000004 failed: writing shard-00000.safetensors: No space left on device; the partial save was removed" \
  env TRIDENT_FAULT=save-fail:4 "$T" train "${A[@]}" --out "$tmp/sf" && check_stopped save-fail "$tmp/sf" 2
cp -a "$tmp/ref" "$tmp/keep2"; before=$(snap "$tmp/keep2")
run save-fail-end nz "error: saving checkpoint .*/keep2/step-00000008 failed" \
  env TRIDENT_FAULT=save-fail:8 "$T" train "${A[@]:0:${#A[@]}-2}" --save-every 0 --out "$tmp/keep2" --resume "$tmp/keep2/step-00000006" # A less its --save-every 2
[ "$(snap "$tmp/keep2")" = "$before" ] && echo "ok   save-fail-end: --out byte-identical, latest unchanged" \
  || fail "save-fail-end: --out changed"
run bad-fault 2 "error: TRIDENT_FAULT=nan-grad:x is not|error: TRIDENT_FAULT=nan-grad:x: the step" \
  env TRIDENT_FAULT=nan-grad:x "$T" train "${A[@]}" --out "$tmp/bf"

# --- a rank killed half-way through its shard: the previous checkpoint stays
# latest and loads; the run continues from it
# (mpirun reports the rank's death and exits non-zero: 137 here)
env TRIDENT_FAULT=save-kill:4:1 timeout 120 $MPIRUN -np 2 "$T" train "${A[@]}" --zero 1 --out "$tmp/sk" >"$tmp/sk.out" 2>&1 </dev/null
rc=$?; [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "save-kill: exit code $rc, want the job's failure"
[ "$(readlink "$tmp/sk/latest")" = step-00000002 ] && [ ! -e "$tmp/sk/step-00000004" ] \
  && echo "ok   save-kill: latest -> step-00000002, no step-00000004" \
  || fail "save-kill: latest -> $(readlink "$tmp/sk/latest"), want step-00000002 and no step-00000004"
ls -A "$tmp/sk" | grep -q '^\.step-00000004\.tmp\.' || fail "save-kill: no temporary directory of the killed save"
run save-kill-resume 0 "checkpoint: .*/sk/step-00000008" $MPIRUN -np 2 "$T" train "${A[@]}" --zero 1 --out "$tmp/sk" --resume latest
hidden "$tmp/sk" >/dev/null && fail "save-kill-resume: the killed save's temporary directory is still there"
run keep 0 "." "$T" train "${A[@]}" --out "$tmp/kp" --keep 2
[ "$(cd "$tmp/kp" && echo step-*)" = "step-00000006 step-00000008" ] && echo "ok   keep: step-00000006 step-00000008" \
  || fail "keep 2: $(cd "$tmp/kp" && echo step-*)"

# --- loading validates everything, naming the file and what is wrong --------
# bad NAME REGEX EDIT [seal]: copy a two-rank step directory, apply the python
# edit (s0 / s1: the shards' bytes, mf: manifest.json's text), expect one error
# line. With "seal" every checksum is recomputed after the edit (ckpt_xxh3.py
# reseal), as a forger would, so that the checks behind them are reached.
run two-ranks 0 "." $MPIRUN -np 2 "$T" train "${A[@]}" --tp 2 --out "$tmp/t2"
good="$tmp/t2/step-00000008"
bad() {
  local name=$1 re=$2 edit=$3 seal=${4:-} d="$tmp/bad-$1"
  cp -r "$good" "$d"
  $PY - "$d" <<PYEOF
import json, struct, sys
d = sys.argv[1]
s0 = bytearray(open(d + "/shard-00000.safetensors", "rb").read())
s1 = bytearray(open(d + "/shard-00001.safetensors", "rb").read())
mf = open(d + "/manifest.json").read()
n0 = struct.unpack_from("<Q", s0, 0)[0]; h0 = json.loads(bytes(s0[8:8 + n0]))
def first(sec): # file offset of shard 0's first tensor of a section
    k = min((v["data_offsets"][0], k) for k, v in h0.items() if k.startswith(sec + "/"))[1]
    return 8 + n0 + h0[k]["data_offsets"][0]
$edit
open(d + "/shard-00000.safetensors", "wb").write(s0)
if s1 is not None: open(d + "/shard-00001.safetensors", "wb").write(s1)
open(d + "/manifest.json", "w").write(mf)
PYEOF
  [ "$seal" = seal ] && $PY "$XXH3" reseal "$d"
  run "load-$name" 2 "$re" "$T" sample --ckpt "$d" --tokens 5 || return
  local n; n=$(grep -c 'trident: error' <<<"$run_out")
  [ "$n" = 1 ] || fail "load-$name: $n error lines (want one)"
}
bad truncated     "error: .*/shard-00001.safetensors \(rank 1\): [0-9]+ bytes, but manifest.json records [0-9]+" 'del s1[-4:]'
bad missing-shard "error: .*/shard-00001.safetensors: cannot read this shard of the checkpoint: No such file" \
  'import os; os.remove(d + "/shard-00001.safetensors"); s1 = None'
bad lying-offsets "error: .*/shard-00000.safetensors \(rank 0\): its header hashes to [0-9a-f]+, manifest.json records" \
  'h = bytes(s0[8:8 + n0]).replace(b"\"data_offsets\":[0,", b"\"data_offsets\":[4,", 1).replace(b"\"data_offsets\": [0,", b"\"data_offsets\": [4,", 1); s0[8:8 + n0] = h'
bad lying-offsets-sealed "error: .*/shard-00000.safetensors: .*" \
  'h = bytes(s0[8:8 + n0]).replace(b"\"data_offsets\":[0,", b"\"data_offsets\":[4,", 1).replace(b"\"data_offsets\": [0,", b"\"data_offsets\": [4,", 1); s0[8:8 + n0] = h' seal
bad flipped-weight "error: .*/shard-00000.safetensors \(rank 0\): tensor params/.*: bytes 0\.\.[0-9]+ \(block 1 of 1\) hash to [0-9a-f]+, the shard records [0-9a-f]+: the checkpoint is corrupt" \
  's0[first("params") + 2] ^= 0x01'
bad nan-weight    "error: .*/shard-00000.safetensors: tensor params/.*: element 1 is nan" 'struct.pack_into("<f", s0, first("params") + 4, float("nan"))' seal
bad negative-v    "error: .*/shard-00000.safetensors: tensor adam_v/.*: element 0 is -1; second moments are >= 0" \
  'struct.pack_into("<f", s0, first("adam_v"), -1.0)' seal
bad mf-garbage    "error: .*/manifest.json: byte [0-9]+: " 'mf = mf + "x"'
bad mf-version    "error: .*/manifest.json: field version: 3; this build reads version 5" 'mf = mf.replace("\"version\": 5", "\"version\": 3")'
bad mf-edited     "error: .*/manifest.json: field manifest_xxh3: the text hashes to [0-9a-f]+, the manifest records [0-9a-f]+: manifest.json was edited or is corrupt" \
  'mf = mf.replace("\"seed\": ", "\"seed\": 1", 1)'
bad mf-range      "error: .*/manifest.json: tensor transformer.wpe.weight: piece params/transformer.wpe.weight/2/0/0 ends at 500, beyond tp rank 0's slice of 256 elements" \
  'mf = mf.replace("\"begin\": 0, \"end\": 256", "\"begin\": 0, \"end\": 500", 1)' seal
bad mf-coverage   "error: .*/manifest.json: tensor transformer.wpe.weight \(params\): the pieces hold 0 of its 256 elements" \
  'j = json.loads(mf); t = [t for t in j["tensors"] if t["name"] == "transformer.wpe.weight"][0]; t["pieces"] = [p for p in t["pieces"] if p["section"] != "params"]; mf = json.dumps(j)' seal
bad mf-key        "error: .*/manifest.json: tensor [0-9]+: piece [0-9]+: field key: \"params/nothing/2/0/0\" is not this piece's" \
  'mf = mf.replace("\"key\": \"params/transformer.wpe.weight/2/0/0\"", "\"key\": \"params/nothing/2/0/0\"")' seal
bad shard-key     "error: .*/shard-00000.safetensors: tensor params/transformer.wpe.weight/2/0/0 \(named by manifest.json\) is missing" \
  'h = bytes(s0[8:8 + n0]).replace(b"\"params/transformer.wpe.weight/2/0/0\"", b"\"params/transformer.wpX.weight/2/0/0\"", 1); s0[8:8 + n0] = h' seal
# a checkpoint of another model: one error, --out untouched
cp -a "$tmp/t2" "$tmp/t2keep"; before=$(snap "$tmp/t2keep")
L2=() prev=; for a in "${A[@]}"; do [ "$prev" = --layers ] && a=2; L2+=("$a"); prev=$a; done # A with --layers 2 (not given twice)
run other-model nz "error: --resume .*/t2keep/step-00000008: the checkpoint is of another model: it has --layers 1, this run 2" \
  $MPIRUN -np 2 "$T" train "${L2[@]}" --tp 2 --out "$tmp/t2keep" --resume latest
[ "$(snap "$tmp/t2keep")" = "$before" ] && echo "ok   other-model: --out byte-identical" || fail "other-model: --out changed"

# --- two ranks, ZeRO-3: --out and --sample-tokens
run zero3-save 0 "checkpoint: .*/z3/step-00000008 .*one shard per rank" \
  $MPIRUN -np 2 "$T" train "${A[@]}" --zero 3 --out "$tmp/z3" --sample-tokens 20
run zero3-sample 0 "." "$T" sample --ckpt "$tmp/z3" --tokens 20

if [ $fails -ne 0 ]; then echo "test_checkpoints: $fails failure(s)"; exit 1; fi
echo "test_checkpoints: all passed"
