#!/usr/bin/env bash
# `trident schedule` (no MPI): every kind prints its lists, timeline, peaks
# and bubble and says "valid" with exit status 0; bad flags give exactly one
# "trident: error:" line naming the flag and a non-zero exit.
# Usage: test_schedule_cli.sh TRIDENT
set -u
T=${1:?usage: test_schedule_cli.sh TRIDENT_BINARY}
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -8; fails=$((fails+1)); }

run_valid() { # name, flags...
  local name=$1; shift
  out=$("$T" schedule "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ "$(tail -1 <<<"$out")" = valid ] && grep -q "^stage  0 |" <<<"$out" &&
     grep -q "^bubble (idle / compute per stage): theory" <<<"$out" && grep -q "^peak in flight" <<<"$out"; then
    ok "$name: $(grep "^bubble" <<<"$out" | sed "s/^bubble[^:]*: //")"
  else fail "$name (exit $rc)" "$out"; fi
}
run_valid "gpipe --pp 4 --micro-batches 8" --pp 4 --micro-batches 8 --schedule gpipe
run_valid "1f1b --pp 4 --micro-batches 8" --pp 4 --micro-batches 8 --schedule 1f1b
run_valid "interleaved --pp 4 --micro-batches 8 --virtual-stages 3" --pp 4 --micro-batches 8 --schedule interleaved \
  --virtual-stages 3
run_valid "zb-h1 --pp 4 --micro-batches 8" --pp 4 --micro-batches 8 --schedule zb-h1
run_valid "zb-h1 --costs 1,1,0.5" --pp 3 --micro-batches 6 --schedule zb-h1 --costs 1,1,0.5
run_valid "1f1b --pp 1" --pp 1 --micro-batches 3

# the simulated bubble printed equals the theory for 1f1b (P-1)/M = 3/8
out=$("$T" schedule --pp 4 --micro-batches 8 --schedule 1f1b 2>&1)
if grep -q "theory 0.375000, simulated 0.375000" <<<"$out"; then ok "1f1b P 4 M 8 bubble 3/8 printed"
else fail "1f1b bubble line" "$(grep '^bubble' <<<"$out")"; fi
# zb-h1 P 4 M 8 with unit costs: stage 0's row starts with 4 forwards then idles
if grep -q "^stage  0 |F0 F1 F2 F3  \. " <<<"$("$T" schedule --pp 4 --micro-batches 8 --schedule zb-h1)"; then
  ok "zb-h1 timeline row of stage 0"
else fail "zb-h1 timeline" "$("$T" schedule --pp 4 --micro-batches 8 --schedule zb-h1 | grep '^stage  0 |')"; fi

bad() { # name, expected text, flags...
  local name=$1 want=$2; shift 2
  out=$("$T" schedule "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^trident: error:' <<<"$out")" -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
     grep -qF -- "$want" <<<"$out"; then ok "$name: $out (exit $rc)"
  else fail "$name (exit $rc)" "$out"; fi
}
bad "unknown schedule" "--schedule 'pipedream'" --pp 2 --micro-batches 4 --schedule pipedream
bad "unknown flag" "--stages" --stages 2
bad "--pp 0" "--pp" --pp 0 --micro-batches 4
bad "--micro-batches not a number" "--micro-batches" --pp 2 --micro-batches x
bad "interleaved M % P" "--micro-batches 6 is not a multiple of --pp 4" --pp 4 --micro-batches 6 --schedule interleaved
bad "--virtual-stages without interleaved" "--virtual-stages 2 needs --schedule interleaved" --pp 2 \
  --micro-batches 4 --virtual-stages 2
bad "--costs malformed" "--costs '1,1'" --pp 2 --micro-batches 4 --costs 1,1
bad "--costs negative" "--costs '1,-1,1'" --pp 2 --micro-batches 4 --costs 1,-1,1

out=$("$T" schedule --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q -- "--virtual-stages" <<<"$out" && grep -q -- "--costs" <<<"$out"; then ok "--help lists the flags"
else fail "--help" "$out"; fi

[ $fails -eq 0 ] && echo "test_schedule_cli: all passed" || echo "test_schedule_cli: $fails failed"
[ $fails -eq 0 ]
