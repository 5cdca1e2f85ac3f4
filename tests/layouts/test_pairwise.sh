#!/usr/bin/env bash
# The rules table's accepted combinations, pairwise: pairwise_set prints a
# set of at most 40 layouts of at most 4 ranks that holds every pair of
# layout choices an accepted run can hold (its header says how it is
# chosen); each trains 5 steps through the real trainer against one process
# (test_layouts: losses and gradient norms 1e-5 relative, final state 1e-4
# of each tensor's max, memory against the plan).
#   test_pairwise.sh PAIRWISE_SET TEST_LAYOUTS MPIRUN...
# PAIRWISE_DEVICE=guard runs each layout under --device guard as well: the
# guard run against one process as above, and its losses, norms and final
# state, and its in-process oracle's, bit for bit against the same layout on
# --device cpu (test_layouts' TD_LAYOUT_DUMP). PAIRWISE_STRIDE=K keeps every
# K-th layout, PAIRWISE_STEPS=S trains S steps instead of 5 (CI time), and
# PAIRWISE_LAYOUTS=FILE runs FILE's "np flags" lines instead of the set
# (flags the model's do not name).
set -u
SET=${1:?usage: test_pairwise.sh PAIRWISE_SET TEST_LAYOUTS MPIRUN...}
RUN=${2:?}
shift 2
# 4 layers: the interleaved schedule's 2 chunks on each of 2 stages; 2 heads
# for tp 2; batch 8 for dp 4 x 2 micro-batches
SEQ=16 EMBD=32
MODEL=(--layers 4 --heads 2 --embd $EMBD --seq $SEQ --batch 8 --steps "${PAIRWISE_STEPS:-5}" --threads 1)
if [ -n "${PAIRWISE_LAYOUTS:-}" ]; then # a list of "np flags" lines instead of the set
  runs=$(grep -vE '^(#|$)' "$PAIRWISE_LAYOUTS") || { echo "FAIL: no layouts in $PAIRWISE_LAYOUTS"; exit 1; }
else
  runs=$("$SET" $SEQ $EMBD) || { echo "FAIL: pairwise_set"; exit 1; }
fi
DEVICE=${PAIRWISE_DEVICE:-cpu} STRIDE=${PAIRWISE_STRIDE:-1}
TMP=$(mktemp -d) && trap 'rm -rf "$TMP"' EXIT
# One layout: on the device against one process; on a device other than cpu
# also on cpu, and the two runs' bits equal.
run_one() {
  local np=$1 flags=$2
  # shellcheck disable=SC2086 # flags are words
  TD_LAYOUT_DUMP=$TMP/dev.bin "${MPI[@]}" -np "$np" "$RUN" "${MODEL[@]}" $flags --device "$DEVICE" 2>&1 </dev/null ||
    return 1
  [ "$DEVICE" = cpu ] && return 0
  # shellcheck disable=SC2086
  TD_LAYOUT_DUMP=$TMP/cpu.bin "${MPI[@]}" -np "$np" "$RUN" "${MODEL[@]}" $flags --device cpu 2>&1 </dev/null ||
    return 1
  cmp "$TMP/cpu.bin" "$TMP/dev.bin" 2>&1 || { echo "FAIL --device $DEVICE: bits differ from --device cpu"; return 1; }
}
MPI=("$@")
n=0 k=0 fails=0 t0=$SECONDS
while read -r np flags; do
  k=$((k + 1))
  [ $(((k - 1) % STRIDE)) = 0 ] || continue
  n=$((n + 1))
  s=$SECONDS
  rm -f "$TMP"/*.bin
  if out=$(run_one "$np" "$flags"); then
    echo "ok   $k  np $np $flags ($((SECONDS - s)) s)"
  else
    fails=$((fails + 1))
    echo "FAIL $k  np $np $flags (--device $DEVICE)"
    echo "$out" | grep -E "FAIL|error|differ" | head -8 | sed 's/^/     /'
  fi
done <<<"$runs"
echo "pairwise (--device $DEVICE, every $STRIDE. layout): $((n - fails)) passed, $fails failed of $n layouts in $((SECONDS - t0)) s"
[ "$fails" = 0 ] && [ "$n" -gt 0 ]
