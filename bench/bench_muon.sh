#!/usr/bin/env bash
# Muon against AdamW on nanoGPT's character recipe (issue 42, acceptance 3):
# tinyshakespeare (char tokenizer, V 65), L4 H4 C128 T64, batch 12 (nanoGPT's
# config/train_shakespeare_char.py as its README runs it on a CPU:
# --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128
# --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0), 2000 steps, 100
# warm-up steps then cosine decay to --min-lr 1e-4 at step 2000 (nanoGPT's
# warmup_iters=100, min_lr=1e-4; trident's defaults), beta2 0.99, weight decay
# 0.1, clip 1, seed 1337. Runs, one after the other in one script run:
#
#   - AdamW for every parameter at the project's default --lr 1e-3 (nanoGPT's
#     learning_rate for this recipe);
#   - --optimizer muon with --muon-lr each of MUON_LRS (0.01 0.02 0.04): Muon
#     for the blocks' 2-D matrices, AdamW at --lr 1e-3 for the rest
#     (docs/recipe-muon.md); both on the same schedule curve.
#
# The validation loss is evaluated every EVAL_EVERY (250) steps and at the end
# on the same EVAL_ITERS (50) validation batches of 12 sequences in every run
# (the batches are a function of their index), so the runs are compared on
# the same tokens. Printed: one table of optimizer, lr(s), the final
# validation loss, ms/step (the median of the --log's step_ms over steps
# 1..N-1; step 0 carries the start-up) and memory: the accounting allocator's
# planned optimizer state and its peak over all categories, and the kernel's
# resident high-water mark (the --log's "memory" and "rss" records); then the
# validation curve of each run. Threads are fixed (THREADS, 1) and the same
# for every run. A benchmark never fails on speed or loss: it exits non-zero
# only when something cannot be built or run.
# Measured on the 2-core machine under other agents' load (load average 5
# to 10): 43 minutes for the four runs, AdamW 9, each Muon run 8.5 to 15
# (docs/bench-muon.md).
#
# Environment: STEPS (2000), MUON_LRS ("0.01 0.02 0.04"), EVAL_EVERY (250),
# EVAL_ITERS (50), THREADS (1), BUILD_DIR (build), TRIDENT (a trident binary to
# use instead of building BUILD_DIR), PYTHON (python3, for the table).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

STEPS=${STEPS:-2000}
MUON_LRS=${MUON_LRS:-"0.01 0.02 0.04"}
EVAL_EVERY=${EVAL_EVERY:-250}
EVAL_ITERS=${EVAL_ITERS:-50}
THREADS=${THREADS:-1}
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-python3}
DATA=data/tinyshakespeare.txt
ADAMW_LR=1e-3
RECIPE=(--data "$DATA" --layers 4 --heads 4 --embd 128 --seq 64 --batch 12 --steps "$STEPS"
        --warmup 100 --lr-schedule cosine --lr "$ADAMW_LR" --min-lr 1e-4 --beta2 0.99
        --weight-decay 0.1 --clip 1 --seed 1337 --eval-every "$EVAL_EVERY" --eval-iters "$EVAL_ITERS"
        --log-every 250 --threads "$THREADS")

die() { echo "bench_muon: error: $*" >&2; exit 1; }

[[ "$STEPS" =~ ^[1-9][0-9]*$ && "$STEPS" -ge 2 ]] || die "STEPS='$STEPS' must be an integer >= 2"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "THREADS='$THREADS' must be a positive integer"
read -r -a muon_lrs <<<"$MUON_LRS"
((${#muon_lrs[@]} > 0)) || die "MUON_LRS is empty"
[[ -f "$DATA" ]] || die "$DATA is missing (the corpus ships with the repository)"
export OMPI_MCA_ess_singleton_isolated=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a) build
source bench/build_trident.sh
bench_trident

# run NAME FLAGS...: one training run, its --log in $tmp/NAME.jsonl.
run() {
  local name=$1; shift
  local t0=$SECONDS
  if ! "$TRIDENT" train "${RECIPE[@]}" "$@" --log "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1; then
    echo "bench_muon: run $name failed: $TRIDENT train ${RECIPE[*]} $*" >&2
    tail -n 30 "$tmp/$name.out" >&2
    exit 1
  fi
  printf '   %-12s %4d s  (%s)\n' "$name" $((SECONDS - t0)) "$(grep '^done:' "$tmp/$name.out" | tail -n 1)"
}

echo "== bench_muon: AdamW vs Muon, $DATA, ${RECIPE[*]:2}"
echo "   machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $("$TRIDENT" --version 2>/dev/null | head -n 1)"
start=$SECONDS
names=(adamw)
run adamw --optimizer adamw
for lr in "${muon_lrs[@]}"; do
  names+=("muon_$lr")
  run "muon_$lr" --optimizer muon --muon-lr "$lr"
done
echo "   all runs: $((SECONDS - start)) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"

# (b) the table
"$PYTHON" - "$tmp" "$ADAMW_LR" "${names[@]}" <<'PY'
import json, statistics, sys
tmp, adamw_lr, names = sys.argv[1], sys.argv[2], sys.argv[3:]
MiB = 1 << 20
rows, curves = [], {}
for name in names:
    steps, evals, mem, rss, cfg = [], [], None, None, None
    with open(f"{tmp}/{name}.jsonl") as f:
        for line in f:
            o = json.loads(line)
            if o.get("event") == "start":
                cfg = o["run_config"]
            elif o.get("event") == "memory":
                mem = o["ranks"][0]
            elif o.get("event") == "rss":
                rss = o["ranks"][0]
            elif "val_loss" in o:
                evals.append((o["step"], o["val_loss"]))
            elif "step_ms" in o and o["step"] > 0:
                steps.append(o["step_ms"])
    if not (steps and evals and mem and rss and cfg):
        sys.exit(f"bench_muon: error: {name}.jsonl lacks steps, evals, memory or rss records")
    peak = sum(v for k, v in mem.items() if k.endswith("_peak") and isinstance(v, int))
    lrs = (f"lr {cfg['lr']:g}" if cfg["optimizer"] == "adamw"
           else f"muon-lr {cfg['muon-lr']:g}, lr {cfg['lr']:g}")
    rows.append((cfg["optimizer"], lrs, evals[-1][1], statistics.median(steps),
                 mem["optimizer"] / MiB, peak / MiB, rss["rss_peak"] / MiB))
    curves[name] = evals
print()
print("| optimizer | lr(s) | final val loss | ms/step (median) | optimizer state MiB | allocator peak MiB | resident high-water MiB |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.4f} | {r[3]:.1f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.1f} |")
print()
print("validation loss by step:")
print("| step | " + " | ".join(names) + " |")
print("| --- |" + " --- |" * len(names))
for i, (step, _) in enumerate(curves[names[0]]):
    print(f"| {step} | " + " | ".join(f"{curves[n][i][1]:.4f}" for n in names) + " |")
PY
