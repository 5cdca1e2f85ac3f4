#!/usr/bin/env bash
# The Llama family through the CLI: a run saved at step 6, resumed in another
# layout (tp 2, pp 2) without repeating the family's flags, must continue
# with the losses of the one-process resume (1e-5 relative, steps 6-9);
# eval and sample read the checkpoint's family (sample's key/value cache gives
# the whole-window path's greedy text, one row per token); the family's
# refusals are one error line each.
# Usage: test_llama.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_llama.sh TRIDENT DATA_DIR}
DATA=${2:?}/tinyshakespeare.txt
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
source "$(dirname "$0")/expect_lib.sh" # $tmp, fails, ok, fail
M=(--arch llama --layers 2 --heads 4 --kv-heads 2 --embd 32 --ffn-hidden 48 --seq 16)
RUN=(--data "$DATA" --batch 4 --eval-every 0 --threads 1 --warmup 2)

out=$("$T" train "${M[@]}" "${RUN[@]}" --steps 6 --out "$tmp/ck" 2>&1) || fail "train --out" "$out"
grep -q "model: llama L=2 H=4 KV=2 C=32 F=48" <<<"$out" && ok "the model line names the family" ||
  fail "model line" "$out"
# the resumes name no family flag: the checkpoint's manifest supplies them
resume one 1
resume tp2 2 --tp 2
resume pp2 2 --pp 2 --micro-batches 2
if same_continuations tp2 pp2; then ok "resume across layouts (tp 2, pp 2) continues the one-process run"; else fail "resume across layouts"; fi

out=$("$T" eval --ckpt "$tmp/one" --data "$DATA" --max-tokens 2000 2>&1) && grep -q "^eval: tokens" <<<"$out" &&
  ok "eval reads the family from the checkpoint" || fail "eval" "$out"
out=$("$T" sample --ckpt "$tmp/one" --tokens 20 --prompt "KING" 2>&1) && ok "sample" || fail "sample" "$out"
# the key/value cache: greedy text equal to the whole-window path's, within
# the model's T (16) and past it; the prompt once, then one row per token
for n in 12 30; do
  a=$("$T" sample --ckpt "$tmp/one" --tokens $n --prompt "KING" --top-k 1 2>/dev/null)
  b=$("$T" sample --ckpt "$tmp/one" --tokens $n --prompt "KING" --top-k 1 --no-kv-cache 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "sample --top-k 1: $n tokens with the cache = --no-kv-cache" ||
    fail "sample cache vs --no-kv-cache ($n tokens)" "'$a' vs '$b'"
done
out=$("$T" sample --ckpt "$tmp/one" --tokens 12 --prompt "KING" --verbose 2>&1 >/dev/null)
grep -q "^sample: prompt 4 tokens, 4 rows computed; then 11 forwards, 1.00 rows per generated token; kv cache 16 rows" \
  <<<"$out" && ok "sample --verbose: the prompt once, 1 row per token, 16 cached rows" || fail "sample --verbose" "$out"
c=$("$T" sample --ckpt "$tmp/one" --tokens 30 --prompt "KING" --temperature 0 2>/dev/null)
[ "$c" = "$a" ] && ok "sample --temperature 0 (greedy) = --top-k 1" || fail "sample --temperature 0" "'$c' vs '$a'"
out=$("$T" sample --ckpt "$tmp/one" --tokens 20 --top-p 0.5 --temperature 0.8 2>&1) && [ -n "$out" ] &&
  ok "sample --top-p 0.5" || fail "sample --top-p" "$out"
expect "sample --top-p 0" "--top-p: '0' is out of range; valid: (0, 1]" "$T" sample --ckpt "$tmp/one" --top-p 0

bad() { # name, expected text, command...
  local name=$1 want=$2; shift 2
  local o; o=$("$@" 2>&1 </dev/null)
  # one error line (mpirun adds its own MPI_ABORT report around it)
  if [ $? -ne 0 ] && grep -q "^trident: error: .*$want" <<<"$o" && [ "$(grep -c '^trident: error:' <<<"$o")" -eq 1 ] &&
     { [ "$1" != "$T" ] || [ "$(grep -c . <<<"$o")" -eq 1 ]; }; then ok "$name"
  else fail "$name (want one error line with '$want')" "$o"; fi
}
bad "kv heads must divide heads" "--kv-heads 3 does not divide --heads 4" "$T" train "${RUN[@]}" --arch llama \
  --heads 4 --kv-heads 3 --embd 32 --steps 1
bad "tp must divide kv heads" "--tp 2 does not divide --kv-heads 1" $MPIRUN -np 2 "$T" train "${RUN[@]}" --arch llama --heads 4 \
  --kv-heads 1 --embd 32 --tp 2 --steps 1
bad "gpt2 has no kv heads" "--kv-heads 2 needs --arch llama" "$T" train "${RUN[@]}" --kv-heads 2 --steps 1
bad "gpt2's head is tied" "--tie-embeddings off needs --arch llama" "$T" train "${RUN[@]}" --tie-embeddings off --steps 1
bad "unknown family" "--arch mamba: unknown model family" "$T" train "${RUN[@]}" --arch mamba --steps 1
bad "odd head size" "needs an even head size" "$T" train "${RUN[@]}" --arch llama --heads 4 --embd 36 --steps 1
bad "resume into another family" "the checkpoint is of another model" "$T" train "${RUN[@]}" --arch gpt2 \
  --layers 2 --heads 4 --embd 32 --seq 16 --steps 8 --resume "$tmp/ck/latest"
[ $fails -eq 0 ] && echo "test_llama: ok" || echo "test_llama: $fails failures"
exit $((fails != 0))
