#!/usr/bin/env bash
# A BPE tokenizer token for token against the reference, js-tiktoken 1.0.21
# run by node, on the tiny Shakespeare text, a generated stress text and a
# "soup" of the patterns' edge-case characters in random order
# (gpt2 also on Debian's fortunes corpus; cl100k and o200k on a stress text
# whose long words repeat a word up to 8 times instead of 90, for CI time:
# the reference's merge is quadratic in a word's length, and the merge of
# long pieces is the same code for every tokenizer); decode(encode(x)) == x and
# 1 thread == 2, 3 threads on each; the patterns' character classes against
# node's for every code point (once, with gpt2).
# Usage: test_bpe_ref.sh BPE_TOOL DATA_DIR SOURCE_DIR [gpt2|cl100k|o200k...]
# (default gpt2). Skips (exit 77) only when node is not installed at all.
set -euo pipefail
tool=$1 data=$2 src=$3
shift 3
tokenizers=("${@:-gpt2}")
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh installs it)"; exit 77; }
"$src/scripts/js_tiktoken.sh" check ||
  { echo "FAIL: js-tiktoken 1.0.21 is not installed in $("$src/scripts/js_tiktoken.sh" dir); run scripts/deps.sh"; exit 1; }
pkg=$("$src/scripts/js_tiktoken.sh" dir)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
node "$src/tests/bpe/ref.cjs" stress 1 "$work/stress.txt"
node "$src/tests/bpe/ref.cjs" stress 2 "$work/stress_short.txt" 20000 8
node "$src/tests/bpe/ref.cjs" soup 1 "$work/soup.txt"
for tk in "${tokenizers[@]}"; do
  files=("$data/tinyshakespeare.txt" "$work/stress_short.txt" "$work/soup.txt")
  if [[ $tk == gpt2 ]]; then
    files=("$data/tinyshakespeare.txt" "$work/stress.txt" "$work/soup.txt")
    "$tool" classes "$work/classes"
    node "$src/tests/bpe/ref.cjs" classes "$work/classes"
    "$src/scripts/corpus.sh" "$work/fortunes.txt"
    files+=("$work/fortunes.txt")
  fi
  pairs=()
  for k in "${!files[@]}"; do
    "$tool" --tokenizer="$tk" encode "${files[$k]}" "$work/ids$k"
    "$tool" --tokenizer="$tk" roundtrip "${files[$k]}"
    pairs+=("${files[$k]}" "$work/ids$k")
  done
  node "$src/tests/bpe/ref.cjs" compare "$pkg" "$tk" "${pairs[@]}"
done
