#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a short
# parallel training run (data x tensor parallelism: dp 2 x tp 2 on 4 ranks;
# pipeline stages arrive with the next stage of work) on the default English
# corpus and prints loss, throughput, memory per rank, the tensor-parallel
# traffic and a sample. Extra arguments go to `trident train` (e.g. --steps
# 2000); TD_RANKS (4) and TD_TP (2) set the ranks and the tp size.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
mkdir -p build/data build/run
[ -s build/data/fortunes.txt ] || scripts/corpus.sh build/data/fortunes.txt
ranks=${TD_RANKS:-4}
tp=${TD_TP:-2}
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" \
  build/trident train --data build/data/fortunes.txt --dp $((ranks / tp)) --tp "$tp" \
  --layers 4 --heads 4 --embd 128 --seq 64 --batch 12 --steps 400 --warmup 40 \
  --eval-every 100 --eval-iters 20 --log-every 20 --threads 1 \
  --out build/run --log build/run/log.jsonl --sample-tokens 300 "$@"
