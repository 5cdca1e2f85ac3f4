#!/usr/bin/env bash
# --tokenizer cl100k and o200k end to end (no node needed; the tokens
# themselves are bpe_reference_tiktoken's):
# - `train --data TEXT --tokenizer cl100k` trains with its vocabulary
#   (100277) and the checkpoint records the tokenizer; `eval` reads the text
#   back with it (o200k's, and --resume's, are the same code: ckpt.c loads
#   the tables the manifest names; o200k's vocabulary is checked below);
# - `tokenize --tokenizer T` writes shards of T's ids (cl100k: llm.c's
#   uint32 files, o200k: Megatron's int32 .bin + .idx, the formats for ids
#   above 65535) that `train --data DIR` reads back as T's tokens, equal to
#   the in-memory encoding of the text (bpe_tool shards);
# - `export` of a cl100k (hf-gpt2) and an o200k (hf-llama) checkpoint
#   writes a tokenizer.json that `tokenize --tokenizer FILE.json` (PCRE2,
#   bpe_hfjson.c) turns into the same shard bytes as --tokenizer cl100k /
#   o200k on tinyshakespeare and on bpe_tool's stress text (whose code
#   points PCRE2's older Unicode tables classify as the matchers do), and
#   `import` of the hf-llama export takes o200k back from its config.json;
#   both exports name <|endoftext|> as eos (config.json, generation_config.json,
#   tokenizer_config.json);
# - a missing rank file, or another tokenizer's, is one error line naming
#   the file and the environment variable; so are a --tokenizer that
#   contradicts the shards' data.json and a --vocab other than T's.
# Usage: test_tiktoken_cli.sh TRIDENT BPE_TOOL DATA_DIR
set -u
T=$1 tool=$2 data=$3
source "$(dirname "$0")/../cli/expect_lib.sh"
head -c 20000 "$data/tinyshakespeare.txt" >"$tmp/small.txt"
Q="--layers 1 --embd 16 --heads 2 --seq 8 --batch 2 --eval-every 0 --threads 1"

out=$("$T" train --data "$tmp/small.txt" --tokenizer cl100k $Q --steps 1 --out "$tmp/ck" 2>&1)
if [ $? -eq 0 ] && grep -q "^data: .*(cl100k, vocab 100277, split 90/10)" <<<"$out" &&
   grep -q "V=100277 " <<<"$out" && grep -rq '"tokenizer": {"kind": "cl100k", "vocab": 100277}' "$tmp/ck"; then
  ok "train --tokenizer cl100k: $(grep -m1 '^data:' <<<"$out")"
else fail "train --tokenizer cl100k" "$out"; fi
out=$("$T" eval --ckpt "$tmp/ck" --data "$tmp/small.txt" --batch 2 --max-tokens 32 --threads 1 2>&1)
if [ $? -eq 0 ] && grep -q "^eval: tokens" <<<"$out"; then ok "eval of a cl100k checkpoint: $(grep '^eval: tokens' <<<"$out")"
else fail "eval --ckpt (cl100k)" "$out"; fi

for tf in cl100k:llmc:20240801 o200k:megatron:MMIDIDX; do
  tk=${tf%%:*} rest=${tf#*:} fmt=${rest%%:*} magic=${rest#*:}
  "$T" tokenize --tokenizer "$tk" --format "$fmt" "$tmp/small.txt" --out "$tmp/sh_$tk" --shard-tokens 3000 \
    >"$tmp/log" 2>&1 || fail "tokenize --tokenizer $tk --format $fmt" "$(cat "$tmp/log")"
  head=$( [ "$fmt" = llmc ] && od -An -tu4 -N4 "$tmp/sh_$tk/small_train_000000.bin" | xargs ||
          head -c 7 "$tmp/sh_$tk/small_train_000000.idx")
  if out=$("$tool" --tokenizer="$tk" shards "$tmp/sh_$tk" "$tmp/small.txt" 2>&1) && [ "$head" = "$magic" ]; then
    ok "tokenize --tokenizer $tk --format $fmt ($head): $out"
  else fail "tokenize --tokenizer $tk --format $fmt: first shard's magic '$head'" "$out"; fi
done

"$tool" stress "$tmp/stress.txt" 100000 >/dev/null
"$T" train --data "$tmp/small.txt" --tokenizer o200k --arch llama --layers 1 --heads 2 --embd 16 --ffn-hidden 16 \
  --seq 8 --batch 2 --eval-every 0 --threads 1 --steps 1 --out "$tmp/ck_o200k" >"$tmp/log" 2>&1 ||
  fail "train --tokenizer o200k --arch llama" "$(cat "$tmp/log")"
for tf in cl100k:ck:hf-gpt2 o200k:ck_o200k:hf-llama; do
  tk=${tf%%:*} rest=${tf#*:} ck=${rest%%:*} fmt=${rest#*:}
  out=$("$T" export --ckpt "$tmp/$ck" --format "$fmt" --out "$tmp/hf_$tk" 2>&1)
  if [ $? -ne 0 ] || ! grep -q "tokenizer.json: tiktoken's ${tk}_base, [0-9]* tokens, [0-9]* merges, tokenizer_config.json)$" <<<"$out"; then
    fail "export --format $fmt of a $tk checkpoint" "$out"; continue
  fi
  # <|endoftext|> as bos and eos: its id in config.json, generation_config.json
  # and tokenizer_config.json (once null, and no tokenizer_config.json)
  if eos=$(/usr/bin/python3 - "$tmp/hf_$tk" "$tk" <<'P'
import json, sys
d, tk = sys.argv[1:3]
want = {"cl100k": 100257, "o200k": 199999}[tk]
c = json.load(open(d + "/config.json"))
g = json.load(open(d + "/generation_config.json"))
t = json.load(open(d + "/tokenizer_config.json"))
j = json.load(open(d + "/tokenizer.json"))
added = {a["content"]: a["id"] for a in j["added_tokens"]}
assert added["<|endoftext|>"] == want, added
assert c["eos_token_id"] == c["bos_token_id"] == g["eos_token_id"] == g["bos_token_id"] == want, (c, g)
assert t["eos_token"] == t["bos_token"] == "<|endoftext|>" and t["tokenizer_class"] == "PreTrainedTokenizerFast", t
assert t["added_tokens_decoder"][str(want)]["content"] == "<|endoftext|>", t
print(want)
P
  ); then ok "export $fmt of $tk: eos_token_id $eos in config.json, generation_config.json, tokenizer_config.json"
  else fail "export $fmt of $tk: eos and tokenizer_config.json"; fi
  same=1
  for tok in "$tmp/hf_$tk/tokenizer.json" "$tk"; do
    "$T" tokenize --tokenizer "$tok" --format llmc "$data/tinyshakespeare.txt" "$tmp/stress.txt" \
      --out "$tmp/tj_${tok##*/}" >"$tmp/log" 2>&1 || fail "tokenize --tokenizer $tok" "$(cat "$tmp/log")"
  done
  for f in "$tmp/tj_$tk"/*.bin; do cmp "$f" "$tmp/tj_tokenizer.json/${f##*/}" >>"$tmp/cmp" 2>&1 || same=0; done
  ls "$tmp/tj_$tk"/*.bin >/dev/null 2>&1 || same=0
  rm -rf "$tmp/tj_$tk" "$tmp/tj_tokenizer.json"
  if [ $same -eq 1 ]; then ok "export $fmt: tokenizer.json tokenizes as $tk: $(grep -o 'tokenizer.json: .*' <<<"$out")"
  else fail "tokenizer.json of $tk: shards differ from --tokenizer $tk's" "$(cat "$tmp/cmp")"; fi
done
out=$("$T" import --format hf-llama --in "$tmp/hf_o200k" --out "$tmp/imp_o200k" 2>&1)
if [ $? -eq 0 ] && grep -q "V 200019, .*tokenizer o200k)$" <<<"$out"; then ok "import of that hf-llama export: $out"
else fail "import --format hf-llama of an o200k export" "$out"; fi

expect missing-file "cl100k_base tokenizer file $tmp/nope.bpe: cannot be read: No such file.*TRIDENT_CL100K_BPE" \
  env TRIDENT_CL100K_BPE="$tmp/nope.bpe" "$T" train --data "$tmp/small.txt" --tokenizer cl100k $Q --steps 1
expect other-ranks "o200k_base tokenizer file $data/cl100k.bpe holds 100256 ranks .*not o200k_base's 199998" \
  env TRIDENT_O200K_BPE="$data/cl100k.bpe" "$T" train --data "$tmp/small.txt" --tokenizer o200k $Q --steps 1
expect contradicts "--tokenizer cl100k contradicts $tmp/sh_o200k/data.json, which says the shards were tokenized with o200k" \
  "$T" train --data "$tmp/sh_o200k" --tokenizer cl100k $Q --steps 1
expect vocab "--vocab 100 with --tokenizer cl100k, whose vocabulary is 100277" \
  "$T" train --data "$tmp/sh_cl100k" --tokenizer cl100k --vocab 100 $Q --steps 1
[ $fails -eq 0 ] && echo "tiktoken cli: all passed"
exit $fails
