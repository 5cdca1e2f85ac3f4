#!/usr/bin/env bash
# Checkpoint save time: a model of ~11M parameters (L6 H6 C384 T64, char
# vocabulary) at dp 2 (zero 0: dp rank 0 writes everything; zero 1: the
# moments are split over both ranks), saved sharded (params + AdamW m + v)
# after each of 6 steps with --keep 1, as periodic checkpointing runs,
# against a plain sequential write of the same bytes into one file with dd
# (1 MiB blocks, conv=fsync) on the same file system, 5 times. Figures: the
# median save and the median dd (the first save is printed too: on a VM,
# page cache in never-touched guest memory is slower to fill; --keep 1 lets
# later saves reuse freed pages, as dd's repeats do). Target: <= 2x.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}"); trap 'rm -rf "$tmp"' EXIT
CFG=(--data data/tinyshakespeare.txt --layers 6 --heads 6 --embd 384 --seq 64 --batch 2 --steps 6
     --save-every 1 --keep 1 --eval-every 0 --threads 1)
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for Z in 0 1; do
  rm -rf "$tmp/out"
  out=$($M -np 2 build/trident train "${CFG[@]}" --dp 2 --zero $Z --out "$tmp/out" 2>&1 | grep '^checkpoint:')
  saves=$(sed -n 's/.*, \([0-9.]*\) s, checksums .*/\1/p' <<<"$out")
  prunes=$(sed -n 's/.*removed [0-9]* older in \([0-9.]*\) s).*/\1/p' <<<"$out" | median)
  first=$(head -1 <<<"$saves")
  save=$(median <<<"$saves")
  params=$(sed -n 's/.*(\([0-9]*\) parameters.*/\1/p' <<<"$out")
  bytes=$(du -cb "$tmp/out/latest/"* | tail -1 | cut -f1)
  mib=$(( (bytes + 1048575) / 1048576 ))
  dds=$(for r in 1 2 3 4 5; do
    rm -f "$tmp/plain"
    t0=$(date +%s.%N)
    dd if=/dev/zero of="$tmp/plain" bs=1M count=$mib conv=fsync status=none
    t1=$(date +%s.%N)
    awk "BEGIN{print $t1 - $t0}"
  done | median)
  awk -v z=$Z -v p="$params" -v b="$bytes" -v s="$save" -v f="$first" -v d="$dds" -v n="$(wc -l <<<"$saves")" -v pr="${prunes:-0}" 'BEGIN{
    printf "save dp 2 zero %d: %d parameters, %.1f MiB in 2 shards + manifest: median of %d saves %.3f s " \
           "(%.0f MiB/s; the first %.3f s); plain sequential write (dd, fsync), median of 5: %.3f s; " \
           "ratio %.2fx (target <= 2x); removing the older checkpoint after it (--keep 1, not in the save): %.3f s\n", z, p, b / 1048576, n, s, b / 1048576 / s, f, d, s / d, pr }'
done

# Integrity: the checksums' share of a save and of a resume on GPT-2 124M's
# sizes (L12 H12 C768, GPT-2's vocabulary: 124M parameters, 1.5 GB of
# parameters and moments), one process: the save line prints the seconds
# the checksums cost the save beside the save's (a piece of two blocks or
# more is hashed on a second thread trailing the writes: the writer's wait
# for it; a one-block piece: its hashing), the resume line the seconds
# spent verifying beside the load's (timed around the hashing alone).
# Target: <= 5% each.
rm -rf "$tmp/big"
BIG=(--data data/tinyshakespeare.txt --tokenizer gpt2 --layers 12 --heads 12 --embd 768 --seq 64 --batch 1
     --eval-every 0 --threads 2 --out "$tmp/big")
saves=$(build/trident train "${BIG[@]}" --steps 3 --save-every 1 --keep 1 2>&1 | grep '^checkpoint:') || true
[ -n "$saves" ] || { echo "bench_ckpt: the 124M run printed no checkpoint line" >&2; exit 1; }
res=$(build/trident train "${BIG[@]}" --steps 4 --resume latest 2>&1 | grep '^resume:') || true
awk -v saves="$saves" -v res="$res" 'BEGIN{
  n = split(saves, L, "\n"); for (i = 1; i <= n; i++) {
    match(L[i], /, [0-9.]+ s, checksums [0-9.]+ s/); s = substr(L[i], RSTART + 2, RLENGTH - 2)
    split(s, f, " "); save[i] = f[1]; hash[i] = f[4] }
  match(res, /in [0-9.]+ s \(checksums verified in [0-9.]+ s\)/); r = substr(res, RSTART, RLENGTH)
  split(r, g, " "); load = g[2]; ver = g[7]
  for (i = 1; i <= n; i++)
    printf "integrity: save %d of 124M parameters: %.3f s, checksums %.3f s = %.1f%% (target <= 5%%)\n", i, save[i], hash[i], 100 * hash[i] / save[i]
  printf "integrity: resume: %.3f s, verification %.3f s = %.1f%% (target <= 5%%)\n", load, ver, 100 * ver / load }'
