#!/usr/bin/env bash
# Data-parallel scaling on this machine: dp=2 (1 thread per rank) against
# dp=1 (1 thread), same per-replica batch, on the nanoGPT CPU config; the
# share of gradient communication hidden by overlap (exposed wait with and
# without --no-overlap); step time of allreduce vs reduce-broadcast vs ps.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
CFG="--layers 4 --heads 4 --embd 128 --seq 64 --vocab 65 --steps ${STEPS:-60} --warmup-steps 5 --threads 1"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | tail -1; }
best() { # best tokens/s of 3 runs: prints "tps step_ms exposed"
  local bt=0 line out
  for i in 1 2 3; do
    out=$("$@" 2>&1 | grep 'bench train:')
    t=$(field tokens_per_s <<<"$out")
    if awk "BEGIN{exit !($t > $bt)}"; then bt=$t; line=$out; fi
  done
  echo "$(field tokens_per_s <<<"$line") $(field step_ms <<<"$line") $(field exposed_comm_ms <<<"$line")"
}
read t1 s1 _ <<<"$(best build/trident bench train $CFG --batch 12)"
read t2 s2 e2 <<<"$(best $M -np 2 build/trident bench train $CFG --batch 24 --dp 2)"
read t3 s3 e3 <<<"$(best $M -np 2 build/trident bench train $CFG --batch 24 --dp 2 --no-overlap)"
read t4 s4 _ <<<"$(best $M -np 2 build/trident bench train $CFG --batch 24 --dp 2 --dp-mode reduce-broadcast)"
read t5 s5 _ <<<"$(best $M -np 3 build/trident bench train $CFG --batch 24 --dp 2 --dp-mode ps --ps-servers 1)"
awk -v t1="$t1" -v s1="$s1" -v t2="$t2" -v s2="$s2" -v e2="$e2" -v t3="$t3" -v s3="$s3" -v e3="$e3" \
    -v t4="$t4" -v s4="$s4" -v t5="$t5" -v s5="$s5" 'BEGIN {
  printf "data-parallel scaling, L4 H4 C128 T64, 12 sequences per replica, 1 thread per rank (best of 3)\n"
  printf "  %-34s %10s %10s %14s\n", "layout", "tokens/s", "step ms", "exposed comm"
  printf "  %-34s %10.0f %10.2f %14s\n", "dp=1", t1, s1, "-"
  printf "  %-34s %10.0f %10.2f %11.3f ms\n", "dp=2 allreduce (overlapped)", t2, s2, e2
  printf "  %-34s %10.0f %10.2f %11.3f ms\n", "dp=2 allreduce --no-overlap", t3, s3, e3
  printf "  %-34s %10.0f %10.2f %14s\n", "dp=2 reduce-broadcast", t4, s4, "-"
  printf "  %-34s %10.0f %10.2f %14s\n", "dp=2 ps (1 server, 3 ranks)", t5, s5, "-"
  eff = t2 / (2 * t1)
  printf "dp=2 scaling efficiency: %.1f%% (target >= 90%%: %s)\n", 100 * eff, ((eff >= 0.9) ? "PASS" : "BELOW")
  hidden = (e3 > 0) ? 1 - e2 / e3 : 0
  printf "communication hidden by overlap: %.0f%% (exposed wait %.3f ms vs %.3f ms without overlap)\n", 100 * hidden, e2, e3
  printf "step time vs allreduce: reduce-broadcast %.2fx, ps %.2fx\n", s4 / s2, s5 / s2
}'
