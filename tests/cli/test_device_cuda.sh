#!/usr/bin/env bash
# --device cuda and --version on this build (docs/cuda.md), a real pass
# on a machine without a GPU (CI's):
#  - a build with the module: --version names the CUDA runtime and cuBLASLt
#    and says what CUDA said about the driver and the GPUs; train and sample
#    under --device cuda end with one error line: without a GPU naming what
#    cudaGetDeviceCount said, with one that the backend does not run
#    training yet (its rows lack ops);
#  - a build without it: --version says so, and --device cuda is refused
#    naming the devices this build has;
#  - a plain run never loads the module (nor cuBLASLt): ld.so's own trace
#    of a refused start lists neither, while --version's lists both.
# Usage: test_device_cuda.sh TRIDENT DATA_DIR HAVE_MODULE(0|1)
set -u
T=${1:?usage: test_device_cuda.sh TRIDENT DATA_DIR HAVE_MODULE}
DATA=${2:?}
HAVE=${3:?}
export OMPI_MCA_ess_singleton_isolated=1
source "$(dirname "$0")/expect_lib.sh"
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
mkdir -p "$tmp/ck"
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 2 --steps 1)

ver=$("$T" --version 2>&1) || fail "--version exits $?" "$ver"
if [ "$HAVE" = 1 ]; then
  for want in "CUDA runtime [0-9]" "cuBLASLt [0-9]" "CUDA driver" "GPU"; do
    grep -q "^  $want" <<<"$ver" && ok "--version: $(grep -m1 "^  $want" <<<"$ver")" || fail "--version lacks '$want'" "$ver"
  done
  if grep -q "^  GPU: none" <<<"$ver"; then
    expect train-no-gpu  "^trident: error: --device cuda: no usable GPU: cudaGetDeviceCount: .* ([0-9]*)$" "$T" train "${A[@]}" --device cuda
    expect sample-no-gpu "^trident: error: --device cuda: no usable GPU: cudaGetDeviceCount: " "$T" sample --ckpt "$tmp/ck" --device cuda
  else
    expect train-partial "^trident: error: --device cuda: the CUDA backend does not run training yet" "$T" train "${A[@]}" --device cuda
  fi
  trace=$(LD_DEBUG=files "$T" --version 2>&1 >/dev/null)
  grep -q "libtrident_cuda.so" <<<"$trace" && grep -q "libcublasLt" <<<"$trace" \
    && ok "--version loads the module and cuBLASLt" || fail "--version did not load the module" "$trace"
else
  grep -q "^  CUDA backend: this build has no CUDA backend" <<<"$ver" && ok "--version: no CUDA backend" || fail "--version" "$ver"
  expect train-no-module "--device cuda: this build has no CUDA backend (.*); valid here: cpu, guard" "$T" train "${A[@]}" --device cuda
  expect sample-no-module "--device cuda: this build has no CUDA backend" "$T" sample --ckpt "$tmp/ck" --device cuda
fi
# a refused start on the CPU (--zero 5 fails after the device is chosen)
trace=$(LD_DEBUG=files "$T" train "${A[@]}" --zero 5 2>&1)
grep -q "trident: error: --zero 5 is not a ZeRO stage" <<<"$trace" || fail "the refused start did not refuse" "$trace"
if grep -q "libtrident_cuda\|libcublas\|libcudart\|libcuda[.]" <<<"$trace"; then
  fail "a plain run loaded CUDA" "$(grep "libtrident_cuda\|libcublas\|libcuda" <<<"$trace")"
else
  ok "a plain run loads no CUDA library"
fi
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
