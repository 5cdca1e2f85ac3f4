#!/usr/bin/env bash
# trident export / import: llm.c's format round trip (bitwise equal
# parameters), its layout checked against the safetensors export by an
# independent reader (numpy), the safetensors round trip, sampling from an
# imported checkpoint, and bad input: one error line naming the file and
# what is wrong, non-zero exit, nothing written to --out.
# Usage: test_interop.sh TRIDENT INTEROP_TOOL DATA_DIR
set -u
T=${1:?usage: test_interop.sh TRIDENT INTEROP_TOOL DATA_DIR}
TOOL=${2:?}
DATA=${3:?}
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
"$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 4 \
  --eval-every 0 --threads 1 --out "$tmp/ck" > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
mkdir "$tmp/hf"
"$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/model.safetensors" >/dev/null || fail "export safetensors"
"$T" export --ckpt "$tmp/ck" --format llmc --out "$tmp/model.bin" >/dev/null || fail "export llmc"

# --- llm.c: the layout, read independently, against the HF tensors ----------
$PY - "$tmp/model.bin" "$tmp/hf/model.safetensors" <<'PYEOF' || fail "llmc layout"
import json, struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
h = np.frombuffer(b[:1024], dtype="<i4")
magic, version, maxT, V, L, H, C, Vp = (int(x) for x in h[:8])
assert (magic, version) == (20240326, 3) and not h[8:].any(), h[:8]
assert (maxT, V, L, H, C, Vp) == (16, 58, 2, 2, 32, 128), (maxT, V, L, H, C, Vp)
s = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", s[:8])[0]
hdr = json.loads(s[8:8 + n])
def hf(name):
    b0, e0 = hdr[name]["data_offsets"]
    return np.frombuffer(s[8 + n + b0:8 + n + e0], dtype="<f4").reshape(hdr[name]["shape"])
f = np.frombuffer(b[1024:], dtype="<f4")
at = 0
def take(count, shape):
    global at
    x = f[at:at + count].reshape(shape); at += count; return x
wte = take(Vp * C, (Vp, C))
assert np.array_equal(wte[:V], hf("wte.weight")) and not wte[V:].any(), "wte rows / zero padding"
assert np.array_equal(take(maxT * C, (maxT, C)), hf("wpe.weight"))
kinds = [("ln_1.weight", [C], 0), ("ln_1.bias", [C], 0), ("attn.c_attn.weight", [3 * C, C], 1),
         ("attn.c_attn.bias", [3 * C], 0), ("attn.c_proj.weight", [C, C], 1), ("attn.c_proj.bias", [C], 0),
         ("ln_2.weight", [C], 0), ("ln_2.bias", [C], 0), ("mlp.c_fc.weight", [4 * C, C], 1),
         ("mlp.c_fc.bias", [4 * C], 0), ("mlp.c_proj.weight", [C, 4 * C], 1), ("mlp.c_proj.bias", [C], 0)]
for k, shape, conv in kinds:  # grouped by kind across layers; llm.c's weights are [out, in]
    for l in range(L):
        x = take(int(np.prod(shape)), shape)
        ref = hf("h.%d.%s" % (l, k))
        assert np.array_equal(x, ref.T if conv else ref), "h.%d.%s" % (l, k)
assert np.array_equal(take(C, [C]), hf("ln_f.weight")) and np.array_equal(take(C, [C]), hf("ln_f.bias"))
assert at == f.size
print("ok   llmc layout: header, grouping by kind, [out,in] weights and zero padding rows match the HF tensors")
PYEOF

# --- round trips: bitwise-equal parameters --------------------------------------
"$T" import --format llmc --in "$tmp/model.bin" --out "$tmp/from_llmc" --tokenizer char --data "$tmp/small.txt" >/dev/null \
  || fail "import llmc"
"$TOOL" cmp "$tmp/ck" "$tmp/from_llmc" && echo "ok   llmc round trip" || fail "llmc round trip"
"$T" import --format safetensors --in "$tmp/hf/model.safetensors" --out "$tmp/from_hf" >/dev/null || fail "import safetensors"
"$TOOL" cmp "$tmp/ck" "$tmp/from_hf" && echo "ok   safetensors round trip" || fail "safetensors round trip"
a=$("$T" sample --ckpt "$tmp/ck" --tokens 30 --seed 3 2>&1); b=$("$T" sample --ckpt "$tmp/from_hf" --tokens 30 --seed 3 2>&1)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   sample: the imported checkpoint samples the same text" || fail "sample: '$a' vs '$b'"

# --- a GPT2LMHeadModel-style file: "transformer." names, the tied head stored,
# the attn.bias mask buffers, F16 data: imported as its values, exactly ------
mkdir "$tmp/lm" "$tmp/lm2"; cp "$tmp/hf/config.json" "$tmp/lm/"
cat > "$tmp/f16.py" <<'PYEOF'
import json, struct, sys
import numpy as np
def read(path):
    s = open(path, "rb").read(); n = struct.unpack("<Q", s[:8])[0]; hdr = json.loads(s[8:8 + n])
    return {k: np.frombuffer(s[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                             dtype="<f4" if v["dtype"] == "F32" else "<f2").reshape(v["shape"])
            for k, v in hdr.items() if k != "__metadata__"}
src = read(sys.argv[2])
if sys.argv[1] in ("make", "untied"):
    out = {"transformer." + k: v.astype("<f2") for k, v in src.items()}
    out["lm_head.weight"] = out["transformer.wte.weight"] * (2 if sys.argv[1] == "untied" else 1)
    for l in range(2):
        out["transformer.h.%d.attn.bias" % l] = np.tril(np.ones((1, 1, 16, 16), dtype="<f2"))
    hdr, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in out.items():
        b = v.tobytes(); hdr[k] = {"dtype": "F16", "shape": list(v.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b); at += len(b)
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    open(sys.argv[3], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
else:
    back = read(sys.argv[3])
    assert back.keys() == src.keys()
    for k in src:
        assert np.array_equal(back[k], src[k].astype("<f2").astype("<f4")), k
    print("ok   GPT2LMHeadModel-style F16 file imported exactly (re-exported values = the file's)")
PYEOF
$PY "$tmp/f16.py" make "$tmp/hf/model.safetensors" "$tmp/lm/model.safetensors" || fail "GPT2LMHeadModel-style file"
"$T" import --format safetensors --in "$tmp/lm/model.safetensors" --out "$tmp/from_lm" >/dev/null || fail "import F16 file"
"$T" export --ckpt "$tmp/from_lm" --format safetensors --out "$tmp/lm2/model.safetensors" >/dev/null || fail "re-export"
$PY "$tmp/f16.py" check "$tmp/hf/model.safetensors" "$tmp/lm2/model.safetensors" || fail "F16 import values"

# --- bad input ----------------------------------------------------------------------
# bad NAME REGEX ARGS...: import fails cleanly, says REGEX, and --out $tmp/bad stays absent
bad() {
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 60 "$T" import "$@" --out "$tmp/bad" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit code $rc (want a clean non-zero exit)"; echo "$out" | tail -3; return; fi
  [ "$(echo "$out" | wc -l)" -eq 1 ] && grep -qE -e "^trident: error: .*$re" <<<"$out" \
    || { fail "$name: output is not one error line matching /$re/:"; echo "$out" | tail -3; return; }
  [ -e "$tmp/bad" ] && { fail "$name: --out was written"; rm -rf "$tmp/bad"; return; }
  echo "ok   $name: $out"
}
L=(--format llmc --tokenizer ids)
head -c 5000 "$tmp/model.bin" > "$tmp/trunc.bin"
bad "llmc truncated" "trunc.bin: size: .* \(truncated\)" "${L[@]}" --in "$tmp/trunc.bin"
head -c 500 "$tmp/model.bin" > "$tmp/short.bin"
bad "llmc shorter than its header" "short.bin: header: .*shorter than" "${L[@]}" --in "$tmp/short.bin"
patch() { # patch IN OUT OFFSET INT32
  $PY -c 'import sys,struct; b=bytearray(open(sys.argv[1],"rb").read()); b[int(sys.argv[3]):int(sys.argv[3])+4]=struct.pack("<i",int(sys.argv[4])); open(sys.argv[2],"wb").write(b)' "$@"; }
patch "$tmp/model.bin" "$tmp/magic.bin" 0 20240327
bad "llmc wrong magic" "magic.bin: header\[0\] \(magic\): 20240327" "${L[@]}" --in "$tmp/magic.bin"
patch "$tmp/model.bin" "$tmp/bf16.bin" 4 5
bad "llmc bf16 version" "bf16.bin: header\[1\] \(version\): 5" "${L[@]}" --in "$tmp/bf16.bin"
patch "$tmp/model.bin" "$tmp/lie.bin" 16 3
bad "llmc header lies about layers" "lie.bin: size: .*need.*truncated" "${L[@]}" --in "$tmp/lie.bin"
patch "$tmp/model.bin" "$tmp/heads.bin" 20 5
bad "llmc heads not dividing channels" "heads.bin: field header\[6\] \(channels\): 32 is not divisible" "${L[@]}" --in "$tmp/heads.bin"
cp "$tmp/model.bin" "$tmp/nan.bin"; printf '\x00\x00\xc0\x7f' | dd of="$tmp/nan.bin" bs=1 seek=1100 conv=notrunc 2>/dev/null
bad "llmc NaN weight" "nan.bin: tensor wte.weight: element 19 is not finite" "${L[@]}" --in "$tmp/nan.bin"
bad "llmc with --config" "--config applies to --format safetensors" "${L[@]}" --in "$tmp/model.bin" --config "$tmp/hf/config.json"
bad "llmc char without --data" "--tokenizer char needs --data" --format llmc --tokenizer char --in "$tmp/model.bin"

# safetensors: rewrite the header (python), keep or cut the data
st() { # st OUT_DIR PYTHON_EXPR_ON_hdr [CUT_BYTES]
  mkdir -p "$1"; cp "$tmp/hf/config.json" "$1/"
  $PY - "$tmp/hf/model.safetensors" "$1/model.safetensors" "$2" "${3:-0}" <<'PYEOF'
import json, struct, sys
s = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", s[:8])[0]
hdr = json.loads(s[8:8 + n]); data = s[8 + n:]
exec(sys.argv[3])
h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
data = data[:len(data) - int(sys.argv[4])]
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data)
PYEOF
}
S=(--format safetensors)
st "$tmp/s1" 'hdr["h.0.ln_1.bias"]["data_offsets"][1] += 4'
bad "safetensors lying offsets" "s1/model.safetensors: tensor \"h.0.ln_1.bias\": field data_offsets" "${S[@]}" --in "$tmp/s1/model.safetensors"
st "$tmp/s2" 'del hdr["ln_f.bias"]' 128
bad "safetensors missing tensor" "s2/model.safetensors: tensor \"ln_f.bias\" is missing" "${S[@]}" --in "$tmp/s2/model.safetensors"
st "$tmp/s3" 'hdr["h.1.mlp.c_fc.weight"]["shape"] = [128, 32]'
bad "safetensors shape not transposed" "s3/model.safetensors: tensor \"h.1.mlp.c_fc.weight\": shape \[128, 32\].*need \[32, 128\]" "${S[@]}" --in "$tmp/s3/model.safetensors"
st "$tmp/s4" 'hdr["h.0.mlp.c_gate.weight"] = hdr.pop("h.0.mlp.c_fc.weight")'
bad "safetensors unknown tensor" "tensor \"h.0.mlp.c_gate.weight\" is not a GPT-2 tensor" "${S[@]}" --in "$tmp/s4/model.safetensors"
st "$tmp/s5" 'hdr["h.2.ln_1.weight"] = hdr.pop("h.1.ln_1.weight")'
bad "safetensors layer past n_layer" "tensor \"h.2.ln_1.weight\": layer 2, but .*config.json says n_layer 2" "${S[@]}" --in "$tmp/s5/model.safetensors"
st "$tmp/s6" 'pass' 1
bad "safetensors truncated" "s6/model.safetensors: tensor .* past the" "${S[@]}" --in "$tmp/s6/model.safetensors"
st "$tmp/s7" 'hdr["wte.weight"]["dtype"] = "F64"'
bad "safetensors unknown dtype" "tensor \"wte.weight\": field dtype: \"F64\"" "${S[@]}" --in "$tmp/s7/model.safetensors"
st "$tmp/s8" 'pass'; sed -i 's/"n_positions": 16/"n_positions": 32/' "$tmp/s8/config.json"
bad "safetensors config disagrees" "tensor \"wpe.weight\": shape \[16, 32\], but .*need \[32, 32\]" "${S[@]}" --in "$tmp/s8/model.safetensors"
st "$tmp/s9" 'pass'; sed -i 's/"gelu_new"/"relu"/' "$tmp/s9/config.json"
bad "safetensors other activation" "s9/config.json: field activation_function" "${S[@]}" --in "$tmp/s9/model.safetensors"
st "$tmp/s10" 'pass'; rm "$tmp/s10/config.json"
bad "safetensors without config.json" "s10/config.json: cannot read it" "${S[@]}" --in "$tmp/s10/model.safetensors"
printf '\xe8\x03\x00\x00\x00\x00\x00\x00{}' > "$tmp/huge.safetensors"
bad "safetensors length prefix past the file" "huge.safetensors: header length 1000 \\(\\+ the 8-byte prefix\\) exceeds the file's size 10" "${S[@]}" --in "$tmp/huge.safetensors" --config "$tmp/hf/config.json"
mkdir "$tmp/untied"; cp "$tmp/hf/config.json" "$tmp/untied/"
$PY "$tmp/f16.py" untied "$tmp/hf/model.safetensors" "$tmp/untied/model.safetensors"
bad "safetensors untied head" "tensor \"lm_head.weight\" differs from \"wte.weight\"" "${S[@]}" --in "$tmp/untied/model.safetensors"
# export: a missing directory, a model named config.json
out=$("$T" export --ckpt "$tmp/ck" --format llmc --out "$tmp/nodir/m.bin" 2>&1) && fail "export into a missing directory" \
  || { grep -q "^trident: error: export: --out .*nodir/m.bin: cannot create it: .*nothing was written" <<<"$out" \
       && [ ! -e "$tmp/nodir" ] && echo "ok   export into a missing directory: $out" || fail "export missing dir: $out"; }
out=$("$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/config.json" 2>&1) && fail "export over config.json" \
  || { grep -q "name the model otherwise" <<<"$out" && echo "ok   export named config.json: $out" || fail "export config.json: $out"; }
mkdir -p "$tmp/full"; touch "$tmp/full/keep"
out=$("$T" import "${S[@]}" --in "$tmp/hf/model.safetensors" --out "$tmp/full" 2>&1) && fail "non-empty --out accepted" \
  || { grep -q "exists and is not empty" <<<"$out" && [ "$(ls "$tmp/full")" = keep ] && echo "ok   non-empty --out refused: $out" || fail "non-empty --out: $out"; }

[ $fails -eq 0 ] && echo "test_interop: all passed" || echo "test_interop: $fails failed"
exit $((fails > 0))
