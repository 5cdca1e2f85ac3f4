#!/usr/bin/env bash
# --max-loss and the rising-loss warning (src/run/divergence.c). The
# oracle is the run's own --log: python finds the first step that ends 20
# consecutive losses above X, and the run must stop exactly there (exit 3,
# one error line, a checkpoint `ckpt check` passes and latest names), on
# one rank and on two (dp 2, tp 2, pp 2: every rank stops at the same step).
# A learning run whose loss crosses X now and then but never 20 steps in a
# row must not stop, and must print no warning.
set -u
T=${1:?usage: test_max_loss.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
source "$(dirname "$0")/ckpt_lib.sh"
A="--data $tmp/small.txt --heads 2 --embd 16 --seq 16 --batch 4 --steps 60 --eval-every 0 --log-every 100 --threads 1"
# first_stop LOG X: the step at which 20 losses in a row above X end (-1: none)
first_stop() {
  $PY - "$1" "$2" <<'PY'
import json, sys
L = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith('{"step"')]
x, run = float(sys.argv[2]), 0
for i, v in enumerate(L):
    run = run + 1 if v > x else 0
    if run == 20: print(i); break
else: print(-1)
PY
}
# [L=LAYERS] [X=TRAIN_FLAGS] diverge NAME LAUNCH...: --lr 10 --clip 0 climbs into the
# hundreds; stops at --max-loss 50
diverge() {
  local name=$1; shift
  local d=$tmp/$name out rc want errs
  # stderr alone: under mpirun it would interleave with stdout mid-line
  timeout 60 "$@" $T train $A --layers ${L:-1} ${X:-} --lr 10 --clip 0 --warmup 0 --max-loss 50 --out "$d" --log "$tmp/$name.jsonl" >/dev/null 2>"$tmp/$name.err" </dev/null; rc=$?
  out=$(cat "$tmp/$name.err")
  want=$(first_stop "$tmp/$name.jsonl" 50)
  errs=$(grep -c '^trident: error:' <<<"$out")
  if [ "$rc" -ne 3 ] || [ "$errs" -ne 1 ] || [ "$want" -lt 0 ] ||
     ! grep -qE "^trident: error: step $want: the loss [0-9.e+]+ stayed above --max-loss 50 for 20 steps in a row \(steps $((want-19))\.\.$want\); the run stopped with the checkpoint .*/step-$(printf %08d $((want+1)))" <<<"$out"; then
    fail "$name: exit $rc (want 3), $errs error lines, the log says stop at step $want:"; tail -3 <<<"$out"; return
  fi
  [ "$(grep -c '^{"step"' "$tmp/$name.jsonl")" -eq $((want+1)) ] || { fail "$name: steps ran after the stop"; return; }
  grep -qE "^trident: warning: step 1: the loss [0-9.e+]+ is above twice the first step's 4\.0[0-9]* after warm-up" <<<"$out" ||
    { fail "$name: no warning line at step 1"; grep warning <<<"$out"; return; }
  [ "$(readlink "$d/latest" || cat "$d/latest")" = "step-$(printf %08d $((want+1)))" ] || { fail "$name: latest is not the stop's checkpoint"; return; }
  "$T" ckpt check "$d" >/dev/null 2>&1 || { fail "$name: ckpt check refuses the stop's checkpoint"; return; }
  echo "ok   $name: stopped at step $want (exit 3) with a checkpoint; $(grep -m1 warning <<<"$out" | cut -c1-60)..."
}
diverge one-rank
X="--dp 2" diverge dp2 $MPIRUN -np 2
X="--tp 2" diverge tp2 $MPIRUN -np 2
L=2 X="--pp 2 --micro-batches 2" diverge pp2 $MPIRUN -np 2
# a learning run (lr 3e-2): above 3.3 at times, never 20 steps in a row
out=$(timeout 60 $T train $A --layers 1 --lr 3e-2 --warmup 5 --max-loss 3.3 --log "$tmp/learn.jsonl" 2>&1 >/dev/null </dev/null); rc=$?
above=$($PY -c "import json,sys; print(sum(json.loads(l)['loss'] > 3.3 for l in open(sys.argv[1]) if l.startswith('{\"step\"')))" "$tmp/learn.jsonl")
if [ $rc -ne 0 ] || [ "$(first_stop "$tmp/learn.jsonl" 3.3)" != -1 ] || [ "$above" -lt 20 ] || grep -q 'trident: \(warning\|error\)' <<<"$out"; then
  fail "learning run: exit $rc, $above steps above 3.3:"; tail -3 <<<"$out"
else echo "ok   learning run: $above of 60 steps above --max-loss 3.3, never 20 in a row: no stop, no warning"; fi
[ $fails -eq 0 ] && echo "max-loss: all passed"
exit $fails
