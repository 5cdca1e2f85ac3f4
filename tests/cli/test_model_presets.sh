#!/usr/bin/env bash
# Model presets in `trident plan` and `trident train --model` (the Llama
# family): --list-models' llama rows are the published config.json values
# (copied here); plan --model llama3-8b prints its family and a train
# command with the family's flags; train --model sets every model flag not
# given (--print-config), flags on the command line and in --config win;
# a tiny preset-override run trains exactly as the same flags without
# --model (loss bits in --log), notes the data's vocabulary, and Llama
# 3.1's rope scaling comes with its preset (its losses differ from 3's); plan's command for a llama
# layout on --cluster local trains as printed; a bad name is one error line.
# Usage: test_model_presets.sh TRIDENT
set -u
T=${1:?usage: test_model_presets.sh TRIDENT}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -8; fails=$((fails+1)); }

# the published configs: L H KV C F V T theta tied (Hugging Face config.json)
out=$("$T" plan --list-models 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import sys
want = {
    "smollm-135m":    (30, 9, 3, 576, 1536, 49152, 2048, 10000, "yes"),
    "tinyllama-1.1b": (22, 32, 4, 2048, 5632, 32000, 2048, 10000, "no"),
    "llama2-7b":      (32, 32, 32, 4096, 11008, 32000, 4096, 10000, "no"),
    "llama3-8b":      (32, 32, 8, 4096, 14336, 128256, 8192, 500000, "no"),
    "llama3.1-70b":   (80, 64, 8, 8192, 28672, 128256, 131072, 500000, "no"),
    "llama3.1-405b":  (126, 128, 8, 16384, 53248, 128256, 131072, 500000, "no"),
}
seen = {}
for line in sys.argv[1].splitlines():
    f = line.split()
    if f and f[0] in want:
        seen[f[0]] = tuple(int(x) for x in f[1:9]) + (f[9],)
        assert "config.json" in line, line
        assert ("rope_scaling llama3: factor 8, low 1, high 4, original context 8192" in line) == ("3.1" in f[0]), line
assert seen == want, (seen, want)
' "$out"; then ok "--list-models: the six llama presets as published"; else fail "--list-models (exit $rc)" "$out"; fi

out=$("$T" plan --model llama3-8b --global-batch 512 --gpus 64 --cluster h100-ndr 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "^model llama3-8b (.*config.json.*): llama, 32 layers, 32 heads, 8 kv heads, hidden 4096, MLP hidden 14336, vocabulary 128256, sequence 8192, untied head: 8.030B parameters" <<<"$out" &&
   grep -E -q "^  mpirun -np 64 trident train .* --model llama3-8b --arch llama --kv-heads 8 --ffn-hidden 14336 --tie-embeddings off( |$)" <<<"$out"
then ok "plan --model llama3-8b: the family and its train flags"; else fail "plan llama3-8b (exit $rc)" "$out"; fi

out=$("$T" plan --model llama3-8b --global-batch 512 --gpus 64 --cluster h100-ndr --top 50 --json 2>&1); rc=$?
if [ $rc -eq 0 ] && python3 -c '
import json, sys
p = json.loads(sys.argv[1])
assert len(p) == 50
for x in p:
    assert x["dp"] * x["tp"] * x["pp"] * x["cp"] == 64 and 8 % x["tp"] == 0, x   # tp divides the 8 kv heads
    assert 0 < x["memory_bytes"] <= 80e9 and 0 < x["mfu"] < 1, x
assert [x["step_s"] for x in p] == sorted(x["step_s"] for x in p)
' "$out"; then ok "plan --model llama3-8b --json: 50 ranked plans, tp dividing the kv heads"
else fail "plan llama3-8b json (exit $rc)" "$out"; fi

# train --model: the preset's flags, explicit ones win (command line over --config over the preset)
cfg() { "$T" train --data synthetic:100 "$@" --print-config 2>&1; }
field() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(" ".join(str(d[k]) for k in sys.argv[2:]))' "$@"; }
keys=(layers heads kv-heads embd ffn-hidden seq rope-theta tie-embeddings arch)
got=$(field "$(cfg --model llama3-8b)" "${keys[@]}" 2>&1)
[ "$got" = "32 32 8 4096 14336 8192 500000 off llama" ] && ok "--model llama3-8b sets the model flags" ||
    fail "--model llama3-8b: $got"
got=$(field "$(cfg --model gpt2-124m)" layers heads embd seq arch kv-heads 2>&1)
[ "$got" = "12 12 768 1024 gpt2 0" ] && ok "--model gpt2-124m: gpt2 sizes, no llama flags" || fail "gpt2 preset: $got"

# a tiny override of a preset (flags in --config and on the command line,
# which win over --config) trains exactly as the same flags given alone
echo '{"layers": 1, "seq": 32, "tie-embeddings": "off"}' >"$tmp/c.json"
tiny=(--embd 64 --heads 2 --kv-heads 1 --ffn-hidden 64 --steps 2 --batch 2 --threads 1 --eval-every 0
      --data synthetic:100)
losses() { python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"step\"" in l))' "$1"; }
out=$("$T" train --model smollm-135m --config "$tmp/c.json" --seq 16 "${tiny[@]}" --log "$tmp/a.jsonl" 2>&1); rc=$?
"$T" train --arch llama --layers 1 --seq 16 --tie-embeddings off --rope-theta 10000 "${tiny[@]}" \
    --log "$tmp/b.jsonl" >/dev/null 2>&1
a=$(losses "$tmp/a.jsonl" 2>&1); b=$(losses "$tmp/b.jsonl" 2>&1)
got=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline())["run_config"]
print(" ".join(str(d[k]) for k in sys.argv[2:]))' "$tmp/a.jsonl" "${keys[@]}" 2>&1)
if [ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$got" = "1 2 1 64 64 16 10000 off llama" ] &&
   grep -q "^--model smollm-135m: vocabulary 100 (the data's), not the preset's 49152" <<<"$out"
then ok "--model smollm-135m under --config and flags: argv over --config over the preset ($got), the explicit flags' losses ($a), the vocabulary noted"
else fail "tiny preset run (exit $rc): '$got'; '$a' vs '$b'" "$out"; fi
# Llama 3.1's rope scaling is the preset's (no flag has it): at 1024
# positions (its scaled wavelengths are > 2048) the losses differ from
# Llama 3's at the same theta (runs are deterministic: cli_determinism)
long=(--layers 1 --embd 64 --heads 2 --kv-heads 1 --ffn-hidden 64 --seq 1024 --steps 1 --batch 1 --threads 1
      --eval-every 0 --data synthetic:100)
"$T" train --model llama3.1-70b "${long[@]}" --log "$tmp/c.jsonl" >/dev/null 2>&1
"$T" train --model llama3-8b "${long[@]}" --log "$tmp/d.jsonl" >/dev/null 2>&1
c=$(losses "$tmp/c.jsonl" 2>&1); d=$(losses "$tmp/d.jsonl" 2>&1)
if [ -n "$c" ] && [ -n "$d" ] && [ "$c" != "$d" ]
then ok "llama3.1-70b's rope scaling changes the losses against llama3-8b's ($c vs $d)"
else fail "rope scaling: '$c' '$d'"; fi

# plan's command for a llama layout on --cluster local trains as printed
export TRIDENT_PROFILE=$tmp/profile.json
cp "$(dirname "$0")/made_up_profile.json" "$TRIDENT_PROFILE" # figures made up: ranking is not under test
out=$("$T" plan --layers 2 --heads 4 --embd 32 --seq 16 --vocab 65 --arch llama --kv-heads 2 --ffn-hidden 48 \
      --global-batch 2 --gpus 1 --cluster local --threads 1 --json 2>&1); rc=$?
cmd=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[0]["command"])' "$out" 2>/dev/null)
if [ $rc -eq 0 ] && [[ "$cmd" == "mpirun -np 1 trident train "*"--arch llama --kv-heads 2 --ffn-hidden 48 --tie-embeddings off"* ]]; then
    read -r -a argv <<<"${cmd#mpirun -np 1 trident }"
    run=$("$T" "${argv[@]}" --steps 1 --eval-every 0 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -q "^done: 1 steps" <<<"$run" && ok "plan's llama command trains: $cmd" ||
        fail "llama command run (exit $rc)" "$run"
else fail "plan llama command (exit $rc): $cmd" "$out"; fi

out=$("$T" train --model llama9-1t --data synthetic:100 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(grep -c . <<<"$out")" -eq 1 ] && grep -q "^trident: error: --model 'llama9-1t' is not a preset; use .*llama3-8b" <<<"$out" &&
    ok "an unknown --model: one error line with the presets" || fail "bad --model (exit $rc)" "$out"

[ $fails -eq 0 ] && echo "all model-preset checks passed" || echo "$fails failed"
exit $((fails > 0))
