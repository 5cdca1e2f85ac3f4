#!/usr/bin/env bash
# BPE encoding throughput: trident (1 thread and every core) against the
# reference, js-tiktoken 1.0.21 (getEncoding("gpt2"), "cl100k_base",
# "o200k_base"; ordinary encoding) run by node, on the same text in the same
# run: the default corpus (Debian's fortunes, scripts/corpus.sh, about 2.6 MB).
#
# Targets: trident single-threaded >= 2x the reference's MB/s for gpt2, >= 10x
# for cl100k and o200k. Each side encodes the text in memory (trident: from
# UTF-8 bytes already checked, the tables loaded; js-tiktoken: encode() on a
# string already decoded). gpt2 is timed by `trident tokenize` (its encoding
# time), with the whole run (loading the tables, reading, checking and
# writing the shards) beside it; cl100k and o200k, whose ids do not fit the
# shards tokenize writes, by the test tool bpe_tool bench (the same encoder
# calls, fresh encoders, without the shards). REPS runs (default 3) are
# interleaved and the best of each kept. A benchmark never fails on speed:
# it prints the ratios with PASS/BELOW and exits 0; non-zero only when
# something cannot be built or run.
#
# Environment: REPS (3), BUILD_DIR (build), TEXT (a UTF-8 file instead of
# the corpus), TRIDENT and BPE_TOOL (binaries instead of building BUILD_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPS=${REPS:-3}
BUILD_DIR=${BUILD_DIR:-build}
die() { echo "bench_tokenizer: error: $*" >&2; exit 1; }
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
command -v node >/dev/null || die "node is missing; run scripts/deps.sh"
scripts/js_tiktoken.sh check || die "js-tiktoken 1.0.21 is missing; run scripts/deps.sh"
pkg=$(scripts/js_tiktoken.sh dir)
if [[ -n "${TRIDENT:-}" && -n "${BPE_TOOL:-}" ]]; then T=$TRIDENT B=$BPE_TOOL; else
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target trident bpe_tool >/dev/null
  T=${TRIDENT:-$BUILD_DIR/trident} B=${BPE_TOOL:-$BUILD_DIR/tests/bpe/bpe_tool}
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [[ -z "${TEXT:-}" ]]; then
  mkdir -p "$BUILD_DIR/data"
  [[ -s "$BUILD_DIR/data/fortunes.txt" ]] || scripts/corpus.sh "$BUILD_DIR/data/fortunes.txt"
  TEXT=$BUILD_DIR/data/fortunes.txt
fi
N=$(nproc)
best() { sort -g | tail -1; }
for ((r = 1; r <= REPS; r++)); do
  for th in 1 "$N"; do
    rm -rf "$tmp/out"
    "$T" tokenize --tokenizer gpt2 "$TEXT" --out "$tmp/out" --threads "$th" --val-fraction 0 >"$tmp/log" ||
      die "trident tokenize failed"
    enc=$(sed -n 's/^tokenize: encoding \([0-9.]*\) MB\/s.*/\1/p' "$tmp/log")
    whole=$(sed -n 's/^tokenize: encoding .*whole run \([0-9.]*\) s$/\1/p' "$tmp/log")
    echo "$enc" >>"$tmp/enc_$th"
    awk -v b="$(stat -c %s "$TEXT")" -v s="$whole" 'BEGIN { printf "%.2f\n", b / 1e6 / s }' >>"$tmp/whole_$th"
    tokens=$(sed -n 's/.* -> \([0-9]*\) tokens .*/\1/p' "$tmp/log")
  done
  node tests/bpe/ref.cjs bench "$pkg" "$TEXT" 2 >"$tmp/js_line" || die "the reference failed"
  sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/js_line" >>"$tmp/js"
  for tk in cl100k o200k; do
    for th in 1 "$N"; do
      "$B" --tokenizer="$tk" bench "$TEXT" "$th" >"$tmp/line" || die "bpe_tool bench $tk failed"
      sed -n 's/.*: \([0-9.]*\) MB\/s, \([0-9]*\) tokens.*/\1/p' "$tmp/line" >>"$tmp/enc_${tk}_$th"
      sed -n 's/.* MB\/s, \([0-9]*\) tokens.*/\1/p' "$tmp/line" >"$tmp/tokens_$tk"
    done
    node tests/bpe/ref.cjs bench "$pkg" "$TEXT" 2 "$tk" >"$tmp/js_line_$tk" || die "the reference failed ($tk)"
    sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p' "$tmp/js_line_$tk" >>"$tmp/js_$tk"
  done
done
t1=$(best <"$tmp/enc_1") tn=$(best <"$tmp/enc_$N") js=$(best <"$tmp/js")
w1=$(best <"$tmp/whole_1") wn=$(best <"$tmp/whole_$N")
echo "text: $TEXT ($(stat -c %s "$TEXT") bytes, $tokens GPT-2 tokens), best of $REPS, $(nproc) cores"
printf '%-44s %10s\n' "encoder" "MB/s"
printf '%-44s %10s   (whole tokenize run %s MB/s)\n' "trident, 1 thread" "$t1" "$w1"
printf '%-44s %10s   (whole tokenize run %s MB/s)\n' "trident, $N threads" "$tn" "$wn"
printf '%-44s %10s\n' "$(sed 's/: [0-9.]* MB\/s.*//' "$tmp/js_line")" "$js"
awk -v a="$t1" -v b="$tn" -v j="$js" -v n="$N" 'BEGIN {
  r = a / j
  printf "ratio trident 1 thread / js-tiktoken: %.1fx (target >= 2x: %s); %d threads / 1 thread: %.2fx\n",
    r, (r >= 2 ? "PASS" : "BELOW"), n, b / a }'
for tk in cl100k o200k; do
  a=$(best <"$tmp/enc_${tk}_1") b=$(best <"$tmp/enc_${tk}_$N") j=$(best <"$tmp/js_$tk")
  echo
  echo "$tk ($(cat "$tmp/tokens_$tk") tokens), bpe_tool bench, best of $REPS"
  printf '%-44s %10s\n' "trident $tk, 1 thread" "$a"
  printf '%-44s %10s\n' "trident $tk, $N threads" "$b"
  printf '%-44s %10s\n' "$(sed 's/: [0-9.]* MB\/s.*//' "$tmp/js_line_$tk")" "$j"
  awk -v a="$a" -v b="$b" -v j="$j" -v n="$N" -v tk="$tk" 'BEGIN {
    r = a / j
    printf "ratio trident %s 1 thread / js-tiktoken: %.1fx (target >= 10x: %s); %d threads / 1 thread: %.2fx\n",
      tk, r, (r >= 10 ? "PASS" : "BELOW"), n, b / a }'
done
