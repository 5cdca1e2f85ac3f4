#!/usr/bin/env bash
# The Llama family's speed beside PyTorch (issue 26): a Llama of ~10M
# parameters with the char vocabulary (L6 C384 H6 kv 2, F 1024 = 8C/3
# rounded up to 256, T256, batch 8, untied head; tinyshakespeare), trident
# at bf16 and fp32 against the PyTorch Llama of tests/ref/llama_ref.py
# (bench/torch_llama.py: Hugging Face's eager path, fp32 and bf16 autocast)
# and, so that a slow reference shows, the PyTorch GPT-2 of the same size
# (bench/torch_gpt.py), each at 1 and 2 threads, in one run. Printed: each
# run's tokens/s (trident's `done:` line, step 0 untimed; torch WARMUP
# untimed steps, then STEPS - 1 timed; best of REPS, repetitions
# interleaved), then the acceptance ratio trident bf16 / the best PyTorch
# Llama figure (target >= 1.5x). A benchmark never fails on speed: it exits
# non-zero only when something cannot be built or run.
#
# Environment: REPS (1), STEPS (4), WARMUP (2), THREADS ("1 2"), PYTHON
# (/usr/bin/python3), BUILD_DIR (build), TRIDENT (a binary to use instead).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPS=${REPS:-1}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-"1 2"}
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD_DIR=${BUILD_DIR:-build}
DATA=data/tinyshakespeare.txt
SHAPE=(--layers 6 --heads 6 --embd 384 --seq 256 --batch 8)
LLAMA=(--kv-heads 2 --ffn-hidden 1024)
die() { echo "bench_llama: error: $*" >&2; exit 1; }
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 2 ]] || die "STEPS='$STEPS' must be >= 2 (step 0 is not timed)"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
[[ -x "$PYTHON" ]] || die "PYTHON='$PYTHON' is not executable (Debian's torch lives in /usr/bin/python3)"
read -r -a threads <<<"$THREADS"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "${TRIDENT:-}" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$tmp/build.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j2 --target trident >>"$tmp/build.log" 2>&1 ||
    { tail -n 40 "$tmp/build.log" >&2; die "build failed"; }
  TRIDENT=$BUILD_DIR/trident
fi
echo "== bench_llama: llama ${SHAPE[*]} ${LLAMA[*]} on $DATA (char, V 65), trident $STEPS steps (step 0 untimed), torch $WARMUP warm-up + $((STEPS - 1)) timed, best of $REPS"
echo "   $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# best[key] = highest tokens/s over the repetitions
declare -A best
note() { # key tokens/s
  local k=$1 v=$2
  if [[ -z "${best[$k]:-}" ]] || awk -v a="$v" -v b="${best[$k]}" 'BEGIN{exit !(a > b)}'; then best[$k]=$v; fi
}
run_trident() { # precision threads
  local out=$tmp/tr.out
  "$TRIDENT" train --arch llama "${SHAPE[@]}" "${LLAMA[@]}" --data "$DATA" --tokenizer char --steps "$STEPS" \
    --eval-every 0 --log-every 1000000 --threads "$2" --precision "$1" >"$out" 2>&1 ||
    { tail -n 20 "$out" >&2; die "trident --precision $1 --threads $2 failed"; }
  local line tps
  line=$(grep '^done:' "$out")
  tps=$(sed -E 's/.* ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
  printf '   trident llama %-4s threads=%d: %s\n' "$1" "$2" "$line"
  note "trident_$1_t$2" "$tps"
}
run_torch() { # script arch precision threads
  local out=$tmp/to.out extra=()
  [[ $2 == llama ]] && extra=("${LLAMA[@]}")
  "$PYTHON" "bench/$1" "${SHAPE[@]}" "${extra[@]}" --vocab 65 --steps "$((STEPS - 1))" --warmup-steps "$WARMUP" \
    --threads "$4" --precision "$3" >"$out" 2>&1 || { tail -n 20 "$out" >&2; die "$1 failed"; }
  local tps
  tps=$(sed -E 's/.*tokens_per_s=([0-9.]+).*/\1/' "$out")
  printf '   torch %-5s %-4s threads=%d: %s\n' "$2" "$3" "$4" "$(cat "$out")"
  note "torch_$2_$3_t$4" "$tps"
}
for ((r = 1; r <= REPS; r++)); do
  for t in "${threads[@]}"; do
    for p in bf16 fp32; do run_trident "$p" "$t"; done
    for p in fp32 bf16; do
      run_torch torch_llama.py llama "$p" "$t"
      run_torch torch_gpt.py gpt2 "$p" "$t"
    done
  done
done
echo "== tokens/s, best of $REPS"
top_torch=0 top_key=""
for k in $(printf '%s\n' "${!best[@]}" | sort); do
  printf '   %-24s %10.1f\n' "$k" "${best[$k]}"
  if [[ $k == torch_llama_* ]] && awk -v a="${best[$k]}" -v b="$top_torch" 'BEGIN{exit !(a > b)}'; then
    top_torch=${best[$k]} top_key=$k
  fi
done
top_tr=0 top_tr_key=""
for t in "${threads[@]}"; do
  v=${best[trident_bf16_t$t]}
  if awk -v a="$v" -v b="$top_tr" 'BEGIN{exit !(a > b)}'; then top_tr=$v top_tr_key=trident_bf16_t$t; fi
done
ratio=$(awk -v a="$top_tr" -v b="$top_torch" 'BEGIN{printf "%.2f", a / b}')
pass=$(awk -v r="$ratio" 'BEGIN{print (r >= 1.5) ? "PASS" : "FAIL"}')
echo "== acceptance: trident bf16 ($top_tr_key) / best PyTorch Llama ($top_key) = ${ratio}x (target >= 1.5x) $pass"
