#!/usr/bin/env bash
# --tokenizer cl100k and o200k end to end (no node needed; the tokens
# themselves are bpe_reference_tiktoken's):
# - `train --data TEXT --tokenizer T` trains with T's vocabulary (100277,
#   200019) and its checkpoint records the tokenizer; `eval` reads the text
#   back with a cl100k checkpoint's (o200k's, and --resume's, are the same
#   code: ckpt.c loads the tables the manifest names);
# - `tokenize --tokenizer T` is refused before any work, in one line naming
#   the vocabulary that does not fit the uint16 shards, and leaves no --out;
# - a missing rank file, or another tokenizer's, is one error line naming
#   the file and the environment variable.
# Usage: test_tiktoken_cli.sh TRIDENT DATA_DIR
set -u
T=$1 data=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -5; fails=$((fails+1)); }
head -c 20000 "$data/tinyshakespeare.txt" >"$tmp/small.txt"
Q="--layers 1 --embd 16 --heads 2 --seq 8 --batch 2 --eval-every 0 --threads 1"

for tv in cl100k:100277 o200k:200019; do
  tk=${tv%:*} V=${tv#*:}
  out=$("$T" train --data "$tmp/small.txt" --tokenizer "$tk" $Q --steps 1 --out "$tmp/ck_$tk" 2>&1)
  if [ $? -eq 0 ] && grep -q "^data: .*($tk, vocab $V, split 90/10)" <<<"$out" &&
     grep -q "V=$V " <<<"$out" && grep -rq "\"tokenizer\": {\"kind\": \"$tk\", \"vocab\": $V}" "$tmp/ck_$tk"; then
    ok "train --tokenizer $tk: $(grep -m1 '^data:' <<<"$out")"
  else fail "train --tokenizer $tk" "$out"; fi
  [ "$tk" = cl100k ] || continue
  out=$("$T" eval --ckpt "$tmp/ck_$tk" --data "$tmp/small.txt" --batch 2 --max-tokens 32 --threads 1 2>&1)
  if [ $? -eq 0 ] && grep -q "^eval: tokens" <<<"$out"; then ok "eval of a $tk checkpoint: $(grep '^eval: tokens' <<<"$out")"
  else fail "eval --ckpt ($tk)" "$out"; fi
done

expect() {
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out"; then ok "$name: $out"
  else fail "$name (exit $rc, want '$want')" "$out"; fi
}
expect tokenize-cl100k "tokenize --tokenizer cl100k: vocabulary 100277 does not fit uint16 shards" \
  "$T" tokenize --tokenizer cl100k "$tmp/small.txt" --out "$tmp/shards"
if [ ! -e "$tmp/shards" ]; then ok "a refused tokenize leaves no --out"; else fail "--out exists"; fi
expect missing-file "cl100k_base tokenizer file $tmp/nope.bpe: cannot be read: No such file.*TRIDENT_CL100K_BPE" \
  env TRIDENT_CL100K_BPE="$tmp/nope.bpe" "$T" train --data "$tmp/small.txt" --tokenizer cl100k $Q --steps 1
expect other-ranks "o200k_base tokenizer file $data/cl100k.bpe holds 100256 ranks .*not o200k_base's 199998" \
  env TRIDENT_O200K_BPE="$data/cl100k.bpe" "$T" train --data "$tmp/small.txt" --tokenizer o200k $Q --steps 1
expect token-file "--tokenizer cl100k applies to text files only" \
  "$T" train --data "$tmp/ck_cl100k/none.bin" --tokenizer cl100k $Q --steps 1
[ $fails -eq 0 ] && echo "tiktoken cli: all passed"
exit $fails
