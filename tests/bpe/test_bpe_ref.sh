#!/usr/bin/env bash
# The GPT-2 tokenizer token for token against the reference, js-tiktoken
# 1.0.21 run by node, on the tiny Shakespeare text, Debian's fortunes corpus
# and a generated stress text; decode(encode(x)) == x and 1 thread == 2, 3
# threads on each; the pattern's character classes against node's for every
# code point. Usage: test_bpe_ref.sh BPE_TOOL DATA_DIR SOURCE_DIR
# Skips (exit 77) only when node is not installed at all.
set -euo pipefail
tool=$1 data=$2 src=$3
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh installs it)"; exit 77; }
"$src/scripts/js_tiktoken.sh" check ||
  { echo "FAIL: js-tiktoken 1.0.21 is not installed in $("$src/scripts/js_tiktoken.sh" dir); run scripts/deps.sh"; exit 1; }
pkg=$("$src/scripts/js_tiktoken.sh" dir)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$tool" classes "$work/classes"
node "$src/tests/bpe/ref.cjs" classes "$work/classes"
"$src/scripts/corpus.sh" "$work/fortunes.txt"
node "$src/tests/bpe/ref.cjs" stress 1 "$work/stress.txt"
for f in "$data/tinyshakespeare.txt" "$work/fortunes.txt" "$work/stress.txt"; do
  "$tool" encode "$f" "$work/ids"
  node "$src/tests/bpe/ref.cjs" compare "$pkg" "$f" "$work/ids"
  "$tool" roundtrip "$f"
done
