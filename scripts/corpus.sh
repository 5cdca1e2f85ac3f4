#!/usr/bin/env bash
# Writes the default English corpus: the text of Debian's `fortunes` package
# (quotations, poems, literature; about 2.6 MB) concatenated into one file.
set -euo pipefail
out=${1:?usage: corpus.sh OUT}
dir=/usr/share/games/fortunes
[ -d "$dir" ] || { echo "corpus: $dir missing; run scripts/deps.sh" >&2; exit 1; }
tmp="$out.tmp.$$"
for f in "$dir"/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && cat "$f"
done > "$tmp"
mv "$tmp" "$out"
