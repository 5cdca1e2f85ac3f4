#!/usr/bin/env bash
# Self-describing data (data.json) and the data fingerprint of checkpoints:
# - `trident tokenize` writes DIR/data.json; an independent python3 reads
#   the shards and recomputes every count (tokens per shard and split,
#   documents = the <|endoftext|> tokens) and every shard's XXH3-64;
# - train and sample with no --tokenizer take gpt2 from it (the sample is
#   text, not <id>s); a contradicting --tokenizer, a flipped byte in a shard,
#   a missing or truncated shard and an edited count in data.json are
#   refused naming the file (a train refused so leaves no --out it made,
#   also when the refusal comes after start-up, as --strict-data's);
#   shards without a data.json still load as token ids;
# - empty or non-UTF-8 text is refused and leaves no --out behind (a
#   pre-existing --out stays);
# - checkpoints record the data's size and XXH3 (recomputed by python for a
#   text file and for a shard set); a resume onto other text of the same
#   characters is a note naming both, an error with --strict-data; onto a
#   copy of the same data it is silent; a checkpoint without a record
#   (imported) is silent, and refused by --strict-data.
# Usage: test_data_manifest.sh TRIDENT DATA_DIR
set -u
T=$1 DATA=$2
PY=/usr/bin/python3
# tmp, ok, fail, and expect: one error line "trident: error: ..." matching $2, exit status 2
source "$(dirname "$0")/expect_lib.sh"
# A single-process run starts no Open MPI daemon (as in test_config.sh): it
# has no peers to reach, and the daemon's start was half of its time (CI budget).
export OMPI_MCA_ess_singleton_isolated=1
# the same for refusals that come after train's setup lines (stdout): stderr alone
expect_err() {
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out"; then ok "$name: $out"
  else fail "$name (exit $rc, want '$want')" "$out"; fi
}
M="--layers 1 --heads 2 --embd 16 --seq 16 --batch 2 --threads 1 --eval-every 0"
head -c 4000 "$DATA/tinyshakespeare.txt" >"$tmp/a.txt"
printf 'A second document, short.\n' >"$tmp/b.txt"

# ---- data.json against an independent reading of the shards -------------
out=$("$T" tokenize --tokenizer gpt2 "$tmp/a.txt" "$tmp/b.txt" --out "$tmp/D" --shard-tokens 300 --threads 1 2>&1) ||
  fail "tokenize" "$out"
if res=$($PY - "$tmp/D" <<'PY' 2>&1
import json, os, struct, sys, xxhash
d = sys.argv[1]
m = json.load(open(f"{d}/data.json"))
assert m["format"] == "trident-data" and m["version"] == 1, m
assert m["tokenizer"] == "gpt2" and m["vocab"] == 50257, m
bins = sorted(f for f in os.listdir(d) if f.endswith(".bin"))
assert sorted(s["name"] for s in m["shards"]) == bins, (bins, m["shards"])
tok = {"train": 0, "val": 0}; docs = {"train": 0, "val": 0}; nsh = {"train": 0, "val": 0}
for s in m["shards"]:
    b = open(f"{d}/{s['name']}", "rb").read()
    magic, ver, n = struct.unpack("<3i", b[:12])
    ids = struct.unpack(f"<{n}H", b[1024:])
    assert (magic, ver) == (20240520, 1) and len(b) == 1024 + 2 * n, s
    assert s["size"] == len(b) and s["tokens"] == n, s
    assert s["xxh3"] == xxhash.xxh3_64(b).hexdigest(), (s, xxhash.xxh3_64(b).hexdigest())
    split = "val" if "_val_" in s["name"] else "train"
    assert s["split"] == split, s
    tok[split] += n; docs[split] += ids.count(50256); nsh[split] += 1
for k in ("train", "val"):
    assert m[k] == {"tokens": tok[k], "documents": docs[k], "shards": nsh[k]}, (k, m[k], tok[k], docs[k])
assert m["tokens"] == tok["train"] + tok["val"] and m["documents"] == 2 == docs["train"] + docs["val"], m
assert nsh["train"] >= 2 and nsh["val"] >= 1, nsh
print(f"{len(bins)} shards, {m['tokens']} tokens, {m['documents']} documents; every count and XXH3 recomputed")
PY
); then ok "data.json: $res"; else fail "data.json" "$res"; fi

# ---- the tokenizer comes from data.json -------------------------------------
out=$("$T" train --data "$tmp/D" $M --steps 2 --out "$tmp/ck" --sample-tokens 30 2>&1)
if [ $? -eq 0 ] && grep -q "^data: .*gpt2 from $tmp/D/data.json" <<<"$out" &&
   grep -q '"kind": "gpt2", "vocab": 50257' "$tmp/ck/latest/manifest.json"; then
  ok "train with no --tokenizer: $(grep -m1 '^data:' <<<"$out")"
else fail "train with no --tokenizer" "$out"; fi
s=$("$T" sample --ckpt "$tmp/ck" --tokens 40 --seed 3 2>&1)
if [ $? -eq 0 ] && ! grep -qE '<[0-9]+>' <<<"$s" && [ "$(tr -cd 'a-zA-Z' <<<"$s" | wc -c)" -gt 40 ]; then
  ok "sample decodes gpt2 text: $(head -c 60 <<<"$s" | tr '\n' ' ')"
else fail "sample is not gpt2 text" "$s"; fi
expect contradicting "--tokenizer char contradicts $tmp/D/data.json, which says the shards were tokenized with gpt2" \
  "$T" train --data "$tmp/D" --tokenizer char $M --steps 1
out=$("$T" train --data "$tmp/D" --tokenizer gpt2 $M --steps 1 2>&1) && ok "an agreeing --tokenizer gpt2 trains" ||
  fail "--tokenizer gpt2 agreeing with data.json" "$out"

# ---- shards checked against it ----------------------------------------------
cp -r "$tmp/D" "$tmp/flip"
printf '\x01' | dd of="$tmp/flip/a_train_000001.bin" bs=1 seek=1500 conv=notrunc 2>/dev/null
expect flipped-byte "training shard $tmp/flip/a_train_000001.bin: its XXH3 is [0-9a-f]*, $tmp/flip/data.json records" \
  "$T" train --data "$tmp/flip" $M --steps 1 --out "$tmp/flip-out"
[ ! -e "$tmp/flip-out" ] && ok "the refused run left no --out behind" || fail "--out of the refused run" "$(ls -la "$tmp/flip-out")"
cp -r "$tmp/D" "$tmp/gone"; rm "$tmp/gone/a_val_000000.bin"
expect missing-shard "shard $tmp/gone/a_val_000000.bin, listed in $tmp/gone/data.json, is missing" \
  "$T" train --data "$tmp/gone" $M --steps 1
cp -r "$tmp/D" "$tmp/short"; truncate -s -2 "$tmp/short/a_train_000000.bin"
expect truncated-shard "a_train_000000.bin has [0-9]* bytes, $tmp/short/data.json records" \
  "$T" train --data "$tmp/short" $M --steps 1
cp -r "$tmp/D" "$tmp/edit"
$PY -c 'import sys; p = sys.argv[1]; t = open(p).read(); open(p, "w").write(t.replace("\"documents\": 2", "\"documents\": 3", 1))' \
  "$tmp/edit/data.json"
expect edited-count "its manifest $tmp/edit/data.json: field documents: 3, but the splits hold 2" \
  "$T" train --data "$tmp/edit" $M --steps 1
cp -r "$tmp/D" "$tmp/old"; rm "$tmp/old/data.json"
out=$("$T" train --data "$tmp/old" $M --steps 1 2>&1)
if [ $? -eq 0 ] && grep -q "^data: $tmp/old: 4 train + 1 val shards (token ids); [0-9]* train" <<<"$out"; then
  ok "shards without data.json load as before (token ids)"
else fail "shards without data.json" "$out"; fi

# ---- refused tokenize runs leave no --out -------------------------------------
: >"$tmp/empty.txt"
expect empty-text "tokenize: the input is empty" "$T" tokenize --tokenizer gpt2 "$tmp/empty.txt" --out "$tmp/E"
[ ! -e "$tmp/E" ] && ok "no $tmp/E left" || fail "empty text left $tmp/E" "$(ls -la "$tmp/E")"
printf 'ab\xffcd' >"$tmp/bad.txt"
expect not-utf8 "input $tmp/bad.txt: the text is not valid UTF-8 at byte 2" \
  "$T" tokenize --tokenizer gpt2 "$tmp/a.txt" "$tmp/bad.txt" --out "$tmp/U"
[ ! -e "$tmp/U" ] && ok "no $tmp/U left" || fail "bad text left $tmp/U" "$(ls -la "$tmp/U")"
mkdir "$tmp/keep"
expect empty-into-existing "every input is empty" \
  "$T" tokenize --tokenizer gpt2 "$tmp/empty.txt" "$tmp/empty.txt" --out "$tmp/keep"
[ -d "$tmp/keep" ] && [ -z "$(ls -A "$tmp/keep")" ] && ok "the pre-existing --out stays, empty" ||
  fail "pre-existing --out" "$(ls -la "$tmp/keep")"

# ---- the data fingerprint in checkpoints --------------------------------------
head -c 20000 "$DATA/tinyshakespeare.txt" >"$tmp/t1.txt"
tac "$tmp/t1.txt" >"$tmp/t2.txt"          # the same characters, other text
cp "$tmp/t1.txt" "$tmp/t1copy.txt"
"$T" train --data "$tmp/t1.txt" $M --steps 2 --out "$tmp/c1" >/dev/null 2>&1 || fail "train on t1"
if res=$($PY - "$tmp/c1/latest/manifest.json" "$tmp/t1.txt" "$tmp/ck/latest/manifest.json" "$tmp/D" <<'PY' 2>&1
import json, os, sys, xxhash
def rec(p): return json.load(open(p))["data"]
r, text = rec(sys.argv[1]), open(sys.argv[2], "rb").read()
assert r == {"path": sys.argv[2], "bytes": len(text), "xxh3": xxhash.xxh3_64(text).hexdigest()}, r
d = sys.argv[4]
names = sorted(f for f in os.listdir(d) if "_train_" in f) + sorted(f for f in os.listdir(d) if "_val_" in f)
blob = b"".join(open(f"{d}/{f}", "rb").read() for f in names)
s = rec(sys.argv[3])
assert s == {"path": d, "bytes": len(blob), "xxh3": xxhash.xxh3_64(blob).hexdigest()}, s
print(f"text {r['xxh3']} ({r['bytes']} bytes), shard set {s['xxh3']} ({s['bytes']} bytes)")
PY
); then ok "checkpoints record the data: $res"; else fail "recorded fingerprint" "$res"; fi
out=$("$T" train --data "$tmp/t2.txt" $M --steps 3 --out "$tmp/c2" --resume "$tmp/c1/step-00000002" 2>&1)
n=$(grep -c "^resume: note: .* was trained on $tmp/t1.txt (xxh3 [0-9a-f]*, 20000 bytes); --data $tmp/t2.txt is other data (xxh3 [0-9a-f]*, 20000 bytes)" <<<"$out")
if [ $? -eq 0 ] && [ "$n" -eq 1 ]; then ok "resume onto other text of the same characters: $(grep '^resume: note' <<<"$out")"
else fail "resume onto other data: no note" "$out"; fi
expect_err strict-data "--strict-data: --resume $tmp/c1/step-00000002 was trained on $tmp/t1.txt (xxh3 .*), but --data $tmp/t2.txt is other data" \
  "$T" train --data "$tmp/t2.txt" $M --steps 3 --out "$tmp/c3" --resume "$tmp/c1/step-00000002" --strict-data
[ ! -e "$tmp/c3" ] && ok "the refused resume left no --out behind" || fail "--out of the refused resume" "$(ls -la "$tmp/c3")"
out=$("$T" train --data "$tmp/t1copy.txt" $M --steps 3 --out "$tmp/c4" --resume "$tmp/c1/step-00000002" --strict-data 2>&1)
if [ $? -eq 0 ] && grep -q "^resume: $tmp/c1/step-00000002 (step 2" <<<"$out" && ! grep -q "note" <<<"$out"; then
  ok "resume onto a copy of the same data: no note, --strict-data passes"
else fail "resume onto the same data" "$out"; fi
cp -r "$tmp/D" "$tmp/D2"
out=$("$T" train --data "$tmp/D2" $M --steps 3 --out "$tmp/c5" --resume "$tmp/ck/step-00000002" --strict-data 2>&1)
[ $? -eq 0 ] && ! grep -q "note" <<<"$out" && ok "a moved copy of the shard set is the same data" ||
  fail "shard set copy" "$out"
# an imported checkpoint records no data: silent, refused by --strict-data
"$T" export --ckpt "$tmp/c1" --format llmc --out "$tmp/m.llmc" >/dev/null 2>&1 &&
"$T" import --format llmc --in "$tmp/m.llmc" --out "$tmp/imp" --tokenizer char --data "$tmp/t1.txt" >/dev/null 2>&1 ||
  fail "export / import"
out=$("$T" train --data "$tmp/t2.txt" $M --steps 1 --out "$tmp/c6" --resume "$tmp/imp" 2>&1)
[ $? -eq 0 ] && ! grep -q "note" <<<"$out" && ok "a checkpoint without a data record resumes silently" ||
  fail "resume of an imported checkpoint" "$out"
expect_err strict-unknown "--strict-data: --resume $tmp/imp/step-00000000 records no training data" \
  "$T" train --data "$tmp/t2.txt" $M --steps 1 --out "$tmp/c7" --resume "$tmp/imp" --strict-data

[ $fails -eq 0 ] && echo "data manifest: all passed"
exit $fails
