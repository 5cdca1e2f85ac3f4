#!/usr/bin/env bash
# fp16 with dynamic loss scaling under --device guard: the same bits as on
# --device cpu (det_run's losses, norms, final parameters and moments), one
# process and dp 2. fp16 layouts are held to one process by the loss they
# reach (tests/layouts' precision_fp16*), on cpu; equal bits carry that over.
#   test_guard_fp16_bits.sh DET_RUN DATA_DIR
set -u
D=${1:?usage: test_guard_fp16_bits.sh DET_RUN DATA_DIR}
DATA=${2:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args=(--data "$DATA/tinyshakespeare.txt" --layers 2 --embd 32 --heads 2 --seq 16 --batch 8 --steps 4
      --eval-every 0 --warmup 2 --log-every 1000 --threads 1 --precision fp16)
M=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np)
fails=0
for row in "one_process|1|" "dp2|2|--dp 2"; do
  IFS='|' read -r name np flags <<<"$row"
  for dev in cpu guard; do
    if [ "$np" = 1 ]; then cmd=("$D"); else cmd=("${M[@]}" "$np" "$D"); fi
    # shellcheck disable=SC2086
    "${cmd[@]}" "$tmp/$name.$dev.bin" "${args[@]}" $flags --device $dev >"$tmp/log" 2>&1 ||
      { tail -5 "$tmp/log"; echo "FAIL: fp16 $name --device $dev: the run failed"; fails=1; continue 2; }
  done
  echo "fp16 $name: --device guard against --device cpu:"
  "$D" --compare "$tmp/$name.cpu.bin" "$tmp/$name.guard.bin" || { echo "FAIL: fp16 $name: bits differ"; fails=1; }
done
[ $fails -eq 0 ] && echo "fp16 under --device guard: the bits of --device cpu (one process, dp 2): ok"
exit $fails
