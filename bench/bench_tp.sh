#!/usr/bin/env bash
# Tensor parallelism (Megatron) on this machine: tp 1, 2 and 4, each tp > 1
# without and with --sequence-parallel, on a model of >= 10M parameters
# (default L6 H8 C384 T256, batch 8, on data/tinyshakespeare.txt with the
# char tokenizer: 10.77M parameters). Measured in one run and printed:
#
#   - step time and tokens/s: the mean over the timed steps of one
#     `trident train` run (the trainer leaves step 0 out; STEPS - 1 timed),
#     best of REPS runs (highest tokens/s: interference only slows a run
#     down), repetitions interleaved over the layouts so drift hits all alike;
#   - per-rank memory, planned and measured (the accounting allocator's peak
#     after step 1) per category, and the kernel's resident-set growth, all
#     read from the trainer's --log JSON file ("memory_plan", "memory", "rss");
#   - the bytes the tp collectives moved in the last step as the comm layer
#     counted them (the {"event": "tp_traffic"} record), beside the formula
#     computed here from the flags, independently of the trainer's
#     td_tp_formula: per block and micro-batch 4 all-reduces of B x T x C fp32
#     (with sequence parallelism 4 all-gathers and 4 reduce-scatters of that
#     size), plus the embedding's and the head's one each, plus the loss's 3
#     reductions of B x T values, plus with sequence parallelism one
#     all-reduce of 2C per LayerNorm (2L + 1) for its partial gradients.
#     Bytes are the whole tensor per call (n for an all-reduce, tp x n_local
#     for an all-gather or reduce-scatter), as the comm layer counts them;
#   - the per-rank parameter bytes against the split share plus replicated
#     tensors computed here from the config (per block (12C^2 + 7C) / tp split
#     + 6C replicated; wte round_up(V, 16 tp) / tp x C rows; wpe T x C; ln_f 2C;
#     each unit - wte + wpe, each block, ln_f - padded to 16 floats), and
#     whether activations with sequence parallelism are below those without.
#
# Threads per rank = CORES / ranks, at least 1: tp 4 puts 4 ranks on 2 cores
# and is labelled "oversubscribed"; its times say little about tp itself.
# The default run takes ~1 minute on the quiet 2-core machine (~4 when loaded).
# A benchmark never fails on speed or on a mismatch it prints (it says
# "NO"); it exits non-zero only when something cannot be built or run.
#
# Environment: REPS (2), STEPS (5: step 0 untimed, 4 timed), MODEL (model
# flags, default "--layers 6 --heads 8 --embd 384 --seq 256"), BATCH (8),
# DATA (data/tinyshakespeare.txt), TPS (tp sizes, "1 2 4"), CORES (2: the
# thread budget split over the ranks), PYTHON (/usr/bin/python3), BUILD_DIR
# (build), TRIDENT (a trident binary to use instead of building BUILD_DIR).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

REPS=${REPS:-2}
STEPS=${STEPS:-5}
MODEL=${MODEL:-"--layers 6 --heads 8 --embd 384 --seq 256"}
BATCH=${BATCH:-8}
DATA=${DATA:-data/tinyshakespeare.txt}
TPS=${TPS:-"1 2 4"}
CORES=${CORES:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD_DIR=${BUILD_DIR:-build}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

die() { echo "bench_tp: error: $*" >&2; exit 1; }

[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 2 ]] || die "STEPS='$STEPS' must be >= 2 (step 0 is not timed)"
[[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "BATCH='$BATCH' must be a positive integer"
[[ "$CORES" =~ ^[1-9][0-9]*$ ]] || die "CORES='$CORES' must be a positive integer"
for tp in $TPS; do [[ "$tp" =~ ^[1-9][0-9]*$ ]] || die "TPS='$TPS' must list positive integers"; done
[[ -f "$DATA" ]] || die "DATA='$DATA' does not exist (the corpus ships as data/tinyshakespeare.txt)"
[[ -x "$PYTHON" ]] || die "PYTHON='$PYTHON' is not executable"
command -v mpirun >/dev/null || die "mpirun not found (Open MPI is needed for tp > 1)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# build the Release binary unless one is given
source bench/build_trident.sh
bench_trident

# the layouts: name tp seq_parallel
layouts=()
for tp in $TPS; do
  layouts+=("tp$tp $tp 0")
  if ((tp > 1)); then layouts+=("tp$tp-sp $tp 1"); fi
done

read -r -a model_flags <<<"$MODEL"
echo "== bench_tp: $MODEL --batch $BATCH --steps $STEPS on $DATA (char), best of $REPS"
echo "   machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); threads per rank = $CORES / ranks, at least 1"

# run_layout NAME TP SP REP: one training run, its JSON log in $tmp/NAME.rREP.jsonl
run_layout() {
  local name=$1 tp=$2 sp=$3 rep=$4
  local threads=$((CORES / tp)) log=$tmp/$name.r$rep
  ((threads >= 1)) || threads=1
  local cmd=("$TRIDENT" train --data "$DATA" --tokenizer char "${model_flags[@]}" --batch "$BATCH"
             --steps "$STEPS" --eval-every 0 --log-every 1000000 --threads "$threads"
             --tp "$tp" --log "$log.jsonl")
  if ((sp)); then cmd+=(--sequence-parallel); fi
  if ((tp > 1)); then cmd=("${MPIRUN[@]}" -np "$tp" "${cmd[@]}"); fi
  if ! "${cmd[@]}" >"$log.out" 2>&1; then
    echo "bench_tp: command failed: ${cmd[*]}" >&2
    tail -n 30 "$log.out" >&2
    exit 1
  fi
  [[ -s "$log.jsonl" ]] || die "$name wrote no --log file: $(head -c 300 "$log.out")"
  local what="tp $tp"
  if ((sp)); then what+=", sequence parallel"; fi
  printf '   run %d/%d %-8s %s, %d thread(s) per rank: %s\n' "$rep" "$REPS" "$name" "$what" "$threads" \
    "$(grep '^done:' "$log.out" || echo '?')"
}

for ((r = 1; r <= REPS; r++)); do
  for l in "${layouts[@]}"; do
    read -r name tp sp <<<"$l"
    run_layout "$name" "$tp" "$sp" "$r"
  done
done

args=()
for l in "${layouts[@]}"; do args+=("$l"); done
"$PYTHON" - "$tmp" "$REPS" "$BATCH" "$CORES" "${args[@]}" <<'PY' || die "the report could not be made (see above)"
import json, sys

tmp, reps, batch, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
layouts = [(n, int(t), int(s)) for n, t, s in (a.split() for a in sys.argv[5:])]
MiB = 2.0 ** 20
CATS = ("params", "grads", "optimizer", "activations")
OPS = ("all-reduce", "all-gather", "reduce-scatter")


def fail(msg):
    print(f"bench_tp: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_log(path):
    rec = {"steps": []}
    for line in open(path):
        o = json.loads(line)
        ev = o.get("event")
        if ev is not None:
            rec[ev] = o
        elif "step_ms" in o:
            rec["steps"].append(o)
    needs = ["start", "memory", "rss"]
    if rec.get("start", {}).get("tp", 1) > 1:
        needs.append("tp_traffic")  # written for tp > 1 only
    for need in needs:
        if need not in rec:
            fail(f"{path}: no '{need}' record")
    timed = [s["step_ms"] for s in rec["steps"] if s["step"] >= 1]  # the trainer skips step 0
    if not timed:
        fail(f"{path}: no timed step")
    rec["step_ms"] = sum(timed) / len(timed)
    return rec


def round_up(x, m):
    return (x + m - 1) // m * m


def formula(cfg, tp, sp, B, K):
    """calls and bytes per collective in one step (K micro-batches of B)."""
    f = {op: [0, 0] for op in OPS}
    if tp == 1:
        return f
    L, C, T = cfg["layers"], cfg["embd"], cfg["seq"]
    btc = B * T * C * 4          # one B x T x C fp32 tensor
    big = (4 * L + 2) * K        # 4 per block, the embedding's and the head's
    f["all-reduce"] = [3 * K, 3 * K * B * T * 4]   # loss: max, sum of exp, target logit
    if sp:
        f["all-gather"] = [big, big * btc]
        f["reduce-scatter"] = [big, big * btc]
        n_ln = (2 * L + 1) * K   # ln_1, ln_2 per block, ln_f: 2C partial gradients each
        f["all-reduce"][0] += n_ln
        f["all-reduce"][1] += n_ln * 2 * C * 4
    else:
        f["all-reduce"][0] += big
        f["all-reduce"][1] += big * btc
    return f


def params_per_rank(cfg, tp):
    """this rank's parameter bytes: split share + replicated, units padded to 16 floats."""
    L, C, T, V = cfg["layers"], cfg["embd"], cfg["seq"], cfg["vocab"]
    assert (12 * C * C + 7 * C) % tp == 0
    unit0 = round_up(V, 16 * tp) // tp * C + T * C          # wte rows of this rank + wpe
    block = (12 * C * C + 7 * C) // tp + 6 * C                # qkv, c_fc, both c_proj split
    lnf = 2 * C
    return 4 * (round_up(unit0, 16) + L * round_up(block, 16) + round_up(lnf, 16))


def yn(ok):
    return "yes" if ok else "NO"


# best of REPS per layout (highest tokens/s = lowest mean step time)
best = {}
for name, tp, sp in layouts:
    runs = [read_log(f"{tmp}/{name}.r{r}.jsonl") for r in range(1, reps + 1)]
    best[name] = min(runs, key=lambda x: x["step_ms"])

first = best[layouts[0][0]]["start"]
cfg = {k: first[k] for k in ("layers", "heads", "embd", "seq", "vocab")}
n_params = first["params"]
print()
print(f"model: L={cfg['layers']} H={cfg['heads']} C={cfg['embd']} T={cfg['seq']} V={cfg['vocab']}; "
      f"{n_params} parameters as the trainer counts them ({n_params / 1e6:.2f}M, >= 10M: {yn(n_params >= 10_000_000)})")

rows = []
for name, tp, sp in layouts:
    b = best[name]
    st = b["start"]
    if any(st[k] != cfg[k] for k in cfg) or st["params"] != n_params:
        fail(f"{name}: the trainer saw another model ({st})")
    if st["dp"] != 1 or st["tp"] != tp:
        fail(f"{name}: expected dp 1 x tp {tp}, the trainer ran dp {st['dp']} x tp {st['tp']}")
    B, K = st["batch"] // (st["dp"] * st["grad_accum"]), st["grad_accum"]
    label = f"tp {tp}" + (" + seq-par" if sp else "") + (" (oversubscribed)" if tp > cores else "")
    tps = st["batch"] * cfg["seq"] / (b["step_ms"] * 1e-3)
    rows.append(dict(name=name, tp=tp, sp=sp, label=label, threads=st["threads"], step_ms=b["step_ms"],
                     tps=tps, plan=st["memory_plan"], mem=b["memory"]["ranks"],
                     rss=b["rss"]["ranks"], traffic=b.get("tp_traffic"),
                     formula=formula(cfg, tp, sp, B, K), B=B, K=K))

print(f"\n-- step time (mean of the timed steps, best of {reps} runs)")
print(f"  {'layout':<34} {'ranks':>5} {'thr/rank':>8} {'step ms':>10} {'tokens/s':>10} {'vs tp 1':>8}")
base = rows[0]["tps"] if rows[0]["tp"] == 1 else None
for x in rows:
    rel = f"{x['tps'] / base:.2f}x" if base else "-"
    print(f"  {x['label']:<34} {x['tp']:>5} {x['threads']:>8} {x['step_ms']:>10.1f} {x['tps']:>10.0f} {rel:>8}")

print("\n-- memory per rank, MiB: planned / measured peak after step 1 (accounting allocator);"
      "\n   rss = resident-set growth over the run's baseline (kernel high-water mark)")
print(f"  {'layout':<34} {'rank':>6}" + "".join(f" {c:>19}" for c in CATS) + f" {'total':>19} {'rss':>8}")
mem_ok = True
for x in rows:
    cells = []
    for w, (p, m) in enumerate(zip(x["plan"], x["mem"])):
        tot_p = sum(p[c] for c in p)
        tot_m = sum(m[c + "_peak"] for c in p)
        cell = [f"{p[c] / MiB:.2f}/{m[c + '_peak'] / MiB:.2f}" for c in CATS]
        cell.append(f"{tot_p / MiB:.2f}/{tot_m / MiB:.2f}")
        rss = x["rss"][w]["rss_peak"] - x["rss"][w]["rss_baseline"]
        cells.append((cell, rss))
        mem_ok &= all(p[c] == m[c + "_peak"] for c in CATS)
    same = all(c[0] == cells[0][0] for c in cells)
    for w, (cell, rss) in enumerate(cells[:1] if same else cells):
        who = (f"each {len(cells)}" if len(cells) > 1 else "0") if same else str(w)
        print(f"  {x['label']:<34} {who:>6}" + "".join(f" {c:>19}" for c in cell) + f" {rss / MiB:>8.1f}")
print(f"  params, grads, optimizer and activations measured = planned on every rank: {yn(mem_ok)}")
for x in rows:  # categories the plan leaves out (it plans 0 for them)
    extra = {c: max(m[c + "_peak"] - m[c] for m in x["mem"]) for c in x["mem"][0]
             if not c.endswith("_peak") and c not in CATS}
    extra = {c: v for c, v in extra.items() if v}
    if extra:
        print(f"  {x['label']:<34} outside the plan: " +
              ", ".join(f"{c} {v / MiB:.2f} MiB measured over planned" for c, v in extra.items()))
print("\n-- per-rank parameter bytes: split share + replicated tensors (computed here from the config)")
print(f"  {'layout':<34} {'measured':>12} {'formula':>12} {'equal':>6}")
params_ok = True
for x in rows:
    want = params_per_rank(cfg, x["tp"])
    got = [m["params_peak"] for m in x["mem"]]
    ok = all(g == want for g in got)
    params_ok &= ok
    shown = str(got[0]) if len(set(got)) == 1 else "/".join(map(str, got))
    print(f"  {x['label']:<34} {shown:>12} {want:>12} {yn(ok):>6}")

print("\n-- activations with sequence parallelism against without (planned and measured, per rank)")
act_ok = True
by = {(x["tp"], x["sp"]): x for x in rows}
for tp in sorted({x["tp"] for x in rows if x["tp"] > 1}):
    if (tp, 0) not in by or (tp, 1) not in by:
        continue
    a0, a1 = by[(tp, 0)]["mem"][0], by[(tp, 1)]["mem"][0]
    p0, p1 = by[(tp, 0)]["plan"][0]["activations"], by[(tp, 1)]["plan"][0]["activations"]
    m0, m1 = a0["activations_peak"], a1["activations_peak"]
    ok = p1 < p0 and m1 < m0
    act_ok &= ok
    print(f"  tp {tp}: without {p0 / MiB:.2f}/{m0 / MiB:.2f} MiB, with {p1 / MiB:.2f}/{m1 / MiB:.2f} MiB "
          f"({m1 / m0:.2f}x); lower: {yn(ok)}")

print("\n-- tp collectives per step (rank 0's last step, as the comm layer counted them) against the formula;"
      "\n   bytes = each call's whole tensor; 'ring' = what a ring algorithm sends per rank for them"
      "\n   (all-reduce 2(tp-1)/tp of it, all-gather and reduce-scatter (tp-1)/tp: derived, not measured)")
print(f"  {'layout':<34} {'collective':<15} {'calls':>6} {'bytes':>12} {'formula calls':>14} {'formula bytes':>14} {'equal':>6}")
traffic_ok = trainer_ok = True
for x in rows:
    if x["tp"] == 1:
        print(f"  {x['label']:<34} none (one rank)")
        continue
    t = x["traffic"]
    for op in OPS:
        fc, fb = x["formula"][op]
        mc, mb = t[f"{op}_calls"], t[f"{op}_bytes"]
        if not (fc or mc):
            continue
        ok = (mc, mb) == (fc, fb)
        traffic_ok &= ok
        print(f"  {x['label']:<34} {op:<15} {mc:>6} {mb:>12} {fc:>14} {fb:>14} {yn(ok):>6}")
    tot = sum(t[f"{op}_bytes"] for op in OPS)
    ring = sum(t[f"{op}_bytes"] * (2 if op == "all-reduce" else 1) * (x["tp"] - 1) / x["tp"] for op in OPS)
    print(f"  {'':<34} {'total':<15} {'':>6} {tot:>12} {'':>14} {'':>14}  = {tot / MiB:.2f} MiB; ring {ring / MiB:.2f} MiB")
    trainer_ok &= all(t[f"{op}_formula_bytes"] == x["formula"][op][1] for op in OPS)
print(f"  the trainer's own formula (td_tp_formula, in the same record) gives the same bytes: {yn(trainer_ok)}")

print("\n== summary")
print(f"  {'layout':<34} {'step ms':>9} {'tokens/s':>9} {'params/rank':>12} {'acts/rank':>10} {'tp MiB/step':>12} {'= formula':>9}")
for x in rows:
    tb = sum(x["traffic"][f"{op}_bytes"] for op in OPS) if x["traffic"] else 0
    eq = "-" if x["tp"] == 1 else yn(all((x["traffic"][f"{op}_calls"], x["traffic"][f"{op}_bytes"])
                                         == tuple(x["formula"][op]) for op in OPS))
    print(f"  {x['label']:<34} {x['step_ms']:>9.1f} {x['tps']:>9.0f} {x['mem'][0]['params_peak'] / MiB:>8.2f} MiB"
          f" {x['mem'][0]['activations_peak'] / MiB:>6.1f} MiB {tb / MiB:>12.2f} {eq:>9}")
print(f"  tp bytes = formula: {yn(traffic_ok)}; params per rank = split share + replicated: {yn(params_ok)}; "
      f"activations lower with sequence parallelism: {yn(act_ok)}; memory measured = planned: {yn(mem_ok)}")
PY
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
