#!/usr/bin/env bash
# The CUDA backend's correctness check for a lent GPU machine (docs/cuda.md).
#
#   scripts/gpu-check.sh --prepare      here, on a CPU machine with the toolkit:
#                                       builds the module and the replay checker,
#                                       writes the CPU's reference results, and
#                                       prints what a loan must carry
#   scripts/gpu-check.sh [--only SECTION]   on the GPU machine: every section, or one
#
# The GPU machine has the CUDA toolkit but none of trident's CPU libraries
# (OpenBLAS, oneDNN, MPI), so it runs what --prepare built here: the module
# (build/libtrident_cuda.so), the checker linked without them
# (build/tests/gpu/cuda_ops_replay) and the CPU's results
# (build/gpu-ref/cuda_ops.ref). Sections, each under its own timeout,
# going on past a failure:
#   query      the driver and GPUs (nvidia-smi) and the module's own view
#   ops        every op of the CUDA rows against the CPU's results, every
#              precision, each op twice for the same bits
#   memcheck   compute-sanitizer memcheck of the ops section ("not run"
#              where compute-sanitizer is missing or refuses the device)
#   racecheck  the same with racecheck (the block reductions' shared memory)
# One report: $OUT/gpu-check.txt (./gpu-check.txt without $OUT), each
# section's whole output beside it; exit 0 when no section failed or was
# skipped (a skip is a machine without a usable GPU: nothing was checked).
set -u
cd "$(dirname "$0")/.."
B=build
SECTIONS="query ops memcheck racecheck"

only=""
case "${1:-}" in
  "") ;;
  --prepare)
    set -e
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON >/dev/null
    cmake --build "$B" -j"$(nproc)" --target trident_cuda test_cuda_ops cuda_ops_replay
    mkdir -p "$B/gpu-ref"
    OMPI_MCA_ess_singleton_isolated=1 "$B/tests/gpu/test_cuda_ops" --write "$B/gpu-ref/cuda_ops.ref" | tail -1
    OMPI_MCA_ess_singleton_isolated=1 "$B/tests/gpu/test_cuda_ops" --replay-guard "$B/gpu-ref/cuda_ops.ref" | tail -1
    echo "carry: $B/libtrident_cuda.so $B/tests/gpu/cuda_ops_replay $B/gpu-ref"
    du -ch "$B/libtrident_cuda.so" "$B/tests/gpu/cuda_ops_replay" "$B/gpu-ref" | tail -1
    exit 0 ;;
  --only) only=${2:?"--only SECTION: one of $SECTIONS"}
          grep -qw -- "$only" <<<"$SECTIONS" || { echo "gpu-check: no section '$only'; valid: $SECTIONS" >&2; exit 2; } ;;
  *) echo "usage: scripts/gpu-check.sh [--prepare | --only SECTION]  (sections: $SECTIONS)" >&2; exit 2 ;;
esac

OUTDIR=${OUT:-.}
REPORT="$OUTDIR/gpu-check.txt"
mkdir -p "$OUTDIR"
: >"$REPORT"
# the carried module, not the build tree's path compiled into the checker;
# cuBLASLt from this machine's toolkit
export TRIDENT_CUDA_MODULE="$PWD/$B/libtrident_cuda.so"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
REPLAY="$B/tests/gpu/cuda_ops_replay"
REF="$B/gpu-ref/cuda_ops.ref"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
declare -A verdict

# section NAME SECONDS CMD...: runs CMD under its timeout, appends its
# output's tail and its verdict (PASS, FAIL, SKIPPED: exit 77, NOT RUN).
section() {
  local name=$1 secs=$2; shift 2
  [ -n "$only" ] && [ "$only" != "$name" ] && return 0
  local log="$OUTDIR/gpu-check-$name.log" t0=$SECONDS rc
  timeout -k 5 "$secs" "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) verdict[$name]=PASS ;;
    77) verdict[$name]=SKIPPED ;;
    124|137) verdict[$name]="FAIL (timeout ${secs}s)" ;;
    *) verdict[$name]="FAIL (exit $rc)" ;;
  esac
  { echo "== $name: ${verdict[$name]} in $((SECONDS - t0)) s: $*"
    grep -E "^(FAIL|SKIPPED|not in)|checks,|ERROR SUMMARY|^  " "$log" | head -60
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && { echo "-- last lines:"; tail -20 "$log"; }
    echo; } >>"$REPORT"
}
not_run() {
  [ -n "$only" ] && [ "$only" != "$1" ] && return 0
  verdict[$1]="NOT RUN ($2)"
  echo "== $1: NOT RUN: $2" >>"$REPORT"; echo >>"$REPORT"
}

{ echo "gpu-check $(date -u +%FT%TZ) on $(hostname)"; echo; } >>"$REPORT"
missing=""
for f in "$TRIDENT_CUDA_MODULE" "$REPLAY" "$REF"; do [ -e "$f" ] || missing="$missing $f"; done
if [ -n "$missing" ]; then
  echo "gpu-check: missing$missing: run scripts/gpu-check.sh --prepare where trident builds, and carry them" | tee -a "$REPORT" >&2
  exit 2
fi

section query 60 bash -c "(nvidia-smi -L || echo 'nvidia-smi: none'); $REPLAY --query"
section ops 180 "$REPLAY" --replay "$REF"
if [ -z "$SAN" ]; then
  not_run memcheck "no compute-sanitizer"; not_run racecheck "no compute-sanitizer"
else
  # --error-exitcode: a finding fails the section; a device the tool
  # refuses shows as its own error line in the log
  section memcheck 240 "$SAN" --tool memcheck --error-exitcode 9 "$REPLAY" --replay "$REF"
  section racecheck 240 "$SAN" --tool racecheck --error-exitcode 9 "$REPLAY" --replay "$REF"
fi

fails=0
{ echo "== summary"
  for s in $SECTIONS; do
    [ -n "${verdict[$s]:-}" ] || continue
    echo "$s: ${verdict[$s]}"
    case ${verdict[$s]} in FAIL*|SKIPPED) fails=$((fails + 1)) ;; esac
  done; } >>"$REPORT"
cat "$REPORT"
[ $fails -eq 0 ]
