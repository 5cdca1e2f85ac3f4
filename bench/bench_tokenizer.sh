#!/usr/bin/env bash
# BPE encoding throughput: trident (1 thread and every core) against the
# reference, js-tiktoken 1.0.21 (getEncoding("gpt2"), "cl100k_base",
# "o200k_base"; ordinary encoding) run by node, on the same text in the same
# run: the default corpus (Debian's fortunes, scripts/corpus.sh, about 2.6 MB).
#
# Targets: trident single-threaded >= 2x the reference's MB/s for gpt2, >= 10x
# for cl100k and o200k. Each side encodes the text in memory (trident:
# `trident tokenize`'s encoding time, from UTF-8 bytes already checked;
# js-tiktoken: encode() on a string already decoded); trident's whole run
# (loading the tables, reading, checking and writing the shards: uint16 for
# gpt2, uint32 for the others) is printed beside it. REPS runs (default 3)
# are interleaved and the best of each kept. A benchmark never fails on speed:
# it prints the ratios with PASS/BELOW and exits 0; non-zero only when
# something cannot be built or run.
#
# Environment: REPS (3), BUILD_DIR (build), TEXT (a UTF-8 file instead of
# the corpus), TRIDENT (a trident binary instead of building BUILD_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPS=${REPS:-3}
BUILD_DIR=${BUILD_DIR:-build}
die() { echo "bench_tokenizer: error: $*" >&2; exit 1; }
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
command -v node >/dev/null || die "node is missing; run scripts/deps.sh"
scripts/js_tiktoken.sh check || die "js-tiktoken 1.0.21 is missing; run scripts/deps.sh"
pkg=$(scripts/js_tiktoken.sh dir)
if [[ -n "${TRIDENT:-}" ]]; then T=$TRIDENT; else
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target trident >/dev/null
  T=$BUILD_DIR/trident
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [[ -z "${TEXT:-}" ]]; then
  mkdir -p "$BUILD_DIR/data"
  [[ -s "$BUILD_DIR/data/fortunes.txt" ]] || scripts/corpus.sh "$BUILD_DIR/data/fortunes.txt"
  TEXT=$BUILD_DIR/data/fortunes.txt
fi
N=$(nproc)
TOKENIZERS="gpt2 cl100k o200k"
best() { sort -g | tail -1; }
for ((r = 1; r <= REPS; r++)); do
  for tk in $TOKENIZERS; do
    for th in 1 "$N"; do
      rm -rf "$tmp/out"
      "$T" tokenize --tokenizer "$tk" "$TEXT" --out "$tmp/out" --threads "$th" --val-fraction 0 >"$tmp/log" ||
        die "trident tokenize --tokenizer $tk failed"
      enc=$(sed -n 's/^tokenize: encoding \([0-9.]*\) MB\/s.*/\1/p' "$tmp/log")
      whole=$(sed -n 's/^tokenize: encoding .*whole run \([0-9.]*\) s$/\1/p' "$tmp/log")
      echo "$enc" >>"$tmp/enc_${tk}_$th"
      awk -v b="$(stat -c %s "$TEXT")" -v s="$whole" 'BEGIN { printf "%.2f\n", b / 1e6 / s }' >>"$tmp/whole_${tk}_$th"
      sed -n 's/.* -> \([0-9]*\) tokens .*/\1/p' "$tmp/log" >"$tmp/tokens_$tk"
    done
    node tests/bpe/ref.cjs bench "$pkg" "$TEXT" 2 "$tk" >"$tmp/js_line_$tk" || die "the reference failed ($tk)"
    sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/js_line_$tk" >>"$tmp/js_$tk"
  done
done
echo "text: $TEXT ($(stat -c %s "$TEXT") bytes), best of $REPS, $(nproc) cores"
for tk in $TOKENIZERS; do
  t1=$(best <"$tmp/enc_${tk}_1") tn=$(best <"$tmp/enc_${tk}_$N") js=$(best <"$tmp/js_$tk")
  w1=$(best <"$tmp/whole_${tk}_1") wn=$(best <"$tmp/whole_${tk}_$N")
  target=$([ "$tk" = gpt2 ] && echo 2 || echo 10)
  echo
  printf '%-48s %10s\n' "$tk ($(cat "$tmp/tokens_$tk") tokens)" "MB/s"
  printf '%-48s %10s   (whole tokenize run %s MB/s)\n' "trident, 1 thread" "$t1" "$w1"
  printf '%-48s %10s   (whole tokenize run %s MB/s)\n' "trident, $N threads" "$tn" "$wn"
  printf '%-48s %10s\n' "$(sed 's/: [0-9.]* MB\/s.*//' "$tmp/js_line_$tk")" "$js"
  awk -v a="$t1" -v b="$tn" -v j="$js" -v n="$N" -v t="$target" -v tk="$tk" 'BEGIN {
    r = a / j
    printf "ratio %s trident 1 thread / js-tiktoken: %.1fx (target >= %dx: %s); %d threads / 1 thread: %.2fx\n",
      tk, r, t, (r >= t ? "PASS" : "BELOW"), n, b / a }'
done
