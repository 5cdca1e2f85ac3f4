#!/usr/bin/env bash
# Document masking, --doc-mask (issue 42; the kernels against an explicit
# mask: test_attention_blocked / _lowp, the model: test_doc_mask_vs_torch):
# - trident verify (the layout against one doc-masked process, step by
#   step) passes for cp 2 (ring attention: global document starts) x tp 2
#   with sequence parallelism and --eod-mask-loss over 2 micro-batches (the
#   divisor the global count of targets kept) and gpt2's learned positions
#   reset per document (each cp chunk's and sp half's rows at global
#   t - start(t), per micro-batch), and a mixture of experts over
#   dp 2 = ep 2 with block recomputation and --eod-mask-loss (the aux and z
#   losses over every token, the token loss over those kept), and a Llama
#   (rotary) on cp 2 x pp 2 interleaved (2 chunks a stage: the second is a
#   middle stage, which reads its own starts; 2 micro-batches in flight,
#   each with its slot's starts) with --doc-positions reset (each chunk's
#   positions from global starts) and --eod-mask-loss;
# - the mask changes the run (a masked and an unmasked run's losses differ);
# - 4 steps = --resume of step 2 and 2 more, bitwise (losses and state),
#   the resume continuing --doc-mask, --eod and --doc-positions reset (gpt2's
#   learned positions) from the checkpoint; the --device guard run (document
#   starts and positions device buffers, their ops' extents) bitwise too;
# - trident eval applies the checkpoint's masking and positions (its line),
#   one process and cp 2 agreeing; under --eod-mask-loss it scores no
#   end-of-text target (its line) and equals the run's validation loss;
#   trident sample applies it (its line; the text after a document = after
#   it alone);
# - refusals, one line each: a char tokenizer without --eod, --eod outside
#   the vocabulary, --doc-positions reset without --doc-mask.
# Usage: test_doc_mask.sh TRIDENT DATA_DIR
set -u
T=$1 DATA=$2
PY=/usr/bin/python3
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
XXH3="$(dirname "$0")/ckpt_xxh3.py"
source "$(dirname "$0")/expect_lib.sh"
export OMPI_MCA_ess_singleton_isolated=1
head -c 30000 "$DATA/tinyshakespeare.txt" >"$tmp/s.txt"
# --eod 0: the newline (the char tokenizer's smallest code point), so each line is a document
M=(--data "$tmp/s.txt" --layers 2 --heads 4 --embd 32 --seq 32 --batch 8 --threads 1 --doc-mask --eod 0)

# --- layouts against one process ----------------------------------------------
VM=("${M[@]}") # the model verify runs
verify() { # NAME NP FLAGS...: trident verify on NP ranks passes
  local name=$1 np=$2; shift 2
  out=$(timeout 120 $MPIRUN -np "$np" "$T" verify "${VM[@]}" --steps 3 "$@" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] && grep -q '^verify: passed' <<<"$out"; then ok "$name: $(grep '^verify: passed' <<<"$out")"
  else fail "$name: rc $rc" "$(grep '^verify\|error' <<<"$out")"; fi
}
# (two runs of two layouts each: CI time)
verify cp2_tp2_sp_eod_loss_positions_reset 4 --cp 2 --tp 2 --sequence-parallel --eod-mask-loss --grad-accum 2 \
  --doc-positions reset
verify moe_ep2_dp2_recompute_eod_loss 2 --dp 2 --ep 2 --moe-experts 4 --moe-top-k 2 --recompute block --eod-mask-loss
VM=("${M[@]:0:2}" --layers 4 "${M[@]:4}") # 4 layers: 2 stages x 2 chunks
verify llama_cp2_pp2_interleaved_positions_reset 4 --cp 2 --pp 2 --schedule interleaved --virtual-stages 2 \
  --micro-batches 2 --arch llama --kv-heads 2 --doc-positions reset --eod-mask-loss

# --- the mask matters; resume bitwise ------------------------------------------
"$T" train "${M[@]}" --doc-positions reset --steps 4 --out "$tmp/ck" --save-every 2 --log "$tmp/full.log" >"$tmp/full.out" 2>&1 \
  || fail "train" "$(tail -3 "$tmp/full.out")"
"$T" train "${M[@]:0:14}" --steps 4 --log "$tmp/plain.log" >/dev/null 2>&1 || fail "train unmasked"
"$T" train "${M[@]:0:14}" --steps 4 --out "$tmp/r" --resume "$tmp/ck/step-00000002" --log "$tmp/rest.log" \
  >"$tmp/rest.out" 2>&1 || fail "resume" "$(tail -3 "$tmp/rest.out")"
grep -q '"doc-mask": true, "eod-mask-loss": false, "eod": 0, "doc-positions": "reset"' "$tmp/rest.out" \
  && ok "resume continues --doc-mask --eod 0 --doc-positions reset" \
  || fail "resume did not continue the masking"
"$T" train "${M[@]}" --doc-positions reset --steps 2 --device guard --log "$tmp/guard.log" >"$tmp/guard.out" 2>&1 \
  || fail "--device guard" "$(tail -3 "$tmp/guard.out")"
$PY - "$tmp/full.log" "$tmp/rest.log" "$tmp/plain.log" "$tmp/guard.log" <<'PYEOF' && ok "losses: resume and guard bitwise, mask matters" || fail "losses"
import json, sys
def losses(f): return {j["step"]: j["loss"] for j in map(json.loads, open(f)) if "loss" in j}
full, rest, plain, guard = map(losses, sys.argv[1:])
assert sorted(rest) == [2, 3] and all(rest[s] == full[s] for s in rest), (full, rest)
assert sorted(guard) == [0, 1] and all(guard[s] == full[s] for s in guard), (full, guard)
assert all(plain[s] != full[s] for s in (1, 2, 3)), (full, plain)
print("steps 2-3 resumed bitwise %s; unmasked differs by up to %.2e" % (
    [rest[s] for s in rest], max(abs(plain[s] - full[s]) for s in full)))
PYEOF
$PY "$XXH3" same "$tmp/ck/step-00000004" "$tmp/r/latest" && ok "resume state bitwise" || fail "resume state differs"

# --- eval applies the masking it was trained with ----------------------------
E=(--ckpt "$tmp/ck" --data "$tmp/s.txt" --max-tokens 3000 --batch 4 --threads 1)
"$T" eval "${E[@]}" >"$tmp/e1.out" 2>&1 || fail "eval" "$(tail -3 "$tmp/e1.out")"
timeout 120 $MPIRUN -np 2 "$T" eval "${E[@]}" --cp 2 >"$tmp/e2.out" 2>&1 </dev/null || fail "eval cp2" "$(tail -3 "$tmp/e2.out")"
grep -q "eval: document masking as trained (--eod 0.*--doc-positions reset" "$tmp/e1.out" && ok "eval says it masks" \
  || fail "eval: no masking line"
$PY - "$tmp/e1.out" "$tmp/e2.out" <<'PYEOF' && ok "eval cp2 = one process" || fail "eval cp2"
import re, sys
a, b = (float(re.search(r"loss ([0-9.]+) nats", open(f).read()).group(1)) for f in sys.argv[1:])
print("eval loss %.6f, cp 2 %.6f" % (a, b))
assert abs(a - b) <= 1e-5 * a
PYEOF
# --eod-mask-loss: eval leaves out the end-of-text targets as the run's
# validation does, with its divisor. A text of 330 characters has a
# validation split of 33 (90/10) = seq + 1: every validation row of the run
# is that one window, which eval --max-tokens 32 scores once; it holds 4
# newlines (--eod 0) among its 32 targets, so scoring them moves the loss
# by far more than the tolerance (the log's 6 decimals, fp32 sums: 1e-5).
{ head -c 297 "$tmp/s.txt"; head -c 93 "$tmp/s.txt" | tail -c 33; } >"$tmp/v.txt"
"$T" train --data "$tmp/v.txt" --layers 2 --heads 4 --embd 32 --seq 32 --batch 2 --threads 1 --doc-mask --eod 0 \
  --eod-mask-loss --steps 2 --eval-every 2 --eval-iters 1 --out "$tmp/ckv" --log "$tmp/v.log" >"$tmp/v.out" 2>&1 || fail "train --eod-mask-loss" "$(tail -3 "$tmp/v.out")"
"$T" eval --ckpt "$tmp/ckv" --data "$tmp/v.txt" --max-tokens 32 --batch 1 --threads 1 >"$tmp/ev.out" 2>&1 \
  || fail "eval --eod-mask-loss" "$(tail -3 "$tmp/ev.out")"
grep -q "eval: end-of-text targets not scored, as trained (--eod-mask-loss, --eod 0" "$tmp/ev.out" \
  && grep -q "eval: tokens 32 (28 scored" "$tmp/ev.out" && ok "eval says it drops end-of-text targets" \
  || fail "eval: no --eod-mask-loss line" "$(grep '^eval' "$tmp/ev.out")"
$PY - "$tmp/v.log" "$tmp/ev.out" <<'PYEOF' && ok "eval = the run's validation loss under --eod-mask-loss" || fail "eval vs the run's val_loss"
import json, re, sys
run = [j["val_loss"] for j in map(json.loads, open(sys.argv[1])) if "val_loss" in j][-1]
ev = float(re.search(r"loss ([0-9.]+) nats", open(sys.argv[2]).read()).group(1))
print("eval loss %.6f, the run's validation loss at its step %.6f" % (ev, run))
assert abs(ev - run) <= 1e-5 * run
PYEOF

# --- sample: the context is the current document (test_sample_cache: the
# semantics on four model families); here the checkpoint's masking is read:
# seeded text after "docA<newline>docB" is the text after "docB" alone (the
# same logits), where a prefix in the same document changes it
S=(--ckpt "$tmp/ck" --tokens 8 --threads 1)
"$T" sample "${S[@]}" --prompt $'First Citizen:\nBefore we' >"$tmp/sa.out" 2>"$tmp/sa.err" \
  || fail "sample" "$(tail -2 "$tmp/sa.err")"
"$T" sample "${S[@]}" --prompt 'Before we' >"$tmp/sb.out" 2>/dev/null || fail "sample docB"
"$T" sample "${S[@]}" --prompt 'Citizen:Before we' >"$tmp/sc.out" 2>/dev/null || fail "sample one document"
grep -q "sample: document masking as trained (--eod 0)" "$tmp/sa.err" && ok "sample says it masks" \
  || fail "sample: no masking line" "$(cat "$tmp/sa.err")"
tail9() { tail -c 9 "$tmp/$1.out"; }
[ "$(tail9 sa)" = "$(tail9 sb)" ] && [ "$(tail9 sc)" != "$(tail9 sb)" ] && ok "sample after docA|docB = after docB (not after docA docB)" \
  || fail "sample after docA|docB" "$(cat "$tmp/sa.out" "$tmp/sb.out")"

# --- refusals ------------------------------------------------------------------
R=(--data "$tmp/s.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 2 --steps 1)
expect no-eod "--doc-mask: the char tokenizer has no end-of-text token; give its id with --eod ID" \
  "$T" train "${R[@]}" --doc-mask
expect eod-vocab "--eod 5000: not a token of the vocabulary" "$T" train "${R[@]}" --doc-mask --eod 5000
expect doc-positions-mask "--doc-positions reset restarts positions at the document starts of --doc-mask" \
  "$T" train "${R[@]}" --arch llama --doc-positions reset

[ $fails -eq 0 ] && echo "doc mask: all passed"
exit $fails
