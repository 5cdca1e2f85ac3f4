#!/usr/bin/env bash
# Runs a command that is supposed to fail, and passes when it does so the
# intended way: non-zero exit, within MAX_SECONDS, with every TEXT (fixed
# strings) somewhere in its stdout+stderr, and no sanitizer report there.
#   expect_fail.sh MAX_SECONDS TEXT [TEXT ...] -- COMMAND [ARGS ...]
# `timeout` bounds a run that hangs instead; mpirun passes the TERM on to its
# ranks, so nothing is left behind.
set -u
max=$1
shift
texts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do texts+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || { echo "expect_fail.sh: no command after --" >&2; exit 2; }

start=$(date +%s%N)
out=$(timeout -k 10 $((max * 2)) "$@" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "expect_fail.sh: exit code $rc after ${elapsed_ms} ms"

fail() { echo "expect_fail.sh: FAIL: $*" >&2; exit 1; }
[ "$rc" -ne 0 ] || fail "the command succeeded; it should have failed"
# 124 / 137 are timeout's codes, but 137 is also mpirun's when a rank was
# SIGKILLed (the fault tests): only a run that lasted the whole limit hung
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    [ "$elapsed_ms" -lt $((max * 2000)) ] || fail "the command hung until timeout"
fi
[ "$elapsed_ms" -lt $((max * 1000)) ] || fail "took ${elapsed_ms} ms, limit ${max} s"
# In a sanitizer build (-DTD_SANITIZE=ON) a report is a bug even when the
# job fails as intended; the report's own exit code would be hidden by it.
if grep -qE -e 'ERROR: (Address|Leak)Sanitizer|runtime error: ' <<<"$out"; then
    fail "a sanitizer report (above)"
fi
for t in "${texts[@]}"; do
    grep -qF -- "$t" <<<"$out" || fail "output lacks: $t"
done
echo "expect_fail.sh: ok (failed as expected)"
