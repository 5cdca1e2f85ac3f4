#!/usr/bin/env bash
# `trident verify`: passes on correct layouts (pipeline, 3D, context
# parallelism, parameter servers), and fails, naming the tensor and the rank, on a layout whose
# reduction is broken on purpose (TRIDENT_FAULT=skip-embed-sum: the tied
# embedding's gradient is not summed between the first and the last stage at
# step 1).
set -u
T=${1:?usage: test_verify.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
M="--data $DATA/tinyshakespeare.txt --layers 4 --heads 4 --embd 64 --seq 32 --batch 12 --steps 4 --threads 1"
fails=0
pass() { # NAME NP FLAGS...: exit 0 and "verify: passed"
  local name=$1 np=$2; shift 2
  local out; out=$(timeout 300 $MPIRUN -np "$np" "$T" verify $M "$@" 2>&1 </dev/null); local rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^verify: passed' <<<"$out"; then
    echo "FAIL $name: rc $rc"; grep '^verify\|error' <<<"$out" | tail -5; fails=$((fails+1)); return
  fi
  echo "ok   $name: $(grep '^verify: passed' <<<"$out")"
}
pass pp2_1f1b      2 --pp 2 --micro-batches 2
pass pp2_zbh1_tp2  4 --pp 2 --tp 2 --sequence-parallel --schedule zb-h1 --micro-batches 4
pass 3d_zero1      8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2
pass tp2_dp2_zero3 4 --tp 2 --dp 2 --zero 3
# context parallelism: every gradient summed over dp x cp, ZeRO sharded there
pass cp2_dp2_zero1 4 --cp 2 --dp 2 --zero 1
# a parameter server runs no steps of its own; its exit code is still the verdict
pass ps_1server    3 --dp-mode ps --ps-servers 1

out=$(TRIDENT_FAULT=skip-embed-sum:1 timeout 300 $MPIRUN -np 4 "$T" verify $M --pp 2 --dp 2 --micro-batches 2 2>&1 </dev/null); rc=$?
want='first gradient mismatch at step 1 in transformer.wte.weight on rank [0-3] \(dp [01], pp [01], tp 0\)'
if [ $rc -eq 0 ] || ! grep -qE "$want" <<<"$out" || ! grep -q '^verify: FAILED' <<<"$out"; then
  echo "FAIL broken reduction: rc $rc, want non-zero and /$want/"; grep '^verify\|error' <<<"$out" | tail -5
  fails=$((fails+1))
else
  echo "ok   broken reduction: $(grep -E "$want" <<<"$out")"
fi
[ $fails -eq 0 ] && echo "verify: all passed" || echo "verify: $fails failed"
exit $((fails > 0))
