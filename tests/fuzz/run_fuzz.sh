#!/usr/bin/env bash
# Builds one libFuzzer target with clang (address + undefined-behaviour
# sanitizers) and runs it for SECONDS from its seed corpus; replays the
# regression inputs first. Prints the executions run, exits non-zero on any
# crash, leak or sanitizer report. Usage: run_fuzz.sh NAME SECONDS SRC BIN
set -euo pipefail
name=$1 secs=$2 src=$3 bin=$4
command -v clang >/dev/null || { echo "fuzz_$name: clang is missing; run scripts/deps.sh" >&2; exit 1; }
exe="$bin/fuzz_$name"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -I"$src/include" "$src/tests/fuzz/fuzz_$name.c" "$src"/src/formats/*.c -lxxhash -lm -o "$exe"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp "$src/tests/fuzz/corpus/$name/"* "$work/corpus/" 2>/dev/null || true
reg="$src/tests/fuzz/regressions/$name"
if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
  "$exe" "$reg"/* > "$work/replay.log" 2>&1 || { cat "$work/replay.log"; echo "fuzz_$name: a regression input fails again"; exit 1; }
  echo "fuzz_$name: $(ls "$reg" | wc -l) regression inputs replayed clean"
fi
# -artifact_prefix keeps crash files out of the source tree (they are printed)
if ! "$exe" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/" \
     -rss_limit_mb=1024 "$work/corpus" > "$work/fuzz.log" 2>&1; then
  tail -40 "$work/fuzz.log"
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$f" ] && { echo "input ($f):"; od -An -tx1 "$f" | head -20; }
  done
  echo "fuzz_$name: FAILED (add the input above to tests/fuzz/regressions/$name/ once fixed)"
  exit 1
fi
execs=$(grep -m1 'stat::number_of_executed_units' "$work/fuzz.log" | awk '{print $2}')
echo "fuzz_$name: ${execs:-?} executions in ${secs} s, no crash ($(ls "$work/corpus" | wc -l) corpus inputs)"
