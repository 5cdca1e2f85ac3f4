#!/usr/bin/env bash
# Hierarchical against flat all-reduce on 4 ranks as 2 "nodes" of 2
# (TRIDENT_RANKS_PER_NODE=2): bus bandwidth per payload size. On one machine
# the cross-"node" step goes through MPI's shared-memory transport too, so
# this measures the algorithm's overheads, not a network's savings.
#   bench/bench_hier.sh [extra `trident bench comm` options, e.g. --max 64M]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] || scripts/build.sh >/dev/null
TRIDENT_RANKS_PER_NODE=2 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -x TRIDENT_RANKS_PER_NODE -np 4 build/trident bench comm --hier --min 4K --max 64M "$@"
