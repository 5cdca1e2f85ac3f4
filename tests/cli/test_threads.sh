#!/usr/bin/env bash
# The default thread count and OpenMP's waiting policy (src/kernels/cpus.c):
# under `taskset -c 0` train chooses 1 thread per rank (the affinity mask,
# not the online processors); OpenMP's runtime starts with a spin count of
# 10000 (GOMP_SPINCOUNT set before it loads) unless the user set
# GOMP_SPINCOUNT, which is kept. And MFU's denominator (src/run/report.c):
# the run measures one core's sgemm peak unless TRIDENT_PEAK_GFLOPS states
# it (the suite states it, scripts/test.sh; this test's taskset run is the
# suite's measurement), and a value that is no peak is refused.
# Usage: test_threads.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_threads.sh TRIDENT DATA_DIR}
DATA=${2:?}/tinyshakespeare.txt
source "$(dirname "$0")/expect_lib.sh" # $tmp, fails, ok, fail
command -v taskset >/dev/null || { echo "SKIP: no taskset"; exit 77; }
run=(train --layers 1 --heads 2 --embd 32 --seq 16 --batch 2 --steps 1 --eval-every 0 --data "$DATA")
out=$(taskset -c 0 env -u TRIDENT_PEAK_GFLOPS "$T" "${run[@]}" 2>&1) && grep -q "; 1 threads per rank;" <<<"$out" &&
  ok "taskset -c 0: 1 thread per rank" || fail "taskset -c 0 threads" "$(grep 'threads per rank' <<<"$out")"
peak=$(grep -oE "sgemm peak [0-9.]+ GFLOP/s per thread \(measured\)" <<<"$out" | grep -oE "[0-9.]+" | head -1)
awk -v p="${peak:-0}" 'BEGIN { exit !(p > 0) }' && ok "unstated, the sgemm peak is measured: $peak GFLOP/s" ||
  fail "measured peak" "$(grep -o 'sgemm peak.*' <<<"$out")"
out=$(TRIDENT_PEAK_GFLOPS=25 "$T" "${run[@]}" 2>&1) && grep -q "sgemm peak 25.0 GFLOP/s per thread (stated by TRIDENT_PEAK_GFLOPS)" <<<"$out" &&
  ok "TRIDENT_PEAK_GFLOPS=25: the stated peak" || fail "stated peak" "$(grep -o 'sgemm peak.*' <<<"$out")"
expect "TRIDENT_PEAK_GFLOPS=fast" "TRIDENT_PEAK_GFLOPS='fast' is not a peak" env TRIDENT_PEAK_GFLOPS=fast "$T" "${run[@]}"
# the runtime's own report, the last (after the program started again)
spin() { OMP_DISPLAY_ENV=verbose "$@" "$T" --version 2>&1 | grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -1; }
s=$(spin env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
[ "$s" = "GOMP_SPINCOUNT = '10000'" ] && ok "OpenMP starts with a bounded spin ($s)" || fail "OpenMP's spin count: '$s'"
s=$(spin env GOMP_SPINCOUNT=1000)
[ "$s" = "GOMP_SPINCOUNT = '1000'" ] && ok "the user's GOMP_SPINCOUNT kept ($s)" || fail "user spin count: '$s'"
[ $fails -eq 0 ] && echo "test_threads: ok" || echo "test_threads: $fails failures"
exit $((fails != 0))
