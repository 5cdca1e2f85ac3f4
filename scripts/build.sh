#!/usr/bin/env bash
# Configures and builds trident.
#   scripts/build.sh             Release into build/ (with the CUDA module where
#                                the toolkit is found: -DTRIDENT_CUDA=AUTO)
#   scripts/build.sh --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer
#                                (-DTD_SANITIZE=ON, RelWithDebInfo) into build-asan/,
#                                without the CUDA module (-DTRIDENT_CUDA=OFF)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "")         cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
              cmake --build build -j"$(nproc)" ;;
  --sanitize) # RelWithDebInfo (-O2 -g): Debug's -O0 makes the sanitized
              # kernels several times slower, and -O2 keeps usable stacks.
              cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTD_SANITIZE=ON -DTRIDENT_CUDA=OFF >/dev/null
              cmake --build build-asan -j"$(nproc)" ;;
  *)          echo "usage: scripts/build.sh [--sanitize]" >&2; exit 2 ;;
esac
