#!/usr/bin/env bash
# `trident tokenize` and --tokenizer gpt2 end to end (no node needed):
# - shards written at 1 and 2 threads are the same bytes, and their headers
#   are llm.c's (20240520, 1, count; then uint16 tokens);
# - `train --data DIR --tokenizer gpt2` reads them back equal to the
#   in-memory encoding of the text (bpe_tool shards), and trains on them;
# - several inputs are documents, each starting with <|endoftext|>;
# - a trained gpt2 checkpoint samples valid UTF-8 (`trident sample`);
# - errors: missing or corrupt tokenizer file, text that is not UTF-8 (with
#   its byte offset), a bad --tokenizer, stale shards in --out; each one
#   line "trident: error: ..." with exit status 2.
# Usage: test_tokenize_cli.sh TRIDENT BPE_TOOL DATA_DIR
set -u
T=$1 tool=$2 data=$3
source "$(dirname "$0")/../cli/expect_lib.sh"
text=$data/tinyshakespeare.txt

"$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/one" --threads 1 --shard-tokens 100000 >"$tmp/log1" 2>&1 &&
"$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/two" --threads 2 --shard-tokens 100000 >"$tmp/log2" 2>&1 ||
  fail "tokenize runs" "$(cat "$tmp/log1" "$tmp/log2")"
n1=$(ls "$tmp/one"/*.bin | wc -l)
if [ "$n1" -eq 5 ] && [ -f "$tmp/one/data.json" ] &&
   [ -z "$(cd "$tmp/one" && for f in *; do cmp -s "$f" "../two/$f" || echo "$f"; done)" ]; then
  ok "1 and 2 threads write the same $n1 shards and data.json: $(tail -1 "$tmp/log2")"
else fail "1 and 2 threads: $n1 shards, or they differ" "$(ls -l "$tmp/one" "$tmp/two")"; fi
hdr=$(od -An -tu4 -N12 "$tmp/one/tinyshakespeare_train_000000.bin" | xargs)
size=$(stat -c %s "$tmp/one/tinyshakespeare_train_000000.bin")
first=$(od -An -tu2 -j1024 -N2 "$tmp/one/tinyshakespeare_train_000000.bin" | xargs)
if [ "$hdr" = "20240520 1 100000" ] && [ "$size" -eq $((1024 + 2 * 100000)) ] && [ "$first" = 50256 ]; then
  ok "llm.c header ($hdr), $size bytes, first token <|endoftext|>"
else fail "shard header '$hdr', size $size, first token $first"; fi

if out=$("$tool" shards "$tmp/one" "$text" 2>&1); then ok "$out"; else fail "shards read back" "$out"; fi
out=$("$T" train --data "$tmp/one" --tokenizer gpt2 --layers 1 --embd 32 --heads 2 --seq 16 --batch 4 \
      --steps 3 --eval-every 3 --eval-iters 2 --threads 1 --out "$tmp/ck" --sample-tokens 20 2>&1)
if [ $? -eq 0 ] && grep -q "4 train + 1 val shards" <<<"$out" && grep -q "val loss" <<<"$out"; then
  ok "train --data DIR --tokenizer gpt2: $(grep -m1 '^data:' <<<"$out")"
else fail "train --data DIR" "$out"; fi
# a glob picks the same shards
out=$("$T" train --data "$tmp/one/tinyshakespeare_*.bin" --layers 1 --embd 32 --heads 2 --seq 16 \
      --batch 4 --steps 1 --eval-every 0 --threads 1 2>&1)
if [ $? -eq 0 ] && grep -q "4 train + 1 val shards (token ids)" <<<"$out"; then ok "train --data 'GLOB'"
else fail "train --data GLOB" "$out"; fi

# sampling: 300 tokens of an untrained model decode to valid UTF-8 (random
# tokens end inside characters; the held bytes complete or print U+FFFD)
"$T" sample --ckpt "$tmp/ck" --tokens 300 --seed 7 >"$tmp/sample" 2>&1
if [ $? -eq 0 ] && iconv -f UTF-8 -t UTF-8 "$tmp/sample" >/dev/null 2>&1 && [ "$(wc -c <"$tmp/sample")" -gt 300 ]; then
  ok "trident sample decodes gpt2 tokens to valid UTF-8 ($(wc -c <"$tmp/sample") bytes)"
else fail "sample is not valid UTF-8" "$(head -c 300 "$tmp/sample")"; fi

out=$("$T" sample --ckpt "$tmp/ck" --tokens 5 --prompt "Wherefore art thou, Ромео? " 2>&1)
if [ $? -eq 0 ] && grep -q "^Wherefore art thou, Ромео? " <<<"$out"; then ok "sample --prompt (UTF-8) encodes with gpt2"
else fail "sample --prompt" "$out"; fi

# two documents: <|endoftext|> A <|endoftext|> B, the same as encoding each
printf 'Hello world.\n' >"$tmp/a.txt"; printf ' <|endoftext|> is text here\n' >"$tmp/b.txt"
"$T" tokenize --tokenizer gpt2 "$tmp/a.txt" "$tmp/b.txt" --out "$tmp/docs" --val-fraction 0 >/dev/null 2>&1
"$tool" encode "$tmp/a.txt" "$tmp/a.ids" && "$tool" encode "$tmp/b.txt" "$tmp/b.ids"
want="50256 $(od -An -td4 -v "$tmp/a.ids" | xargs) 50256 $(od -An -td4 -v "$tmp/b.ids" | xargs)"
have=$(od -An -tu2 -v -j1024 "$tmp/docs/a_train_000000.bin" | xargs)
if [ "$want" = "$have" ] && [ ! -e "$tmp/docs/a_val_000000.bin" ]; then ok "two documents: $have"
else fail "two documents: want '$want', have '$have'"; fi

# errors: one line, exit 2, naming the file and what is valid
head -c 1000 "$data/gpt2.bpe" >"$tmp/short.bpe"
cp "$data/gpt2.bpe" "$tmp/flip.bpe"; printf 'X' | dd of="$tmp/flip.bpe" bs=1 seek=200000 conv=notrunc 2>/dev/null
printf 'abc\xe2\x82 def' >"$tmp/bad.txt"
Q="--layers 1 --embd 32 --heads 2 --seq 4 --batch 2 --steps 1"
expect missing-file "GPT-2 tokenizer file $tmp/nope.bpe: cannot be read: No such file" \
  env TRIDENT_GPT2_BPE="$tmp/nope.bpe" "$T" train --data "$text" --tokenizer gpt2 $Q
expect truncated "GPT-2 tokenizer file $tmp/short.bpe: truncated" \
  env TRIDENT_GPT2_BPE="$tmp/short.bpe" "$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/x1"
expect corrupt "$tmp/flip.bpe: checksum mismatch, the file is corrupt" \
  env TRIDENT_GPT2_BPE="$tmp/flip.bpe" "$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/x2"
expect not-bpe "not a trident BPE rank file" \
  env TRIDENT_GPT2_BPE="$text" "$T" train --data "$text" --tokenizer gpt2 $Q
expect not-utf8-train "bad.txt: the text is not valid UTF-8 at byte 3" "$T" train --data "$tmp/bad.txt" --tokenizer gpt2 $Q
expect not-utf8-tokenize "input $tmp/bad.txt: the text is not valid UTF-8 at byte 3.*gpt2 reads UTF-8 text" \
  "$T" tokenize --tokenizer gpt2 "$tmp/bad.txt" --out "$tmp/x3"
expect unknown-tokenizer "tokenize --tokenizer char is not known; valid: gpt2" \
  "$T" tokenize --tokenizer char "$text" --out "$tmp/x4"
expect stale-shards "already holds 5 shard(s) (e.g. .*tinyshakespeare_train_000000.bin); a directory holds one shard set" \
  "$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/one"
expect no-inputs "no input files" "$T" tokenize --tokenizer gpt2 --out "$tmp/x5"
expect bad-fraction "tokenize --val-fraction: '1' is out of range; valid: \[0, 1)" \
  "$T" tokenize --tokenizer gpt2 "$text" --out "$tmp/x6" --val-fraction 1
expect gpt2-vocab "--vocab 100 with --tokenizer gpt2" "$T" train --data "$tmp/one" --tokenizer gpt2 --vocab 100 $Q
expect bad-prompt "--sample-prompt: the text is not valid UTF-8 at byte 2" \
  "$T" train --data "$tmp/one" --tokenizer gpt2 --sample-prompt "$(printf 'ab\xff')" --sample-tokens 3 $Q
[ $fails -eq 0 ] && echo "tokenize cli: all passed"
exit $fails
