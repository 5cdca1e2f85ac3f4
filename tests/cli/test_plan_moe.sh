#!/usr/bin/env bash
# `trident plan` for mixture-of-experts models (no MPI): the issue's
# command, `plan --model mixtral-8x7b --gpus 64 --cluster h100-ndr`, prints
# the best layout with ep > 1 and the best with ep = 1, each with its step
# time and memory, the published Megatron-core run's layout as predicted,
# and the cited figure with predicted / published (checked against the rows'
# own numbers); --json carries ep, etp, edp and the all-to-all; a dense
# model's JSON has none of them; --list-models has the MoE presets; flags
# that cannot work are one error line with the rules table's text; train
# takes an MoE preset (cli_moe trains one).
# Usage: test_plan_moe.sh TRIDENT
set -u
T=${1:?usage: test_plan_moe.sh TRIDENT}
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -12; fails=$((fails+1)); }

out=$("$T" plan --model mixtral-8x7b --gpus 64 --cluster h100-ndr 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import re, sys
out = sys.argv[1]
assert "46.703B parameters, 12.880B active per token" in out, "the model line"
assert re.search(r"^global batch 256: the published run.s", out, re.M), "the published batch"
head = re.search(r"^rank +dp +tp +pp +cp +ep etp +zero ", out, re.M)
assert head, "ep and etp columns"
rows = {}
for l in out.splitlines():
    f = l.split()
    if f and f[0] in ("ep", "ep=1", "pub") and len(f) > 16 and f[1].isdigit():
        rows[f[0]] = f
assert sorted(rows) == ["ep", "ep=1", "pub"], sorted(rows)
ep = lambda f: int(f[5])
assert ep(rows["ep"]) > 1 and ep(rows["ep=1"]) == 1 and ep(rows["pub"]) == 8, rows
for f in rows.values():   # dp tp pp cp ep etp zero b m sched rc sp mem step band tflops
    mem, step, tflops = float(f[13]), float(f[14]), float(f[16])
    assert 0 < mem <= 80 and step > 0 and tflops > 0, f
    dp, tp, cp = int(f[1]), int(f[2]), int(f[4])
    assert dp * tp * int(f[3]) * cp == 64 and (dp * tp * cp) % (ep(f) * int(f[6])) == 0 and 8 % ep(f) == 0, f
assert float(rows["ep"][14]) <= float(rows["ep=1"][14]), "the ep layout is the faster here"
for tag in ("ep", "ep=1", "pub"):
    assert re.search(r"^  %s +compute .*ep a2a [0-9.e-]+$" % re.escape(tag), out, re.M), tag + " costs"
    assert re.search(r"^  %s +memory [0-9.]+ GB: model states" % re.escape(tag), out, re.M), tag + " memory"
m = re.search(r"^published mcore-0.8: 438 TFLOP/s per GPU; NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md "
              r"as of MCore v0.8.*TP 1 EP 8 PP 4 VP 8, micro-batch 1, global batch 256", out, re.M)
assert m, "the cited figure"
r = re.findall(r"^  predicted / published: ([0-9.]+) for its layout \(pub, ([0-9]+) TFLOP/s per GPU\); "
               r"([0-9.]+) for the ep layout \(([0-9]+) TFLOP/s per GPU\)$", out, re.M)
assert len(r) == 2, r
pub, epl = float(rows["pub"][16]), float(rows["ep"][16])
for (rp, tp_, re_, te), fig in zip(r, (438, 468)):
    assert abs(float(tp_) - pub) <= 1 and abs(float(te) - epl) <= 1, (r, pub, epl)
    assert abs(float(rp) - pub / fig) <= 0.01 and abs(float(re_) - epl / fig) <= 0.01, (r, fig)
assert re.search(r"(run plan 1 with trident train|the fastest plan it runs is plan \d+):\n  mpirun -np 64 trident train .* --moe-experts 8 --moe-top-k 2 .* --ep \d+", out), "the train command"
' "$out"; then ok "the issue's command: ep and ep = 1 layouts, the published run and the ratio"
else fail "mixtral-8x7b on 64 H100 (exit $rc)" "$out"; fi

out=$("$T" plan --model mixtral-8x7b --gpus 64 --cluster h100-ndr --ep 8 --pp 4 --top 3 --json 2>&1); rc=$?
dense=$("$T" plan --model gpt2-124m --global-batch 16 --gpus 8 --top 2 --json 2>&1); rc2=$?
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert len(p) == 3
for x in p:
    assert x["ep"] == 8 and x["pp"] == 4 and x["edp"] * x["ep"] * x["etp"] == x["dp"] * x["tp"] * x["cp"], x
    assert x["costs_s"]["ep a2a"] > 0 and (x["command"] is None or " --ep 8" in x["command"]), x
for x in json.loads(sys.argv[2]):
    assert "ep" not in x and "ep a2a" not in x["costs_s"], x
' "$out" "$dense"; then ok "--json: ep, etp, edp and the all-to-all for MoE, none of them for a dense model"
else fail "--json (exit $rc/$rc2)" "$out $dense"; fi

out=$("$T" plan --list-models 2>&1)
if grep -E -q "^  mixtral-8x7b +32 +32 +8 +4096 +14336 +8 +2 +32000 +4096 +1000000 no .*config.json" <<<"$out" &&
   grep -E -q "^  olmoe-1b-7b +16 +16 +16 +2048 +1024 +64 +8 +50304 +4096 +10000 no " <<<"$out"
then ok "--list-models: the MoE presets"; else fail "--list-models" "$out"; fi

bad() { # name, expected text, flags...
  local name=$1 want=$2; shift 2
  out=$("$T" "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^trident: error:' <<<"$out")" -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
     grep -q -- "$want" <<<"$out"; then ok "$name"
  else fail "$name (exit $rc)" "$out"; fi
}
mx=(plan --model mixtral-8x7b --gpus 64 --cluster h100-ndr)
bad "ep not dividing the experts" "--ep 3 does not divide --moe-experts 8: each ep rank holds an equal share" "${mx[@]}" --ep 3
bad "etp not dividing tp" "--moe-etp 2 does not divide --tp 1" "${mx[@]}" --tp 1 --moe-etp 2
bad "ep on a dense model" "--ep 2 needs --moe-experts E" plan --model gpt2-124m --global-batch 8 --gpus 8 --ep 2
bad "MoE flags on a dense model" "--moe-top-k 2 needs --moe-experts E" plan --model gpt2-124m --global-batch 8 --gpus 8 --moe-top-k 2
bad "top-k above the experts" "--moe-top-k 9: a token's experts are 1 to the 8" "${mx[@]}" --moe-top-k 9
bad "ep over more devices than a stage has" "--ep 8 gives no valid layout together with --pp 16; valid with --pp 16: 1, 2, 4" "${mx[@]}" --pp 16 --ep 8

[ $fails -eq 0 ] && echo "test_plan_moe: ok" || echo "test_plan_moe: $fails failures"
exit $((fails != 0))
