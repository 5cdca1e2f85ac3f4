#!/usr/bin/env bash
# The default thread count and OpenMP's waiting policy (src/kernels/cpus.c):
# under `taskset -c 0` train chooses 1 thread per rank (the affinity mask,
# not the online processors); OpenMP's runtime starts with a spin count of
# 10000 (GOMP_SPINCOUNT set before it loads) unless the user set
# GOMP_SPINCOUNT, which is kept.
# Usage: test_threads.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_threads.sh TRIDENT DATA_DIR}
DATA=${2:?}/tinyshakespeare.txt
source "$(dirname "$0")/expect_lib.sh" # $tmp, fails, ok, fail
command -v taskset >/dev/null || { echo "SKIP: no taskset"; exit 77; }
run=(train --layers 1 --heads 2 --embd 32 --seq 16 --batch 2 --steps 1 --eval-every 0 --data "$DATA")
out=$(taskset -c 0 "$T" "${run[@]}" 2>&1) && grep -q "; 1 threads per rank;" <<<"$out" &&
  ok "taskset -c 0: 1 thread per rank" || fail "taskset -c 0 threads" "$(grep 'threads per rank' <<<"$out")"
# the runtime's own report, the last (after the program started again)
spin() { OMP_DISPLAY_ENV=verbose "$@" "$T" --version 2>&1 | grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -1; }
s=$(spin env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
[ "$s" = "GOMP_SPINCOUNT = '10000'" ] && ok "OpenMP starts with a bounded spin ($s)" || fail "OpenMP's spin count: '$s'"
s=$(spin env GOMP_SPINCOUNT=1000)
[ "$s" = "GOMP_SPINCOUNT = '1000'" ] && ok "the user's GOMP_SPINCOUNT kept ($s)" || fail "user spin count: '$s'"
[ $fails -eq 0 ] && echo "test_threads: ok" || echo "test_threads: $fails failures"
exit $((fails != 0))
