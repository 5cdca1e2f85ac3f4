#!/usr/bin/env bash
# data/gpt2.bpe, committed, equals GPT-2's ranks as the reference package
# ships them (re-derived by scripts/gen_gpt2_bpe.cjs and compared byte for
# byte). Usage: test_bpe_ranks.sh DATA_DIR SOURCE_DIR. Skips (77) only
# without node.
set -euo pipefail
data=$1 src=$2
command -v node >/dev/null || { echo "SKIP: node is not installed (scripts/deps.sh installs it)"; exit 77; }
"$src/scripts/js_tiktoken.sh" check ||
  { echo "FAIL: js-tiktoken 1.0.21 is not installed in $("$src/scripts/js_tiktoken.sh" dir); run scripts/deps.sh"; exit 1; }
node "$src/scripts/gen_gpt2_bpe.cjs" check "$("$src/scripts/js_tiktoken.sh" dir)" "$data/gpt2.bpe"
