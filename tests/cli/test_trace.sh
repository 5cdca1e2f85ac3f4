#!/usr/bin/env bash
# --trace FILE: a training run under mpirun (4 ranks, dp 2 x tp 2, 3 steps of
# 2 micro-batches) writes a Chrome trace-event file that check_trace.py
# accepts (it parses, events are complete and nest, one lane per rank, the
# forward count is steps x micro-batches), and so does a parameter-server
# run (a server's lane, p2p events); the checker rejects corrupted
# copies (so it can fail); a bad --trace path fails before step 1 with one
# error line and leaves nothing behind.
# Usage: test_trace.sh TRIDENT_BINARY DATA_DIR [KEEP.json]
# (KEEP.json: where to copy the trace, e.g. for scripts/render_trace.sh)
set -u
T=${1:?usage: test_trace.sh TRIDENT_BINARY DATA_DIR [KEEP.json]}
DATA=${2:?}
KEEP=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK="/usr/bin/python3 $HERE/check_trace.py"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 60000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
STEPS=3 K=2
B=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 8 --grad-accum $K
   --steps $STEPS --eval-every $STEPS --eval-iters 1 --threads 1)
A=("${B[@]}" --dp 2 --tp 2)

# --- a valid trace: dp 2 x tp 2 ------------------------------------------------------------
out=$(timeout 300 $MPIRUN -np 4 "$T" train "${A[@]}" --trace "$tmp/t.json" 2>&1 </dev/null); rc=$?
if [ $rc -ne 0 ]; then
  fail "run: exit code $rc"; echo "$out" | tail -5
elif ! grep -q "^trace: $tmp/t.json (4 lanes" <<<"$out"; then
  fail "run: no 'trace: FILE (4 lanes' line"; echo "$out" | tail -5
fi
# a sanitizer build reports memory errors and undefined behaviour
sanitized() { grep -qE 'ERROR: AddressSanitizer|runtime error:' <<<"$1"; }
sanitized "$out" && { fail "run: sanitizer report:"; grep -m3 -E 'AddressSanitizer|runtime error:' <<<"$out"; }
[ -e "$tmp/t.json.tmp" ] && fail "run: the temporary $tmp/t.json.tmp was left behind"
if $CHECK "$tmp/t.json" 4 $((STEPS * K)); then
  echo "ok   trace: valid"
else
  fail "trace: check_trace.py rejects the run's trace"
fi
# every category the run has: compute, data, collective, optimizer, eval
for cat in compute data collective optimizer eval; do
  grep -q "\"cat\":\"$cat\"" "$tmp/t.json" || fail "trace: no event of category $cat"
done
[ -n "$KEEP" ] && cp "$tmp/t.json" "$KEEP"

# --- parameter servers: a lane each, point-to-point traffic -------------------
out=$(timeout 300 $MPIRUN -np 3 "$T" train "${B[@]}" --dp-mode ps --ps-servers 1 --trace "$tmp/ps.json" 2>&1 </dev/null) \
  || { fail "ps run: exit code $?"; echo "$out" | tail -5; }
if $CHECK "$tmp/ps.json" 3 $((STEPS * K)) 1; then
  grep -q '"cat":"p2p"' "$tmp/ps.json" && echo "ok   ps trace: valid, with p2p events" || fail "ps trace: no p2p event"
else
  fail "ps trace: check_trace.py rejects it"
fi

# --- a pipeline: dp 2 x tp 2 x pp 2 (1F1B over 4 micro-batches), 8 lanes -----
P=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 16 --micro-batches 4
   --steps $STEPS --eval-every 0 --threads 1 --dp 2 --tp 2 --pp 2)
out=$(timeout 300 $MPIRUN -np 8 "$T" train "${P[@]}" --trace "$tmp/pp.json" 2>&1 </dev/null) \
  || { fail "pipeline run: exit code $?"; echo "$out" | tail -5; }
if $CHECK "$tmp/pp.json" 8 $((STEPS * 4)); then
  for what in '"name":"B mb 3"' '"cat":"p2p"' '"name":"wait gradient"'; do
    grep -q "$what" "$tmp/pp.json" || fail "pipeline trace: no $what event"
  done
  echo "ok   pipeline trace: valid, 8 lanes, forwards and backwards per micro-batch, p2p"
else
  fail "pipeline trace: check_trace.py rejects it"
fi
[ -n "${KEEP_PP:-}" ] && cp "$tmp/pp.json" "$KEEP_PP"

# --- the checker can fail: corrupted copies ------------------------------------
# corrupt NAME PYTHON: applies PYTHON to the event list `ev`, writes the copy,
# and wants check_trace.py to refuse it
corrupt() {
  local name=$1 code=$2
  /usr/bin/python3 - "$tmp/t.json" "$tmp/bad-$name.json" "$code" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1])); ev = doc["traceEvents"]
exec(sys.argv[3])
json.dump(doc, open(sys.argv[2], "w"))
PY
  if out=$($CHECK "$tmp/bad-$name.json" 4 $((STEPS * K))); then
    fail "checker: accepts a trace with $name"
  else
    echo "ok   checker refuses $name: ${out#check_trace: FAIL: }"
  fi
}
corrupt "no dur"          'next(e for e in ev if e["ph"] == "X").pop("dur")'
corrupt "no tid"          'next(e for e in ev if e["ph"] == "X").pop("tid")'
corrupt "negative dur"    'next(e for e in ev if e["ph"] == "X")["dur"] = -1.0'
corrupt "a lane missing"  'doc["traceEvents"] = [e for e in ev if e["tid"] != 3]'
corrupt "an extra lane"   'ev.append(dict(next(e for e in ev if e["ph"] == "X"), tid=4))'
corrupt "an async end missing" 'ev.remove(next(e for e in ev if e["ph"] == "e"))'
corrupt "a forward missing" 'ev.remove(next(e for e in ev if e["name"].startswith("F ")))'
corrupt "overlapping slices" 'f = next(e for e in ev if e["name"].startswith("F ")); ev.append(dict(f, name="x", ts=f["ts"] + f["dur"] / 2))'
corrupt "an unbalanced B" 'ev.append({"name": "x", "ph": "B", "ts": 0, "pid": 0, "tid": 0})'
printf '{"traceEvents":[{"name":"x",' > "$tmp/bad-truncated.json"
$CHECK "$tmp/bad-truncated.json" 4 $((STEPS * K)) >/dev/null && fail "checker: accepts a truncated file" \
  || echo "ok   checker refuses a truncated file"

# --- bad paths fail before step 1, with one error line -------------------------
# expect NAME REGEX ARGS...: non-zero exit, REGEX matches, one error line, no step ran
expect() {
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 120 $MPIRUN -np 2 "$T" train "${B[@]}" "$@" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit code $rc (want a clean non-zero exit)"; return; fi
  sanitized "$out" && { fail "$name: sanitizer report:"; grep -m3 -E 'AddressSanitizer|runtime error:' <<<"$out"; return; }
  grep -qE -e "$re" <<<"$out" || { fail "$name: output does not match /$re/:"; echo "$out" | tail -3; return; }
  [ "$(grep -c 'trident: error' <<<"$out")" -eq 1 ] || { fail "$name: not exactly one error line"; echo "$out" | tail -5; return; }
  grep -q '^step ' <<<"$out" && { fail "$name: a step ran before the error"; return; }
  echo "ok   $name: $(grep -m1 'trident: error' <<<"$out")"
}
mkdir "$tmp/dir"
printf 'precious\n' > "$tmp/other.txt"
expect trace-is-dir    "--trace $tmp/dir is a directory"                           --trace "$tmp/dir"
expect trace-no-dir    "--trace $tmp/missing/t.json cannot be written"            --trace "$tmp/missing/t.json"
expect trace-is-data   "--trace $tmp/small.txt is the --data file"                 --trace "$tmp/small.txt"
expect trace-other     "--trace $tmp/other.txt exists and is not a trident trace"  --trace "$tmp/other.txt"
expect trace-is-log    "--trace $tmp/x.json is also the --log file"                --trace "$tmp/x.json" --log "$tmp/x.json"
expect trace-in-out    "--trace $tmp/ck/latest would take a name the checkpoint uses" --out "$tmp/ck" --trace "$tmp/ck/latest"
[ "$(cat "$tmp/other.txt")" = precious ] || fail "trace-other: $tmp/other.txt was changed"
[ -e "$tmp/missing" ] && fail "trace-no-dir: $tmp/missing was created"
ls "$tmp"/*.tmp >/dev/null 2>&1 && fail "bad paths: temporary files left: $(ls "$tmp"/*.tmp)"

# --- an existing trace is replaced ---------------------------------------------
out=$(timeout 120 "$T" train "${B[@]}" --trace "$tmp/t.json" 2>&1 </dev/null) \
  || { fail "replace: the run failed"; echo "$out" | tail -3; }
$CHECK "$tmp/t.json" 1 $((STEPS * K)) >/dev/null && echo "ok   an earlier trace is replaced (1 lane now)" \
  || fail "replace: the new one-rank trace does not check"

[ $fails -eq 0 ] && echo "all trace checks passed" || echo "$fails trace check(s) FAILED"
exit $((fails > 0))
