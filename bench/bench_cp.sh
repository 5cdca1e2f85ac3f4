#!/usr/bin/env bash
# Context parallelism, L4 C256 H4, batch 1, char vocabulary (synthetic:65),
# cp N on N ranks of this machine, fp32:
#  scale  cp 1 / 2 / 4 at T = 16384 (T_SCALE): per-rank activations (planned
#         and the allocator's peak; they should fall ~1/cp), ms per step, the
#         ring's bytes per step against the formula, its wait time.
#  admit  under TRIDENT_MEMORY_LIMIT_PER_RANK=LIMIT (1G), the longest T the
#         memory check admits at cp 1 and at cp 4 (ZeRO 3 over the 4: model
#         state sharded as far as the ranks allow), by bisection in steps of
#         8 (each try a `trident train` stopped as soon as the check answers),
#         their ratio, then one real step at cp 4's length (STEP=0 skips it).
# Run it alone: other processes on the cores lower every figure. Usage:
# bench/bench_cp.sh [scale] [admit]  (both by default). Minutes: scale ~3,
# admit ~2 plus the step (~2 at 1G).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
MODEL="--data synthetic:65 --layers 4 --heads 4 --embd 256 --batch 1 --eval-every 0 --log-every 1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
what=${*:-scale admit}

scale() {
  local T=${T_SCALE:-16384} rows=()
  for n in 1 2 4; do
    local out
    out=$($M -np $n build/trident train $MODEL --seq "$T" --cp $n --steps 2 --log "$tmp/cp$n.jsonl" 2>&1) ||
      { echo "$out" | tail -5; exit 1; }
    rows+=("$n $tmp/cp$n.jsonl")
  done
  /usr/bin/python3 - "$T" "${rows[@]}" <<'PY'
import json, sys
T = int(sys.argv[1])
M = 2 ** 20
print(f"cp at T = {T}, L4 C256 H4, batch 1, fp32 (step 1 of 2; step 0 warms up)")
print(f"{'cp':>3} {'acts plan':>10} {'acts peak':>10} {'x cp 1':>7} {'ring comm':>10} {'ms/step':>9} "
      f"{'ring sent B':>13} {'formula B':>13} {'wait ms':>8} {'pairs':>6} {'skipped':>7}")
base = None
for a in sys.argv[2:]:
    n, log = a.split()
    ev = {}
    steps = []
    for line in open(log):
        o = json.loads(line)
        if "event" in o: ev[o["event"]] = o
        else: steps.append(o)
    r0 = ev["memory"]["ranks"][0]
    acts, peak = r0["activations"], r0["activations_peak"]
    base = base or acts
    cp = ev.get("cp_ring", {"sent_bytes": 0, "formula_bytes": 0, "wait_ms": 0, "pairs": 0, "skipped": 0})
    print(f"{n:>3} {acts / M:>9.1f}M {peak / M:>9.1f}M {acts / base:>7.3f} {r0['comm_peak'] / M:>9.1f}M "
          f"{steps[-1]['step_ms']:>9.1f} {cp['sent_bytes']:>13} {cp['formula_bytes']:>13} {cp['wait_ms']:>8.1f} "
          f"{cp['pairs']:>6} {cp['skipped']:>7}")
print("formula: per layer and micro-batch, forward cp-1 K/V blocks, backward cp-1 K/V and cp dK/dV blocks;")
print("a block 2 x B x T/cp x C x 4 bytes (td_cp_ring_formula); the ring keeps its blocks in the MLP")
print("backward's scratch (comm = 0 beyond ZeRO's buffers)")
PY
}

# 0: the memory check admits T at cp n (ZeRO zero), 1: it refuses; the run
# is stopped as soon as the check has answered.
admits() {
  local T=$1 n=$2 zero=$3 f="$tmp/try.out"
  TRIDENT_MEMORY_LIMIT_PER_RANK=$LIMIT $M -np "$n" build/trident train $MODEL --seq "$T" --cp "$n" \
    --zero "$zero" --steps 1 >"$f" 2>&1 </dev/null &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if grep -q "^memory per rank (plan):" "$f"; then kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; return 0; fi
    grep -q "error: memory" "$f" && break
    sleep 0.2
  done
  wait $pid 2>/dev/null || true
  grep -q "error: memory" "$f" && return 1
  grep -q "^memory per rank (plan):" "$f" && return 0
  echo "bench_cp: T $T cp $n neither admitted nor refused by the memory check:" >&2; tail -5 "$f" >&2; exit 1
}

longest() { # n zero: the largest multiple of 8 admitted
  local n=$1 zero=$2 lo=8 hi=8
  while admits $hi "$n" "$zero"; do lo=$hi; hi=$((hi * 2)); done
  while [ $((hi - lo)) -gt 8 ]; do
    local mid=$(((lo + hi) / 16 * 8))
    if admits $mid "$n" "$zero"; then lo=$mid; else hi=$mid; fi
  done
  echo $lo
}

admit() {
  LIMIT=${LIMIT:-1G}
  local t1 t4
  t1=$(longest 1 0)
  t4=$(longest 4 3)
  echo "TRIDENT_MEMORY_LIMIT_PER_RANK=$LIMIT, L4 C256 H4, batch 1, fp32: the longest T the memory check admits"
  echo "  cp 1 (one process, zero 0): T = $t1"
  echo "  cp 4 (4 ranks, zero 3):     T = $t4"
  awk -v a="$t4" -v b="$t1" 'BEGIN{printf "  ratio cp 4 / cp 1: %.2fx\n", a / b}'
  [ "${STEP:-1}" = 0 ] && return
  echo "one step at cp 4, T = $t4, under the same limit:"
  local s0=$SECONDS
  TRIDENT_MEMORY_LIMIT_PER_RANK=$LIMIT $M -np 4 build/trident train $MODEL --seq "$t4" --cp 4 --zero 3 \
    --steps 1 --log "$tmp/step.jsonl" 2>&1 | grep -E "^step |^done:|^cp ring|^  [0-3] .*MiB/" || true
  echo "  wall $((SECONDS - s0)) s for the run (start, step, report)"
  /usr/bin/python3 - "$tmp/step.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("event") == "rss":
        for i, r in enumerate(o["ranks"]):
            print(f"  rank {i}: allocator peak {r['alloc_peak'] / 2**20:.1f} MiB of {r['planned'] / 2**20:.1f} MiB "
                  f"planned; resident high-water {r['rss_peak'] / 2**20:.1f} MiB")
PY
}

for w in $what; do "$w"; done
