#!/usr/bin/env bash
# The same seed gives bitwise-identical losses across two runs (single
# process, 2 threads, and dp=2 under mpirun), and a different seed does not.
set -u
T=${1:?usage: test_determinism.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args=(train --data "$DATA/tinyshakespeare.txt" --layers 2 --embd 64 --heads 4 --seq 32
      --batch 8 --steps 15 --eval-every 0 --warmup 2)
losses() { grep -o '"loss": [-0-9.e]*' "$1" | tr '\n' ' '; }
run() { local log=$1; shift; "$@" --log "$log" >/dev/null 2>&1 || { echo "FAIL: run failed: $*"; exit 1; }; }
run "$tmp/a.jsonl" "$T" "${args[@]}" --threads 2 --seed 7
run "$tmp/b.jsonl" "$T" "${args[@]}" --threads 2 --seed 7
run "$tmp/c.jsonl" "$T" "${args[@]}" --threads 2 --seed 8
M="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2"
run "$tmp/d.jsonl" $M "$T" "${args[@]}" --threads 1 --seed 7 --dp 2
run "$tmp/e.jsonl" $M "$T" "${args[@]}" --threads 1 --seed 7 --dp 2
a=$(losses "$tmp/a.jsonl"); b=$(losses "$tmp/b.jsonl"); c=$(losses "$tmp/c.jsonl")
d=$(losses "$tmp/d.jsonl"); e=$(losses "$tmp/e.jsonl")
fails=0
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: same seed, different losses:"; echo " $a"; echo " $b"; fails=1; }
[ "$a" != "$c" ] || { echo "FAIL: a different seed gave the same losses"; fails=1; }
[ -n "$d" ] && [ "$d" = "$e" ] || { echo "FAIL: dp=2 runs differ:"; echo " $d"; echo " $e"; fails=1; }
[ $fails -eq 0 ] && echo "determinism: 15 losses bitwise identical across runs (1 process and dp=2); seed 8 differs: ok"
exit $fails
