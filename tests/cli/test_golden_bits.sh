#!/usr/bin/env bash
# Golden bits: six layouts' training runs (det_run's raw float32 bits: every
# step's loss and gradient norm, the final parameters and Adam m and v) must
# equal the files in tests/cli/golden/ bit for bit. The files were written
# before the N-D refactor (grid of named axes, run object, rules table), so a
# refactor that changes any arithmetic -- a sum's order, a reduction group, a
# schedule -- fails here with the first element that moved. They were
# rewritten once since, on purpose, when attention moved to the blocked
# kernel (other summation orders: last-bit changes, 1e-6 relative in bf16).
#
#   test_golden_bits.sh DET_RUN DATA_DIR GOLDEN_DIR           check
#   test_golden_bits.sh DET_RUN DATA_DIR GOLDEN_DIR --write   regenerate (say why in the commit)
#
# The BLAS and oneDNN kernels are pinned (OpenBLAS's Haswell kernels, oneDNN
# capped at AVX2, where bf16 GEMMs take the converting path) so the files
# hold on any x86-64 machine with AVX2, not only on one CPU model; the
# native paths are covered by the determinism and layout tests.
set -u
D=${1:?usage: test_golden_bits.sh DET_RUN DATA_DIR GOLDEN_DIR [--write]}
DATA=${2:?}
G=${3:?}
write=${4:-}
export OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Small enough that the six files are ~0.5 MB in all, large enough that every
# layout splits something: 2 layers (pp2), 2 heads (tp2), batch 8 (dp2 x 2
# micro-batches).
args=(--data "$DATA/tinyshakespeare.txt" --layers 2 --embd 16 --heads 2 --seq 16
      --batch 8 --steps 6 --eval-every 0 --warmup 2 --log-every 1000 --threads 1 --seed 11)
M="mpirun --allow-run-as-root --oversubscribe --bind-to none -np"
# name | ranks | layout flags [| golden file, when another layout's bits are the oracle]
layouts=(
  "one_process|1|"
  "dp2_zero1|2|--dp 2 --zero 1"
  "tp2_sp|2|--tp 2 --sequence-parallel"
  "pp2_zbh1|2|--pp 2 --schedule zb-h1 --micro-batches 4"
  "dp2_tp2_pp2|8|--dp 2 --tp 2 --pp 2 --micro-batches 2"
  "bf16_dp2|2|--dp 2 --precision bf16"
  # another rank order moves every rank's place, not one sum
  "dp2_tp2_pp2_order|8|--dp 2 --tp 2 --pp 2 --micro-batches 2 --grid-order pp-dp-cp-tp|dp2_tp2_pp2"
  # the guard device (backend.h): the CPU's kernels behind the seam, the same bits
  "one_process_guard|1|--device guard|one_process"
  "bf16_dp2_guard|2|--dp 2 --precision bf16 --device guard|bf16_dp2"
)
fails=0
for row in "${layouts[@]}"; do
    IFS='|' read -r name np flags golden <<<"$row"
    golden=${golden:-$name}
    # shellcheck disable=SC2086
    if [ "$np" = 1 ]; then cmd=("$D"); else cmd=($M "$np" "$D"); fi
    # shellcheck disable=SC2086
    if ! "${cmd[@]}" "$tmp/$name.bin" "${args[@]}" $flags >"$tmp/log" 2>&1; then
        cat "$tmp/log"; echo "FAIL: $name: the run failed"; fails=1; continue
    fi
    if [ "$write" = --write ]; then
        [ "$golden" != "$name" ] && continue
        cp "$tmp/$name.bin" "$G/$name.bin" && echo "wrote $G/$name.bin ($(stat -c %s "$G/$name.bin") bytes)"
        continue
    fi
    echo "$name ($np ranks: ${flags:-one process}):"
    "$D" --compare "$G/$golden.bin" "$tmp/$name.bin" || { echo "FAIL: $name: bits differ from the golden file"; fails=1; }
done
[ "$write" != --write ] && [ $fails -eq 0 ] && echo "golden bits: 9 runs of 6 layouts bitwise equal to tests/cli/golden: ok"
exit $fails
