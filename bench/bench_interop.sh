#!/usr/bin/env bash
# trident export / import at GPT-2 124M's sizes (L12 H12 C768 T1024,
# vocabulary 50257; random weights: no GPT-2 weights can be fetched here):
# an llm.c file written by numpy (llm.c's layout, Vp 50304, zero padding
# rows) is imported, exported back to llm.c (must be the identical file)
# and to safetensors and the hf-gpt2 directory, whose models are imported
# again (bitwise-equal parameters, tests/ref's interop_tool). Prints each
# step's wall time and file size.
# Needs ~4 GB in TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/trident ] && [ -x build/tests/ref/interop_tool ] || scripts/build.sh >/dev/null
T=build/trident
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/gpt2.bin" <<'PYEOF'
import sys
import numpy as np
L, H, C, T, V, Vp = 12, 12, 768, 1024, 50257, 50304
hdr = np.zeros(256, dtype="<i4"); hdr[:8] = [20240326, 3, T, V, L, H, C, Vp]
n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
x = (np.random.default_rng(0).standard_normal(n, dtype=np.float32) * 0.02).astype("<f4")
x[V * C:Vp * C] = 0
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(x.tobytes())
PYEOF
timed() { local name=$1; shift; local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
  printf '%-46s %6.2f s\n' "$name" "$(echo "$t1 - $t0" | bc)"; }
mkdir "$tmp/hf"
timed "import llmc (498 MB)" "$T" import --format llmc --in "$tmp/gpt2.bin" --out "$tmp/ck"
timed "export llmc" "$T" export --ckpt "$tmp/ck" --format llmc --out "$tmp/back.bin"
cmp "$tmp/gpt2.bin" "$tmp/back.bin" && echo "llmc -> trident -> llmc: the identical $(stat -c %s "$tmp/back.bin")-byte file"
timed "export safetensors" "$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/model.safetensors"
timed "import safetensors ($(stat -c %s "$tmp/hf/model.safetensors") bytes)" \
  "$T" import --format safetensors --in "$tmp/hf/model.safetensors" --out "$tmp/ck2"
build/tests/ref/interop_tool cmp "$tmp/ck" "$tmp/ck2"
timed "export hf-gpt2 (directory, tokenizer files)" "$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out "$tmp/hfdir"
du -b "$tmp/hfdir"/* | sed "s|$tmp/hfdir/||" | awk '{printf "  %-26s %11d bytes\n", $2, $1}'
timed "import hf-gpt2's model.safetensors" "$T" import --format safetensors --in "$tmp/hfdir/model.safetensors" --out "$tmp/ck3"
build/tests/ref/interop_tool cmp "$tmp/ck" "$tmp/ck3"
timed "export hf-gpt2 --overwrite (replaces it)" "$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out "$tmp/hfdir" --overwrite
