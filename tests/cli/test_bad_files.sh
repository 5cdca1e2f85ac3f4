#!/usr/bin/env bash
# Bad corpus files (and --data / --tokenizer values that do not fit them) are
# refused before the first step: exit status 2, exactly one
# "trident: error:" line naming the file and what is wrong, no step line.
# Files are generated here; the last cases check that good files next to the
# refused ones still load (the checks refuse only what they should).
set -u
T=${1:?usage: test_bad_files.sh TRIDENT_BINARY}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import os, struct, sys, random
d = sys.argv[1]
random.seed(2)
def toks(n, hi=300): return [random.randrange(hi) for _ in range(n)]
def llmc(path, magic, version, t, count=None, extra=b""):
    hdr = [magic, version, len(t) if count is None else count] + [0] * 253
    open(path, "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(t)}H", *t) + extra)
def raw(path, t): open(path, "wb").write(struct.pack(f"<{len(t)}H", *t))
t = toks(4000)
llmc(f"{d}/magic_train.bin", 20240521, 1, t)        # llm.c-looking, wrong magic
llmc(f"{d}/v2_train.bin", 20240520, 2, t)           # right magic, version 2
open(f"{d}/trunc_train.bin", "wb").write(struct.pack("<3i", 20240520, 1, 4000))  # 12-byte header
llmc(f"{d}/trail_train.bin", 20240520, 1, t, extra=b"\x01")  # a trailing byte
llmc(f"{d}/short_train.bin", 20240520, 1, t, count=5000)     # header says more than the file holds
open(f"{d}/model.bin", "wb").write(struct.pack("<256i", *([20240326, 3, 1024, 50257, 12, 12, 768, 50304] + [0] * 248)))
os.makedirs(f"{d}/val"); raw(f"{d}/val/train.bin", t); raw(f"{d}/val/val.bin", toks(1000) + [700] + toks(10))
os.makedirs(f"{d}/tr"); raw(f"{d}/tr/train.bin", toks(100) + [900] + toks(3000)); raw(f"{d}/tr/val.bin", toks(1000))
open(f"{d}/odd.bin", "wb").write(b"\x01\x00" * 2000 + b"\x07")
# 2440 bytes of ASCII before each bad sequence: the offsets below count them
text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40
open(f"{d}/overlong.txt", "wb").write(text.encode() + b"\xc0\x80" + text.encode())
open(f"{d}/surrogate.txt", "wb").write(text.encode() + b"ab\xed\xa0\x80" + text.encode())
open(f"{d}/beyond.txt", "wb").write(text.encode() + b"\xf4\x90\x80\x80")
open(f"{d}/good.txt", "wb").write((text + "caf\u00e9 \u20ac \U0001d11e\n").encode() * 2)
# a raw file whose first tokens are near (but outside) the llm.c magic window
os.makedirs(f"{d}/near"); raw(f"{d}/near/train.bin", [54911, 308] + toks(4000))
PY
Q="--layers 1 --embd 32 --heads 2 --seq 16 --batch 4 --steps 2 --eval-every 0 --threads 1"
fails=0
# bad NAME REGEX ARGS...: exit 2, one error line matching REGEX, no step line
bad() {
  local name=$1 re=$2; shift 2
  local out rc
  # an error exit skips the leak check, so a sanitized build may take
  # allocation stacks with the fast unwinder (tests/sanitize/README.md)
  out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=1" \
        timeout 60 "$T" train "$@" $Q 2>&1 </dev/null); rc=$?
  local errs; errs=$(grep -c '^trident: error:' <<<"$out")
  if [ $rc -ne 2 ] || [ "$errs" -ne 1 ] || grep -q '^step ' <<<"$out" || ! grep -qE -e "$re" <<<"$out"; then
    echo "FAIL $name: exit $rc (want 2), $errs error lines (want 1), want /$re/:"; echo "$out" | tail -4
    fails=$((fails+1)); return
  fi
  echo "ok   $name: $(grep -m1 '^trident: error' <<<"$out")"
}
# good NAME ARGS...: trains (a step line, exit 0)
good() {
  local name=$1; shift
  local out rc
  out=$(timeout 120 "$T" train "$@" $Q 2>&1 </dev/null); rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^step ' <<<"$out"; then
    echo "FAIL $name: exit $rc:"; echo "$out" | tail -4; fails=$((fails+1)); return
  fi
  echo "ok   $name: $(grep -m1 '^data:' <<<"$out")"
}
bad wrong-magic  "--data .*/magic_train.bin: .*magic is 20240521.*magic 20240520 \(version 1\)" --data "$tmp/magic_train.bin"
bad version-2    "--data .*/v2_train.bin: llm.c token file version 2 is not supported; trident reads version 1" --data "$tmp/v2_train.bin"
bad trunc-header "--data .*/trunc_train.bin: .*header \(magic 20240520\) is truncated: the file has 12 bytes" --data "$tmp/trunc_train.bin"
bad trailing     "--data .*/trail_train.bin: .*says 4000 tokens \(8000 bytes\) but 8001 bytes follow it \(trailing bytes\)" --data "$tmp/trail_train.bin"
bad cut-short    "--data .*/short_train.bin: .*says 5000 tokens .* but 8000 bytes follow it \(the file is cut short\)" --data "$tmp/short_train.bin"
bad llmc-model   "--data .*/model.bin: magic 20240326 is an llm.c model" --data "$tmp/model.bin"
bad odd-raw      "--data .*/odd.bin: a raw uint16 token file must have an even size; this one has 4001 bytes" --data "$tmp/odd.bin"
bad id-in-val    "--data .*/val/train.bin: its validation file .*/val/val.bin: token id 700 at index 1000 does not fit --vocab 512; use --vocab 701" \
    --data "$tmp/val/train.bin" --vocab 512
bad id-in-train  "--data .*/tr/train.bin: token id 900 at index 100 does not fit --vocab 512; use --vocab 901" \
    --data "$tmp/tr/train.bin" --vocab 512
bad overlong     "--data .*/overlong.txt: the text is not valid UTF-8 at byte 2440: overlong encoding \(bytes C0 80\)" --data "$tmp/overlong.txt"
bad surrogate    "--data .*/surrogate.txt: the text is not valid UTF-8 at byte 2442: surrogate .*\(bytes ED A0\)" --data "$tmp/surrogate.txt"
bad beyond-max   "--data .*/beyond.txt: the text is not valid UTF-8 at byte 2440: code point beyond U\+10FFFF" --data "$tmp/beyond.txt"
bad synth-suffix "--data synthetic:10abc: '10abc' is not a whole number; use synthetic:V" --data synthetic:10abc
bad synth-empty  "--data synthetic:: no vocabulary size .*use synthetic:V" --data synthetic:
bad synth-neg    "--data synthetic:-3: '-3' is not a whole number" --data synthetic:-3
bad synth-big    "--data synthetic:99999999999: vocabulary 99999999999 is larger than 16777216" --data synthetic:99999999999
bad tok-bin      "--tokenizer byte applies to text files only; --data .*/near/train.bin is a token file" \
    --data "$tmp/near/train.bin" --tokenizer byte
bad tok-char-bin "--tokenizer char applies to text files only" --data "$tmp/near/train.bin" --tokenizer char
bad tok-synth    "--tokenizer byte applies to text files only; --data synthetic:50 gives token ids" \
    --data synthetic:50 --tokenizer byte
bad tok-unknown  "--tokenizer word is not known; use char, byte, gpt2, cl100k, o200k or a tokenizer.json file" --data "$tmp/good.txt" --tokenizer word
# what must still load: bytes the char tokenizer refuses are fine for byte;
# 1-4 byte characters; a raw file starting just below the llm.c window
good byte-any-bytes --data "$tmp/overlong.txt" --tokenizer byte
good char-utf8      --data "$tmp/good.txt"
good raw-near-magic --data "$tmp/near/train.bin"
[ $fails -eq 0 ] && echo "bad files: all passed"
exit $fails
