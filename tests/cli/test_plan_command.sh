#!/usr/bin/env bash
# `trident plan` prints the `mpirun -np N trident train ...` command of a
# plan, and train accepts it: on --cluster local (a profile written here,
# its figures made up: the ranking is not under test) with a tiny model,
# every ranked plan's command (JSON) is parsed flag by flag (Python, an
# independent reader) against the plan's own fields, the text output's
# command is the JSON's, and two of them (a pipeline, tensor parallelism
# with sequence parallelism, dp with ZeRO and recomputation) train one step
# as printed. On a GPU preset,
# plans with selective recomputation (which train does not implement) carry
# no command and say why, and the text names the fastest plan train runs.
# Usage: test_plan_command.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_plan_command.sh TRIDENT DATA_DIR}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -12; fails=$((fails+1)); }
export TRIDENT_PROFILE=$tmp/profile.json
cp "$(dirname "$0")/made_up_profile.json" "$TRIDENT_PROFILE" # figures made up: ranking is not under test
model=(--layers 4 --heads 2 --embd 32 --seq 16 --vocab 65 --global-batch 4)

out=$("$T" plan "${model[@]}" --gpus 2 --cluster local --threads 1 --top 1000 --json 2>&1); rc=$?
echo "$out" >"$tmp/plans.json"
if [ $rc -eq 0 ] && python3 - "$tmp/plans.json" "$tmp" <<'PY'
import json, shlex, sys
plans = json.load(open(sys.argv[1]))
assert len(plans) >= 10, len(plans)
picked = {}
for p in plans:
    c = p["command"]
    if p["recompute"] == "selective":
        assert c is None and "selective" in p["command_note"], p
        continue
    a = shlex.split(c)
    assert a[:4] == ["mpirun", "-np", str(p["dp"] * p["tp"] * p["pp"] * p["cp"]), "trident"] and a[4] == "train", a
    flags, i = {}, 5
    while i < len(a):
        assert a[i].startswith("--"), a
        if i + 1 < len(a) and not a[i + 1].startswith("--"):
            flags[a[i]] = a[i + 1]; i += 2
        else:
            flags[a[i]] = True; i += 1
    want = {"--data": "synthetic:65", "--layers": "4", "--heads": "2", "--embd": "32", "--seq": "16",
            "--batch": "4", "--dp": str(p["dp"]), "--tp": str(p["tp"]), "--pp": str(p["pp"]),
            "--zero": str(p["zero"]), "--micro-batches": str(p["micro_batches"]), "--threads": "1"}
    if p["cp"] > 1: want["--cp"] = str(p["cp"])
    if p["dp_shard"]: want["--dp-shard"] = str(p["dp_shard"])
    if p["pp"] > 1:
        want["--schedule"] = p["schedule"]
        if p["schedule"] == "interleaved": want["--virtual-stages"] = str(p["virtual_stages"])
    if p["sequence_parallel"]: want["--sequence-parallel"] = True
    if p["recompute"] == "full": want["--recompute"] = "block"
    assert flags == want, (flags, want)   # nothing missing, nothing extra (local trains fp32)
    assert p["validation"] == "bench_plan" and p["step_s_error_band"][0] <= 0 <= p["step_s_error_band"][1], p
    kind = ("cp" if p["cp"] > 1 else "pp" if p["pp"] > 1 and p["schedule"] != "gpipe" else "tp_sp" if p["sequence_parallel"]
            else "dp_zero_block" if p["dp"] > 1 and p["zero"] > 0 and p["recompute"] == "full" else None)
    if kind and kind not in picked: picked[kind] = c
assert set(picked) == {"cp", "pp", "tp_sp", "dp_zero_block"}, picked
for k, c in picked.items(): open(sys.argv[2] + "/cmd_" + k, "w").write(c)
PY
then ok "local: every plan's command has exactly its layout's train flags"
else fail "local commands (exit $rc)" "$out"; fi

# the text output's command is the JSON's plan 1 command
out=$("$T" plan "${model[@]}" --gpus 2 --cluster local --threads 1 2>&1); rc=$?
first=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["command"])' "$tmp/plans.json" 2>/dev/null)
if [ $rc -eq 0 ] && grep -q "^run plan 1 with trident train:" <<<"$out" && grep -qxF "  $first" <<<"$out"
then ok "text: plan 1's command, as in --json"; else fail "text command (exit $rc)" "$out"; fi

# as printed, but for the launcher's flags and the binary's path: one step
for k in cp pp tp_sp dp_zero_block; do
  [ -f "$tmp/cmd_$k" ] || { fail "no $k command picked"; continue; }
  cmd=$(cat "$tmp/cmd_$k")
  args=${cmd#mpirun -np }; np=${args%% *}; args=${args#* trident train }
  out=$(timeout 120 $MPIRUN -np "$np" "$T" train $args --steps 1 --eval-every 0 2>&1 </dev/null); rc=$?
  dp=$(sed -E 's/.*--dp ([0-9]+).*/\1/' <<<"$args"); mb=$(sed -E 's/.*--micro-batches ([0-9]+).*/\1/' <<<"$args")
  # train's own account of the split it ran
  if [ $rc -eq 0 ] && grep -q "^done: 1 steps" <<<"$out" &&
     grep -qE "^batch: 4 sequences x 16 tokens per step = $dp replicas x $mb micro-batches" <<<"$out"
  then ok "train runs the $k plan as printed: $args"
  else fail "train $k: $cmd (exit $rc)" "$out"; fi
done

# a GPU preset: selective plans carry no command; the text names the fastest that train runs
out=$("$T" plan --model gpt3-175b --global-batch 1536 --gpus 1024 --cluster a100-hdr --top 100000 --json 2>&1); rc=$?
echo "$out" >"$tmp/gpu.json"
txt=$("$T" plan --model gpt3-175b --global-batch 1536 --gpus 1024 --cluster a100-hdr 2>&1)
if [ $rc -eq 0 ] && python3 - "$tmp/gpu.json" "$txt" <<'PY'
import json, re, sys
plans, txt = json.load(open(sys.argv[1])), sys.argv[2]
assert plans[0]["recompute"] == "selective" and plans[0]["command"] is None, plans[0]
k = next(i for i, p in enumerate(plans) if p["command"])
m = re.search(r"the fastest plan it runs is plan (\d+):\n  (.*)\n", txt)
assert m and int(m.group(1)) == k + 1 and m.group(2) == plans[k]["command"], (m and m.groups(), k)
assert plans[k]["command"].endswith("--precision bf16"), plans[k]["command"]
PY
then ok "a100-hdr 175B: plan 1 (selective) has no command; the text gives the fastest plan train runs"
else fail "gpu preset commands (exit $rc)" "$txt"; fi

[ $fails -eq 0 ] && echo "test_plan_command: ok" || echo "test_plan_command: $fails failures"
exit $((fails != 0))
