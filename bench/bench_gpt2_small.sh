#!/usr/bin/env bash
# GPT-2-small shape in bf16 (issue 25, acceptance 3): `trident train
# --precision bf16` at 2 threads against PyTorch's bf16 autocast
# (bench/torch_gpt.py) at 1 and 2 threads, on L12 H12 C768 T1024, batch 1,
# char vocabulary (tinyshakespeare; torch on random tokens of the same
# vocabulary: the step's work does not depend on the values). Prints each
# run's ms/step and tokens/s, then trident / best PyTorch with PASS (>= 1.3x)
# or BELOW. Runs are interleaved REPS times and the best of each side kept
# (interference only slows a run down). Never fails on speed; exits non-zero
# only when something cannot be built or run. About 1 minute per repetition.
#
# Environment: REPS (1), STEPS (4: trident step 0 untimed; torch 1 warm-up
# + 3 timed), PYTHON (/usr/bin/python3), BUILD_DIR (build), TRIDENT (a
# binary to use instead of building BUILD_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPS=${REPS:-1}
STEPS=${STEPS:-4}
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD_DIR=${BUILD_DIR:-build}
SHAPE=(--layers 12 --heads 12 --embd 768 --seq 1024 --batch 1)
TARGET=1.3
die() { echo "bench_gpt2_small: error: $*" >&2; exit 1; }
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 2 ]] || die "STEPS='$STEPS' must be >= 2"
[[ -x "$PYTHON" ]] || die "PYTHON='$PYTHON' is not executable"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "${TRIDENT:-}" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$tmp/build.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j2 --target trident >>"$tmp/build.log" 2>&1 ||
    { tail -n 30 "$tmp/build.log" >&2; die "build failed"; }
  TRIDENT=$BUILD_DIR/trident
fi
echo "== bench_gpt2_small: ${SHAPE[*]}, bf16, best of $REPS; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
best_tr=0 best_to=0
for rep in $(seq "$REPS"); do
  "$TRIDENT" train --data data/tinyshakespeare.txt --tokenizer char "${SHAPE[@]}" --steps "$STEPS" \
    --eval-every 0 --log-every 1000000 --threads 2 --precision bf16 >"$tmp/tr.out" 2>&1 ||
    { tail -n 20 "$tmp/tr.out" >&2; die "trident failed"; }
  line=$(grep '^done:' "$tmp/tr.out")
  echo "   run $rep trident bf16 threads=2: $line"
  tps=$(sed -E 's/.* ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
  best_tr=$(awk -v a="$best_tr" -v b="$tps" 'BEGIN { print (b > a ? b : a) }')
  for t in 1 2; do
    "$PYTHON" bench/torch_gpt.py "${SHAPE[@]}" --vocab 65 --steps "$((STEPS - 1))" --warmup-steps 1 \
      --threads "$t" --precision bf16 >"$tmp/to.out" 2>&1 || { tail -n 20 "$tmp/to.out" >&2; die "torch failed"; }
    line=$(tail -n 1 "$tmp/to.out")
    echo "   run $rep $line"
    tps=$(sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' <<<"$line")
    best_to=$(awk -v a="$best_to" -v b="$tps" 'BEGIN { print (b > a ? b : a) }')
  done
done
awk -v a="$best_tr" -v b="$best_to" -v t="$TARGET" 'BEGIN {
  r = a / b; printf "trident bf16 %.1f tokens/s, best PyTorch bf16 autocast %.1f: %.2fx (target >= %.1fx: %s)\n",
  a, b, r, t, (r >= t ? "PASS" : "BELOW") }'
