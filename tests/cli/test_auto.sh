#!/usr/bin/env bash
# `trident plan --calibrate` and `trident train --auto` (2 ranks, a tiny
# model): the profile is written, parses (Python, an independent reader)
# with positive figures and feeds --cluster local; --auto trains the layout
# it prints (train's own batch line says the same split), and its predicted
# memory is the engine's plan (train's --log "planned" figure of the busiest
# rank, docs/design.md principle 2), printed beside the measured step time.
# Bad input is one "trident: error:" line naming the flag or file.
# Usage: test_auto.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_auto.sh TRIDENT DATA_DIR}
DATA=${2:?}/tinyshakespeare.txt
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -12; fails=$((fails+1)); }
export TRIDENT_PROFILE=$tmp/profile.json
model=(--layers 2 --heads 2 --embd 32 --seq 16)

out=$($MPIRUN -np 2 "$T" plan --calibrate --max-threads 1 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "trident-profile" and p["version"] == 2 and p["cores"] >= 1, p
assert p["gemm"] and all(g["gflops"] > 0 and g["threads"] == 1 for g in p["gemm"]), p["gemm"]
assert p["optimizer"] and all(o["melems"] > 0 for o in p["optimizer"]), p
assert p["mem_bw"][0]["gbs"] > 0 and p["p2p"]["gbs"] > 0 and p["p2p"]["alpha_us"] >= 0, p
ops = sorted((c["op"], c["ranks"]) for c in p["collectives"])
assert ops == [("allgather", 2), ("allreduce", 2)], ops
' "$TRIDENT_PROFILE" && grep -q "saved to $TRIDENT_PROFILE" <<<"$out"; then ok "--calibrate writes a profile"
else fail "--calibrate (exit $rc)" "$out"; fi

out=$("$T" plan "${model[@]}" --vocab 65 --global-batch 4 --gpus 2 --cluster local --json 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert p and all(x["dp"] * x["tp"] * x["pp"] * x["cp"] == 2 and x["step_s"] > 0 for x in p), p
' "$out"; then ok "--cluster local plans from the profile"; else fail "--cluster local (exit $rc)" "$out"; fi

out=$($MPIRUN -np 2 "$T" train --auto --data "$DATA" "${model[@]}" --batch 4 --steps 3 --threads 1 \
      --eval-every 0 --log "$tmp/auto.log" 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, re, sys
out, log = sys.argv[1], sys.argv[2]
a = re.search(r"auto: 2 ranks x 1 threads .*: dp (\d+) tp (\d+) pp (\d+) zero (\d+), (\d+) micro-batches of (\d+) ", out)
assert a, "no auto line"
dp, tp, pp, zero, m, b = map(int, a.groups())
assert dp * tp * pp == 2 and dp * m * b == 4, a.groups()
# train says what it ran: replicas x micro-batches x sequences, and the ZeRO stage
t = re.search(r"batch: 4 sequences x 16 tokens per step = (\d+) replicas x (\d+) micro-batches x (\d+)", out)
assert t and tuple(map(int, t.groups())) == (dp, m, b), (t and t.groups(), a.groups())
assert re.search(r"zero %d\b" % zero, out.split("batch: ")[1].split("\n")[0]), "zero"
mem = float(re.search(r"memory ([0-9.]+) MiB on the busiest rank", out).group(1))
rss = [json.loads(l) for l in open(log) if "\"event\": \"rss\"" in l][-1]["ranks"]
planned = max(r["planned"] for r in rss) / 1048576
assert abs(mem - planned) <= 0.006, (mem, planned)
m = re.search(r"auto: measured step ([0-9.]+) ms, predicted ([0-9.]+) ms", out)
assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, "no measured line"
' "$out" "$tmp/auto.log"; then ok "--auto runs the layout it prints; memory is the engine plan"
else fail "--auto (exit $rc)" "$out"; fi

bad() { # name, expected text, command...
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^trident: error:' <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out"; then
    ok "$name"
  else fail "$name (exit $rc)" "$out"; fi
}
bad "--auto with --tp" "--auto picks" "$T" train --auto --tp 2 --data "$DATA" "${model[@]}" --batch 4 --steps 1
TRIDENT_PROFILE=$tmp/none.json bad "--auto without a profile" "--calibrate" \
  "$T" train --auto --data "$DATA" "${model[@]}" --batch 4 --steps 1
sed 's/"gflops": [0-9.e+-]*/"gflops": -1/' "$tmp/profile.json" >"$tmp/bad.json"
TRIDENT_PROFILE=$tmp/bad.json bad "a bad profile names file and field" "bad.json: field gemm\[0\].gflops" \
  "$T" plan "${model[@]}" --vocab 65 --global-batch 4 --gpus 2 --cluster local

[ $fails -eq 0 ] && echo "test_auto: ok" || echo "test_auto: $fails failures"
exit $((fails != 0))
