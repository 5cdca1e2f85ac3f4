#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a short 3D
# parallel training run (dp 2 x tp 2 x pp 2 on 8 ranks, 1F1B over 4
# micro-batches) on the default English corpus and prints the layout, loss,
# throughput, memory per rank, the tensor-parallel traffic, the pipeline
# bubble and a sample. Extra arguments go to `trident train` (e.g. --steps
# 2000 or --schedule zb-h1); TD_RANKS (8), TD_TP (2) and TD_PP (2) set the
# ranks, the tp and the pp size (dp = ranks / (tp x pp)). It passes --overwrite (a second run
# replaces the first one's checkpoints in build/run) unless the arguments
# --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
mkdir -p build/data build/run
[ -s build/data/fortunes.txt ] || scripts/corpus.sh build/data/fortunes.txt
ranks=${TD_RANKS:-8}
tp=${TD_TP:-2}
pp=${TD_PP:-2}
# the main job's flags as a config file (docs/config.md), so that the
# arguments given here override them: a flag given twice is an error
cat > build/main-job.json <<JSON
{"data": "build/data/fortunes.txt", "dp": $((ranks / (tp * pp))), "tp": $tp, "pp": $pp,
 "micro-batches": 4, "layers": 4, "heads": 4, "embd": 128, "seq": 64, "batch": 16, "steps": 400, "warmup": 40,
 "eval-every": 100, "eval-iters": 20, "log-every": 20, "threads": 1,
 "out": "build/run", "log": "build/run/log.jsonl", "sample-tokens": 300}
JSON
# --overwrite unless the arguments resume build/run or say it themselves
over=--overwrite
for a in "$@"; do case $a in --resume|--resume=*|--overwrite) over= ;; esac; done
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
  build/trident train --config build/main-job.json $over "$@"
