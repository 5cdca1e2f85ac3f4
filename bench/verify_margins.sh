#!/usr/bin/env bash
# The margins of `trident verify`'s tolerances (src/train/verify_tol.c,
# docs/verify-precision.md): for correct layouts in fp32, bf16 and fp16, the
# largest gradient error (of its tensor's max, and in units of the type's
# unit roundoff u) and the largest loss difference, each as a fraction of
# its tolerance; and the same for the broken reduction
# (TRIDENT_FAULT=skip-embed-sum:1), which must sit above them.
# Model: tests/cli/test_verify.sh's (L4 H4 C64 T32, batch 12, 4 steps).
# Usage: bench/verify_margins.sh [BUILD_DIR]
set -eu
build=${1:-build}
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
M=(--data data/tinyshakespeare.txt --layers 4 --heads 4 --embd 64 --seq 32 --batch 12 --steps 4 --threads 1)
layouts=("dp2 2 --dp 2" "tp2 2 --tp 2" "pp2-1f1b 2 --pp 2 --micro-batches 2"
         "pp2-interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 2"
         "dp2-tp2-pp2-zero1 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2"
         "tp2-dp2-zero3 4 --tp 2 --dp 2 --zero 3"
         "FAULT:dp2-pp2 4 --dp 2 --pp 2 --micro-batches 2")
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%d); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-20s %12s %8s %10s %10s %10s  %s\n' prec layout "grad err" "in u" "of tol" "loss diff" "of tol" verdict
for p in fp32 bf16 fp16; do
  for row in "${layouts[@]}"; do
    read -r name np flags <<<"$row"
    env=()
    [[ $name == FAULT:* ]] && env=(TRIDENT_FAULT=skip-embed-sum:1)
    # shellcheck disable=SC2086
    out=$(env "${env[@]}" "${mpi[@]}" -np "$np" "$build/trident" verify "${M[@]}" $flags --precision "$p" 2>&1 </dev/null || true)
    python3 - "$p" "$name" "$out" <<'PY'
import re, sys
p, name, out = sys.argv[1:]
u = {"fp32": 2**-24, "bf16": 2**-8, "fp16": 2**-11}[p]
g = max(float(x) for x in re.findall(r"largest gradient error ([0-9.e+-]+) of its tensor", out))
m = re.search(r"largest relative loss difference ([0-9.e+-]+) \(tolerance [^)]*\); largest gradient error "
              r"([0-9.e+-]+) and loss difference ([0-9.e+-]+) of their tolerances", out)
verdict = "passed" if re.search(r"^verify: passed", out, re.M) else "FAILED"
print("%-6s %-20s %12.3e %8.2f %10.3g %10.2e %10.3g  %s" % (p, name, g, g / u, float(m.group(2)), float(m.group(1)),
                                                          float(m.group(3)), verdict))
PY
  done
done
