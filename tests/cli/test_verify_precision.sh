#!/usr/bin/env bash
# `trident verify --precision bf16|fp16`: every correct layout passes under
# the 16-bit tolerances (derived in src/train/verify_tol.c from the type's unit
# roundoff), and the broken reduction (TRIDENT_FAULT=skip-embed-sum) still
# fails in both, naming the tensor, with its error clearly above the
# tolerance (10x or more: a detector, not a coin toss). fp16 also: a step
# that dynamic loss scaling skips (an injected inf gradient) and runs again
# is compared on its clean attempt. Prints each run's margins (its largest
# errors as fractions of the tolerances).
# Usage: test_verify_precision.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_verify_precision.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
# 4 layers: pp 2 interleaved needs pp x chunks to divide them
M="--data $DATA/tinyshakespeare.txt --layers 4 --heads 2 --embd 32 --seq 16 --batch 4 --steps 2 --threads 1"
fails=0
margins() { sed -nE 's/.*largest gradient error ([0-9.e+-]+) and loss difference ([0-9.e+-]+) of their tolerances.*/gradient \1, loss \2 of the tolerances/p' <<<"$1"; }
pass() { # NAME NP FLAGS...: exit 0 and "verify: passed"
  local name=$1 np=$2; shift 2
  local out; out=$(timeout 120 $MPIRUN -np "$np" "$T" verify $M "$@" 2>&1 </dev/null); local rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^verify: passed' <<<"$out"; then
    echo "FAIL $name: rc $rc"; grep '^verify\|error' <<<"$out" | tail -5; fails=$((fails+1)); return
  fi
  echo "ok   $name: $(margins "$out")"
}
broken() { # PREC: the fault fails, names wte, and its error is >= 10x the tolerance
  local p=$1
  local out; out=$(TRIDENT_FAULT=skip-embed-sum:1 timeout 120 $MPIRUN -np 4 "$T" verify $M --pp 2 --dp 2 \
                   --micro-batches 2 --precision "$p" 2>&1 </dev/null); local rc=$?
  local want='first gradient mismatch at step 1 in transformer.wte.weight on rank [0-3] \(dp [01], pp [01], tp 0\)'
  local ratio; ratio=$(sed -nE 's/.*largest gradient error ([0-9.e+-]+) and loss.*/\1/p' <<<"$out")
  if [ $rc -eq 0 ] || ! grep -qE "$want" <<<"$out" || ! grep -q '^verify: FAILED' <<<"$out" ||
     ! python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= 10)" "${ratio:-0}"; then
    echo "FAIL broken reduction $p: rc $rc, want non-zero, /$want/ and a gradient error >= 10x the tolerance"
    grep '^verify\|error' <<<"$out" | tail -5; fails=$((fails+1))
  else
    echo "ok   broken reduction $p: $(grep -oE 'in transformer.wte.weight on rank [0-9]' <<<"$out"), $(margins "$out")"
  fi
}
for p in bf16 fp16; do
  pass "$p dp2"                2 --dp 2 --precision $p
  pass "$p tp2 sp"             2 --tp 2 --sequence-parallel --precision $p
  pass "$p pp2 interleaved"    2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2 --precision $p
  pass "$p tp2 pp2"            4 --tp 2 --pp 2 --micro-batches 2 --precision $p
  broken $p
done
TRIDENT_FAULT=grad-inf:1 pass "fp16 dp2 zero1, step 1 skipped and rerun" 2 --dp 2 --zero 1 --precision fp16
[ $fails -eq 0 ] && echo "verify precision: all passed" || echo "verify precision: $fails failed"
exit $((fails > 0))
