#!/usr/bin/env bash
# --tokenizer FILE.json end to end, with GPT-2's tokenizer.json (the Split +
# ByteLevel form, which test_bpe_hfjson writes from the shipped GPT-2 files)
# against --tokenizer gpt2 as the oracle:
# - `trident tokenize` writes the same shard bytes with either;
# - `train --data TEXT` prints the same losses with either; the checkpoint
#   records the file, so `sample` loads it, and refuses it once edited;
#   `export` copies it beside the model and `import --tokenizer` takes it;
# - `train --data SHARDS` needs the file back, checked by its XXH3;
# - a relative --tokenizer: --out keeps one copy that sample, eval and
#   export find from any directory; an older manifest (the path only) loads;
# - bad files (another model type, a missing file) are one
#   line "trident: error: --tokenizer FILE: ..." naming the field, exit
#   status 2 (test_bpe_hfjson refuses more kinds, in-process).
# Usage: test_hfjson_cli.sh TRIDENT TEST_BPE_HFJSON DATA_DIR
set -u
T=$1 tool=$2 data=$3
source "$(dirname "$0")/../cli/expect_lib.sh" # $tmp, ok, fail, expect
text=$data/tinyshakespeare.txt
tok=$tmp/tokenizer.json
"$tool" write split "$tok" || { echo "FAIL cannot write $tok"; exit 1; }

"$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/g" --shard-tokens 100000 >"$tmp/log" 2>&1 &&
"$T" tokenize --tokenizer "$tok" "$text" --out "$tmp/h" --shard-tokens 100000 >>"$tmp/log" 2>&1 ||
  fail "tokenize runs" "$(cat "$tmp/log")"
differ=$(cd "$tmp/g" && for f in *.bin; do cmp -s "$f" "../h/$f" || echo "$f"; done)
if [ -z "$differ" ] && [ "$(ls "$tmp/h"/*.bin | wc -l)" -eq 5 ] && grep -q '"tokenizer": "hf:' "$tmp/h/data.json"; then
  ok "tokenize: the 5 shards of FILE.json are byte for byte gpt2's; data.json names the file by XXH3"
else fail "tokenize: shards differ: $differ" "$(ls -l "$tmp/g" "$tmp/h")"; fi

small="--layers 1 --embd 32 --heads 2 --seq 16 --batch 4 --steps 2 --eval-every 2 --eval-iters 1 --threads 1"
losses() { grep -oE '(val )?loss [0-9.]+' | tr '\n' ' '; }
g=$("$T" train --data "$text" --tokenizer gpt2 $small 2>&1 | losses)
h=$("$T" train --data "$text" --tokenizer "$tok" $small --out "$tmp/ck" 2>&1 | losses)
if [ -n "$g" ] && [ "$g" = "$h" ]; then ok "train --data TEXT: the same losses as gpt2 ($h)"
else fail "train losses: gpt2 '$g', FILE.json '$h'"; fi

out=$("$T" sample --ckpt "$tmp/ck" --tokens 20 --seed 7 2>&1)
if [ $? -eq 0 ] && [ -n "$out" ]; then ok "sample loads the checkpoint's tokenizer.json"
else fail "sample" "$out"; fi
# export writes the file beside the model; import takes it back with it
out=$("$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out "$tmp/ex" 2>&1 &&
      "$T" import --format safetensors --in "$tmp/ex/model.safetensors" --config "$tmp/ex/config.json" \
        --tokenizer "$tmp/ex/tokenizer.json" --out "$tmp/imp" 2>&1)
if [ $? -eq 0 ] && cmp -s "$tok" "$tmp/ex/tokenizer.json" && grep -q "tokenizer hf" <<<"$out"; then
  ok "export copies tokenizer.json; import --tokenizer FILE.json takes it back"
else fail "export / import" "$out"; fi
out=$("$T" train --data "$tmp/h" --tokenizer "$tok" $small 2>&1)
if [ $? -eq 0 ] && [ "$(losses <<<"$out")" = "$h" ]; then ok "train --data SHARDS --tokenizer FILE.json: the same losses"
else fail "train --data SHARDS" "$out"; fi

expect "shards without their file" "give that file as --tokenizer FILE.json" \
  "$T" train --data "$tmp/h" $small
sed 's/"type": "BPE"/"type": "WordPiece"/' "$tok" >"$tmp/wordpiece.json"
expect "model type" "--tokenizer $tmp/wordpiece.json: model.type WordPiece is not supported" \
  "$T" train --data "$text" --tokenizer "$tmp/wordpiece.json" $small
out=$("$T" train --data "$text" --tokenizer "$tok" $small --sample-prompt "Hi" --sample-tokens 8 2>&1) &&
  ok "a prompt with a tokenizer.json" || fail "a prompt with a tokenizer.json" "$out"
expect "missing file" "nothere.json: cannot be read" \
  "$T" train --data "$text" --tokenizer "$tmp/nothere.json" $small
# a relative --tokenizer: the output directory keeps one copy (named by its
# XXH3), which the manifests name; sample, eval and export from elsewhere
mkdir -p "$tmp/a" "$tmp/b" && cp "$tok" "$tmp/a/tokA.json"
out=$(cd "$tmp/a" && "$T" train --data "$text" --tokenizer tokA.json $small --save-every 1 --out ../rel 2>&1) ||
  fail "train --tokenizer tokA.json (relative)" "$out"
copies=$(ls "$tmp/rel"/tokenizer-*.json 2>/dev/null | wc -l)
if [ "$copies" -eq 1 ] && cmp -s "$tok" "$tmp/rel"/tokenizer-*.json &&
   [ "$(grep -l '"copy": "tokenizer-' "$tmp/rel"/step-*/manifest.json | wc -l)" -eq 2 ]; then
  ok "--out keeps one copy of tokenizer.json, named by both steps' manifests"
else fail "the tokenizer's copy ($copies copies)" "$(ls "$tmp/rel")"; fi
out=$(cd "$tmp/b" && "$T" sample --ckpt ../rel --tokens 5 2>&1 &&
      "$T" eval --ckpt ../rel --data "$text" --max-tokens 2000 2>&1 &&
      "$T" export --ckpt ../rel --format hf-gpt2 --out ex 2>&1) && cmp -s "$tok" "$tmp/b/ex/tokenizer.json" &&
  ok "sample, eval and export from another directory find the copy" || fail "from another directory" "$out"
# an older manifest (a path, no copy) still loads, from where the path holds
mkdir -p "$tmp/old" && cp -r "$tmp/rel/step-00000002" "$tmp/old/" &&
  sed -i 's/, "copy": "tokenizer-[0-9a-f]*\.json"//' "$tmp/old/step-00000002/manifest.json" &&
  /usr/bin/python3 "$(dirname "$0")/../cli/ckpt_xxh3.py" reseal "$tmp/old/step-00000002" >/dev/null
out=$(cd "$tmp/a" && "$T" sample --ckpt ../old/step-00000002 --tokens 5 2>&1) &&
  ! grep -q '"copy"' "$tmp/old/step-00000002/manifest.json" &&
  ok "a manifest with only the path still loads" || fail "an older manifest" "$out"
# the checkpoint's own copy edited: refused as before
sed -i 's/"ignore_merges": true/"ignore_merges": false/' "$tmp/rel"/tokenizer-*.json
expect "an edited file" "has changed since the checkpoint was saved" \
  "$T" sample --ckpt "$tmp/rel" --tokens 5
[ $fails -eq 0 ] && echo "hf tokenizer cli: all passed" || echo "hf tokenizer cli: $fails FAILED"
exit $((fails != 0))
