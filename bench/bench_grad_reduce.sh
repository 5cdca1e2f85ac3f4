#!/usr/bin/env bash
# Gradient-reduction payloads at dp = 2: bytes each rank hands to the comm
# layer for gradients per step (the comm layer's own count, td_comm_sent_bytes)
# and the step time, for fp32, bf16 and top-k, on the nanoGPT CPU config
# (L4 H4 C128 T64, batch 12 = 6 per replica, 1 thread per rank). Step times
# are this machine's (2 cores, possibly shared): a ratio against fp32 measured
# in the same run, not a promise. STEPS (default 60) steps per run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
CFG="--data data/tinyshakespeare.txt --layers 4 --heads 4 --embd 128 --seq 64 --batch 12 --steps ${STEPS:-60} --eval-every 0 --threads 1 --dp 2"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $(nproc) cores; STEPS=${STEPS:-60}"
run() { # prints "sent dense step_ms"
  local out
  out=$($M -np 2 build/trident train $CFG "$@" 2>&1)
  local sent dense ms
  sent=$(sed -n 's/.*: \([0-9]*\) bytes sent, dense fp32 \([0-9]*\) bytes.*/\1/p' <<<"$out")
  dense=$(sed -n 's/.*: \([0-9]*\) bytes sent, dense fp32 \([0-9]*\) bytes.*/\2/p' <<<"$out")
  ms=$(sed -n 's/^done: [0-9]* steps, \([0-9.]*\) ms\/step.*/\1/p' <<<"$out")
  [ -n "$sent" ] && [ -n "$ms" ] || { echo "bench_grad_reduce: run $* printed no figures:" >&2; tail -5 <<<"$out" >&2; exit 1; }
  echo "$sent $dense $ms"
}
printf "gradient reduction at dp=2, L4 H4 C128 T64, batch 12, 1 thread per rank (step time measured on this machine)\n"
printf "  %-34s %14s %10s %10s %9s\n" "payload" "bytes/step" "vs fp32" "step ms" "vs fp32"
read s0 d0 m0 <<<"$(run)"
for p in "fp32|" "bf16|--grad-reduce-dtype bf16" "topk 10%|--grad-compress topk:0.1" \
         "topk 1%|--grad-compress topk:0.01" "topk 1%, no error feedback|--grad-compress topk:0.01:noef" \
         "topk 1%, ZeRO-1|--grad-compress topk:0.01 --zero 1" \
         "topk 1% of the gradient (:grad)|--grad-compress topk:0.01:grad"; do
  name=${p%%|*}; flags=${p#*|}
  if [ "$name" = fp32 ]; then s=$s0 m=$m0; else read s _ m <<<"$(run $flags)"; fi
  awk -v n="$name" -v s="$s" -v d="$s0" -v m="$m" -v m0="$m0" \
    'BEGIN { printf "  %-34s %14d %9.2f%% %10.2f %8.2fx\n", n, s, 100 * s / d, m, m / m0 }'
done
printf "(dense fp32 volume of the same buckets: %d bytes/step; bytes = what this rank hands to the comm layer, at dp=2 what it puts on the wire)\n" "$d0"
