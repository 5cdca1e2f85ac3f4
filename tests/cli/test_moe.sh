#!/usr/bin/env bash
# Mixture of experts through the CLI: the start line and the log's expert
# figures, the end report's load per layer and exchange beside its formula,
# --model taking a preset's experts, a run saved under ep 2 resumed under
# ep 4 and in one process (the continuations within 1e-5 of each other),
# eval and sample of an MoE checkpoint, and the refusals as one error line.
# Usage: test_moe.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_moe.sh TRIDENT DATA_DIR}
DATA=${2:?}/tinyshakespeare.txt
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
source "$(dirname "$0")/expect_lib.sh" # $tmp, fails, ok, fail
M=(--layers 2 --heads 4 --embd 32 --seq 16 --moe-experts 4 --moe-top-k 2)
RUN=(--data "$DATA" --batch 8 --eval-every 0 --threads 1 --warmup 2)

out=$($MPIRUN -np 2 "$T" train "${M[@]}" "${RUN[@]}" --dp 2 --ep 2 --steps 6 --out "$tmp/ck" --log "$tmp/a.jsonl" 2>&1) ||
  fail "train --ep 2 --out" "$out"
grep -q "^experts: 4 of F=128 in every block, top-2 (softmax router, renormalised), 0 shared; .* ep 2 (2 experts per rank)" <<<"$out" &&
  ok "the start line names the experts" || fail "experts line" "$out"
grep -q "^  layer 1: assignments per expert over the run" <<<"$out" && grep -q "^ep exchange (rank 0, last step): " <<<"$out" &&
  ok "the end report's load per layer and exchange" || fail "end report" "$out"
if python3 - "$tmp/a.jsonl" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step" in r]
assert len(steps) == 6 and all(0 < s["moe_aux"] < 1 and s["moe_load_min"] <= 1 <= s["moe_load_max"] for s in steps), steps
moe = [r for r in rows if r.get("event") == "moe"]
assert moe and moe[0]["ep_sent_bytes"] == moe[0]["ep_formula_bytes"] > 0, moe
print("log: %d steps with moe_aux and loads; exchange %d bytes = formula" % (len(steps), moe[0]["ep_sent_bytes"]))
P
then ok "the log's expert figures"; else fail "log figures"; fi

# the ep 2 checkpoint of step 6 continued in one process, under ep 2 and ep 4
# (the flags of the experts from its manifest): the same losses within 1e-5
resume one 1
resume ep2 2 --dp 2 --ep 2
resume ep4 4 --dp 4 --ep 4
if same_continuations ep2 ep4; then ok "an ep 2 checkpoint continues alike in one process, at ep 2 and at ep 4"; else fail "resume across ep"; fi
out=$("$T" ckpt check "$tmp/ep4/latest" 2>&1) && ok "the ep 4 save checks" || fail "ckpt check of the ep 4 save" "$out"
out=$("$T" eval --ckpt "$tmp/ep4" --data "$DATA" --max-tokens 2000 2>&1) && grep -q "^eval: tokens" <<<"$out" &&
  ok "eval reads the experts from the checkpoint" || fail "eval" "$out"
out=$("$T" sample --ckpt "$tmp/ep4" --tokens 20 --prompt "KING" 2>&1) && ok "sample" || fail "sample" "$out"
# the key/value cache's greedy text equals the whole-window path's (past T too)
a=$("$T" sample --ckpt "$tmp/ep4" --tokens 30 --prompt "KING" --top-k 1 2>/dev/null)
b=$("$T" sample --ckpt "$tmp/ep4" --tokens 30 --prompt "KING" --top-k 1 --no-kv-cache 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "sample --top-k 1 with the cache = --no-kv-cache" || fail "sample cache" "'$a' vs '$b'"

out=$($MPIRUN -np 2 "$T" verify "${M[@]}" "${RUN[@]}" --dp 2 --ep 2 --steps 3 2>&1) &&
  grep -q "^verify: passed: .* every reduced gradient matches" <<<"$out" && ok "verify at ep 2" || fail "verify --ep 2" "$out"

# --model: a preset's experts (Mixtral: 8, top-2) at a size that trains here
out=$("$T" train --model mixtral-8x7b --layers 1 --heads 4 --kv-heads 2 --embd 32 --ffn-hidden 32 --moe-ffn-hidden 32 --seq 16 \
  "${RUN[@]}" --steps 2 2>&1) && grep -q "^experts: 8 of F=32 in every block, top-2" <<<"$out" &&
  ok "--model mixtral-8x7b brings its experts" || fail "--model mixtral-8x7b" "$out"

bad() { # name, expected text, command...
  local name=$1 want=$2; shift 2
  local o; o=$("$@" 2>&1 </dev/null)
  if [ $? -ne 0 ] && grep -q "^trident: error: .*$want" <<<"$o" && [ "$(grep -c '^trident: error:' <<<"$o")" -eq 1 ]; then ok "$name"
  else fail "$name (want one error line with '$want')" "$o"; fi
}
bad "top-k within the experts" "--moe-top-k must be in \[1, --moe-experts 4\]" "$T" train "${RUN[@]}" --moe-experts 4 --moe-top-k 5 --steps 1
bad "a shaping flag needs experts" "--moe-top-k 2 needs --moe-experts E" "$T" train "${RUN[@]}" --moe-top-k 2 --steps 1
bad "ep needs experts" "--ep 2 needs --moe-experts E" "$T" train "${RUN[@]}" --ep 2 --steps 1
bad "ep divides the experts" "--ep 3 does not divide --moe-experts 4" "$T" train "${RUN[@]}" --moe-experts 4 --ep 3 --steps 1
bad "ep fits the grid" "--ep 2 does not divide tp x cp x dp / etp = 1 x 1 x 1 / 1" "$T" train "${RUN[@]}" --moe-experts 4 \
  --ep 2 --steps 1
bad "ep divides dp x cp (not tp)" "--ep 2 does not divide dp x cp = 1" $MPIRUN -np 2 "$T" train "${RUN[@]}" --moe-experts 4 \
  --tp 2 --sequence-parallel --ep 2 --steps 1
bad "a router by name" "--moe-router relu: valid: softmax, sigmoid" "$T" train "${RUN[@]}" --moe-experts 4 --moe-router relu --steps 1
bad "capacity and cp" "--moe-capacity does not combine with --cp 2" $MPIRUN -np 2 "$T" train "${RUN[@]}" --moe-experts 4 \
  --moe-capacity 1 --cp 2 --steps 1
[ $fails -eq 0 ] && echo "test_moe: ok" || echo "test_moe: $fails failures"
exit $((fails != 0))
