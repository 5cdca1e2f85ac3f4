#!/usr/bin/env bash
# GEMM rates of the model's linear layers (L6 H6 C384 T256 batch 8: N = 2048
# rows, C = 384, 3C, 4C, Vp = 80) in fp32 (OpenBLAS, oneDNN) and bf16
# (oneDNN) against each engine's measured peak, and fp16 (converted to fp32,
# oneDNN), at 1 and 2 threads; see
# bench/bench_gemm.c for what is measured. Run it alone: other processes on
# the cores lower every figure. ~1 minute.
# Environment: BUILD_DIR (build), THREADS (the largest thread count, 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j2 --target bench_gemm >/dev/null
"$BUILD_DIR"/bench_gemm "${THREADS:-2}"
