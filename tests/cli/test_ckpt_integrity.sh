#!/usr/bin/env bash
# Checkpoint integrity: a 2-rank ZeRO-1 checkpoint's recorded checksums are
# recomputed by an independent reader (ckpt_xxh3.py, python3-xxhash); one
# byte flipped in every piece of every shard is found and listed by
# `trident ckpt check`; resume, sample and export refuse a flip in each shard
# and each kind of state (parameters, moments), a shard of another step and
# of another run, swapped piece keys, an edited step or run id and an edited
# manifest, each with one line naming what differs.
# Usage: test_ckpt_integrity.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_ckpt_integrity.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
# A single-process run starts no Open MPI daemon (as in test_config.sh): it
# has no peers to reach, and the daemon's start was half of its time (CI budget).
export OMPI_MCA_ess_singleton_isolated=1
MPIRUN="$MPIRUN -np 2"
M=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --eval-every 0 --threads 1)
A=("${M[@]}" --dp 2 --zero 1 --save-every 2)
timeout 120 $MPIRUN "$T" train "${A[@]}" --steps 4 --out "$tmp/a" >"$tmp/a.out" 2>&1 </dev/null || { cat "$tmp/a.out"; fail "run a"; }
timeout 120 $MPIRUN "$T" train "${A[@]}" --steps 4 --out "$tmp/b" >"$tmp/b.out" 2>&1 </dev/null || { cat "$tmp/b.out"; fail "run b"; }
good="$tmp/a/step-00000004"
[ $fails -eq 0 ] || { echo "test_ckpt_integrity: the runs failed"; exit 1; }

# --- the independent verifier agrees with every recorded checksum, and is
# not vacuous: it fails on a flipped byte
$PY "$XXH3" verify "$good" && echo "ok   independent verifier: every checksum of $good recomputed" \
  || fail "independent verifier: trident's recorded checksums do not recompute"
cp -r "$good" "$tmp/v"; $PY - "$tmp/v/shard-00001.safetensors" <<'PYEOF'
import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[-1] ^= 0x10; open(p, "wb").write(b)
PYEOF
$PY "$XXH3" verify "$tmp/v" >/dev/null && fail "independent verifier: accepted a flipped byte"

# --- one byte flipped in every piece of every shard: ckpt check lists each
cp -r "$good" "$tmp/all"
$PY - "$tmp/all" >"$tmp/all.keys" <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
for f in m["files"]:
    p = d + "/" + f["name"]
    b = bytearray(open(p, "rb").read()); n = struct.unpack_from("<Q", b)[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__")
    for k, v in h.items():
        s, e = v["data_offsets"]
        if e > s:
            b[8 + n + (s + e) // 2] ^= 0x04  # a bit of the middle element
            print(f["name"], k)
    open(p, "wb").write(b)
PYEOF
out=$(timeout 60 "$T" ckpt check "$tmp/all" 2>&1); rc=$?
listed=$(echo "$out" | sed -nE 's|^ckpt check: .*/(shard-[0-9]+\.safetensors) \(rank [0-9]+\): tensor ([^:]+): bytes .*|\1 \2|p' | sort)
want=$(sort "$tmp/all.keys")
if [ $rc -eq 1 ] && [ -n "$want" ] && [ "$listed" = "$want" ] && echo "$out" | grep -q "trident: error: .*: $(echo "$want" | wc -l) of [0-9]* blocks differ"; then
  echo "ok   ckpt check: all $(echo "$want" | wc -l) flipped pieces of both shards listed, exit 1"
else
  fail "ckpt check on every piece flipped: exit $rc, listed $(echo "$listed" | grep -c .) of $(echo "$want" | wc -l)"
  diff <(echo "$want") <(echo "$listed") | head -5
fi
run_ok() { local out; out=$(timeout 60 "$@" 2>&1 </dev/null) || { fail "$* failed: $(echo "$out" | tail -2)"; return 1; }; }
run_ok "$T" ckpt check "$good" && echo "ok   ckpt check: the intact checkpoint passes"

# --- each reader refuses each case with one line naming it
# refused NAME DIR REGEX: ckpt check, resume, sample and export all refuse DIR
refused() {
  local name=$1 d=$2 re=$3 what out rc bad=$fails
  for what in check resume sample export; do
    case $what in
      check)  out=$(timeout 60 "$T" ckpt check "$d" 2>&1 </dev/null) ;;
      resume) out=$(timeout 60 "$T" train "${M[@]}" --steps 6 --resume "$d" --out "$tmp/o-$name-$RANDOM" 2>&1 </dev/null) ;;
      sample) out=$(timeout 60 "$T" sample --ckpt "$d" --tokens 4 2>&1 </dev/null) ;;
      export) out=$(timeout 60 "$T" export --ckpt "$d" --format llmc --out "$tmp/x-$name-$RANDOM.bin" 2>&1 </dev/null) ;;
    esac
    rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: $what exit code $rc (want a refusal)"; continue; fi
    if ! echo "$out" | grep -Eq "$re"; then fail "$name: $what said: $(echo "$out" | grep -m1 error)"; continue; fi
    [ "$(echo "$out" | grep -c 'trident: error')" = 1 ] || fail "$name: $what printed $(echo "$out" | grep -c 'trident: error') error lines"
  done
  [ $fails = $bad ] && echo "ok   $name: check, resume, sample, export refuse: $(echo "$out" | grep -m1 -o 'error: .*' | cut -c1-150)"
}
# case NAME PYTHON_EDIT [seal]: a copy of the good step directory, edited
# (s0, s1: the shards' bytes; mf: the manifest's text; first(s, sec): the file
# offset of the first piece of a section in shard s)
mk() {
  local name=$1 edit=$2 seal=${3:-} d="$tmp/c-$1"
  rm -rf "$d"; cp -r "$good" "$d"
  $PY - "$d" "$tmp" <<PYEOF
import json, struct, sys, shutil
d, tmp = sys.argv[1], sys.argv[2]
s = [bytearray(open(d + "/shard-0000%d.safetensors" % i, "rb").read()) for i in (0, 1)]
s0, s1 = s
mf = open(d + "/manifest.json").read()
def first(b, sec):
    n = struct.unpack_from("<Q", b, 0)[0]; h = json.loads(bytes(b[8:8 + n])); h.pop("__metadata__")
    k = min((v["data_offsets"][0], k) for k, v in h.items() if k.startswith(sec + "/"))[1]
    return 8 + n + h[k]["data_offsets"][0] + 5
$edit
for i, b in enumerate((s0, s1)):
    if b is not None: open(d + "/shard-0000%d.safetensors" % i, "wb").write(b)
open(d + "/manifest.json", "w").write(mf)
PYEOF
  [ "$seal" = seal ] && $PY "$XXH3" reseal "$d"
  echo "$d"
}
for sh in 0 1; do
  for kind in params adam_m; do
    [ $sh = 1 ] && [ $kind = params ] && kind=adam_v  # ZeRO-1: rank 1 holds moments only
    d=$(mk "flip-s$sh-$kind" "s[$sh][first(s[$sh], '$kind')] ^= 0x01")
    refused "flip-s$sh-$kind" "$d" "shard-0000$sh\.safetensors \(rank $sh\): tensor $kind/[^ ]+: bytes .* hash to [0-9a-f]+, the shard records [0-9a-f]+"
  done
done
d=$(mk other-step 's1 = bytearray(open(tmp + "/a/step-00000002/shard-00001.safetensors", "rb").read())')
refused other-step "$d" "shard-00001\.safetensors \(rank 1\): .*(the shard is of step 2, the manifest's step is 4|bytes, but manifest.json records)"
d=$(mk other-step-sealed 's1 = bytearray(open(tmp + "/a/step-00000002/shard-00001.safetensors", "rb").read())' seal)
refused other-step-sealed "$d" "shard-00001\.safetensors \(rank 1\): the shard is of step 2, the manifest's step is 4: a shard of another checkpoint"
d=$(mk other-run 's1 = bytearray(open(tmp + "/b/step-00000004/shard-00001.safetensors", "rb").read())')
refused other-run "$d" "shard-00001\.safetensors \(rank 1\): the shard is of run [0-9a-f]{16}, the manifest's run is [0-9a-f]{16}: a shard of another training run"
# swap the keys of two pieces of different sections (an adam_m piece naming a params key)
SWAP='j = json.loads(mf); t = j["tensors"][0]; p = [x for x in t["pieces"] if x["section"] in ("params", "adam_m")][:2]; p[0]["key"], p[1]["key"] = p[1]["key"], p[0]["key"]; mf = json.dumps(j)'
d=$(mk keys-swapped "$SWAP" seal)
refused keys-swapped "$d" "manifest.json: tensor 0: piece [0-9]+: field key: \"[a-z_]+/transformer.wte.weight/1/0/0\" is not this piece's"
d=$(mk keys-swapped-unsealed "$SWAP")
refused keys-swapped-unsealed "$d" "manifest.json: field manifest_xxh3: the text hashes to"
d=$(mk step-edited 'mf = mf.replace("\"step\": 4, \"lr_step\": 4", "\"step\": 2, \"lr_step\": 2")' seal)
refused step-edited "$d" "shard-0000[01]\.safetensors \(rank [01]\): the shard is of step 4, the manifest's step is 2"
# in a directory named for its step, the name disagrees first
d=$(mk step-renamed 'import os; mf = mf.replace("\"step\": 4, \"lr_step\": 4", "\"step\": 2, \"lr_step\": 2")' seal)
mv "$d" "$tmp/step-00000004"; refused step-renamed "$tmp/step-00000004" "manifest.json: field step: 2, but its directory is step-00000004"
d=$(mk run-edited 'import re; mf = re.sub("\"run\": \"[0-9a-f]{16}\"", "\"run\": \"0123456789abcdef\"", mf)' seal)
refused run-edited "$d" "shard-0000[01]\.safetensors \(rank [01]\): the shard is of run [0-9a-f]{16}, the manifest's run is 0123456789abcdef"
d=$(mk manifest-edited 'mf = mf.replace("\"seed\": 1337", "\"seed\": 1338")')
refused manifest-edited "$d" "manifest.json: field manifest_xxh3: the text hashes to [0-9a-f]+, the manifest records [0-9a-f]+: manifest.json was edited or is corrupt"
d=$(mk header-flip 'n = struct.unpack_from("<Q", s0)[0]; i = bytes(s0).index(b"trident_step"); s0[i + 16] ^= 0x01')
refused header-flip "$d" "shard-00000\.safetensors \(rank 0\): .*(its header hashes to|the shard is of step)"

if [ $fails -ne 0 ]; then echo "test_ckpt_integrity: $fails failure(s)"; exit 1; fi
echo "test_ckpt_integrity: all passed"
