#!/bin/bash
# --optimizer muon through the trainer (issue 42): ZeRO-1 over dp 2 (fp16),
# ZeRO-3 over tp 2 x dp 2 (bf16, a Llama mixture of experts over ep 2), ZeRO-1
# over tp 2 x cp 2 and pp 2 x tp 2 (bf16) pass trident verify
# against its one-process oracle (the update within its tolerance), a resume from
# step 2 (its --optimizer from the checkpoint) and --device guard give
# one process's bits, tp 2 x dp 2 ZeRO-1 on --device guard the cpu device's
# (and resumes in one process); a resume with the other optimizer is refused, Muon differs from
# AdamW, and the layouts not done yet are refused by their rules rows.
# The optimizer's arithmetic: tests/ref/test_muon_vs_torch, tests/unit/test_muon.
set -u
T=${1:?trident}; DATA=${2:?data dir}
HERE="$(dirname "${BASH_SOURCE[0]}")"
PY=/usr/bin/python3
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 60000 "$DATA/tinyshakespeare.txt" > "$tmp/s.txt"
A=(--data "$tmp/s.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 4 --warmup 0
   --eval-every 0 --log-every 1 --lr-schedule constant --threads 1)
M=("${A[@]}" --optimizer muon)
# run NAME CMD...: a training run into $tmp/NAME, exported to $tmp/eNAME/m.st
run() {
  local name=$1; shift
  "$@" --out "$tmp/$name" > "$tmp/$name.log" 2>&1 || { fail "$name: exit $?"; cat "$tmp/$name.log"; return; }
  mkdir -p "$tmp/e$name"
  "$T" export --ckpt "$tmp/$name" --format safetensors --out "$tmp/e$name/m.st" > /dev/null ||
    fail "$name: export"
}
run one "$T" train "${M[@]}" --log "$tmp/one.jsonl"
run guard "$T" train "${M[@]}" --device guard
run adamw "$T" train "${A[@]}"
"$T" train "${M[@]}" --out "$tmp/res" --stop-after 2 > "$tmp/res0.log" 2>&1 || fail "resume: first half"
# the resume takes --optimizer muon and its settings from the checkpoint
run res "$T" train "${A[@]}" --resume latest
cmp -s "$tmp/eone/m.st" "$tmp/eguard/m.st" && echo "ok guard: bitwise" || fail "guard: not one process's bits"
cmp -s "$tmp/eone/m.st" "$tmp/eres/m.st" && echo "ok resume: bitwise" || fail "resume: not one process's bits"
# layouts against the one-process oracle of trident verify (its Muon step
# too). ZeRO-1 with clipping in fp16 (Newton-Schulz in fp32; each matrix
# gathered to its owner, orthogonalized there, scattered back), within the
# Muon tolerance of verify_tol.c; tp 2 x dp 2 ZeRO-3 without clipping, whose
# update is then one process's bits (largest difference 0), in bf16 (the
# speedrun's bf16 iterations) on a Llama mixture of experts over ep 2: each
# tp block's ZeRO shards gathered, then the blocks over tp (the chained
# gather of muon_shard.c), and each expert's gate, up and down a matrix of
# its own, whole on every tp rank (gathered over edp, never chained);
# tp 2 x cp 2 ZeRO-1 (GPT-2: c_attn's q, k, v gathered as matrices of their
# own, c_proj's column blocks; chained over the dp x cp shard group) and
# pp 2 x tp 2 (Llama: q, k, v, o, gate, up, down; tp alone; bf16, within the
# bf16 iterations' tolerance), with clipping.
# verify_layout NAME WANT NP FLAGS...: passes, and its update line says WANT
verify_layout() {
  local name=$1 want=$2 np=$3; shift 3
  $MPIRUN -np "$np" "$T" verify "${M[@]}" "$@" > "$tmp/v$name.log" 2>&1 &&
    grep -q "verify: the update matches.*$want" "$tmp/v$name.log" &&
    echo "ok $name: $(grep 'update matches' "$tmp/v$name.log")" || { fail "verify $name"; cat "$tmp/v$name.log"; }
}
verify_layout dp2-zero1 "" 2 --dp 2 --zero 1 --precision fp16
verify_layout tp2-dp2-ep2-zero3-noclip "largest difference 0 of" 4 --tp 2 --dp 2 --zero 3 --clip 0 \
  --precision bf16 --arch llama --moe-experts 4 --ep 2
verify_layout tp2-cp2-zero1 "" 4 --tp 2 --cp 2 --zero 1
verify_layout pp2-tp2-llama "" 4 --pp 2 --tp 2 --arch llama --precision bf16
# the precision's Newton-Schulz (the report's optimizer line): bf16 in bf16 runs, fp32 in fp16 runs
for nw in "pp2-tp2-llama bf16" "tp2-dp2-ep2-zero3-noclip bf16" "dp2-zero1 fp32"; do
  set -- $nw
  grep -q "Muon (Newton-Schulz in $2)" "$tmp/v$1.log" && echo "ok $1: Newton-Schulz in $2" || fail "$1: not Newton-Schulz in $2"
done
# the report's Muon exchange: the bytes the comm layer counted are the formula's
for name in dp2-zero1 tp2-dp2-ep2-zero3-noclip tp2-cp2-zero1 pp2-tp2-llama; do
  line=$(grep "muon exchange per step" "$tmp/v$name.log")
  [[ "$line" =~ ([0-9]+)\ bytes\ sent\ \(formula\ ([0-9]+)\) ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
    [ "${BASH_REMATCH[1]}" -gt 0 ] && echo "ok $name: $line" || fail "$name: muon traffic line: '$line'"
done
# the memory plan holds Muon's gather buffers: each rank's optimizer bytes
# planned equal those measured (the moments and the step's buffers)
for name in dp2-zero1 tp2-dp2-ep2-zero3-noclip tp2-cp2-zero1 pp2-tp2-llama; do
  $PY - "$tmp/v$name.log" <<'PYEOF' && echo "ok $name: optimizer memory as planned" || fail "$name: optimizer memory not as planned"
import re, sys
table = open(sys.argv[1]).read().split("planned vs measured peak after step 1")[1].split("\ndone:")[0]
pair = r"([\d.]+ \w*B)/([\d.]+ \w*B)"
cells = [re.findall(pair, l)[2] for l in table.splitlines() if re.match(r"^\s+\d+\s", l)]  # params, grads, optimizer
print("  optimizer planned/measured per rank: " + ", ".join("/".join(c) for c in cells))
sys.exit(0 if cells and all(a == b for a, b in cells) else 1)
PYEOF
done
# reshard: saved under tp 2 x dp 2 ZeRO-1 (the momentum m in ZeRO shards of
# tp blocks), resumed in one process: the resumed steps' losses within 1e-5
# relative of the uninterrupted run's, as test_resume.sh's matrix allows
# AdamW (measured 0). The same two steps on --device guard, the chained
# gather's messages staged through the comm layer's pool in pieces of
# --piece-mb (1 KiB: several per message, 4 in flight), give the cpu
# device's bits.
Z=(--tp 2 --dp 2 --zero 1 --piece-mb 0.001 --stop-after 2)
$MPIRUN -np 4 "$T" train "${M[@]}" "${Z[@]}" --out "$tmp/rz" > "$tmp/rz0.log" 2>&1 || fail "reshard: first half"
run gz $MPIRUN -np 4 "$T" train "${M[@]}" "${Z[@]}" --device guard
mkdir -p "$tmp/erz" && "$T" export --ckpt "$tmp/rz" --format safetensors --out "$tmp/erz/m.st" > /dev/null
cmp -s "$tmp/erz/m.st" "$tmp/egz/m.st" && echo "ok guard tp2 dp2 zero1: the cpu device's bits" ||
  fail "guard tp2 dp2 zero1: not the cpu device's bits"
"$T" train "${M[@]}" --out "$tmp/rz" --resume latest --log "$tmp/rz.jsonl" > "$tmp/rz.log" 2>&1 || fail "reshard: resume"
$PY - "$tmp/one.jsonl" "$tmp/rz.jsonl" <<'PYEOF' || fail "reshard tp2 dp2 zero1 -> one process"
import json, sys
def losses(f): return {j["step"]: j["loss"] for j in map(json.loads, open(f)) if "loss" in j}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in (2, 3))
print("ok reshard tp2 dp2 zero1 -> 1: steps 2, 3 within %.3g relative" % worst if worst <= 1e-5 else "worst %.3g" % worst)
sys.exit(0 if worst <= 1e-5 else 1)
PYEOF
d=$($PY "$HERE/st_maxdiff.py" "$tmp/eone/m.st" "$tmp/eadamw/m.st" | awk '{print $2}')
$PY -c "import sys; sys.exit(0 if float('$d') > 1e-3 else 1)" && echo "ok muon moves off adamw: $d" ||
  fail "muon: maxdiff $d from adamw, not muon's step"
# refusals (rules row muon-layout) and the choice's parse
refuse() {
  local want=$1; shift
  local out; out=$("$@" 2>&1) && fail "accepted: $*"
  grep -q -- "$want" <<< "$out" && echo "ok refused: $want" || { fail "wanted '$want', got: $out"; }
}
refuse "does not combine with a --dp-mode other than allreduce" "$T" train "${M[@]}" --dp 2 --dp-mode reduce-broadcast
refuse "the checkpoint was trained with --optimizer muon" "$T" train "${A[@]}" --optimizer adamw --resume "$tmp/res/step-00000002" --out "$tmp/res2"
refuse "--optimizer 'sgd' is not an optimizer; valid: adamw, muon" "$T" train "${A[@]}" --optimizer sgd
echo "test_muon: $fails failures"
[ "$fails" -eq 0 ]
