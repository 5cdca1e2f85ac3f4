#!/usr/bin/env bash
# Attention alone, forward + backward: the blocked kernel (attention.h) vs
# the materialized one, fp32 and bf16, C256 NH4 (hs 64) B1 at T = 1024,
# 4096, 16384 (the materialized kernel refused where att + datt > 2 GiB);
# see bench/bench_attention.c. Run it alone: other processes on the cores
# lower every figure. A few minutes (T 16384 blocked is the long part).
# Environment: BUILD_DIR (build), THREADS (2); arguments: T values.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j2 --target bench_attention >/dev/null
"$BUILD_DIR"/bench_attention "${THREADS:-2}" "$@"
