#!/usr/bin/env bash
# The memory plan against what the kernel measures: for zero 0 and 3 at
# dp 1 and 2, each rank's resident-set high-water mark (VmHWM) minus its
# baseline before the model was allocated (the program, libraries and
# data), divided by the planned bytes; beside it the accounting
# allocator's peak over the same span. A ratio near 1 means the plan covers
# what the run really holds; the allocator column shows how much of a gap
# is outside td_alloc (libraries, Open MPI, shared windows of other ranks).
# STEPS (default 3) timed steps after 1 warm-up step; MODEL overrides the
# model flags (default L8 H8 C512 T64, 25M parameters: ~400 MB of AdamW
# state at zero 0, so the fixed costs do not dominate).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
MODEL=${MODEL:-"--layers 8 --heads 8 --embd 512 --seq 64 --vocab 65"}
CFG="$MODEL --steps ${STEPS:-3} --warmup-steps 1 --threads 1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rows=()
run() { # name ranks flags...
  local name=$1 np=$2; shift 2
  local log="$tmp/$name.jsonl"
  if [ "$np" = 1 ]; then build/trident bench train $CFG "$@" --log "$log" >/dev/null
  else $M -np "$np" build/trident bench train $CFG "$@" --log "$log" >/dev/null; fi
  rows+=("$name $log")
}
run "dp1-zero0" 1 --batch 4
run "dp1-zero3" 1 --batch 4 --zero 3
run "dp2-zero0" 2 --batch 8 --dp 2
run "dp2-zero3" 2 --batch 8 --dp 2 --zero 3
# dp 2 without shared-memory collectives (every byte through MPI): whether
# the other rank's shared windows account for a gap
TRIDENT_COMM_SHM=0 run "dp2-zero0-mpi" 2 --batch 8 --dp 2
TRIDENT_COMM_SHM=0 run "dp2-zero3-mpi" 2 --batch 8 --dp 2 --zero 3
/usr/bin/python3 - "${rows[@]}" <<'PY'
import json, sys
M = 2 ** 20
print("memory plan vs resident set, per rank (MiB); ratio = (high-water - baseline) / planned")
print(f"{'layout':<14} {'rank':>4} {'planned':>9} {'baseline':>9} {'high-water':>10} {'growth':>9} {'ratio':>6} {'allocator':>9} {'alloc/plan':>10}")
for arg in sys.argv[1:]:
    name, log = arg.split()
    rss = None
    for line in open(log):
        o = json.loads(line)
        if o.get("event") == "rss": rss = o["ranks"]
    if rss is None:
        print(f"{name:<14} (no rss record)"); continue
    for r, x in enumerate(rss):
        growth = x["rss_peak"] - x["rss_baseline"]
        print(f"{name:<14} {r:>4} {x['planned']/M:>9.1f} {x['rss_baseline']/M:>9.1f} {x['rss_peak']/M:>10.1f} "
              f"{growth/M:>9.1f} {growth/x['planned']:>6.2f} {x['alloc_peak']/M:>9.1f} {x['alloc_peak']/x['planned']:>10.2f}")
PY
