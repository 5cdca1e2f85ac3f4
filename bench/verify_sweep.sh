#!/usr/bin/env bash
# The full sweep of `trident verify` (src/train/verify.c): every layout of
# tests/layouts (each distinct combination of layout flags there, on one
# small model) x fp32/bf16/fp16 x GPT-2/Llama/MoE. Each cell is the
# verdict: "pass G/L" (the largest gradient error and loss difference as
# fractions of their tolerances), FAIL, "refused" (verify says why, exit 2)
# or "rules" (the rules table refuses the combination: one error line).
# The CI runs a pairwise-covering subset (tests/cli/test_verify_rules.sh);
# this runs once for docs/verify-precision.md. About 10-15 minutes on 2
# cores. Usage: bench/verify_sweep.sh [BUILD_DIR] [OUT_LOG_DIR]
set -u
build=${1:-build}
logs=${2:-$(mktemp -d)}
mkdir -p "$logs"
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
M=(--data data/tinyshakespeare.txt --layers 4 --heads 4 --embd 32 --seq 16 --batch 8 --steps 2 --threads 1)
declare -A ARCH=([gpt2]="" [llama]="--arch llama --kv-heads 2 --ffn-hidden 48"
                 [moe]="--moe-experts 4 --moe-top-k 2")
layouts=(
  "dp1 1" "dp2 2 --dp 2" "dp2-accum2 2 --dp 2 --grad-accum 2" 
  "rb-dp2 2 --dp-mode reduce-broadcast --dp 2" "ps-dp2-s1 3 --dp-mode ps --ps-servers 1" "ps-stale 3 --dp-mode ps --ps-servers 1 --ps-staleness 1"
  "zero1-dp2 2 --zero 1 --dp 2" "zero3-dp2-accum2 2 --zero 3 --dp 2 --grad-accum 2"
  "tp2 2 --tp 2" "tp2-sp 2 --tp 2 --sequence-parallel" "tp2-dp2-zero3 4 --tp 2 --dp 2 --zero 3"
  "pp2-1f1b-m4 2 --pp 2 --micro-batches 4"
  "pp2-zbh1-m2 2 --pp 2 --schedule zb-h1 --micro-batches 2" "pp4-1f1b-m4 4 --pp 4 --micro-batches 4"
  "pp2-interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2" "pp2-dp2-zero1 4 --pp 2 --dp 2 --zero 1 --micro-batches 2"
  "pp2-tp2-sp 4 --pp 2 --tp 2 --sequence-parallel --micro-batches 2"
  "3d-zero1 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2"
  "cp2 2 --cp 2" "cp2-dp2-zero3 4 --cp 2 --dp 2 --zero 3" "cp2-tp2-sp 4 --cp 2 --tp 2 --sequence-parallel"
  "cp2-pp2-zbh1 4 --cp 2 --pp 2 --schedule zb-h1 --micro-batches 2" "cp2-recompute 2 --cp 2 --recompute block"
  "dp4-shard2-zero3 4 --dp 4 --dp-shard 2 --zero 3" "tp2-sp-recompute 2 --tp 2 --sequence-parallel --recompute block"
  "dp2-bf16-reduce 2 --dp 2 --grad-reduce-dtype bf16" "cp2-pp2-bf16-reduce 4 --cp 2 --pp 2 --micro-batches 2 --grad-reduce-dtype bf16"
  "ep2-dp2-zero1 2 --dp 2 --ep 2 --zero 1" "ep2-dp4-zero2 4 --dp 4 --ep 2 --zero 2"
  "topk 2 --dp 2 --grad-compress topk:0.1"
)
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d); model L4 H4 C32 T16 batch 8, 2 steps"
printf '| %-20s |' layout
for a in gpt2 llama moe; do for p in fp32 bf16 fp16; do printf ' %-13s |' "$a $p"; done; done; echo
for row in "${layouts[@]}"; do
  read -r name np flags <<<"$row"
  printf '| %-20s |' "$name"
  for a in gpt2 llama moe; do
    for p in fp32 bf16 fp16; do
      log="$logs/$name-$a-$p.log"
      # shellcheck disable=SC2086
      timeout 120 "${mpi[@]}" -np "$np" "$build/trident" verify "${M[@]}" ${ARCH[$a]} $flags --precision "$p" \
        >"$log" 2>&1 </dev/null
      rc=$?
      cell=$(python3 - "$rc" "$log" <<'PY'
import re, sys
rc, log = int(sys.argv[1]), open(sys.argv[2], errors="replace").read()
m = re.search(r"largest gradient error ([0-9.e+-]+) and loss difference ([0-9.e+-]+) of their", log)
if rc == 0 and "verify: passed" in log and m:
    print("pass %.2g/%.2g" % (float(m.group(1)), float(m.group(2))))
elif rc == 2 and "verify: refused" in log: print("refused")
elif "verify: FAILED" in log: print("FAIL")
elif re.search(r"trident: error", log): print("rules")
else: print("error rc %d" % rc)
PY
)
      printf ' %-13s |' "$cell"
    done
  done
  echo
done
