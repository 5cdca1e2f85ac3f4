#!/usr/bin/env bash
# `trident plan` (no MPI): --json is a ranked JSON array with the documented
# fields whose layouts use every device and respect fixed choices; the text
# table shows the ZeRO-3-only plan beside a tp/pp plan; bad input gives
# exactly one "trident: error:" line naming the flag and a non-zero exit.
# Usage: test_plan_cli.sh TRIDENT
set -u
T=${1:?usage: test_plan_cli.sh TRIDENT_BINARY}
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -8; fails=$((fails+1)); }

# JSON: parsed by Python, checked against the request (an independent reader)
out=$("$T" plan --model gpt2-350m --global-batch 64 --gpus 16 --gpus-per-node 8 --cluster a100-ndr --top 4 \
      --json 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert len(p) == 4, len(p)
need = "dp tp pp zero micro_batches schedule recompute memory_bytes step_s tflops_per_device mfu dominant".split()
for x in p:
    assert all(k in x for k in need), x
    assert x["dp"] * x["tp"] * x["pp"] == 16 and x["dp"] * x["micro_batch"] * x["micro_batches"] == 64, x
    assert 0 < x["memory_bytes"] <= 80e9 and 0 < x["mfu"] < 1 and x["step_s"] > 0, x
assert [x["step_s"] for x in p] == sorted(x["step_s"] for x in p)
' "$out"; then ok "--json: 4 ranked plans with the fields"; else fail "--json (exit $rc)" "$out"; fi

out=$("$T" plan --model gpt2-350m --global-batch 64 --gpus 16 --tp 2 --recompute selective --json 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert p and all(x["tp"] == 2 and x["recompute"] == "selective" for x in p), p
' "$out"; then ok "fixed --tp 2 --recompute selective respected"; else fail "fixed choices (exit $rc)" "$out"; fi

out=$("$T" plan --model gpt3-175b --global-batch 1536 --gpus 1024 --cluster a100-hdr 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "^best ZeRO-3-only plan (tp = pp = 1)" <<<"$out" && grep -q "^z3 " <<<"$out" &&
   grep -q "^1 " <<<"$out"; then ok "175B on 1024 A100s: best plan and the ZeRO-3-only plan beside it"
else fail "175B table (exit $rc)" "$out"; fi

bad() { # name, expected text, flags...
  local name=$1 want=$2; shift 2
  out=$("$T" plan "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^trident: error:' <<<"$out")" -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
     grep -q -- "$want" <<<"$out"; then ok "$name"
  else fail "$name (exit $rc)" "$out"; fi
}
bad "unknown preset" "--model 'gpt5'" --model gpt5 --global-batch 8 --gpus 8
bad "no global batch" "--global-batch" --model gpt2-124m --gpus 8
bad "no model" "--layers" --global-batch 8 --gpus 8
bad "unknown cluster" "--cluster 'tpu'" --model gpt2-124m --global-batch 8 --gpus 8 --cluster tpu
TRIDENT_PROFILE=/nonexistent/profile.json bad "local without a profile" "--calibrate" --model gpt2-124m --global-batch 8 --gpus 8 --cluster local
bad "bad recompute" "--recompute 'some'" --model gpt2-124m --global-batch 8 --gpus 8 --recompute some
bad "zb-h1 not modelled" "--schedule zb-h1" --model gpt2-124m --global-batch 8 --gpus 8 --schedule zb-h1
bad "nothing fits" "no layout fits" --model gpt3-175b --global-batch 8 --gpus 8
bad "zero out of range" "--zero" --model gpt2-124m --global-batch 8 --gpus 8 --zero 4

[ $fails -eq 0 ] && echo "test_plan_cli: ok" || echo "test_plan_cli: $fails failures"
exit $((fails != 0))
