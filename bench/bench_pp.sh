#!/usr/bin/env bash
# Pipeline parallelism on this machine: the measured bubble of every
# schedule against its theory, zb-h1's bubble beside 1F1B's, and the step
# time of --pp-partition auto against uniform on a model whose head is
# expensive (a GPT-2-sized vocabulary). Measured in one run and printed:
#
#   - for pp = 2 (one rank per core) and pp = 4 (4 ranks on 2 cores:
#     oversubscribed, labelled), each schedule (gpipe, 1f1b, interleaved with
#     2 chunks per stage, zb-h1) at M = 2, 4, 8, 16 micro-batches of one
#     sequence each: the step time and the bubble as the trainer measures it,
#     (stage step time - stage compute time) / stage compute time averaged
#     over stages and timed steps (of the fastest of REPS runs), beside
#     the theory it prints: (P-1)/M for
#     gpipe and 1f1b, (P-1)/(V M) for interleaved, (P-1)(T_F + T_B - T_W) /
#     (M (T_F + T_B + T_W)) for zb-h1 with the measured T_F, T_B, T_W; and
#     whether |measured - theory| <= 0.05 (the issue's bound for pp 2, 1f1b,
#     M 4-16). interleaved needs M to be a multiple of P (other M: "-").
#   - zb-h1's measured bubble against 1f1b's at the same P and M.
#   - auto against uniform partition: pp 2, M 4, synthetic tokens with a
#     16384-token vocabulary (L8 H4 C128 T64: the head costs about as much as
#     ten blocks, so uniform leaves the last stage the slowest): the split
#     each picks and the step time, best of REPS runs.
#
# The model (default L8 H4 C256 T64, char vocabulary: a cheap head, so
# uniform stages are balanced) runs with threads = CORES / P (at least 1).
# Placement: rank i is pinned to core CORES-1-i (mod CORES) by a rankfile.
# Measured here with the default placement (rank 0 on core 0), the first
# stage computed ~12% slower on core 0 than the same work on core 1 (270 vs
# 240 ms per step at M 16) while the second stage computed alike on either
# core; we did not find why (mpirun's own process shares the cores). An
# imbalance adds to the measured bubble beyond the theory, which assumes
# equal stages, so the table prints it: "imbalance" is the slowest stage's
# compute over the fastest's, minus 1.
# A benchmark never fails on speed or on a mismatch it prints ("NO"); it
# exits non-zero only when something cannot be built or run.
#
# Environment: STEPS (6: step 0 untimed), MS ("2 4 8 16"), PS ("2 4"), MODEL,
# REPS (2), CORES (2), DATA (data/tinyshakespeare.txt), BUILD_DIR (build),
# TRIDENT (a binary to use instead of building).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-6}
MS=${MS:-"2 4 8 16"}
PS=${PS:-"2 4"}
MODEL=${MODEL:-"--layers 8 --heads 4 --embd 256 --seq 64"}
REPS=${REPS:-2}
CORES=${CORES:-2}
DATA=${DATA:-data/tinyshakespeare.txt}
BUILD_DIR=${BUILD_DIR:-build}
if [ -z "${TRIDENT:-}" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j"$CORES" --target trident >/dev/null
  TRIDENT=$BUILD_DIR/trident
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for i in $(seq 0 15); do echo "rank $i=localhost slot=$(( (CORES - 1 - i % CORES + CORES) % CORES ))"; done > "$tmp/rankfile"
MPIRUN="mpirun --allow-run-as-root --oversubscribe -rf $tmp/rankfile"


# run NP FLAGS... -> prints "step_ms measured theory" (or fails loudly)
run() {
  local np=$1; shift
  local out
  out=$($MPIRUN -np "$np" "$TRIDENT" train --data "$DATA" --steps "$STEPS" --eval-every 0 \
        --log-every 100000 "$@" 2>&1) || { echo "$out" | tail -5 >&2; echo "bench_pp: a run failed: $*" >&2; exit 1; }
  local ms bub imb
  ms=$(sed -n 's/^done: [0-9]* steps, \([0-9.]*\) ms\/step.*/\1/p' <<<"$out")
  bub=$(sed -n 's/^pipeline bubble: measured \([0-9.]*\) .*theory \([0-9.]*\).*/\1 \2/p' <<<"$out")
  imb=$(sed -n 's/^  stage [0-9]*: step [0-9.]* ms = compute \([0-9.]*\) .*/\1/p' <<<"$out" |
        awk 'NR == 1 { lo = hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { if (lo > 0) printf "%.3f", hi / lo - 1; else print "nan" }')
  echo "$ms ${bub:-nan nan} ${imb:-nan}"
  grep '^pipeline: ' <<<"$out" > "$tmp/split" || true
}

echo "bench_pp: model $MODEL, micro-batches of 1 sequence, $STEPS steps (step 0 untimed), $(nproc) cores"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
printf '%-4s %-12s %4s | %9s | %9s %9s %7s %-6s | %s\n' P schedule M "step ms" measured theory diff "<=0.05" "imbalance"
declare -A BUB
for P in $PS; do
  th=$(( CORES / P )); [ "$th" -ge 1 ] || th=1
  label=""; [ $((P)) -gt "$CORES" ] && label=" (oversubscribed: $P ranks on $CORES cores)"
  for S in gpipe 1f1b interleaved zb-h1; do
    for M in $MS; do
      extra=""
      if [ "$S" = interleaved ]; then
        if [ $((M % P)) -ne 0 ]; then printf '%-4s %-12s %4s | %9s |\n' "$P" "$S" "$M" "-"; continue; fi
        extra="--virtual-stages 2"
      fi
      best=""
      for r in $(seq "$REPS"); do # the fastest of REPS runs: interference only slows a run down
        res=$(run "$P" $MODEL --pp "$P" --schedule "$S" $extra --micro-batches "$M" --batch "$M" \
                  --threads "$th") || exit 1
        if [ -z "$best" ] || awk -v a="${res%% *}" -v b="${best%% *}" 'BEGIN { exit !(a < b) }'; then best=$res; fi
      done
      read -r ms meas theo imb <<<"$best"
      BUB[$P,$S,$M]=$meas
      ok=$(awk -v a="$meas" -v b="$theo" 'BEGIN { d = a - b; if (d < 0) d = -d; print (d <= 0.05 ? "yes" : "NO") }')
      diff=$(awk -v a="$meas" -v b="$theo" 'BEGIN { printf "%+.3f", a - b }')
      printf '%-4s %-12s %4s | %9s | %9s %9s %7s %-6s | %s%s\n' "$P" "$S" "$M" "$ms" "$meas" "$theo" "$diff" "$ok" "$imb" "$label"
    done
  done
done
echo
echo "zb-h1 against 1f1b (measured bubble):"
for P in $PS; do
  for M in $MS; do
    z=${BUB[$P,zb-h1,$M]:-nan}; o=${BUB[$P,1f1b,$M]:-nan}
    printf '  pp %s M %2s: zb-h1 %s, 1f1b %s: zb-h1 %s\n' "$P" "$M" "$z" "$o" \
      "$(awk -v a="$z" -v b="$o" 'BEGIN { print (a < b ? "lower" : "NOT lower") }')"
  done
done
echo
echo "auto against uniform partition (pp 2, M 4, synthetic tokens, vocabulary 16384, L8 H4 C128 T64, best of $REPS):"
VMODEL="--layers 8 --heads 4 --embd 128 --seq 64 --pp 2 --micro-batches 4 --batch 4 --threads 1"
for part in uniform auto; do
  best=""
  for r in $(seq "$REPS"); do
    res=$(DATA=synthetic:16384 run 2 $VMODEL --pp-partition "$part") || exit 1
    read -r ms _ _ _ <<<"$res"
    best=$(awk -v a="$ms" -v b="${best:-1e30}" 'BEGIN { print (a < b ? a : b) }')
  done
  printf '  %-8s %9s ms/step  blocks %s\n' "$part" "$best" "$(grep -h 'blocks per' "$tmp/split" | sed 's/.*blocks per stage: //')"
  grep -h 'predicted stage times' "$tmp/split" | sed 's/.*embedding/           measured: embedding/' || true
done
