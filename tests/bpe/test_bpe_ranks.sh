#!/usr/bin/env bash
# data/gpt2.bpe, data/cl100k.bpe and data/o200k.bpe, committed, equal the
# ranks and special tokens of js-tiktoken's gpt2, cl100k_base and o200k_base
# as the reference package ships them (re-derived by
# scripts/gen_bpe_ranks.cjs and compared byte for byte).
# Usage: test_bpe_ranks.sh DATA_DIR SOURCE_DIR. Skips (77) only without node.
set -euo pipefail
data=$1 src=$2
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh installs it)"; exit 77; }
"$src/scripts/js_tiktoken.sh" check ||
  { echo "FAIL: js-tiktoken 1.0.21 is not installed in $("$src/scripts/js_tiktoken.sh" dir); run scripts/deps.sh"; exit 1; }
pkg=$("$src/scripts/js_tiktoken.sh" dir)
node "$src/scripts/gen_bpe_ranks.cjs" check gpt2 "$pkg" "$data/gpt2.bpe"
node "$src/scripts/gen_bpe_ranks.cjs" check cl100k_base "$pkg" "$data/cl100k.bpe"
node "$src/scripts/gen_bpe_ranks.cjs" check o200k_base "$pkg" "$data/o200k.bpe"
