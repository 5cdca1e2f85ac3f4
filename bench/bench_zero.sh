#!/usr/bin/env bash
# ZeRO: per-rank model-state memory (measured by the accounting allocator)
# beside the fp32 formula, and step time (best of 2), for zero 0..3 at dp 2 and 4, on a
# model of 14M parameters (L32 H6 C192 T64). fp32 training: weights 4,
# gradients 4, Adam m+v 8 bytes per parameter (no separate master copy):
#   zero0 16psi, zero1 8psi + 8psi/N, zero2 4psi + 12psi/N, zero3 16psi/N.
# Hybrid sharding (--dp-shard 2 at dp 4, zero 1 and 3): N is the shard's 2
# ranks; the gradient payload a rank hands its collectives per step (the
# log's grad_traffic) is 4psi (the reduce-scatter within the shard) plus
# 4psi/N (the replicas' all-reduce of its shard), against 4psi for plain ZeRO.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
CFG="--layers 32 --heads 6 --embd 192 --seq 64 --vocab 65 --steps ${STEPS:-6} --warmup-steps 2 --threads 1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rows=()
# run D Z S: best of 2 (a shared 2-core machine drifts by 10%+ between runs)
run() {
  local D=$1 Z=$2 S=$3 ms="" log="$tmp/z$2-d$1-s$3.jsonl"
  for rep in 1 2; do
    out=$($M -np $D build/trident bench train $CFG --batch $((4 * D)) --dp $D --zero $Z --dp-shard $S --log "$log" 2>&1) ||
      { echo "bench_zero: dp $D zero $Z shard $S failed:"; grep -m3 error <<<"$out"; exit 1; }
    out=$(grep 'bench train:' <<<"$out")
    t=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$out")
    if [ -z "$ms" ] || awk "BEGIN{exit !($t < $ms)}"; then ms=$t; fi
  done
  rows+=("$D $Z $S $ms $log")
}
for D in 2 4; do
  for Z in 0 1 2 3; do run $D $Z 0; done
done
for Z in 1 3; do run 4 $Z 2; done
/usr/bin/python3 - "${rows[@]}" <<'PY'
import json, sys
rows = [a.split() for a in sys.argv[1:]]
print("ZeRO, fp32: per-rank model state (params + grads + optimizer, measured peak by the accounting")
print("allocator on rank 0) beside the formula with psi = real parameters; gathered-parameter and")
print("communication buffers listed apart; peak = state + gathered + comm")
print(f"{'dp':>3} {'zero':>4} {'shard':>5} {'psi':>10} {'formula':>10} {'state':>10} {'ratio':>6} {'gathered':>9} {'comm':>8} {'peak':>9} {'step ms':>8} {'vs zero0':>8} {'grad payload':>12} {'formula':>10}")
base_state, base_ms = {}, {}
res = []
M = 2 ** 20
for D, Z, S, ms, log in rows:
    D, Z, S, ms = int(D), int(Z), int(S), float(ms)
    start = mem = None
    sent = 0
    for line in open(log):
        o = json.loads(line)
        if o.get("event") == "start": start = o
        if o.get("event") == "memory": mem = o["ranks"][0]
        if o.get("event") == "grad_traffic": sent = o["sent_bytes"]
    psi = start["params"]
    N = S or D  # the ranks ZeRO shards over
    f = {0: 16 * psi, 1: 8 * psi + 8 * psi / N, 2: 4 * psi + 12 * psi / N, 3: 16 * psi / N}[Z]
    R = D // N  # replicas of a shard
    # the gradient payload handed to the collectives per step (one
    # micro-batch): every gradient once (all-reduce or reduce-scatter), plus
    # under hybrid sharding the replicas' all-reduce of this rank's shard
    fs = 4 * psi * (1 + (1 / N if R > 1 else 0))
    state = sum(mem[c + "_peak"] for c in ("params", "grads", "optimizer", "master"))
    gath, comm = mem["gather_peak"], mem["comm_peak"]
    peak = state + gath + comm
    if Z == 0: base_state[D], base_ms[D] = state, ms
    res.append((D, Z, S, f, state, peak, ms))
    print(f"{D:>3} {Z:>4} {S or '-':>5} {psi:>10} {f/M:>8.1f}Mi {state/M:>8.1f}Mi {state/f:>6.3f} {gath/M:>7.1f}Mi {comm/M:>6.1f}Mi {peak/M:>7.1f}Mi {ms:>8.1f} {ms/base_ms[D]:>7.2f}x {sent/M:>10.2f}Mi {fs/M:>8.2f}Mi")
ok = all(abs(s / f - 1) <= 0.05 for D, Z, S, f, s, p, ms in res)
print(f"model state within 5% of the formula for every stage: {'PASS' if ok else 'FAIL'}")
for D, Z, S, f, s, p, ms in res:
    if S: continue
    if D == 4 and Z == 3:
        r = p / base_state[4]
        print(f"ZeRO-3 peak at dp=4 (state + gathered + comm) = {100*r:.1f}% of zero=0's model state (target < 30%: {'PASS' if r < 0.3 else 'FAIL'})")
    if D == 2 and Z == 3:
        print(f"ZeRO-3 step time at dp=2 = {ms/base_ms[2]:.2f}x zero=0 (target <= 1.25x: {'PASS' if ms/base_ms[2] <= 1.25 else 'FAIL'})")
PY
