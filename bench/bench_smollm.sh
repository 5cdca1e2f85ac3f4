#!/usr/bin/env bash
# A SmolLM-135M-shaped Llama with tiktoken's cl100k vocabulary (~164M
# parameters: the preset smollm-135m, L30 H9 kv 3 C576 F1536, tied, with
# V 100277 instead of its own 49152) trained from raw text at dp 2, T 256,
# batch 4, bf16 for STEPS steps; then saved, exported to a Hugging Face
# Llama directory (fp32), imported back, and checked: parameters bitwise
# equal (interop_tool cmp) and the logits of a forward pass on the same
# 256 tokens equal bit for bit (interop_tool logits on both checkpoints).
# Prints the run's loss, throughput and memory lines, the export/import
# times and sizes, and the comparison. Outside CI (minutes on 2 cores).
#
# Environment: STEPS (20), THREADS (1 per rank), BUILD_DIR (build), KEEP
# (a directory to keep the outputs in instead of a temporary one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STEPS=${STEPS:-20}
THREADS=${THREADS:-1}
BUILD_DIR=${BUILD_DIR:-build}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
die() { echo "bench_smollm: error: $*" >&2; exit 1; }
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || die "STEPS='$STEPS' must be a positive integer"
if [[ -n "${KEEP:-}" ]]; then tmp=$KEEP; mkdir -p "$tmp"; else tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$tmp/build.log" 2>&1 &&
  cmake --build "$BUILD_DIR" -j2 --target trident interop_tool >>"$tmp/build.log" 2>&1 ||
  { tail -n 40 "$tmp/build.log" >&2; die "build failed"; }
T=$BUILD_DIR/trident
TOOL=$(find "$BUILD_DIR" -name interop_tool -type f -perm -u+x | head -1)
[[ -x "$TOOL" ]] || die "interop_tool was not built"
echo "== bench_smollm: smollm-135m with cl100k, dp 2, T 256, batch 4, bf16, $STEPS steps"
echo "   $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
s=$SECONDS
"${MPIRUN[@]}" -np 2 "$T" train --model smollm-135m --tokenizer cl100k --data data/tinyshakespeare.txt --dp 2 \
  --seq 256 --batch 4 --precision bf16 --steps "$STEPS" --warmup 5 --eval-every 0 --log-every 5 \
  --threads "$THREADS" --out "$tmp/ck" --overwrite >"$tmp/train.out" 2>&1 ||
  { tail -n 30 "$tmp/train.out" >&2; die "training failed"; }
grep -E "^(model|data|step|done|memory per rank)" "$tmp/train.out" | sed 's/^/   /'
grep -A3 "^memory per rank (planned vs measured" "$tmp/train.out" | tail -n +2 | sed 's/^/   /'
echo "   train: $((SECONDS - s)) s"
s=$SECONDS
"$T" export --ckpt "$tmp/ck" --format hf-llama --out "$tmp/hf" --overwrite | sed 's/^/   /'
echo "   export: $((SECONDS - s)) s, $(du -sh "$tmp/hf" | cut -f1)"
s=$SECONDS
"$T" import --format hf-llama --in "$tmp/hf" --out "$tmp/im" --seq 256 --tokenizer cl100k --overwrite | sed 's/^/   /'
echo "   import: $((SECONDS - s)) s"
"$TOOL" cmp "$tmp/ck" "$tmp/im" && echo "   parameters: the reimported checkpoint equals the trained one bitwise" ||
  die "the reimported parameters differ"
"$TOOL" logits "$tmp/ck" "$tmp/tok_a" "$tmp/log_a" >/dev/null
"$TOOL" logits "$tmp/im" "$tmp/tok_b" "$tmp/log_b" >/dev/null
if cmp -s "$tmp/tok_a" "$tmp/tok_b" && cmp -s "$tmp/log_a" "$tmp/log_b"; then
  echo "   logits: $(($(stat -c %s "$tmp/log_a") / 4)) values of a 256-token forward, bitwise equal"
else
  die "the logits of the reimported model differ"
fi
