#!/usr/bin/env bash
# The rules table's accepted combinations, pairwise: pairwise_set prints a
# set of at most 40 layouts of at most 4 ranks that holds every pair of
# layout choices an accepted run can hold (its header says how it is
# chosen); each trains 5 steps through the real trainer against one process
# (test_layouts: losses and gradient norms 1e-5 relative, final state 1e-4
# of each tensor's max, memory against the plan).
#   test_pairwise.sh PAIRWISE_SET TEST_LAYOUTS MPIRUN...
set -u
SET=${1:?usage: test_pairwise.sh PAIRWISE_SET TEST_LAYOUTS MPIRUN...}
RUN=${2:?}
shift 2
# 4 layers: the interleaved schedule's 2 chunks on each of 2 stages; 2 heads
# for tp 2; batch 8 for dp 4 x 2 micro-batches
SEQ=16 EMBD=32
MODEL=(--layers 4 --heads 2 --embd $EMBD --seq $SEQ --batch 8 --steps 5 --threads 1)
runs=$("$SET" $SEQ $EMBD) || { echo "FAIL: pairwise_set"; exit 1; }
n=0 fails=0 t0=$SECONDS
while read -r np flags; do
  n=$((n + 1))
  s=$SECONDS
  # shellcheck disable=SC2086 # flags are words
  if out=$("$@" -np "$np" "$RUN" $flags "${MODEL[@]}" 2>&1 </dev/null); then
    echo "ok   $n  np $np $flags ($((SECONDS - s)) s)"
  else
    fails=$((fails + 1))
    echo "FAIL $n  np $np $flags"
    echo "$out" | grep -E "FAIL|error" | head -8 | sed 's/^/     /'
  fi
done <<<"$runs"
echo "pairwise: $((n - fails)) passed, $fails failed of $n layouts in $((SECONDS - t0)) s"
[ "$fails" = 0 ] && [ "$n" -gt 0 ]
